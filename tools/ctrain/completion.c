/*
 * completion.c - the completion and man commands: shell completion scripts for bash and zsh
 * built from the commands' options and the experiment schema (keys as `key=` words, valid
 * values after `key=`), and the ctrain(1) man page built from the usage texts of --help, so
 * neither can drift from the tool. CMake runs both at build time and installs what they print.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Each command's options, as parsed by args.c and report.c; those marked with '=' take a value. */
static const struct {
    const char *name;
    const char *options;
} k_commands[] = {
    {"fit", "--restart --profile --help"},
    {"eval", "--checkpoint= --no-ema --json --follow --timeout= --split= --help"},
    {"predict",
     "--input= --output= --logits --checkpoint= --no-ema --prompt= --tokens= "
     "--temperature= --top-k= --seed= --help --prompts-file= --top-p= --stop= --no-cache"},
    {"config", "--reference --help"},
    {"inspect", "--help"},
    {"diff", "--json --tolerance= --all --help"},
    {"report", "--output= --svg= --log --help"},
    {"verify-resume", "--steps= --cuts= --dir= --keep --ranks= --launcher= --help"},
    {"export",
     "--format= --output= --dtype= --opset= --with-preprocessing --checkpoint= --no-ema --help"},
    {"replay", "--json --help"},
    {"completion", ""},
    {"man", ""},
};
enum { N_COMMANDS = (int)(sizeof k_commands / sizeof k_commands[0]) };

/* The words of a list without their '=' marks. */
static void put_words(FILE *f, const char *list, bool with_value) {
    bool first = true;
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, " ");
        bool takes = n > 0 && p[n - 1] == '=';
        if (n > 0 && (!with_value || takes)) {
            (void)fprintf(f, "%s%.*s", first ? "" : " ", (int)(n - (takes ? 1 : 0)), p);
            first = false;
        }
        p += n;
        while (*p == ' ')
            p++;
    }
}

/* The schema's settable keys as `key=` words. */
static void put_keys(FILE *f) {
    int64_t n = 0;
    const ct_key_def *keys = ct_experiment_schema(&n);
    for (int64_t i = 0; i < n; i++)
        if (keys[i].type != CT_KEY_SECTION) (void)fprintf(f, "%s%s=", i ? " " : "", keys[i].path);
}

/* A shell `case` arm per key that has a fixed set of values: `key) vals='a b c' ;;`. */
static void put_values(FILE *f, const char *indent) {
    int64_t n = 0;
    const ct_key_def *keys = ct_experiment_schema(&n);
    for (int64_t i = 0; i < n; i++) {
        const ct_key_def *k = &keys[i];
        const char *choices = k->type == CT_KEY_BOOL ? "true|false" : k->choices;
        if (!choices || !*choices) continue;
        (void)fprintf(f, "%s%s) vals='", indent, k->path);
        for (const char *c = choices; *c; c++)
            (void)fputc(*c == '|' ? ' ' : *c, f);
        (void)fprintf(f, "' ;;\n");
    }
}

/* The function both scripts share: it fills COMPREPLY from COMP_WORDS and COMP_CWORD. Words
 * are matched by its own loop, not compgen -W, which zsh's bashcompinit leaves unfiltered. */
static void put_function(FILE *f, bool zsh) {
    (void)fprintf(f,
                  "_ctrain_words() {\n%s"
                  "    local cur=${COMP_WORDS[COMP_CWORD]} prev= cmd=${COMP_WORDS[1]}\n"
                  "    local opts= valued= vals= key= pre= i w operands=0 files=0\n"
                  "    (( COMP_CWORD > 0 )) && prev=${COMP_WORDS[COMP_CWORD-1]}\n"
                  "    COMPREPLY=()\n"
                  "    if (( COMP_CWORD == 1 )); then\n"
                  "        vals='",
                  zsh ? "    emulate -L ksh\n" : "");
    for (int i = 0; i < N_COMMANDS; i++)
        (void)fprintf(f, "%s ", k_commands[i].name);
    (void)fprintf(f, "help --help --version'\n"
                     "    else\n"
                     "        case $cmd in\n");
    for (int i = 0; i < N_COMMANDS; i++) {
        (void)fprintf(f, "        %s) opts='", k_commands[i].name);
        put_words(f, k_commands[i].options, false);
        (void)fprintf(f, "' valued='");
        put_words(f, k_commands[i].options, true);
        (void)fprintf(f, "' ;;\n");
    }
    (void)fprintf(
        f,
        "        *) return 0 ;;\n"
        "        esac\n"
        "        if [[ $cmd == completion ]]; then\n"
        "            (( COMP_CWORD == 2 )) && vals='bash zsh'\n"
        "        elif [[ \" $valued \" == *\" $prev \"* ]]; then\n"
        "            [[ $prev == --checkpoint ]] && vals='best latest'\n"
        "            [[ \" --checkpoint --input --output --svg \" == *\" $prev \"* ]] && files=1\n"
        "            [[ $prev == --dir ]] && files=1\n"
        "        elif [[ $cur == -* ]]; then\n"
        "            vals=$opts\n"
        "        else\n"
        "            for (( i = 2; i < COMP_CWORD; i++ )); do\n"
        "                w=${COMP_WORDS[i]}\n"
        "                [[ $w == -* || $w == = ]] && continue\n"
        "                [[ \" $valued \" == *\" ${COMP_WORDS[i-1]} \"* ]] && continue\n"
        "                [[ ${COMP_WORDS[i+1]} == = || ${COMP_WORDS[i-1]} == = ]] && continue\n"
        "                operands=$((operands + 1))\n"
        "            done\n"
        "            if (( operands == 0 )) ||\n"
        "                [[ \" fit eval predict config verify-resume \" != *\" $cmd \"* ]]; then\n"
        "                files=1\n"
        "            else\n"
        "                # key=value: after '=' the key's values ('=' may split the word)\n"
        "                if [[ $prev == = ]]; then\n"
        "                    key=${COMP_WORDS[COMP_CWORD-2]}\n"
        "                elif [[ $cur == = ]]; then\n"
        "                    key=$prev cur=\n"
        "                elif [[ $cur == *=* ]]; then\n"
        "                    key=${cur%%%%=*} pre=\"${cur%%%%=*}=\" cur=${cur#*=}\n"
        "                fi\n"
        "                if [[ -n $key ]]; then\n"
        "                    key=${key#\"${key%%%%[!+~]*}\"}\n"
        "                    case $key in\n");
    put_values(f, "                    ");
    (void)fprintf(f, "                    esac\n"
                     "                else\n"
                     "                    pre=${cur%%%%[!+~]*} cur=${cur#\"${cur%%%%[!+~]*}\"}\n"
                     "                    vals='");
    put_keys(f);
    (void)fprintf(f, "'\n"
                     "                    compopt -o nospace 2>/dev/null\n"
                     "                fi\n"
                     "            fi\n"
                     "        fi\n"
                     "    fi\n"
                     "    for w in $vals; do\n"
                     "        [[ $w == \"$cur\"* ]] && COMPREPLY+=(\"$pre$w\")\n"
                     "    done\n"
                     "    (( files )) && COMPREPLY+=($(compgen -f -- \"$cur\"))\n"
                     "    return 0\n"
                     "}\n");
}

static void put_bash(FILE *f) {
    (void)fprintf(f, "# bash completion for ctrain (printed by `ctrain completion bash`)\n");
    put_function(f, false);
    (void)fprintf(f, "complete -o default -F _ctrain_words ctrain\n");
}

/* zsh runs the bash function through bashcompinit (in ksh emulation: 0-based arrays, split
 * words), so both shells complete alike; autoloaded as _ctrain, the file also answers the first
 * completion it was loaded for. */
static void put_zsh(FILE *f) {
    (void)fprintf(f, "#compdef ctrain\n"
                     "# zsh completion for ctrain (printed by `ctrain completion zsh`)\n"
                     "autoload -U +X bashcompinit && bashcompinit\n");
    put_function(f, true);
    (void)fprintf(f, "complete -o default -F _ctrain_words ctrain\n"
                     "(( ${+compstate} )) && _bash_complete -o default -F _ctrain_words\n");
}

int cli_cmd_completion(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "bash") != 0 && strcmp(argv[1], "zsh") != 0)) {
        if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            cli_cmd_usage(stdout, "completion");
            return 0;
        }
        (void)fprintf(stderr, "ctrain completion: expected bash or zsh\n");
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "bash") == 0)
        put_bash(stdout);
    else
        put_zsh(stdout);
    return fflush(stdout) == 0 ? 0 : EXIT_RUN_FAILED;
}

/* Text as roff lines in no-fill mode: backslashes doubled, and a line that opens with '.' or
 * '\'' guarded so it is not taken for a request. */
static void put_roff_text(FILE *out, const char *text) {
    bool line_start = true;
    for (const char *p = text; *p; p++) {
        if (line_start && (*p == '.' || *p == '\'')) (void)fputs("\\&", out);
        if (*p == '\\')
            (void)fputs("\\e", out);
        else if (*p == '-')
            (void)fputs("\\-", out);
        else
            (void)fputc(*p, out);
        line_start = *p == '\n';
    }
}

/* What a usage function prints, as roff; NULL cmd: the tool's own. */
static int put_usage_roff(FILE *out, const char *cmd) {
    char *buf = NULL;
    size_t size = 0;
    FILE *m = open_memstream(&buf, &size);
    if (!m) return -1;
    if (cmd)
        cli_cmd_usage(m, cmd);
    else
        cli_usage(m);
    if (fclose(m) != 0) {
        free(buf);
        return -1;
    }
    (void)fputs(".nf\n", out);
    put_roff_text(out, buf);
    (void)fputs(".fi\n", out);
    free(buf);
    return 0;
}

int cli_cmd_man(int argc, char **argv) {
    (void)argv;
    if (argc != 1) {
        (void)fprintf(stderr, "ctrain man: takes no arguments\n");
        return EXIT_USAGE;
    }
    FILE *out = stdout;
    (void)fprintf(out,
                  ".TH CTRAIN 1 \"\" \"ctrain %s\" \"User Commands\"\n"
                  ".SH NAME\n"
                  "ctrain \\- train, evaluate and inspect models described by experiment files\n"
                  ".SH SYNOPSIS\n"
                  ".B ctrain\n"
                  ".I COMMAND\n"
                  "[options]\n"
                  ".SH DESCRIPTION\n",
                  ct_version());
    if (put_usage_roff(out, NULL) != 0) return EXIT_RUN_FAILED;
    (void)fprintf(out, ".SH COMMANDS\n");
    for (int i = 0; i < N_COMMANDS; i++) {
        (void)fprintf(out, ".SS %s\n", k_commands[i].name);
        if (put_usage_roff(out, k_commands[i].name) != 0) return EXIT_RUN_FAILED;
    }
    (void)fprintf(out, ".SH FILES\n"
                       ".nf\n"
                       "PREFIX/share/ctrain/examples     the bundled example experiments\n"
                       "PREFIX/share/bash\\-completion/completions/ctrain   bash completion\n"
                       "PREFIX/share/zsh/vendor\\-completions/_ctrain       zsh completion\n"
                       ".fi\n"
                       ".SH SEE ALSO\n"
                       "docs/cli.md and docs/config.md of the ctrain sources.\n");
    return fflush(out) == 0 ? 0 : EXIT_RUN_FAILED;
}

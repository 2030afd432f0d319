/*
 * jsonq.c - a small JSON reader for the shell tests (tests/e2e/cli.sh), so that they need no
 * Python or jq: reads JSON lines (one object per non-blank line: metrics.jsonl, the output of
 * `ctrain eval --json`) from FILE or stdin, checks that every line parses, and prints KEY's
 * value in the last object that has it (numbers as %.17g, so that equal text means equal bits;
 * strings as they are; anything else as compact JSON).
 *     usage: jsonq KEY [FILE]
 * Exit: 0 printed; 1 a line is not a JSON object (the line number is named); 2 usage or an
 * unreadable file; 3 no object has KEY.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_value(const json_t *v) {
    if (json_is_integer(v)) {
        printf("%lld\n", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        printf("%.17g\n", json_real_value(v));
    } else if (json_is_string(v)) {
        printf("%s\n", json_string_value(v));
    } else {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        printf("%s\n", s ? s : "?");
        free(s);
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: jsonq KEY [FILE]\n");
        return 2;
    }
    FILE *f = argc == 3 ? fopen(argv[2], "r") : stdin;
    if (!f) {
        fprintf(stderr, "jsonq: cannot open %s\n", argv[2]);
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    long no = 0;
    json_t *found = NULL;
    int rc = 0;
    while (getline(&line, &cap, f) > 0) {
        no++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        json_error_t err;
        json_t *obj = json_loads(line, 0, &err);
        if (!json_is_object(obj)) {
            fprintf(stderr, "jsonq: line %ld: not a JSON object: %s\n", no,
                    obj ? "another value" : err.text);
            json_decref(obj);
            rc = 1;
            break;
        }
        json_t *v = json_object_get(obj, argv[1]);
        if (v) {
            json_decref(found);
            found = json_incref(v);
        }
        json_decref(obj);
    }
    free(line);
    if (f != stdin) fclose(f);
    if (rc == 0 && !found) {
        fprintf(stderr, "jsonq: no object has '%s'\n", argv[1]);
        rc = 3;
    }
    if (rc == 0) print_value(found);
    json_decref(found);
    return rc;
}

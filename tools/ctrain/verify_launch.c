/*
 * verify_launch.c - the MPI launcher of `ctrain verify-resume --ranks R`: the words each fit of
 * R ranks is started with, before this ctrain's path and the fit's arguments. Either the user's
 * --launcher template, split at blanks with {R} replaced by the rank count, or the default:
 * `mpirun` found on PATH with `-np R`, and for Open MPI (told apart from MPICH by what
 * `mpirun --version` prints, as the tests do) `--oversubscribe`, plus `--allow-run-as-root` when
 * run as root: Open MPI refuses more ranks than cores, and root, without them.
 *
 * Ownership: a launcher owns its words; cli_launcher_fini frees them.
 */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

bool cli_find_on_path(const char *name, char *buf, size_t size) {
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        int w = snprintf(buf, size, "%.*s/%s", (int)len, len ? path : ".", name);
        struct stat st;
        if (w > 0 && (size_t)w < size && stat(buf, &st) == 0 && S_ISREG(st.st_mode) &&
            access(buf, X_OK) == 0)
            return true;
        path = end ? end + 1 : NULL;
    }
    return false;
}

/* Whether `mpirun --version` says Open MPI (or its runtime, OpenRTE). */
static bool is_open_mpi(const char *mpirun) {
    int fds[2];
    if (pipe(fds) != 0) return false;
    posix_spawn_file_actions_t fa;
    char *argv[] = {(char *)(uintptr_t)mpirun, (char *)(uintptr_t) "--version", NULL};
    pid_t pid = -1;
    if (posix_spawn_file_actions_init(&fa) == 0) {
        (void)posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        (void)posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
        (void)posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
        (void)posix_spawn_file_actions_addclose(&fa, fds[0]);
        if (posix_spawn(&pid, mpirun, &fa, NULL, argv, environ) != 0) pid = -1;
        (void)posix_spawn_file_actions_destroy(&fa);
    }
    (void)close(fds[1]);
    char text[4096];
    size_t n = 0;
    ssize_t got;
    while (pid > 0 && (got = read(fds[0], text + n, sizeof text - 1 - n)) > 0)
        n += (size_t)got;
    text[n] = '\0';
    (void)close(fds[0]);
    int status;
    if (pid > 0) (void)waitpid(pid, &status, 0);
    return strstr(text, "Open MPI") || strstr(text, "OpenRTE");
}

/* Splits text at blanks into l's words, each {R} replaced by ranks. */
static int split(cli_launcher *l, const char *text, long long ranks) {
    char r[24];
    int rlen = snprintf(r, sizeof r, "%lld", ranks);
    size_t cap = strlen(text) * (size_t)(rlen > 3 ? rlen : 3) + 1, words = strlen(text) / 2 + 2;
    l->text = malloc(cap);
    l->argv = calloc(words, sizeof *l->argv);
    if (!l->text || !l->argv) return EXIT_RUN_FAILED;
    char *out = l->text;
    const char *p = text;
    l->argc = 0;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p) break;
        l->argv[l->argc++] = out;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n') {
            if (strncmp(p, "{R}", 3) == 0) {
                memcpy(out, r, (size_t)rlen);
                out += rlen;
                p += 3;
            } else {
                *out++ = *p++;
            }
        }
        *out++ = '\0';
    }
    l->argv[l->argc] = NULL;
    return 0;
}

int cli_launcher_init(cli_launcher *l, const char *tmpl, long long ranks) {
    memset(l, 0, sizeof *l);
    char mpirun[4096], line[4200];
    if (!tmpl) {
        if (!cli_find_on_path("mpirun", mpirun, sizeof mpirun)) {
            (void)fprintf(stderr,
                          "ctrain verify-resume: --ranks %lld: no mpirun on PATH; install Open "
                          "MPI or MPICH, or name the launcher with --launcher \"mpiexec -n {R}\"\n",
                          ranks);
            return EXIT_USAGE;
        }
        bool ompi = is_open_mpi(mpirun);
        (void)snprintf(line, sizeof line, "%s -np {R}%s%s", mpirun, ompi ? " --oversubscribe" : "",
                       ompi && geteuid() == 0 ? " --allow-run-as-root" : "");
        tmpl = line;
    }
    int rc = split(l, tmpl, ranks);
    if (rc == 0 && l->argc == 0) {
        (void)fprintf(stderr, "ctrain verify-resume: --launcher: empty; expected a command such "
                              "as \"mpirun -np {R}\"\n");
        rc = EXIT_USAGE;
    }
    if (rc) cli_launcher_fini(l);
    return rc;
}

void cli_launcher_fini(cli_launcher *l) {
    free(l->argv);
    free(l->text);
    memset(l, 0, sizeof *l);
}

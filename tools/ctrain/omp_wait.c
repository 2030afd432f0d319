/*
 * omp_wait.c - how long OpenMP's idle threads spin before they sleep (docs/performance.md,
 * "Sharing the cores").
 *
 * libgomp's default, when OMP_WAIT_POLICY is unset, keeps a thread that waits at a barrier
 * spinning on its core for about 300,000 rounds before it sleeps. On a quiet machine that is
 * free; when another process takes a core, the spinning thread holds its core while the thread
 * it waits for queues for the other, and a step runs up to twice as slow. A short spin keeps the
 * quiet machine's speed (the waits between a step's parallel loops are short) and gives the
 * core back under load.
 *
 * libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its constructor, before main runs,
 * and has no call to change them later. So when the environment sets neither, the tool puts
 * GOMP_SPINCOUNT in it and executes itself again, once: execv of /proc/self/exe with the same
 * argv keeps the pid, the open files, the signal dispositions and the rest of the environment,
 * so a launcher (mpirun, srun, a shell's job control) sees one process throughout. A marker in
 * the environment makes sure it happens once. It does not happen where /proc/self/exe is not
 * this program, as under qemu's user-mode emulation and valgrind, which show the program's
 * name there while running themselves: executing it again would leave the emulator and run
 * the program natively.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "cli.h"

#ifdef _OPENMP
/* GOMP_SPINCOUNT that the tool sets: the rounds a waiting thread spins before it sleeps
   (libgomp's own default: 300,000; OMP_WAIT_POLICY=passive: 0). */
#define OMP_SPINCOUNT 3000

/* Set in the environment of the executed-again tool: it never executes itself a second time,
   and a user can set it to keep libgomp's defaults. */
#define REEXEC_MARKER "CTRAIN_OMP_REEXEC"

/* Whether /proc/self/exe, read by its name, is the file the kernel runs: an emulator answers
   the name with the program it runs, but not a link read through the directory. And whether
   the kernel started the program itself: started as `ld.so ./ctrain ...` (AT_BASE 0 then, the
   loader being the program), /proc/self/exe is the loader, which would take the command for the
   program to load. */
static bool self_is_native(void) {
    if (getauxval(AT_BASE) == 0) return false;
    char by_name[4096], by_dir[4096];
    ssize_t n = readlink("/proc/self/exe", by_name, sizeof by_name - 1);
    if (n <= 0) return false;
    by_name[n] = '\0';
    int dir = open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return false;
    ssize_t m = readlinkat(dir, "exe", by_dir, sizeof by_dir - 1);
    (void)close(dir);
    if (m <= 0) return false;
    by_dir[m] = '\0';
    return strcmp(by_name, by_dir) == 0;
}

static bool user_chose(void) {
    return getenv("OMP_WAIT_POLICY") != NULL || getenv("GOMP_SPINCOUNT") != NULL;
}

/* The commands whose threads do the arithmetic, and --version, which says what they get: the
   others do not pay the second start (some 10-40 ms, most of it loading oneDNN and OpenBLAS). */
static bool computes(const char *cmd) {
    static const char *const names[] = {"fit", "eval", "predict", "replay", "--version", "-V"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(cmd, names[i]) == 0) return true;
    return false;
}

/* The kernel names a process after the file it executes, "exe" for /proc/self/exe: the name
   goes back to the program's, the one ps, top, pgrep and killall show, from argv[0] as the
   first execution had it from its path. */
static void keep_the_name(const char *argv0) {
    const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
    const char *name = slash ? slash + 1 : argv0;
    if (name && *name) (void)prctl(PR_SET_NAME, name, 0, 0, 0);
}
#endif

void cli_omp_wait_setup(int argc, char **argv) {
#ifdef _OPENMP
    if (getenv(REEXEC_MARKER) != NULL && getenv("GOMP_SPINCOUNT") != NULL) keep_the_name(argv[0]);
    if (argc < 2 || !computes(argv[1]) || user_chose() || getenv(REEXEC_MARKER) != NULL ||
        !self_is_native())
        return;
    char spin[32];
    (void)snprintf(spin, sizeof spin, "%d", OMP_SPINCOUNT);
    if (setenv("GOMP_SPINCOUNT", spin, 1) != 0 || setenv(REEXEC_MARKER, "1", 1) != 0) return;
    (void)execv("/proc/self/exe", argv);
    /* still here: this process keeps libgomp's defaults, and says so in its environment */
    (void)unsetenv("GOMP_SPINCOUNT");
    (void)unsetenv(REEXEC_MARKER);
#else
    (void)argc;
    (void)argv;
#endif
}

void cli_omp_wait_print(FILE *f) {
#ifdef _OPENMP
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    const char *marker = getenv(REEXEC_MARKER);
    if (marker && spin && !policy)
        (void)fprintf(f, "OpenMP wait: GOMP_SPINCOUNT=%s (set by ctrain)\n", spin);
    else if (policy || spin)
        (void)fprintf(f, "OpenMP wait: %s%s%s%s%s (from the environment)\n",
                      policy ? "OMP_WAIT_POLICY=" : "", policy ? policy : "",
                      policy && spin ? " " : "", spin ? "GOMP_SPINCOUNT=" : "", spin ? spin : "");
    else
        (void)fprintf(f, "OpenMP wait: libgomp's default (%s)\n",
                      marker              ? REEXEC_MARKER " is set"
                      : !self_is_native() ? "not executed again: /proc/self/exe is not this "
                                            "program, as under an emulator, valgrind or "
                                            "the dynamic loader"
                                          : "executing again failed");
#else
    (void)fprintf(f, "OpenMP wait: none (built without OpenMP)\n");
#endif
}

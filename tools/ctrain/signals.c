/*
 * signals.c - the stop signals of the ctrain tool (SIGINT, SIGTERM, SIGHUP, and for fit the
 * preemption signal, SIGUSR1 or SIGUSR2: preempt.c): a flag that the handler sets and the
 * commands read, the exit code and name of a stop, the thread that takes the signals during
 * fit, and the launcher's pipes made non-blocking.
 *
 * The flag is the tool's only process-wide state: a signal handler must set one.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static volatile sig_atomic_t g_signal = 0;

static void on_signal(int sig) {
    /* a second one stops at once; not a second SIGHUP: a hang-up often comes twice (the shell
       passes it on to its jobs, and the kernel sends it when the session's leader exits); nor a
       second preemption notice, which is no request to hurry (a launcher that forwards it and
       the batch system may both deliver it) */
    if (g_signal && sig != SIGHUP && sig != SIGUSR1 && sig != SIGUSR2) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    if (!g_signal || (sig != SIGUSR1 && sig != SIGUSR2)) g_signal = sig;
}

int cli_signal(void) {
    return g_signal;
}

/* A report stops once a signal has come (ct_report_params.cancelled). */
bool cli_signalled(void *user) {
    (void)user;
    return g_signal != 0;
}

/* The signals that stop a fit at the end of its step, with a checkpoint: SIGINT (Ctrl-C),
 * SIGTERM (kill, a scheduler's preemption) and SIGHUP (the terminal or the ssh session that
 * started it went away), each ending with its own exit code; and the preemption signals a batch
 * system may send ahead (SIGUSR1, SIGUSR2), caught when trainer.preempt_signal names them. */
static void stop_signals(sigset_t *set) {
    (void)sigemptyset(set);
    (void)sigaddset(set, SIGINT);
    (void)sigaddset(set, SIGTERM);
    (void)sigaddset(set, SIGHUP);
    (void)sigaddset(set, SIGUSR1);
    (void)sigaddset(set, SIGUSR2);
}

/* on_signal for each stop signal, except SIGHUP where it was ignored (`nohup ctrain fit ...`):
 * that run is meant to outlive its terminal. */
void cli_catch_stop_signals(void) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    (void)sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    if (sigaction(SIGHUP, NULL, &old) == 0 && old.sa_handler != SIG_IGN)
        (void)sigaction(SIGHUP, &sa, NULL);
}

/* on_signal for the preemption signal sig (SIGUSR1, SIGUSR2; SIGTERM has it already). */
void cli_catch_preempt_signal(int sig) {
    if (sig != SIGUSR1 && sig != SIGUSR2) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    (void)sigemptyset(&sa.sa_mask);
    (void)sigaction(sig, &sa, NULL);
}

/* Once the stop's checkpoint is saved and the job is being requeued, a stop signal (the batch
 * system ending the job it requeues) must not cut the exit short. */
void cli_ignore_stop_signals(void) {
    sigset_t set;
    stop_signals(&set);
    for (int sig = 1; sig < 32; sig++)
        if (sigismember(&set, sig) == 1) (void)signal(sig, SIG_IGN);
}

/* The exit code of a stop by the signal that came (0: none; a preemption signal's is SIGTERM's),
 * and its name. */
int cli_stop_code(void) {
    return g_signal == SIGINT                           ? EXIT_SIGINT
           : g_signal == SIGTERM                        ? EXIT_SIGTERM
           : g_signal == SIGHUP                         ? EXIT_SIGHUP
           : g_signal == SIGUSR1 || g_signal == SIGUSR2 ? EXIT_SIGTERM
                                                        : 0;
}
const char *cli_stop_name(void) {
    return g_signal == SIGINT    ? "SIGINT"
           : g_signal == SIGTERM ? "SIGTERM"
           : g_signal == SIGUSR1 ? "SIGUSR1"
           : g_signal == SIGUSR2 ? "SIGUSR2"
                                 : "SIGHUP";
}

/* The one thread that takes the stop signals during fit; it does nothing else. */
static void *signal_thread(void *arg) {
    (void)arg;
    sigset_t set;
    stop_signals(&set);
    (void)pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    for (;;)
        (void)pause();
    return NULL;
}

/* oneDNN 2.6's JIT GEMM kernels point rsp into the heap while they run (oneDNN's bug report
 * github.com/oneapi-src/oneDNN/issues/4845, fixed upstream in 2026): a signal handled on a thread
 * inside one writes its frame there and corrupts the heap (seen: about one SIGTERM in four right
 * after an evaluation aborted in free). So before fit starts any thread, the stop signals are
 * blocked in this one (every thread started later, OpenMP's, the loader's and MPI's, inherits the
 * mask) and left to a thread of their own. Until the handler is installed their default action
 * still ends the process. If that thread cannot start, signals are left as they were. OpenBLAS
 * starts its idle worker pool when it loads, before main (none with OPENBLAS_NUM_THREADS=1): those
 * workers can take the signals too, which is harmless, as they never run oneDNN code. */
void cli_route_signals(void) {
    sigset_t set, old;
    stop_signals(&set);
    if (pthread_sigmask(SIG_BLOCK, &set, &old) != 0) return;
    pthread_t th;
    if (pthread_create(&th, NULL, signal_thread, NULL) != 0) {
        (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
        return;
    }
    (void)pthread_detach(th);
}

/* Under an MPI launcher the terminal output goes through a pipe (or socket) that the launcher
 * reads, and stops reading once it is told to end the job: Open MPI's mpirun, given SIGTERM,
 * waits a second, sends SIGTERM to the ranks and a second later SIGKILL. A rank blocked writing
 * progress into the full pipe would never get to its checkpoint. So those writes never block:
 * what the launcher does not take in time is dropped (log.txt has every line). */
void cli_never_block_on_the_launcher(void) {
    for (int fd = 1; fd <= 2; fd++) {
        struct stat st;
        int fl = fcntl(fd, F_GETFL);
        if (fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) && fl >= 0)
            (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    }
}

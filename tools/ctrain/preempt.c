/*
 * preempt.c - preemption by a batch system. The signal trainer.preempt_signal names (SIGUSR1 by
 * default: what Slurm's `--signal=B:USR1@120` sends ahead of a preemption or the time limit)
 * stops fit as SIGTERM does: every rank at the end of the same step, one checkpoint. Then, with
 * trainer.requeue (auto: under Slurm), rank 0 puts the job back into the queue with
 * `scontrol requeue JOB`, where it waits to start again and resume from that checkpoint, and
 * fit exits EXIT_REQUEUED.
 *
 * Slurm sets the job's state from the requeue, not from the exit code: `scontrol requeue` of a
 * running job ends its processes itself (SIGTERM, then SIGKILL) and returns the job to PENDING.
 * So once the requeue is asked, the stop signals are ignored (that SIGTERM must not cut the exit
 * short), and the exit code only tells the batch script what happened: 75 (sysexits'
 * EX_TEMPFAIL, "try again later") is not 0, so a script does not go on as after a finished run,
 * and not 143, so it is told apart from a plain stop.
 */
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cli.h"

extern char **environ;

void cli_read_preemption(session *s, const ct_config *cfg) {
    const ct_cfg_node *root = ct_config_root(cfg);
    const char *sig = ct_config_find(root, "trainer.preempt_signal")->value;
    const char *rq = ct_config_find(root, "trainer.requeue")->value;
    s->preempt_signal = strcmp(sig, "USR1") == 0   ? SIGUSR1
                        : strcmp(sig, "USR2") == 0 ? SIGUSR2
                        : strcmp(sig, "TERM") == 0 ? SIGTERM
                                                   : 0;
    s->requeue = strcmp(rq, "true") == 0    ? REQUEUE_TRUE
                 : strcmp(rq, "false") == 0 ? REQUEUE_FALSE
                                            : REQUEUE_AUTO;
}

/* Whether this rank, or in a job of several any rank, stopped for the preemption signal. Every
 * rank calls it after a fit that ended cleanly (one all-reduce of one number). */
static bool preempted(session *s) {
    double mine = s->preempt_signal && cli_signal() == s->preempt_signal ? 1.0 : 0.0;
    if (s->world <= 1 || !s->comm) return mine > 0;
    double any = mine;
    if (ct_comm_allreduce_sum_f64(s->comm, &any, 1) != CT_OK) {
        ct_log(s->ctx, CT_LOG_WARN, "the ranks could not tell each other of a preemption: %s",
               ct_last_error(s->ctx));
        return mine > 0;
    }
    return any > 0;
}

/* Runs `scontrol requeue id` (scontrol at path) with the signals at their defaults: its wait
 * status, or -1 when it could not start. */
static int run_scontrol(const char *path, const char *id) {
    char *argv[] = {(char *)(uintptr_t)path, (char *)(uintptr_t) "requeue", (char *)(uintptr_t)id,
                    NULL};
    posix_spawnattr_t at;
    posix_spawn_file_actions_t fa;
    int status = -1;
    if (posix_spawnattr_init(&at) != 0) return -1;
    if (posix_spawn_file_actions_init(&fa) == 0) {
        sigset_t none, stops;
        (void)sigemptyset(&none);
        (void)sigemptyset(&stops);
        int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
            (void)sigaddset(&stops, sigs[i]);
        (void)posix_spawnattr_setsigmask(&at, &none);
        (void)posix_spawnattr_setsigdefault(&at, &stops);
        (void)posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        (void)posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        pid_t pid;
        if (posix_spawn(&pid, path, &fa, &at, argv, environ) == 0 &&
            waitpid(pid, &status, 0) != pid)
            status = -1;
        (void)posix_spawn_file_actions_destroy(&fa);
    }
    (void)posix_spawnattr_destroy(&at);
    return status;
}

/* Rank 0's requeue of the Slurm job after a preemption: the exit code (rc when not requeued). */
static int requeue(session *s, int rc) {
    const char *job = getenv("SLURM_JOB_ID");
    bool slurm = job && job[0];
    if (s->requeue == REQUEUE_FALSE || (s->requeue == REQUEUE_AUTO && !slurm)) return rc;
    if (!slurm) {
        ct_log(s->ctx, CT_LOG_WARN,
               "trainer.requeue is true, but SLURM_JOB_ID is not set: not a Slurm job, nothing "
               "is requeued");
        return rc;
    }
    char id[160], scontrol[4096];
    const char *array = getenv("SLURM_ARRAY_JOB_ID"), *task = getenv("SLURM_ARRAY_TASK_ID");
    if (array && array[0] && task && task[0])
        (void)snprintf(id, sizeof id, "%.70s_%.70s", array, task);
    else
        (void)snprintf(id, sizeof id, "%.150s", job);
    if (!cli_find_on_path("scontrol", scontrol, sizeof scontrol)) {
        ct_log(s->ctx, CT_LOG_WARN,
               "trainer.requeue: scontrol is not on PATH: Slurm job %s is not requeued; submit "
               "it again to go on from the checkpoint",
               id);
        return rc;
    }
    cli_ignore_stop_signals();
    int status = run_scontrol(scontrol, id);
    if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        cli_say(s,
                "requeued Slurm job %s (scontrol requeue %s): it waits in the queue and resumes "
                "from this checkpoint when it starts again",
                id, id);
        return EXIT_REQUEUED;
    }
    char how[64];
    if (status == -1)
        (void)snprintf(how, sizeof how, "could not be started");
    else if (WIFSIGNALED(status))
        (void)snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(status));
    else
        (void)snprintf(how, sizeof how, "exited %d", WEXITSTATUS(status));
    ct_log(s->ctx, CT_LOG_WARN,
           "scontrol requeue %s %s: the job is not requeued (submitted without --requeue, or "
           "the cluster does not allow it: see scontrol's message); submit it again to go on "
           "from the checkpoint",
           id, how);
    return rc;
}

int cli_after_preemption(session *s, int rc) {
    if (!preempted(s) || s->rank != 0) return rc;
    return requeue(s, rc ? rc : EXIT_SIGTERM);
}

/*
 * fit.c - the fit command: trains the experiment a configuration describes in its run
 * directory, as one process or as one rank of an MPI job, and ends with a summary, or with the
 * exit code of the stop signal that came (a checkpoint saved; after a preemption signal the
 * Slurm job requeued: preempt.c).
 *
 * Ownership: fit owns the session it opens (its context, communicator and log.txt), the
 * configuration and the experiment, and frees them all before it returns.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Parses fit's arguments: -1 to go on, or the exit code (0 after --help). */
static int read_args(int argc, char **argv, cmd_args *a, char **ov) {
    int rc = cli_parse_args("fit", argc, argv, a, ov);
    if (rc) return rc;
    if (a->help) {
        cli_cmd_usage(stdout, "fit");
        return 0;
    }
    if (!a->config) {
        (void)fprintf(stderr, "ctrain fit: missing CONFIG\n");
        cli_cmd_usage(stderr, "fit");
        cli_list_examples(stderr);
        return EXIT_USAGE;
    }
    return -1;
}

/* Under an MPI launcher (mpirun, srun: docs/distributed.md), this process becomes one rank of
 * the job: 0, or the exit code once said. */
static int join_job(session *s) {
    if (!ct_comm_launched()) return 0;
    if (ct_comm_create_mpi(s->ctx, &s->comm) != CT_OK) return cli_fail(s->ctx, EXIT_RUN_FAILED);
    s->rank = ct_comm_rank(s->comm);
    s->world = ct_comm_world_size(s->comm);
    s->silent = s->rank != 0;
    if (cli_gather_rank_map(s) != CT_OK) return cli_fail(s->ctx, EXIT_RUN_FAILED);
    /* at once, before any data is read: a rank killed while loading is named too */
    if (s->rank == 0) (void)fprintf(stderr, "ranks: %s\n", s->rank_map);
    cli_never_block_on_the_launcher();
    return 0;
}

/* Loads the configuration and sets the session up from it: the progress display, the threads
 * and log.txt's path. *out_dir points into *cfg. 0, or the exit code once said. */
static int load(session *s, const cmd_args *a, ct_config **cfg, const char **out_dir) {
    ct_status st = cli_load_config(s->ctx, a->config, a->overrides, a->n_overrides, cfg);
    if (st != CT_OK) return cli_rank_fail(s, s->ctx, cli_setup_code(st));
    cli_apply_logging(s, *cfg);
    cli_read_preemption(s, *cfg);
    if (s->silent) s->progress = PROGRESS_NONE;
    const ct_cfg_node *root = ct_config_root(*cfg);
    if (s->world > 1 &&
        strcmp(ct_config_find(root, "trainer.strategy")->value, "parameter_server") == 0) {
        /* progress counts rank 0's own batches (of the workers' global batch) and evaluations */
        const ct_cfg_node *global = ct_config_find(root, "data.global_batch_size");
        const ct_cfg_node *servers = ct_config_find(root, "trainer.ps.servers");
        long long workers = s->world - (servers ? atoll(servers->value) : 1);
        if (global && atoll(global->value) > 0 && workers > 0)
            s->batch_size = atoll(global->value) / workers;
    } else if (s->world > 1) { /* progress counts the samples of every rank */
        s->batch_size *= s->world;
        s->eval_batch_size *= s->world;
    }
    (void)ct_ctx_set_threads(s->ctx, atoll(ct_config_find(root, "threads")->value));
    *out_dir = ct_config_find(root, "output_dir")->value;
    /* a dev run is a smoke test that writes nothing, log.txt included */
    const char *dev = ct_config_find(root, "trainer.dev_run")->value; /* true, True or TRUE */
    bool dev_run = dev[0] == 't' || dev[0] == 'T';
    if (!s->silent && !dev_run)
        (void)snprintf(s->log_path, sizeof s->log_path, "%s/log.txt", *out_dir);
    return 0;
}

/* Builds the experiment with the session's callbacks: 0, or the exit code once said. */
static int create(session *s, const cmd_args *a, ct_config *cfg, ct_experiment **e) {
    ct_experiment_params ep = ct_experiment_default_params();
    ep.comm = s->comm;
    ep.restart = a->restart;
    cli_session_callbacks(s, &ep.callbacks);
    int rc = cli_cut_callbacks(s, &ep.callbacks);
    if (rc) return rc;
    ep.report_cancelled = cli_signalled;
    ct_status st = ct_experiment_create(s->ctx, cfg, &ep, e);
    if (st != CT_OK) return cli_rank_fail(s, s->ctx, cli_setup_code(st));
    s->exp = *e;
    return 0;
}

/* The first line: what is trained where, on how much. */
static void say_start(session *s, const char *config, const char *out_dir, ct_experiment *e) {
    if (s->world > 1) {
        const ct_trainer *t = ct_experiment_trainer(e);
        char hosts[48] = "", exchange[96] = ", optimizer update sharded";
        if (s->hosts > 1)
            (void)snprintf(hosts, sizeof hosts, " on %lld hosts", (long long)s->hosts);
        int64_t servers = ct_trainer_ps_servers(t), batch = s->batch_size;
        if (servers > 0) {
            batch *= s->world - servers;
            (void)snprintf(exchange, sizeof exchange, ", %lld parameter server%s, %lld worker%s",
                           (long long)servers, servers == 1 ? "" : "s",
                           (long long)(s->world - servers), s->world - servers == 1 ? "" : "s");
        } else if (ct_trainer_local_sgd_steps(t) > 0)
            (void)snprintf(exchange, sizeof exchange, ", weights averaged every %lld steps",
                           (long long)ct_trainer_local_sgd_steps(t));
        else if (!ct_trainer_sharded(t) && ct_trainer_buckets(t) > 0)
            (void)snprintf(exchange, sizeof exchange, ", gradients all-reduced in %lld bucket%s",
                           (long long)ct_trainer_buckets(t), ct_trainer_buckets(t) == 1 ? "" : "s");
        else if (!ct_trainer_sharded(t))
            (void)snprintf(exchange, sizeof exchange,
                           ", gradients all-reduced after the backward pass");
        cli_say(s,
                "ctrain %s: fit %s -> %s on %lld processes%s (%lld training samples each, global "
                "batch %lld, %lld parameters%s)",
                ct_version(), config, out_dir, (long long)s->world, hosts,
                (long long)ct_experiment_train_samples(e), (long long)batch,
                (long long)ct_params_numel(ct_experiment_params_store(e)), exchange);
        cli_to_log(s, "ranks: ", s->rank_map); /* printed when the job started */
    } else {
        cli_say(s, "ctrain %s: fit %s -> %s (%lld training samples, %lld parameters)", ct_version(),
                config, out_dir, (long long)ct_experiment_train_samples(e),
                (long long)ct_params_numel(ct_experiment_params_store(e)));
    }
}

/* A fit that failed: its error said (rank 0 for the job) and the job ended; the exit code. */
static int failed(session *s, ct_status st) {
    cli_close_bar(s);
    if (s->silent)
        return cli_rank_fail(s, s->ctx, st == CT_ERR_CONFIG ? EXIT_USAGE : EXIT_RUN_FAILED);
    char text[2048];
    cli_say(s, "ctrain: error: %s%s", s->world > 1 ? "rank 0: " : "",
            cli_error_text(s->ctx, text, sizeof text));
    int rc = st == CT_ERR_CONFIG ? EXIT_USAGE : EXIT_RUN_FAILED;
    if (s->log_file) (void)fflush(s->log_file);
    ct_comm_abort(s->comm, rc);
    return rc;
}

/* The last line: steps, epochs, the steps skipped, the loss spikes, the best monitored value
 * and the test metrics. */
static void say_summary(session *s, ct_trainer *t) {
    char summary[1024];
    long long steps = (long long)ct_trainer_step(t), epochs = (long long)ct_trainer_epoch(t);
    size_t at = (size_t)snprintf(summary, sizeof summary, "done: %lld step%s", steps,
                                 steps == 1 ? "" : "s");
    if (ct_trainer_skipped_steps(t) > 0)
        at += (size_t)snprintf(summary + at, sizeof summary - at, " (%lld skipped)",
                               (long long)ct_trainer_skipped_steps(t));
    if (ct_trainer_spikes(t) > 0)
        at +=
            (size_t)snprintf(summary + at, sizeof summary - at, " (%lld loss spike%s)",
                             (long long)ct_trainer_spikes(t), ct_trainer_spikes(t) == 1 ? "" : "s");
    at += (size_t)snprintf(summary + at, sizeof summary - at, ", %lld epoch%s", epochs,
                           epochs == 1 ? "" : "s");
    if (ct_trainer_current_epoch(t) > epochs) /* max_steps or a stop mid-epoch */
        at += (size_t)snprintf(summary + at, sizeof summary - at, " and part of epoch %lld",
                               (long long)ct_trainer_current_epoch(t));
    const ct_monitor *m = ct_trainer_monitor(t);
    if (m && m->state.has_best)
        at += (size_t)snprintf(summary + at, sizeof summary - at, "; best %s %.4f at step %lld",
                               m->metric, m->state.best, (long long)m->state.best_step);
    int64_t n;
    const ct_metric_value *v = ct_trainer_metrics(t, "test", &n);
    for (int64_t i = 0, shown = 0; i < n && at < sizeof summary; i++) {
        if (strstr(v[i].name, "/confusion/")) continue; /* counts: metrics.jsonl and report */
        at += (size_t)snprintf(summary + at, sizeof summary - at, "%s %s %.4f", shown++ ? "," : ";",
                               v[i].name, v[i].value);
    }
    cli_say(s, "%s", summary);
}

/* The exit code of a fit that ended cleanly: a stop signal's (here or on another rank, said
 * with how to go on), else 0. */
static int stopped(session *s, ct_trainer *t) {
    int rc = cli_stop_code();
    if (rc)
        cli_say(s,
                "stopped by %s at step %lld; a checkpoint was saved: run the same command to go "
                "on",
                cli_stop_name(), (long long)ct_trainer_step(t));
    else if (s->world > 1 && ct_trainer_interrupted(t)) { /* a signal reached another rank */
        rc = EXIT_SIGTERM;
        cli_say(s,
                "stopped by a signal to another rank at step %lld; a checkpoint was saved: run "
                "the same command to go on",
                (long long)ct_trainer_step(t));
    }
    return rc;
}

/* Closes log.txt: a run whose own files are incomplete is not a success. */
static int close_log(session *s, int rc) {
    if (s->log_file && fclose(s->log_file) != 0 && !s->log_errno)
        s->log_errno = errno ? errno : EIO;
    s->log_file = NULL;
    if (cli_log_status(s) != CT_OK) {
        (void)cli_fail(s->ctx, EXIT_RUN_FAILED);
        if (rc == 0) rc = EXIT_RUN_FAILED;
    }
    return rc;
}

/* Trains e to its end or to a stop: the exit code. */
static int train(session *s, const cmd_args *a, const char *out_dir, ct_experiment *e) {
    say_start(s, a->config, out_dir, e);
    char kernels[128];
    ct_experiment_kernels_text(s->ctx, kernels, sizeof kernels);
    cli_say(s, "kernels: %s", kernels);
    cli_catch_stop_signals();
    cli_catch_preempt_signal(s->preempt_signal);
    ct_status st = ct_experiment_fit(e);
    if (st != CT_OK) return failed(s, st);
    ct_trainer *t = ct_experiment_trainer(e);
    say_summary(s, t);
    int rc = cli_after_preemption(s, stopped(s, t)); /* a preemption: the Slurm requeue */
    /* a run stopped cleanly: rank 0's code is the job's. Another rank that left first with a
       non-zero code would make the launcher end the job at once (Open MPI's mpirun kills the
       other ranks), maybe before rank 0 has said where it stopped */
    if (s->silent) rc = 0;
    return close_log(s, rc);
}

static int fit(const cmd_args *a) {
    /* a closed stdout or stderr (`ctrain fit ... | head`) must not end the run: what cannot be
       shown is dropped, log.txt keeps everything */
    (void)signal(SIGPIPE, SIG_IGN);
    cli_route_signals(); /* before the first thread starts */
    session s;
    ct_ctx *ctx;
    int rc = cli_open_session(&s, &ctx);
    if (rc != 0) return rc;
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    const char *out_dir = NULL;
    rc = join_job(&s);
    if (rc == 0) rc = load(&s, a, &cfg, &out_dir);
    if (rc == 0) rc = create(&s, a, cfg, &e);
    if (rc == 0) rc = train(&s, a, out_dir, e);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    if (s.log_file) (void)fclose(s.log_file);
    ct_comm_destroy(s.comm);
    ct_ctx_destroy(ctx);
    return rc;
}

int cli_cmd_fit(int argc, char **argv) {
    cmd_args a;
    char **ov = calloc((size_t)argc + 1, sizeof(char *));
    if (!ov) return EXIT_RUN_FAILED;
    int rc = read_args(argc, argv, &a, ov);
    if (rc < 0) rc = fit(&a);
    free(ov);
    return rc;
}

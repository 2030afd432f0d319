/*
 * replay.c - the replay command: `ctrain replay RUN/incidents/step-N [--json]` makes the step of
 * an incident bundle again and checks that it comes out bit for bit as the bundle recorded it.
 *
 * The run is made again in a scratch directory, never in the run's: the bundle's config.yaml
 * with output_dir pointed there, resumed from a copy of the checkpoint the bundle names
 * (replay_from; none: from the seed), until the replayed run writes its own bundle of the same
 * name (or makes step N without one). The two incident.json files are then compared key by key
 * in a fixed order (the batch first, then the loss, the decision and the statistics), and the
 * first difference is said with the step and the batch's samples. Ownership: the command frees
 * what it allocates and removes the scratch directory.
 */
#define _XOPEN_SOURCE 700 /* realpath(3), which POSIX.1-2008 without XSI does not declare */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "ctrain/checkpoint.h"

#define RP_PATH 4096

typedef struct replay {
    char bundle[PATH_MAX], run[PATH_MAX], name[PATH_MAX], scratch[RP_PATH];
    bool json, made_scratch;
    json_t *want, *got;
    int64_t step, from; /* the incident's step; the checkpoint's step, -1 from the seed */
    /* during the replayed fit */
    ct_experiment *e;
    char got_path[RP_PATH + PATH_MAX + 32];
    bool found, made;
    int64_t first, last; /* the replayed window of step N: its batches; first -1: not begun */
    int64_t *samples, n_samples, cap;
    /* the verdict */
    char what[2048];
} replay;

/* ---- arguments and the bundle ---- */

static int read_args(int argc, char **argv, replay *r, const char **path) {
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    optind = 1;
    opterr = 0;
    *path = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "-h", opts, NULL)) != -1) {
        if (c == 1 && !*path) {
            *path = optarg;
        } else if (c == 'j') {
            r->json = true;
        } else if (c == 'h') {
            cli_cmd_usage(stdout, "replay");
            return 0;
        } else {
            (void)fprintf(stderr, "ctrain replay: %s '%s'\n",
                          c == 1 ? "unexpected argument" : "unknown option", argv[optind - 1]);
            cli_cmd_usage(stderr, "replay");
            return EXIT_USAGE;
        }
    }
    if (!*path) {
        (void)fprintf(stderr, "ctrain replay: missing BUNDLE (RUN/incidents/step-N)\n");
        cli_cmd_usage(stderr, "replay");
        return EXIT_USAGE;
    }
    return -1;
}

/* A bad bundle: said, exit 2. */
static int bad_input(const char *fmt, ...) CT_PRINTF(1, 2);
static int bad_input(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    (void)fputs("ctrain replay: ", stderr);
    (void)vfprintf(stderr, fmt, ap);
    (void)fputc('\n', stderr);
    va_end(ap);
    return EXIT_USAGE;
}

/* Reads the bundle at path: its incident.json, the step, the run it belongs to and the
 * checkpoint to start from. -1 to go on, or the exit code once said. */
static int read_bundle(replay *r, const char *path) {
    char file[PATH_MAX + 32];
    struct stat st;
    if (!realpath(path, r->bundle) || stat(r->bundle, &st) != 0 || !S_ISDIR(st.st_mode))
        return bad_input("%s: not an incident bundle (a folder RUN/incidents/step-N)", path);
    (void)snprintf(file, sizeof file, "%s/incident.json", r->bundle);
    json_error_t err;
    r->want = json_load_file(file, 0, &err);
    if (!r->want) {
        char where[64];
        (void)snprintf(where, sizeof where, ":%d: %.40s", err.line, err.text);
        return access(file, F_OK) != 0
                   ? bad_input("%s: not an incident bundle (no incident.json)", path)
                   : bad_input("%s%s", file, where);
    }
    json_t *step = json_object_get(r->want, "step"),
           *from = json_object_get(r->want, "replay_from");
    if (!json_is_integer(step) || json_integer_value(step) < 1)
        return bad_input("%s: key 'step': expected a step number from 1", file);
    if (!from)
        return bad_input("%s: no key 'replay_from': expected the checkpoint to replay from (an "
                         "object with 'step' and 'checkpoint', or null)",
                         file);
    json_t *world = json_object_get(r->want, "world_size");
    if (json_is_integer(world) && json_integer_value(world) > 1)
        return bad_input("%s: an incident of a run of %lld processes; replay makes the step in "
                         "one, which would train on another share of the data",
                         file, (long long)json_integer_value(world));
    r->step = (int64_t)json_integer_value(step);
    r->from = -1;
    if (!json_is_null(from)) {
        json_t *fs = json_object_get(from, "step");
        if (!json_is_integer(fs) || json_integer_value(fs) < 0)
            return bad_input("%s: key 'replay_from.step': expected a step number", file);
        r->from = (int64_t)json_integer_value(fs);
    }
    (void)snprintf(file, sizeof file, "%s/config.yaml", r->bundle);
    if (access(file, R_OK) != 0)
        return bad_input("%s: not an incident bundle (no config.yaml)", path);
    /* RUN/incidents/NAME */
    const char *slash = strrchr(r->bundle, '/');
    (void)snprintf(r->name, sizeof r->name, "%s", slash ? slash + 1 : r->bundle);
    (void)snprintf(r->run, sizeof r->run, "%s", r->bundle);
    for (int up = 0; up < 2; up++) {
        char *s = strrchr(r->run, '/');
        if (s && s != r->run)
            *s = '\0';
        else
            (void)snprintf(r->run, sizeof r->run, "/");
    }
    if (r->from >= 0) {
        char ck[PATH_MAX + 64];
        (void)snprintf(ck, sizeof ck, "%s/checkpoints/step-%08lld", r->run, (long long)r->from);
        if (stat(ck, &st) != 0 || !S_ISDIR(st.st_mode))
            return bad_input("%s: the checkpoint this incident replays from is gone (%s); the "
                             "step cannot be made again without it",
                             ck, strerror(errno ? errno : ENOENT));
    }
    return -1;
}

/* ---- the scratch run ---- */

/* Removes path and what it holds (plain files and directories). */
static void remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    DIR *d = S_ISDIR(st.st_mode) ? opendir(path) : NULL;
    for (struct dirent *de; d && (de = readdir(d));) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        char sub[RP_PATH + 300];
        (void)snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
        remove_tree(sub);
    }
    if (d) (void)closedir(d);
    (void)remove(path);
}

static bool copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    bool ok = in && out;
    char buf[65536];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    if (in) (void)fclose(in);
    if (out) ok = fclose(out) == 0 && ok;
    return ok;
}

/* The scratch directory with the bundle's config.yaml and a copy of the checkpoint named
 * `latest`, so that a fit there resumes from it. 0, or the exit code once said. */
static int make_scratch(replay *r, ct_ctx *ctx) {
    const char *tmp = getenv("TMPDIR");
    (void)snprintf(r->scratch, sizeof r->scratch, "%s/ctrain-replay-XXXXXX",
                   tmp && tmp[0] ? tmp : "/tmp");
    r->made_scratch = mkdtemp(r->scratch) != NULL;
    char from[RP_PATH + 600], to[RP_PATH + 600];
    if (!r->made_scratch) {
        (void)fprintf(stderr, "ctrain replay: %s: cannot be created: %s\n", r->scratch,
                      strerror(errno));
        return EXIT_RUN_FAILED;
    }
    (void)snprintf(from, sizeof from, "%s/config.yaml", r->bundle);
    (void)snprintf(to, sizeof to, "%s/config.yaml", r->scratch);
    bool ok = copy_file(from, to);
    if (ok && r->from >= 0) {
        char src[RP_PATH + 64], dst[RP_PATH + 64];
        (void)snprintf(src, sizeof src, "%s/checkpoints/step-%08lld", r->run, (long long)r->from);
        (void)snprintf(dst, sizeof dst, "%s/checkpoints", r->scratch);
        ok = mkdir(dst, 0777) == 0;
        (void)snprintf(dst, sizeof dst, "%s/checkpoints/step-%08lld", r->scratch,
                       (long long)r->from);
        ok = ok && mkdir(dst, 0777) == 0;
        DIR *d = ok ? opendir(src) : NULL;
        ok = ok && d;
        for (struct dirent *de; ok && (de = readdir(d));) {
            if (de->d_name[0] == '.') continue;
            (void)snprintf(from, sizeof from, "%s/%s", src, de->d_name);
            (void)snprintf(to, sizeof to, "%s/%s", dst, de->d_name);
            ok = copy_file(from, to);
        }
        if (d) (void)closedir(d);
        if (ok && ct_checkpoint_set_pointer(ctx, r->scratch, "latest", r->from) != CT_OK) {
            (void)fprintf(stderr, "ctrain replay: %s\n", ct_last_error(ctx));
            return EXIT_RUN_FAILED;
        }
    }
    if (!ok) {
        (void)fprintf(stderr, "ctrain replay: copying %s to %s: %s\n", from, to, strerror(errno));
        return EXIT_RUN_FAILED;
    }
    return 0;
}

/* The replayed fit's incident: the one that makes a bundle of the same name is the one. */
static void on_incident(void *user, ct_trainer *t, const ct_incident *in) {
    (void)t;
    replay *r = user;
    if (in->step != r->step || r->found) return;
    r->found = access(r->got_path, F_OK) == 0;
    r->first = -1; /* another window makes step N next (after a skip or a rollback) */
}

/* The batches of step N's window and their samples (the last window at step N: one that ends
 * without an incident is the step made). */
static ct_status on_iteration_start(void *user, ct_trainer *t, int64_t batch) {
    replay *r = user;
    if (ct_trainer_step(t) + 1 != r->step || r->found) return CT_OK;
    if (r->first < 0 || batch < r->first) r->first = batch;
    r->last = batch;
    return ct_experiment_window_samples(r->e, r->first, r->last, r->samples, r->cap, &r->n_samples);
}

/* The replay ends once the bundle is made, or once step N is made without it. */
static ct_status on_iteration_end(void *user, ct_trainer *t, int64_t batch, double loss) {
    (void)batch;
    (void)loss;
    replay *r = user;
    if (!r->found && ct_trainer_step(t) >= r->step) r->made = true;
    return r->found || r->made ? CT_STOP : CT_OK;
}

/* Trains in the scratch directory until the incident's step: 0, or the exit code once said. */
static int replay_run(replay *r, ct_ctx *ctx) {
    char out[RP_PATH + 32], cfg_path[PATH_MAX + 32];
    (void)snprintf(out, sizeof out, "output_dir=%s", r->scratch);
    (void)snprintf(r->got_path, sizeof r->got_path, "%s/incidents/%s/incident.json", r->scratch,
                   r->name);
    (void)snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", r->bundle);
    /* resumable keys only: the replayed run keeps the bundle's fingerprint */
    char report[] = "logging.report=none", tb[] = "logging.tensorboard=false",
         csv[] = "logging.csv=false", progress[] = "logging.progress=none";
    char *ov[] = {out, report, tb, csv, progress};
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_status st = cli_load_config(ctx, cfg_path, ov, (int)(sizeof ov / sizeof ov[0]), &cfg);
    if (st == CT_OK) {
        const ct_cfg_node *threads = ct_config_find(ct_config_root(cfg), "threads");
        if (threads) (void)ct_ctx_set_threads(ctx, atoll(threads->value));
        ct_experiment_params ep = ct_experiment_default_params();
        ep.callbacks.user = r;
        ep.callbacks.on_incident = on_incident;
        ep.callbacks.on_iteration_end = on_iteration_end;
        ep.callbacks.on_iteration_start = on_iteration_start;
        st = ct_experiment_create(ctx, cfg, &ep, &e);
        r->e = e;
        if (st != CT_OK) {
            ct_config_destroy(cfg);
            if (r->from >= 0)
                (void)ct_err_wrap(ctx, "replaying from a copy of %s/checkpoints/step-%08lld",
                                  r->run, (long long)r->from);
            return cli_fail(ctx, cli_setup_code(st));
        }
        st = ct_experiment_fit(e);
        r->e = NULL;
    } else {
        return cli_fail(ctx, cli_setup_code(st));
    }
    int rc = 0;
    /* under on_nonfinite stop the incident ends the replayed run as it ended the run */
    if (st != CT_OK && r->from >= 0)
        (void)ct_err_wrap(ctx, "replaying from a copy of %s/checkpoints/step-%08lld", r->run,
                          (long long)r->from);
    if (st != CT_OK && !(st == CT_ERR_NONFINITE && r->found)) {
        if (st == CT_ERR_NONFINITE) {
            char buf[2048];
            (void)snprintf(
                r->what, sizeof r->what,
                "step %lld: no incident bundle %.200s; the replayed run stopped: %.1500s",
                (long long)r->step, r->name, cli_error_text(ctx, buf, sizeof buf));
        } else {
            rc = cli_fail(ctx, st == CT_ERR_CONFIG ? EXIT_USAGE : EXIT_RUN_FAILED);
        }
    }
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    return rc;
}

/* ---- the comparison ---- */

/* A value as compact JSON, into buf. */
static const char *text_of(const json_t *v, char *buf, size_t size) {
    if (!v) return "(absent)";
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    (void)snprintf(buf, size, "%s", s ? s : "?");
    free(s);
    return buf;
}

/* The window's samples of the bundle, for the messages: "[3, 7]" (shortened past 16). */
static const char *samples_text(const json_t *doc, char *buf, size_t size) {
    const json_t *s = json_object_get(doc, "samples");
    if (!json_is_array(s)) return "unknown";
    size_t n = json_array_size(s), at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && i < 16 && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%lld", i ? ", " : "[",
                               (long long)json_integer_value(json_array_get(s, i)));
    if (at < size) (void)snprintf(buf + at, size - at, "%s]", n > 16 ? ", ..." : n == 0 ? "[" : "");
    return buf;
}

/* Compares key in want and got; false with r->what saying the difference. The tensor lists
 * are compared entry by entry, objects key by key, the samples position by position. */
static bool same_key(replay *r, const char *key) {
    json_t *a = json_object_get(r->want, key), *b = json_object_get(r->got, key);
    char ea[512], eb[512], head[400];
    char sm[256];
    (void)snprintf(head, sizeof head, "step %lld (batch of samples %s)", (long long)r->step,
                   samples_text(r->want, sm, sizeof sm));
    if (json_equal(a, b) || (!a && !b)) return true;
    if (json_is_array(a) && json_is_array(b)) {
        size_t na = json_array_size(a), nb = json_array_size(b);
        for (size_t i = 0; i < na && i < nb; i++) {
            json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
            if (json_equal(x, y)) continue;
            if (json_is_object(x) && json_is_object(y)) {
                const char *name = json_string_value(json_object_get(x, "name"));
                const char *k;
                json_t *v;
                json_object_foreach(x, k, v) {
                    const json_t *w = json_object_get(y, k);
                    if (json_equal(v, w)) continue;
                    (void)snprintf(r->what, sizeof r->what,
                                   "%s: %s: tensor '%s': %s: expected %s, got %s", head, key,
                                   name ? name : "?", k, text_of(v, ea, sizeof ea),
                                   text_of(w, eb, sizeof eb));
                    return false;
                }
            }
            (void)snprintf(r->what, sizeof r->what, "%s: %s: position %zu: expected %s, got %s",
                           head, key, i, text_of(x, ea, sizeof ea), text_of(y, eb, sizeof eb));
            return false;
        }
        (void)snprintf(r->what, sizeof r->what, "%s: %s: expected %zu entries, got %zu", head, key,
                       na, nb);
        return false;
    }
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v) {
            const json_t *w = json_object_get(b, k);
            if (json_equal(v, w)) continue;
            (void)snprintf(r->what, sizeof r->what, "%s: %s.%s: expected %s, got %s", head, key, k,
                           text_of(v, ea, sizeof ea), text_of(w, eb, sizeof eb));
            return false;
        }
    }
    (void)snprintf(r->what, sizeof r->what, "%s: %s: expected %s, got %s", head, key,
                   text_of(a, ea, sizeof ea), text_of(b, eb, sizeof eb));
    return false;
}

/* Without a replayed bundle: the samples the replayed step trained on against the bundle's;
 * false with r->what saying the first difference. */
static bool same_samples(replay *r) {
    const json_t *want = json_object_get(r->want, "samples");
    if (!json_is_array(want) || r->first < 0) return true;
    size_t n = json_array_size(want);
    char sm[256], head[400];
    (void)snprintf(head, sizeof head, "step %lld (batch of samples %s)", (long long)r->step,
                   samples_text(r->want, sm, sizeof sm));
    for (size_t i = 0; i < n && (int64_t)i < r->n_samples && (int64_t)i < r->cap; i++) {
        long long a = (long long)json_integer_value(json_array_get(want, i));
        if (a == (long long)r->samples[i]) continue;
        (void)snprintf(r->what, sizeof r->what,
                       "%s: samples: position %zu: expected %lld, got %lld (no incident at the "
                       "replayed step)",
                       head, i, a, (long long)r->samples[i]);
        return false;
    }
    if ((int64_t)n == r->n_samples) return true;
    (void)snprintf(r->what, sizeof r->what,
                   "%s: samples: expected %zu, got %lld (no incident at the replayed step)", head,
                   n, (long long)r->n_samples);
    return false;
}

/* Everything the bundle says about the step, the batch first; false at the first difference.
 * replay_from is the run's, not the step's, and loss is in loss_bits exactly. */
static bool compare(replay *r) {
    static const char *const keys[] = {"step",
                                       "epoch",
                                       "samples",
                                       "loader",
                                       "loss_bits",
                                       "kind",
                                       "action",
                                       "loss_finite",
                                       "grads_finite",
                                       "grad_norm",
                                       "spike",
                                       "first_nonfinite_layer",
                                       "first_nonfinite_grad",
                                       "rng",
                                       "weights",
                                       "gradients",
                                       "activations",
                                       NULL};
    for (int i = 0; keys[i]; i++)
        if (!same_key(r, keys[i])) return false;
    return true;
}

/* The verdict on stdout: a line, or with --json one object. */
static int verdict(replay *r, bool same) {
    const char *kind = json_string_value(json_object_get(r->want, "kind"));
    const char *action = json_string_value(json_object_get(r->want, "action"));
    char from[64];
    if (r->from >= 0)
        (void)snprintf(from, sizeof from, "checkpoint step-%08lld", (long long)r->from);
    else
        (void)snprintf(from, sizeof from, "the seed");
    if (r->json) {
        json_t *o = json_pack("{s:s, s:b, s:I, s:s?, s:s?, s:o, s:s?}", "bundle", r->bundle,
                              "reproduced", same, "step", (json_int_t)r->step, "kind", kind,
                              "action", action, "replayed_from",
                              r->from >= 0 ? json_integer((json_int_t)r->from) : json_null(),
                              "difference", same ? NULL : r->what);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        (void)printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(o);
    } else if (same) {
        (void)printf("reproduced: step %lld (%s, %s) replayed from %s: the samples, the loss, "
                     "the decision and every tensor's statistics are identical\n",
                     (long long)r->step, kind ? kind : "?", action ? action : "?", from);
    } else {
        (void)printf("differs: %s (replayed from %s)\n", r->what, from);
    }
    return same ? 0 : EXIT_RUN_FAILED;
}

static int finish(replay *r, ct_ctx *ctx, int rc) {
    if (r->made_scratch) remove_tree(r->scratch);
    json_decref(r->want);
    json_decref(r->got);
    free(r->samples);
    ct_ctx_destroy(ctx);
    return rc;
}

int cli_cmd_replay(int argc, char **argv) {
    replay *r = calloc(1, sizeof *r);
    if (!r) return EXIT_RUN_FAILED;
    const char *path;
    int rc = read_args(argc, argv, r, &path);
    if (rc < 0 && ct_comm_launched()) {
        (void)fprintf(stderr, "ctrain replay: runs as one process; run it without an MPI "
                              "launcher\n");
        rc = EXIT_USAGE;
    }
    if (rc < 0) rc = read_bundle(r, path);
    if (rc >= 0) {
        json_decref(r->want);
        free(r);
        return rc;
    }
    session s;
    ct_ctx *ctx = NULL;
    if ((rc = cli_open_session(&s, &ctx)) != 0) {
        json_decref(r->want);
        free(r);
        return rc;
    }
    const json_t *ws = json_object_get(r->want, "samples");
    r->cap = (int64_t)(json_is_array(ws) ? json_array_size(ws) : 0) + 1;
    r->first = -1;
    r->samples = calloc((size_t)r->cap, sizeof *r->samples);
    if (!r->samples) rc = EXIT_RUN_FAILED;
    s.quiet = true;
    s.silent = true; /* the replayed run's messages are the run's: only the verdict is said */
    s.progress = PROGRESS_NONE;
    if (rc == 0) rc = make_scratch(r, ctx);
    if (rc == 0) rc = replay_run(r, ctx);
    if (rc == 0 && !r->what[0]) {
        json_error_t err;
        r->got = r->found ? json_load_file(r->got_path, 0, &err) : NULL;
        if (!r->got && !same_samples(r)) {
            /* said by same_samples */
        } else if (!r->got) {
            const char *kind = json_string_value(json_object_get(r->want, "kind"));
            const char *action = json_string_value(json_object_get(r->want, "action"));
            char sm[256];
            (void)snprintf(r->what, sizeof r->what,
                           "step %lld (batch of samples %s): expected an incident (%s, %s), got "
                           "none: the step was %s",
                           (long long)r->step, samples_text(r->want, sm, sizeof sm),
                           kind ? kind : "?", action ? action : "?",
                           r->made ? "made" : "never reached");
        }
    }
    if (rc == 0) rc = verdict(r, !r->what[0] && compare(r));
    rc = finish(r, ctx, rc);
    free(r);
    return rc;
}

/*
 * test_mpi.c - data-parallel training over the MPI communicator, run under
 * `mpirun -np 2` and `-np 3` (tests/CMakeLists.txt).
 *
 * Every rank runs every check; the failures of all ranks are summed at the end, so the job
 * passes only when every rank passed. Each rank also trains the single-process twin of the
 * distributed run (the same experiment with batch_size x world and no communicator) in its
 * own process, which is what the distributed weights are compared with.
 *
 * `test_mpi --stuck` is the collective timeout's test instead: it must end the job (stuck()).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "harness.h"

static ct_ctx *g_ctx;
static ct_comm *g_comm;
static int64_t g_rank, g_world;

/* The experiment: blobs with a test split whose size the world does not divide (501). */
static const char *const k_config = "seed: 5\n"
                                    "threads: 1\n"
                                    "data:\n"
                                    "  train: {type: synthetic, kind: blobs, n: 1500, features: "
                                    "6, classes: 3, seed: 2}\n"
                                    "  test: {type: synthetic, kind: blobs, n: 501, features: 6, "
                                    "classes: 3, seed: 9}\n"
                                    "  batch_size: %d\n"
                                    "  prefetch: 0\n"
                                    "model: {type: mlp, hidden: [16, 16]}\n"
                                    "optimizer: %s\n"
                                    "trainer: {max_steps: %d, max_epochs: 0, bucket_mb: %s, "
                                    "precision: %s, shard_optimizer: %s, grad_clip_norm: %g}\n"
                                    "metrics:\n"
                                    "  test: [accuracy, {type: confusion}]\n"
                                    "checkpoint: {enabled: false}\n"
                                    "logging: {progress: none, report: none}\n";

/* An experiment and the configuration it reads (borrowed by it for its lifetime). */
typedef struct run {
    ct_config *cfg;
    ct_experiment *e;
} run;

static const ct_trainer_callbacks *g_callbacks; /* for the next build, or NULL */
static const char *g_precision = "fp32";        /* trainer.precision of the next build */
static const char *g_shard = "auto";            /* trainer.shard_optimizer of the next build */
static double g_clip = 0.0;                     /* trainer.grad_clip_norm of the next build */

/* bucket_mb < 0: `auto`. */
static run build(const char *optimizer, int batch, int steps, double bucket_mb, ct_comm *comm) {
    char text[2048], mb[32] = "auto";
    if (bucket_mb >= 0.0) (void)snprintf(mb, sizeof mb, "%g", bucket_mb);
    (void)snprintf(text, sizeof text, k_config, batch, optimizer, steps, mb, g_precision, g_shard,
                   g_clip);
    run r = {NULL, NULL};
    ct_status s = ct_config_load_string(g_ctx, "mpi.yaml", text, strlen(text), &r.cfg);
    if (s == CT_OK) s = ct_experiment_resolve(g_ctx, r.cfg);
    ct_experiment_params ep = ct_experiment_default_params();
    ep.read_only = true; /* no run directory */
    ep.comm = comm;
    if (g_callbacks) ep.callbacks = *g_callbacks;
    if (s == CT_OK) s = ct_experiment_create(g_ctx, r.cfg, &ep, &r.e);
    CT_CHECK_MSG(s == CT_OK, "building the experiment: %s", ct_last_error(g_ctx));
    return r;
}

static void done(run *r) {
    ct_experiment_destroy(r->e);
    ct_config_destroy(r->cfg);
}

/* max |a - b| / max |b| over the store: the difference relative to the weights' scale (an
 * element-wise ratio would blow up on the weights that happen to be near zero). */
static double max_rel_diff(const float *a, const float *b, int64_t n) {
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return scale > 0 ? worst / scale : worst;
}

/* Sums differ from rank to rank only if an implementation is broken: every rank must hold
 * rank 0's bits. */
static bool same_on_every_rank(const void *buf, size_t bytes) {
    char *mine = malloc(bytes), *root = malloc(bytes);
    if (!mine || !root) abort();
    memcpy(mine, buf, bytes);
    memcpy(root, buf, bytes);
    CT_CHECK(ct_comm_broadcast(g_comm, root, bytes, 0) == CT_OK);
    float differs = memcmp(mine, root, bytes) != 0 ? 1.0f : 0.0f;
    CT_CHECK(ct_comm_allreduce_sum_f32(g_comm, &differs, 1) == CT_OK);
    free(mine);
    free(root);
    return differs == 0.0f;
}

/* Every other rank sends rank 0 three messages of growing size with one tag; rank 0 takes
 * them from any source as they come, each rank's in the order sent, and answers each. */
static void point_to_point_should_keep_each_senders_order(void) {
    enum { TAG = 5, ANSWER = 6, EACH = 3 };
    if (g_rank == 0) {
        int64_t next[16] = {0};
        for (int64_t k = 0; k < EACH * (g_world - 1); k++) {
            int64_t from = -1;
            int32_t tag = -1;
            size_t bytes = 0;
            CT_CHECK_INT(
                ct_comm_probe(g_comm, CT_COMM_ANY_SOURCE, CT_COMM_ANY_TAG, &from, &tag, &bytes),
                CT_OK);
            CT_CHECK(from >= 1 && from < g_world && from < 16 && tag == TAG);
            if (!(from >= 1 && from < 16)) break;
            int64_t msg[EACH + 1];
            CT_CHECK_INT((int64_t)bytes, (int64_t)((size_t)(next[from] + 1) * sizeof(int64_t)));
            CT_CHECK_INT(ct_comm_recv(g_comm, msg, bytes, from, TAG), CT_OK);
            CT_CHECK_INT(msg[0], from * 100 + next[from]);
            next[from]++;
            CT_CHECK_INT(ct_comm_send(g_comm, msg, sizeof msg[0], from, ANSWER), CT_OK);
        }
    } else {
        int64_t msg[EACH][EACH];
        ct_comm_request req[EACH];
        for (int64_t k = 0; k < EACH; k++) {
            msg[k][0] = g_rank * 100 + k;
            CT_CHECK_INT(
                ct_comm_isend(g_comm, msg[k], (size_t)(k + 1) * sizeof(int64_t), 0, TAG, &req[k]),
                CT_OK);
        }
        for (int64_t k = 0; k < EACH; k++) {
            int64_t answer = -1;
            CT_CHECK_INT(ct_comm_recv(g_comm, &answer, sizeof answer, 0, ANSWER), CT_OK);
            CT_CHECK_INT(answer, g_rank * 100 + k);
        }
        for (int64_t k = 0; k < EACH; k++)
            CT_CHECK_INT(ct_comm_wait_send(g_comm, &req[k]), CT_OK);
    }
    CT_CHECK_INT(ct_comm_recv(g_comm, NULL, 0, g_world, 0), CT_ERR_INVALID_ARG);
}

static void mpi_sum_should_be_exact_and_identical_on_every_rank(void) {
    CT_CHECK(ct_comm_world_size(g_comm) == g_world && g_world >= 2);
    CT_CHECK_MSG(strcmp(ct_comm_name(g_comm), "mpi") == 0, "name %s", ct_comm_name(g_comm));
    enum { N = 100003 }; /* odd, so the algorithms' chunks are uneven */
    float *x = malloc(N * sizeof(float));
    double *d = malloc(N * sizeof(double));
    if (!x || !d) abort();
    ct_rng r = ct_rng_init(77, (uint64_t)g_rank);
    ct_rng_normal(&r, x, N, 0.0f, 1e3f);
    for (int64_t i = 0; i < N; i++)
        d[i] = (double)g_rank + 0.25;
    CT_CHECK(ct_comm_allreduce_sum_f32(g_comm, x, N) == CT_OK);
    CT_CHECK(ct_comm_allreduce_sum_f64(g_comm, d, N) == CT_OK);
    CT_CHECK_MSG(same_on_every_rank(x, N * sizeof(float)), "f32 sums differ across ranks");
    double want = (double)(g_world * (g_world - 1)) / 2.0 + 0.25 * (double)g_world;
    for (int64_t i = 0; i < N; i++)
        if (d[i] != want) {
            CT_CHECK_MSG(false, "f64 sum[%lld] = %.17g, expected %.17g", (long long)i, d[i], want);
            break;
        }
    free(x);
    free(d);
}

/* Distributed training with batch B on W ranks equals one process with batch B x W: the
 * gradient is the mean over the same B x W samples (DistributedSampler's strided shards of
 * the same permutation), summed in another order. With buckets of 0 (one all-reduce after the
 * backward pass), 512 bytes (the 435 parameters in two buckets, the first started during the
 * backward pass) and 1 MiB (one bucket); then the two-bucket case again in bf16 mixed precision.
 * There the rounding is per element, so on 2 ranks (loss scales 1/8 and 1/16, powers of two)
 * sharding changes only the f32 summation order, and the 1e-5 holds; on 3 ranks the incoming
 * gradients scaled by 1/8 and 1/24 round differently to bf16, so the runs agree only to bf16's
 * precision (0.1 relative after 20 steps; measured 0.01 with SGD, 0.05 with Adam). */
static void training_should_match_one_process_with_the_global_batch(void) {
    static const char *const optimizers[] = {"{type: sgd, lr: 0.2, momentum: 0.9}",
                                             "{type: adam, lr: 0.01}"};
    static const double buckets[] = {0.0, 512.0 / 1048576.0, 1.0};
    const int batch = 8, steps = 20;
    for (int c = 0; c < 8; c++) {
        int k = c % 2;
        double mb = buckets[c < 6 ? c / 2 : 1];
        g_precision = c < 6 ? "fp32" : "bf16";
        run dist = build(optimizers[k], batch, steps, mb, g_comm);
        run one = build(optimizers[k], batch * (int)g_world, steps, mb, NULL);
        run fresh = build(optimizers[k], batch, steps, mb, NULL);
        if (dist.e && one.e && fresh.e) {
            CT_CHECK_MSG(ct_experiment_fit(dist.e) == CT_OK, "%s", ct_last_error(g_ctx));
            CT_CHECK_MSG(ct_experiment_fit(one.e) == CT_OK, "%s", ct_last_error(g_ctx));
            CT_CHECK_INT(ct_trainer_step(ct_experiment_trainer(dist.e)), steps);
            int64_t nb = ct_trainer_buckets(ct_experiment_trainer(dist.e));
            CT_CHECK_MSG(c / 2 == 0                 ? nb == 0
                         : c / 2 == 1 || c / 2 == 3 ? nb == 2
                                                    : nb == 1,
                         "%lld buckets of %g MiB", (long long)nb, mb);
            ct_params *pd = ct_experiment_params_store(dist.e);
            ct_params *po = ct_experiment_params_store(one.e);
            int64_t n = ct_params_numel(pd);
            CT_CHECK_INT(n, ct_params_numel(po));
            double rel = max_rel_diff(ct_params_values(pd), ct_params_values(po), n);
            bool pow2 = (g_world & (g_world - 1)) == 0;
            CT_CHECK_MSG(rel <= (c < 6 || pow2 ? 1e-5 : 0.1),
                         "%s, buckets of %g MiB, %s: weights differ from one process by %.3g "
                         "(relative)",
                         optimizers[k], mb, g_precision, rel);
            /* and the ranks did not drift apart by a single bit */
            CT_CHECK_MSG(same_on_every_rank(ct_params_values(pd), sizeof(float) * (size_t)n),
                         "%s, buckets of %g MiB, %s: the ranks' weights differ", optimizers[k], mb,
                         g_precision);
            /* the weights moved: the comparison above is not between two initialisations */
            double moved = max_rel_diff(ct_params_values(pd),
                                        ct_params_values(ct_experiment_params_store(fresh.e)), n);
            CT_CHECK_MSG(moved > 1e-2, "training changed the weights by only %.3g", moved);
        }
        done(&fresh);
        done(&dist);
        done(&one);
    }
    g_precision = "fp32";
}

/* The tests' ranks share this machine: the communicator says so, and `bucket_mb: auto` then
 * shards the update (no buckets, nothing all-reduced), while 1 MiB makes one bucket and keeps
 * the all-reduce. */
static void auto_buckets_should_follow_the_machine_layout(void) {
    CT_CHECK_INT(ct_comm_local_size(g_comm), g_world);
    CT_CHECK(ct_comm_can_share(g_comm));
    run automatic = build("{type: sgd, lr: 0.1}", 8, 1, -1.0, g_comm);
    run one = build("{type: sgd, lr: 0.1}", 8, 1, 1.0, g_comm);
    if (automatic.e && one.e) {
        CT_CHECK_INT(ct_trainer_buckets(ct_experiment_trainer(automatic.e)), 0);
        CT_CHECK_INT(ct_trainer_buckets(ct_experiment_trainer(one.e)), 1);
        CT_CHECK(ct_trainer_sharded(ct_experiment_trainer(automatic.e)));
        CT_CHECK(!ct_trainer_sharded(ct_experiment_trainer(one.e)));
    }
    CT_CHECK(automatic.e && one.e);
    done(&automatic);
    done(&one);
}

/* The buffers of an optimizer's state, concatenated (n floats each), into a new array. */
static float *moments(ct_experiment *e, int32_t *count) {
    ct_optim *o = ct_experiment_optimizer(e);
    int64_t n = ct_params_numel(ct_experiment_params_store(e));
    *count = ct_optim_buffer_count(o);
    float *all = malloc((size_t)(*count > 0 ? *count : 1) * (size_t)n * sizeof(float));
    if (!all) abort();
    for (int32_t k = 0; k < *count; k++) {
        const char *name;
        float *buf;
        CT_CHECK(ct_optim_buffer(o, k, &name, &buf) == CT_OK);
        if (buf) memcpy(all + (size_t)k * (size_t)n, buf, (size_t)n * sizeof(float));
    }
    return all;
}

/* The sharded update (each rank updates its part of the weights and moments from the summed
 * gradients in shared memory, then copies the others' parts) against the all-reduce that
 * every rank applies whole: the same sum in rank order, so on 2 ranks the same bits, weights
 * and optimizer state alike (the moments made whole at the end of fit); on 3 ranks within
 * 1e-5 of one process as the all-reduce is. With norm clipping the global norm is summed by
 * parts, so only within 1e-5. Every rank holds the same bits in every case. */
static void sharded_update_should_equal_the_all_reduce(void) {
    static const char *const optimizers[] = {"{type: sgd, lr: 0.2, momentum: 0.9}",
                                             "{type: adamw, lr: 0.01}"};
    const int batch = 8, steps = 20;
    for (int c = 0; c < 4; c++) {
        const char *opt = optimizers[c % 2];
        g_clip = c < 2 ? 0.0 : 0.05; /* small enough to clip most steps */
        g_shard = "always";
        run sharded = build(opt, batch, steps, -1.0, g_comm);
        g_shard = "never";
        run plain = build(opt, batch, steps, 0.0, g_comm);
        g_shard = "auto";
        run one = build(opt, batch * (int)g_world, steps, 0.0, NULL);
        if (sharded.e && plain.e && one.e) {
            CT_CHECK_MSG(ct_experiment_fit(sharded.e) == CT_OK, "%s", ct_last_error(g_ctx));
            CT_CHECK_MSG(ct_experiment_fit(plain.e) == CT_OK, "%s", ct_last_error(g_ctx));
            CT_CHECK_MSG(ct_experiment_fit(one.e) == CT_OK, "%s", ct_last_error(g_ctx));
            CT_CHECK(ct_trainer_sharded(ct_experiment_trainer(sharded.e)));
            CT_CHECK(!ct_trainer_sharded(ct_experiment_trainer(plain.e)));
            ct_params *ps = ct_experiment_params_store(sharded.e);
            ct_params *pp = ct_experiment_params_store(plain.e);
            ct_params *po = ct_experiment_params_store(one.e);
            int64_t n = ct_params_numel(ps);
            size_t bytes = (size_t)n * sizeof(float);
            int32_t ks, kp;
            float *ms = moments(sharded.e, &ks), *mp = moments(plain.e, &kp);
            CT_CHECK_INT(ks, kp);
            bool exact = g_world == 2 && g_clip == 0.0;
            if (exact) {
                CT_CHECK_MSG(memcmp(ct_params_values(ps), ct_params_values(pp), bytes) == 0,
                             "%s: sharded and all-reduced weights differ", opt);
                CT_CHECK_MSG(memcmp(ms, mp, (size_t)ks * bytes) == 0,
                             "%s: sharded and all-reduced optimizer state differ", opt);
            }
            double rel = max_rel_diff(ct_params_values(ps), ct_params_values(po), n);
            CT_CHECK_MSG(rel <= 1e-5, "%s, clip %g: weights differ from one process by %.3g", opt,
                         g_clip, rel);
            double mrel = max_rel_diff(ms, mp, (int64_t)ks * n);
            CT_CHECK_MSG(mrel <= 1e-5, "%s, clip %g: moments differ from the all-reduce's by %.3g",
                         opt, g_clip, mrel);
            CT_CHECK_MSG(same_on_every_rank(ct_params_values(ps), bytes),
                         "%s: the ranks' weights differ", opt);
            CT_CHECK_MSG(same_on_every_rank(ms, (size_t)ks * bytes),
                         "%s: the ranks' optimizer states differ after fit", opt);
            free(ms);
            free(mp);
        }
        done(&sharded);
        done(&plain);
        done(&one);
    }
    g_clip = 0.0;
}

/* Evaluating 501 samples on W ranks (unequal shards, none padded) gives one process's values
 * bit for bit, the loss included (whole batches per rank, exact sums: metrics.h). */
static void evaluation_should_equal_one_process(void) {
    run dist = build("{type: sgd, lr: 0.1}", 8, 5, 1.0, g_comm);
    run one = build("{type: sgd, lr: 0.1}", 8, 5, 1.0, NULL);
    if (dist.e && one.e) {
        CT_CHECK(ct_experiment_fit(dist.e) == CT_OK);
        ct_params *pd = ct_experiment_params_store(dist.e);
        ct_params *po = ct_experiment_params_store(one.e);
        memcpy(ct_params_values(po), ct_params_values(pd),
               sizeof(float) * (size_t)ct_params_numel(pd));
        ct_trainer *td = ct_experiment_trainer(dist.e), *to = ct_experiment_trainer(one.e);
        CT_CHECK_MSG(ct_trainer_evaluate(td, "test") == CT_OK, "%s", ct_last_error(g_ctx));
        CT_CHECK_MSG(ct_trainer_evaluate(to, "test") == CT_OK, "%s", ct_last_error(g_ctx));
        int64_t nd, no;
        const ct_metric_value *vd = ct_trainer_metrics(td, "test", &nd);
        const ct_metric_value *vo = ct_trainer_metrics(to, "test", &no);
        CT_CHECK_INT(nd, no);
        int64_t counted = 0;
        bool saw_loss = false;
        for (int64_t i = 0; i < nd && i < no; i++) {
            CT_CHECK(strcmp(vd[i].name, vo[i].name) == 0);
            CT_CHECK_MSG(memcmp(&vd[i].value, &vo[i].value, sizeof(double)) == 0,
                         "%s: %.17g on %lld ranks, %.17g in one", vd[i].name, vd[i].value,
                         (long long)g_world, vo[i].value);
            if (strstr(vd[i].name, "/confusion/")) counted += (int64_t)vd[i].value;
            if (strcmp(vd[i].name, "test/loss") == 0) saw_loss = true;
        }
        CT_CHECK(saw_loss);
        CT_CHECK_INT(counted, 501); /* every sample once: nothing padded, nothing dropped */
    }
    done(&dist);
    done(&one);
}

/* A callback's CT_STOP on one rank only (rank 1 after its 3rd step's last micro-batch): every
 * rank stops at the same step, at the next point where they agree, and none waits forever. */
static ct_status stop_on_rank_1(void *user, ct_trainer *t, int64_t batch, double loss) {
    (void)user, (void)batch, (void)loss;
    return g_rank == 1 && ct_trainer_step(t) == 3 ? CT_STOP : CT_OK;
}

static void a_stop_on_one_rank_should_stop_every_rank_at_the_same_step(void) {
    ct_trainer_callbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.on_iteration_end = stop_on_rank_1;
    /* with the all-reduce (1 MiB buckets) and with the sharded update (auto), whose step
       agrees on the stop in its own all-reduce of flags */
    for (int sharded = 0; sharded < 2; sharded++) {
        g_callbacks = &cb;
        run r = build("{type: sgd, lr: 0.1}", 8, 50, sharded ? -1.0 : 1.0, g_comm);
        g_callbacks = NULL;
        if (r.e) {
            CT_CHECK(ct_trainer_sharded(ct_experiment_trainer(r.e)) == (sharded != 0));
            CT_CHECK_MSG(ct_experiment_fit(r.e) == CT_OK, "%s", ct_last_error(g_ctx));
            int64_t step = ct_trainer_step(ct_experiment_trainer(r.e));
            CT_CHECK_MSG(step >= 3 && step <= 4, "stopped at step %lld", (long long)step);
            double steps = (double)step;
            CT_CHECK(ct_comm_allreduce_sum_f64(g_comm, &steps, 1) == CT_OK);
            CT_CHECK_MSG(steps == (double)(step * g_world), "the ranks stopped at different steps");
        }
        done(&r);
    }
}

static void pause_s(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0) {
    }
}

/* A rank that comes to a collective later than the others, but within the timeout, ends
 * nothing: the barrier and the sum after it complete (rank 1 is 0.6 s late for a 1 s timeout,
 * several of the watchdog's 50 ms ticks). */
static void a_rank_late_within_the_timeout_should_end_nothing(void) {
    CT_CHECK_INT(ct_comm_set_timeout(g_comm, 1.0), CT_OK);
    ct_comm_set_step(g_comm, 3, "testing");
    if (g_rank == 1) pause_s(0.6);
    CT_CHECK(ct_comm_barrier(g_comm) == CT_OK);
    double one = 1.0;
    CT_CHECK(ct_comm_allreduce_sum_f64(g_comm, &one, 1) == CT_OK);
    CT_CHECK(one == (double)g_world);
    CT_CHECK_INT(ct_comm_set_timeout(g_comm, 0.0), CT_OK); /* off: a longer delay is fine */
    if (g_rank == 0) pause_s(1.2);
    CT_CHECK(ct_comm_barrier(g_comm) == CT_OK);
    CT_CHECK_INT(ct_comm_set_timeout(g_comm, CT_COMM_DEFAULT_TIMEOUT_S), CT_OK);
    CT_CHECK_INT(ct_comm_set_timeout(g_comm, -1.0), CT_ERR_INVALID_ARG);
}

/* `test_mpi --stuck` (tests/CMakeLists.txt, 3 ranks): rank 1 computes for 30 s while the
 * others wait in a barrier with a 1 s timeout; rank 2 arrives 0.6 s after rank 0, and its
 * watchdog answers rank 0's report. The job must end within seconds, saying that rank 1 did not
 * arrive where ranks 0 and 2 waited; reaching the end of this function is the failure. */
static int stuck(void) {
    if (ct_comm_set_timeout(g_comm, 1.0) != CT_OK) return 1;
    ct_comm_set_step(g_comm, 12, "testing");
    if (g_rank == 1) pause_s(30.0);
    if (g_rank == 2) pause_s(0.6);
    ct_status s = ct_comm_barrier(g_comm);
    if (g_rank == 0)
        fprintf(stderr, "test_mpi --stuck: the barrier %s after rank 1's 30 s: no timeout\n",
                s == CT_OK ? "completed" : "failed");
    return 1;
}

int main(int argc, char **argv) {
    ct_ctx_params cp = ct_ctx_default_params();
    if (ct_ctx_create(&cp, &g_ctx) != CT_OK) return 1;
    if (ct_comm_create_mpi(g_ctx, &g_comm) != CT_OK) {
        fprintf(stderr, "test_mpi: %s\n", ct_last_error(g_ctx));
        ct_ctx_destroy(g_ctx);
        return 1;
    }
    g_rank = ct_comm_rank(g_comm);
    g_world = ct_comm_world_size(g_comm);
    if (argc > 1 && strcmp(argv[1], "--stuck") == 0) {
        int rc = stuck();
        ct_comm_destroy(g_comm);
        ct_ctx_destroy(g_ctx);
        return rc;
    }
    CT_RUN(mpi_sum_should_be_exact_and_identical_on_every_rank);
    CT_RUN(point_to_point_should_keep_each_senders_order);
    CT_RUN(training_should_match_one_process_with_the_global_batch);
    CT_RUN(auto_buckets_should_follow_the_machine_layout);
    CT_RUN(sharded_update_should_equal_the_all_reduce);
    CT_RUN(evaluation_should_equal_one_process);
    CT_RUN(a_stop_on_one_rank_should_stop_every_rank_at_the_same_step);
    CT_RUN(a_rank_late_within_the_timeout_should_end_nothing);
    double failures = ct_test_failures;
    if (ct_comm_allreduce_sum_f64(g_comm, &failures, 1) != CT_OK) failures = 1;
    int rc = ct_test_finish();
    if (g_rank == 0)
        printf("test_mpi: %lld ranks, %.0f failed checks in all\n", (long long)g_world, failures);
    ct_comm_destroy(g_comm);
    ct_ctx_destroy(g_ctx);
    return failures != 0 ? 1 : rc;
}

/*
 * test_dist.c - the communicator front end: the single-process implementation, argument
 * checks, the mean all-reduce, and a caller-provided implementation (a simulated world of
 * three identical ranks) through ct_comm_create_with, and the collective timeout's checks.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "test_alloc.h"

static ct_ctx *ctx;

static void single_comm_should_be_rank_0_of_1(void) {
    ct_comm *c = NULL;
    CT_CHECK_INT(ct_comm_create_single(ctx, &c), CT_OK);
    CT_CHECK_INT(ct_comm_rank(c), 0);
    CT_CHECK_INT(ct_comm_world_size(c), 1);
    CT_CHECK_INT(ct_comm_local_size(c), 1);
    CT_CHECK(ct_comm_is_root(c));
    CT_CHECK(strcmp(ct_comm_name(c), "single") == 0);
    float f[3] = {1, 2, 3};
    double d[2] = {4, 5};
    CT_CHECK_INT(ct_comm_allreduce_sum_f32(c, f, 3), CT_OK);
    CT_CHECK_INT(ct_comm_allreduce_mean_f32(c, f, 3), CT_OK);
    CT_CHECK_INT(ct_comm_allreduce_sum_f64(c, d, 2), CT_OK);
    CT_CHECK(f[2] == 3.0f && d[1] == 5.0);
    CT_CHECK_INT(ct_comm_broadcast(c, f, sizeof f, 0), CT_OK);
    CT_CHECK_INT(ct_comm_broadcast(c, f, sizeof f, 1), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "root 1 of world size 1") != NULL);
    CT_CHECK_INT(ct_comm_allreduce_sum_f32(c, NULL, 4), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_comm_allreduce_sum_f32(c, f, -1), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_comm_barrier(c), CT_OK);
    ct_comm_destroy(c);
    ct_comm_destroy(NULL);
}

/* One process has nobody to send to: point-to-point calls fail, naming the communicator. */
static void single_comm_should_refuse_point_to_point(void) {
    ct_comm *c = NULL;
    CT_CHECK_INT(ct_comm_create_single(ctx, &c), CT_OK);
    CT_CHECK(!ct_comm_has_p2p(c));
    char byte = 1;
    CT_CHECK_INT(ct_comm_send(c, &byte, 1, 0, 0), CT_ERR_DIST);
    CT_CHECK(strstr(ct_last_error(ctx), "communicator 'single' has no point-to-point") != NULL);
    int64_t from;
    int32_t tag;
    size_t bytes;
    CT_CHECK_INT(ct_comm_probe(c, CT_COMM_ANY_SOURCE, CT_COMM_ANY_TAG, &from, &tag, &bytes),
                 CT_ERR_DIST);
    ct_comm_destroy(c);
}

/* Three ranks holding the same data: a sum is 3x the buffer. */
typedef struct fake {
    int64_t rank, world;
    int *destroyed;
} fake;

static int64_t fake_rank(const void *s) {
    return ((const fake *)s)->rank;
}

static int64_t fake_world(const void *s) {
    return ((const fake *)s)->world;
}

static ct_status fake_f32(void *s, ct_ctx *c, float *b, int64_t n) {
    (void)c;
    for (int64_t i = 0; i < n; i++)
        b[i] *= (float)((fake *)s)->world;
    return CT_OK;
}

static ct_status fake_f64(void *s, ct_ctx *c, double *b, int64_t n) {
    (void)c;
    for (int64_t i = 0; i < n; i++)
        b[i] *= (double)((fake *)s)->world;
    return CT_OK;
}

static ct_status fake_bcast(void *s, ct_ctx *c, void *b, size_t n, int64_t root) {
    (void)s, (void)b, (void)n, (void)root;
    return CT_FAIL(c, CT_ERR_DIST, "fake: broadcast failed on purpose");
}

static ct_status fake_barrier(void *s, ct_ctx *c) {
    (void)s, (void)c;
    return CT_OK;
}

static void fake_destroy(void *s) {
    (*((fake *)s)->destroyed)++;
}

static const ct_comm_vtable fake_vt = {
    "fake", fake_rank, fake_world, fake_f32, fake_f64, fake_bcast, fake_barrier, fake_destroy,
    NULL,   NULL,      NULL,       NULL,     NULL,     NULL,       NULL,         NULL,
    NULL,   NULL,      NULL,       NULL,     NULL,     NULL};

/* What the communicator was told, by the hooks below. */
static double g_timeout = -1.0;
static int64_t g_step = -1;
static const char *g_what;

static ct_status fake_set_timeout(void *s, ct_ctx *c, double seconds) {
    (void)s, (void)c;
    g_timeout = seconds;
    return CT_OK;
}

static void fake_set_step(void *s, int64_t step, const char *what) {
    (void)s;
    g_step = step;
    g_what = what;
}

/* The collective timeout's value is checked once, in the front end, and reaches an
 * implementation that has one; one process has nothing to time and takes any valid value. */
static void collective_timeout_should_be_checked_and_passed_on(void) {
    ct_comm *one = NULL;
    CT_CHECK_INT(ct_comm_create_single(ctx, &one), CT_OK);
    CT_CHECK_INT(ct_comm_set_timeout(one, 0.0), CT_OK);
    CT_CHECK_INT(ct_comm_set_timeout(one, 600.0), CT_OK);
    CT_CHECK_INT(ct_comm_set_timeout(one, -1.0), CT_ERR_INVALID_ARG);
    CT_CHECK(
        strstr(ct_last_error(ctx), "collective timeout: -1 s, expected 0 (off) or a positive"));
    CT_CHECK_INT(ct_comm_set_timeout(one, (double)NAN), CT_ERR_INVALID_ARG);
    ct_comm_set_step(one, 7, "training");
    ct_comm_destroy(one);

    int destroyed = 0;
    fake f = {0, 2, &destroyed};
    ct_comm_vtable vt = fake_vt;
    vt.set_timeout = fake_set_timeout;
    vt.set_step = fake_set_step;
    ct_comm *c = NULL;
    CT_CHECK_INT(ct_comm_create_with(ctx, &vt, &f, &c), CT_OK);
    CT_CHECK_INT(ct_comm_set_timeout(c, 2.5), CT_OK);
    CT_CHECK(g_timeout == 2.5);
    CT_CHECK_INT(ct_comm_set_timeout(c, -0.5), CT_ERR_INVALID_ARG);
    CT_CHECK(g_timeout == 2.5); /* refused before the implementation sees it */
    ct_comm_set_step(c, 41, "evaluation");
    CT_CHECK(g_step == 41 && g_what && strcmp(g_what, "evaluation") == 0);
    ct_comm_destroy(c);
    CT_CHECK_INT(destroyed, 1);
}

static void custom_comm_should_reduce_and_report_errors(void) {
    int destroyed = 0;
    fake f = {2, 3, &destroyed};
    ct_comm *c = NULL;
    CT_CHECK_INT(ct_comm_create_with(ctx, &fake_vt, &f, &c), CT_OK);
    CT_CHECK(!ct_comm_is_root(c));
    CT_CHECK_INT(ct_comm_local_size(c), 1); /* a vtable without local_size */
    /* no shared memory without shared_create: refused with the reason, nothing allocated */
    CT_CHECK(!ct_comm_can_share(c));
    ct_comm_shared *sh = (ct_comm_shared *)&f;
    CT_CHECK_INT(ct_comm_shared_create(c, 64, &sh), CT_ERR_DIST);
    CT_CHECK(sh == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "the implementation has none") != NULL);
    float g[2] = {1.5f, -3.0f};
    CT_CHECK_INT(ct_comm_allreduce_mean_f32(c, g, 2), CT_OK);
    CT_CHECK(g[0] == 1.5f && g[1] == -3.0f); /* (3 x) / 3 */
    CT_CHECK_INT(ct_comm_broadcast(c, g, sizeof g, 0), CT_ERR_DIST);
    CT_CHECK(strstr(ct_last_error(ctx), "broadcast failed on purpose") != NULL);
    ct_comm_destroy(c);
    CT_CHECK_INT(destroyed, 1);
    /* an inconsistent rank is refused, and the implementation's state is still freed */
    fake bad = {3, 3, &destroyed};
    CT_CHECK_INT(ct_comm_create_with(ctx, &fake_vt, &bad, &c), CT_ERR_DIST);
    CT_CHECK(c == NULL);
    CT_CHECK_INT(destroyed, 2);
    ct_comm_vtable partial = fake_vt;
    partial.barrier = NULL;
    CT_CHECK_INT(ct_comm_create_with(ctx, &partial, &f, &c), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(destroyed, 3);
}

/* The launcher is recognised from its environment, so `ctrain fit` run by hand stays one
 * process even in a build with MPI. */
static void launch_should_be_read_from_the_environment(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS",
                                       "CTRAIN_MPI"};
    for (int i = 0; i < 4; i++)
        (void)unsetenv(vars[i]);
    CT_CHECK(!ct_comm_launched());
    for (int i = 0; i < 3; i++) {
        (void)setenv(vars[i], "1", 1); /* a world of one is not distributed */
        CT_CHECK_MSG(!ct_comm_launched(), "%s=1", vars[i]);
        (void)setenv(vars[i], "4", 1);
        CT_CHECK_MSG(ct_comm_launched(), "%s=4", vars[i]);
        (void)unsetenv(vars[i]);
    }
    (void)setenv("CTRAIN_MPI", "1", 1);
    CT_CHECK(ct_comm_launched());
    (void)unsetenv("CTRAIN_MPI");
    /* a build without MPI says so instead of pretending to be one process */
    if (!ct_comm_mpi_available()) {
        ct_comm *c = NULL;
        CT_CHECK_INT(ct_comm_create_mpi(ctx, &c), CT_ERR_DIST);
        CT_CHECK(c == NULL && strstr(ct_last_error(ctx), "built without MPI"));
    }
    /* abort is for several ranks: one process goes on */
    ct_comm *one = NULL;
    CT_CHECK_INT(ct_comm_create_single(ctx, &one), CT_OK);
    ct_comm_abort(one, 3);
    ct_comm_abort(NULL, 3);
    ct_comm_destroy(one);
}

/* The MPI communicator's library (libctrain_mpi) is loaded only when asked for, this test
 * finding it through its RUNPATH (tests/CMakeLists.txt); one that cannot be loaded is named in
 * the error, with dlerror's reason and what to install. */
static void mpi_library_should_load_on_demand(void) {
    char text[1024];
    (void)unsetenv("CTRAIN_MPI_LIBRARY");
    ct_comm_mpi_library(text, sizeof text);
    if (!ct_comm_mpi_available()) {
        CT_CHECK_MSG(strcmp(text, "none (built without MPI)") == 0, "%s", text);
        return;
    }
    CT_CHECK_MSG(strstr(text, "MPI") && strstr(text, " (loaded on demand from ") &&
                     strstr(text, "/libctrain_mpi.so."),
                 "%s", text);
    const char *missing = "/nonexistent/libctrain_mpi.so.0";
    (void)setenv("CTRAIN_MPI_LIBRARY", missing, 1);
    ct_comm_mpi_library(text, sizeof text);
    CT_CHECK_MSG(strstr(text,
                        "not available (CTRAIN_MPI_LIBRARY=/nonexistent/libctrain_mpi.so.0: "
                        "/nonexistent/libctrain_mpi.so.0: cannot open shared object file") == text,
                 "%s", text);
    ct_comm *c = NULL;
    CT_CHECK_INT(ct_comm_create_mpi(ctx, &c), CT_ERR_DIST);
    const char *e = ct_last_error(ctx);
    CT_CHECK_MSG(c == NULL && strstr(e, "cannot load the MPI communicator: CTRAIN_MPI_LIBRARY=") &&
                     strstr(e, "No such file or directory") && strstr(e, "libopenmpi3"),
                 "%s", e);
#ifdef CT_FAKE_MPI_MODULE
    /* a libctrain_mpi whose MPI library is missing: the message names the library it needs */
    (void)setenv("CTRAIN_MPI_LIBRARY", CT_FAKE_MPI_MODULE, 1);
    CT_CHECK_INT(ct_comm_create_mpi(ctx, &c), CT_ERR_DIST);
    e = ct_last_error(ctx);
    CT_CHECK_MSG(c == NULL && strstr(e, CT_FAKE_MPI_MODULE) &&
                     strstr(e, "libtest_fake_mpi_library.so: cannot open shared object file") &&
                     strstr(e, "Install the MPI library this ctrain was built with"),
                 "%s", e);
#endif
    /* a library that loads but is not libctrain_mpi */
    (void)setenv("CTRAIN_MPI_LIBRARY", "libc.so.6", 1);
    CT_CHECK_INT(ct_comm_create_mpi(ctx, &c), CT_ERR_DIST);
    e = ct_last_error(ctx);
    CT_CHECK_MSG(c == NULL && strstr(e, "exports no ct_mpi_exports: it is not a libctrain_mpi"),
                 "%s", e);
    (void)unsetenv("CTRAIN_MPI_LIBRARY");
}

int main(void) {
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    CT_RUN(single_comm_should_be_rank_0_of_1);
    CT_RUN(single_comm_should_refuse_point_to_point);
    CT_RUN(custom_comm_should_reduce_and_report_errors);
    CT_RUN(launch_should_be_read_from_the_environment);
    CT_RUN(mpi_library_should_load_on_demand);
    CT_RUN(collective_timeout_should_be_checked_and_passed_on);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}

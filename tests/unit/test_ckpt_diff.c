/*
 * test_ckpt_diff.c - comparing checkpoints (ct_checkpoint_diff_create): identical files and
 * directories, one flipped bit found at its flat and multi-index, -0.0 and NaN payloads as
 * differences, the tolerance, shape and dtype mismatches, tensors on one side only, optimizer
 * files, state.json key by key, run directories by their latest checkpoint, paths that are not
 * checkpoints, and every allocation failure freeing what it had.
 */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "test_alloc.h"

static ct_ctx *ctx;
static test_alloc counts;
static char tmpl[] = "/tmp/ct_diff_XXXXXX";
static char *base;

/* fc.weight [3, 2], fc.bias [bias_n], bn.num_batches_tracked (I64 scalar). */
static ct_params *make_store(int64_t bias_n) {
    ct_params *P;
    ct_tensor *t;
    ct_params_create(ctx, &P);
    ct_params_add(P, "fc.weight", CT_F32, 2, (int64_t[]){3, 2}, CT_PARAM_TRAINABLE, &t);
    ct_params_add(P, "fc.bias", CT_F32, 1, (int64_t[]){bias_n}, CT_PARAM_TRAINABLE, &t);
    ct_params_add(P, "bn.num_batches_tracked", CT_I64, 0, NULL, CT_PARAM_BUFFER, &t);
    ct_params_alloc(P);
    for (int64_t i = 0; i < ct_params_numel(P); i++)
        ct_params_values(P)[i] = 0.25f + (float)i * 0.37f;
    *(int64_t *)ct_params_find(P, "bn.num_batches_tracked")->data = 7;
    return P;
}

static char *path_of(const char *name, char *buf) {
    snprintf(buf, 256, "%s/%s", base, name);
    return buf;
}

static char *save_file(ct_params *P, const char *name, char *buf) {
    CT_CHECK_INT(ct_safetensors_save(ctx, P, path_of(name, buf), NULL, 0), CT_OK);
    return buf;
}

static float *weight(ct_params *P) {
    return ct_params_find(P, "fc.weight")->data;
}

static ct_checkpoint_diff *compare(const char *a, const char *b, double tol) {
    ct_checkpoint_diff_params p = ct_checkpoint_diff_default_params();
    p.tolerance = tol;
    ct_checkpoint_diff *d = NULL;
    ct_status s = ct_checkpoint_diff_create(ctx, a, b, &p, &d);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    return d;
}

static const ct_tensor_diff *find(const ct_checkpoint_diff *d, const char *file, const char *name) {
    for (int64_t i = 0; d && i < d->n_tensors; i++)
        if (strcmp(d->tensors[i].file, file) == 0 && strcmp(d->tensors[i].name, name) == 0)
            return &d->tensors[i];
    return NULL;
}

static void diff_should_find_identical_files_identical(void) {
    char a[256], b[256];
    ct_params *P = make_store(3);
    ct_checkpoint_diff *d =
        compare(save_file(P, "same_a.safetensors", a), save_file(P, "same_b.safetensors", b), 0);
    CT_CHECK(d && d->identical);
    CT_CHECK_INT(d ? d->n_tensors : -1, 3);
    CT_CHECK_INT(d ? d->n_same : -1, 3);
    CT_CHECK(d && !d->state_compared && d->n_state == 0);
    const ct_tensor_diff *t = find(d, "model.safetensors", "fc.weight");
    CT_CHECK(t && t->kind == CT_DIFF_SAME && t->numel == 6 && t->first == -1);
    CT_CHECK(t && t->max_abs == 0 && t->cosine == 1.0);
    ct_checkpoint_diff_destroy(d);
    ct_params_destroy(P);
}

static void diff_should_report_one_flipped_bit_at_its_index(void) {
    char a[256], b[256];
    ct_params *P = make_store(3);
    save_file(P, "bit_a.safetensors", a);
    uint32_t bits;
    memcpy(&bits, &weight(P)[3], 4);
    bits ^= 1; /* the last bit of the mantissa of [1, 1] */
    memcpy(&weight(P)[3], &bits, 4);
    save_file(P, "bit_b.safetensors", b);
    ct_checkpoint_diff *d = compare(a, b, 0);
    CT_CHECK(d && !d->identical && d->n_same == 2);
    const ct_tensor_diff *t = find(d, "model.safetensors", "fc.weight");
    CT_CHECK(t && t->kind == CT_DIFF_VALUES);
    CT_CHECK_INT(t ? t->n_diff : -1, 1);
    CT_CHECK_INT(t ? t->first : -1, 3);
    CT_CHECK(t && t->first_index[0] == 1 && t->first_index[1] == 1);
    CT_CHECK(t && t->first_a == (double)(0.25f + 3 * 0.37f) && t->first_b == (double)weight(P)[3]);
    CT_CHECK(t && t->max_abs > 0 && t->max_abs < 1e-6 && t->max_rel < 1e-6);
    ct_checkpoint_diff_destroy(d);
    /* a tolerance above the difference counts it as equal; below it, not */
    d = compare(a, b, 1e-5);
    CT_CHECK(d && d->identical);
    ct_checkpoint_diff_destroy(d);
    d = compare(a, b, 1e-9);
    CT_CHECK(d && !d->identical);
    ct_checkpoint_diff_destroy(d);
    ct_params_destroy(P);
}

static void diff_should_tell_signed_zeros_and_nan_payloads_apart(void) {
    char a[256], b[256];
    ct_params *P = make_store(3);
    weight(P)[0] = 0.0f;
    uint32_t nan1 = 0x7fc00001u, nan2 = 0x7fc00002u;
    memcpy(&weight(P)[5], &nan1, 4);
    save_file(P, "zero_a.safetensors", a);
    weight(P)[0] = -0.0f;
    memcpy(&weight(P)[5], &nan2, 4);
    save_file(P, "zero_b.safetensors", b);
    ct_checkpoint_diff *d = compare(a, b, 0);
    const ct_tensor_diff *t = find(d, "model.safetensors", "fc.weight");
    CT_CHECK(t && t->kind == CT_DIFF_VALUES && t->n_diff == 2 && t->first == 0);
    CT_CHECK(t && t->max_abs == 0); /* they differ in bits, not in value */
    ct_checkpoint_diff_destroy(d);
    d = compare(a, b, 1e-12);
    CT_CHECK(d && d->identical);
    ct_checkpoint_diff_destroy(d);
    ct_params_destroy(P);
}

static void diff_should_report_shapes_and_tensors_on_one_side(void) {
    char a[256], b[256];
    ct_params *P = make_store(3), *Q;
    ct_tensor *t;
    ct_params_create(ctx, &Q);
    ct_params_add(Q, "fc.weight", CT_F32, 2, (int64_t[]){3, 2}, CT_PARAM_TRAINABLE, &t);
    ct_params_add(Q, "fc.bias", CT_F32, 1, (int64_t[]){4}, CT_PARAM_TRAINABLE, &t);
    ct_params_add(Q, "extra", CT_F32, 1, (int64_t[]){2}, CT_PARAM_TRAINABLE, &t);
    ct_params_alloc(Q);
    memcpy(weight(Q), weight(P), 6 * sizeof(float));
    ct_checkpoint_diff *d =
        compare(save_file(P, "shape_a.safetensors", a), save_file(Q, "shape_b.safetensors", b), 0);
    const ct_tensor_diff *w = find(d, "model.safetensors", "fc.weight"),
                         *bias = find(d, "model.safetensors", "fc.bias"),
                         *only_a = find(d, "model.safetensors", "bn.num_batches_tracked"),
                         *only_b = find(d, "model.safetensors", "extra");
    CT_CHECK(w && w->kind == CT_DIFF_SAME);
    CT_CHECK(bias && bias->kind == CT_DIFF_SHAPE && bias->shape_a[0] == 3 &&
             bias->shape_b[0] == 4 && bias->numel == 0);
    CT_CHECK(only_a && only_a->kind == CT_DIFF_ONLY_A && strcmp(only_a->dtype_a, "I64") == 0 &&
             only_a->dtype_b[0] == '\0');
    CT_CHECK(only_b && only_b->kind == CT_DIFF_ONLY_B && only_b->ndim_b == 1);
    CT_CHECK(d && !d->identical && d->n_tensors == 4 && d->n_same == 1);
    ct_checkpoint_diff_destroy(d);
    ct_params_destroy(P);
    ct_params_destroy(Q);
}

/* Writes a safetensors file of one tensor "x" of dtype and 4 bytes of data. */
static void write_one(const char *path, const char *dtype, int n, const void *data) {
    char header[128];
    int hl = snprintf(header, sizeof header,
                      "{\"x\":{\"dtype\":\"%s\",\"shape\":[%d],\"data_offsets\":[0,4]}}", dtype, n);
    while (hl % 8)
        header[hl++] = ' ';
    unsigned char len8[8] = {(unsigned char)hl};
    FILE *f = fopen(path, "wb");
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, (size_t)hl, f);
    fwrite(data, 1, 4, f);
    fclose(f);
}

static void diff_should_compare_other_dtypes_by_value(void) {
    char a[256], b[256];
    float f = 1.5f;
    uint16_t bf[2] = {0x3fc0, 0x3fc0}; /* 1.5 in bf16, twice */
    write_one(path_of("dt_a.safetensors", a), "F32", 1, &f);
    write_one(path_of("dt_b.safetensors", b), "BF16", 2, bf);
    ct_checkpoint_diff *d = compare(a, b, 0);
    const ct_tensor_diff *t = find(d, "model.safetensors", "x");
    CT_CHECK(t && t->kind == CT_DIFF_SHAPE);
    ct_checkpoint_diff_destroy(d);
    uint16_t h[2] = {0x3e00, 0xbc00}; /* 1.5, -1 in f16 */
    write_one(path_of("dt_a.safetensors", a), "BF16", 2, bf);
    write_one(path_of("dt_b.safetensors", b), "F16", 2, h);
    d = compare(a, b, 0);
    t = find(d, "model.safetensors", "x");
    CT_CHECK(t && t->kind == CT_DIFF_DTYPE && t->n_diff == 1 && t->first == 1);
    CT_CHECK(t && t->first_a == 1.5 && t->first_b == -1.0 && t->max_abs == 2.5);
    ct_checkpoint_diff_destroy(d);
}

/* A checkpoint (step 5) of P with an SGD momentum buffer whose element 2 is momentum2, and
 * {"trainer": {"seed": seed, "step": 5}, "rng": [1, seed]} as its state. */
static void save_checkpoint(const char *root, ct_params *P, int seed, float momentum2) {
    ct_optim *opt = NULL;
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
    op.momentum = 0.9f;
    CT_CHECK_INT(ct_optim_create(ctx, P, &op, &opt), CT_OK);
    for (int64_t i = 0; i < ct_params_numel(P); i++)
        ct_params_grads(P)[i] = 0.0f;
    ct_optim_step(opt);
    const char *name = NULL;
    float *m = NULL;
    CT_CHECK_INT(ct_optim_buffer(opt, 0, &name, &m), CT_OK);
    if (m) m[2] = momentum2;
    json_t *state =
        json_pack("{s:{s:i,s:i},s:[i,i]}", "trainer", "seed", seed, "step", 5, "rng", 1, seed);
    ct_checkpoint_save_params sp = ct_checkpoint_save_default_params();
    sp.step = 5;
    sp.optim = opt;
    sp.state = state;
    CT_CHECK_INT(ct_checkpoint_save(ctx, root, P, &sp, NULL, 0), CT_OK);
    json_decref(state);
    ct_optim_destroy(opt);
}

static void diff_should_compare_optimizer_and_state_of_checkpoints(void) {
    char ra[256], rb[256], rc[256], dir[600];
    ct_params *P = make_store(3);
    save_checkpoint(path_of("run_a", ra), P, 1, 0.0f);
    save_checkpoint(path_of("run_b", rb), P, 1, 0.0f);
    save_checkpoint(path_of("run_c", rc), P, 2, 0.5f);
    /* run directories compare their latest checkpoints */
    ct_checkpoint_diff *d = compare(ra, rb, 0);
    CT_CHECK(d && d->identical && d->state_compared && d->n_state == 0);
    CT_CHECK(d && strstr(d->path_a, "run_a/checkpoints/step-00000005") != NULL);
    CT_CHECK(find(d, "optimizer.safetensors", "momentum_buffer") != NULL);
    CT_CHECK(find(d, "optimizer.safetensors", "steps") != NULL);
    ct_checkpoint_diff_destroy(d);
    /* a checkpoint directory against a run: the optimizer element and the state keys */
    snprintf(dir, sizeof dir, "%s/checkpoints/step-00000005", ra);
    d = compare(dir, rc, 0);
    CT_CHECK(d && !d->identical && d->n_same == 4);
    const ct_tensor_diff *t = find(d, "optimizer.safetensors", "momentum_buffer");
    CT_CHECK(t && t->kind == CT_DIFF_VALUES && t->n_diff == 1 && t->first == 2);
    CT_CHECK_INT(d ? d->n_state : -1, 2);
    if (d && d->n_state == 2) {
        CT_CHECK(strcmp(d->state[0].key, "state.trainer.seed") == 0);
        CT_CHECK(strcmp(d->state[0].a, "1") == 0 && strcmp(d->state[0].b, "2") == 0);
        CT_CHECK(strcmp(d->state[1].key, "state.rng[1]") == 0);
    }
    ct_checkpoint_diff_destroy(d);
    /* a plain file against a checkpoint: the model only, no state */
    char file[256];
    d = compare(save_file(P, "plain.safetensors", file), rc, 0);
    CT_CHECK(d && d->identical && !d->state_compared && d->n_tensors == 3);
    ct_checkpoint_diff_destroy(d);
    ct_params_destroy(P);
}

static void diff_should_refuse_what_is_not_a_checkpoint(void) {
    char p[256], q[256], text[256];
    ct_params *P = make_store(3);
    save_file(P, "ok.safetensors", q);
    ct_checkpoint_diff *d = (ct_checkpoint_diff *)1;
    CT_CHECK_INT(ct_checkpoint_diff_create(ctx, path_of("missing", p), q, NULL, &d), CT_ERR_IO);
    CT_CHECK(d == NULL && strstr(ct_last_error(ctx), "missing") != NULL);
    FILE *f = fopen(path_of("notes.txt", text), "w");
    fputs("not a checkpoint at all\n", f);
    fclose(f);
    CT_CHECK_INT(ct_checkpoint_diff_create(ctx, q, text, NULL, &d), CT_ERR_FORMAT);
    CT_CHECK(strstr(ct_last_error(ctx), "notes.txt: expected a run directory, a checkpoint "
                                        "directory or a safetensors file") != NULL);
    /* a pipe (a fifo, the shell's <(...)) has no offsets to read tensors at; the test holds
       its other end open, so that opening it cannot block */
    mkfifo(path_of("pipe", p), 0600);
    int other_end = open(p, O_RDWR);
    CT_CHECK_INT(ct_checkpoint_diff_create(ctx, p, q, NULL, &d), CT_ERR_FORMAT);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "pipe: not a regular file") != NULL, "%s",
                 ct_last_error(ctx));
    if (other_end >= 0) close(other_end);
    mkdir(path_of("empty", p), 0755);
    CT_CHECK_INT(ct_checkpoint_diff_create(ctx, p, q, NULL, &d), CT_ERR_FORMAT);
    CT_CHECK(strstr(ct_last_error(ctx), "empty: expected a run directory") != NULL);
    ct_checkpoint_diff_params dp = ct_checkpoint_diff_default_params();
    dp.tolerance = -1;
    CT_CHECK_INT(ct_checkpoint_diff_create(ctx, q, q, &dp, &d), CT_ERR_INVALID_ARG);
    dp.tolerance = (double)INFINITY;
    CT_CHECK_INT(ct_checkpoint_diff_create(ctx, q, q, &dp, &d), CT_ERR_INVALID_ARG);
    ct_params_destroy(P);
}

/* state.json of the checkpoint directory dir with its "files" replaced by files (stolen). */
static void set_files(const char *dir, json_t *files) {
    char path[700];
    snprintf(path, sizeof path, "%s/state.json", dir);
    json_t *doc = json_load_file(path, 0, NULL);
    CT_CHECK(doc != NULL);
    if (!doc) return;
    json_object_set_new(doc, "files", files);
    CT_CHECK_INT(json_dump_file(doc, path, JSON_INDENT(2)), 0);
    json_decref(doc);
}

/* The files a checkpoint's state.json lists are names in its directory: a path that leads out
 * of it is not followed, and a "files" that is not an object is no checkpoint's. */
static void diff_should_refuse_files_outside_the_checkpoint(void) {
    char run[256], file[256], dir[600];
    ct_params *P = make_store(3);
    save_file(P, "outside.safetensors", file);
    save_checkpoint(path_of("run_files", run), P, 1, 0.0f);
    snprintf(dir, sizeof dir, "%s/checkpoints/step-00000005", run);
    ct_checkpoint_diff *d = (ct_checkpoint_diff *)1;
    json_t *files =
        json_pack("{s:s,s:s}", "model.safetensors", "0", "../../../outside.safetensors", "0");
    set_files(dir, files);
    CT_CHECK_INT(ct_checkpoint_diff_create(ctx, dir, dir, NULL, &d), CT_ERR_FORMAT);
    CT_CHECK(d == NULL);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "'../../../outside.safetensors'") != NULL, "%s",
                 ct_last_error(ctx));
    ct_checkpoint_diff_destroy(d);
    set_files(dir, json_array());
    CT_CHECK_INT(ct_checkpoint_diff_create(ctx, dir, file, NULL, &d), CT_ERR_FORMAT);
    ct_checkpoint_diff_destroy(d);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "state.json: \"files\"") != NULL, "%s",
                 ct_last_error(ctx));
    ct_params_destroy(P);
}

/* ---- a run trained while it is compared ---- */

/* An allocator that, at its `at`-th allocation, makes the run `run` save step 6 with keep 1:
 * latest moves on and step 5, which it named, is deleted. */
typedef struct mover {
    long long n, at;
    const char *run;
    ct_params *P;
} mover;

static void *mover_alloc(void *user, size_t size) {
    mover *m = user;
    if (++m->n == m->at) {
        ct_checkpoint_save_params sp = ct_checkpoint_save_default_params();
        sp.step = 6;
        sp.keep = 1;
        CT_CHECK_INT(ct_checkpoint_save(ctx, m->run, m->P, &sp, NULL, 0), CT_OK);
    }
    return malloc(size);
}

static void mover_free(void *user, void *p, size_t size) {
    (void)user;
    (void)size;
    free(p);
}

/* A run whose latest moves on at any point of a comparison: compared whole, from one
 * checkpoint or the next, never an error for a file that went away. */
static void diff_should_follow_a_run_that_moves_on_while_read(void) {
    char file[256], run[256];
    ct_params *P = make_store(3);
    save_file(P, "moving_other.safetensors", file);
    mover m = {0, 0, run, P};
    ct_ctx_params cp = ct_ctx_default_params();
    cp.n_threads = 1;
    cp.allocator = (ct_allocator){mover_alloc, mover_free, &m};
    ct_ctx *mc = NULL;
    CT_CHECK_INT(ct_ctx_create(&cp, &mc), CT_OK);
    long long moves = 0;
    for (long long k = 1; mc && k < 1000; k++) {
        char name[64];
        snprintf(name, sizeof name, "moving_%lld", k);
        path_of(name, run);
        ct_checkpoint_save_params sp = ct_checkpoint_save_default_params();
        sp.step = 5;
        CT_CHECK_INT(ct_checkpoint_save(ctx, run, P, &sp, NULL, 0), CT_OK);
        m.n = 0;
        m.at = k;
        ct_checkpoint_diff *d = NULL;
        ct_status s = ct_checkpoint_diff_create(mc, run, file, NULL, &d);
        CT_CHECK_MSG(s == CT_OK && d && d->identical, "the run moved on at allocation %lld: %s", k,
                     s == CT_OK ? "compared as different" : ct_last_error(mc));
        ct_checkpoint_diff_destroy(d);
        if (m.n < k) break; /* done before the run moved on */
        moves++;
    }
    CT_CHECK(moves > 3);
    ct_ctx_destroy(mc);
    ct_params_destroy(P);
}

/* Every allocation of a comparison of two checkpoints failing in turn: OOM, nothing left. */
static void diff_should_free_everything_when_an_allocation_fails(void) {
    char ra[256], rc[256];
    path_of("run_a", ra);
    path_of("run_c", rc);
    long long live = counts.live, failures = 0;
    for (long long n = 1; n < 10000; n++) {
        counts.fail_at = counts.n_alloc + n;
        ct_checkpoint_diff *d = NULL;
        ct_status s = ct_checkpoint_diff_create(ctx, ra, rc, NULL, &d);
        counts.fail_at = 0;
        ct_checkpoint_diff_destroy(d);
        CT_CHECK_MSG(counts.live == live, "allocation %lld: %lld bytes left", n,
                     counts.live - live);
        if (s == CT_OK) break;
        CT_CHECK_MSG(s == CT_ERR_OOM && d == NULL, "allocation %lld: %s", n, ct_last_error(ctx));
        failures++;
    }
    CT_CHECK(failures > 10);
    CT_CHECK_INT(counts.size_mismatch, 0);
}

int main(void) {
    base = mkdtemp(tmpl);
    if (!base) return 1;
    ct_ctx_params cp = ct_ctx_default_params();
    cp.n_threads = 1;
    cp.allocator = test_allocator(&counts);
    if (ct_ctx_create(&cp, &ctx) != CT_OK) return 1;
    CT_RUN(diff_should_find_identical_files_identical);
    CT_RUN(diff_should_report_one_flipped_bit_at_its_index);
    CT_RUN(diff_should_tell_signed_zeros_and_nan_payloads_apart);
    CT_RUN(diff_should_report_shapes_and_tensors_on_one_side);
    CT_RUN(diff_should_compare_other_dtypes_by_value);
    CT_RUN(diff_should_compare_optimizer_and_state_of_checkpoints);
    CT_RUN(diff_should_refuse_what_is_not_a_checkpoint);
    CT_RUN(diff_should_refuse_files_outside_the_checkpoint);
    CT_RUN(diff_should_follow_a_run_that_moves_on_while_read);
    CT_RUN(diff_should_free_everything_when_an_allocation_fails);
    ct_ctx_destroy(ctx);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
    return ct_test_finish();
}

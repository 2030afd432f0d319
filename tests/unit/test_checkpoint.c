/*
 * test_checkpoint.c - checkpoint directories: CRC-32C known answers (software and SSE4.2 twins),
 * a bit-exact round trip of model + EMA + optimizer + state, the latest/best pointers, retention
 * that spares best, clean-up of interrupted saves, fallback from a damaged latest with a
 * warning, refusal of a newer format, every flipped bit of state.json and of the pointers
 * detected, format 1 still read, a failed write that leaves everything as it was, and the
 * verification hook called for each file before the checkpoint is published.
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "ctrain/ctrain.h"
#include "harness.h"

typedef struct logs {
    int warnings;
    char last[2048];
} logs;

static ct_ctx *ctx;
static logs captured;
static char tmpl[] = "/tmp/ct_ckpt_XXXXXX";
static char *base;

static void capture(void *user, ct_log_level level, const char *msg) {
    logs *l = user;
    if (level != CT_LOG_WARN) return;
    l->warnings++;
    (void)snprintf(l->last, sizeof l->last, "%s", msg);
}

static ct_params *make_store(float fill, int64_t n) {
    ct_params *P;
    ct_tensor *t;
    ct_params_create(ctx, &P);
    ct_params_add(P, "fc.weight", CT_F32, 2, (int64_t[]){n, 2}, CT_PARAM_TRAINABLE, &t);
    ct_params_add(P, "fc.bias", CT_F32, 1, (int64_t[]){3}, CT_PARAM_TRAINABLE, &t);
    ct_params_add(P, "bn.num_batches_tracked", CT_I64, 0, NULL, CT_PARAM_BUFFER, &t);
    ct_params_alloc(P);
    for (int64_t i = 0; i < ct_params_numel(P); i++)
        ct_params_values(P)[i] = fill + (float)i * 0.37f;
    *(int64_t *)ct_params_find(P, "bn.num_batches_tracked")->data = (int64_t)fill;
    return P;
}

static char *root_of(const char *name, char *buf) {
    snprintf(buf, 256, "%s/%s", base, name);
    return buf;
}

static ct_status save_step(const char *root, ct_params *P, int64_t step, bool best, int64_t keep) {
    ct_checkpoint_save_params sp = ct_checkpoint_save_default_params();
    sp.step = step;
    sp.best = best;
    sp.keep = keep;
    return ct_checkpoint_save(ctx, root, P, &sp, NULL, 0);
}

static void flip_byte(const char *path, long offset) {
    FILE *f = fopen(path, "r+b");
    fseek(f, offset, SEEK_SET);
    int c = fgetc(f);
    fseek(f, offset, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

/* Flips bit `bit` of byte `offset` (and flips it back when called again). */
static void flip_bit(const char *path, long offset, int bit) {
    FILE *f = fopen(path, "r+b");
    fseek(f, offset, SEEK_SET);
    int c = fgetc(f);
    fseek(f, offset, SEEK_SET);
    fputc(c ^ (1 << bit), f);
    fclose(f);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Writes doc as state.json the way a save does: a first line with the CRC-32C of the rest. */
static void write_state_json(const char *path, json_t *doc) {
    char *text = json_dumps(doc, JSON_INDENT(2));
    size_t n = strlen(text);
    FILE *f = fopen(path, "wb");
    fprintf(f, "{\n  \"crc32c\": \"%08x\",\n%s\n", (unsigned)ct_crc32c(0, "", 0), text + 2);
    fclose(f);
    /* the checksum covers what follows the first line: compute it over the written bytes */
    f = fopen(path, "rb");
    char *all = malloc(n + 64);
    size_t got = fread(all, 1, n + 64, f);
    fclose(f);
    uint32_t crc = ct_crc32c(0, all + 26, got - 26);
    f = fopen(path, "r+b");
    fprintf(f, "{\n  \"crc32c\": \"%08x", (unsigned)crc);
    fclose(f);
    free(all);
    free(text);
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void checkpoint_should_round_trip_model_ema_optimizer_and_state(void) {
    char root[256], path[512], loaded[512];
    ct_params *A = make_store(1.0f, 4), *E = make_store(5.0f, 4);
    ct_optim *opt;
    ct_optim_params op = ct_optim_default_params(CT_OPTIM_ADAM);
    CT_CHECK_INT(ct_optim_create(ctx, A, &op, &opt), CT_OK);
    for (int s = 0; s < 3; s++) {
        for (int64_t i = 0; i < ct_params_numel(A); i++)
            ct_params_grads(A)[i] = 0.1f * (float)(i - 4) + (float)s;
        ct_optim_step(opt);
    }
    json_t *state = json_pack("{s:I, s:s, s:f, s:[i,i]}", "rng", (json_int_t)1234567890123LL,
                              "phase", "warmup", "lr", 0.125, "order", 3, 1);
    ct_checkpoint_save_params sp = ct_checkpoint_save_default_params();
    sp.step = 10;
    sp.epoch = 2;
    sp.ema = E;
    sp.optim = opt;
    sp.state = state;
    CT_CHECK_INT(ct_checkpoint_save(ctx, root_of("rt", root), A, &sp, path, sizeof path), CT_OK);
    CT_CHECK(strstr(path, "/checkpoints/step-00000010") != NULL);

    /* state.json records the format, the step and each file's size and checksum */
    char sj[600];
    snprintf(sj, sizeof sj, "%s/state.json", path);
    json_t *doc = json_load_file(sj, 0, NULL);
    CT_CHECK(doc != NULL);
    CT_CHECK_INT(json_integer_value(json_object_get(doc, "format_version")), 2);
    FILE *sf = fopen(sj, "rb");
    char head[32] = "";
    if (sf) {
        CT_CHECK(fread(head, 1, 15, sf) == 15);
        fclose(sf);
    }
    CT_CHECK(strcmp(head, "{\n  \"crc32c\": \"") == 0); /* its own checksum comes first */
    CT_CHECK(strcmp(json_string_value(json_object_get(doc, "ctrain_version")), ct_version()) == 0);
    json_t *files = json_object_get(doc, "files");
    CT_CHECK_INT(json_object_size(files), 3);
    char mp[600];
    snprintf(mp, sizeof mp, "%s/model.safetensors", path);
    struct stat st;
    stat(mp, &st);
    CT_CHECK_INT(
        json_integer_value(json_object_get(json_object_get(files, "model.safetensors"), "bytes")),
        st.st_size);
    json_decref(doc);

    ct_params *B = make_store(-3.0f, 4), *F = make_store(-4.0f, 4);
    ct_optim *opt2;
    CT_CHECK_INT(ct_optim_create(ctx, B, &op, &opt2), CT_OK);
    json_t *got = NULL;
    int64_t step = -1, epoch = -1;
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", B, F, opt2, &got, &step, &epoch, loaded,
                                    sizeof loaded),
                 CT_OK);
    CT_CHECK_INT(step, 10);
    CT_CHECK_INT(epoch, 2);
    CT_CHECK(strcmp(loaded, path) == 0);
    CT_CHECK(json_equal(got, state));
    int64_t n = ct_params_numel(A);
    CT_CHECK(memcmp(ct_params_values(A), ct_params_values(B), (size_t)n * 4) == 0);
    CT_CHECK(memcmp(ct_params_values(E), ct_params_values(F), (size_t)n * 4) == 0);
    CT_CHECK_INT(*(int64_t *)ct_params_find(B, "bn.num_batches_tracked")->data, 1);
    CT_CHECK_INT(*(int64_t *)ct_params_find(F, "bn.num_batches_tracked")->data, 5);
    CT_CHECK_INT(ct_optim_steps(opt2), 3);
    CT_CHECK_INT(ct_optim_buffer_count(opt2), ct_optim_buffer_count(opt));
    for (int32_t i = 0; i < ct_optim_buffer_count(opt); i++) {
        const char *n1, *n2;
        float *d1, *d2;
        ct_optim_buffer(opt, i, &n1, &d1);
        ct_optim_buffer(opt2, i, &n2, &d2);
        CT_CHECK(strcmp(n1, n2) == 0);
        CT_CHECK(memcmp(d1, d2, (size_t)n * 4) == 0);
    }
    json_decref(got);

    /* a requested optimizer the checkpoint lacks is an error with a hint */
    CT_CHECK_INT(save_step(root, A, 11, false, 0), CT_OK);
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", B, NULL, opt2, NULL, NULL, NULL, NULL, 0),
                 CT_ERR_FORMAT);
    CT_CHECK(strstr(ct_last_error(ctx), "no optimizer state") != NULL);
    /* a model of another shape is refused, naming the tensor, and does not fall back */
    ct_params *C = make_store(0.0f, 5);
    captured.warnings = 0;
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", C, NULL, NULL, NULL, NULL, NULL, NULL, 0),
                 CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "fc.weight") != NULL);
    CT_CHECK_INT(captured.warnings, 0);
    ct_params_destroy(C);

    json_decref(state);
    ct_optim_destroy(opt);
    ct_optim_destroy(opt2);
    ct_params_destroy(A);
    ct_params_destroy(B);
    ct_params_destroy(E);
    ct_params_destroy(F);
}

static void checkpoint_should_keep_the_newest_and_never_delete_best(void) {
    char root[256], p[512];
    ct_params *A = make_store(1.0f, 4);
    root_of("keep", root);
    for (int64_t s = 1; s <= 6; s++) {
        *(int64_t *)ct_params_find(A, "bn.num_batches_tracked")->data = s;
        CT_CHECK_INT(save_step(root, A, s * 100, s == 2, 2), CT_OK);
    }
    int64_t steps[8], count = 0;
    CT_CHECK_INT(ct_checkpoint_list(ctx, root, steps, 8, &count), CT_OK);
    CT_CHECK_INT(count, 3);
    CT_CHECK_INT(steps[0], 600);
    CT_CHECK_INT(steps[1], 500);
    CT_CHECK_INT(steps[2], 200);
    snprintf(p, sizeof p, "%s/checkpoints/latest", root);
    char text[64] = "";
    FILE *f = fopen(p, "rb");
    CT_CHECK(f != NULL);
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    char want[64];
    snprintf(want, sizeof want, "step-00000600\ncrc32c %08x\n",
             (unsigned)ct_crc32c(0, "step-00000600", 13));
    CT_CHECK_MSG(strcmp(text, want) == 0, "%s", text);
    ct_params *B = make_store(0.0f, 4);
    int64_t step = 0;
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "best", B, NULL, NULL, NULL, &step, NULL, NULL, 0),
                 CT_OK);
    CT_CHECK_INT(step, 200);
    CT_CHECK_INT(*(int64_t *)ct_params_find(B, "bn.num_batches_tracked")->data, 2);
    CT_CHECK_INT(
        ct_checkpoint_load(ctx, root, "step-00000500", B, NULL, NULL, NULL, &step, NULL, NULL, 0),
        CT_OK);
    CT_CHECK_INT(step, 500);
    /* a save of a step that exists is refused, and changes nothing */
    CT_CHECK_INT(save_step(root, A, 500, false, 2), CT_ERR_IO);
    CT_CHECK(strstr(ct_last_error(ctx), "step-00000500: already exists") != NULL);
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", B, NULL, NULL, NULL, &step, NULL, NULL, 0),
                 CT_OK);
    CT_CHECK_INT(step, 600);
    ct_params_destroy(A);
    ct_params_destroy(B);
}

static void checkpoint_should_replace_a_step_when_asked(void) {
    char root[256], p[512], q[600];
    ct_params *A = make_store(1.0f, 4), *B = make_store(0.0f, 4);
    root_of("replace", root);
    for (int64_t s = 1; s <= 5; s++) {
        *(int64_t *)ct_params_find(A, "bn.num_batches_tracked")->data = s;
        CT_CHECK_INT(save_step(root, A, s, s == 2, 0), CT_OK);
    }
    /* a resumed run re-makes step 2: replaced with a warning, `best` (which named the old
     * step 2) removed, latest on the new one, and keep=2 counts only steps up to 2, so the
     * abandoned 3..5 and step 1 all stay */
    *(int64_t *)ct_params_find(A, "bn.num_batches_tracked")->data = 42;
    ct_checkpoint_save_params sp = ct_checkpoint_save_default_params();
    sp.step = 2;
    sp.keep = 2;
    sp.replace = true;
    int before = captured.warnings;
    CT_CHECK_INT(ct_checkpoint_save(ctx, root, A, &sp, NULL, 0), CT_OK);
    CT_CHECK(captured.warnings >= before + 2);
    int64_t step = 0, count = 0;
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", B, NULL, NULL, NULL, &step, NULL, NULL, 0),
                 CT_OK);
    CT_CHECK_INT(step, 2);
    CT_CHECK_INT(*(int64_t *)ct_params_find(B, "bn.num_batches_tracked")->data, 42);
    CT_CHECK(ct_checkpoint_load(ctx, root, "best", B, NULL, NULL, NULL, NULL, NULL, NULL, 0) !=
             CT_OK);
    CT_CHECK_INT(ct_checkpoint_list(ctx, root, NULL, 0, &count), CT_OK);
    CT_CHECK_INT(count, 5);
    snprintf(p, sizeof p, "%s/checkpoints/step-00000002.old.tmp", root);
    CT_CHECK(!exists(p));
    /* a crash between moving step 3 aside and renaming its replacement in: the next cleanup
     * puts it back rather than deleting the only copy */
    snprintf(q, sizeof q, "%s/checkpoints/step-00000003", root);
    snprintf(p, sizeof p, "%s/checkpoints/step-00000003.old.tmp", root);
    CT_CHECK_INT(rename(q, p), 0);
    CT_CHECK_INT(ct_checkpoint_cleanup(ctx, root), CT_OK);
    CT_CHECK(exists(q) && !exists(p));
    CT_CHECK_INT(
        ct_checkpoint_load(ctx, root, "step-00000003", B, NULL, NULL, NULL, &step, NULL, NULL, 0),
        CT_OK);
    CT_CHECK_INT(*(int64_t *)ct_params_find(B, "bn.num_batches_tracked")->data, 3);
    ct_params_destroy(A);
    ct_params_destroy(B);
}

static void checkpoint_should_remove_leftovers_of_interrupted_saves(void) {
    char root[256], a[512], b[512], c[600];
    ct_params *A = make_store(1.0f, 4);
    root_of("tmp", root);
    CT_CHECK_INT(save_step(root, A, 1, false, 0), CT_OK);
    snprintf(a, sizeof a, "%s/checkpoints/step-00000002.tmp", root);
    mkdir(a, 0777);
    snprintf(c, sizeof c, "%s/model.safetensors", a);
    FILE *f = fopen(c, "wb");
    fputs("half", f);
    fclose(f);
    snprintf(b, sizeof b, "%s/checkpoints/latest.tmp", root);
    f = fopen(b, "wb");
    fclose(f);
    int64_t count = 0;
    CT_CHECK_INT(ct_checkpoint_list(ctx, root, NULL, 0, &count), CT_OK);
    CT_CHECK_INT(count, 1); /* a .tmp directory is not a checkpoint */
    CT_CHECK_INT(ct_checkpoint_cleanup(ctx, root), CT_OK);
    CT_CHECK(!exists(a));
    CT_CHECK(!exists(b));
    /* a save cleans up too */
    mkdir(a, 0777);
    CT_CHECK_INT(save_step(root, A, 3, false, 0), CT_OK);
    CT_CHECK(!exists(a));
    ct_params_destroy(A);
}

static void checkpoint_should_fall_back_from_a_damaged_latest(void) {
    char root[256], p[512];
    ct_params *A = make_store(1.0f, 4), *B = make_store(0.0f, 4);
    root_of("damaged", root);
    CT_CHECK_INT(save_step(root, A, 1, false, 0), CT_OK);
    *(int64_t *)ct_params_find(A, "bn.num_batches_tracked")->data = 2;
    CT_CHECK_INT(save_step(root, A, 2, false, 0), CT_OK);
    snprintf(p, sizeof p, "%s/checkpoints/step-00000002/model.safetensors", root);
    flip_byte(p, 100);

    captured.warnings = 0;
    int64_t step = 0;
    char loaded[512];
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", B, NULL, NULL, NULL, &step, NULL, loaded,
                                    sizeof loaded),
                 CT_OK);
    CT_CHECK_INT(step, 1);
    CT_CHECK(strstr(loaded, "step-00000001") != NULL);
    CT_CHECK_INT(*(int64_t *)ct_params_find(B, "bn.num_batches_tracked")->data, 1);
    CT_CHECK_INT(captured.warnings, 1);
    CT_CHECK_MSG(strstr(captured.last, "step-00000002/model.safetensors: CRC-32C") != NULL &&
                     strstr(captured.last, "step-00000001 instead") != NULL,
                 "%s", captured.last);
    /* the exact path fails, naming the file and both checksums */
    snprintf(p, sizeof p, "%s/checkpoints/step-00000002", root);
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, p, B, NULL, NULL, NULL, NULL, NULL, NULL, 0),
                 CT_ERR_FORMAT);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "model.safetensors: CRC-32C ") != NULL &&
                     strstr(ct_last_error(ctx), "state.json records ") != NULL,
                 "%s", ct_last_error(ctx));
    CT_CHECK_INT(ct_checkpoint_verify(ctx, p, NULL), CT_ERR_FORMAT);

    /* a truncated state.json in the newest is another damage to fall back from */
    CT_CHECK_INT(save_step(root, A, 3, false, 0), CT_OK);
    snprintf(p, sizeof p, "%s/checkpoints/step-00000003/state.json", root);
    CT_CHECK_INT(truncate(p, 40), 0);
    captured.warnings = 0;
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", B, NULL, NULL, NULL, &step, NULL, NULL, 0),
                 CT_OK);
    CT_CHECK_INT(step, 1);
    CT_CHECK_INT(captured.warnings, 1);
    CT_CHECK(strstr(captured.last, "state.json") != NULL);
    CT_CHECK_INT(
        ct_checkpoint_load(ctx, root, "step-00000003", B, NULL, NULL, NULL, NULL, NULL, NULL, 0),
        CT_ERR_FORMAT);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "state.json: CRC-32C") != NULL &&
                     strstr(ct_last_error(ctx), "(the file is damaged)") != NULL,
                 "%s", ct_last_error(ctx));

    /* with nothing that verifies, the error says so */
    snprintf(p, sizeof p, "%s/checkpoints/step-00000001/model.safetensors", root);
    CT_CHECK_INT(truncate(p, 10), 0);
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", B, NULL, NULL, NULL, NULL, NULL, NULL, 0),
                 CT_ERR_FORMAT);
    CT_CHECK(strstr(ct_last_error(ctx), "no other checkpoint directory verifies") != NULL);
    ct_params_destroy(A);
    ct_params_destroy(B);
}

static void checkpoint_should_refuse_a_newer_format(void) {
    char root[256], p[512];
    ct_params *A = make_store(1.0f, 4);
    root_of("newer", root);
    CT_CHECK_INT(save_step(root, A, 1, false, 0), CT_OK);
    CT_CHECK_INT(save_step(root, A, 2, false, 0), CT_OK);
    snprintf(p, sizeof p, "%s/checkpoints/step-00000002/state.json", root);
    json_t *doc = json_load_file(p, 0, NULL);
    json_object_del(doc, "crc32c");
    json_object_set_new(doc, "format_version", json_integer(CT_CHECKPOINT_FORMAT_VERSION + 1));
    write_state_json(p, doc);
    json_decref(doc);
    captured.warnings = 0;
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", A, NULL, NULL, NULL, NULL, NULL, NULL, 0),
                 CT_ERR_FORMAT);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "format_version 3") != NULL &&
                     strstr(ct_last_error(ctx), "hint: load it with a newer ctrain") != NULL,
                 "%s", ct_last_error(ctx));
    CT_CHECK_INT(captured.warnings, 0); /* not damage: no silent fallback */
    ct_params_destroy(A);
}

/* Any flipped bit of state.json or of a pointer is damage: state.json's own checksum and the
 * pointers' checksums leave no bit whose flip reads as another valid checkpoint. */
static void checkpoint_should_detect_every_flipped_bit_of_state_and_pointers(void) {
    char root[256], p[600], dir[512];
    ct_params *A = make_store(1.0f, 4), *B = make_store(0.0f, 4);
    root_of("flips", root);
    CT_CHECK_INT(save_step(root, A, 100, true, 0), CT_OK);
    CT_CHECK_INT(save_step(root, A, 120, true, 0), CT_OK);
    snprintf(dir, sizeof dir, "%s/checkpoints/step-00000120", root);
    snprintf(p, sizeof p, "%s/state.json", dir);
    long n = file_size(p), missed = 0;
    CT_CHECK(n > 100);
    for (long i = 0; i < n; i++)
        for (int b = 0; b < 8; b++) {
            flip_bit(p, i, b);
            if (ct_checkpoint_verify(ctx, dir, NULL) != CT_ERR_FORMAT) missed++;
            flip_bit(p, i, b);
        }
    CT_CHECK_INT(missed, 0);
    CT_CHECK_INT(ct_checkpoint_verify(ctx, dir, NULL), CT_OK);
    static const char *const names[] = {"latest", "best"};
    for (int k = 0; k < 2; k++) {
        int64_t step = 0;
        CT_CHECK_INT(ct_checkpoint_pointer(ctx, root, names[k], &step), CT_OK);
        CT_CHECK_INT(step, 120);
        snprintf(p, sizeof p, "%s/checkpoints/%s", root, names[k]);
        n = file_size(p);
        missed = 0;
        for (long i = 0; i < n; i++)
            for (int b = 0; b < 8; b++) {
                flip_bit(p, i, b);
                if (ct_checkpoint_pointer(ctx, root, names[k], &step) != CT_ERR_FORMAT ||
                    step != -1)
                    missed++;
                flip_bit(p, i, b);
            }
        CT_CHECK_INT(missed, 0);
    }
    /* a damaged latest falls back to the newest checkpoint that verifies, with a warning
       that shows the pointer's bytes escaped; a damaged best is an error */
    snprintf(p, sizeof p, "%s/checkpoints/latest", root);
    flip_bit(p, 11, 2); /* step-00000120 -> step-00000160 */
    flip_bit(p, 3, 7);  /* and a byte that is not printable */
    captured.warnings = 0;
    int64_t step = 0;
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", B, NULL, NULL, NULL, &step, NULL, NULL, 0),
                 CT_OK);
    CT_CHECK_INT(step, 120);
    CT_CHECK_INT(captured.warnings, 1);
    CT_CHECK_INT(ct_checkpoint_pointer(ctx, root, "latest", &step), CT_ERR_FORMAT);
    CT_CHECK_MSG(
        strstr(ct_last_error(ctx), "latest: damaged: holds \"ste\\xf0-00000160\\ncrc32c ") != NULL,
        "%s", ct_last_error(ctx));
    /* repaired by pointing it again */
    CT_CHECK_INT(ct_checkpoint_set_pointer(ctx, root, "latest", 120), CT_OK);
    CT_CHECK_INT(ct_checkpoint_pointer(ctx, root, "latest", &step), CT_OK);
    CT_CHECK_INT(step, 120);
    CT_CHECK_INT(ct_checkpoint_set_pointer(ctx, root, "latest", 7), CT_ERR_IO);
    snprintf(p, sizeof p, "%s/checkpoints/best", root);
    flip_bit(p, 11, 2);
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "best", B, NULL, NULL, NULL, NULL, NULL, NULL, 0),
                 CT_ERR_FORMAT);
    CT_CHECK(strstr(ct_last_error(ctx), "best: damaged: holds \"step-00000160\\ncrc32c ") != NULL);
    unlink(p);
    CT_CHECK_INT(ct_checkpoint_pointer(ctx, root, "best", &step), CT_ERR_IO);
    CT_CHECK(strstr(ct_last_error(ctx), "best: missing") != NULL);
    ct_params_destroy(A);
    ct_params_destroy(B);
}

/* Format 1 wrote state.json without its checksum line and pointers of the bare name: both still
 * load; a state.json of a later format without the line is damage. */
static void checkpoint_should_read_format_1(void) {
    char root[256], p[512];
    ct_params *A = make_store(1.0f, 4), *B = make_store(0.0f, 4);
    root_of("format1", root);
    CT_CHECK_INT(save_step(root, A, 5, true, 0), CT_OK);
    snprintf(p, sizeof p, "%s/checkpoints/step-00000005/state.json", root);
    json_t *doc = json_load_file(p, 0, NULL);
    json_object_del(doc, "crc32c");
    json_dump_file(doc, p, JSON_INDENT(2));
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", B, NULL, NULL, NULL, NULL, NULL, NULL, 0),
                 CT_ERR_FORMAT); /* format 2 without the line */
    CT_CHECK(strstr(ct_last_error(ctx), "first line is not its crc32c") != NULL);
    json_object_set_new(doc, "format_version", json_integer(1));
    json_dump_file(doc, p, JSON_INDENT(2));
    json_decref(doc);
    static const char *const names[] = {"latest", "best"};
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/checkpoints/%s", root, names[k]);
        FILE *f = fopen(p, "wb");
        fputs("step-00000005\n", f);
        fclose(f);
        int64_t step = 0;
        captured.warnings = 0;
        CT_CHECK_INT(
            ct_checkpoint_load(ctx, root, names[k], B, NULL, NULL, NULL, &step, NULL, NULL, 0),
            CT_OK);
        CT_CHECK_INT(step, 5);
        CT_CHECK_INT(captured.warnings, 0);
    }
    ct_params_destroy(A);
    ct_params_destroy(B);
}

static void checkpoint_should_leave_the_previous_one_when_a_write_fails(void) {
    char root[256], p[512];
    ct_params *A = make_store(1.0f, 2048); /* model.safetensors > 16 KiB */
    root_of("fail", root);
    CT_CHECK_INT(save_step(root, A, 1, true, 0), CT_OK);
    /* files may not grow past 4 KiB: the model's write fails with EFBIG, as with a full disk */
    struct rlimit old, small;
    getrlimit(RLIMIT_FSIZE, &old);
    small = old;
    small.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    CT_CHECK_INT(setrlimit(RLIMIT_FSIZE, &small), 0);
    ct_status s = save_step(root, A, 2, true, 1);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    CT_CHECK_INT(s, CT_ERR_IO);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "step-00000002.tmp/model.safetensors.tmp: writing "
                                            "failed: File too large") != NULL,
                 "%s", ct_last_error(ctx));
    snprintf(p, sizeof p, "%s/checkpoints/step-00000002", root);
    CT_CHECK(!exists(p));
    snprintf(p, sizeof p, "%s/checkpoints/step-00000002.tmp", root);
    CT_CHECK(!exists(p));
    int64_t step = 0;
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "latest", A, NULL, NULL, NULL, &step, NULL, NULL, 0),
                 CT_OK);
    CT_CHECK_INT(step, 1);
    CT_CHECK_INT(ct_checkpoint_load(ctx, root, "best", A, NULL, NULL, NULL, &step, NULL, NULL, 0),
                 CT_OK);
    CT_CHECK_INT(step, 1);
    /* a step-N.tmp that cannot be removed (here: the root is a file) fails with the path */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/a-file", base);
    FILE *f = fopen(bad, "wb");
    fclose(f);
    CT_CHECK_INT(save_step(bad, A, 1, false, 0), CT_ERR_IO);
    CT_CHECK(strstr(ct_last_error(ctx), "a-file: exists and is not a directory") != NULL);
    ct_params_destroy(A);
}

/* on_file's record: the files it was told of, the step-N.tmp it found them in, and which call
 * fails (0: none). */
typedef struct file_hook {
    char seen[256];
    char tmpdir[512];
    int calls, fail_at;
} file_hook;

static ct_status on_file(void *user, const char *file) {
    file_hook *h = user;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", h->tmpdir, file);
    CT_CHECK_MSG(exists(p), "%s is not written when on_file is called", p);
    strncat(h->seen, file, sizeof h->seen - strlen(h->seen) - 2);
    strcat(h->seen, " ");
    return ++h->calls == h->fail_at ? CT_FAIL(ctx, CT_ERR_IO, "stopped by the hook") : CT_OK;
}

static void checkpoint_should_call_the_file_hook_before_publishing(void) {
    char root[256];
    ct_params *A = make_store(1.0f, 8), *E = make_store(2.0f, 8);
    root_of("hook", root);
    file_hook h = {.fail_at = 2};
    snprintf(h.tmpdir, sizeof h.tmpdir, "%s/checkpoints/step-00000001.tmp", root);
    ct_checkpoint_save_params sp = ct_checkpoint_save_default_params();
    sp.step = 1;
    sp.ema = E;
    sp.on_file = on_file;
    sp.on_file_user = &h;
    /* an error from the hook cancels the save: nothing published, no debris */
    CT_CHECK_INT(ct_checkpoint_save(ctx, root, A, &sp, NULL, 0), CT_ERR_IO);
    CT_CHECK_MSG(strcmp(h.seen, "model.safetensors ema.safetensors ") == 0, "%s", h.seen);
    CT_CHECK(!exists(h.tmpdir));
    char p[512];
    snprintf(p, sizeof p, "%s/checkpoints/step-00000001", root);
    CT_CHECK(!exists(p));
    /* every file, state.json last, all inside step-N.tmp/ */
    h.seen[0] = '\0';
    h.calls = h.fail_at = 0;
    CT_CHECK_INT(ct_checkpoint_save(ctx, root, A, &sp, NULL, 0), CT_OK);
    CT_CHECK_MSG(strcmp(h.seen, "model.safetensors ema.safetensors state.json ") == 0, "%s",
                 h.seen);
    CT_CHECK(exists(p));
    ct_params_destroy(A);
    ct_params_destroy(E);
}

int main(void) {
    base = mkdtemp(tmpl);
    if (!base) return 1;
    ct_ctx_params cp = ct_ctx_default_params();
    cp.n_threads = 1;
    cp.log = capture;
    cp.log_user = &captured;
    if (ct_ctx_create(&cp, &ctx) != CT_OK) return 1;
    CT_RUN(checkpoint_should_round_trip_model_ema_optimizer_and_state);
    CT_RUN(checkpoint_should_keep_the_newest_and_never_delete_best);
    CT_RUN(checkpoint_should_replace_a_step_when_asked);
    CT_RUN(checkpoint_should_remove_leftovers_of_interrupted_saves);
    CT_RUN(checkpoint_should_fall_back_from_a_damaged_latest);
    CT_RUN(checkpoint_should_refuse_a_newer_format);
    CT_RUN(checkpoint_should_detect_every_flipped_bit_of_state_and_pointers);
    CT_RUN(checkpoint_should_read_format_1);
    CT_RUN(checkpoint_should_leave_the_previous_one_when_a_write_fails);
    CT_RUN(checkpoint_should_call_the_file_hook_before_publishing);
    ct_ctx_destroy(ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
    return ct_test_finish();
}

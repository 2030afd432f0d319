/*
 * fuzz_checkpoint.c - libFuzzer target for the checkpoint reader (checkpoint.h): safetensors
 * files, state.json, and checkpoint directories whose checksums agree with damaged contents.
 *
 * The first byte of an input picks what the rest becomes:
 *   0  a safetensors file, loaded strictly and leniently into a store of two tensors;
 *   1  state.json of an otherwise valid checkpoint, then ct_checkpoint_verify and
 *      ct_checkpoint_load (the JSON, its version, its file list and every field it names);
 *   2  model.safetensors of a checkpoint whose state.json records that file's true size and
 *      CRC-32C, so the damage gets past verification into the safetensors reader.
 * Whatever the bytes, a load either succeeds or fails with a message; nothing may crash, read
 * out of bounds or leak (every library allocation is counted).
 *
 * Build and run: `make fuzz-checkpoint` (see the Makefile and docs/testing.md).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/checkpoint.h"
#include "ctrain/optim.h"
#define FUZZ_NAME "fuzz_checkpoint"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_ckpt[256]; /* a valid checkpoint made once: <root>/good/checkpoints/step-... */
static char g_work[256]; /* <root>/work: the damaged copy */

/* A store of two tensors ("w" [3, 4], "b" [4]) and an SGD optimizer with momentum. */
static ct_params *make_store(ct_ctx *ctx, ct_optim **opt) {
    ct_params *p = NULL;
    ct_tensor *t;
    if (ct_params_create(ctx, &p) != CT_OK) return NULL;
    if (ct_params_add(p, "w", CT_F32, 2, (const int64_t[]){3, 4}, CT_PARAM_TRAINABLE, &t) !=
            CT_OK ||
        ct_params_add(p, "b", CT_F32, 1, (const int64_t[]){4}, CT_PARAM_TRAINABLE, &t) != CT_OK ||
        ct_params_alloc(p) != CT_OK) {
        ct_params_destroy(p);
        return NULL;
    }
    float *v = ct_params_values(p);
    for (int64_t i = 0; i < ct_params_numel(p); i++)
        v[i] = (float)i * 0.25f;
    if (opt) {
        ct_optim_params op = ct_optim_default_params(CT_OPTIM_SGD);
        op.momentum = 0.9f;
        if (ct_optim_create(ctx, p, &op, opt) != CT_OK) {
            ct_params_destroy(p);
            return NULL;
        }
    }
    return p;
}

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    if (!in) die(from);
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, in);
    if (!feof(in)) die("a seed checkpoint file larger than 4 KiB");
    (void)fclose(in);
    write_file(to, buf, n);
}

/* The valid checkpoint copied afresh into the work directory (no shell: the fuzzer calls this
 * for every input). */
static void copy_checkpoint(void) {
    static const char *const names[] = {"state.json", "model.safetensors", "optimizer.safetensors"};
    char dir[300], from[600], to[600];
    (void)snprintf(dir, sizeof dir, "%s/step-00000007", g_work);
    (void)mkdir(g_work, 0777);
    (void)mkdir(dir, 0777);
    for (int i = 0; i < 3; i++) {
        (void)snprintf(from, sizeof from, "%s/%s", g_ckpt, names[i]);
        (void)snprintf(to, sizeof to, "%s/%s", dir, names[i]);
        copy_file(from, to);
    }
}

static void setup(void) {
    if (!fuzz_scratch()) return;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(NULL, &ctx) != CT_OK) die("context");
    ct_optim *opt = NULL;
    ct_params *p = make_store(ctx, &opt);
    if (!p) die("store");
    char good[128];
    (void)snprintf(good, sizeof good, "%s/good", g_root);
    ct_checkpoint_save_params sp = ct_checkpoint_save_default_params();
    sp.step = 7;
    sp.epoch = 1;
    sp.optim = opt;
    if (ct_checkpoint_save(ctx, good, p, &sp, g_ckpt, sizeof g_ckpt) != CT_OK)
        die(ct_last_error(ctx));
    ct_optim_destroy(opt);
    ct_params_destroy(p);
    ct_ctx_destroy(ctx);
    (void)snprintf(g_work, sizeof g_work, "%s/work/checkpoints", g_root);
    char work[128];
    (void)snprintf(work, sizeof work, "%s/work", g_root);
    (void)mkdir(work, 0777);
}

static void load_safetensors(ct_ctx *ctx, const uint8_t *data, size_t size) {
    char path[128];
    (void)snprintf(path, sizeof path, "%s/x.safetensors", g_root);
    write_file(path, data, size);
    ct_params *p = make_store(ctx, NULL);
    if (!p) abort();
    ct_safetensors_load_params lp = ct_safetensors_load_default_params();
    int64_t loaded = 0;
    (void)ct_safetensors_load(ctx, p, path, &lp, &loaded);
    lp.strict = false;
    (void)ct_safetensors_load(ctx, p, path, &lp, &loaded);
    ct_params_destroy(p);
}

static void load_checkpoint(ct_ctx *ctx) {
    char dir[300], root[128];
    (void)snprintf(dir, sizeof dir, "%s/step-00000007", g_work);
    (void)snprintf(root, sizeof root, "%s/work", g_root);
    int64_t step = 0, epoch = 0;
    (void)ct_checkpoint_verify(ctx, dir, &step);
    ct_optim *opt = NULL;
    ct_params *p = make_store(ctx, &opt);
    if (!p) abort();
    json_t *state = NULL;
    if (ct_checkpoint_load(ctx, root, dir, p, NULL, opt, &state, &step, &epoch, NULL, 0) == CT_OK)
        json_decref(state);
    ct_optim_destroy(opt);
    ct_params_destroy(p);
}

/* Rewrites state.json so that model.safetensors' recorded size and checksum are the new ones. */
static void fix_state(const uint8_t *data, size_t size) {
    char path[300];
    (void)snprintf(path, sizeof path, "%s/step-00000007/state.json", g_work);
    json_t *doc = json_load_file(path, 0, NULL);
    json_t *entry = json_object_get(json_object_get(doc, "files"), "model.safetensors");
    if (!entry) die("state.json has no model.safetensors entry");
    char hex[16];
    (void)snprintf(hex, sizeof hex, "%08x", (unsigned)ct_crc32c(0, data, size));
    if (json_object_set_new(entry, "bytes", json_integer((json_int_t)size)) != 0 ||
        json_object_set_new(entry, "crc32c", json_string(hex)) != 0 ||
        json_dump_file(doc, path, JSON_COMPACT) != 0)
        die("rewriting state.json");
    json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    if (size == 0) return 0;
    test_alloc ta = {0};
    ct_ctx *ctx = fuzz_ctx_create(&ta);
    uint8_t which = data[0] % 3;
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    char path[300];
    switch (which) {
    case 0:
        load_safetensors(ctx, body, n);
        break;
    case 1:
        copy_checkpoint();
        (void)snprintf(path, sizeof path, "%s/step-00000007/state.json", g_work);
        write_file(path, body, n);
        load_checkpoint(ctx);
        break;
    default:
        copy_checkpoint();
        (void)snprintf(path, sizeof path, "%s/step-00000007/model.safetensors", g_work);
        write_file(path, body, n);
        fix_state(body, n);
        load_checkpoint(ctx);
        break;
    }
    fuzz_ctx_destroy(ctx, &ta);
    return 0;
}

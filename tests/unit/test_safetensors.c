/*
 * test_safetensors.c - the safetensors writer and reader: byte layout, round trip, files from
 * another writer (other key order, padding, bf16, metadata), strict and non-strict loading,
 * prefixes, and every malformed header the reader must refuse with a located message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/checkpoint.h"
#include "ctrain/ctrain.h"
#include "harness.h"

static ct_ctx *ctx;
static char dir[64];

static ct_params *make_store(float fill) {
    ct_params *P;
    ct_tensor *t;
    ct_params_create(ctx, &P);
    ct_params_add(P, "fc.weight", CT_F32, 2, (int64_t[]){3, 2}, CT_PARAM_TRAINABLE, &t);
    ct_params_add(P, "fc.bias", CT_F32, 1, (int64_t[]){3}, CT_PARAM_TRAINABLE, &t);
    ct_params_add(P, "bn.num_batches_tracked", CT_I64, 0, NULL, CT_PARAM_BUFFER, &t);
    ct_params_alloc(P);
    for (int64_t i = 0; i < 9; i++)
        ct_params_values(P)[i] = fill + (float)i;
    *(int64_t *)ct_params_find(P, "bn.num_batches_tracked")->data = 42;
    return P;
}

static char *path_of(const char *name, char *buf) {
    snprintf(buf, 128, "%s/%s", dir, name);
    return buf;
}

/* Writes a file with the given header text and data bytes (header padded to 8 with spaces). */
static void write_raw(const char *path, const char *header, const void *data, size_t n) {
    size_t hl = strlen(header), padded = (hl + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, hl, f);
    for (size_t i = hl; i < padded; i++)
        fputc(' ', f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static void safetensors_should_round_trip_with_the_documented_layout(void) {
    char p[128];
    ct_params *A = make_store(0.5f), *B = make_store(-9.0f);
    ct_option meta[1] = {{"epoch", "3"}};
    CT_CHECK_INT(ct_safetensors_save(ctx, A, path_of("a.safetensors", p), meta, 1), CT_OK);
    FILE *f = fopen(p, "rb");
    unsigned char buf[512];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)buf[i] << (8 * i);
    CT_CHECK((8 + hl) % 8 == 0);
    CT_CHECK_INT(n, 8 + hl + 6 * 4 + 3 * 4 + 8); /* header, then exactly the data */
    buf[8 + hl] = '\0';
    const char *h = (const char *)buf + 8;
    CT_CHECK(strstr(h, "\"__metadata__\":{\"format\":\"pt\",\"epoch\":\"3\"}") != NULL);
    CT_CHECK(
        strstr(h, "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}") !=
        NULL);
    CT_CHECK(strstr(h, "\"bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[]") != NULL);
    int64_t loaded = 0;
    CT_CHECK_INT(ct_safetensors_load(ctx, B, p, NULL, &loaded), CT_OK);
    CT_CHECK_INT(loaded, 3);
    CT_CHECK(memcmp(ct_params_values(A), ct_params_values(B), 9 * sizeof(float)) == 0);
    CT_CHECK_INT(*(int64_t *)ct_params_find(B, "bn.num_batches_tracked")->data, 42);
    /* no .tmp file is left behind */
    char tmp[140];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    CT_CHECK(access(tmp, F_OK) != 0);
    ct_params_destroy(A);
    ct_params_destroy(B);
}

static void safetensors_should_read_another_writers_file(void) {
    char p[128];
    /* keys in another order, spaces, bf16 weights (1, -2, 0.5, 3, 4, -1), metadata last */
    const char *header =
        "{ \"fc.bias\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [12, 24]},\n"
        "  \"fc.weight\": {\"shape\": [3, 2], \"dtype\": \"BF16\", \"data_offsets\": [0, 12]},\n"
        "  \"bn.num_batches_tracked\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [24, "
        "32]},\n  \"__metadata__\": {\"format\": \"pt\"} }";
    unsigned char data[32];
    uint16_t w[6] = {0x3F80, 0xC000, 0x3F00, 0x4040, 0x4080, 0xBF80};
    float bias[3] = {7, 8, 9};
    int64_t nbt = 5;
    memcpy(data, w, 12);
    memcpy(data + 12, bias, 12);
    memcpy(data + 24, &nbt, 8);
    write_raw(path_of("other.safetensors", p), header, data, sizeof data);
    ct_params *B = make_store(0.0f);
    CT_CHECK_INT(ct_safetensors_load(ctx, B, p, NULL, NULL), CT_OK);
    const float *v = ct_params_values(B);
    float want[9] = {1, -2, 0.5f, 3, 4, -1, 7, 8, 9};
    CT_CHECK_ARRAYS("weights", v, want, 9, 0, 0);
    CT_CHECK_INT(*(int64_t *)ct_params_find(B, "bn.num_batches_tracked")->data, 5);
    ct_params_destroy(B);
}

static void safetensors_should_load_strictly_or_not_and_with_prefixes(void) {
    char p[128], q[128];
    ct_params *A = make_store(1.0f);
    CT_CHECK_INT(ct_safetensors_save(ctx, A, path_of("s.safetensors", p), NULL, 0), CT_OK);
    /* a model with one more tensor: strict fails naming it, non-strict loads the rest */
    ct_params *C;
    ct_tensor *t;
    ct_params_create(ctx, &C);
    ct_params_add(C, "fc.weight", CT_F32, 2, (int64_t[]){3, 2}, CT_PARAM_TRAINABLE, &t);
    ct_params_add(C, "head.weight", CT_F32, 1, (int64_t[]){4}, CT_PARAM_TRAINABLE, &t);
    ct_params_alloc(C);
    CT_CHECK_INT(ct_safetensors_load(ctx, C, p, NULL, NULL), CT_ERR_FORMAT);
    CT_CHECK(strstr(ct_last_error(ctx), "'fc.bias' is not a parameter or buffer") != NULL);
    ct_safetensors_load_params lp = ct_safetensors_load_default_params();
    lp.strict = false;
    int64_t loaded = 0;
    CT_CHECK_INT(ct_safetensors_load(ctx, C, p, &lp, &loaded), CT_OK);
    CT_CHECK_INT(loaded, 1);
    CT_CHECK(ct_params_values(C)[5] == 6.0f);
    ct_params_destroy(C);
    /* a file lacking a model tensor: strict names it */
    ct_params *D;
    ct_params_create(ctx, &D);
    ct_params_add(D, "fc.weight", CT_F32, 2, (int64_t[]){3, 2}, CT_PARAM_TRAINABLE, &t);
    ct_params_alloc(D);
    CT_CHECK_INT(ct_safetensors_save(ctx, D, path_of("d.safetensors", q), NULL, 0), CT_OK);
    ct_params *E = make_store(0.0f);
    CT_CHECK_INT(ct_safetensors_load(ctx, E, q, NULL, NULL), CT_ERR_FORMAT);
    CT_CHECK(strstr(ct_last_error(ctx), "the model's 'fc.bias' is missing") != NULL);
    /* prefix: the file's "model.fc.weight" is the store's "fc.weight" */
    const char *header =
        "{\"model.fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}}";
    float six[6] = {1, 2, 3, 4, 5, 6};
    write_raw(path_of("prefix.safetensors", q), header, six, sizeof six);
    lp.strict = true;
    lp.prefix = "model.";
    CT_CHECK_INT(ct_safetensors_load(ctx, D, q, &lp, &loaded), CT_OK);
    CT_CHECK(ct_params_values(D)[5] == 6.0f);
    ct_params_destroy(D);
    ct_params_destroy(E);
    ct_params_destroy(A);
}

static void safetensors_should_refuse_malformed_files(void) {
    char p[128];
    float data[8] = {0};
    struct {
        const char *header;
        size_t data_bytes;
        const char *expect;
    } cases[] = {
        {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]", 24,
         "header JSON, line 1"},
        {"{\"fc.weight\":{\"dtype\":\"Q8\",\"shape\":[3,2],\"data_offsets\":[0,24]}}", 24,
         "unknown dtype 'Q8'"},
        {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,20]}}", 20,
         "F32 [3,2] needs 24 bytes, data_offsets give 20"},
        {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}}", 16,
         "run past the 16 bytes of data"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, "tensor 'b': data starts at 4, expected 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
         "cover 8 of 12 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
         "shape entry 0 is not a non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,8]}}", 8,
         "needs"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         16, "duplicate"},
        {"{\"__metadata__\":{\"format\":3}}", 0, "__metadata__ 'format' is not a string"},
        {"[1,2]", 0, "expected an object"},
    };
    ct_params *B = make_store(0.0f);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        write_raw(path_of("bad.safetensors", p), cases[c].header, data, cases[c].data_bytes);
        ct_status s = ct_safetensors_load(ctx, B, p, NULL, NULL);
        CT_CHECK_MSG(s == CT_ERR_FORMAT, "case %zu: status %s", c, ct_status_str(s));
        CT_CHECK_MSG(strstr(ct_last_error(ctx), cases[c].expect) != NULL &&
                         strstr(ct_last_error(ctx), "bad.safetensors") != NULL,
                     "case %zu: message '%s' lacks '%s'", c, ct_last_error(ctx), cases[c].expect);
    }
    /* a shape that differs from the model's */
    write_raw(p, "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}",
              data, 24);
    CT_CHECK_INT(ct_safetensors_load(ctx, B, p, NULL, NULL), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "shape [2,3], the model expects [3,2]") != NULL);
    /* a header length beyond the file, and a file too short */
    FILE *f = fopen(p, "wb");
    unsigned char len8[8] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
    fwrite(len8, 1, 8, f);
    fwrite("{}", 1, 2, f);
    fclose(f);
    CT_CHECK_INT(ct_safetensors_load(ctx, B, p, NULL, NULL), CT_ERR_FORMAT);
    CT_CHECK(strstr(ct_last_error(ctx), "header length 65535 does not fit the file of 10 bytes") !=
             NULL);
    f = fopen(p, "wb");
    fwrite(len8, 1, 3, f);
    fclose(f);
    CT_CHECK_INT(ct_safetensors_load(ctx, B, p, NULL, NULL), CT_ERR_FORMAT);
    CT_CHECK_INT(ct_safetensors_load(ctx, B, path_of("missing.safetensors", p), NULL, NULL),
                 CT_ERR_IO);
    CT_CHECK(strstr(ct_last_error(ctx), "No such file") != NULL);
    ct_params_destroy(B);
}

/* An empty tensor at the offset where another starts: any key order tiles the data. */
static void safetensors_should_accept_empty_tensors_in_any_key_order(void) {
    char p[128];
    float two[2] = {1, 2};
    const char *orders[2] = {"{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                             "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}"};
    for (int k = 0; k < 2; k++) {
        ct_params *P;
        ct_tensor *t;
        ct_params_create(ctx, &P);
        ct_params_add(P, "a", CT_F32, 1, (int64_t[]){2}, CT_PARAM_TRAINABLE, &t);
        ct_params_add(P, "e", CT_F32, 1, (int64_t[]){0}, CT_PARAM_TRAINABLE, &t);
        ct_params_alloc(P);
        write_raw(path_of("empty.safetensors", p), orders[k], two, sizeof two);
        CT_CHECK_MSG(ct_safetensors_load(ctx, P, p, NULL, NULL) == CT_OK, "order %d: %s", k,
                     ct_last_error(ctx));
        CT_CHECK(ct_params_values(P)[1] == 2.0f);
        ct_params_destroy(P);
    }
}

static void safetensors_save_should_keep_the_previous_file_on_failure(void) {
    char p[128], tmp[140];
    ct_params *A = make_store(1.0f), *B = make_store(100.0f);
    CT_CHECK_INT(ct_safetensors_save(ctx, A, path_of("keep.safetensors", p), NULL, 0), CT_OK);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    CT_CHECK(mkdir(tmp, 0700) == 0); /* the temporary name cannot be opened as a file */
    CT_CHECK_INT(ct_safetensors_save(ctx, B, p, NULL, 0), CT_ERR_IO);
    CT_CHECK(strstr(ct_last_error(ctx), "keep.safetensors.tmp: opening for writing failed") !=
             NULL);
    rmdir(tmp);
    ct_params *C = make_store(0.0f);
    CT_CHECK_INT(ct_safetensors_load(ctx, C, p, NULL, NULL), CT_OK);
    CT_CHECK(ct_params_values(C)[0] == 1.0f); /* still A's */
    ct_option bad[1] = {{"format", "tf"}};
    CT_CHECK_INT(ct_safetensors_save(ctx, B, p, bad, 1), CT_ERR_INVALID_ARG);
    ct_params_destroy(A);
    ct_params_destroy(B);
    ct_params_destroy(C);
}

int main(void) {
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    snprintf(dir, sizeof dir, "/tmp/ct_safetensors_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    CT_RUN(safetensors_should_round_trip_with_the_documented_layout);
    CT_RUN(safetensors_should_read_another_writers_file);
    CT_RUN(safetensors_should_load_strictly_or_not_and_with_prefixes);
    CT_RUN(safetensors_should_refuse_malformed_files);
    CT_RUN(safetensors_should_accept_empty_tensors_in_any_key_order);
    CT_RUN(safetensors_save_should_keep_the_previous_file_on_failure);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}

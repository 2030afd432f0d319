/*
 * test_safetensors.c - the safetensors writer and reader: byte layout, round trip, files from
 * another writer (other key order, padding, bf16, metadata), strict and non-strict loading
 * (with the missing and unexpected keys reported), prefixes, tied weights under two names,
 * F16/BF16/F64 conversion, bf16 writing, and every malformed header the reader must refuse
 * with a located message.
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

/* Log messages of a context, collected for checks. */
static char logged[4096];

static void collect_log(void *user, ct_log_level level, const char *msg) {
    (void)user;
    (void)level;
    size_t n = strlen(logged);
    snprintf(logged + n, sizeof logged - n, "%s\n", msg);
}

static ct_ctx *logging_ctx(void) {
    ct_ctx_params cp = ct_ctx_default_params();
    cp.log = collect_log;
    ct_ctx *c = NULL;
    ct_ctx_create(&cp, &c);
    logged[0] = '\0';
    return c;
}

/* "wte.weight" [2, 2] known also as "head.weight" (tied), and "ln.weight" [2]. */
static ct_params *make_tied(ct_ctx *c, float fill) {
    ct_params *P;
    ct_tensor *t;
    ct_params_create(c, &P);
    ct_params_add(P, "wte.weight", CT_F32, 2, (int64_t[]){2, 2}, CT_PARAM_TRAINABLE, &t);
    ct_params_add(P, "ln.weight", CT_F32, 1, (int64_t[]){2}, CT_PARAM_TRAINABLE, &t);
    CT_CHECK_INT(ct_params_alias(P, "head.weight", "wte.weight"), CT_OK);
    ct_params_alloc(P);
    for (int64_t i = 0; i < 6; i++)
        ct_params_values(P)[i] = fill + (float)i;
    return P;
}

static void params_should_know_a_tied_tensor_under_its_alias(void) {
    ct_params *P = make_tied(ctx, 0.0f);
    CT_CHECK(ct_params_find(P, "head.weight") == ct_params_find(P, "wte.weight"));
    CT_CHECK_INT(ct_params_count(P), 2);
    CT_CHECK_INT(ct_params_alias_count(P), 1);
    ct_tensor *t = NULL;
    CT_CHECK(strcmp(ct_params_alias_at(P, 0, &t), "head.weight") == 0);
    CT_CHECK(t == ct_params_find(P, "wte.weight"));
    CT_CHECK(ct_params_alias_at(P, 1, &t) == NULL && t == NULL);
    CT_CHECK_INT(ct_params_alias(P, "head.weight", "ln.weight"), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_params_alias(P, "ln.weight", "wte.weight"), CT_ERR_INVALID_ARG);
    CT_CHECK_INT(ct_params_alias(P, "x.weight", "missing.weight"), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "'missing.weight' is not a declared tensor") != NULL);
    ct_tensor *dup;
    CT_CHECK_INT(
        ct_params_add(P, "head.weight", CT_F32, 1, (int64_t[]){2}, CT_PARAM_TRAINABLE, &dup),
        CT_ERR_INVALID_ARG);
    ct_params_destroy(P);
}

static void safetensors_should_write_and_read_tied_weights_under_both_names(void) {
    char p[128], q[128];
    ct_params *A = make_tied(ctx, 1.0f), *B = make_tied(ctx, -5.0f);
    CT_CHECK_INT(ct_safetensors_save(ctx, A, path_of("tied.safetensors", p), NULL, 0), CT_OK);
    FILE *f = fopen(p, "rb");
    unsigned char buf[512];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)buf[i] << (8 * i);
    CT_CHECK_INT(n, 8 + hl + (4 + 2 + 4) * 4); /* the tied matrix twice */
    buf[8 + hl] = '\0';
    CT_CHECK(
        strstr((const char *)buf + 8,
               "\"head.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[24,40]}") !=
        NULL);
    CT_CHECK(memcmp(buf + 8 + hl, buf + 8 + hl + 24, 16) == 0);
    int64_t loaded = 0;
    CT_CHECK_INT(ct_safetensors_load(ctx, B, p, NULL, &loaded), CT_OK);
    CT_CHECK_INT(loaded, 2);
    CT_CHECK(memcmp(ct_params_values(A), ct_params_values(B), 6 * sizeof(float)) == 0);
    /* only the alias's name (safetensors.torch.save_model keeps one of tied names) */
    const char *h1 = "{\"head.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                     "\"ln.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}";
    float d1[6] = {9, 8, 7, 6, 5, 4};
    write_raw(path_of("head_only.safetensors", q), h1, d1, sizeof d1);
    CT_CHECK_INT(ct_safetensors_load(ctx, B, q, NULL, &loaded), CT_OK);
    CT_CHECK_ARRAYS("tied from the alias", ct_params_values(B), d1, 6, 0, 0);
    /* only the tensor's own name */
    const char *h2 = "{\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                     "\"ln.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}";
    write_raw(path_of("wte_only.safetensors", q), h2, d1, sizeof d1);
    CT_CHECK_INT(ct_safetensors_load(ctx, A, q, NULL, &loaded), CT_OK);
    CT_CHECK_ARRAYS("tied from its name", ct_params_values(A), d1, 6, 0, 0);
    /* both names with different values: refused, naming both */
    const char *h3 = "{\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                     "\"head.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,32]},"
                     "\"ln.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[32,40]}}";
    float d3[10] = {1, 2, 3, 4, 1, 2, 3.5f, 4, 0, 0};
    write_raw(path_of("tied_differ.safetensors", q), h3, d3, sizeof d3);
    CT_CHECK_INT(ct_safetensors_load(ctx, A, q, NULL, NULL), CT_ERR_FORMAT);
    CT_CHECK(strstr(ct_last_error(ctx), "'wte.weight' and 'head.weight' name one tied parameter "
                                        "('wte.weight') but their values differ at element 2 "
                                        "(3 and 3.5)") != NULL);
    d3[6] = 3.0f;
    write_raw(q, h3, d3, sizeof d3);
    CT_CHECK_INT(ct_safetensors_load(ctx, A, q, NULL, NULL), CT_OK);
    ct_params_destroy(A);
    ct_params_destroy(B);
}

static void safetensors_should_convert_f16_bf16_and_f64_to_f32(void) {
    char p[128];
    ct_ctx *c = logging_ctx();
    ct_params *P;
    ct_tensor *a, *b, *d;
    ct_params_create(c, &P);
    ct_params_add(P, "a", CT_F32, 1, (int64_t[]){6}, CT_PARAM_TRAINABLE, &a);
    ct_params_add(P, "b", CT_F32, 1, (int64_t[]){2}, CT_PARAM_TRAINABLE, &b);
    ct_params_add(P, "d", CT_F32, 1, (int64_t[]){3}, CT_PARAM_TRAINABLE, &d);
    ct_params_alloc(P);
    const char *h = "{\"a\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[0,12]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[12,16]},"
                    "\"d\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[16,40]}}";
    unsigned char data[40];
    /* 1, -2, 0.5, 65504 (the largest half), 2^-24 (the smallest subnormal), -inf */
    uint16_t f16[6] = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0xFC00};
    uint16_t bf16[2] = {0x3F80, 0xC040}; /* 1, -3 */
    double f64[3] = {0.1, -1e300, 3.0};
    memcpy(data, f16, 12);
    memcpy(data + 12, bf16, 4);
    memcpy(data + 16, f64, 24);
    write_raw(path_of("dtypes.safetensors", p), h, data, sizeof data);
    CT_CHECK_INT(ct_safetensors_load(c, P, p, NULL, NULL), CT_OK);
    const float *v = a->data;
    CT_CHECK(v[0] == 1.0f && v[1] == -2.0f && v[2] == 0.5f && v[3] == 65504.0f);
    CT_CHECK(v[4] == 0x1p-24f && v[5] < 0 && v[5] * 0.0f != v[5] * 0.0f);
    CT_CHECK(((float *)b->data)[0] == 1.0f && ((float *)b->data)[1] == -3.0f);
    const float *w = d->data;
    CT_CHECK(w[0] == 0.1f && w[1] < -3.0e38f && w[2] == 3.0f);
    CT_CHECK(strstr(logged, "converted to f32 on load: 1 BF16, 1 F16, 1 F64 tensor(s)") != NULL);
    /* an i64 buffer takes no float */
    ct_params *Q;
    ct_tensor *n;
    ct_params_create(c, &Q);
    ct_params_add(Q, "d", CT_I64, 1, (int64_t[]){3}, CT_PARAM_BUFFER, &n);
    ct_params_alloc(Q);
    ct_safetensors_load_params lp = ct_safetensors_load_default_params();
    lp.strict = false;
    CT_CHECK_INT(ct_safetensors_load(c, Q, p, &lp, NULL), CT_ERR_FORMAT);
    CT_CHECK(strstr(ct_last_error(c), "dtype F64 cannot load into i64 'd'") != NULL);
    ct_params_destroy(Q);
    ct_params_destroy(P);
    ct_ctx_destroy(c);
}

static void safetensors_should_list_missing_and_unexpected_keys_without_strict(void) {
    char p[128];
    ct_ctx *c = logging_ctx();
    ct_params *A = make_store(1.0f);
    CT_CHECK_INT(ct_safetensors_save(c, A, path_of("ns.safetensors", p), NULL, 0), CT_OK);
    ct_params *C;
    ct_tensor *t;
    ct_params_create(c, &C);
    ct_params_add(C, "fc.weight", CT_F32, 2, (int64_t[]){3, 2}, CT_PARAM_TRAINABLE, &t);
    ct_params_add(C, "head.weight", CT_F32, 1, (int64_t[]){4}, CT_PARAM_TRAINABLE, &t);
    ct_params_alloc(C);
    ct_safetensors_load_params lp = ct_safetensors_load_default_params();
    lp.strict = false;
    int64_t loaded = 0;
    CT_CHECK_INT(ct_safetensors_load(c, C, p, &lp, &loaded), CT_OK);
    CT_CHECK_INT(loaded, 1);
    CT_CHECK(strstr(logged, "loaded 1 of 2 tensors of the model (strict: false); missing keys, "
                            "left at their initial values (1): [head.weight]; unexpected keys, "
                            "not used (2): [fc.bias, bn.num_batches_tracked]") != NULL);
    /* everything loaded: nothing to say */
    logged[0] = '\0';
    ct_params *B = make_store(0.0f);
    CT_CHECK_INT(ct_safetensors_load(c, B, p, &lp, &loaded), CT_OK);
    CT_CHECK(strstr(logged, "strict: false") == NULL);
    /* nothing matches (a prefix too many): an error listing both sides */
    lp.prefix = "model.";
    CT_CHECK_INT(ct_safetensors_load(c, B, p, &lp, &loaded), CT_ERR_FORMAT);
    CT_CHECK(strstr(ct_last_error(c), "no tensor of the file is one of the model (the file's: "
                                      "fc.weight, fc.bias, bn.num_batches_tracked; the model's: "
                                      "model.fc.weight") != NULL);
    ct_params_destroy(A);
    ct_params_destroy(B);
    ct_params_destroy(C);
    ct_ctx_destroy(c);
}

static void safetensors_save_as_should_write_bf16(void) {
    char p[128];
    ct_params *A = make_tied(ctx, 1.0f), *B = make_tied(ctx, 0.0f);
    ct_params_values(A)[0] = 1.00390625f; /* 1 + 2^-8: rounds to even, 1 */
    ct_params_values(A)[1] = 1.01171875f; /* 1 + 3 * 2^-8: rounds up to 1 + 2^-6 */
    CT_CHECK_INT(ct_safetensors_save_as(ctx, A, path_of("bf16.safetensors", p), NULL, 0, CT_BF16),
                 CT_OK);
    FILE *f = fopen(p, "rb");
    unsigned char buf[512];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)buf[i] << (8 * i);
    CT_CHECK_INT(n, 8 + hl + (4 + 2 + 4) * 2);
    buf[8 + hl] = '\0';
    CT_CHECK(strstr((const char *)buf + 8,
                    "\"wte.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]}") !=
             NULL);
    CT_CHECK_INT(ct_safetensors_load(ctx, B, p, NULL, NULL), CT_OK);
    CT_CHECK(ct_params_values(B)[0] == 1.0f && ct_params_values(B)[1] == 1.015625f);
    CT_CHECK(ct_params_values(B)[5] == 6.0f);
    CT_CHECK_INT(ct_safetensors_save_as(ctx, A, p, NULL, 0, CT_I32), CT_ERR_INVALID_ARG);
    ct_params_destroy(A);
    ct_params_destroy(B);
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
    CT_RUN(params_should_know_a_tied_tensor_under_its_alias);
    CT_RUN(safetensors_should_write_and_read_tied_weights_under_both_names);
    CT_RUN(safetensors_should_convert_f16_bf16_and_f64_to_f32);
    CT_RUN(safetensors_should_list_missing_and_unexpected_keys_without_strict);
    CT_RUN(safetensors_save_as_should_write_bf16);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}

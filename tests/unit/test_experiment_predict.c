/*
 * test_experiment_predict.c - a trained experiment used on new inputs (predict.c): the CSV and
 * .npy predictions of a classifier (softmax rows, the argmax as the class, the same numbers in
 * both forms) and of a regression; a classifier's logits, and rows written to a stream; what
 * predict refuses, writing nothing; and text sampled from a byte-level language model, the
 * same for the same seed, and greedy at temperature 0. Loading says which weights it took: a
 * checkpoint's EMA weights unless asked not to, or a bare safetensors file's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/checkpoint.h"
#include "ctrain/config.h"
#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "harness.h"

static ct_ctx *ctx;
static char root[] = "/tmp/ct_experiment_predict_XXXXXX";

/* Fits `body` (a few steps) into <root>/<name> and loads its latest checkpoint; *cfg is
 * destroyed after the experiment. */
static ct_experiment *trained(const char *name, const char *body, ct_config **cfg) {
    char text[1024];
    (void)snprintf(text, sizeof text,
                   "%s"
                   "logging: {progress: none}\n"
                   "output_dir: %s/%s\n",
                   body, root, name);
    ct_experiment *e = NULL;
    *cfg = NULL;
    ct_status s = ct_config_load_string(ctx, "exp.yaml", text, strlen(text), cfg);
    if (s == CT_OK) s = ct_experiment_resolve(ctx, *cfg);
    if (s == CT_OK) s = ct_experiment_create(ctx, *cfg, NULL, &e);
    if (s == CT_OK) s = ct_experiment_fit(e);
    if (s == CT_OK) s = ct_experiment_load(e, "latest", NULL);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    if (s == CT_OK) return e;
    ct_experiment_destroy(e);
    return NULL;
}

/* A float32 .npy array [rows, cols] of values i * 0.37 - 1 (row-major). */
static bool write_npy(const char *path, int rows, int cols) {
    char dict[128];
    int len = snprintf(dict, sizeof dict,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);
    int pad = (64 - (10 + len + 1) % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(len + pad + 1),
                             0};
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)len, f) == (size_t)len &&
              fprintf(f, "%*s\n", pad, "") == pad + 1;
    for (int i = 0; ok && i < rows * cols; i++) {
        float v = (float)i * 0.37f - 1.0f;
        ok = fwrite(&v, sizeof v, 1, f) == 1;
    }
    return fclose(f) == 0 && ok;
}

/* A rows x cols f32 .npy of token ids (i * 7 mod 256). */
static bool write_ids_npy(const char *path, int rows, int cols) {
    if (!write_npy(path, rows, cols)) return false;
    FILE *f = fopen(path, "r+b");
    if (!f || fseek(f, -(long)(sizeof(float) * (size_t)(rows * cols)), SEEK_END) != 0) {
        if (f) (void)fclose(f);
        return false;
    }
    bool ok = true;
    for (int i = 0; ok && i < rows * cols; i++) {
        float v = (float)(i * 7 % 256);
        ok = fwrite(&v, sizeof v, 1, f) == 1;
    }
    return fclose(f) == 0 && ok;
}

/* The float data of a .npy file written by predict (n of them at most); how many it holds. */
static int read_npy(const char *path, float *out, int n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    unsigned char pre[10];
    int got = -1;
    if (fread(pre, 1, 10, f) == 10 && fseek(f, pre[8] | pre[9] << 8, SEEK_CUR) == 0)
        got = (int)fread(out, sizeof(float), (size_t)n, f);
    (void)fclose(f);
    return got;
}

static void path_in(char *buf, size_t size, const char *name) {
    (void)snprintf(buf, size, "%s/%s", root, name);
}

#define CLASSIFIER                                                                                 \
    "seed: 3\n"                                                                                    \
    "data:\n"                                                                                      \
    "  train: {type: synthetic, kind: blobs, n: 90, features: 4, classes: 3}\n"                    \
    "  batch_size: 30\n"                                                                           \
    "model: {type: mlp, hidden: [6]}\n"                                                            \
    "trainer: {max_epochs: 2}\n"

static void experiment_predict_should_write_class_probabilities_as_csv_and_npy(void) {
    ct_config *cfg;
    ct_experiment *e = trained("classifier", CLASSIFIER, &cfg);
    char x[256], csv[256], npy[256];
    path_in(x, sizeof x, "x.npy");
    path_in(csv, sizeof csv, "p.csv");
    path_in(npy, sizeof npy, "p.npy");
    CT_CHECK(write_npy(x, 5, 4));
    CT_CHECK_MSG(e && ct_experiment_predict(e, x, csv) == CT_OK, "%s", ct_last_error(ctx));
    CT_CHECK_MSG(e && ct_experiment_predict(e, x, npy) == CT_OK, "%s", ct_last_error(ctx));
    float from_npy[16] = {0};
    CT_CHECK_INT(read_npy(npy, from_npy, 16), 15);
    FILE *f = fopen(csv, "r");
    char line[512] = "";
    CT_CHECK(f && fgets(line, sizeof line, f) && strcmp(line, "index,class,p_0,p_1,p_2\n") == 0);
    int rows = 0;
    while (f && fgets(line, sizeof line, f)) {
        long long index, cls;
        double p[3];
        CT_CHECK(sscanf(line, "%lld,%lld,%lf,%lf,%lf", &index, &cls, &p[0], &p[1], &p[2]) == 5);
        CT_CHECK_INT(index, rows);
        int arg = p[1] > p[0] ? 1 : 0;
        arg = p[2] > p[arg] ? 2 : arg;
        CT_CHECK_INT(cls, arg);
        CT_CHECK_CLOSE(p[0] + p[1] + p[2], 1.0, 1e-6, 0);
        for (int j = 0; j < 3 && rows < 5; j++)
            CT_CHECK_CLOSE(p[j], (double)from_npy[rows * 3 + j], 0, 1e-7);
        rows++;
    }
    CT_CHECK_INT(rows, 5);
    if (f) (void)fclose(f);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

/* The whole of a small file, or "" */
static void slurp(const char *path, char *buf, size_t size) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = 0;
    (void)fclose(f);
}

static void experiment_predict_should_write_logits_and_rows_to_a_stream(void) {
    ct_config *cfg;
    ct_experiment *e = trained("logits", CLASSIFIER, &cfg);
    char x[256], probs[256], logits[256], streamed[256];
    path_in(x, sizeof x, "xl.npy");
    path_in(probs, sizeof probs, "pl.csv");
    path_in(logits, sizeof logits, "l.csv");
    path_in(streamed, sizeof streamed, "streamed.csv");
    CT_CHECK(write_npy(x, 4, 4));
    ct_predict_params pp = ct_predict_default_params();
    pp.logits = true;
    CT_CHECK_MSG(e && ct_experiment_predict(e, x, probs) == CT_OK, "%s", ct_last_error(ctx));
    CT_CHECK_MSG(e && ct_experiment_predict_with(e, x, logits, &pp) == CT_OK, "%s",
                 ct_last_error(ctx));
    FILE *fp = fopen(probs, "r"), *fl = fopen(logits, "r");
    char lp[512] = "", ll[512] = "";
    CT_CHECK(fp && fgets(lp, sizeof lp, fp));
    CT_CHECK(fl && fgets(ll, sizeof ll, fl) &&
             strcmp(ll, "index,class,logit_0,logit_1,logit_2\n") == 0);
    int rows = 0;
    while (fp && fl && fgets(lp, sizeof lp, fp) && fgets(ll, sizeof ll, fl)) {
        long long i1, c1, i2, c2;
        double p[3], z[3];
        CT_CHECK(sscanf(lp, "%lld,%lld,%lf,%lf,%lf", &i1, &c1, &p[0], &p[1], &p[2]) == 5);
        CT_CHECK(sscanf(ll, "%lld,%lld,%lf,%lf,%lf", &i2, &c2, &z[0], &z[1], &z[2]) == 5);
        CT_CHECK(i1 == i2 && c1 == c2);
        double sum = exp(z[0]) + exp(z[1]) + exp(z[2]);
        for (int j = 0; j < 3; j++)
            CT_CHECK_CLOSE(exp(z[j]) / sum, p[j], 1e-6, 1e-6);
        rows++;
    }
    CT_CHECK_INT(rows, 4);
    if (fp) (void)fclose(fp);
    if (fl) (void)fclose(fl);
    /* to a stream: the same CSV, the output name unused */
    FILE *f = fopen(streamed, "w");
    pp.stream = f;
    CT_CHECK_MSG(f && e && ct_experiment_predict_with(e, x, NULL, &pp) == CT_OK, "%s",
                 ct_last_error(ctx));
    if (f) (void)fclose(f);
    static char a[4096], b[4096];
    slurp(logits, a, sizeof a);
    slurp(streamed, b, sizeof b);
    CT_CHECK(a[0] && strcmp(a, b) == 0);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

/* data.classes changes nothing in training: the named run's CSV is the unnamed one's with a
 * class_name column after the class (quoted where the name holds a comma or a quote). */
static void experiment_predict_should_name_the_class_when_the_data_names_them(void) {
    static const char *const fields[] = {"\"first, a\"", "b", "\"\"\"c\"\"\""};
    ct_config *cfg, *cfg_named;
    ct_experiment *e = trained("unnamed", CLASSIFIER, &cfg);
    ct_experiment *en = trained("named",
                                "seed: 3\n"
                                "data:\n"
                                "  train: {type: synthetic, kind: blobs, n: 90, features: 4, "
                                "classes: 3}\n"
                                "  batch_size: 30\n"
                                "  classes: ['first, a', b, '\"c\"']\n"
                                "model: {type: mlp, hidden: [6]}\n"
                                "trainer: {max_epochs: 2}\n",
                                &cfg_named);
    char x[256], plain[256], named[256];
    path_in(x, sizeof x, "xn.npy");
    path_in(plain, sizeof plain, "plain.csv");
    path_in(named, sizeof named, "named.csv");
    CT_CHECK(write_npy(x, 6, 4));
    CT_CHECK_MSG(e && ct_experiment_predict(e, x, plain) == CT_OK, "%s", ct_last_error(ctx));
    CT_CHECK_MSG(en && ct_experiment_predict(en, x, named) == CT_OK, "%s", ct_last_error(ctx));
    static char a[4096], b[4096], want[8192];
    slurp(plain, a, sizeof a);
    slurp(named, b, sizeof b);
    /* the plain file's lines with the name of their class put in after it */
    size_t w = 0;
    int line = 0;
    for (char *p = a; *p && w + 64 < sizeof want; line++) {
        char *nl = strchr(p, '\n');
        if (!nl) break;
        const char *comma = strchr(p, ',');
        comma = comma ? strchr(comma + 1, ',') : NULL;
        if (!comma) break;
        long long cls = line == 0 ? -1 : strtoll(strchr(p, ',') + 1, NULL, 10);
        const char *field = line == 0 ? "class_name" : cls >= 0 && cls < 3 ? fields[cls] : "?";
        w += (size_t)snprintf(want + w, sizeof want - w, "%.*s,%s%.*s", (int)(comma - p), p, field,
                              (int)(nl + 1 - comma), comma);
        p = nl + 1;
    }
    CT_CHECK_INT(line, 7);
    CT_CHECK_MSG(strcmp(b, want) == 0, "\n got: %s\nwant: %s", b, want);
    CT_CHECK(strncmp(b, "index,class,class_name,p_0,p_1,p_2\n", 35) == 0);
    ct_experiment_destroy(e);
    ct_experiment_destroy(en);
    ct_config_destroy(cfg);
    ct_config_destroy(cfg_named);
}

/* The predictions of e's current weights for x, as CSV text into buf. */
static void predictions(ct_experiment *e, const char *x, char *buf, size_t size) {
    buf[0] = 0;
    FILE *f = fmemopen(buf, size, "w");
    ct_predict_params pp = ct_predict_default_params();
    pp.stream = f;
    CT_CHECK_MSG(f && ct_experiment_predict_with(e, x, NULL, &pp) == CT_OK, "%s",
                 ct_last_error(ctx));
    if (f) (void)fclose(f);
}

static void experiment_load_should_take_ema_trained_or_file_weights_and_say_which(void) {
    ct_config *cfg;
    ct_experiment *e = trained("ema",
                               "data:\n"
                               "  train: {type: synthetic, kind: blobs, n: 90, features: 4, "
                               "classes: 3}\n"
                               "  batch_size: 30\n"
                               "model: {type: mlp, hidden: [5]}\n"
                               "trainer: {max_epochs: 2, ema: {decay: 0.5}}\n",
                               &cfg);
    if (!e) return;
    char x[256], dir[1100], file[1200];
    path_in(x, sizeof x, "xe.npy");
    CT_CHECK(write_npy(x, 4, 4));
    static char with_ema[4096], trained_w[4096], from_file[4096];
    ct_weights_kind kind = CT_WEIGHTS_FILE;
    int64_t step = 0;
    CT_CHECK(ct_experiment_load_with(e, "latest", true, &step, &kind) == CT_OK);
    CT_CHECK(kind == CT_WEIGHTS_EMA && step == 6);
    predictions(e, x, with_ema, sizeof with_ema);
    CT_CHECK(ct_experiment_load_with(e, "latest", false, &step, &kind) == CT_OK);
    CT_CHECK(kind == CT_WEIGHTS_TRAINED && step == 6);
    predictions(e, x, trained_w, sizeof trained_w);
    CT_CHECK(strcmp(with_ema, trained_w) != 0);
    /* the checkpoint's model.safetensors as a bare file: the trained weights */
    CT_CHECK(ct_checkpoint_resolve(ctx, ct_experiment_output_dir(e), "latest", dir, sizeof dir,
                                   NULL) == CT_OK);
    (void)snprintf(file, sizeof file, "%s/model.safetensors", dir);
    CT_CHECK_MSG(ct_experiment_load_with(e, file, true, &step, &kind) == CT_OK, "%s",
                 ct_last_error(ctx));
    CT_CHECK(kind == CT_WEIGHTS_FILE && step == -1);
    predictions(e, x, from_file, sizeof from_file);
    CT_CHECK(strcmp(from_file, trained_w) == 0);
    /* another model's tensors (hidden 6, not 5): refused, naming the file */
    ct_config *cfg2;
    ct_experiment *other = trained("other", CLASSIFIER, &cfg2);
    CT_CHECK(other && ct_experiment_load_with(other, file, true, NULL, NULL) == CT_ERR_SHAPE);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "expected the model's tensors by name") != NULL &&
                     strstr(ct_last_error(ctx), file) != NULL,
                 "%s", ct_last_error(ctx));
    ct_experiment_destroy(other);
    ct_config_destroy(cfg2);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

static void experiment_predict_should_write_a_regressions_values(void) {
    ct_config *cfg;
    ct_experiment *e = trained("regression",
                               "data:\n"
                               "  train: {type: synthetic, kind: linear, n: 40, features: 4, "
                               "outputs: 2}\n"
                               "  batch_size: 20\n"
                               "model: {type: mlp, hidden: [6]}\n"
                               "trainer: {max_epochs: 1}\n",
                               &cfg);
    char x[256], csv[256];
    path_in(x, sizeof x, "xr.npy");
    path_in(csv, sizeof csv, "r.csv");
    CT_CHECK(write_npy(x, 3, 4));
    CT_CHECK_MSG(e && ct_experiment_predict(e, x, csv) == CT_OK, "%s", ct_last_error(ctx));
    FILE *f = fopen(csv, "r");
    char line[512] = "";
    CT_CHECK(f && fgets(line, sizeof line, f) && strcmp(line, "index,y_0,y_1\n") == 0);
    int rows = 0;
    double y0, y1;
    long long index;
    while (f && fgets(line, sizeof line, f))
        rows += sscanf(line, "%lld,%lf,%lf", &index, &y0, &y1) == 3 && index == rows;
    CT_CHECK_INT(rows, 3);
    if (f) (void)fclose(f);
    /* logits are a classifier's */
    ct_predict_params pp = ct_predict_default_params();
    pp.logits = true;
    char lcsv[256];
    path_in(lcsv, sizeof lcsv, "rl.csv");
    CT_CHECK(e && ct_experiment_predict_with(e, x, lcsv, &pp) == CT_ERR_CONFIG);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "predict: logits are a classifier's scores") != NULL,
                 "%s", ct_last_error(ctx));
    CT_CHECK(access(lcsv, F_OK) != 0);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

/* Refused with `code` and a message holding `part`; neither the output nor its temporary
 * name is left. */
static void
check_refused(ct_experiment *e, const char *in, const char *out, ct_status code, const char *part) {
    ct_status s = e ? ct_experiment_predict(e, in, out) : CT_ERR_INTERNAL;
    CT_CHECK_MSG(s == code, "%s -> %s: %s, %s", in, out, ct_status_str(s), ct_last_error(ctx));
    CT_CHECK_MSG(strstr(ct_last_error(ctx), part) != NULL, "%s", ct_last_error(ctx));
    char tmp[300];
    (void)snprintf(tmp, sizeof tmp, "%s.tmp", out);
    CT_CHECK(access(out, F_OK) != 0 && access(tmp, F_OK) != 0);
}

static void experiment_predict_should_refuse_inputs_and_outputs_it_cannot_take(void) {
    ct_config *cfg;
    ct_experiment *e = trained("refusals", CLASSIFIER, &cfg);
    char x[256], x5[256], out[256], txt[256];
    path_in(x, sizeof x, "x4.npy");
    path_in(x5, sizeof x5, "x5.npy");
    path_in(out, sizeof out, "q.csv");
    path_in(txt, sizeof txt, "q.txt");
    CT_CHECK(write_npy(x, 2, 4) && write_npy(x5, 2, 5));
    char want[600];
    (void)snprintf(want, sizeof want, "predict: output '%s': expected a .csv or .npy name", txt);
    check_refused(e, x, txt, CT_ERR_CONFIG, want);
    check_refused(e, "x.csv", out, CT_ERR_CONFIG, "predict: input 'x.csv': expected a .npy array");
    (void)snprintf(want, sizeof want,
                   "%s: samples of shape [5], but the model takes the training data's [4]", x5);
    check_refused(e, x5, out, CT_ERR_SHAPE, want);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

#define LANGUAGE_MODEL                                                                             \
    "data:\n"                                                                                      \
    "  train: {type: text, files: " CT_SOURCE_DIR "/README.md, context: 16}\n"                     \
    "  batch_size: 16\n"                                                                           \
    "model: {type: gpt, n_layer: 1, n_head: 2, d_model: 16}\n"                                     \
    "trainer: {max_steps: 3, max_epochs: 0}\n"

/* The prompt and n sampled bytes into buf (n + strlen(prompt) + 1 bytes); the status. */
static ct_status sample(ct_experiment *e,
                        const char *prompt,
                        int64_t n,
                        double temperature,
                        uint64_t seed,
                        int64_t top_k,
                        char *buf,
                        size_t size) {
    memset(buf, 0, size);
    FILE *f = fmemopen(buf, size, "w");
    if (!f) return CT_ERR_IO;
    ct_status s = ct_experiment_generate(e, prompt, n, temperature, top_k, seed, f);
    (void)fclose(f);
    return s;
}

static void experiment_predict_should_sample_the_same_text_for_the_same_seed(void) {
    ct_config *cfg;
    ct_experiment *e = trained("lm", LANGUAGE_MODEL, &cfg);
    if (!e) return;
    char a[64], b[64], c[64];
    CT_CHECK_MSG(sample(e, "The ", 40, 0.8, 7, 5, a, sizeof a) == CT_OK, "%s", ct_last_error(ctx));
    CT_CHECK(sample(e, "The ", 40, 0.8, 7, 5, b, sizeof b) == CT_OK);
    CT_CHECK(sample(e, "The ", 40, 0.8, 8, 0, c, sizeof c) == CT_OK);
    CT_CHECK(memcmp(a, b, 44) == 0);
    CT_CHECK(memcmp(a, c, 44) != 0);
    CT_CHECK(memcmp(a, "The ", 4) == 0 && memcmp(c, "The ", 4) == 0);
    CT_CHECK(sample(e, "", 4, 0.8, 7, 5, a, sizeof a) == CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "generate: the prompt is empty") != NULL);
    FILE *devnull = fopen("/dev/null", "w");
    CT_CHECK(devnull && ct_experiment_generate(e, "a", 4, -1.0, 5, 1, devnull) == CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "generate: expected temperature >= 0, top_k >= 0 and "
                                        "0..1000000 tokens") != NULL);
    if (devnull) (void)fclose(devnull);
    /* temperature 0: the likeliest byte each time, whatever the seed and top_k; a temperature
       so small that only the largest logit keeps any weight draws the same */
    char g1[64], g2[64], g3[64];
    CT_CHECK_MSG(sample(e, "The ", 40, 0.0, 1, 5, g1, sizeof g1) == CT_OK, "%s",
                 ct_last_error(ctx));
    CT_CHECK(sample(e, "The ", 40, 0.0, 2, 0, g2, sizeof g2) == CT_OK);
    CT_CHECK(sample(e, "The ", 40, 1e-12, 3, 0, g3, sizeof g3) == CT_OK);
    CT_CHECK(memcmp(g1, g2, 44) == 0);
    CT_CHECK(memcmp(g1, g3, 44) == 0);
    char x[256], out[256];
    path_in(x, sizeof x, "x16.npy");
    path_in(out, sizeof out, "lm.csv");
    CT_CHECK(write_npy(x, 2, 16));
    check_refused(e, x, out, CT_ERR_CONFIG, "predict: a language model gives its logits");
    /* its logits [N, T, vocab] for token ids; a number that is not one is refused */
    ct_predict_params pp = ct_predict_default_params();
    pp.logits = true;
    path_in(out, sizeof out, "lm.npy");
    CT_CHECK(e && ct_experiment_predict_with(e, x, out, &pp) == CT_ERR_FORMAT);
    CT_CHECK_MSG(
        strstr(ct_last_error(ctx), "sample 0, position 0: -1 is not a token id in [0, 256)"), "%s",
        ct_last_error(ctx));
    CT_CHECK(write_ids_npy(x, 2, 16));
    CT_CHECK_MSG(e && ct_experiment_predict_with(e, x, out, &pp) == CT_OK, "%s",
                 ct_last_error(ctx));
    static float lg[2 * 16 * 256 + 1];
    CT_CHECK_INT(read_npy(out, lg, 2 * 16 * 256 + 1), 2 * 16 * 256);
    FILE *hf = fopen(out, "rb");
    char head[128] = "";
    CT_CHECK(hf && fread(head, 1, sizeof head - 1, hf) > 0);
    if (hf) (void)fclose(hf);
    CT_CHECK(strstr(head + 10, "'shape': (2, 16, 256)") != NULL);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    /* a classifier samples no text */
    e = trained("no_lm", CLASSIFIER, &cfg);
    CT_CHECK(e && sample(e, "a", 4, 0.8, 1, 0, a, sizeof a) == CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx),
                    "generate: needs a byte-level language model (vocab 256, text data)") != NULL);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

int main(void) {
    if (!mkdtemp(root) || ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    CT_RUN(experiment_predict_should_write_class_probabilities_as_csv_and_npy);
    CT_RUN(experiment_predict_should_write_logits_and_rows_to_a_stream);
    CT_RUN(experiment_predict_should_name_the_class_when_the_data_names_them);
    CT_RUN(experiment_predict_should_write_a_regressions_values);
    CT_RUN(experiment_load_should_take_ema_trained_or_file_weights_and_say_which);
    CT_RUN(experiment_predict_should_refuse_inputs_and_outputs_it_cannot_take);
    CT_RUN(experiment_predict_should_sample_the_same_text_for_the_same_seed);
    ct_ctx_destroy(ctx);
    char cmd[128];
    (void)snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return ct_test_finish();
}

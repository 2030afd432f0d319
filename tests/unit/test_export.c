/*
 * test_export.c - ct_experiment_export_onnx (src/export/onnx.c) read back with the same
 * protobuf-c code: a trained model's layers become their operators in order, its weights are
 * initializers under their state_dict names holding the store's bytes, the input's batch is
 * dynamic and the preprocessing transforms come first; opsets outside 13..17 are refused and
 * nothing is written. In a build without ONNX, the export says what is missing. (Running the
 * files in onnxruntime is tests/e2e/onnx_export.py's part.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/config.h"
#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "ctrain/export.h"
#include "harness.h"

#ifdef CT_HAVE_ONNX
#include "onnx.pb-c.h"
#endif

static ct_ctx *ctx;
static char root[] = "/tmp/ct_export_XXXXXX";

/* A few steps of a small classifier on synthetic blobs, its latest checkpoint loaded. */
static ct_experiment *trained(ct_config **cfg) {
    char text[1024];
    (void)snprintf(text, sizeof text,
                   "seed: 3\n"
                   "data:\n"
                   "  train: {type: synthetic, kind: blobs, n: 64, features: 4, classes: 3}\n"
                   "  batch_size: 16\n"
                   "  transforms: [{type: scale, a: 2.0, b: 1.0}]\n"
                   "model:\n"
                   "  type: sequential\n"
                   "  layers: [{type: linear, out: 8}, batchnorm, gelu, layernorm, dropout,\n"
                   "           {type: linear, out: 3}]\n"
                   "optimizer: {type: adam, lr: 0.01}\n"
                   "trainer: {max_epochs: 0, max_steps: 3}\n"
                   "logging: {progress: none}\n"
                   "output_dir: %s/run\n",
                   root);
    ct_experiment *e = NULL;
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

static void path_in(char *buf, size_t size, const char *name) {
    (void)snprintf(buf, size, "%s/%s", root, name);
}

#ifdef CT_HAVE_ONNX

/* The file's model, decoded; NULL when it cannot be read. */
static Onnx__ModelProto *read_model(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    (void)fclose(f);
    return onnx__model_proto__unpack(NULL, n, buf);
}

static const Onnx__TensorProto *initializer(const Onnx__GraphProto *g, const char *name) {
    for (size_t i = 0; i < g->n_initializer; i++)
        if (strcmp(g->initializer[i]->name, name) == 0) return g->initializer[i];
    return NULL;
}

/* The graph's operators in order, joined by spaces. */
static void op_list(const Onnx__GraphProto *g, char *buf, size_t size) {
    buf[0] = '\0';
    for (size_t i = 0; i < g->n_node; i++)
        (void)snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", i ? " " : "",
                       g->node[i]->op_type);
}

static void export_should_write_the_layers_as_operators_and_the_weights_as_initializers(void) {
    ct_config *cfg = NULL;
    ct_experiment *e = trained(&cfg);
    if (!e) return;
    char path[256];
    path_in(path, sizeof path, "model.onnx");
    ct_onnx_export_params p = ct_onnx_export_default_params();
    p.with_preprocessing = true;
    CT_CHECK_MSG(ct_experiment_export_onnx(e, path, &p) == CT_OK, "%s", ct_last_error(ctx));
    Onnx__ModelProto *m = read_model(path);
    CT_CHECK(m != NULL);
    if (m) {
        CT_CHECK_INT(m->ir_version, 8);
        CT_CHECK(m->n_opset_import == 1 && m->opset_import[0]->version == CT_ONNX_OPSET_DEFAULT);
        const Onnx__GraphProto *g = m->graph;
        char ops[1024];
        op_list(g, ops, sizeof ops);
        /* scale (Mul, Add); linear; batchnorm; exact gelu; layernorm; (dropout: nothing);
           linear; the output */
        CT_CHECK_MSG(strcmp(ops, "Mul Add Transpose MatMul Add BatchNormalization Mul Erf Mul "
                                 "Add Mul LayerNormalization Transpose MatMul Add Identity") == 0,
                     "%s", ops);
        /* the input: [batch, 4], the batch a named dimension */
        const Onnx__TensorShapeProto *in = g->input[0]->type->tensor_type->shape;
        CT_CHECK(strcmp(g->input[0]->name, "input") == 0 && in->n_dim == 2);
        CT_CHECK(in->dim[0]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                 strcmp(in->dim[0]->dim_param, "batch") == 0);
        CT_CHECK(in->dim[1]->dim_value == 4);
        CT_CHECK(strcmp(g->output[0]->name, "output") == 0 &&
                 g->output[0]->type->tensor_type->shape->dim[1]->dim_value == 3);
        /* every tensor of the store, by name, with its shape and bytes */
        const ct_params *store = ct_experiment_params_store(e);
        for (int64_t i = 0; i < ct_params_count(store); i++) {
            const ct_tensor *t = ct_params_at(store, i);
            if (t->dtype != CT_F32) continue; /* num_batches_tracked: not used in evaluation */
            const Onnx__TensorProto *init = initializer(g, t->name);
            CT_CHECK_MSG(init != NULL, "no initializer '%s'", t->name);
            if (!init) continue;
            bool same = init->n_dims == (size_t)t->ndim &&
                        init->raw_data.len == (size_t)ct_tensor_numel(t) * sizeof(float) &&
                        memcmp(init->raw_data.data, t->data, init->raw_data.len) == 0;
            for (int32_t d = 0; same && d < t->ndim; d++)
                same = init->dims[d] == t->shape[d];
            CT_CHECK_MSG(same, "initializer '%s' differs from the store's tensor", t->name);
        }
        /* the scale transform's constants */
        const Onnx__TensorProto *a = initializer(g, g->node[0]->input[1]);
        const Onnx__TensorProto *b = initializer(g, g->node[1]->input[1]);
        float av = 0, bv = 0;
        if (a && b && a->raw_data.len == 4 && b->raw_data.len == 4) {
            memcpy(&av, a->raw_data.data, 4);
            memcpy(&bv, b->raw_data.data, 4);
        }
        CT_CHECK(av == 2.0f && bv == 1.0f);
        onnx__model_proto__free_unpacked(m, NULL);
    }
    /* opset 13: layernorm as its steps */
    p.opset = 13;
    CT_CHECK(ct_experiment_export_onnx(e, path, &p) == CT_OK);
    m = read_model(path);
    if (m) {
        char ops[1024];
        op_list(m->graph, ops, sizeof ops);
        CT_CHECK_MSG(!strstr(ops, "LayerNormalization") && strstr(ops, "ReduceMean"), "%s", ops);
        CT_CHECK(m->opset_import[0]->version == 13);
        onnx__model_proto__free_unpacked(m, NULL);
    }
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

/* A gpt without biases (nanoGPT's bias=False): its linears and layer norms export without the
 * bias inputs, at the LayerNormalization opset and below it. */
static void export_should_write_a_gpt_without_biases(void) {
    char text[1024], path[256];
    path_in(path, sizeof path, "ab.txt");
    FILE *f = fopen(path, "w");
    CT_CHECK(f != NULL);
    if (!f) return;
    for (int i = 0; i < 200; i++)
        (void)fputs("ab", f);
    (void)fclose(f);
    (void)snprintf(text, sizeof text,
                   "seed: 3\n"
                   "data:\n"
                   "  train: {type: text, files: %s, context: 8, stride: 4}\n"
                   "  batch_size: 4\n"
                   "model: {type: gpt, n_layer: 1, n_head: 2, d_model: 8, bias: false}\n"
                   "optimizer: {type: adamw, lr: 0.01}\n"
                   "trainer: {max_epochs: 0, max_steps: 2}\n"
                   "logging: {progress: none}\n"
                   "output_dir: %s/gpt_nobias\n",
                   path, root);
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_status s = ct_config_load_string(ctx, "exp.yaml", text, strlen(text), &cfg);
    if (s == CT_OK) s = ct_experiment_resolve(ctx, cfg);
    if (s == CT_OK) s = ct_experiment_create(ctx, cfg, NULL, &e);
    if (s == CT_OK) s = ct_experiment_fit(e);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    int64_t opsets[] = {17, 13};
    for (int k = 0; s == CT_OK && k < 2; k++) {
        path_in(path, sizeof path, "nobias.onnx");
        ct_onnx_export_params p = ct_onnx_export_default_params();
        p.opset = opsets[k];
        ct_status x = ct_experiment_export_onnx(e, path, &p);
        CT_CHECK_MSG(x == CT_OK, "opset %lld: %s", (long long)opsets[k], ct_last_error(ctx));
        Onnx__ModelProto *m = x == CT_OK ? read_model(path) : NULL;
        if (!m) continue;
        const Onnx__GraphProto *g = m->graph;
        CT_CHECK(initializer(g, "transformer.h.0.attn.c_attn.weight") != NULL);
        for (size_t i = 0; i < g->n_initializer; i++)
            CT_CHECK_MSG(!strstr(g->initializer[i]->name, ".bias"), "%s", g->initializer[i]->name);
        onnx__model_proto__free_unpacked(m, NULL);
    }
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

#endif

static void export_should_refuse_an_opset_outside_13_to_17(void) {
    ct_config *cfg = NULL;
    ct_experiment *e = trained(&cfg);
    if (!e) return;
    char path[256];
    path_in(path, sizeof path, "refused.onnx");
    ct_onnx_export_params p = ct_onnx_export_default_params();
    int64_t bad[] = {12, 18, 0, -1};
    for (int i = 0; i < 4; i++) {
        p.opset = bad[i];
        ct_status s = ct_experiment_export_onnx(e, path, &p);
        CT_CHECK_MSG(s == CT_ERR_CONFIG, "opset %lld: status %d", (long long)bad[i], (int)s);
        if (ct_onnx_export_available())
            CT_CHECK_MSG(strstr(ct_last_error(ctx), "expected 13 to 17"), "%s", ct_last_error(ctx));
        else
            CT_CHECK_MSG(strstr(ct_last_error(ctx), "built without ONNX"), "%s",
                         ct_last_error(ctx));
        CT_CHECK(access(path, F_OK) != 0);
    }
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

int main(void) {
    if (!mkdtemp(root) || ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
#ifdef CT_HAVE_ONNX
    CT_RUN(export_should_write_the_layers_as_operators_and_the_weights_as_initializers);
    CT_RUN(export_should_write_a_gpt_without_biases);
#endif
    CT_RUN(export_should_refuse_an_opset_outside_13_to_17);
    ct_ctx_destroy(ctx);
    char cmd[128];
    (void)snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return ct_test_finish();
}

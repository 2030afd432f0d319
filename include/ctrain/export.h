/*
 * export.h - a trained experiment's model written for other runtimes: an ONNX file (the graph
 * of the model's layers with its weights as initializers) that onnxruntime and other ONNX
 * runtimes run without ctrain.
 *
 * Every model the built-in layer table and builders make exports: sequential stacks (residual
 * blocks included), mlp, cnn and gpt. A user's model type (a plugin) does not: its forward is
 * its own code. The graph is the model in evaluation mode (batch norm with its running
 * statistics, dropout as identity), in f32, with a dynamic batch dimension; a gpt also takes any
 * sequence length up to its context. docs/onnx.md lists the operators each layer becomes.
 *
 * Ownership: the experiment is borrowed (its weights as loaded: ct_experiment_load first); the
 * file is written to PATH.tmp and renamed over PATH only when complete.
 */
#ifndef CTRAIN_EXPORT_H
#define CTRAIN_EXPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "ctrain/experiment.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ONNX opsets the export writes: the oldest and newest (what onnx 1.12 and its IR version
 * 8 know), and the default. */
#define CT_ONNX_OPSET_MIN     13
#define CT_ONNX_OPSET_MAX     17
#define CT_ONNX_OPSET_DEFAULT 17

typedef struct ct_onnx_export_params {
    int64_t opset; /* CT_ONNX_OPSET_MIN..CT_ONNX_OPSET_MAX; default CT_ONNX_OPSET_DEFAULT */
    /* The evaluation transforms (scale, normalize) go into the graph, so that it takes the raw
       features as stored (u8 pixels as uint8) instead of transformed f32; default false. */
    bool with_preprocessing;
} ct_onnx_export_params;

CT_API ct_onnx_export_params ct_onnx_export_default_params(void);

/* Whether this build writes ONNX (it needs libprotobuf-c and onnx.proto at build time). */
CT_API bool ct_onnx_export_available(void);

/*
 * Writes the experiment's model, with the weights it holds now, as an ONNX model to path (p:
 * NULL for the defaults). The graph's input "input" is [batch, sample...] (f32 features, int64
 * token ids, or with with_preprocessing the data's stored dtype); its output "output" is
 * [batch, output sample...]: what ct_model_forward returns (a classifier's logits, a language
 * model's logits [batch, T, vocab]). Errors: CT_ERR_CONFIG for a build without ONNX, an opset
 * outside the range, a model type or a transform the export does not know (naming it);
 * CT_ERR_IO naming the file; CT_ERR_OOM.
 */
CT_API ct_status ct_experiment_export_onnx(ct_experiment *e,
                                           const char *path,
                                           const ct_onnx_export_params *p);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_EXPORT_H */

/*
 * weights.c - the model's weights as a safetensors file for other frameworks
 * (ct_experiment_export_weights): PyTorch state_dict names, tied weights under each of their
 * names, f32 or bf16. The file is written through a temporary name and renamed, as every
 * safetensors file ctrain writes.
 */
#include "ctrain/checkpoint.h"
#include "experiment/experiment_internal.h"

ct_status ct_experiment_export_weights(ct_experiment *e, const char *path, ct_dtype dtype) {
    if (!path)
        return CT_FAIL(e->ctx, CT_ERR_INVALID_ARG, "ct_experiment_export_weights: path is NULL");
    if (dtype != CT_F32 && dtype != CT_BF16)
        return CT_FAIL(e->ctx, CT_ERR_INVALID_ARG,
                       "%s: weights are exported as f32 or bf16, not %s", path,
                       ct_dtype_name(dtype));
    const ct_option meta[] = {{"exported_by", "ctrain"}, {"dtype", ct_dtype_name(dtype)}};
    ct_status s = ct_safetensors_save_as(e->ctx, e->params, path, meta, 2, dtype);
    if (s != CT_OK) return ct_err_wrap(e->ctx, "exporting the weights");
    return CT_OK;
}

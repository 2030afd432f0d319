/*
 * gpt_internal.h - the gpt builder's node layout (gpt.c), shared with its key/value-cache
 * decoder (decode.c), which reads the same tensors by slot without a graph.
 */
#ifndef CT_GPT_INTERNAL_H
#define CT_GPT_INTERNAL_H

#include "nn/nn_internal.h"

/* The root's tensor slots, a block's tensor slots, a block's integer and float settings. */
enum { CT_GPT_WTE, CT_GPT_WPE, CT_GPT_LNF_W, CT_GPT_LNF_B, CT_GPT_HEAD };
enum {
    CT_GPT_LN1_W,
    CT_GPT_LN1_B,
    CT_GPT_ATT_W,
    CT_GPT_ATT_B,
    CT_GPT_APR_W,
    CT_GPT_APR_B,
    CT_GPT_LN2_W,
    CT_GPT_LN2_B,
    CT_GPT_FC_W,
    CT_GPT_FC_B,
    CT_GPT_MPR_W,
    CT_GPT_MPR_B
};
enum { CT_GPT_I_HEAD, CT_GPT_I_LAYER };
enum { CT_GPT_F_DROP };

#define CT_GPT_LN_EPS 1e-5f

/* Whether l is the root node of a gpt model (children: its blocks). */
CT_INTERNAL bool ct_gpt_is_root(const ct_layer *l);

#endif /* CT_GPT_INTERNAL_H */

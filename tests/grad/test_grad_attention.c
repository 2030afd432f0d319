/*
 * test_grad_attention.c - finite-difference checks (gradcheck.h) of causal attention's
 * backward on the fast, blocked kernels and on the reference twin, over a sequence of several
 * attention blocks with a partial last one, so that the gradients flowing between blocks (a
 * query block's dS into earlier key blocks, a key block's dk and dv from later query blocks)
 * are probed.
 */
#include "ctrain/ctrain.h"
#include "gradcheck.h"
#include "harness.h"
#include "kernels/attn_kernels.h"

static ct_tensor *attention_fwd(ct_graph *g, ct_tensor **in, void *user) {
    (void)user;
    return ct_op_causal_attention(g, in[0], 2);
}

static void attention_should_pass_gradcheck_across_blocks(void) {
    enum { B = 1, T = 2 * CT_K_ATTN_BLOCK + 6, C = 8, N = B * T * 3 * C };
    for (int reference = 0; reference <= 1; reference++) {
        ct_ctx_params p = ct_ctx_default_params();
        p.n_threads = 2;
        p.kernels = reference ? CT_KERNELS_REFERENCE : CT_KERNELS_FAST;
        ct_ctx *ctx = NULL;
        if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
        static float qkv[N];
        gc_fill(qkv, N, 11, -1.0f, 1.0f);
        gc_input in = {CT_F32, 3, {B, T, 3 * C}, qkv, true};
        gc_opts o = gc_default_opts();
        o.max_points = 300;
        CT_CHECK(gc_check(reference ? "attention (reference)" : "attention (fast)", ctx, 1, &in,
                          attention_fwd, NULL, &o));
        ct_ctx_destroy(ctx);
    }
}

int main(void) {
    CT_RUN(attention_should_pass_gradcheck_across_blocks);
    return ct_test_finish();
}

/*
 * attention_ref.c - the naive reference twin of causal attention: plain serial loops over
 * (b, h, i, j, d), every dot product and sum accumulated in double. The fast path in
 * src/ops/attention.c is tested against it. Slow by design; clarity is the point.
 *
 * P[i, j] = softmax_j(q_i . k_j / sqrt(hd)) for j <= i, 0 for j > i;  out_i = sum_j P[i, j] v_j.
 * Backward: dP[i, j] = dout_i . v_j;  dS[i, j] = P[i, j] (dP[i, j] - sum_j' P[i, j'] dP[i, j']);
 * dq_i += sum_j dS[i, j] k_j / sqrt(hd);  dk_j += sum_i dS[i, j] q_i / sqrt(hd);
 * dv_j += sum_i P[i, j] dout_i.
 */
#include <math.h>

#include "kernels/attn_kernels.h"

/* Row i of head (b, h)'s probabilities into p[0..T). Forward and backward both call it, so the
 * backward pass sees the forward's probabilities bit for bit without keeping them. */
static void probs_row(
    float *p, const float *qkv, int64_t b, int64_t h, int64_t i, int64_t T, int64_t C, int64_t H) {
    int64_t hd = C / H, C3 = 3 * C;
    double scale = 1.0 / sqrt((double)hd);
    const float *q = qkv + b * T * C3 + h * hd, *k = q + C;
    double mx = -HUGE_VAL;
    for (int64_t j = 0; j <= i; j++) {
        double s = 0.0;
        for (int64_t d = 0; d < hd; d++)
            s += (double)q[i * C3 + d] * (double)k[j * C3 + d];
        s *= scale;
        p[j] = (float)s;
        if (s > mx) mx = s;
    }
    double sum = 0.0;
    for (int64_t j = 0; j <= i; j++)
        sum += exp((double)p[j] - mx);
    for (int64_t j = 0; j <= i; j++)
        p[j] = (float)(exp((double)p[j] - mx) / sum);
    for (int64_t j = i + 1; j < T; j++)
        p[j] = 0.0f;
}

void ct_k_attention_ref_fwd(ct_ctx *ctx,
                            float *out,
                            float *att,
                            const float *qkv,
                            int64_t B,
                            int64_t T,
                            int64_t C,
                            int64_t H) {
    (void)ctx;
    int64_t hd = C / H, C3 = 3 * C;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) {
            const float *v = qkv + b * T * C3 + h * hd + 2 * C;
            float *o = out + b * T * C + h * hd;
            for (int64_t i = 0; i < T; i++) {
                float *p = att + ((b * H + h) * T + i) * T;
                probs_row(p, qkv, b, h, i, T, C, H);
                for (int64_t d = 0; d < hd; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j <= i; j++)
                        acc += (double)p[j] * (double)v[j * C3 + d];
                    o[i * C + d] = (float)acc;
                }
            }
        }
    }
}

void ct_k_attention_ref_bwd(ct_ctx *ctx,
                            float *dqkv,
                            float *scratch,
                            const float *dout,
                            const float *qkv,
                            float *att,
                            int64_t B,
                            int64_t T,
                            int64_t C,
                            int64_t H) {
    (void)ctx;
    int64_t hd = C / H, C3 = 3 * C;
    double scale = 1.0 / sqrt((double)hd);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) {
            int64_t qoff = b * T * C3 + h * hd;
            const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float *dout_h = dout + b * T * C + h * hd;
            float *p = att + (b * H + h) * T * T;
            for (int64_t i = 0; i < T; i++) /* the forward's probabilities, again */
                probs_row(p + i * T, qkv, b, h, i, T, C, H);
            float *ds = scratch + (b * H + h) * T * T;
            /* dS, scaled by 1/sqrt(hd), zero above the diagonal */
            for (int64_t i = 0; i < T; i++) {
                double rowdot = 0.0;
                for (int64_t j = 0; j <= i; j++) {
                    double dp = 0.0;
                    for (int64_t d = 0; d < hd; d++)
                        dp += (double)dout_h[i * C + d] * (double)v[j * C3 + d];
                    ds[i * T + j] = (float)dp;
                    rowdot += (double)p[i * T + j] * dp;
                }
                for (int64_t j = 0; j <= i; j++)
                    ds[i * T + j] =
                        (float)((double)p[i * T + j] * ((double)ds[i * T + j] - rowdot) * scale);
                for (int64_t j = i + 1; j < T; j++)
                    ds[i * T + j] = 0.0f;
            }
            for (int64_t i = 0; i < T; i++) {
                for (int64_t d = 0; d < hd; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j <= i; j++)
                        acc += (double)ds[i * T + j] * (double)k[j * C3 + d];
                    dq[i * C3 + d] += (float)acc;
                }
            }
            for (int64_t j = 0; j < T; j++) {
                for (int64_t d = 0; d < hd; d++) {
                    double acck = 0.0, accv = 0.0;
                    for (int64_t i = j; i < T; i++) {
                        acck += (double)ds[i * T + j] * (double)q[i * C3 + d];
                        accv += (double)p[i * T + j] * (double)dout_h[i * C + d];
                    }
                    dk[j * C3 + d] += (float)acck;
                    dv[j * C3 + d] += (float)accv;
                }
            }
        }
    }
}

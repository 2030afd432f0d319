/*
 * pool_blocked.c - the 2x2 max pool (stride 2, no padding) of the fused conv2d -> ReLU -> max
 * pool, read straight from oneDNN's channel-blocked layout (nChw16c), and its backward routing
 * into that layout.
 *
 * In nChw16c the 16 channels of a pixel are contiguous, so one window is four loads of 16
 * floats and the comparisons vectorise across channels; only the pooled output (a quarter of
 * the convolution's) is written back in NCHW. The candidates, their order and the selects are
 * those of src/ops/pool.c's 2x2 path, so the values and codes are its bits.
 */
#include <math.h>

#include "kernels/cnn_kernels.h"

/* ct_k_relu_inplace's rule for one value (NaN and -0 pass through). */
static inline float relu1(float v) {
    return 0.0f > v ? 0.0f : v;
}

/* The windows of blk channels whose top-left elements start at p0 (row below at p0 + sh,
 * column right at + sw), into yo and ko; blk is a constant where the caller inlines it. */
static inline void window(int64_t blk,
                          const float *p0,
                          int64_t sh,
                          int64_t sw,
                          float *restrict yo,
                          int32_t *restrict ko) {
    const float *p1 = p0 + sw, *p2 = p0 + sh, *p3 = p2 + sw;
    for (int64_t j = 0; j < blk; j++) {
        float v = relu1(p0[j]), v1 = relu1(p1[j]), v2 = relu1(p2[j]), v3 = relu1(p3[j]);
        int32_t k = 0;
        bool t = (v1 > v) | isnan(v1);
        v = t ? v1 : v;
        k = t ? 1 : k;
        t = (v2 > v) | isnan(v2);
        v = t ? v2 : v;
        k = t ? 2 : k;
        t = (v3 > v) | isnan(v3);
        yo[j] = t ? v3 : v;
        ko[j] = t ? 3 : k;
    }
}

CT_HOT void ct_k_relu_pool2x2_blocked(const ct_k_blocked *v,
                                      const float *src,
                                      int64_t n,
                                      int64_t c,
                                      int64_t ph,
                                      int64_t pw,
                                      float *y,
                                      uint8_t *code) {
    const int64_t blk = v->blk, lo = ph * pw, n_blocks = (c + blk - 1) / blk;
    float yo[64];
    int32_t ko[64];
    for (int64_t b = 0; b < n; b++) {
        for (int64_t cb = 0; cb < n_blocks; cb++) {
            int64_t c0 = cb * blk, m = c - c0 < blk ? c - c0 : blk;
            const float *plane = src + b * v->sn + cb * v->sc;
            float *yp = y + (b * c + c0) * lo;
            uint8_t *kp = code ? code + (b * c + c0) * lo : NULL;
            for (int64_t oh = 0; oh < ph; oh++) {
                for (int64_t ow = 0; ow < pw; ow++) {
                    const float *p0 = plane + 2 * oh * v->sh + 2 * ow * v->sw;
                    if (blk == 16)
                        window(16, p0, v->sh, v->sw, yo, ko);
                    else if (blk <= 64)
                        window(blk, p0, v->sh, v->sw, yo, ko);
                    int64_t o = oh * pw + ow;
                    for (int64_t j = 0; j < m; j++)
                        yp[j * lo + o] = yo[j];
                    if (kp)
                        for (int64_t j = 0; j < m; j++)
                            kp[j * lo + o] = (uint8_t)ko[j];
                }
            }
        }
    }
}

CT_HOT void ct_k_pool2x2_scatter_blocked(const ct_k_blocked *v,
                                         const float *dy,
                                         const float *y,
                                         const uint8_t *code,
                                         int64_t n,
                                         int64_t c,
                                         int64_t ph,
                                         int64_t pw,
                                         float *dst) {
    const int64_t blk = v->blk, lo = ph * pw;
    for (int64_t b = 0; b < n; b++) {
        for (int64_t ch = 0; ch < c; ch++) {
            float *plane = dst + b * v->sn + (ch / blk) * v->sc + ch % blk;
            int64_t base = (b * c + ch) * lo;
            for (int64_t oh = 0; oh < ph; oh++) {
                for (int64_t ow = 0; ow < pw; ow++) {
                    int64_t i = base + oh * pw + ow, k = code[i];
                    /* as max_pool2d's backward (+= into a zeroed gradient) and then
                     * conv2d_relu's mask */
                    float d = 0.0f + dy[i];
                    plane[(2 * oh + (k >> 1)) * v->sh + (2 * ow + (k & 1)) * v->sw] =
                        0.0f + (y[i] <= 0.0f ? 0.0f : d);
                }
            }
        }
    }
}

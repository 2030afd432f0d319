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
#include <string.h>

#include "kernels/cnn_kernels.h"

/* Channels per vector pass, and pooled columns per pass: the loops over them run on small
 * local arrays of fixed size, so that they vectorise whole (as pool.c's chunks). */
#define LANES 16
#define COLS  16

/* ct_k_relu_inplace's rule for one value (NaN and -0 pass through). */
static inline float relu1(float v) {
    return 0.0f > v ? 0.0f : v;
}

/* The window of LANES channels whose four elements (row-major) are a0..a3, ReLU applied (in
 * place: a loop of its own, which vectorises where the select inside the next would not), into
 * yo and ko: the candidates, order and selects of pool.c's max_chunk_2x2. */
static inline void window(float *restrict a0,
                          float *restrict a1,
                          float *restrict a2,
                          float *restrict a3,
                          float *restrict yo,
                          int32_t *restrict ko) {
    for (int j = 0; j < LANES; j++) {
        a0[j] = relu1(a0[j]);
        a1[j] = relu1(a1[j]);
        a2[j] = relu1(a2[j]);
        a3[j] = relu1(a3[j]);
    }
    for (int j = 0; j < LANES; j++) {
        float v = a0[j], v1 = a1[j], v2 = a2[j], v3 = a3[j];
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

/* A window's four places (row-major) for LANES channels: at the place k names the gradient
 * d masked as max_pool2d's backward (+= into a zeroed gradient) and then conv2d_relu's mask
 * make it from the pooled output y, +0 at the others; as selects, which vectorise (random
 * signs would mispredict half of the branches). */
static inline void route(const float *restrict d,
                         const float *restrict y,
                         const int32_t *restrict k,
                         float *restrict o0,
                         float *restrict o1,
                         float *restrict o2,
                         float *restrict o3) {
    for (int j = 0; j < LANES; j++) {
        float dj = 0.0f + d[j], yj = y[j];
        float mj = 0.0f + (yj <= 0.0f ? 0.0f : dj);
        int32_t kj = k[j];
        o0[j] = kj == 0 ? mj : 0.0f;
        o1[j] = kj == 1 ? mj : 0.0f;
        o2[j] = kj == 2 ? mj : 0.0f;
        o3[j] = kj == 3 ? mj : 0.0f;
    }
}

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
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
    float a0[LANES], a1[LANES], a2[LANES], a3[LANES], yo[COLS][LANES];
    int32_t ko[COLS][LANES]; /* as wide as the floats: the window loop vectorises at their width */
    memset(a0, 0, sizeof a0), memset(a1, 0, sizeof a1), memset(a2, 0, sizeof a2);
    memset(a3, 0, sizeof a3);
    for (int64_t b = 0; b < n; b++) {
        for (int64_t cb = 0; cb < n_blocks; cb++) {
            const float *plane = src + b * v->sn + cb * v->sc;
            for (int64_t j0 = 0; j0 < blk && cb * blk + j0 < c; j0 += LANES) {
                int64_t lanes = min64(LANES, blk - j0), c0 = cb * blk + j0;
                int64_t valid = min64(lanes, c - c0); /* past c: the layout's padding */
                for (int64_t oh = 0; oh < ph; oh++) {
                    for (int64_t ow0 = 0; ow0 < pw; ow0 += COLS) {
                        int64_t cols = min64(COLS, pw - ow0);
                        for (int64_t q = 0; q < cols; q++) {
                            const float *p0 = plane + 2 * oh * v->sh + 2 * (ow0 + q) * v->sw + j0;
                            /* a constant size where it can: one vector load each */
                            size_t bytes = lanes == LANES ? sizeof a0 : (size_t)lanes * 4;
                            if (lanes == LANES) {
                                memcpy(a0, p0, sizeof a0);
                                memcpy(a1, p0 + v->sw, sizeof a1);
                                memcpy(a2, p0 + v->sh, sizeof a2);
                                memcpy(a3, p0 + v->sh + v->sw, sizeof a3);
                            } else {
                                memcpy(a0, p0, bytes);
                                memcpy(a1, p0 + v->sw, bytes);
                                memcpy(a2, p0 + v->sh, bytes);
                                memcpy(a3, p0 + v->sh + v->sw, bytes);
                            }
                            window(a0, a1, a2, a3, yo[q], ko[q]);
                        }
                        for (int64_t j = 0; j < valid; j++) {
                            int64_t at = (b * c + c0 + j) * lo + oh * pw + ow0;
                            for (int64_t q = 0; q < cols; q++)
                                y[at + q] = yo[q][j];
                            if (code)
                                for (int64_t q = 0; q < cols; q++)
                                    code[at + q] = (uint8_t)ko[q][j];
                        }
                    }
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
    const int64_t blk = v->blk, lo = ph * pw, n_blocks = (c + blk - 1) / blk;
    float dv[COLS][LANES], yv[COLS][LANES], o[4][LANES];
    int32_t kv[COLS][LANES];
    for (int64_t b = 0; b < n; b++) {
        for (int64_t cb = 0; cb < n_blocks; cb++) {
            float *plane = dst + b * v->sn + cb * v->sc;
            for (int64_t j0 = 0; j0 < blk; j0 += LANES) {
                int64_t lanes = min64(LANES, blk - j0), c0 = cb * blk + j0;
                int64_t valid = c0 < c ? min64(lanes, c - c0) : 0;
                for (int64_t oh = 0; oh < ph; oh++) {
                    for (int64_t ow0 = 0; ow0 < pw; ow0 += COLS) {
                        int64_t cols = min64(COLS, pw - ow0);
                        if (valid < LANES) { /* the padding's lanes get +0 */
                            memset(dv, 0, sizeof dv);
                            memset(yv, 0, sizeof yv);
                            memset(kv, 0, sizeof kv);
                        }
                        /* column after column: a column's lanes are stored long before
                         * route reads them back whole (no store-forwarding stall) */
                        int64_t at0 = (b * c + c0) * lo + oh * pw + ow0;
                        for (int64_t q = 0; q < cols; q++) {
                            for (int64_t j = 0; j < valid; j++) {
                                int64_t at = at0 + j * lo + q;
                                dv[q][j] = dy[at];
                                yv[q][j] = y[at];
                                kv[q][j] = code[at];
                            }
                        }
                        for (int64_t q = 0; q < cols; q++) {
                            /* every place of the window written: the winner's gradient, +0
                             * elsewhere */
                            route(dv[q], yv[q], kv[q], o[0], o[1], o[2], o[3]);
                            float *p0 = plane + 2 * oh * v->sh + 2 * (ow0 + q) * v->sw + j0;
                            float *p[4] = {p0, p0 + v->sw, p0 + v->sh, p0 + v->sh + v->sw};
                            if (lanes == LANES) /* a constant size: one vector store each */
                                for (int r = 0; r < 4; r++)
                                    memcpy(p[r], o[r], sizeof o[r]);
                            else
                                for (int r = 0; r < 4; r++)
                                    memcpy(p[r], o[r], (size_t)lanes * sizeof(float));
                        }
                    }
                }
            }
        }
    }
}

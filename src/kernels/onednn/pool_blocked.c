/*
 * pool_blocked.c - the 2x2 max pool (stride 2, no padding) of the fused conv2d -> ReLU -> max
 * pool, read straight from oneDNN's channel-blocked layout (nChw16c), and its backward routing
 * into that layout.
 *
 * In nChw16c the 16 channels of a pixel are contiguous, so one window is four loads of 16
 * floats and the comparisons vectorise across channels; only the pooled output (a quarter of
 * the convolution's) is written back in NCHW. The candidates, their order and the selects are
 * those of src/ops/pool.c's 2x2 path, so the values and codes are its bits.
 *
 * The NCHW side is a transpose: a tile of 16 pooled pixels by 16 channels is computed (or
 * routed) one pixel at a time, 16 channels wide, while NCHW holds each channel's pooled plane
 * contiguous. The tiles run along the flattened plane (oh * pw + ow), so each channel's part of
 * a tile is one run of up to 16 contiguous values even where pw is 7 or 14. With AVX-512 the
 * tile is transposed in registers and written (read) as one masked vector per channel, and the
 * forward's windows (16 full lanes) are computed in registers too, with the same selects;
 * without it the transpose goes element by element. The transposes only move values: the same
 * bits either way (tests/unit/test_pool_blocked.c runs both).
 */
#include <math.h>
#include <string.h>

#include "kernels/avx512_transpose.h"
#include "kernels/cnn_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define POOL_X86 1
#include <immintrin.h>
#else
#define POOL_X86 0
#endif

/* Channels per vector pass, and pooled pixels per tile: the loops over them run on small
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

/* out[j * ld + q] = in[q][j] for q < np, j < nv: the tile in NCHW. */
static void tile_store(float (*in)[LANES],
                       int32_t (*kin)[LANES],
                       int64_t np,
                       int64_t nv,
                       float *out,
                       uint8_t *code,
                       int64_t ld) {
    for (int64_t j = 0; j < nv; j++) {
        for (int64_t q = 0; q < np; q++)
            out[j * ld + q] = in[q][j];
        if (code)
            for (int64_t q = 0; q < np; q++)
                code[j * ld + q] = (uint8_t)kin[q][j];
    }
}

/* dv[q][j] = dy[j * ld + q] (and yv, kv from y, code) for q < np, j < nv; lanes j >= nv are +0
 * (the layout's padding channels), pixels q >= np are left as they are (never routed). */
static void tile_load(const float *dy,
                      const float *y,
                      const uint8_t *code,
                      int64_t np,
                      int64_t nv,
                      int64_t ld,
                      float (*dv)[LANES],
                      float (*yv)[LANES],
                      int32_t (*kv)[LANES]) {
    if (nv < LANES) {
        memset(dv, 0, sizeof(float[COLS][LANES]));
        memset(yv, 0, sizeof(float[COLS][LANES]));
        memset(kv, 0, sizeof(int32_t[COLS][LANES]));
    }
    /* pixel after pixel: a pixel's lanes are stored long before route reads them back whole
     * (no store-forwarding stall) */
    for (int64_t q = 0; q < np; q++) {
        for (int64_t j = 0; j < nv; j++) {
            dv[q][j] = dy[j * ld + q];
            yv[q][j] = y[j * ld + q];
            kv[q][j] = code[j * ld + q];
        }
    }
}

#if POOL_X86
/* Elements ahead in each channel row that the backward's tile loads prefetch: four tiles. The
 * rows are short (a pooled plane: 49 or 196 values in the CNN) and 48 of them are read side by
 * side, too many streams for the hardware prefetchers to follow. */
#define PF     64
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* tile_store's result, one masked store per channel. */
static AVX512 void tile_store_avx512(float (*in)[LANES],
                                     int32_t (*kin)[LANES],
                                     int64_t np,
                                     int64_t nv,
                                     float *out,
                                     uint8_t *code,
                                     int64_t ld) {
    __mmask16 m = (__mmask16)((1u << np) - 1);
    __m512 r[16];
    for (int q = 0; q < 16; q++)
        r[q] = _mm512_loadu_ps(in[q]);
    ct_k_transpose16(r);
    for (int64_t j = 0; j < nv; j++)
        _mm512_mask_storeu_ps(out + j * ld, m, r[j]);
    if (!code) return;
    for (int q = 0; q < 16; q++)
        r[q] = _mm512_castsi512_ps(_mm512_loadu_si512(kin[q]));
    ct_k_transpose16(r);
    for (int64_t j = 0; j < nv; j++)
        _mm512_mask_cvtepi32_storeu_epi8(code + j * ld, m, _mm512_castps_si512(r[j]));
}

/* relu1 on 16 lanes: the same select (0 > v, false for NaN). */
static inline AVX512 __m512 relu16(__m512 v) {
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(_mm512_setzero_ps(), v, _CMP_GT_OQ),
                              _mm512_setzero_ps());
}

/* One tile of the forward with 16 full lanes, in registers: window's candidates, order and
 * selects for np pixels from (oh, ow) on (row-major, pw a row), then tile_store_avx512's
 * transpose and stores. */
static AVX512 void pool_tile_avx512(const float *plane,
                                    const ct_k_blocked *v,
                                    int64_t oh,
                                    int64_t ow,
                                    int64_t pw,
                                    int64_t np,
                                    int64_t nv,
                                    float *out,
                                    uint8_t *code,
                                    int64_t ld) {
    __m512 r[16];
    __m512i k[16];
    const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
    const __m512i three = _mm512_set1_epi32(3);
    for (int q = 0; q < 16; q++) {
        if (q >= np) {
            r[q] = _mm512_setzero_ps(), k[q] = _mm512_setzero_si512();
            continue;
        }
        const float *w0 = plane + 2 * oh * v->sh + 2 * ow * v->sw;
        if (++ow == pw) ow = 0, oh++;
        __m512 m = relu16(_mm512_loadu_ps(w0));
        __m512 e1 = relu16(_mm512_loadu_ps(w0 + v->sw));
        __m512 e2 = relu16(_mm512_loadu_ps(w0 + v->sh));
        __m512 e3 = relu16(_mm512_loadu_ps(w0 + v->sh + v->sw));
        __mmask16 t =
            _mm512_cmp_ps_mask(e1, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(e1, e1, _CMP_UNORD_Q);
        m = _mm512_mask_mov_ps(m, t, e1);
        __m512i kq = _mm512_maskz_mov_epi32(t, one);
        t = _mm512_cmp_ps_mask(e2, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(e2, e2, _CMP_UNORD_Q);
        m = _mm512_mask_mov_ps(m, t, e2);
        kq = _mm512_mask_mov_epi32(kq, t, two);
        t = _mm512_cmp_ps_mask(e3, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(e3, e3, _CMP_UNORD_Q);
        r[q] = _mm512_mask_mov_ps(m, t, e3);
        k[q] = _mm512_mask_mov_epi32(kq, t, three);
    }
    __mmask16 mk = (__mmask16)((1u << np) - 1);
    ct_k_transpose16(r);
    for (int64_t j = 0; j < nv; j++)
        _mm512_mask_storeu_ps(out + j * ld, mk, r[j]);
    if (!code) return;
    for (int q = 0; q < 16; q++)
        r[q] = _mm512_castsi512_ps(k[q]);
    ct_k_transpose16(r);
    for (int64_t j = 0; j < nv; j++)
        _mm512_mask_cvtepi32_storeu_epi8(code + j * ld, mk, _mm512_castps_si512(r[j]));
}

/* tile_load's result, one masked load per channel (pixels q >= np come out +0). */
static AVX512 void tile_load_avx512(const float *dy,
                                    const float *y,
                                    const uint8_t *code,
                                    int64_t np,
                                    int64_t nv,
                                    int64_t ld,
                                    float (*dv)[LANES],
                                    float (*yv)[LANES],
                                    int32_t (*kv)[LANES]) {
    __mmask16 m = (__mmask16)((1u << np) - 1);
    __m512 r[16];
    for (int64_t j = 0; j < nv; j++) {
        _mm_prefetch((const char *)(dy + j * ld + PF), _MM_HINT_T0);
        _mm_prefetch((const char *)(y + j * ld + PF), _MM_HINT_T0);
        _mm_prefetch((const char *)(code + j * ld + PF), _MM_HINT_T0);
    }
    for (int j = 0; j < 16; j++)
        r[j] = j < nv ? _mm512_maskz_loadu_ps(m, dy + j * ld) : _mm512_setzero_ps();
    ct_k_transpose16(r);
    for (int q = 0; q < 16; q++)
        _mm512_storeu_ps(dv[q], r[q]);
    for (int j = 0; j < 16; j++)
        r[j] = j < nv ? _mm512_maskz_loadu_ps(m, y + j * ld) : _mm512_setzero_ps();
    ct_k_transpose16(r);
    for (int q = 0; q < 16; q++)
        _mm512_storeu_ps(yv[q], r[q]);
    for (int j = 0; j < 16; j++)
        r[j] =
            j < nv
                ? _mm512_castsi512_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, code + j * ld)))
                : _mm512_setzero_ps();
    ct_k_transpose16(r);
    for (int q = 0; q < 16; q++)
        _mm512_storeu_si512(kv[q], _mm512_castps_si512(r[q]));
}
#define AVX512_BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* ct_k_pool2x2_scatter_blocked's routing with 16 full lanes (blk a multiple of 16), its values
 * rounded to bf16 (vcvtneps2bf16) into dst, a bf16 buffer with v's element strides. */
static AVX512_BF void scatter_bf16_avx512(const ct_k_blocked *v,
                                          const float *dy,
                                          const float *y,
                                          const uint8_t *code,
                                          int64_t n,
                                          int64_t c,
                                          int64_t ph,
                                          int64_t pw,
                                          uint16_t *dst) {
    const int64_t blk = v->blk, lo = ph * pw, n_blocks = (c + blk - 1) / blk;
    float dv[COLS][LANES], yv[COLS][LANES], o[4][LANES];
    int32_t kv[COLS][LANES];
    memset(dv, 0, sizeof dv), memset(yv, 0, sizeof yv), memset(kv, 0, sizeof kv);
    for (int64_t b = 0; b < n; b++) {
        for (int64_t cb = 0; cb < n_blocks; cb++) {
            uint16_t *plane = dst + b * v->sn + cb * v->sc;
            for (int64_t j0 = 0; j0 < blk; j0 += LANES) {
                int64_t c0 = cb * blk + j0;
                int64_t valid = c0 < c ? min64(LANES, c - c0) : 0;
                int64_t oh = 0, ow = 0; /* of pixel p0 + q */
                for (int64_t p0 = 0; p0 < lo; p0 += COLS) {
                    int64_t np = min64(COLS, lo - p0);
                    int64_t at = (b * c + (valid ? c0 : 0)) * lo + p0;
                    tile_load_avx512(dy + at, y + at, code + at, np, valid, lo, dv, yv, kv);
                    for (int64_t q = 0; q < np; q++) {
                        route(dv[q], yv[q], kv[q], o[0], o[1], o[2], o[3]);
                        uint16_t *w0 = plane + 2 * oh * v->sh + 2 * ow * v->sw + j0;
                        uint16_t *p[4] = {w0, w0 + v->sw, w0 + v->sh, w0 + v->sh + v->sw};
                        for (int r = 0; r < 4; r++)
                            _mm256_storeu_si256((__m256i *)(void *)p[r],
                                                (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(o[r])));
                        if (++ow == pw) ow = 0, oh++;
                    }
                }
            }
        }
    }
}
#endif /* POOL_X86 */

bool ct_k_pool_blocked_has_bf16(void) {
#if POOL_X86
    return ct_k_pool_blocked_has_avx512() && __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

void ct_k_pool2x2_scatter_blocked_bf16(const ct_k_blocked *v,
                                       const float *dy,
                                       const float *y,
                                       const uint8_t *code,
                                       int64_t n,
                                       int64_t c,
                                       int64_t ph,
                                       int64_t pw,
                                       uint16_t *dst) {
#if POOL_X86
    scatter_bf16_avx512(v, dy, y, code, n, c, ph, pw, dst);
#else
    (void)v, (void)dy, (void)y, (void)code, (void)n, (void)c, (void)ph, (void)pw, (void)dst;
#endif
}

bool ct_k_pool_blocked_has_avx512(void) {
#if POOL_X86
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

CT_HOT void ct_k_relu_pool2x2_blocked_isa(bool avx512,
                                          const ct_k_blocked *v,
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
    memset(a3, 0, sizeof a3), memset(yo, 0, sizeof yo), memset(ko, 0, sizeof ko);
#if !POOL_X86
    (void)avx512;
#endif
    for (int64_t b = 0; b < n; b++) {
        for (int64_t cb = 0; cb < n_blocks; cb++) {
            const float *plane = src + b * v->sn + cb * v->sc;
            for (int64_t j0 = 0; j0 < blk && cb * blk + j0 < c; j0 += LANES) {
                int64_t lanes = min64(LANES, blk - j0), c0 = cb * blk + j0;
                int64_t valid = min64(lanes, c - c0); /* past c: the layout's padding */
                int64_t oh = 0, ow = 0;               /* of pixel p0 + q */
                for (int64_t p0 = 0; p0 < lo; p0 += COLS) {
                    int64_t np = min64(COLS, lo - p0);
#if POOL_X86
                    if (avx512 && lanes == LANES) {
                        int64_t at = (b * c + c0) * lo + p0;
                        pool_tile_avx512(plane + j0, v, oh, ow, pw, np, valid, y + at,
                                         code ? code + at : NULL, lo);
                        ow += np, oh += ow / pw, ow %= pw;
                        continue;
                    }
#endif
                    for (int64_t q = 0; q < np; q++) {
                        const float *w0 = plane + 2 * oh * v->sh + 2 * ow * v->sw + j0;
                        /* a constant size where it can: one vector load each */
                        if (lanes == LANES) {
                            memcpy(a0, w0, sizeof a0);
                            memcpy(a1, w0 + v->sw, sizeof a1);
                            memcpy(a2, w0 + v->sh, sizeof a2);
                            memcpy(a3, w0 + v->sh + v->sw, sizeof a3);
                        } else {
                            size_t bytes = (size_t)lanes * sizeof(float);
                            memcpy(a0, w0, bytes);
                            memcpy(a1, w0 + v->sw, bytes);
                            memcpy(a2, w0 + v->sh, bytes);
                            memcpy(a3, w0 + v->sh + v->sw, bytes);
                        }
                        window(a0, a1, a2, a3, yo[q], ko[q]);
                        if (++ow == pw) ow = 0, oh++;
                    }
                    int64_t at = (b * c + c0) * lo + p0;
                    uint8_t *ct = code ? code + at : NULL;
#if POOL_X86
                    if (avx512) {
                        tile_store_avx512(yo, ko, np, valid, y + at, ct, lo);
                        continue;
                    }
#endif
                    tile_store(yo, ko, np, valid, y + at, ct, lo);
                }
            }
        }
    }
}

void ct_k_relu_pool2x2_blocked(const ct_k_blocked *v,
                               const float *src,
                               int64_t n,
                               int64_t c,
                               int64_t ph,
                               int64_t pw,
                               float *y,
                               uint8_t *code) {
    ct_k_relu_pool2x2_blocked_isa(ct_k_pool_blocked_has_avx512(), v, src, n, c, ph, pw, y, code);
}

CT_HOT void ct_k_pool2x2_scatter_blocked_isa(bool avx512,
                                             const ct_k_blocked *v,
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
    memset(dv, 0, sizeof dv), memset(yv, 0, sizeof yv), memset(kv, 0, sizeof kv);
#if !POOL_X86
    (void)avx512;
#endif
    for (int64_t b = 0; b < n; b++) {
        for (int64_t cb = 0; cb < n_blocks; cb++) {
            float *plane = dst + b * v->sn + cb * v->sc;
            for (int64_t j0 = 0; j0 < blk; j0 += LANES) {
                int64_t lanes = min64(LANES, blk - j0), c0 = cb * blk + j0;
                int64_t valid = c0 < c ? min64(lanes, c - c0) : 0;
                int64_t oh = 0, ow = 0; /* of pixel p0 + q */
                for (int64_t p0 = 0; p0 < lo; p0 += COLS) {
                    int64_t np = min64(COLS, lo - p0);
                    /* valid 0 (a block of padding only): no channel row to read */
                    int64_t at = (b * c + (valid ? c0 : 0)) * lo + p0;
#if POOL_X86
                    if (avx512)
                        tile_load_avx512(dy + at, y + at, code + at, np, valid, lo, dv, yv, kv);
                    else
#endif
                        tile_load(dy + at, y + at, code + at, np, valid, lo, dv, yv, kv);
                    for (int64_t q = 0; q < np; q++) {
                        /* every place of the window written: the winner's gradient, +0
                         * elsewhere */
                        route(dv[q], yv[q], kv[q], o[0], o[1], o[2], o[3]);
                        float *w0 = plane + 2 * oh * v->sh + 2 * ow * v->sw + j0;
                        float *p[4] = {w0, w0 + v->sw, w0 + v->sh, w0 + v->sh + v->sw};
                        if (lanes == LANES) /* a constant size: one vector store each */
                            for (int r = 0; r < 4; r++)
                                memcpy(p[r], o[r], sizeof o[r]);
                        else
                            for (int r = 0; r < 4; r++)
                                memcpy(p[r], o[r], (size_t)lanes * sizeof(float));
                        if (++ow == pw) ow = 0, oh++;
                    }
                }
            }
        }
    }
}

void ct_k_pool2x2_scatter_blocked(const ct_k_blocked *v,
                                  const float *dy,
                                  const float *y,
                                  const uint8_t *code,
                                  int64_t n,
                                  int64_t c,
                                  int64_t ph,
                                  int64_t pw,
                                  float *dst) {
    ct_k_pool2x2_scatter_blocked_isa(ct_k_pool_blocked_has_avx512(), v, dy, y, code, n, c, ph, pw,
                                     dst);
}

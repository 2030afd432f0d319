/*
 * conv2d_ref.c - the naive direct 2-D convolution, forward and backward: the reference twin the
 * im2col + GEMM path of src/ops/conv2d.c is tested against. Slow by design (serial loops, sums
 * in double); the index arithmetic is written out so that it can be checked by eye against
 * PyTorch's definition.
 */
#include "kernels/cnn_kernels.h"

/* Output index along one axis that reads input index i through kernel tap k, or -1 when none:
 * i = o*stride - pad + k*dil  <=>  o = (i + pad - k*dil) / stride, exactly divisible. */
static int64_t
out_index(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t dil, int64_t n_out) {
    int64_t t = i + pad - k * dil;
    if (t < 0 || t % stride != 0) return -1;
    int64_t o = t / stride;
    return o < n_out ? o : -1;
}

void ct_k_conv2d_ref_fwd(
    const ct_k_conv2d_geom *s, const float *x, const float *w, const float *b, float *y) {
    int64_t cg = s->c / s->groups, og = s->o / s->groups;
    for (int64_t n = 0; n < s->n; n++) {
        for (int64_t o = 0; o < s->o; o++) {
            int64_t c0 = (o / og) * cg;
            for (int64_t oh = 0; oh < s->oh; oh++) {
                for (int64_t ow = 0; ow < s->ow; ow++) {
                    double acc = b ? (double)b[o] : 0.0;
                    for (int64_t ci = 0; ci < cg; ci++) {
                        const float *xp = x + ((n * s->c) + c0 + ci) * s->h * s->w;
                        const float *wp = w + (o * cg + ci) * s->kh * s->kw;
                        for (int64_t kh = 0; kh < s->kh; kh++) {
                            int64_t ih = oh * s->stride[0] - s->padding[0] + kh * s->dilation[0];
                            if (ih < 0 || ih >= s->h) continue;
                            for (int64_t kw = 0; kw < s->kw; kw++) {
                                int64_t iw =
                                    ow * s->stride[1] - s->padding[1] + kw * s->dilation[1];
                                if (iw < 0 || iw >= s->w) continue;
                                acc += (double)xp[ih * s->w + iw] * (double)wp[kh * s->kw + kw];
                            }
                        }
                    }
                    y[((n * s->o + o) * s->oh + oh) * s->ow + ow] = (float)acc;
                }
            }
        }
    }
}

void ct_k_conv2d_ref_bwd(const ct_k_conv2d_geom *s,
                         const float *x,
                         const float *w,
                         const float *dy,
                         float *dx,
                         float *dw,
                         float *db) {
    int64_t cg = s->c / s->groups, og = s->o / s->groups;
    int64_t plane_out = s->oh * s->ow;
    if (db) {
        for (int64_t o = 0; o < s->o; o++) {
            double acc = 0.0;
            for (int64_t n = 0; n < s->n; n++)
                for (int64_t i = 0; i < plane_out; i++)
                    acc += (double)dy[(n * s->o + o) * plane_out + i];
            db[o] += (float)acc;
        }
    }
    if (dw) {
        /* dw[o, ci, kh, kw] = sum over n, oh, ow of dy[n, o, oh, ow] * x[n, c0+ci, ih, iw] */
        for (int64_t o = 0; o < s->o; o++) {
            int64_t c0 = (o / og) * cg;
            for (int64_t ci = 0; ci < cg; ci++) {
                for (int64_t kh = 0; kh < s->kh; kh++) {
                    for (int64_t kw = 0; kw < s->kw; kw++) {
                        double acc = 0.0;
                        for (int64_t n = 0; n < s->n; n++) {
                            const float *xp = x + ((n * s->c) + c0 + ci) * s->h * s->w;
                            const float *dyp = dy + (n * s->o + o) * plane_out;
                            for (int64_t oh = 0; oh < s->oh; oh++) {
                                int64_t ih =
                                    oh * s->stride[0] - s->padding[0] + kh * s->dilation[0];
                                if (ih < 0 || ih >= s->h) continue;
                                for (int64_t ow = 0; ow < s->ow; ow++) {
                                    int64_t iw =
                                        ow * s->stride[1] - s->padding[1] + kw * s->dilation[1];
                                    if (iw < 0 || iw >= s->w) continue;
                                    acc +=
                                        (double)dyp[oh * s->ow + ow] * (double)xp[ih * s->w + iw];
                                }
                            }
                        }
                        dw[((o * cg + ci) * s->kh + kh) * s->kw + kw] += (float)acc;
                    }
                }
            }
        }
    }
    if (dx) {
        /* dx[n, c, ih, iw] = sum over the outputs o of c's group and the taps (kh, kw) that read
         * (ih, iw) of dy[n, o, oh, ow] * w[o, c - c0, kh, kw] */
        for (int64_t n = 0; n < s->n; n++) {
            for (int64_t c = 0; c < s->c; c++) {
                int64_t grp = c / cg, ci = c % cg;
                for (int64_t ih = 0; ih < s->h; ih++) {
                    for (int64_t iw = 0; iw < s->w; iw++) {
                        double acc = 0.0;
                        for (int64_t o = grp * og; o < (grp + 1) * og; o++) {
                            const float *wp = w + (o * cg + ci) * s->kh * s->kw;
                            const float *dyp = dy + (n * s->o + o) * plane_out;
                            for (int64_t kh = 0; kh < s->kh; kh++) {
                                int64_t oh = out_index(ih, kh, s->stride[0], s->padding[0],
                                                       s->dilation[0], s->oh);
                                if (oh < 0) continue;
                                for (int64_t kw = 0; kw < s->kw; kw++) {
                                    int64_t ow = out_index(iw, kw, s->stride[1], s->padding[1],
                                                           s->dilation[1], s->ow);
                                    if (ow < 0) continue;
                                    acc +=
                                        (double)dyp[oh * s->ow + ow] * (double)wp[kh * s->kw + kw];
                                }
                            }
                        }
                        dx[((n * s->c + c) * s->h + ih) * s->w + iw] += (float)acc;
                    }
                }
            }
        }
    }
}

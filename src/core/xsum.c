/*
 * xsum.c - exact, order-independent sums of doubles, for metrics that must come out the same
 * bits however the data was split over batches and ranks (core_internal.h has the contract).
 *
 * A finite double is m * 2^(p - 1074) with an integer m < 2^53 and 0 <= p <= 2045, so adding
 * it means adding m << (p mod 32) (at most 84 bits) into the three digits from p / 32 up. The
 * top digit needed is digit 65 (bits up to 2098); two more take the carries of 2^40 adds.
 * Digits are int64 holding a signed running total per digit; normalising carries them into
 * [0, 2^32) digits below a signed top digit, whose sign is the sum's. The result is rounded
 * once, to nearest even, from the top 64 bits and a sticky bit, with ldexp for the scale
 * (overflowing to infinity).
 */
#include <math.h>
#include <string.h>

#include "core/core_internal.h"

#define DIGIT_BITS 32
#define DIGIT_MASK ((int64_t)0xffffffff)
#define RENORM_AT  (INT64_C(1) << 30)

void ct_xsum_reset(ct_xsum *x) {
    memset(x, 0, sizeof *x);
}

/* Carries every digit into [0, 2^32), leaving the top one signed. */
static void normalise(int64_t *d) {
    int64_t carry = 0;
    for (int i = 0; i < CT_XSUM_DIGITS - 1; i++) {
        int64_t v = d[i] + carry;
        int64_t low = v & DIGIT_MASK; /* v mod 2^32, also for negative v */
        carry = (v - low) / (DIGIT_MASK + 1);
        d[i] = low;
    }
    d[CT_XSUM_DIGITS - 1] += carry;
}

void ct_xsum_add(ct_xsum *x, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    int exp = (int)((bits >> 52) & 0x7ff);
    uint64_t m = bits & ((UINT64_C(1) << 52) - 1);
    if (exp == 0x7ff) {
        if (m)
            x->nan++;
        else if (bits >> 63)
            x->neg_inf++;
        else
            x->pos_inf++;
        return;
    }
    if (exp == 0 && m == 0) return; /* +-0 */
    int p = 0;                      /* subnormal: m * 2^-1074 */
    if (exp) {
        m |= UINT64_C(1) << 52;
        p = exp - 1;
    }
    int i = p / DIGIT_BITS, sh = p % DIGIT_BITS;
    uint64_t low = m << sh; /* bits 0..63 of the shifted mantissa */
    int64_t d0 = (int64_t)(low & (uint64_t)DIGIT_MASK);
    int64_t d1 = (int64_t)(low >> DIGIT_BITS);
    int64_t d2 = sh ? (int64_t)(m >> (64 - sh)) : 0; /* bits 64..83 */
    if (bits >> 63) {
        x->digit[i] -= d0;
        x->digit[i + 1] -= d1;
        x->digit[i + 2] -= d2;
    } else {
        x->digit[i] += d0;
        x->digit[i + 1] += d1;
        x->digit[i + 2] += d2;
    }
    if (++x->adds >= RENORM_AT) {
        normalise(x->digit);
        x->adds = 0;
    }
}

/* Bit `pos` of a normalised, nonnegative digit array (0 below bit 0). */
static uint64_t bit_at(const int64_t *d, int pos) {
    if (pos < 0) return 0;
    return ((uint64_t)d[pos / DIGIT_BITS] >> (pos % DIGIT_BITS)) & 1u;
}

/* Whether any bit at or below `pos` is set. */
static bool any_at_or_below(const int64_t *d, int pos) {
    if (pos < 0) return false;
    int i = pos / DIGIT_BITS, sh = pos % DIGIT_BITS;
    uint64_t mask = sh == DIGIT_BITS - 1 ? (uint64_t)DIGIT_MASK : (UINT64_C(1) << (sh + 1)) - 1;
    if ((uint64_t)d[i] & mask) return true;
    for (int j = 0; j < i; j++)
        if (d[j]) return true;
    return false;
}

double ct_xsum_value(const ct_xsum *x) {
    if (x->nan || (x->pos_inf && x->neg_inf)) return (double)NAN;
    if (x->pos_inf) return (double)INFINITY;
    if (x->neg_inf) return -(double)INFINITY;
    int64_t d[CT_XSUM_DIGITS];
    memcpy(d, x->digit, sizeof d);
    normalise(d);
    bool negative = d[CT_XSUM_DIGITS - 1] < 0;
    if (negative) {
        for (int i = 0; i < CT_XSUM_DIGITS; i++)
            d[i] = -d[i];
        normalise(d);
    }
    int h = CT_XSUM_DIGITS - 1;
    while (h >= 0 && d[h] == 0)
        h--;
    if (h < 0) return 0.0;
    int top = h * DIGIT_BITS;
    for (uint64_t v = (uint64_t)d[h] >> 1; v; v >>= 1)
        top++;
    /* keep 53 bits, fewer where the result is subnormal (its last bit weighs 2^-1074) */
    int keep = top + 1 < 53 ? top + 1 : 53;
    uint64_t mant = 0;
    for (int k = 0; k < keep; k++)
        mant = (mant << 1) | bit_at(d, top - k);
    int guard_pos = top - keep;
    bool half = bit_at(d, guard_pos) != 0;
    bool rest = any_at_or_below(d, guard_pos - 1);
    if (half && (rest || (mant & 1u))) mant++;
    double r = ldexp((double)mant, guard_pos + 1 - 1074);
    return negative ? -r : r;
}

void ct_xsum_export(const ct_xsum *x, double *words) {
    int64_t d[CT_XSUM_DIGITS];
    memcpy(d, x->digit, sizeof d);
    normalise(d);
    for (int i = 0; i < CT_XSUM_DIGITS; i++)
        words[i] = (double)d[i];
    words[CT_XSUM_DIGITS] = (double)x->nan;
    words[CT_XSUM_DIGITS + 1] = (double)x->pos_inf;
    words[CT_XSUM_DIGITS + 2] = (double)x->neg_inf;
}

void ct_xsum_import(ct_xsum *x, const double *words) {
    for (int i = 0; i < CT_XSUM_DIGITS; i++)
        x->digit[i] = (int64_t)words[i];
    x->nan = (int64_t)words[CT_XSUM_DIGITS];
    x->pos_inf = (int64_t)words[CT_XSUM_DIGITS + 1];
    x->neg_inf = (int64_t)words[CT_XSUM_DIGITS + 2];
    normalise(x->digit);
    x->adds = 0;
}

/*
 * bench_peak.c - the arithmetic peak of this machine, the figure bench/models.py sets each
 * model's achieved GFLOP/s against: f32 fused multiply-adds in the widest vectors the CPU has
 * (AVX-512, else AVX2 with FMA, else scalar), and bf16 dot products (vdpbf16ps) where it has
 * AVX512_BF16, on every thread at once, each thread on registers only (no memory traffic).
 *
 *   bench_peak [--threads N] [--ms M]
 *
 * Prints one line per kind, `peak KIND ISA THREADS GFLOPS` (KIND fp32 or bf16; bf16's ISA is
 * `none` and GFLOPS 0 on a CPU without it), the best of several timed rounds of about M ms
 * (default 200) each. The kernel is chosen at run time (__builtin_cpu_supports), so a portable
 * build measures the CPU it runs on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

/* Independent accumulators per thread: enough to cover the FMA latency (4 cycles) on two
   pipes, so the loop is bound by throughput. */
#define ACCS  12
/* Inner iterations between checks of the clock. */
#define CHUNK 4096

typedef double (*kernel_fn)(long chunks, float seed); /* returns FLOPs done */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A result the compiler cannot drop: each kernel's accumulators end up here. */
static volatile float sink;

static double fma_scalar(long chunks, float seed) {
    float acc[ACCS], a = 1.0f - 1e-7f * seed, b = 1e-7f;
    for (int k = 0; k < ACCS; k++)
        acc[k] = seed + (float)k;
    for (long c = 0; c < chunks; c++)
        for (int i = 0; i < CHUNK; i++)
            for (int k = 0; k < ACCS; k++)
                acc[k] = acc[k] * a + b;
    float s = 0;
    for (int k = 0; k < ACCS; k++)
        s += acc[k];
    sink = s;
    return 2.0 * ACCS * (double)CHUNK * (double)chunks;
}

#if HAVE_X86
__attribute__((target("avx2,fma"))) static double fma_avx2(long chunks, float seed) {
    __m256 acc[ACCS];
    const __m256 a = _mm256_set1_ps(1.0f - 1e-7f * seed), b = _mm256_set1_ps(1e-7f);
    for (int k = 0; k < ACCS; k++)
        acc[k] = _mm256_set1_ps(seed + (float)k);
    for (long c = 0; c < chunks; c++)
        for (int i = 0; i < CHUNK; i++)
            for (int k = 0; k < ACCS; k++)
                acc[k] = _mm256_fmadd_ps(acc[k], a, b);
    __m256 s = acc[0];
    for (int k = 1; k < ACCS; k++)
        s = _mm256_add_ps(s, acc[k]);
    float out[8];
    _mm256_storeu_ps(out, s);
    sink = out[0];
    return 2.0 * 8 * ACCS * (double)CHUNK * (double)chunks;
}

__attribute__((target("avx512f"))) static double fma_avx512(long chunks, float seed) {
    __m512 acc[ACCS];
    const __m512 a = _mm512_set1_ps(1.0f - 1e-7f * seed), b = _mm512_set1_ps(1e-7f);
    for (int k = 0; k < ACCS; k++)
        acc[k] = _mm512_set1_ps(seed + (float)k);
    for (long c = 0; c < chunks; c++)
        for (int i = 0; i < CHUNK; i++)
            for (int k = 0; k < ACCS; k++)
                acc[k] = _mm512_fmadd_ps(acc[k], a, b);
    __m512 s = acc[0];
    for (int k = 1; k < ACCS; k++)
        s = _mm512_add_ps(s, acc[k]);
    sink = _mm512_reduce_add_ps(s);
    return 2.0 * 16 * ACCS * (double)CHUNK * (double)chunks;
}

/* vdpbf16ps: per f32 lane, two bf16 products added to the accumulator (4 FLOPs a lane). */
__attribute__((target("avx512f,avx512bf16"))) static double dot_bf16(long chunks, float seed) {
    __m512 acc[ACCS];
    const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(seed * 1e-3f));
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(1e-4f));
    for (int k = 0; k < ACCS; k++)
        acc[k] = _mm512_set1_ps(seed + (float)k);
    for (long c = 0; c < chunks; c++)
        for (int i = 0; i < CHUNK; i++)
            for (int k = 0; k < ACCS; k++)
                acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
    __m512 s = acc[0];
    for (int k = 1; k < ACCS; k++)
        s = _mm512_add_ps(s, acc[k]);
    sink = _mm512_reduce_add_ps(s);
    return 4.0 * 16 * ACCS * (double)CHUNK * (double)chunks;
}
#endif

/* GFLOP/s of fn on nt threads running together: the best of `rounds` rounds in which every
   thread runs the same number of chunks, sized from a one-thread trial to last about ms. */
static double measure(kernel_fn fn, int nt, double ms, int rounds) {
    long chunks = 1;
    for (;;) { /* grow until one call takes a tenth of the round */
        double t0 = now_s();
        fn(chunks, 1.0f);
        double dt = now_s() - t0;
        if (dt > ms * 1e-4 || chunks > (1L << 30)) {
            chunks = (long)((double)chunks * (ms * 1e-3 / (dt > 0 ? dt : 1e-9))) + 1;
            break;
        }
        chunks *= 2;
    }
    double best = 0;
    for (int r = 0; r < rounds; r++) {
        double flops = 0, t0 = now_s();
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : flops)
        flops += fn(chunks, 1.0f + (float)omp_get_thread_num());
#else
        (void)nt;
        flops = fn(chunks, 1.0f);
#endif
        double g = flops / (now_s() - t0) * 1e-9;
        if (g > best) best = g;
    }
    return best;
}

int main(int argc, char **argv) {
    int nt = 0;
    double ms = 200;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--threads") == 0)
            nt = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--ms") == 0)
            ms = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_peak [--threads N] [--ms M]\n");
            return 2;
        }
    }
#ifdef _OPENMP
    if (nt <= 0) nt = omp_get_num_procs();
#else
    nt = 1;
#endif
    if (ms <= 0) ms = 200;
    kernel_fn fma = fma_scalar, bf16 = NULL;
    const char *fma_isa = "scalar", *bf16_isa = "none";
#if HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        fma = fma_avx512;
        fma_isa = "avx512";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        fma = fma_avx2;
        fma_isa = "avx2";
    }
    if (__builtin_cpu_supports("avx512bf16")) {
        bf16 = dot_bf16;
        bf16_isa = "avx512_bf16";
    }
#endif
    printf("peak fp32 %s %d %.1f\n", fma_isa, nt, measure(fma, nt, ms, 5));
    printf("peak bf16 %s %d %.1f\n", bf16_isa, nt, bf16 ? measure(bf16, nt, ms, 5) : 0.0);
    return 0;
}

/*
 * bench_peak.c - the arithmetic peak of this machine, the figure bench/models.py sets each
 * model's achieved GFLOP/s against: f32 fused multiply-adds in the widest vectors the CPU has
 * (AVX-512, else AVX2 with FMA, else scalar), and bf16 dot products where the CPU has them: AMX
 * tile products (tdpbf16ps) where it has AMX-BF16 and the kernel lets the process use the
 * tiles, else vdpbf16ps where it has AVX512_BF16; on every thread at once, each thread on
 * registers (tiles) only, no memory traffic.
 *
 *   bench_peak [--threads N] [--ms M]
 *
 * Prints one line per kind, `peak KIND ISA THREADS GFLOPS` (KIND fp32 or bf16; bf16's ISA is
 * `amx`, `avx512_bf16`, or `none` with GFLOPS 0 on a CPU without either), the best of several timed
 * rounds of about M ms (default 200) each. The kernel is chosen at run time
 * (__builtin_cpu_supports), so a portable build measures the CPU it runs on.
 */
#define _DEFAULT_SOURCE 1 /* syscall(), for the AMX permission */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
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

/* AMX: 16x16 f32 accumulator tiles, each tdpbf16ps adding a 16x32 by 32x16 bf16 product
 * (16 * 16 * 32 multiply-adds). Four accumulators (tiles 0-3) fed by two A tiles (4, 5) and two
 * B tiles (6, 7), so consecutive products write different tiles. */
#define AMX_ROWS 16
#define AMX_COLB 64 /* bytes per tile row */

typedef struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* Whether the CPU has AMX tiles with bf16 products (CPUID leaf 7: AMX-TILE and AMX-BF16; asked
 * directly, as clang's __builtin_cpu_supports does not know them) and Linux hands their state to
 * this process when asked (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA; it refuses where the
 * kernel or the hypervisor does not support them). */
static int amx_usable(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22)))
        return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}

__attribute__((target("amx-tile,amx-bf16"))) static double dot_amx(long chunks, float seed) {
    static const uint16_t ones[AMX_ROWS * AMX_COLB / 2] = {0}; /* bf16 +0: nothing overflows */
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = AMX_COLB;
        cfg.rows[t] = AMX_ROWS;
    }
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ones, AMX_COLB);
    _tile_loadd(5, ones, AMX_COLB);
    _tile_loadd(6, ones, AMX_COLB);
    _tile_loadd(7, ones, AMX_COLB);
    for (long c = 0; c < chunks; c++)
        for (int i = 0; i < CHUNK / 16; i++) {
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    float out[AMX_ROWS * AMX_COLB / 4];
    _tile_stored(0, out, AMX_COLB);
    _tile_release();
    sink = out[0] + seed;
    return 4.0 * 2.0 * 16 * 16 * 32 * (double)(CHUNK / 16) * (double)chunks;
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
    if (amx_usable()) {
        bf16 = dot_amx;
        bf16_isa = "amx";
    } else if (__builtin_cpu_supports("avx512bf16")) {
        bf16 = dot_bf16;
        bf16_isa = "avx512_bf16";
    }
#endif
    printf("peak fp32 %s %d %.1f\n", fma_isa, nt, measure(fma, nt, ms, 5));
    printf("peak bf16 %s %d %.1f\n", bf16_isa, nt, bf16 ? measure(bf16, nt, ms, 5) : 0.0);
    return 0;
}

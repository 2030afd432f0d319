/*
 * version.c - the version string, set by the build from the CMake project version, and what
 * else `ctrain --version` says of the build that core knows: the commit CMake found (a
 * definition on this file only, so that a new commit recompiles nothing else), the compiler,
 * the build type, and the CPU's AVX-512, AVX512_BF16 and AMX, asked of the CPU at run time
 * (the build's -march says nothing of the machine it runs on).
 */
#include <string.h>

#include "core/core_internal.h"

#ifndef CT_BUILD_COMMIT
#define CT_BUILD_COMMIT "unknown"
#endif
#ifndef CT_BUILD_TYPE
#define CT_BUILD_TYPE "unknown"
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define TEXT_OF(x) #x
#define TEXT(x)    TEXT_OF(x)

const char *ct_version(void) {
    return CT_VERSION_STRING;
}

#if defined(__x86_64__) || defined(__i386__)
/* XCR0: the register state the operating system saves, without which an ISA is unusable. */
static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void find_isa(ct_build *b) {
    unsigned a, bx, c, d;
    if (!__get_cpuid(1, &a, &bx, &c, &d) || !(c & bit_OSXSAVE)) return;
    if (!__get_cpuid_count(7, 0, &a, &bx, &c, &d)) return;
    unsigned max_sub = a, edx7 = d;
    uint64_t xcr = xcr0();
    bool zmm = (xcr & 0xe6) == 0xe6;                              /* SSE, AVX, opmask, ZMM state */
    bool tiles = (xcr & 0x60000) == 0x60000;                      /* TILECFG, TILEDATA */
    b->avx512 = zmm && (bx & (1u << 16));                         /* AVX512F */
    b->amx = tiles && (edx7 & (1u << 24)) && (edx7 & (1u << 22)); /* AMX-TILE, AMX-BF16 */
    if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &bx, &c, &d))
        b->avx512_bf16 = b->avx512 && (a & (1u << 5));
}
#else
static void find_isa(ct_build *b) {
    (void)b;
}
#endif

void ct_build_get(ct_build *out) {
    memset(out, 0, sizeof *out);
    out->commit = CT_BUILD_COMMIT[0] ? CT_BUILD_COMMIT : "unknown";
    out->build_type = CT_BUILD_TYPE[0] ? CT_BUILD_TYPE : "unknown";
#if defined(__clang__) /* __clang_version__ may carry a trailing space and a vendor's text */
    out->compiler =
        "clang " TEXT(__clang_major__) "." TEXT(__clang_minor__) "." TEXT(__clang_patchlevel__);
#elif defined(__GNUC__)
    out->compiler = "gcc " __VERSION__;
#else
    out->compiler = "unknown";
#endif
    find_isa(out);
}

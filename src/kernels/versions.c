/*
 * versions.c - the versions of the libraries the kernels run on, as the libraries loaded at run
 * time report them (not the headers the build saw): oneDNN's, with the instruction set it
 * chose for this CPU, and OpenBLAS's configuration. For `ctrain --version`, and the kernels a
 * context runs on, for the line `ctrain fit` starts with.
 */
#include <cblas.h>
#include <dnnl.h>
#include <stdio.h>

#include "kernels/kernels.h"

/* oneDNN's names for its ISA levels (dnnl_types.h), for those this oneDNN has. */
static const char *isa_name(unsigned isa) {
    static const struct {
        unsigned isa;
        const char *name;
    } names[] = {
        {dnnl_cpu_isa_sse41, "sse41"},
        {dnnl_cpu_isa_avx, "avx"},
        {dnnl_cpu_isa_avx2, "avx2"},
        {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
        {dnnl_cpu_isa_avx512_core, "avx512_core"},
        {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
        {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
        {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].isa == isa) return names[i].name;
    return NULL;
}

void ct_k_onednn_version(char *buf, size_t size) {
    const dnnl_version_t *v = dnnl_version();
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    const char *name = isa_name(isa);
    char isa_text[32];
    if (!name) {
        (void)snprintf(isa_text, sizeof isa_text, "0x%x", isa);
        name = isa_text;
    }
    (void)snprintf(buf, size, "%d.%d.%d (ISA %s)%s", v->major, v->minor, v->patch, name,
#ifdef _OPENMP
                   ""
#else
                   "; unused: this build has no OpenMP"
#endif
    );
}

void ct_k_describe(ct_ctx *ctx, char *buf, size_t size) {
    const char *bf16 = ct_k_gemm_bf16_native(ctx) ? "bf16 native" : "bf16 on the f32 kernels";
    if (ctx->kernels == CT_KERNELS_REFERENCE) {
        (void)snprintf(buf, size, "reference (%s)", bf16);
        return;
    }
#ifdef _OPENMP
    if (ctx->kernels == CT_KERNELS_FAST) {
        unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
        const char *name = isa_name(isa);
        if (name)
            (void)snprintf(buf, size, "oneDNN %s (%s)", name, bf16);
        else
            (void)snprintf(buf, size, "oneDNN ISA 0x%x (%s)", isa, bf16);
        return;
    }
#endif
    (void)snprintf(buf, size, "OpenBLAS (%s)", bf16);
}

void ct_k_blas_version(char *buf, size_t size) {
    (void)snprintf(buf, size, "%s", openblas_get_config());
}

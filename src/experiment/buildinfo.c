/*
 * buildinfo.c - what `ctrain --version` says: the version, how this build was made, what the
 * CPU it runs on offers, and the libraries it runs on, asked of each module that knows (core,
 * the kernels, dist) from the one module that sees them all.
 */
#include <stdio.h>

#include "core/core_internal.h"
#include "ctrain/dist.h"
#include "ctrain/experiment.h"
#include "kernels/kernels.h"

/* OpenMP's version from the _OPENMP date the compiler defines. */
static const char *openmp_version(void) {
#ifdef _OPENMP
    static const struct {
        long date;
        const char *version;
    } versions[] = {{202111, "5.2"}, {202011, "5.1"}, {201811, "5.0"}, {201511, "4.5"},
                    {201307, "4.0"}, {201107, "3.1"}, {200805, "3.0"}};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++)
        if ((long)_OPENMP >= versions[i].date) return versions[i].version;
    return "before 3.0";
#else
    return "none (built without OpenMP)";
#endif
}

void ct_experiment_write_build_info(FILE *f) {
    ct_build b;
    ct_build_get(&b);
    char onednn[128], blas[256], mpi[256];
    ct_k_onednn_version(onednn, sizeof onednn);
    ct_k_blas_version(blas, sizeof blas);
    ct_comm_mpi_library(mpi, sizeof mpi);
    (void)fprintf(f,
                  "ctrain %s\n"
                  "commit: %s\n"
                  "compiler: %s\n"
                  "build type: %s\n"
                  "cpu: AVX-512 %s, AVX512_BF16 %s, AMX %s\n"
                  "oneDNN: %s\n"
                  "OpenBLAS: %s\n"
                  "MPI: %s\n"
                  "OpenMP: %s\n",
                  ct_version(), b.commit, b.compiler, b.build_type, b.avx512 ? "yes" : "no",
                  b.avx512_bf16 ? "yes" : "no", b.amx ? "yes" : "no", onednn, blas, mpi,
                  openmp_version());
}

void ct_experiment_kernels_text(ct_ctx *ctx, char *buf, size_t size) {
    ct_k_describe(ctx, buf, size);
}

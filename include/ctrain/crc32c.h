/*
 * crc32c.h - CRC-32C (Castagnoli), the checksum of checkpoint files (checkpoint.h) and of
 * TensorBoard's records (tboard.h). A pure function: no context, no state.
 */
#ifndef CTRAIN_CRC32C_H
#define CTRAIN_CRC32C_H

#include "ctrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CRC-32C of n bytes, continuing from crc (start with 0; pass a result back in to go on with
 * the next bytes). crc32c("123456789") = 0xE3069283. */
CT_API uint32_t ct_crc32c(uint32_t crc, const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_CRC32C_H */

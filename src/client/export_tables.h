/*
 * The driver's hidden export tables (cuGetExportTable): the interfaces that
 * NVIDIA's runtime and libraries (cuBLAS, cuFFT, cuDNN) ask libcuda for by
 * UUID. Every slot takes client-side arguments (thread state, addresses in
 * this process, the pid), so all of them are answered in the client, through
 * the public driver API the rest of the client implements (DRIVER-API-FACTS.md
 * in the project's shared notes lists the tables and what each slot does).
 */
#ifndef FLYT_EXPORT_TABLES_H
#define FLYT_EXPORT_TABLES_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/* cuGetExportTable: *table_out = the table for id. An unknown id leaves
 * *table_out NULL and returns CUDA_ERROR_INVALID_VALUE (named on stderr once). */
CUresult flyt_export_table(const void **table_out, const CUuuid *id);

/* Flyt's own table's entry points (flyt_client_table.h), in device.c and
 * memory.c: a tool's scope, and cuMemGetInfo without a context. */
void flyt_tool_scope(int entering);
CUresult flyt_tool_mem_info(CUdevice dev, size_t *free_bytes, size_t *total_bytes);

/* ---- the integrity check (INTEGRITY_CHECK slot 1), exposed for tests ---- */

/* MD2 (RFC 1319). The checksum advances byte by byte, so a context can be
 * compared with any published intermediate state. */
struct flyt_md2 {
    uint8_t state[16];
    uint8_t block[16]; /* the first `used` bytes of the next block */
    uint8_t sum[16];   /* checksum */
    uint8_t last;      /* the checksum byte updated last (RFC's L) */
    uint8_t used;
};
void flyt_md2_init(struct flyt_md2 *m);
void flyt_md2_update(struct flyt_md2 *m, const void *data, size_t len);
void flyt_md2_final(struct flyt_md2 *m, uint8_t digest[16]);

/* What the integrity answer covers besides the devices; hashed in this
 * order, each field in native byte order. */
struct flyt_integrity_input {
    uint32_t driver_version; /* cuDriverGetVersion */
    uint32_t asked_version;  /* the caller's first argument */
    uint32_t pid;
    uint32_t tid;            /* pthread_self(), cut to 32 bits */
    const void *cudart_table;    /* the CUDART_INTERFACE table */
    const void *integrity_table; /* the INTEGRITY_CHECK table */
    const void *slot_fn;         /* what INTEGRITY_CHECK slot 1 holds */
    uint64_t unix_seconds;       /* the caller's second argument */
};

/* One device's part: 28 bytes, hashed after the input above. */
struct flyt_integrity_device {
    CUuuid uuid;
    int32_t pci_domain, pci_bus, pci_device;
};

/* The 128-bit answer: HMAC-MD2 under a fixed key of the input and devices
 * (or a fixed pair for asked versions ending in 0 or 1). */
void flyt_integrity_hash(uint64_t out[2], const struct flyt_integrity_input *in,
                         const struct flyt_integrity_device *devices, unsigned count);

#endif

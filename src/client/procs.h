/*
 * The driver's cuGetProcAddress lookup: which exported function implements
 * a driver API name for a CUDA version and stream flavour. The table comes
 * from gen_driver.py (flyt_procs.inc); cuGetProcAddress itself lives with the
 * other driver entry points and calls flyt_proc_lookup.
 */
#ifndef FLYT_CLIENT_PROCS_H
#define FLYT_CLIENT_PROCS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

/* One ABI of one driver API name. */
struct flyt_proc {
    const char *name;   /* the base name asked for, e.g. "cuMemAlloc" */
    int version;        /* CUDA version from which this ABI applies, e.g. 3020 */
    int per_thread;     /* 1: the _ptds/_ptsz per-thread default stream variant */
    const char *symbol; /* the exported symbol that implements it */
    void *fn;           /* its address */
};

/*
 * cuGetProcAddress_v2 semantics: CUDA_SUCCESS with *pfn set and status
 * CU_GET_PROC_ADDRESS_SUCCESS; CUDA_SUCCESS with *pfn NULL and status
 * SYMBOL_NOT_FOUND (unknown or empty name) or VERSION_NOT_SUFFICIENT (every
 * ABI is newer than cuda_version), as NVIDIA's driver answers the _v2 ABI; CUDA_ERROR_INVALID_VALUE for a NULL symbol
 * or pfn. status may be NULL. The driver-version check (cuda_version above
 * what cuDriverGetVersion reports) is the caller's: see procs.c.
 */
CUresult flyt_proc_lookup(const char *symbol, int cuda_version, uint64_t flags, void **pfn,
                          CUdriverProcAddressQueryResult *status);

/* The entry flyt_proc_lookup would hand out, or NULL with *status set. */
const struct flyt_proc *flyt_proc_resolve(const char *symbol, int cuda_version, uint64_t flags,
                                          CUdriverProcAddressQueryResult *status);

/* The whole table, sorted by name, version, legacy first (for tests, logs). */
const struct flyt_proc *flyt_proc_table(size_t *count);

#endif

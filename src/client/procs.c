/*
 * cuGetProcAddress lookup over the table gen_driver.py derives from
 * cudaTypedefs.h (flyt_procs.inc).
 *
 * What this relies on, from cuda.h 13.0 (cuGetProcAddress and
 * CUdriverProcAddressQueryFlags) and the CUDA programming guide's "Driver
 * Entry Point Access":
 *  - the CUDA version picks the ABI: of a name's entries, the one with the
 *    highest version <= cudaVersion ("greater than or equal to the CUDA
 *    version in which the driver symbol was introduced");
 *  - CU_GET_PROC_ADDRESS_LEGACY_STREAM searches every version except the
 *    per-thread ones; PER_THREAD_DEFAULT_STREAM includes them, and "if a
 *    per-thread version is not found, the API will return the legacy
 *    version";
 *  - DEFAULT means per-thread only when the caller was built with
 *    CUDA_API_PER_THREAD_DEFAULT_STREAM, which a driver cannot see; cuda.h's
 *    own inline cuGetProcAddress_v2_ptsz adds the per-thread flag itself in
 *    that build, so DEFAULT reaching the driver means legacy;
 *  - symbolStatus: SUCCESS, SYMBOL_NOT_FOUND, VERSION_NOT_SUFFICIENT.
 * Choices where the documentation is silent or differs:
 *  - a miss (unknown or empty name, or version too old), measured on the
 *    H100's driver 580 (tests/gpu/probes/procaddr_probe.c): the _v2 ABI
 *    returns CUDA_SUCCESS with *pfn NULL and the status saying why (NVIDIA's
 *    runtime passes that on as cudaSuccess); the unversioned ABI, which has
 *    no status, returns CUDA_ERROR_NOT_FOUND and leaves *pfn as it was;
 *  - both stream flags set: legacy (LEGACY explicitly excludes per-thread);
 *    unknown flag bits are ignored rather than refused;
 *  - "cudaVersion greater than the driver version returns
 *    CUDA_ERROR_INVALID_VALUE" is left to cuGetProcAddress, which knows the
 *    version the library reports; this lookup has no notion of it.
 */
#include "procs.h"

#include <string.h>

#include "flyt_procs.inc"

#define FLYT_PROC_COUNT (sizeof(flyt_procs) / sizeof(flyt_procs[0]))

static void set_status(CUdriverProcAddressQueryResult *status, CUdriverProcAddressQueryResult v)
{
    if (status)
        *status = v;
}

/* Index of the first entry of name, or of where it would be. */
static size_t first_entry(const char *name)
{
    size_t lo = 0, hi = FLYT_PROC_COUNT;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(flyt_procs[mid].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int wants_per_thread(uint64_t flags)
{
    return (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) &&
           !(flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM);
}

const struct flyt_proc *flyt_proc_resolve(const char *symbol, int cuda_version, uint64_t flags,
                                          CUdriverProcAddressQueryResult *status)
{
    const struct flyt_proc *legacy = NULL, *per_thread = NULL;
    size_t i = symbol ? first_entry(symbol) : FLYT_PROC_COUNT;
    int known = 0;

    /* Entries of one name are in increasing version: keep the newest that
     * cuda_version allows, of each flavour. */
    for (; i < FLYT_PROC_COUNT && strcmp(flyt_procs[i].name, symbol) == 0; i++) {
        known = 1;
        if (flyt_procs[i].version > cuda_version)
            break;
        if (flyt_procs[i].per_thread)
            per_thread = &flyt_procs[i];
        else
            legacy = &flyt_procs[i];
    }
    if (!legacy) {
        set_status(status, known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                 : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
        return NULL;
    }
    set_status(status, CU_GET_PROC_ADDRESS_SUCCESS);
    /* A per-thread variant older than the newest legacy ABI would be an
     * older ABI: fall back to legacy then (does not occur in CUDA 13.0). */
    if (per_thread && wants_per_thread(flags) && per_thread->version >= legacy->version)
        return per_thread;
    return legacy;
}

CUresult flyt_proc_lookup(const char *symbol, int cuda_version, uint64_t flags, void **pfn,
                          CUdriverProcAddressQueryResult *status)
{
    const struct flyt_proc *e;

    if (!pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (!symbol) {
        set_status(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
        return CUDA_ERROR_INVALID_VALUE;
    }
    e = flyt_proc_resolve(symbol, cuda_version, flags, status);
    if (e)
        *pfn = e->fn;
    return CUDA_SUCCESS;
}

const struct flyt_proc *flyt_proc_table(size_t *count)
{
    *count = FLYT_PROC_COUNT;
    return flyt_procs;
}

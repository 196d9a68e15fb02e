/*
 * How NVIDIA's runtime and libraries reach the driver: cuGetProcAddress
 * (by name, CUDA version and stream flavour; procs.c holds the table) and
 * cuGetExportTable (the hidden tables, export_tables.c).
 */
#include "client.h"

#include "export_tables.h"
#include "procs.h"

/* A version newer than this library is refused, as the driver refuses a
 * runtime newer than itself. */
static CUresult proc_address(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    if (pfn != NULL)
        *pfn = NULL;
    if (symbol == NULL || pfn == NULL || version <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    return flyt_proc_lookup(symbol, version, flags, pfn, status);
}

FLYT_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    return proc_address(symbol, pfn, version, flags, status);
}

/* Without a status to say why, a miss is CUDA_ERROR_NOT_FOUND and *pfn is
 * left as it was (measured, procs.c). */
FLYT_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    void *found = NULL;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = proc_address(symbol, pfn ? &found : NULL, version, flags, &status);
    if (r != CUDA_SUCCESS)
        return r;
    if (status != CU_GET_PROC_ADDRESS_SUCCESS)
        return CUDA_ERROR_NOT_FOUND;
    *pfn = found;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
    if (table == NULL || id == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return flyt_export_table(table, id);
}

/*
 * CUDA IPC on the cuda backend (backend.h's ipc_*, the server's ipc.c).
 *
 * Tenant memory lives in Flyt's arenas as VMM mappings, which
 * cuIpcGetMemHandle does not take; so the mapping holding an allocation is
 * exported as a file descriptor instead (map_range makes every mapping
 * exportable) and the importing session, another process, maps it at an
 * address of its own. A small allocation shares its chunk's granule: the
 * importer sees the neighbours of the same tenant, never another's.
 * Events are the driver's own interprocess events, and memory pools the
 * driver's shareable pools: their descriptors and pointer export data pass
 * between the sessions as they would between the programs.
 */
#include <string.h>

#include "backend_cuda_int.h"

CUresult flyt_cuda_ipc_mem_export(flyt_backend *base, uint64_t ptr, int *fd, uint64_t *unit_base,
                                  uint64_t *unit_size, uint64_t *size)
{
    ENTER(b, base);
    if (b->mem.disabled > 0 || b->mem.no_share)
        return CUDA_ERROR_NOT_SUPPORTED; /* cuMemAlloc's memory, or the driver shares none */
    if (!flyt_cuda_mem_unit(b, ptr, unit_base, unit_size, size))
        return CUDA_ERROR_INVALID_VALUE; /* not the start of a cuMemAlloc allocation */
    CUmemGenericAllocationHandle h = 0;
    CUresult r = b->cu.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)*unit_base);
    if (r != CUDA_SUCCESS)
        return r;
    int out = -1;
    r = b->cu.cuMemExportToShareableHandle(&out, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    b->cu.cuMemRelease(h);
    if (r == CUDA_SUCCESS)
        *fd = out;
    return r;
}

CUresult flyt_cuda_ipc_mem_import(flyt_backend *base, int fd, uint64_t unit_size, uint64_t *addr)
{
    ENTER(b, base);
    uint64_t gran = 0;
    CUresult r = flyt_cuda_mem_gran(b, &gran);
    if (r != CUDA_SUCCESS)
        return r;
    if (unit_size == 0 || unit_size % gran)
        return CUDA_ERROR_INVALID_VALUE;
    CUmemGenericAllocationHandle h = 0;
    r = b->cu.cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS)
        return r;
    /* outside the arenas: a checkpoint never sees it (the session refuses
     * one while it holds imports) */
    CUdeviceptr va = 0;
    r = b->cu.cuMemAddressReserve(&va, (size_t)unit_size, (size_t)gran, 0, 0);
    if (r == CUDA_SUCCESS) {
        r = b->cu.cuMemMap(va, (size_t)unit_size, 0, h, 0);
        if (r != CUDA_SUCCESS)
            b->cu.cuMemAddressFree(va, (size_t)unit_size);
    }
    b->cu.cuMemRelease(h); /* the mapping keeps the memory */
    if (r != CUDA_SUCCESS)
        return r;
    CUmemAccessDesc access = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, b->dev},
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    r = b->cu.cuMemSetAccess(va, (size_t)unit_size, &access, 1);
    if (r != CUDA_SUCCESS) {
        b->cu.cuMemUnmap(va, (size_t)unit_size);
        b->cu.cuMemAddressFree(va, (size_t)unit_size);
        return r;
    }
    *addr = va;
    return CUDA_SUCCESS;
}

CUresult flyt_cuda_ipc_mem_unimport(flyt_backend *base, uint64_t addr, uint64_t unit_size)
{
    ENTER(b, base);
    /* as cuIpcCloseMemHandle: work of this context still using it finishes first */
    CUresult r = b->cu.cuCtxSynchronize();
    if (r == CUDA_SUCCESS)
        r = b->cu.cuMemUnmap(addr, (size_t)unit_size);
    if (r == CUDA_SUCCESS)
        r = b->cu.cuMemAddressFree(addr, (size_t)unit_size);
    return r;
}

CUresult flyt_cuda_ipc_event_export(flyt_backend *base, flyt_bhandle event,
                                    uint8_t handle[FLYT_IPC_HANDLE_BYTES])
{
    ENTER(b, base);
    if (!flyt_pset_has(&b->events, event))
        return CUDA_ERROR_INVALID_HANDLE;
    CUipcEventHandle h;
    _Static_assert(sizeof h == FLYT_IPC_HANDLE_BYTES, "CUipcEventHandle is 64 bytes");
    CUresult r = b->cu.cuIpcGetEventHandle(&h, (CUevent)event);
    if (r == CUDA_SUCCESS)
        memcpy(handle, &h, sizeof h);
    return r;
}

CUresult flyt_cuda_ipc_event_import(flyt_backend *base, const uint8_t handle[FLYT_IPC_HANDLE_BYTES],
                                    flyt_bhandle *event)
{
    ENTER(b, base);
    CUipcEventHandle h;
    memcpy(&h, handle, sizeof h);
    CUevent e = NULL;
    CUresult r = b->cu.cuIpcOpenEventHandle(&e, h);
    return r == CUDA_SUCCESS ? flyt_cuda_event_adopt(b, e, event) : r;
}

CUresult flyt_cuda_ipc_pool_export(flyt_backend *base, flyt_bhandle pool, int *fd)
{
    ENTER(b, base);
    if (!flyt_pset_has(&b->pools, pool))
        return CUDA_ERROR_INVALID_VALUE; /* the default pool is not shareable */
    int out = -1;
    CUresult r = b->cu.cuMemPoolExportToShareableHandle(&out, (CUmemoryPool)pool,
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r == CUDA_SUCCESS)
        *fd = out;
    return r;
}

CUresult flyt_cuda_ipc_pool_import(flyt_backend *base, int fd, flyt_bhandle *pool)
{
    ENTER(b, base);
    if (fd < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    CUmemoryPool p = NULL;
    CUresult r = b->cu.cuMemPoolImportFromShareableHandle(&p, (void *)(uintptr_t)fd,
                                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS)
        return r;
    if (!flyt_pset_has(&b->pools, p) && flyt_pset_add(&b->pools, p) != 0) {
        b->cu.cuMemPoolDestroy(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pool = (flyt_bhandle)p;
    return CUDA_SUCCESS;
}

CUresult flyt_cuda_ipc_ptr_export(flyt_backend *base, uint64_t ptr, uint8_t data[FLYT_IPC_HANDLE_BYTES],
                                  int *fd, uint64_t *unit_base, uint64_t *unit_size, uint64_t *size)
{
    ENTER(b, base);
    CUmemPoolPtrExportData d;
    _Static_assert(sizeof d == FLYT_IPC_HANDLE_BYTES, "CUmemPoolPtrExportData is 64 bytes");
    *size = flyt_memtab_size(&b->ckpt.async, ptr);
    if (*size == 0)
        return CUDA_ERROR_INVALID_VALUE; /* not where a stream-ordered allocation starts */
    CUresult r = b->cu.cuMemPoolExportPointer(&d, (CUdeviceptr)ptr);
    if (r != CUDA_SUCCESS)
        return r;
    memcpy(data, &d, sizeof d);
    *fd = -1; /* the importing driver finds the memory through the pool */
    *unit_base = ptr;
    *unit_size = *size;
    return CUDA_SUCCESS;
}

CUresult flyt_cuda_ipc_ptr_import(flyt_backend *base, flyt_bhandle pool,
                                  const uint8_t data[FLYT_IPC_HANDLE_BYTES], int fd,
                                  uint64_t unit_size, uint64_t offset, uint64_t *addr)
{
    ENTER(b, base);
    (void)fd, (void)unit_size, (void)offset;
    if (!flyt_pset_has(&b->pools, pool))
        return CUDA_ERROR_INVALID_VALUE;
    CUmemPoolPtrExportData d;
    memcpy(&d, data, sizeof d);
    CUdeviceptr p = 0;
    CUresult r = b->cu.cuMemPoolImportPointer(&p, (CUmemoryPool)pool, &d);
    if (r == CUDA_SUCCESS)
        *addr = p;
    return r;
}

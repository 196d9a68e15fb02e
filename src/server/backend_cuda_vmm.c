/*
 * Virtual memory management on the "cuda" backend: the driver's own
 * cuMemAddressReserve/cuMemCreate/cuMemMap/cuMemSetAccess, with the
 * session's one device put in every location (the client names it 0).
 * What a program may ask is checked by handlers_vmm.c; the driver checks
 * sizes, alignment and ranges as it does natively.
 */
#include "backend_cuda_int.h"

static CUmemAllocationProp driver_prop(const struct flyt_cuda_backend *b, const flyt_vmm_prop *p)
{
    CUmemAllocationProp prop = {
        .type = (CUmemAllocationType)p->type,
        .requestedHandleTypes = (CUmemAllocationHandleType)p->handle_types,
        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = b->dev},
    };
    prop.allocFlags.compressionType = p->compression;
    prop.allocFlags.gpuDirectRDMACapable = p->rdma_capable;
    prop.allocFlags.usage = p->usage;
    return prop;
}

CUresult flyt_cuda_vmm_granularity(flyt_backend *base, const flyt_vmm_prop *prop, uint64_t *bytes)
{
    ENTER(b, base);
    CUmemAllocationProp p = driver_prop(b, prop);
    size_t g = 0;
    CUresult r = b->cu.cuMemGetAllocationGranularity(&g, &p,
                                                     (CUmemAllocationGranularity_flags)prop->option);
    *bytes = g;
    return r;
}

CUresult flyt_cuda_vmm_reserve(flyt_backend *base, uint64_t size, uint64_t alignment, uint64_t addr,
                               uint64_t *ptr)
{
    ENTER(b, base);
    CUdeviceptr p = 0;
    CUresult r = b->cu.cuMemAddressReserve(&p, (size_t)size, (size_t)alignment, addr, 0);
    *ptr = p;
    b->ckpt.reservations += r == CUDA_SUCCESS; /* a checkpoint refuses them */
    return r;
}

CUresult flyt_cuda_vmm_free(flyt_backend *base, uint64_t ptr, uint64_t size)
{
    ENTER(b, base);
    CUresult r = b->cu.cuMemAddressFree(ptr, (size_t)size);
    if (r == CUDA_SUCCESS && b->ckpt.reservations)
        b->ckpt.reservations--;
    return r;
}

CUresult flyt_cuda_vmm_create(flyt_backend *base, uint64_t size, const flyt_vmm_prop *prop,
                              flyt_bhandle *mem)
{
    ENTER(b, base);
    CUmemAllocationProp p = driver_prop(b, prop);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = b->cu.cuMemCreate(&h, (size_t)size, &p, 0);
    *mem = (flyt_bhandle)(uintptr_t)h;
    return r;
}

CUresult flyt_cuda_vmm_release(flyt_backend *base, flyt_bhandle mem)
{
    ENTER(b, base);
    return b->cu.cuMemRelease((CUmemGenericAllocationHandle)(uintptr_t)mem);
}

CUresult flyt_cuda_vmm_map(flyt_backend *base, uint64_t ptr, uint64_t size, uint64_t offset,
                           flyt_bhandle mem)
{
    ENTER(b, base);
    return b->cu.cuMemMap(ptr, (size_t)size, (size_t)offset,
                          (CUmemGenericAllocationHandle)(uintptr_t)mem, 0);
}

CUresult flyt_cuda_vmm_unmap(flyt_backend *base, uint64_t ptr, uint64_t size)
{
    ENTER(b, base);
    return b->cu.cuMemUnmap(ptr, (size_t)size);
}

CUresult flyt_cuda_vmm_set_access(flyt_backend *base, uint64_t ptr, uint64_t size, unsigned flags)
{
    ENTER(b, base);
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = b->dev},
                         .flags = (CUmemAccess_flags)flags};
    return b->cu.cuMemSetAccess(ptr, (size_t)size, &d, 1);
}

CUresult flyt_cuda_vmm_retain(flyt_backend *base, uint64_t addr, flyt_bhandle *mem)
{
    ENTER(b, base);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = b->cu.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)addr);
    *mem = (flyt_bhandle)(uintptr_t)h;
    return r;
}

/*
 * Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
 * cuMemSetAccess, ...), as PyTorch's expandable segments use it. Every
 * call is the server driver's own (VMM_* ops); the client keeps what it
 * needs to answer locally: each mapping (so pointer attributes, address
 * ranges and copies see device memory there, and cuMemGetAccess answers)
 * and each allocation's properties. The session's one device is location 0.
 * Exporting an allocation to another process of the VM is ipc.c's.
 * As the driver's, these calls name their device or address themselves and
 * need no current context on the calling thread (PyTorch's expandable
 * segments grow from worker threads that never made one current): some
 * context must exist.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "flyt_array.h"
#include "client.h"

struct vmm_map {
    uint64_t ptr, size, handle;
    unsigned access; /* CU_MEM_ACCESS_FLAGS_PROT_* */
};

struct vmm_alloc {
    uint64_t handle;
    CUmemAllocationProp prop;
    unsigned refs; /* cuMemCreate and each retain, as the server counts them */
};

static pthread_mutex_t vmm_lock = FLYT_MUTEX_INITIALIZER;
static struct vmm_map *maps;
static size_t nmaps, cap_maps;
static struct vmm_alloc *allocs;
static size_t nallocs, cap_allocs;

static CUresult wire_prop(const CUmemAllocationProp *prop, flyt_vmm_prop *out)
{
    if (prop == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_check_device(prop->location.id);
    if (r != CUDA_SUCCESS)
        return r;
    *out = (flyt_vmm_prop){
        .type = (uint32_t)prop->type,
        .handle_types = (uint32_t)prop->requestedHandleTypes,
        .location_type = CU_MEM_LOCATION_TYPE_DEVICE,
        .location_id = 0,
        .compression = prop->allocFlags.compressionType,
        .rdma_capable = prop->allocFlags.gpuDirectRDMACapable,
        .usage = prop->allocFlags.usage,
    };
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity,
                                                   const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option)
{
    CUresult r = flyt_ctx_require_object();
    flyt_vmm_prop req;
    if (r == CUDA_SUCCESS && granularity == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = wire_prop(prop, &req);
    if (r != CUDA_SUCCESS)
        return r;
    req.option = (uint32_t)option;
    uint64_t bytes = 0;
    r = flyt_call_u64(FLYT_OP_VMM_GRANULARITY, &req, sizeof req, &bytes);
    if (r == CUDA_SUCCESS)
        *granularity = (size_t)bytes;
    return r;
}

FLYT_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                         CUdeviceptr addr, unsigned long long flags)
{
    CUresult r = flyt_ctx_require_object();
    if (r != CUDA_SUCCESS)
        return r;
    if (ptr == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_vmm_reserve req = {.size = size, .alignment = alignment, .addr = addr, .flags = flags};
    uint64_t got = 0;
    r = flyt_call_u64(FLYT_OP_VMM_RESERVE, &req, sizeof req, &got);
    *ptr = r == CUDA_SUCCESS ? flyt_dptr(got) : 0;
    return r;
}

/* A VMM op on an address range, answered by the server. */
static CUresult range_call(uint16_t op, CUdeviceptr ptr, size_t size)
{
    CUresult r = flyt_ctx_require_object();
    if (r != CUDA_SUCCESS)
        return r;
    flyt_req_vmm_range req = {.ptr = ptr, .size = size};
    return flyt_call(op, &req, sizeof req, NULL, 0, NULL);
}

FLYT_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    return range_call(FLYT_OP_VMM_FREE, ptr, size);
}

FLYT_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult r = flyt_ctx_require_object();
    flyt_req_vmm_create req = {.size = size, .flags = flags};
    if (r == CUDA_SUCCESS && (handle == NULL || size == 0))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = wire_prop(prop, &req.prop);
    if (r != CUDA_SUCCESS)
        return r;
    flyt_rep_u64_pair rep = {0}; /* the allocation's id, the compression granted */
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_VMM_CREATE, &req, sizeof req, NULL, 0, &sink);
    if (r != CUDA_SUCCESS)
        return r;
    CUmemAllocationProp granted = *prop;
    granted.allocFlags.compressionType = (unsigned char)rep.b;
    flyt_vmm_adopt(rep.a, &granted);
    *handle = rep.a;
    return CUDA_SUCCESS;
}

void flyt_vmm_adopt(uint64_t handle, const CUmemAllocationProp *prop)
{
    pthread_mutex_lock(&vmm_lock);
    if (flyt_array_room((void **)&allocs, &cap_allocs, nallocs, sizeof *allocs) == 0)
        allocs[nallocs++] = (struct vmm_alloc){.handle = handle, .prop = *prop, .refs = 1};
    pthread_mutex_unlock(&vmm_lock);
}

/* One reference more (+1) or less (-1) to handle's record; at none left the
 * record goes (expandable segments create and release handles all along). */
static void alloc_count(uint64_t handle, int delta)
{
    pthread_mutex_lock(&vmm_lock);
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].handle == handle) {
            allocs[i].refs += (unsigned)delta;
            if (allocs[i].refs == 0)
                allocs[i] = allocs[--nallocs];
            break;
        }
    pthread_mutex_unlock(&vmm_lock);
}

FLYT_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult r = flyt_ctx_require_object();
    if (r != CUDA_SUCCESS)
        return r;
    r = flyt_call_handle(FLYT_OP_VMM_RELEASE, handle);
    if (r == CUDA_SUCCESS)
        alloc_count(handle, -1); /* the last release forgets its properties */
    return r;
}

FLYT_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult r = flyt_ctx_require_object();
    if (r != CUDA_SUCCESS)
        return r;
    flyt_req_vmm_map req = {.ptr = ptr, .size = size, .offset = offset, .handle = handle,
                            .flags = flags};
    r = flyt_call(FLYT_OP_VMM_MAP, &req, sizeof req, NULL, 0, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&vmm_lock);
    if (flyt_array_room((void **)&maps, &cap_maps, nmaps, sizeof *maps) == 0)
        maps[nmaps++] = (struct vmm_map){.ptr = ptr, .size = size, .handle = handle};
    pthread_mutex_unlock(&vmm_lock);
    flyt_range_add(FLYT_RANGE_DEVICE, ptr, size, 0);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult r = range_call(FLYT_OP_VMM_UNMAP, ptr, size);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&vmm_lock);
    for (size_t i = 0; i < nmaps;) {
        if (maps[i].ptr >= ptr && maps[i].ptr - ptr < size) {
            flyt_range_remove(FLYT_RANGE_DEVICE, maps[i].ptr);
            maps[i] = maps[--nmaps];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                    size_t count)
{
    CUresult r = flyt_ctx_require_object();
    if (r != CUDA_SUCCESS)
        return r;
    if (desc == NULL || count == 0 || count > FLYT_VMM_MAX_ACCESS)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_vmm_access wire[FLYT_VMM_MAX_ACCESS];
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        if ((r = flyt_check_device(desc[i].location.id)) != CUDA_SUCCESS)
            return r;
        wire[i] = (flyt_vmm_access){.location_type = CU_MEM_LOCATION_TYPE_DEVICE,
                                    .flags = (uint32_t)desc[i].flags};
    }
    flyt_req_vmm_access req = {.ptr = ptr, .size = size, .count = (uint32_t)count};
    struct iovec data = {.iov_base = wire, .iov_len = count * sizeof wire[0]};
    r = flyt_call(FLYT_OP_VMM_SET_ACCESS, &req, sizeof req, &data, 1, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&vmm_lock);
    for (size_t i = 0; i < nmaps; i++)
        if (maps[i].ptr >= ptr && maps[i].ptr - ptr < size)
            maps[i].access = (unsigned)desc[count - 1].flags;
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                    CUdeviceptr ptr)
{
    CUresult r = flyt_ctx_require_object();
    if (r != CUDA_SUCCESS)
        return r;
    if (flags == NULL || location == NULL || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = flyt_check_device(location->id)) != CUDA_SUCCESS)
        return r;
    r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    for (size_t i = 0; i < nmaps; i++)
        if (ptr >= maps[i].ptr && ptr - maps[i].ptr < maps[i].size) {
            *flags = maps[i].access;
            r = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&vmm_lock);
    return r;
}

FLYT_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult r = flyt_ctx_require_object();
    if (r != CUDA_SUCCESS)
        return r;
    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t id = 0;
    flyt_req_handle req = {.handle = (uint64_t)(uintptr_t)addr};
    r = flyt_call_u64(FLYT_OP_VMM_RETAIN, &req, sizeof req, &id);
    if (r == CUDA_SUCCESS) {
        alloc_count(id, +1);
        *handle = id;
    }
    return r;
}

FLYT_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                            CUmemGenericAllocationHandle handle)
{
    CUresult r = flyt_ctx_require_object();
    if (r != CUDA_SUCCESS)
        return r;
    if (prop == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].handle == handle) {
            *prop = allocs[i].prop;
            r = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&vmm_lock);
    return r;
}

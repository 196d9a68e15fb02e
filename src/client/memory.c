/*
 * Memory: device allocations and pools, host memory (allocated and
 * registered), address ranges and pointer attributes.
 *
 * Device pointers are the server's real GPU addresses; the client records
 * every allocation (registry.c) so that unified-addressing copies, address
 * ranges and pointer attributes are answered without a round trip.
 *
 * Host memory on a Unix-socket session is shared with the server through a
 * memfd, which the server maps and pins: copies to and from it are the
 * server's DMA with no bytes on the socket, as pinned memory is natively.
 * Registered memory is made shared the same way, in place: its pages are
 * replaced by a memfd mapping holding the same bytes at the same address.
 * Where the server can map it at the client's own address (HOST_MAP_AT),
 * kernels reach it through the very pointer the application holds: mapped
 * pinned memory and managed memory (docs/host-memory.md).
 */
#include "client.h"
#include "export_tables.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Marks the record of a registration's last partial page, which is not a
 * registration of its own (no CU_MEMHOSTREGISTER_* flag uses this bit). */
#define TAIL_PIECE 0x80000000u
/* Marks host memory the GPU reaches at its host address (HOST_MAP_AT). */
#define DEVICE_MAPPED 0x40000000u
/* Marks pinned memory at an address the server reserved (pinned_remote.c):
 * the GPU reaches it at that address once its device pointer is asked. */
#define REMOTE_PINNED 0x20000000u
#define INTERNAL_FLAGS (TAIL_PIECE | DEVICE_MAPPED | REMOTE_PINNED)
/* Tries at finding an address free in both processes. */
#define SAME_ADDRESS_TRIES 8

/* ---- device allocations ---- */

FLYT_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (dptr == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = 0; /* a failed allocation leaves a null pointer, as the driver's does */
    flyt_req_mem_alloc req = {.size = size};
    uint64_t addr = 0;
    r = flyt_call_u64(FLYT_OP_MEM_ALLOC, &req, sizeof req, &addr);
    if (r == CUDA_SUCCESS) {
        *dptr = flyt_dptr(addr);
        flyt_range_add(FLYT_RANGE_DEVICE, addr, size, 0);
    }
    return r;
}

FLYT_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (dptr == 0)
        return CUDA_SUCCESS;
    if (flyt_range_find((uint64_t)dptr, NULL, NULL, NULL) == FLYT_RANGE_MANAGED)
        return flyt_managed_free((uint64_t)dptr);
    r = flyt_call_handle(FLYT_OP_MEM_FREE, (uint64_t)dptr);
    if (r == CUDA_SUCCESS)
        flyt_range_remove(FLYT_RANGE_DEVICE, (uint64_t)dptr);
    return r;
}

FLYT_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
                                        size_t height, unsigned int elem_size)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (dptr == NULL || pitch == NULL || width == 0 || height == 0 ||
        (elem_size != 4 && elem_size != 8 && elem_size != 16))
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_mem_pitch req = {.width_bytes = width, .height = height};
    flyt_rep_u64_pair rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_MEM_ALLOC_PITCH, &req, sizeof req, NULL, 0, &sink);
    if (r == CUDA_SUCCESS) {
        *dptr = flyt_dptr(rep.a);
        *pitch = (size_t)rep.b;
        flyt_range_add(FLYT_RANGE_DEVICE, rep.a, rep.b * height, 0);
    }
    return r;
}

/* The virtual GPU's free and total memory: the server answers within the
 * session's quota, with no context of the client's. */
static CUresult device_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    if (free_bytes == NULL || total_bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_rep_mem_info rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    CUresult r = flyt_call(FLYT_OP_DEVICE_MEM_INFO, &(flyt_req_none){0}, sizeof(flyt_req_none),
                           NULL, 0, &sink);
    if (r == CUDA_SUCCESS) {
        *free_bytes = (size_t)rep.free_bytes;
        *total_bytes = (size_t)rep.total_bytes;
    }
    return r;
}

FLYT_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    CUresult r = flyt_ctx_require();
    return r != CUDA_SUCCESS ? r : device_mem_info(free_bytes, total_bytes);
}

CUresult flyt_tool_mem_info(CUdevice dev, size_t *free_bytes, size_t *total_bytes)
{
    CUresult r = flyt_check_device(dev);
    return r != CUDA_SUCCESS ? r : device_mem_info(free_bytes, total_bytes);
}

FLYT_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t b = 0, n = 0;
    int kind = flyt_range_find((uint64_t)dptr, &b, &n, NULL);
    if (kind != FLYT_RANGE_DEVICE && kind != FLYT_RANGE_MANAGED)
        return CUDA_ERROR_NOT_FOUND;
    if (base)
        *base = flyt_dptr(b);
    if (size)
        *size = (size_t)n;
    return CUDA_SUCCESS;
}

/* ---- stream-ordered allocations and pools ---- */

/* The device's current pool (cuDeviceSetMemPool), 0 while it is the default
 * one. Client state: cuMemAllocAsync names it to the server as
 * cuMemAllocFromPoolAsync would. */
static _Atomic uint64_t current_pool;

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, uint64_t pool, CUstream stream,
                            int per_thread)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (pool == 0)
        pool = atomic_load(&current_pool);
    flyt_req_mem_alloc req = {.size = size, .stream = flyt_stream_wire(stream, per_thread),
                              .pool = pool};
    uint64_t addr = 0;
    r = flyt_call_u64(FLYT_OP_MEM_ALLOC_ASYNC, &req, sizeof req, &addr);
    if (r == CUDA_SUCCESS) {
        *dptr = flyt_dptr(addr);
        if (addr)
            flyt_range_add(FLYT_RANGE_DEVICE, addr, size, 0);
    }
    return r;
}

FLYT_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    return alloc_async(dptr, size, 0, stream, 0);
}
FLYT_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    return alloc_async(dptr, size, 0, stream, 1);
}
FLYT_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                             CUstream stream)
{
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, size, (uint64_t)(uintptr_t)pool, stream, 0);
}
FLYT_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                                  CUstream stream)
{
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, size, (uint64_t)(uintptr_t)pool, stream, 1);
}

static CUresult free_async(CUdeviceptr dptr, CUstream stream, int per_thread)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (dptr == 0)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_mem_free_async req = {.dptr = (uint64_t)dptr,
                                   .stream = flyt_stream_wire(stream, per_thread)};
    flyt_range_remove(FLYT_RANGE_DEVICE, req.dptr);
    return flyt_send_async(FLYT_OP_MEM_FREE_ASYNC, &req, sizeof req, NULL, 0);
}
FLYT_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    return free_async(dptr, stream, 0);
}
FLYT_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    return free_async(dptr, stream, 1);
}

FLYT_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_device req = {.device = dev};
    uint64_t id = 0;
    r = flyt_call_u64(FLYT_OP_POOL_DEFAULT, &req, sizeof req, &id);
    if (r == CUDA_SUCCESS)
        *pool = (CUmemoryPool)(uintptr_t)id;
    return r;
}

FLYT_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    CUresult r = cuDeviceGetDefaultMemPool(pool, dev);
    uint64_t cur = atomic_load(&current_pool);
    if (r == CUDA_SUCCESS && cur != 0)
        *pool = (CUmemoryPool)(uintptr_t)cur;
    return r;
}

FLYT_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    CUmemoryPool def = NULL;
    CUresult r = cuDeviceGetDefaultMemPool(&def, dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    /* the server knows the pool or refuses it, as the driver would */
    uint64_t threshold = 0;
    r = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
    if (r != CUDA_SUCCESS)
        return r;
    atomic_store(&current_pool, pool == def ? 0 : (uint64_t)(uintptr_t)pool);
    return CUDA_SUCCESS;
}

/* CUDA 13's pools by location: the session's device only (pools of host
 * memory are not carried, see cuMemPoolCreate). */
static CUresult device_of_location(const char *call, const CUmemLocation *location,
                                   CUmemAllocationType type, CUdevice *dev)
{
    if (location == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_ALLOCATION_TYPE_PINNED || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return flyt_unsupported_why(call, "pools of memory other than the device's");
    *dev = location->id;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool, CUmemLocation *location,
                                            CUmemAllocationType type)
{
    CUdevice dev = 0;
    CUresult r = device_of_location("cuMemGetDefaultMemPool", location, type, &dev);
    return r == CUDA_SUCCESS ? cuDeviceGetDefaultMemPool(pool, dev) : r;
}

FLYT_EXPORT CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location,
                                     CUmemAllocationType type)
{
    CUdevice dev = 0;
    CUresult r = device_of_location("cuMemGetMemPool", location, type, &dev);
    return r == CUDA_SUCCESS ? cuDeviceGetMemPool(pool, dev) : r;
}

FLYT_EXPORT CUresult cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type,
                                     CUmemoryPool pool)
{
    CUdevice dev = 0;
    CUresult r = device_of_location("cuMemSetMemPool", location, type, &dev);
    return r == CUDA_SUCCESS ? cuDeviceSetMemPool(dev, pool) : r;
}

FLYT_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    if (pool == NULL || props == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return flyt_unsupported_why("cuMemPoolCreate", "pools other than device memory");
    /* shareable pools: with POSIX descriptors, of a server that shares them (ipc.c) */
    if (props->handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return flyt_unsupported_why("cuMemPoolCreate", "handle types other than POSIX descriptors");
    if (props->handleTypes && flyt_conn_server_minor() < FLYT_MINOR_IPC_POOL)
        return flyt_unsupported_why("cuMemPoolCreate",
                                    "shareable pools (the server predates protocol 2.7)");
    flyt_req_pool_create req = {.max_size = props->maxSize, .device = props->location.id,
                                .handle_types = (uint32_t)props->handleTypes};
    uint64_t id = 0;
    r = flyt_call_u64(FLYT_OP_POOL_CREATE, &req, sizeof req, &id);
    if (r == CUDA_SUCCESS)
        *pool = (CUmemoryPool)(uintptr_t)id;
    return r;
}

FLYT_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult r = flyt_call_handle(FLYT_OP_POOL_DESTROY, (uint64_t)(uintptr_t)pool);
    /* a destroyed current pool leaves the default one current */
    uint64_t destroyed = (uint64_t)(uintptr_t)pool;
    if (r == CUDA_SUCCESS)
        atomic_compare_exchange_strong(&current_pool, &destroyed, 0);
    return r;
}

FLYT_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    flyt_req_pool_attr req = {.pool = (uint64_t)(uintptr_t)pool, .value = keep};
    return flyt_call(FLYT_OP_POOL_TRIM, &req, sizeof req, NULL, 0, NULL);
}

/* The reuse attributes are ints, the byte counts are 64-bit. */
static int pool_attr_is_int(CUmemPool_attribute attr)
{
    return attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

FLYT_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_pool_attr req = {.pool = (uint64_t)(uintptr_t)pool, .attr = (int32_t)attr};
    req.value = pool_attr_is_int(attr) ? (uint64_t)*(int *)value : *(uint64_t *)value;
    return flyt_call(FLYT_OP_POOL_SET_ATTR, &req, sizeof req, NULL, 0, NULL);
}

FLYT_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_pool_attr req = {.pool = (uint64_t)(uintptr_t)pool, .attr = (int32_t)attr};
    uint64_t v = 0;
    CUresult r = flyt_call_u64(FLYT_OP_POOL_GET_ATTR, &req, sizeof req, &v);
    if (r == CUDA_SUCCESS) {
        if (pool_attr_is_int(attr))
            *(int *)value = (int)v;
        else
            *(uint64_t *)value = v;
    }
    return r;
}

/* One device: its own memory is always accessible to it. */
FLYT_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    (void)pool;
    for (size_t i = 0; i < count; i++)
        if (map == NULL || map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            map[i].location.id != 0)
            return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool,
                                        CUmemLocation *location)
{
    (void)pool;
    if (flags == NULL || location == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = location->type == CU_MEM_LOCATION_TYPE_DEVICE && location->id == 0
                 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                 : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
}

/* ---- host memory shared with the server ---- */

/* Gives the server the memfd; its region id, 0 if it cannot map it (then
 * copies go through the socket). */
static uint64_t host_map(int fd, uint64_t len)
{
    flyt_req_host_map req = {.size = len};
    flyt_rep_u64 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    if (flyt_call_fd(FLYT_OP_HOST_MAP, &req, sizeof req, fd, &sink) != CUDA_SUCCESS)
        return 0;
    flyt_region_keep(rep.value, fd, len, 0);
    return rep.value;
}

/* A new memfd of len bytes mapped shared: the mapping, and the fd in *fd;
 * MAP_FAILED with nothing left open when either cannot be had. Its size is
 * final, so it is sealed: the server maps only sealed files (a file cut
 * under its mapping would end the session with SIGBUS). */
static void *memfd_mapping(const char *name, uint64_t len, int *fd)
{
    *fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (*fd < 0)
        return MAP_FAILED;
    void *p = MAP_FAILED;
    if (ftruncate(*fd, (off_t)len) == 0 &&
        fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (p == MAP_FAILED)
        close(*fd);
    return p;
}

/* Asks the server to map fd at addr, device-mapped. CUDA_SUCCESS with the
 * region id when the GPU reaches it at addr itself. */
static CUresult host_map_at(int fd, uint64_t addr, uint64_t len, unsigned flags, uint64_t *region)
{
    flyt_req_host_map_at req = {.size = len, .addr = addr, .flags = flags};
    flyt_rep_u64_pair rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    CUresult r = flyt_call_fd(FLYT_OP_HOST_MAP_AT, &req, sizeof req, fd, &sink);
    if (r == CUDA_SUCCESS && rep.b != addr) {
        /* a device without CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: one
         * pointer cannot serve both sides */
        flyt_region_not_kept();
        flyt_call_handle(FLYT_OP_HOST_UNMAP, rep.a);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (r == CUDA_SUCCESS)
        flyt_region_keep(rep.a, fd, len, addr);
    *region = rep.a;
    return r;
}

/* A new memfd of len bytes mapped here and in the server at one address the
 * GPU reaches: the address, with the region in *region; MAP_FAILED when no
 * address tried was free in the server. An address taken there is kept
 * mapped here while trying, so that mmap hands out another. */
void *flyt_same_address_mapping(const char *name, uint64_t len, uint64_t *region)
{
    int fd;
    void *tried[SAME_ADDRESS_TRIES];
    int ntried = 0;
    void *p = memfd_mapping(name, len, &fd);
    if (p == MAP_FAILED)
        return MAP_FAILED; /* nothing left open */
    while (p != MAP_FAILED) {
        CUresult r = host_map_at(fd, (uint64_t)(uintptr_t)p, len, 0, region);
        if (r == CUDA_SUCCESS)
            break;
        tried[ntried++] = p;
        p = MAP_FAILED;
        /* The server's driver holds large ranges (gigabytes) where the kernel
         * would pick next: ask further below each time (1, 4, 16 GiB ...). */
        uintptr_t step = (uintptr_t)1 << (30 + 2 * (ntried - 1));
        uintptr_t below = (uintptr_t)tried[ntried - 1] > step ? (uintptr_t)tried[ntried - 1] - step : 0;
        if (r == CUDA_ERROR_ALREADY_MAPPED && ntried < SAME_ADDRESS_TRIES)
            p = mmap((void *)below, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    while (ntried > 0)
        munmap(tried[--ntried], len);
    close(fd);
    if (p != MAP_FAILED)
        madvise(p, len, MADV_DONTFORK); /* as the driver's pinned memory */
    return p;
}

/* Pinned memory is device-mapped at its own address, as CUDA's is under
 * unified addressing; where no address is free in the server it is shared
 * unmapped (copies by DMA still, but no device pointer). */
static void *shared_alloc(size_t size, unsigned flags)
{
    uint64_t len = flyt_page_up(size), region = 0;
    void *p = flyt_same_address_mapping("flyt-pinned", len, &region);
    if (p != MAP_FAILED) {
        flags |= DEVICE_MAPPED;
    } else {
        int fd;
        p = memfd_mapping("flyt-pinned", len, &fd);
        if (p == MAP_FAILED)
            return NULL;
        region = host_map(fd, len);
        close(fd);
        if (region == 0) {
            munmap(p, len);
            return NULL;
        }
        /* pinned memory is not inherited by a forked child, natively either */
        madvise(p, len, MADV_DONTFORK);
    }
    flyt_range_add(FLYT_RANGE_PINNED, (uint64_t)(uintptr_t)p, size, flags);
    flyt_range_set_region((uint64_t)(uintptr_t)p, region);
    return p;
}

FLYT_EXPORT CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (pp == NULL || size == 0 ||
        (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                             CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    *pp = NULL;
    if (flyt_conn_shares_memory() && (*pp = shared_alloc(size, flags)) != NULL)
        return CUDA_SUCCESS;
    if (!flyt_conn_shares_memory() && (*pp = flyt_pinned_remote_alloc(size)) != NULL) {
        flyt_range_add(FLYT_RANGE_PINNED, (uint64_t)(uintptr_t)*pp, size, flags | REMOTE_PINNED);
        return CUDA_SUCCESS;
    }
    if (posix_memalign(pp, FLYT_PAGE, size) != 0) {
        *pp = NULL;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    flyt_range_add(FLYT_RANGE_PINNED, (uint64_t)(uintptr_t)*pp, size, flags);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t size) { return cuMemHostAlloc(pp, size, 0); }


FLYT_EXPORT CUresult cuMemFreeHost(void *p)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t addr = (uint64_t)(uintptr_t)p, base = 0, size = 0, offset = 0;
    unsigned flags = 0;
    if (flyt_range_find(addr, &base, &size, &flags) != FLYT_RANGE_PINNED || base != addr)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t region = flyt_range_region(addr, 1, &offset);
    flyt_range_remove(FLYT_RANGE_PINNED, addr);
    if (flags & REMOTE_PINNED)
        return flyt_pinned_remote_free(addr, &r) ? r : CUDA_ERROR_INVALID_VALUE;
    if (region == 0) {
        free(p);
        return CUDA_SUCCESS;
    }
    flyt_region_release(region);
    munmap(p, flyt_page_up(size));
    return CUDA_SUCCESS;
}

/* Replaces the whole pages of [p, p + size) by a memfd mapping with the same
 * contents and shares it with the server, at the same address there where it
 * is free (*mapped then 1: the GPU reaches the pages at their address). The
 * region id, or 0 (then the range stays as it was and copies take the
 * pageable path). */
static uint64_t share_in_place(void *p, size_t size, unsigned flags, uint64_t *lo_out,
                               uint64_t *len_out, int *mapped)
{
    uint64_t lo = flyt_page_up((uint64_t)(uintptr_t)p);
    uint64_t hi = flyt_page_down((uint64_t)(uintptr_t)p + size);
    if (hi <= lo || !flyt_maps_plain_anonymous(lo, hi))
        return 0;
    uint64_t len = hi - lo;
    int fd;
    void *view = memfd_mapping("flyt-registered", len, &fd);
    if (view == MAP_FAILED)
        return 0;
    memcpy(view, (void *)(uintptr_t)lo, len);
    uint64_t region = 0;
    *mapped = host_map_at(fd, lo, len, flags & CU_MEMHOSTREGISTER_READ_ONLY, &region) == CUDA_SUCCESS;
    if (!*mapped)
        region = host_map(fd, len);
    if (region != 0 && mmap((void *)(uintptr_t)lo, len, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        flyt_region_release(region);
        region = 0;
    }
    munmap(view, len);
    close(fd);
    if (region)
        madvise((void *)(uintptr_t)lo, len, MADV_DONTFORK);
    *lo_out = lo;
    *len_out = len;
    return region;
}

FLYT_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (p == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (flyt_range_find((uint64_t)(uintptr_t)p, NULL, NULL, NULL) != 0)
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if (flags & CU_MEMHOSTREGISTER_IOMEMORY)
        return flyt_unsupported_why("cuMemHostRegister", "I/O memory");
    /* as a device without read-only registration answers (over TCP the GPU
     * cannot map this memory at all: the attribute is 0 there) */
    if ((flags & CU_MEMHOSTREGISTER_READ_ONLY) &&
        !flyt_device_attr(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED))
        return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t start = (uint64_t)(uintptr_t)p, end = start + size;
    if (!(flags & CU_MEMHOSTREGISTER_READ_ONLY) &&
        flyt_maps_unpinnable_for_write(flyt_page_down(start), flyt_page_up(end)))
        return CUDA_ERROR_INVALID_VALUE; /* the driver's answer when the kernel will not pin */
    uint64_t lo = 0, len = 0, region = 0;
    int mapped = 0;
    if (flyt_conn_shares_memory())
        region = share_in_place(p, size, flags, &lo, &len, &mapped);
    if (region == 0) {
        flyt_range_add(FLYT_RANGE_REGISTERED, (uint64_t)(uintptr_t)p, size, flags);
        return CUDA_SUCCESS;
    }
    /* three records, as ranges of one kind never overlap: the shared whole
     * pages, with their region, and the parts of pages before and after
     * them, which copies reach through the pageable path */
    uint64_t hi = lo + len;
    /* kernels reach the range only when all of it lies in the shared pages */
    if (mapped && start == lo && end == hi)
        flags |= DEVICE_MAPPED;
    flyt_range_add(FLYT_RANGE_REGISTERED, lo, len, flags);
    flyt_range_set_region(lo, region);
    if (start < lo)
        flyt_range_add(FLYT_RANGE_REGISTERED, start, lo - start, flags);
    if (hi < end)
        flyt_range_add(FLYT_RANGE_REGISTERED, hi, end - hi, flags | TAIL_PIECE);
    return CUDA_SUCCESS;
}
FLYT_EXPORT CUresult cuMemHostRegister(void *p, size_t size, unsigned int flags)
{
    return cuMemHostRegister_v2(p, size, flags);
}

/* Between machines registered memory is kept equal with device memory of
 * the server's choosing (CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM is 0 there,
 * so programs take the device pointer cuMemHostGetDevicePointer answers):
 * made at the first such call for [base, base + size). */
static pthread_mutex_t registered_mu = FLYT_MUTEX_INITIALIZER;

static CUresult registered_remote_map(uint64_t base, uint64_t size, uint64_t *dev)
{
    pthread_mutex_lock(&registered_mu);
    CUresult r = CUDA_SUCCESS;
    if (!flyt_mremote_device(base, size, dev)) {
        flyt_req_mem_alloc req = {.size = size};
        r = flyt_call_u64(FLYT_OP_MEM_ALLOC, &req, sizeof req, dev);
        if (r == CUDA_SUCCESS && (r = flyt_mremote_track(base, size, *dev)) != CUDA_SUCCESS)
            flyt_call_handle(FLYT_OP_MEM_FREE, *dev);
        if (r == CUDA_SUCCESS) /* copies naming it go to the device */
            flyt_range_add(FLYT_RANGE_DEVICE, *dev, size, 0);
    }
    pthread_mutex_unlock(&registered_mu);
    return r;
}

/* Its device memory, if it has any, goes with the registration. */
static CUresult registered_remote_unmap(uint64_t base, uint64_t size)
{
    uint64_t dev = 0;
    pthread_mutex_lock(&registered_mu);
    int mapped = flyt_mremote_device(base, size, &dev);
    if (mapped) {
        flyt_mremote_untrack(base);
        flyt_range_remove(FLYT_RANGE_DEVICE, dev);
    }
    pthread_mutex_unlock(&registered_mu);
    return mapped ? flyt_call_handle(FLYT_OP_MEM_FREE, dev) : CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemHostUnregister(void *p)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t addr = (uint64_t)(uintptr_t)p, base = 0, lo = flyt_page_up(addr), len = 0, offset = 0;
    uint64_t size = 0;
    if (flyt_range_find(addr, &base, &size, NULL) != FLYT_RANGE_REGISTERED || base != addr)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    /* shared in place: the record of the whole pages holds the region */
    uint64_t region = flyt_range_find(lo, &base, &len, NULL) == FLYT_RANGE_REGISTERED && base == lo
                          ? flyt_range_region(lo, 1, &offset)
                          : 0;
    if (region == 0) {
        r = flyt_conn_shares_memory() ? CUDA_SUCCESS : registered_remote_unmap(addr, size);
        flyt_range_remove(FLYT_RANGE_REGISTERED, addr);
        return r;
    }
    uint64_t tail = 0;
    unsigned tail_flags = 0;
    if (flyt_range_find(lo + len, &tail, NULL, &tail_flags) == FLYT_RANGE_REGISTERED &&
        tail == lo + len && (tail_flags & TAIL_PIECE))
        flyt_range_remove(FLYT_RANGE_REGISTERED, tail);
    if (addr != lo)
        flyt_range_remove(FLYT_RANGE_REGISTERED, addr);
    flyt_range_remove(FLYT_RANGE_REGISTERED, lo);
    /* the pages stay shared memory with the program's bytes; only the
     * server lets go of them */
    flyt_region_release(region);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
    /* the driver wants a current context here (measured: no_current_context.cu) */
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    unsigned f = 0;
    int kind = flyt_range_find((uint64_t)(uintptr_t)p, NULL, NULL, &f);
    if (flags == NULL || (kind != FLYT_RANGE_PINNED && kind != FLYT_RANGE_REGISTERED))
        return CUDA_ERROR_INVALID_VALUE;
    /* the driver does not echo READ_ONLY (measured on the H100: 0x2 for Mapped|ReadOnly) */
    *flags = f & ~(INTERNAL_FLAGS | CU_MEMHOSTREGISTER_READ_ONLY);
    /* under unified addressing the driver maps every page-locked allocation
     * and says so; Flyt's is mapped where the server maps it at its address */
    if (kind == FLYT_RANGE_PINNED && (f & (DEVICE_MAPPED | REMOTE_PINNED)))
        *flags |= CU_MEMHOSTALLOC_DEVICEMAP;
    return CUDA_SUCCESS;
}

/* Device-mapped host memory is reached at its host address. */
FLYT_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dptr, void *p, unsigned int flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    unsigned f = 0;
    uint64_t base = 0, size = 0, dev = 0;
    int kind = flyt_range_find((uint64_t)(uintptr_t)p, &base, &size, &f);
    if (dptr == NULL || flags != 0 || (kind != FLYT_RANGE_PINNED && kind != FLYT_RANGE_REGISTERED))
        return CUDA_ERROR_INVALID_VALUE;
    /* between machines: the device memory behind it comes now (once) */
    if ((f & REMOTE_PINNED) && (r = flyt_pinned_remote_map(base)) != CUDA_SUCCESS)
        return r;
    if (kind == FLYT_RANGE_REGISTERED && !flyt_conn_shares_memory()) {
        r = registered_remote_map(base, size, &dev);
        if (r == CUDA_SUCCESS)
            *dptr = flyt_dptr(dev + ((uint64_t)(uintptr_t)p - base));
        return r;
    }
    if (!(f & (DEVICE_MAPPED | REMOTE_PINNED)))
        return flyt_unsupported_why("cuMemHostGetDevicePointer",
                                    flyt_conn_shares_memory()
                                        ? "this host range is not mapped at its address in the server"
                                        : "the server reserved no address for this pinned memory (no VMM there)");
    *dptr = flyt_dptr((uint64_t)(uintptr_t)p);
    return CUDA_SUCCESS;
}

/* ---- pointer attributes ---- */

/* One attribute of ptr; CUDA_ERROR_INVALID_VALUE when it has none. Managed
 * memory is device memory to the driver (IS_MANAGED tells it apart), and
 * both pointers of it are ptr; device-mapped host memory has a device
 * pointer equal to its host pointer. */
static CUresult pointer_attr(void *data, CUpointer_attribute attr, uint64_t ptr)
{
    uint64_t base = 0, size = 0;
    unsigned flags = 0;
    int kind = flyt_range_find(ptr, &base, &size, &flags);
    if (kind == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int managed = kind == FLYT_RANGE_MANAGED;
    int device = kind == FLYT_RANGE_DEVICE || managed;
    /* remote pinned memory: at that address once its device pointer is asked */
    int device_reaches = device || (flags & (DEVICE_MAPPED | REMOTE_PINNED));
    int host_reaches = !device || managed;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = flyt_ctx_current();
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (!device_reaches)
            return CUDA_ERROR_INVALID_VALUE; /* not mapped into the GPU */
        *(CUdeviceptr *)data = flyt_dptr(ptr);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host_reaches)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(int *)data = managed;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(int *)data = 1;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = flyt_range_buffer_id(ptr);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        *(int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = flyt_dptr(base);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = (size_t)size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = NULL;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

FLYT_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    if (data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return pointer_attr(data, attr, (uint64_t)ptr);
}

/* Unlike the single query, a pointer CUDA does not know is not an error:
 * its attributes read as zero. */
FLYT_EXPORT CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute *attrs,
                                            void **data, CUdeviceptr ptr)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    if (count == 0 || attrs == NULL || data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int known = flyt_range_find((uint64_t)ptr, NULL, NULL, NULL) != 0;
    for (unsigned i = 0; i < count; i++) {
        if (data[i] == NULL)
            continue;
        if (known && pointer_attr(data[i], attrs[i], (uint64_t)ptr) == CUDA_SUCCESS)
            continue;
        switch (attrs[i]) {
        case CU_POINTER_ATTRIBUTE_CONTEXT:
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
            *(void **)data[i] = NULL;
            break;
        case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
            *(unsigned long long *)data[i] = 0;
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
            *(int *)data[i] = -2; /* as the driver says for host memory it does not know */
            break;
        default:
            *(unsigned *)data[i] = 0;
            break;
        }
    }
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attr,
                                           CUdeviceptr ptr)
{
    if (value == NULL || attr != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
        return CUDA_ERROR_INVALID_VALUE;
    /* copies on the server's device memory are synchronous where CUDA says so already */
    return flyt_range_find((uint64_t)ptr, NULL, NULL, NULL) == FLYT_RANGE_DEVICE
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
}

/*
 * Memory management: device allocations and pools, host memory, every
 * memcpy and memset variant, symbols and pointer attributes.
 *
 * Copies to the device send the application's buffer straight to the socket
 * (no copy in the client when it is contiguous); copies from the device
 * receive straight into it. Host memory is local: "pinned" memory is
 * ordinary page-aligned memory that the client records, since the GPU cannot
 * reach this host's memory anyway.
 */
#include "client.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Largest data one copy message carries; bigger copies are split. */
#define COPY_PIECE ((uint64_t)FLYT_MAX_PAYLOAD - 4096)

static int is_device(const void *p)
{
    return flyt_range_find((uint64_t)(uintptr_t)p, NULL, NULL, NULL) == FLYT_RANGE_DEVICE;
}

static cudaError_t resolve_kind(enum cudaMemcpyKind *kind, const void *dst, const void *src)
{
    switch (*kind) {
    case cudaMemcpyHostToHost:
    case cudaMemcpyHostToDevice:
    case cudaMemcpyDeviceToHost:
    case cudaMemcpyDeviceToDevice:
        return cudaSuccess;
    case cudaMemcpyDefault: {
        int d = is_device(dst), s = is_device(src);
        *kind = s ? (d ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                  : (d ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
        return cudaSuccess;
    }
    default:
        return cudaErrorInvalidMemcpyDirection;
    }
}

/* Like every CUDA call, a copy first needs a device (even a host-to-host
 * one), and fails with the context's sticky error once that is broken. */
static cudaError_t ready(void)
{
    cudaError_t err = flyt_connect_once();
    return err != cudaSuccess ? err : flyt_sticky_error();
}

/* ---- device allocations ---- */

static cudaError_t alloc_call(uint16_t op, const void *req, size_t req_size, void *rep,
                              size_t rep_size)
{
    struct flyt_reply_sink sink = {.rep = rep, .rep_size = rep_size};
    return flyt_call(op, req, req_size, NULL, 0, &sink);
}

FLYT_EXPORT cudaError_t cudaMalloc(void **ptr, size_t size)
{
    if (ptr == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    *ptr = NULL;
    if (size == 0)
        return flyt_set_error(flyt_connect_once());
    flyt_req_mem_alloc req = {.size = size};
    flyt_rep_u64 rep = {0};
    cudaError_t err = alloc_call(FLYT_OP_MEM_ALLOC, &req, sizeof req, &rep, sizeof rep);
    if (err == cudaSuccess) {
        *ptr = (void *)(uintptr_t)rep.value;
        flyt_range_add(FLYT_RANGE_DEVICE, rep.value, size, 0);
    }
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaFree(void *ptr)
{
    if (ptr == NULL)
        return flyt_set_error(flyt_connect_once());
    flyt_req_handle req = {.handle = (uint64_t)(uintptr_t)ptr};
    cudaError_t err = flyt_call(FLYT_OP_MEM_FREE, &req, sizeof req, NULL, 0, NULL);
    if (err == cudaSuccess)
        flyt_range_remove(FLYT_RANGE_DEVICE, req.handle);
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaMallocPitch(void **ptr, size_t *pitch, size_t width, size_t height)
{
    if (ptr == NULL || pitch == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    *ptr = NULL;
    if (width == 0 || height == 0) {
        *pitch = 0;
        return flyt_set_error(flyt_connect_once());
    }
    flyt_req_mem_pitch req = {.width_bytes = width, .height = height};
    flyt_rep_u64_pair rep = {0};
    cudaError_t err = alloc_call(FLYT_OP_MEM_ALLOC_PITCH, &req, sizeof req, &rep, sizeof rep);
    if (err == cudaSuccess) {
        *ptr = (void *)(uintptr_t)rep.a;
        *pitch = (size_t)rep.b;
        flyt_range_add(FLYT_RANGE_DEVICE, rep.a, rep.b * height, 0);
    }
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitched, struct cudaExtent extent)
{
    if (pitched == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    size_t pitch = 0;
    void *ptr = NULL;
    cudaError_t err = cudaMallocPitch(&ptr, &pitch, extent.width, extent.height * extent.depth);
    if (err == cudaSuccess)
        *pitched = (struct cudaPitchedPtr){ptr, pitch, extent.width, extent.height};
    return err;
}

static cudaError_t malloc_async(void **ptr, size_t size, uint64_t pool, cudaStream_t stream)
{
    if (ptr == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    flyt_req_mem_alloc req = {.size = size, .stream = flyt_stream_id(stream), .pool = pool};
    flyt_rep_u64 rep = {0};
    cudaError_t err = alloc_call(FLYT_OP_MEM_ALLOC_ASYNC, &req, sizeof req, &rep, sizeof rep);
    if (err == cudaSuccess) {
        *ptr = (void *)(uintptr_t)rep.value;
        if (rep.value)
            flyt_range_add(FLYT_RANGE_DEVICE, rep.value, size, 0);
    }
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream)
{
    return malloc_async(ptr, size, 0, stream);
}
FLYT_EXPORT cudaError_t cudaMallocAsync_ptsz(void **ptr, size_t size, cudaStream_t stream)
{
    return malloc_async(ptr, size, 0, flyt_ptsz(stream));
}
FLYT_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool,
                                                cudaStream_t stream)
{
    if (pool == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    return malloc_async(ptr, size, (uint64_t)(uintptr_t)pool, stream);
}
FLYT_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t pool,
                                                     cudaStream_t stream)
{
    return cudaMallocFromPoolAsync(ptr, size, pool, flyt_ptsz(stream));
}

FLYT_EXPORT cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream)
{
    if (ptr == NULL)
        return cudaSuccess;
    flyt_req_mem_free_async req = {.dptr = (uint64_t)(uintptr_t)ptr,
                                   .stream = flyt_stream_id(stream)};
    flyt_range_remove(FLYT_RANGE_DEVICE, req.dptr);
    return flyt_set_error(flyt_send_async(FLYT_OP_MEM_FREE_ASYNC, &req, sizeof req, NULL, 0));
}
FLYT_EXPORT cudaError_t cudaFreeAsync_ptsz(void *ptr, cudaStream_t stream)
{
    return cudaFreeAsync(ptr, flyt_ptsz(stream));
}

/* ---- memory pools ---- */

static cudaError_t pool_u64(uint16_t op, const void *req, size_t req_size, uint64_t *out)
{
    flyt_rep_u64 rep = {0};
    cudaError_t err = alloc_call(op, req, req_size, &rep, sizeof rep);
    if (err == cudaSuccess && out)
        *out = rep.value;
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device)
{
    if (pool == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    flyt_req_device req = {.device = device};
    uint64_t id = 0;
    cudaError_t err = pool_u64(FLYT_OP_POOL_DEFAULT, &req, sizeof req, &id);
    *pool = (cudaMemPool_t)(uintptr_t)id;
    return err;
}

FLYT_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *pool, int device)
{
    return cudaDeviceGetDefaultMemPool(pool, device);
}

FLYT_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props)
{
    if (pool == NULL || props == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    if (props->allocType != cudaMemAllocationTypePinned ||
        props->location.type != cudaMemLocationTypeDevice || props->handleTypes != 0)
        return flyt_unsupported("cudaMemPoolCreate (pools other than device-pinned, unshared)");
    flyt_req_pool_create req = {.max_size = props->maxSize, .device = props->location.id};
    uint64_t id = 0;
    cudaError_t err = pool_u64(FLYT_OP_POOL_CREATE, &req, sizeof req, &id);
    *pool = (cudaMemPool_t)(uintptr_t)id;
    return err;
}

FLYT_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool)
{
    flyt_req_handle req = {.handle = (uint64_t)(uintptr_t)pool};
    return flyt_set_error(flyt_call(FLYT_OP_POOL_DESTROY, &req, sizeof req, NULL, 0, NULL));
}

FLYT_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep)
{
    flyt_req_pool_attr req = {.pool = (uint64_t)(uintptr_t)pool, .value = keep};
    return flyt_set_error(flyt_call(FLYT_OP_POOL_TRIM, &req, sizeof req, NULL, 0, NULL));
}

/* The reuse attributes are ints, the byte counts are 64-bit. */
static int pool_attr_is_int(enum cudaMemPoolAttr attr)
{
    return attr == cudaMemPoolReuseFollowEventDependencies ||
           attr == cudaMemPoolReuseAllowOpportunistic ||
           attr == cudaMemPoolReuseAllowInternalDependencies;
}

FLYT_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr,
                                                void *value)
{
    if (value == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    flyt_req_pool_attr req = {.pool = (uint64_t)(uintptr_t)pool, .attr = (int32_t)attr};
    req.value = pool_attr_is_int(attr) ? (uint64_t)*(int *)value : *(uint64_t *)value;
    return flyt_set_error(flyt_call(FLYT_OP_POOL_SET_ATTR, &req, sizeof req, NULL, 0, NULL));
}

FLYT_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr,
                                                void *value)
{
    if (value == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    flyt_req_pool_attr req = {.pool = (uint64_t)(uintptr_t)pool, .attr = (int32_t)attr};
    uint64_t v = 0;
    cudaError_t err = pool_u64(FLYT_OP_POOL_GET_ATTR, &req, sizeof req, &v);
    if (err == cudaSuccess) {
        if (pool_attr_is_int(attr))
            *(int *)value = (int)v;
        else
            *(uint64_t *)value = v;
    }
    return err;
}

/* ---- host memory ---- */

/* On a Unix-socket session pinned memory is a memfd the server maps and pins
 * too, so copies to and from it are DMA by the server with no bytes on the
 * socket. Elsewhere (TCP) it is ordinary page-aligned memory. */
static void *shared_alloc(size_t size, unsigned flags)
{
    size_t len = (size + 4095) & ~(size_t)4095;
    int fd = memfd_create("flyt-pinned", MFD_CLOEXEC);
    if (fd < 0)
        return NULL;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)len) == 0)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    flyt_req_host_map req = {.size = len};
    flyt_rep_u64 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    cudaError_t err = flyt_call_fd(FLYT_OP_HOST_MAP, &req, sizeof req, fd, &sink);
    close(fd);
    if (err != cudaSuccess || rep.value == 0) {
        munmap(p, len);
        return NULL;
    }
    flyt_range_add(FLYT_RANGE_PINNED, (uint64_t)(uintptr_t)p, size, flags);
    flyt_range_set_region((uint64_t)(uintptr_t)p, rep.value);
    return p;
}

FLYT_EXPORT cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    if (ptr == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    cudaError_t err = ready();
    *ptr = NULL;
    if (err != cudaSuccess)
        return flyt_set_error(err);
    if (size == 0)
        return cudaSuccess;
    if (flyt_conn_shares_memory() && (*ptr = shared_alloc(size, flags)) != NULL)
        return cudaSuccess;
    if (posix_memalign(ptr, 4096, size) != 0) {
        *ptr = NULL;
        return flyt_set_error(cudaErrorMemoryAllocation);
    }
    flyt_range_add(FLYT_RANGE_PINNED, (uint64_t)(uintptr_t)*ptr, size, flags);
    return cudaSuccess;
}

FLYT_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

FLYT_EXPORT cudaError_t cudaFreeHost(void *ptr)
{
    if (ptr == NULL)
        return cudaSuccess;
    uint64_t addr = (uint64_t)(uintptr_t)ptr, base = 0, size = 0, offset = 0;
    if (flyt_range_find(addr, &base, &size, NULL) != FLYT_RANGE_PINNED || base != addr)
        return flyt_set_error(cudaErrorInvalidValue);
    uint64_t region = flyt_range_region(addr, 1, &offset);
    flyt_range_remove(FLYT_RANGE_PINNED, addr);
    if (region == 0) {
        free(ptr);
        return cudaSuccess;
    }
    flyt_req_handle req = {.handle = region};
    cudaError_t err = flyt_call(FLYT_OP_HOST_UNMAP, &req, sizeof req, NULL, 0, NULL);
    munmap(ptr, (size + 4095) & ~(uint64_t)4095);
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    if (ptr == NULL || size == 0)
        return flyt_set_error(cudaErrorInvalidValue);
    if (flyt_range_find((uint64_t)(uintptr_t)ptr, NULL, NULL, NULL) != 0)
        return flyt_set_error(cudaErrorHostMemoryAlreadyRegistered);
    flyt_range_add(FLYT_RANGE_REGISTERED, (uint64_t)(uintptr_t)ptr, size, flags);
    return cudaSuccess;
}

FLYT_EXPORT cudaError_t cudaHostUnregister(void *ptr)
{
    if (flyt_range_remove(FLYT_RANGE_REGISTERED, (uint64_t)(uintptr_t)ptr) != 0)
        return flyt_set_error(cudaErrorHostMemoryNotRegistered);
    return cudaSuccess;
}

FLYT_EXPORT cudaError_t cudaHostGetFlags(unsigned int *flags, void *ptr)
{
    unsigned f = 0;
    int kind = flyt_range_find((uint64_t)(uintptr_t)ptr, NULL, NULL, &f);
    if (flags == NULL || (kind != FLYT_RANGE_PINNED && kind != FLYT_RANGE_REGISTERED))
        return flyt_set_error(cudaErrorInvalidValue);
    *flags = f;
    return cudaSuccess;
}

FLYT_EXPORT cudaError_t cudaHostGetDevicePointer(void **dptr, void *host, unsigned int flags)
{
    (void)dptr, (void)host, (void)flags;
    return flyt_unsupported("cudaHostGetDevicePointer (the GPU cannot map this host's memory)");
}

FLYT_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr)
{
    if (attr == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    memset(attr, 0, sizeof *attr);
    int kind = flyt_range_find((uint64_t)(uintptr_t)ptr, NULL, NULL, NULL);
    if (kind == FLYT_RANGE_PINNED || kind == FLYT_RANGE_REGISTERED) {
        attr->type = cudaMemoryTypeHost;
        attr->device = 0;
        attr->hostPointer = (void *)ptr;
        attr->devicePointer = (void *)ptr;
        return cudaSuccess;
    }
    if (kind != FLYT_RANGE_DEVICE) {
        attr->type = cudaMemoryTypeUnregistered;
        attr->device = cudaInvalidDeviceId;
        return flyt_set_error(flyt_connect_once());
    }
    flyt_req_handle req = {.handle = (uint64_t)(uintptr_t)ptr};
    flyt_rep_pointer_attrs rep = {0};
    cudaError_t err = alloc_call(FLYT_OP_POINTER_ATTRS, &req, sizeof req, &rep, sizeof rep);
    if (err == cudaSuccess) {
        attr->type = (enum cudaMemoryType)rep.type;
        attr->device = rep.device;
        attr->devicePointer = (void *)(uintptr_t)rep.device_pointer;
    }
    return flyt_set_error(err);
}

/* ---- 1D copies ---- */

/* A copy between the device and shared pinned memory: no data on the socket,
 * and an asynchronous one is truly asynchronous, as with CUDA's pinned memory. */
static cudaError_t copy_mapped(uint16_t op, uint64_t device, uint64_t region, uint64_t offset,
                               size_t n, cudaStream_t stream, int async)
{
    flyt_req_memcpy_mapped req = {.device = device, .region = region, .offset = offset, .size = n,
                                  .stream = flyt_stream_id(stream)};
    if (async)
        return flyt_send_async(op, &req, sizeof req, NULL, 0);
    return flyt_call(op, &req, sizeof req, NULL, 0, NULL);
}

/* Pageable copies on one machine: the server reads or writes this process's
 * buffer itself. Below this size the data rides in the request (one round
 * trip either way, one syscall fewer). Turned off for good the first time
 * the server cannot reach this process's memory. */
#define PEER_MIN ((size_t)64 << 10)
static int peer_copies_off;

static int peer_copy(uint16_t op, uint64_t dst, uint64_t src, size_t n, cudaStream_t stream,
                     unsigned flags, cudaError_t *err)
{
    if (n < PEER_MIN || __atomic_load_n(&peer_copies_off, __ATOMIC_RELAXED) ||
        !flyt_conn_shares_memory())
        return 0;
    flyt_req_memcpy_peer req = {.dst = dst, .src = src, .size = n,
                                .stream = flyt_stream_id(stream), .flags = flags};
    *err = flyt_call(op, &req, sizeof req, NULL, 0, NULL);
    if (*err == cudaErrorNotPermitted) {
        __atomic_store_n(&peer_copies_off, 1, __ATOMIC_RELAXED);
        return 0;
    }
    return 1;
}

static cudaError_t copy_htod(uint64_t dst, const void *src, size_t n, cudaStream_t stream, int async)
{
    uint64_t offset = 0, region = flyt_range_region((uint64_t)(uintptr_t)src, n, &offset);
    if (region)
        return copy_mapped(FLYT_OP_MEMCPY_HTOD_MAPPED, dst, region, offset, n, stream, async);
    cudaError_t err = cudaSuccess;
    if (peer_copy(FLYT_OP_MEMCPY_HTOD_PEER, dst, (uint64_t)(uintptr_t)src, n, stream,
                  async ? FLYT_PEER_ASYNC : 0, &err))
        return err;
    for (uint64_t off = 0; off < n && err == cudaSuccess;) {
        uint64_t piece = n - off < COPY_PIECE ? n - off : COPY_PIECE;
        int last = off + piece == n;
        flyt_req_memcpy req = {.dst = dst + off, .size = piece, .stream = flyt_stream_id(stream)};
        struct iovec data = {(char *)src + off, piece};
        if (async || !last)
            err = flyt_send_async(FLYT_OP_MEMCPY_HTOD, &req, sizeof req, &data, 1);
        else
            err = flyt_call(FLYT_OP_MEMCPY_HTOD, &req, sizeof req, &data, 1, NULL);
        off += piece;
    }
    return err;
}

/* Through the socket it always waits for the data: the bytes must land in
 * this process. Into shared pinned memory an asynchronous copy returns at once. */
static cudaError_t copy_dtoh(void *dst, uint64_t src, size_t n, cudaStream_t stream, int async)
{
    uint64_t offset = 0, region = flyt_range_region((uint64_t)(uintptr_t)dst, n, &offset);
    if (region)
        return copy_mapped(FLYT_OP_MEMCPY_DTOH_MAPPED, src, region, offset, n, stream, async);
    cudaError_t err = cudaSuccess;
    if (peer_copy(FLYT_OP_MEMCPY_DTOH_PEER, (uint64_t)(uintptr_t)dst, src, n, stream, 0, &err))
        return err;
    for (uint64_t off = 0; off < n && err == cudaSuccess;) {
        uint64_t piece = n - off < COPY_PIECE ? n - off : COPY_PIECE;
        flyt_req_memcpy req = {.src = src + off, .size = piece, .stream = flyt_stream_id(stream)};
        flyt_rep_none rep;
        struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep,
                                       .data = (char *)dst + off, .data_max = piece,
                                       .streamed = 1};
        err = flyt_call(FLYT_OP_MEMCPY_DTOH, &req, sizeof req, NULL, 0, &sink);
        if (err == cudaSuccess && sink.data_got != piece)
            err = cudaErrorUnknown;
        off += piece;
    }
    return err;
}

static cudaError_t copy_dtod(uint64_t dst, uint64_t src, size_t n, cudaStream_t stream, int async)
{
    flyt_req_memcpy req = {.dst = dst, .src = src, .size = n, .stream = flyt_stream_id(stream)};
    if (async)
        return flyt_send_async(FLYT_OP_MEMCPY_DTOD, &req, sizeof req, NULL, 0);
    return flyt_call(FLYT_OP_MEMCPY_DTOD, &req, sizeof req, NULL, 0, NULL);
}

static cudaError_t copy_1d(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                           cudaStream_t stream, int async)
{
    cudaError_t err = ready();
    if (err == cudaSuccess)
        err = resolve_kind(&kind, dst, src);
    if (err != cudaSuccess || n == 0)
        return flyt_set_error(err);
    if ((dst == NULL || src == NULL))
        return flyt_set_error(cudaErrorInvalidValue);
    switch (kind) {
    case cudaMemcpyHostToHost:
        memmove(dst, src, n);
        break;
    case cudaMemcpyHostToDevice:
        err = copy_htod((uint64_t)(uintptr_t)dst, src, n, stream, async);
        break;
    case cudaMemcpyDeviceToHost:
        err = copy_dtoh(dst, (uint64_t)(uintptr_t)src, n, stream, async);
        break;
    default:
        err = copy_dtod((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, n, stream, async);
        break;
    }
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return copy_1d(dst, src, n, kind, NULL, 0);
}
FLYT_EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return copy_1d(dst, src, n, kind, cudaStreamPerThread, 0);
}
FLYT_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
                                        enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return copy_1d(dst, src, n, kind, stream, 1);
}
FLYT_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t n,
                                             enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return copy_1d(dst, src, n, kind, flyt_ptsz(stream), 1);
}

/* One device: peer copies are device-to-device copies. */
FLYT_EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dst_dev, const void *src, int src_dev, size_t n)
{
    if (dst_dev != 0 || src_dev != 0)
        return flyt_set_error(cudaErrorInvalidDevice);
    return copy_1d(dst, src, n, cudaMemcpyDeviceToDevice, NULL, 0);
}
FLYT_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev,
                                            size_t n, cudaStream_t stream)
{
    if (dst_dev != 0 || src_dev != 0)
        return flyt_set_error(cudaErrorInvalidDevice);
    return copy_1d(dst, src, n, cudaMemcpyDeviceToDevice, stream, 1);
}

/* ---- 2D and 3D copies ---- */

/* One side of a 3D copy as the client sees it. */
struct side {
    char *ptr;
    size_t pitch, height; /* height: rows per slice of the allocation */
    size_t x, y, z;
};

static char *side_row(const struct side *s, size_t y, size_t z)
{
    return s->ptr + ((s->z + z) * s->height + s->y + y) * s->pitch + s->x;
}

/* Host-to-host or (un)packing: moves width bytes per row between a side and
 * a packed buffer. to_packed: side -> packed. */
static void host_rows(const struct side *s, char *packed, size_t width, size_t height,
                      size_t depth, int to_packed)
{
    for (size_t z = 0; z < depth; z++)
        for (size_t y = 0; y < height; y++) {
            char *row = side_row(s, y, z);
            char *p = packed + (z * height + y) * width;
            if (to_packed)
                memcpy(p, row, width);
            else
                memcpy(row, p, width);
        }
}

static int side_is_packed(const struct side *s, size_t width, size_t height, size_t depth)
{
    return s->x == 0 && s->y == 0 && s->z == 0 && (s->pitch == width || (height == 1 && depth == 1)) &&
           (s->height == height || depth == 1);
}

static flyt_pitched wire_side(const struct side *s)
{
    return (flyt_pitched){(uint64_t)(uintptr_t)s->ptr, s->pitch, s->height, s->x, s->y, s->z};
}

static cudaError_t copy_3d(struct side dst, struct side src, size_t width, size_t height,
                           size_t depth, enum cudaMemcpyKind kind, cudaStream_t stream, int async)
{
    cudaError_t err = ready();
    if (err == cudaSuccess)
        err = resolve_kind(&kind, dst.ptr + dst.x, src.ptr + src.x);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    if (width == 0 || height == 0 || depth == 0)
        return cudaSuccess;
    if ((height > 1 || depth > 1) && (width > dst.pitch || width > src.pitch))
        return flyt_set_error(cudaErrorInvalidPitchValue);
    uint64_t bytes = (uint64_t)width * height * depth;
    if (kind == cudaMemcpyHostToHost) {
        char *tmp = malloc(bytes);
        if (tmp == NULL)
            return flyt_set_error(cudaErrorMemoryAllocation);
        host_rows(&src, tmp, width, height, depth, 1);
        host_rows(&dst, tmp, width, height, depth, 0);
        free(tmp);
        return cudaSuccess;
    }
    if (bytes > COPY_PIECE)
        return flyt_unsupported("2D/3D copies over 1 GiB");
    flyt_req_memcpy_3d req = {.stream = flyt_stream_id(stream), .dst = wire_side(&dst),
                              .src = wire_side(&src), .width_bytes = width, .height = height,
                              .depth = depth};
    if (kind == cudaMemcpyDeviceToDevice) {
        req.dir = FLYT_DIR_DTOD;
        if (async)
            return flyt_set_error(flyt_send_async(FLYT_OP_MEMCPY_3D, &req, sizeof req, NULL, 0));
        return flyt_set_error(flyt_call(FLYT_OP_MEMCPY_3D, &req, sizeof req, NULL, 0, NULL));
    }
    const struct side *host = kind == cudaMemcpyHostToDevice ? &src : &dst;
    int packed = side_is_packed(host, width, height, depth);
    char *buf = packed ? host->ptr : malloc(bytes);
    if (buf == NULL)
        return flyt_set_error(cudaErrorMemoryAllocation);
    if (kind == cudaMemcpyHostToDevice) {
        req.dir = FLYT_DIR_HTOD;
        req.src = (flyt_pitched){0, width, height, 0, 0, 0};
        if (!packed)
            host_rows(&src, buf, width, height, depth, 1);
        struct iovec data = {buf, bytes};
        err = async ? flyt_send_async(FLYT_OP_MEMCPY_3D, &req, sizeof req, &data, 1)
                    : flyt_call(FLYT_OP_MEMCPY_3D, &req, sizeof req, &data, 1, NULL);
    } else {
        req.dir = FLYT_DIR_DTOH;
        req.dst = (flyt_pitched){0, width, height, 0, 0, 0};
        flyt_rep_none rep;
        struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep, .data = buf,
                                       .data_max = bytes, .streamed = 1};
        err = flyt_call(FLYT_OP_MEMCPY_3D, &req, sizeof req, NULL, 0, &sink);
        if (err == cudaSuccess && sink.data_got != bytes)
            err = cudaErrorUnknown;
        if (err == cudaSuccess && !packed)
            host_rows(&dst, buf, width, height, depth, 0);
    }
    if (!packed)
        free(buf);
    return flyt_set_error(err);
}

static cudaError_t copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                           size_t height, enum cudaMemcpyKind kind, cudaStream_t stream, int async)
{
    if (width > dpitch || width > spitch)
        return flyt_set_error(cudaErrorInvalidPitchValue);
    struct side d = {dst, dpitch, height, 0, 0, 0};
    struct side s = {(char *)src, spitch, height, 0, 0, 0};
    return copy_3d(d, s, width, height, 1, kind, stream, async);
}

FLYT_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                     size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, NULL, 0);
}
FLYT_EXPORT cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch,
                                          size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, cudaStreamPerThread, 0);
}
FLYT_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                          size_t width, size_t height, enum cudaMemcpyKind kind,
                                          cudaStream_t stream)
{
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, stream, 1);
}
FLYT_EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src,
                                               size_t spitch, size_t width, size_t height,
                                               enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, flyt_ptsz(stream), 1);
}

static cudaError_t copy_3d_parms(const struct cudaMemcpy3DParms *p, cudaStream_t stream, int async)
{
    if (p == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    if (p->srcArray || p->dstArray)
        return flyt_unsupported("cudaMemcpy3D with CUDA arrays");
    struct side d = {p->dstPtr.ptr, p->dstPtr.pitch, p->dstPtr.ysize,
                     p->dstPos.x, p->dstPos.y, p->dstPos.z};
    struct side s = {p->srcPtr.ptr, p->srcPtr.pitch, p->srcPtr.ysize,
                     p->srcPos.x, p->srcPos.y, p->srcPos.z};
    return copy_3d(d, s, p->extent.width, p->extent.height, p->extent.depth, p->kind, stream, async);
}

FLYT_EXPORT cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p)
{
    return copy_3d_parms(p, NULL, 0);
}
FLYT_EXPORT cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p)
{
    return copy_3d_parms(p, cudaStreamPerThread, 0);
}
FLYT_EXPORT cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
    return copy_3d_parms(p, stream, 1);
}
FLYT_EXPORT cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
    return copy_3d_parms(p, flyt_ptsz(stream), 1);
}

/* ---- memset ---- */

static cudaError_t memset_3d(void *dst, size_t pitch, size_t slice_pitch, int value, size_t width,
                             size_t height, size_t depth, cudaStream_t stream, int async)
{
    cudaError_t err = ready();
    if (err != cudaSuccess)
        return flyt_set_error(err);
    if (width == 0 || height == 0 || depth == 0)
        return cudaSuccess;
    flyt_req_memset req = {.dst = (uint64_t)(uintptr_t)dst, .pitch = pitch,
                           .slice_pitch = slice_pitch, .width_bytes = width, .height = height,
                           .depth = depth, .stream = flyt_stream_id(stream), .value = value};
    if (async)
        return flyt_set_error(flyt_send_async(FLYT_OP_MEMSET, &req, sizeof req, NULL, 0));
    return flyt_set_error(flyt_call(FLYT_OP_MEMSET, &req, sizeof req, NULL, 0, NULL));
}

FLYT_EXPORT cudaError_t cudaMemset(void *dst, int value, size_t n)
{
    return memset_3d(dst, n, n, value, n, 1, 1, NULL, 0);
}
FLYT_EXPORT cudaError_t cudaMemset_ptds(void *dst, int value, size_t n)
{
    return memset_3d(dst, n, n, value, n, 1, 1, cudaStreamPerThread, 0);
}
FLYT_EXPORT cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t stream)
{
    return memset_3d(dst, n, n, value, n, 1, 1, stream, 1);
}
FLYT_EXPORT cudaError_t cudaMemsetAsync_ptsz(void *dst, int value, size_t n, cudaStream_t stream)
{
    return memset_3d(dst, n, n, value, n, 1, 1, flyt_ptsz(stream), 1);
}
FLYT_EXPORT cudaError_t cudaMemset2D(void *dst, size_t pitch, int value, size_t width, size_t height)
{
    return memset_3d(dst, pitch, pitch * height, value, width, height, 1, NULL, 0);
}
FLYT_EXPORT cudaError_t cudaMemset2D_ptds(void *dst, size_t pitch, int value, size_t width,
                                          size_t height)
{
    return memset_3d(dst, pitch, pitch * height, value, width, height, 1, cudaStreamPerThread, 0);
}
FLYT_EXPORT cudaError_t cudaMemset2DAsync(void *dst, size_t pitch, int value, size_t width,
                                          size_t height, cudaStream_t stream)
{
    return memset_3d(dst, pitch, pitch * height, value, width, height, 1, stream, 1);
}
FLYT_EXPORT cudaError_t cudaMemset2DAsync_ptsz(void *dst, size_t pitch, int value, size_t width,
                                               size_t height, cudaStream_t stream)
{
    return memset_3d(dst, pitch, pitch * height, value, width, height, 1, flyt_ptsz(stream), 1);
}
FLYT_EXPORT cudaError_t cudaMemset3D(struct cudaPitchedPtr p, int value, struct cudaExtent e)
{
    return memset_3d(p.ptr, p.pitch, p.pitch * p.ysize, value, e.width, e.height, e.depth, NULL, 0);
}
FLYT_EXPORT cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr p, int value, struct cudaExtent e)
{
    return memset_3d(p.ptr, p.pitch, p.pitch * p.ysize, value, e.width, e.height, e.depth,
                     cudaStreamPerThread, 0);
}
FLYT_EXPORT cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr p, int value, struct cudaExtent e,
                                          cudaStream_t stream)
{
    return memset_3d(p.ptr, p.pitch, p.pitch * p.ysize, value, e.width, e.height, e.depth, stream, 1);
}
FLYT_EXPORT cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr p, int value,
                                               struct cudaExtent e, cudaStream_t stream)
{
    return memset_3d(p.ptr, p.pitch, p.pitch * p.ysize, value, e.width, e.height, e.depth,
                     flyt_ptsz(stream), 1);
}

/* ---- symbols ---- */

static cudaError_t symbol_range(const void *symbol, size_t offset, size_t n, uint64_t *dptr)
{
    struct flyt_variable *v;
    cudaError_t err = flyt_variable_resolve(symbol, &v);
    if (err != cudaSuccess)
        return err;
    if (offset > v->size || n > v->size - offset)
        return cudaErrorInvalidValue;
    *dptr = v->dptr + offset;
    return cudaSuccess;
}

static cudaError_t to_symbol(const void *symbol, const void *src, size_t n, size_t offset,
                             enum cudaMemcpyKind kind, cudaStream_t stream, int async)
{
    uint64_t dptr = 0;
    cudaError_t err = symbol_range(symbol, offset, n, &dptr);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    if (kind == cudaMemcpyDefault)
        kind = is_device(src) ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice)
        return flyt_set_error(cudaErrorInvalidMemcpyDirection);
    return copy_1d((void *)(uintptr_t)dptr, src, n, kind, stream, async);
}

static cudaError_t from_symbol(void *dst, const void *symbol, size_t n, size_t offset,
                              enum cudaMemcpyKind kind, cudaStream_t stream, int async)
{
    uint64_t dptr = 0;
    cudaError_t err = symbol_range(symbol, offset, n, &dptr);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    if (kind == cudaMemcpyDefault)
        kind = is_device(dst) ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost;
    if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice)
        return flyt_set_error(cudaErrorInvalidMemcpyDirection);
    return copy_1d(dst, (void *)(uintptr_t)dptr, n, kind, stream, async);
}

FLYT_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t n,
                                           size_t offset, enum cudaMemcpyKind kind)
{
    return to_symbol(symbol, src, n, offset, kind, NULL, 0);
}
FLYT_EXPORT cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t n,
                                                size_t offset, enum cudaMemcpyKind kind)
{
    return to_symbol(symbol, src, n, offset, kind, cudaStreamPerThread, 0);
}
FLYT_EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t n,
                                                size_t offset, enum cudaMemcpyKind kind,
                                                cudaStream_t stream)
{
    return to_symbol(symbol, src, n, offset, kind, stream, 1);
}
FLYT_EXPORT cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src, size_t n,
                                                     size_t offset, enum cudaMemcpyKind kind,
                                                     cudaStream_t stream)
{
    return to_symbol(symbol, src, n, offset, kind, flyt_ptsz(stream), 1);
}
FLYT_EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t n, size_t offset,
                                             enum cudaMemcpyKind kind)
{
    return from_symbol(dst, symbol, n, offset, kind, NULL, 0);
}
FLYT_EXPORT cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t n,
                                                  size_t offset, enum cudaMemcpyKind kind)
{
    return from_symbol(dst, symbol, n, offset, kind, cudaStreamPerThread, 0);
}
FLYT_EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t n,
                                                  size_t offset, enum cudaMemcpyKind kind,
                                                  cudaStream_t stream)
{
    return from_symbol(dst, symbol, n, offset, kind, stream, 1);
}
FLYT_EXPORT cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol, size_t n,
                                                       size_t offset, enum cudaMemcpyKind kind,
                                                       cudaStream_t stream)
{
    return from_symbol(dst, symbol, n, offset, kind, flyt_ptsz(stream), 1);
}

FLYT_EXPORT cudaError_t cudaGetSymbolAddress(void **dptr, const void *symbol)
{
    struct flyt_variable *v;
    if (dptr == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    cudaError_t err = flyt_variable_resolve(symbol, &v);
    if (err == cudaSuccess)
        *dptr = (void *)(uintptr_t)v->dptr;
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol)
{
    struct flyt_variable *v;
    if (size == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    cudaError_t err = flyt_variable_resolve(symbol, &v);
    if (err == cudaSuccess)
        *size = (size_t)v->size;
    return flyt_set_error(err);
}

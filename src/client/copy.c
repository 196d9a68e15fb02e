/*
 * Every copy and memset of the driver API.
 *
 * Host-to-device data goes straight from the application's buffer to the
 * socket; device-to-host data is received straight into it. Shared host
 * memory (pinned or registered on a Unix socket, memory.c) moves by the
 * server's DMA with no bytes on the socket; other host memory on one
 * machine is read or written in place by the server (process_vm_*).
 *
 * Each entry point has a _ptds/_ptsz twin where stream 0 means the calling
 * thread's default stream; both go through one function taking per_thread.
 */
#include "client.h"
#include "flyt_mipmap.h"

#include <stdlib.h>
#include <string.h>

/* Largest data one copy message carries; bigger copies are split. */
#define COPY_PIECE ((uint64_t)FLYT_MAX_PAYLOAD - 4096)

/* Pageable copies on one machine: below this size the data rides in the
 * request (one round trip either way, one syscall fewer). Turned off for
 * good the first time the server cannot reach this process's memory. */
#define PEER_MIN ((size_t)64 << 10)
static int peer_copies_off;

/* Device memory, or managed memory: the server has that at the same address,
 * so a copy involving it runs there, in stream order. */
static int is_device(uint64_t p)
{
    int kind = flyt_range_find(p, NULL, NULL, NULL);
    return kind == FLYT_RANGE_DEVICE || kind == FLYT_RANGE_MANAGED;
}

/* An asynchronous request is sent without waiting; a synchronous one waits
 * for the server's answer (the copy or set has finished). */
static CUresult request(uint16_t op, const void *req, size_t req_size, int async)
{
    if (async)
        return flyt_send_async(op, req, req_size, NULL, 0);
    return flyt_call(op, req, req_size, NULL, 0, NULL);
}

/* A copy between the device and shared host memory: no data on the socket,
 * and an asynchronous one is truly asynchronous, as with pinned memory. */
static CUresult copy_mapped(uint16_t op, uint64_t device, uint64_t region, uint64_t offset,
                            size_t n, uint64_t stream, int async)
{
    flyt_req_memcpy_mapped req = {.device = device, .region = region, .offset = offset, .size = n,
                                  .stream = stream};
    return request(op, &req, sizeof req, async);
}

static int peer_copy(uint16_t op, uint64_t dst, uint64_t src, size_t n, uint64_t stream,
                     unsigned flags, CUresult *err)
{
    if (n < PEER_MIN || __atomic_load_n(&peer_copies_off, __ATOMIC_RELAXED) ||
        !flyt_conn_shares_memory())
        return 0;
    flyt_req_memcpy_peer req = {.dst = dst, .src = src, .size = n, .stream = stream,
                                .flags = flags};
    *err = flyt_call(op, &req, sizeof req, NULL, 0, NULL);
    if (*err == CUDA_ERROR_NOT_PERMITTED) {
        __atomic_store_n(&peer_copies_off, 1, __ATOMIC_RELAXED);
        return 0;
    }
    return 1;
}

static CUresult copy_htod(uint64_t dst, const void *src, size_t n, uint64_t stream, int async)
{
    uint64_t offset = 0, region = flyt_range_region((uint64_t)(uintptr_t)src, n, &offset);
    if (region)
        return copy_mapped(FLYT_OP_MEMCPY_HTOD_MAPPED, dst, region, offset, n, stream, async);
    /* the bytes are read now: after the host functions the stream reaches
     * first, as CUDA reads pinned memory when the stream gets there */
    if (flyt_host_funcs_pending()) { /* else no lookup: every pageable copy passes here */
        int kind = flyt_range_find((uint64_t)(uintptr_t)src, NULL, NULL, NULL);
        if (kind == FLYT_RANGE_PINNED || kind == FLYT_RANGE_REGISTERED)
            flyt_host_funcs_wait(stream);
    }
    CUresult err = CUDA_SUCCESS;
    if (peer_copy(FLYT_OP_MEMCPY_HTOD_PEER, dst, (uint64_t)(uintptr_t)src, n, stream,
                  async ? FLYT_PEER_ASYNC : 0, &err))
        return err;
    for (uint64_t off = 0; off < n && err == CUDA_SUCCESS;) {
        uint64_t piece = n - off < COPY_PIECE ? n - off : COPY_PIECE;
        int last = off + piece == n;
        flyt_req_memcpy req = {.dst = dst + off, .size = piece, .stream = stream};
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
 * this process. Into shared host memory an asynchronous copy returns at once. */
static CUresult copy_dtoh(void *dst, uint64_t src, size_t n, uint64_t stream, int async)
{
    uint64_t offset = 0, region = flyt_range_region((uint64_t)(uintptr_t)dst, n, &offset);
    if (region)
        return copy_mapped(FLYT_OP_MEMCPY_DTOH_MAPPED, src, region, offset, n, stream, async);
    CUresult err = CUDA_SUCCESS;
    if (peer_copy(FLYT_OP_MEMCPY_DTOH_PEER, (uint64_t)(uintptr_t)dst, src, n, stream, 0, &err))
        return err;
    for (uint64_t off = 0; off < n && err == CUDA_SUCCESS;) {
        uint64_t piece = n - off < COPY_PIECE ? n - off : COPY_PIECE;
        flyt_req_memcpy req = {.src = src + off, .size = piece, .stream = stream};
        flyt_rep_none rep;
        struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep,
                                       .data = (char *)dst + off, .data_max = piece,
                                       .streamed = 1};
        err = flyt_call(FLYT_OP_MEMCPY_DTOH, &req, sizeof req, NULL, 0, &sink);
        if (err == CUDA_SUCCESS && sink.data_got != piece)
            err = CUDA_ERROR_UNKNOWN;
        off += piece;
    }
    return err;
}

static CUresult copy_dtod(uint64_t dst, uint64_t src, size_t n, uint64_t stream, int async)
{
    flyt_req_memcpy req = {.dst = dst, .src = src, .size = n, .stream = stream};
    return request(FLYT_OP_MEMCPY_DTOD, &req, sizeof req, async);
}

CUresult flyt_copy_plain(int to_device, uint64_t dev, void *host, size_t n)
{
    uint64_t legacy = flyt_stream_wire(NULL, 0);
    return to_device ? copy_htod(dev, host, n, legacy, 0) : copy_dtoh(host, dev, n, legacy, 0);
}

CUresult flyt_copy_plain_queued(uint64_t dev, const void *host, size_t n)
{
    return copy_htod(dev, host, n, flyt_stream_wire(NULL, 0), 1);
}

enum dir { HTOH, HTOD, DTOH, DTOD };

static CUresult copy_1d(enum dir dir, uint64_t dst, uint64_t src, size_t n, CUstream stream,
                        int per_thread, int async)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    if (dst == 0 || src == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t wire = flyt_stream_wire(stream, per_thread);
    /* host memory kept equal with device memory between machines (managed,
     * mapped): its device copy, in stream order */
    if ((dir == HTOD && flyt_mremote_device(src, n, &src)) ||
        (dir == DTOH && flyt_mremote_device(dst, n, &dst)))
        dir = DTOD;
    switch (dir) {
    case HTOH:
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
        return CUDA_SUCCESS;
    case HTOD:
        return copy_htod(dst, (const void *)(uintptr_t)src, n, wire, async);
    case DTOH:
        return copy_dtoh((void *)(uintptr_t)dst, src, n, wire, async);
    default:
        return copy_dtod(dst, src, n, wire, async);
    }
}

/* Unified addressing: the direction follows from where the pointers lie. */
static enum dir unified_dir(uint64_t dst, uint64_t src)
{
    int d = is_device(dst), s = is_device(src);
    return s ? (d ? DTOD : DTOH) : (d ? HTOD : HTOH);
}

#define U64(p) ((uint64_t)(uintptr_t)(p))

FLYT_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy_1d(unified_dir(dst, src), dst, src, n, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy_1d(unified_dir(dst, src), dst, src, n, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_1d(unified_dir(dst, src), dst, src, n, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_1d(unified_dir(dst, src), dst, src, n, s, 1, 1);
}
FLYT_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    return copy_1d(HTOD, dst, U64(src), n, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
    return copy_1d(HTOD, dst, U64(src), n, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return copy_1d(HTOD, dst, U64(src), n, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return copy_1d(HTOD, dst, U64(src), n, s, 1, 1);
}
FLYT_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    return copy_1d(DTOH, U64(dst), src, n, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
    return copy_1d(DTOH, U64(dst), src, n, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_1d(DTOH, U64(dst), src, n, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_1d(DTOH, U64(dst), src, n, s, 1, 1);
}
FLYT_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy_1d(DTOD, dst, src, n, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy_1d(DTOD, dst, src, n, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_1d(DTOD, dst, src, n, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_1d(DTOD, dst, src, n, s, 1, 1);
}

/* A session has one device: a peer copy is a copy within it. */
static CUresult peer_ctxs(CUcontext a, CUcontext b)
{
    return flyt_ctx_valid(a) && flyt_ctx_valid(b) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
FLYT_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                                  size_t n)
{
    CUresult r = peer_ctxs(dctx, sctx);
    return r != CUDA_SUCCESS ? r : copy_1d(DTOD, dst, src, n, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src,
                                       CUcontext sctx, size_t n)
{
    CUresult r = peer_ctxs(dctx, sctx);
    return r != CUDA_SUCCESS ? r : copy_1d(DTOD, dst, src, n, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src,
                                       CUcontext sctx, size_t n, CUstream s)
{
    CUresult r = peer_ctxs(dctx, sctx);
    return r != CUDA_SUCCESS ? r : copy_1d(DTOD, dst, src, n, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src,
                                            CUcontext sctx, size_t n, CUstream s)
{
    CUresult r = peer_ctxs(dctx, sctx);
    return r != CUDA_SUCCESS ? r : copy_1d(DTOD, dst, src, n, s, 1, 1);
}

/* ---- 2D and 3D copies ---- */

/* One side of a 3D copy as the client sees it. */
enum { SIDE_HOST = 0, SIDE_DEVICE = 1, SIDE_ARRAY = 2 };
struct side {
    char *ptr;
    size_t pitch, height; /* height: rows per slice of the allocation */
    size_t x, y, z;
    int device;           /* SIDE_* */
    uint64_t array;       /* SIDE_ARRAY: the server's id */
};

static char *side_row(const struct side *s, size_t y, size_t z)
{
    return s->ptr + ((s->z + z) * s->height + s->y + y) * s->pitch + s->x;
}

/* Moves width bytes per row between a host side and a packed buffer. */
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
    return s->x == 0 && s->y == 0 && s->z == 0 &&
           (s->pitch == width || (height == 1 && depth == 1)) && (s->height == height || depth == 1);
}

static flyt_pitched wire_side(const struct side *s)
{
    return (flyt_pitched){U64(s->ptr), s->pitch, s->height, s->x, s->y, s->z};
}

static CUresult copy_3d_host(const struct side *dst, const struct side *src, size_t width,
                             size_t height, size_t depth)
{
    char *tmp = malloc((uint64_t)width * height * depth);
    if (tmp == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    host_rows(src, tmp, width, height, depth, 1);
    host_rows(dst, tmp, width, height, depth, 0);
    free(tmp);
    return CUDA_SUCCESS;
}

/* Sends op with the host side's box packed as its data. */
static CUresult send_packed(uint16_t op, const void *req, size_t req_size, const struct side *host,
                            size_t width, size_t height, size_t depth, int async)
{
    uint64_t bytes = (uint64_t)width * height * depth;
    int packed = side_is_packed(host, width, height, depth);
    char *buf = packed ? host->ptr : malloc(bytes);
    if (buf == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!packed)
        host_rows(host, buf, width, height, depth, 1);
    struct iovec data = {buf, bytes};
    CUresult r = async ? flyt_send_async(op, req, req_size, &data, 1)
                       : flyt_call(op, req, req_size, &data, 1, NULL);
    if (!packed)
        free(buf);
    return r;
}

/* Sends op and receives the box, packed, into the host side. */
static CUresult recv_packed(uint16_t op, const void *req, size_t req_size, const struct side *host,
                            size_t width, size_t height, size_t depth)
{
    uint64_t bytes = (uint64_t)width * height * depth;
    int packed = side_is_packed(host, width, height, depth);
    char *buf = packed ? host->ptr : malloc(bytes);
    if (buf == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    flyt_rep_none rep;
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep, .data = buf,
                                   .data_max = bytes, .streamed = 1};
    CUresult r = flyt_call(op, req, req_size, NULL, 0, &sink);
    if (r == CUDA_SUCCESS && sink.data_got != bytes)
        r = CUDA_ERROR_UNKNOWN;
    if (r == CUDA_SUCCESS && !packed)
        host_rows(host, buf, width, height, depth, 0);
    if (!packed)
        free(buf);
    return r;
}

/* Bytes from a host side's base to just past the copy's last byte. */
static uint64_t host_span(const struct side *s, size_t width, size_t height, size_t depth)
{
    return ((uint64_t)(s->z + depth - 1) * s->height + s->y + height - 1) * s->pitch + s->x + width;
}

/* A side of ARRAY_COPY: host memory shared with the server goes by DMA,
 * other host memory packed through the socket. */
static flyt_copy_side array_copy_side(const struct side *s, size_t width, size_t height,
                                      size_t depth)
{
    flyt_copy_side w = {.pitch = s->pitch, .height = s->height, .x = s->x, .y = s->y, .z = s->z};
    uint64_t offset = 0, region = 0;
    if (s->device == SIDE_ARRAY) {
        w.kind = FLYT_SIDE_ARRAY;
        w.handle = s->array;
    } else if (s->device == SIDE_DEVICE) {
        w.kind = FLYT_SIDE_DEVICE;
        w.handle = U64(s->ptr);
    } else if ((region = flyt_range_region(U64(s->ptr), host_span(s, width, height, depth),
                                           &offset)) != 0) {
        w.kind = FLYT_SIDE_REGION;
        w.handle = region;
        w.offset = offset;
    } else {
        w = (flyt_copy_side){.kind = FLYT_SIDE_PACKED, .pitch = width, .height = height};
    }
    return w;
}

static CUresult copy_3d_array(const struct side *dst, const struct side *src, size_t width,
                              size_t height, size_t depth, uint64_t stream, int async)
{
    flyt_req_array_copy req = {.stream = stream,
                               .dst = array_copy_side(dst, width, height, depth),
                               .src = array_copy_side(src, width, height, depth),
                               .width_bytes = width, .height = height, .depth = depth};
    if (req.src.kind == FLYT_SIDE_PACKED)
        return send_packed(FLYT_OP_ARRAY_COPY, &req, sizeof req, src, width, height, depth, async);
    if (req.dst.kind == FLYT_SIDE_PACKED)
        return recv_packed(FLYT_OP_ARRAY_COPY, &req, sizeof req, dst, width, height, depth);
    return request(FLYT_OP_ARRAY_COPY, &req, sizeof req, async);
}

static int pitch_too_small(const struct side *s, size_t width)
{
    return s->device != SIDE_ARRAY && width > s->pitch;
}

static CUresult copy_3d(struct side dst, struct side src, size_t width, size_t height, size_t depth,
                        CUstream stream, int per_thread, int async)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS || width == 0 || height == 0 || depth == 0)
        return r;
    if ((height > 1 || depth > 1) && (pitch_too_small(&dst, width) || pitch_too_small(&src, width)))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = (uint64_t)width * height * depth;
    if (!dst.device && !src.device)
        return copy_3d_host(&dst, &src, width, height, depth);
    if (bytes > COPY_PIECE)
        return flyt_unsupported_why("cuMemcpy2D/3D", "copies over 1 GiB");
    uint64_t wire = flyt_stream_wire(stream, per_thread);
    if (dst.device == SIDE_ARRAY || src.device == SIDE_ARRAY)
        return copy_3d_array(&dst, &src, width, height, depth, wire, async);
    flyt_req_memcpy_3d req = {.stream = wire, .dst = wire_side(&dst), .src = wire_side(&src),
                              .width_bytes = width, .height = height, .depth = depth};
    if (dst.device && src.device) {
        req.dir = FLYT_DIR_DTOD;
        return request(FLYT_OP_MEMCPY_3D, &req, sizeof req, async);
    }
    if (dst.device) {
        req.dir = FLYT_DIR_HTOD;
        req.src = (flyt_pitched){0, width, height, 0, 0, 0};
        return send_packed(FLYT_OP_MEMCPY_3D, &req, sizeof req, &src, width, height, depth, async);
    }
    req.dir = FLYT_DIR_DTOH;
    req.dst = (flyt_pitched){0, width, height, 0, 0, 0};
    return recv_packed(FLYT_OP_MEMCPY_3D, &req, sizeof req, &dst, width, height, depth);
}

/* A side of a driver copy descriptor. */
static CUresult make_side(struct side *s, CUmemorytype type, const void *host, CUdeviceptr dev,
                          CUarray array, size_t pitch, size_t height, size_t x, size_t y, size_t z)
{
    *s = (struct side){.pitch = pitch, .height = height, .x = x, .y = y, .z = z};
    switch (type) {
    case CU_MEMORYTYPE_HOST:
        s->ptr = (char *)host;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
        s->ptr = (char *)(uintptr_t)dev;
        s->device = 1;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED:
        s->ptr = (char *)(uintptr_t)dev;
        s->device = is_device(dev);
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:
        s->device = SIDE_ARRAY;
        return flyt_array_wire(array, &s->array);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult copy_2d_desc(const CUDA_MEMCPY2D *p, CUstream stream, int per_thread, int async)
{
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct side d, s;
    CUresult r = make_side(&d, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray,
                           p->dstPitch, p->Height, p->dstXInBytes, p->dstY, 0);
    if (r == CUDA_SUCCESS)
        r = make_side(&s, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch,
                      p->Height, p->srcXInBytes, p->srcY, 0);
    if (r != CUDA_SUCCESS)
        return r;
    return copy_3d(d, s, p->WidthInBytes, p->Height, 1, stream, per_thread, async);
}

FLYT_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { return copy_2d_desc(p, NULL, 0, 0); }
FLYT_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p) { return copy_2d_desc(p, NULL, 1, 0); }
FLYT_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { return copy_2d_desc(p, NULL, 0, 0); }
FLYT_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p)
{
    return copy_2d_desc(p, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s)
{
    return copy_2d_desc(p, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream s)
{
    return copy_2d_desc(p, s, 1, 1);
}

static CUresult copy_3d_desc(const CUDA_MEMCPY3D *p, CUstream stream, int per_thread, int async)
{
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct side d, s;
    CUresult r = make_side(&d, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray,
                           p->dstPitch, p->dstHeight, p->dstXInBytes, p->dstY, p->dstZ);
    if (r == CUDA_SUCCESS)
        r = make_side(&s, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch,
                      p->srcHeight, p->srcXInBytes, p->srcY, p->srcZ);
    if (r != CUDA_SUCCESS)
        return r;
    return copy_3d(d, s, p->WidthInBytes, p->Height, p->Depth, stream, per_thread, async);
}

FLYT_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { return copy_3d_desc(p, NULL, 0, 0); }
FLYT_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p) { return copy_3d_desc(p, NULL, 1, 0); }
FLYT_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s)
{
    return copy_3d_desc(p, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream s)
{
    return copy_3d_desc(p, s, 1, 1);
}

/* A peer 3D copy names each side's context; within the session's one device
 * it is a plain 3D copy (an array side's context is ignored, as in CUDA). */
static CUresult copy_3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream stream, int per_thread, int async)
{
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((p->srcMemoryType != CU_MEMORYTYPE_ARRAY && !flyt_ctx_valid(p->srcContext)) ||
        (p->dstMemoryType != CU_MEMORYTYPE_ARRAY && !flyt_ctx_valid(p->dstContext)))
        return CUDA_ERROR_INVALID_CONTEXT;
    CUDA_MEMCPY3D c = {
        .srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcZ = p->srcZ, .srcLOD = p->srcLOD,
        .srcMemoryType = p->srcMemoryType, .srcHost = p->srcHost, .srcDevice = p->srcDevice,
        .srcArray = p->srcArray, .srcPitch = p->srcPitch, .srcHeight = p->srcHeight,
        .dstXInBytes = p->dstXInBytes, .dstY = p->dstY, .dstZ = p->dstZ, .dstLOD = p->dstLOD,
        .dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost, .dstDevice = p->dstDevice,
        .dstArray = p->dstArray, .dstPitch = p->dstPitch, .dstHeight = p->dstHeight,
        .WidthInBytes = p->WidthInBytes, .Height = p->Height, .Depth = p->Depth,
    };
    return copy_3d_desc(&c, stream, per_thread, async);
}

FLYT_EXPORT CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p) { return copy_3d_peer(p, NULL, 0, 0); }
FLYT_EXPORT CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *p)
{
    return copy_3d_peer(p, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s)
{
    return copy_3d_peer(p, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *p, CUstream s)
{
    return copy_3d_peer(p, s, 1, 1);
}

/* ---- batches of copies ---- */

/* attrs[k] applies to the copies from idxs[k] to the next index (CUDA's rules:
 * the first index 0, increasing, below count; a valid source access order
 * each). *during_call: whether some copy must have read its source before
 * the call returns. */
int flyt_batch_firsts_ok(const size_t *first, size_t n, size_t count)
{
    if (first == NULL || n == 0 || n > count || first[0] != 0)
        return 0;
    for (size_t k = 1; k < n; k++)
        if (first[k] <= first[k - 1] || first[k] >= count)
            return 0;
    return 1;
}

/* A valid source access order; *during_call set when it is DURING_API_CALL. */
static CUresult access_order_check(CUmemcpySrcAccessOrder order, int *during_call)
{
    switch (order) {
    case CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL: *during_call = 1; /* fall through */
    case CU_MEMCPY_SRC_ACCESS_ORDER_STREAM:
    case CU_MEMCPY_SRC_ACCESS_ORDER_ANY: return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult batch_attrs_check(const CUmemcpyAttributes *attrs, const size_t *idxs, size_t num,
                                  size_t count, int *during_call)
{
    if (attrs == NULL || !flyt_batch_firsts_ok(idxs, num, count))
        return CUDA_ERROR_INVALID_VALUE;
    *during_call = 0;
    CUresult r = CUDA_SUCCESS;
    for (size_t k = 0; k < num && r == CUDA_SUCCESS; k++)
        r = access_order_check(attrs[k].srcAccessOrder, during_call);
    return r;
}

/* The batch as one stream-ordered copy after another (CUDA promises no order
 * within a batch, so this is one of its orders); when a source may only be
 * read during the call, the call waits for the stream. The location hints
 * and the overlap flag are hints: ignored. */
static CUresult copy_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                           CUmemcpyAttributes *attrs, size_t *idxs, size_t num, size_t *fail_idx,
                           CUstream stream, int per_thread)
{
    if (fail_idx != NULL)
        *fail_idx = SIZE_MAX;
    if (count == 0 || dsts == NULL || srcs == NULL || sizes == NULL ||
        stream == CU_STREAM_LEGACY || (stream == NULL && !per_thread))
        return CUDA_ERROR_INVALID_VALUE; /* never the legacy stream */
    int during_call = 0;
    CUresult r = batch_attrs_check(attrs, idxs, num, count, &during_call);
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++) {
        r = copy_1d(unified_dir(dsts[i], srcs[i]), dsts[i], srcs[i], sizes[i], stream, per_thread, 1);
        if (r != CUDA_SUCCESS && fail_idx != NULL)
            *fail_idx = i;
    }
    if (r == CUDA_SUCCESS && during_call)
        r = per_thread ? cuStreamSynchronize_ptsz(stream) : cuStreamSynchronize(stream);
    return r;
}

FLYT_EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                           size_t count, CUmemcpyAttributes *attrs,
                                           size_t *idxs, size_t num, CUstream s)
{
    return copy_batch(dsts, srcs, sizes, count, attrs, idxs, num, NULL, s, 0);
}
FLYT_EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                                size_t count, CUmemcpyAttributes *attrs,
                                                size_t *idxs, size_t num, CUstream s)
{
    return copy_batch(dsts, srcs, sizes, count, attrs, idxs, num, NULL, s, 1);
}
/* CUDA 12.8's ABI, which also names the copy that failed */
FLYT_EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                        size_t count, CUmemcpyAttributes *attrs, size_t *idxs,
                                        size_t num, size_t *fail_idx, CUstream s)
{
    return copy_batch(dsts, srcs, sizes, count, attrs, idxs, num, fail_idx, s, 0);
}
FLYT_EXPORT CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                             size_t count, CUmemcpyAttributes *attrs, size_t *idxs,
                                             size_t num, size_t *fail_idx, CUstream s)
{
    return copy_batch(dsts, srcs, sizes, count, attrs, idxs, num, fail_idx, s, 1);
}

/* ---- batches of 3D copies ----
 * An operand is a pointer (rows of rowLength elements, layers of
 * layerHeight rows; 0 packs them to the extent) or a CUDA array at an
 * element offset. An element is a byte between pointers, else the array's
 * (two arrays' must match). Each copy goes as the 3D copy it describes, in
 * the batch's order, as copy_batch's do. */

static CUresult operand_side(struct side *s, const CUmemcpy3DOperand *o, const CUextent3D *e,
                             size_t elem)
{
    switch (o->type) {
    case CU_MEMCPY_OPERAND_TYPE_POINTER: {
        size_t row = o->op.ptr.rowLength, layer = o->op.ptr.layerHeight;
        if ((row != 0 && row < e->width) || (layer != 0 && layer < e->height))
            return CUDA_ERROR_INVALID_VALUE;
        return make_side(s, CU_MEMORYTYPE_UNIFIED, NULL, o->op.ptr.ptr, NULL,
                         (row ? row : e->width) * elem, layer ? layer : e->height, 0, 0, 0);
    }
    case CU_MEMCPY_OPERAND_TYPE_ARRAY:
        return make_side(s, CU_MEMORYTYPE_ARRAY, NULL, 0, o->op.array.array, 0, 0,
                         o->op.array.offset.x * elem, o->op.array.offset.y, o->op.array.offset.z);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* The bytes of one element of op's copy. */
static CUresult operand_elem(const CUDA_MEMCPY3D_BATCH_OP *op, size_t *elem)
{
    const CUmemcpy3DOperand *sides[2] = {&op->src, &op->dst};
    size_t got[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        if (sides[i]->type != CU_MEMCPY_OPERAND_TYPE_ARRAY)
            continue;
        CUDA_ARRAY3D_DESCRIPTOR d;
        CUresult r = cuArray3DGetDescriptor_v2(&d, sides[i]->op.array.array);
        if (r != CUDA_SUCCESS)
            return r;
        got[i] = flyt_array_elem_bytes(d.Format, d.NumChannels);
        if (got[i] == 0) /* block-compressed and planar formats */
            return flyt_unsupported_why("cuMemcpy3DBatchAsync", "arrays of compressed or planar formats");
    }
    if (got[0] && got[1] && got[0] != got[1])
        return CUDA_ERROR_INVALID_VALUE;
    *elem = got[0] ? got[0] : got[1] ? got[1] : 1;
    return CUDA_SUCCESS;
}

static CUresult batch_op_check(const CUDA_MEMCPY3D_BATCH_OP *op, int *during_call)
{
    const CUextent3D *e = &op->extent;
    if (e->width == 0 || e->height == 0 || e->depth == 0 ||
        (op->flags & ~(unsigned)CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE))
        return CUDA_ERROR_INVALID_VALUE;
    return access_order_check(op->srcAccessOrder, during_call);
}

static CUresult copy_3d_batch(size_t count, const CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail_idx,
                              unsigned long long flags, CUstream stream, int per_thread)
{
    if (fail_idx != NULL)
        *fail_idx = SIZE_MAX;
    if (count == 0 || ops == NULL || flags != 0 || stream == CU_STREAM_LEGACY ||
        (stream == NULL && !per_thread))
        return CUDA_ERROR_INVALID_VALUE; /* never the legacy stream */
    int during_call = 0;
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++)
        if ((r = batch_op_check(&ops[i], &during_call)) != CUDA_SUCCESS && fail_idx != NULL)
            *fail_idx = i;
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++) {
        const CUDA_MEMCPY3D_BATCH_OP *op = &ops[i];
        size_t elem = 1;
        struct side d, s;
        r = operand_elem(op, &elem);
        if (r == CUDA_SUCCESS)
            r = operand_side(&d, &op->dst, &op->extent, elem);
        if (r == CUDA_SUCCESS)
            r = operand_side(&s, &op->src, &op->extent, elem);
        if (r == CUDA_SUCCESS)
            r = copy_3d(d, s, op->extent.width * elem, op->extent.height, op->extent.depth, stream,
                        per_thread, 1);
        if (r != CUDA_SUCCESS && fail_idx != NULL)
            *fail_idx = i;
    }
    if (r == CUDA_SUCCESS && during_call)
        r = per_thread ? cuStreamSynchronize_ptsz(stream) : cuStreamSynchronize(stream);
    return r;
}

FLYT_EXPORT CUresult cuMemcpy3DBatchAsync_v2(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops,
                                             unsigned long long flags, CUstream s)
{
    return copy_3d_batch(count, ops, NULL, flags, s, 0);
}
FLYT_EXPORT CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops,
                                                  unsigned long long flags, CUstream s)
{
    return copy_3d_batch(count, ops, NULL, flags, s, 1);
}
/* CUDA 12.8's ABI, which also names the copy that failed */
FLYT_EXPORT CUresult cuMemcpy3DBatchAsync(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail_idx,
                                          unsigned long long flags, CUstream s)
{
    return copy_3d_batch(count, ops, fail_idx, flags, s, 0);
}
FLYT_EXPORT CUresult cuMemcpy3DBatchAsync_ptsz(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops,
                                               size_t *fail_idx, unsigned long long flags, CUstream s)
{
    return copy_3d_batch(count, ops, fail_idx, flags, s, 1);
}

/* ---- 1D copies to and from arrays (byte offsets into the array) ---- */

static struct side linear_side(uint64_t p, size_t n, int device)
{
    return (struct side){.ptr = (char *)(uintptr_t)p, .pitch = n, .height = 1, .device = device};
}

static CUresult array_at(struct side *s, CUarray a, size_t offset)
{
    return make_side(s, CU_MEMORYTYPE_ARRAY, NULL, 0, a, 0, 1, offset, 0, 0);
}

static CUresult to_array(CUarray dst, size_t off, struct side src, size_t n, CUstream stream,
                         int per_thread, int async)
{
    struct side d;
    CUresult r = array_at(&d, dst, off);
    return r != CUDA_SUCCESS ? r : copy_3d(d, src, n, 1, 1, stream, per_thread, async);
}

static CUresult from_array(struct side dst, CUarray src, size_t off, size_t n, CUstream stream,
                           int per_thread, int async)
{
    struct side s;
    CUresult r = array_at(&s, src, off);
    return r != CUDA_SUCCESS ? r : copy_3d(dst, s, n, 1, 1, stream, per_thread, async);
}

static CUresult array_to_array(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n,
                               int per_thread)
{
    struct side s;
    CUresult r = array_at(&s, src, soff);
    return r != CUDA_SUCCESS ? r : to_array(dst, doff, s, n, NULL, per_thread, 0);
}

#define HTOA(dst, off, src, n, s, pt, as) \
    to_array(dst, off, linear_side(U64(src), n, SIDE_HOST), n, s, pt, as)
#define ATOH(dst, src, off, n, s, pt, as) \
    from_array(linear_side(U64(dst), n, SIDE_HOST), src, off, n, s, pt, as)

FLYT_EXPORT CUresult cuMemcpyHtoA_v2(CUarray dst, size_t off, const void *src, size_t n)
{
    return HTOA(dst, off, src, n, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemcpyHtoA_v2_ptds(CUarray dst, size_t off, const void *src, size_t n)
{
    return HTOA(dst, off, src, n, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void *src, size_t n,
                                          CUstream s)
{
    return HTOA(dst, off, src, n, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dst, size_t off, const void *src, size_t n,
                                               CUstream s)
{
    return HTOA(dst, off, src, n, s, 1, 1);
}
FLYT_EXPORT CUresult cuMemcpyAtoH_v2(void *dst, CUarray src, size_t off, size_t n)
{
    return ATOH(dst, src, off, n, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemcpyAtoH_v2_ptds(void *dst, CUarray src, size_t off, size_t n)
{
    return ATOH(dst, src, off, n, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemcpyAtoHAsync_v2(void *dst, CUarray src, size_t off, size_t n, CUstream s)
{
    return ATOH(dst, src, off, n, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemcpyAtoHAsync_v2_ptsz(void *dst, CUarray src, size_t off, size_t n,
                                               CUstream s)
{
    return ATOH(dst, src, off, n, s, 1, 1);
}
FLYT_EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
    return from_array(linear_side(dst, n, SIDE_DEVICE), src, off, n, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
    return from_array(linear_side(dst, n, SIDE_DEVICE), src, off, n, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
    return to_array(dst, off, linear_side(src, n, SIDE_DEVICE), n, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
    return to_array(dst, off, linear_side(src, n, SIDE_DEVICE), n, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{
    return array_to_array(dst, doff, src, soff, n, 0);
}
FLYT_EXPORT CUresult cuMemcpyAtoA_v2_ptds(CUarray dst, size_t doff, CUarray src, size_t soff,
                                          size_t n)
{
    return array_to_array(dst, doff, src, soff, n, 1);
}

/* ---- memset: 8/16/32-bit values, 1D and 2D ---- */

static CUresult memset_2d(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem,
                          size_t width, size_t height, CUstream stream, int per_thread, int async)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS || width == 0 || height == 0)
        return r;
    uint64_t width_bytes = (uint64_t)width * elem;
    if (height > 1 && pitch < width_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_memset req = {.dst = (uint64_t)dst, .pitch = height > 1 ? pitch : width_bytes,
                           .slice_pitch = (height > 1 ? pitch : width_bytes) * height,
                           .width_bytes = width_bytes, .height = height, .depth = 1,
                           .stream = flyt_stream_wire(stream, per_thread), .value = value,
                           .elem_size = elem};
    return request(FLYT_OP_MEMSET, &req, sizeof req, async);
}

FLYT_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
    return memset_2d(d, 0, v, 1, n, 1, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n)
{
    return memset_2d(d, 0, v, 1, n, 1, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n)
{
    return memset_2d(d, 0, v, 2, n, 1, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n)
{
    return memset_2d(d, 0, v, 2, n, 1, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n)
{
    return memset_2d(d, 0, v, 4, n, 1, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n)
{
    return memset_2d(d, 0, v, 4, n, 1, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    return memset_2d(d, 0, v, 1, n, 1, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    return memset_2d(d, 0, v, 1, n, 1, s, 1, 1);
}
FLYT_EXPORT CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    return memset_2d(d, 0, v, 2, n, 1, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    return memset_2d(d, 0, v, 2, n, 1, s, 1, 1);
}
FLYT_EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    return memset_2d(d, 0, v, 4, n, 1, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    return memset_2d(d, 0, v, 4, n, 1, s, 1, 1);
}
FLYT_EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h)
{
    return memset_2d(d, pitch, v, 1, w, h, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t pitch, unsigned char v, size_t w,
                                          size_t h)
{
    return memset_2d(d, pitch, v, 1, w, h, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t pitch, unsigned short v, size_t w,
                                      size_t h)
{
    return memset_2d(d, pitch, v, 2, w, h, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr d, size_t pitch, unsigned short v, size_t w,
                                           size_t h)
{
    return memset_2d(d, pitch, v, 2, w, h, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h)
{
    return memset_2d(d, pitch, v, 4, w, h, NULL, 0, 0);
}
FLYT_EXPORT CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr d, size_t pitch, unsigned int v, size_t w,
                                           size_t h)
{
    return memset_2d(d, pitch, v, 4, w, h, NULL, 1, 0);
}
FLYT_EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w,
                                       size_t h, CUstream s)
{
    return memset_2d(d, pitch, v, 1, w, h, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr d, size_t pitch, unsigned char v, size_t w,
                                            size_t h, CUstream s)
{
    return memset_2d(d, pitch, v, 1, w, h, s, 1, 1);
}
FLYT_EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w,
                                        size_t h, CUstream s)
{
    return memset_2d(d, pitch, v, 2, w, h, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr d, size_t pitch, unsigned short v,
                                             size_t w, size_t h, CUstream s)
{
    return memset_2d(d, pitch, v, 2, w, h, s, 1, 1);
}
FLYT_EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w,
                                        size_t h, CUstream s)
{
    return memset_2d(d, pitch, v, 4, w, h, s, 0, 1);
}
FLYT_EXPORT CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr d, size_t pitch, unsigned int v, size_t w,
                                             size_t h, CUstream s)
{
    return memset_2d(d, pitch, v, 4, w, h, s, 1, 1);
}

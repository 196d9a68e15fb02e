/*
 * MEMCPY_* and MEMSET. Bulk data never sits in a buffer of the size the
 * client declares: it streams through the backend's staging buffers, at most
 * FLYT_STAGING_CHUNK at a time, straight between the socket and the GPU.
 *
 * Every copy is a "box" on the device side: depth slices of height rows of
 * width bytes, rows pitch apart (a 1D copy is one row). Host data is packed.
 * Rows that fit a staging buffer move together; a row wider than one moves
 * in pieces.
 */
#include <string.h>

#include "flyt_log.h"
#include "session.h"

#define CHUNK FLYT_STAGING_CHUNK

/* Largest DTOH data that fits a reply with its headers and trailer. */
#define MAX_DTOH_DATA ((uint64_t)FLYT_MAX_PAYLOAD - 32)

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* A copy to the device that the client waits for (cudaMemcpy) is complete
 * when answered, as CUDA's is for pinned memory: work the application then
 * queues on another stream must see the data. */
static int finish_sync_htod(flyt_session *s, flyt_call *c, flyt_bhandle stream)
{
    if (!(c->hdr->flags & FLYT_F_NOREPLY) && c->result == CUDA_SUCCESS)
        c->result = s->b->ops->stream_sync(s->b, stream);
    return FLYT_CONT;
}

/* ---- host to device ---- */

/* Reads len bytes of the request into staging buffers and copies each to
 * dst (one row, split into pieces). Backend failures land in c->result;
 * the caller then skips what is left of the data. */
static int recv_row_pieces(flyt_session *s, flyt_call *c, uint64_t dst, uint64_t len,
                           flyt_bhandle stream)
{
    for (uint64_t off = 0; off < len && c->result == CUDA_SUCCESS;) {
        size_t got = 0;
        void *buf = s->b->ops->staging_get(s->b, (size_t)min_u64(len - off, CHUNK), &got);
        if (buf == NULL || got == 0) {
            c->result = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        if (flyt_recv_data(s, c, buf, got) != 0) {
            s->b->ops->staging_put(s->b, buf);
            return FLYT_END_IO;
        }
        /* htod_2d owns buf from here on, even when it fails */
        c->result = s->b->ops->htod_2d(s->b, dst + off, got, buf, got, 1, stream);
        off += got;
    }
    return FLYT_CONT;
}

/* rows rows of width bytes to dst, pitch apart. */
static int recv_rows(flyt_session *s, flyt_call *c, uint64_t dst, uint64_t pitch, uint64_t width,
                     uint64_t rows, flyt_bhandle stream)
{
    while (rows > 0 && c->result == CUDA_SUCCESS) {
        size_t got = 0;
        void *buf = NULL;
        if (width <= CHUNK) {
            buf = s->b->ops->staging_get(s->b, (size_t)(min_u64(rows, CHUNK / width) * width), &got);
            if (buf == NULL) {
                c->result = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
        }
        uint64_t n = buf ? got / width : 0;
        if (n == 0) { /* a row wider than the staging buffer: piece by piece */
            if (buf)
                s->b->ops->staging_put(s->b, buf);
            int rc = recv_row_pieces(s, c, dst, width, stream);
            if (rc != FLYT_CONT)
                return rc;
            dst += pitch;
            rows--;
            continue;
        }
        if (flyt_recv_data(s, c, buf, (size_t)(n * width)) != 0) {
            s->b->ops->staging_put(s->b, buf);
            return FLYT_END_IO;
        }
        c->result = s->b->ops->htod_2d(s->b, dst, pitch, buf, width, n, stream);
        dst += n * pitch;
        rows -= n;
    }
    return FLYT_CONT;
}

/* ---- boxes: a device-side region of rows, slices apart ---- */

typedef struct {
    flyt_pitched dev; /* the device side: address, pitch, slice height, position */
    uint64_t     width, height, depth;
} box;

/* A 1D copy is one row of size bytes. */
static box box_1d(uint64_t ptr, uint64_t size)
{
    box b = {{ptr, size, 1, 0, 0, 0}, size, 1, 1};
    return b;
}

/* The box must lie in its pitch (x + width <= pitch) and every address
 * box_addr computes must fit in 64 bits. */
static CUresult check_box(const box *b)
{
    const flyt_pitched *p = &b->dev;
    uint64_t row_end, slice, zoff, yoff, addr;
    if (__builtin_add_overflow(p->x, b->width, &row_end) || row_end > p->pitch)
        return CUDA_ERROR_INVALID_VALUE;
    if (__builtin_mul_overflow(p->pitch, p->height, &slice) ||
        __builtin_add_overflow(p->z, b->depth - 1, &zoff) ||
        __builtin_mul_overflow(zoff, slice, &zoff) ||
        __builtin_add_overflow(p->y, b->height - 1, &yoff) ||
        __builtin_mul_overflow(yoff, p->pitch, &yoff) ||
        __builtin_add_overflow(p->ptr, zoff, &addr) ||
        __builtin_add_overflow(addr, yoff, &addr) ||
        __builtin_add_overflow(addr, row_end, &addr))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Device address of row y of slice z; check_box proved it fits. */
static uint64_t box_addr(const box *b, uint64_t z, uint64_t y)
{
    const flyt_pitched *p = &b->dev;
    return p->ptr + (p->z + z) * p->pitch * p->height + (p->y + y) * p->pitch + p->x;
}

/* ---- host to device ---- */

static int recv_box(flyt_session *s, flyt_call *c, const box *b, flyt_bhandle stream)
{
    for (uint64_t z = 0; z < b->depth && c->result == CUDA_SUCCESS; z++) {
        int rc = recv_rows(s, c, box_addr(b, z, 0), b->dev.pitch, b->width, b->height, stream);
        if (rc != FLYT_CONT)
            return rc;
    }
    return FLYT_CONT;
}

/* ---- device to host ---- */

/* A piece of a box that fits the staging buffer: whole rows of one slice,
 * or part of a row wider than the buffer. */
typedef struct {
    uint64_t src, pitch, width, rows;
} piece;

typedef struct {
    const box *b;
    uint64_t   z, y, off; /* where the next piece starts */
} cursor;

static int next_piece(cursor *k, uint64_t cap, piece *p)
{
    const box *b = k->b;
    if (k->z >= b->depth)
        return 0;
    uint64_t row = box_addr(b, k->z, k->y);
    if (b->width <= cap) {
        *p = (piece){row, b->dev.pitch, b->width, min_u64(b->height - k->y, cap / b->width)};
        k->y += p->rows;
    } else {
        uint64_t g = min_u64(b->width - k->off, cap);
        *p = (piece){row + k->off, g, g, 1};
        k->off += g;
        if (k->off == b->width) {
            k->off = 0;
            k->y++;
        }
    }
    if (k->y == b->height) {
        k->y = 0;
        k->z++;
    }
    return 1;
}

static int send_zeros(flyt_session *s, uint64_t len)
{
    static const unsigned char zeros[64 * 1024];
    while (len > 0) {
        size_t n = (size_t)min_u64(len, sizeof zeros);
        if (flyt_reply_data(s, zeros, n) != 0)
            return -1;
        len -= n;
    }
    return 0;
}

/* Streams the rest of the box after the first piece (already in buf),
 * then pads after a failure and sends the trailer. The caller holds the
 * sender role. 0, or -1 when the connection failed. */
static int send_pieces(flyt_session *s, cursor *k, void *buf, size_t cap, piece p, uint64_t total,
                       flyt_bhandle stream)
{
    uint64_t sent = 0;
    CUresult err = CUDA_SUCCESS;
    for (;;) {
        if (flyt_reply_data(s, buf, (size_t)(p.width * p.rows)) != 0)
            return -1;
        sent += p.width * p.rows;
        if (!next_piece(k, cap, &p))
            break;
        err = s->b->ops->dtoh_2d(s->b, buf, p.src, p.pitch, p.width, p.rows, stream);
        if (err != CUDA_SUCCESS)
            break;
    }
    if (err != CUDA_SUCCESS)
        flyt_debug("device-to-host copy failed after %llu of %llu bytes: %d",
                   (unsigned long long)sent, (unsigned long long)total, err);
    struct flyt_reply trailer = {err, 0};
    if (send_zeros(s, total - sent) != 0 || flyt_reply_data(s, &trailer, sizeof trailer) != 0)
        return -1;
    return 0;
}

/* The streamed reply of a device-to-host copy: {0, deferred}, the empty
 * reply struct, the box's bytes packed, then a trailing flyt_reply with the
 * copy's final result. The first piece is copied before the reply starts:
 * that copy waits for all earlier work of its stream, host functions
 * included, whose CALLBACK frames thus go out before this reply. A failure
 * of that first piece (or of getting a buffer) is a plain error reply. */
static int send_box(flyt_session *s, flyt_call *c, const box *b, uint64_t total,
                    flyt_bhandle stream)
{
    if (total == 0) {
        struct flyt_reply trailer = {CUDA_SUCCESS, 0};
        int rc = flyt_reply_begin(s, c, CUDA_SUCCESS, sizeof trailer);
        if (rc == 0)
            rc = flyt_reply_data(s, &trailer, sizeof trailer);
        flyt_reply_end(s);
        return rc == 0 ? FLYT_CONT : FLYT_END_IO;
    }
    size_t cap = 0;
    void *buf = s->b->ops->staging_get(s->b, (size_t)min_u64(total, CHUNK), &cap);
    if (buf == NULL || cap == 0) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return FLYT_CONT;
    }
    cursor k = {b, 0, 0, 0};
    piece p;
    next_piece(&k, cap, &p);
    c->result = s->b->ops->dtoh_2d(s->b, buf, p.src, p.pitch, p.width, p.rows, stream);
    if (c->result != CUDA_SUCCESS) {
        s->b->ops->staging_put(s->b, buf);
        return FLYT_CONT;
    }
    int rc = flyt_reply_begin(s, c, CUDA_SUCCESS, total + sizeof(struct flyt_reply));
    if (rc == 0)
        rc = send_pieces(s, &k, buf, cap, p, total, stream);
    flyt_reply_end(s);
    s->b->ops->staging_put(s->b, buf);
    return rc == 0 ? FLYT_CONT : FLYT_END_IO;
}

/* ---- 1D copies ---- */

int handle_MEMCPY_HTOD(flyt_session *s, flyt_call *c)
{
    const flyt_req_memcpy *r = c->req;
    int rc = flyt_expect_data(s, c, r->size);
    if (rc != FLYT_CONT)
        return rc;
    flyt_bhandle stream;
    box b = box_1d(r->dst, r->size);
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS)
        c->result = flyt_capture_refuse(s, stream, "a host-to-device copy from pageable memory");
    if (c->result == CUDA_SUCCESS && r->size > 0)
        c->result = check_box(&b);
    if (c->result == CUDA_SUCCESS && r->size > 0)
        rc = recv_box(s, c, &b, stream);
    if (rc != FLYT_CONT)
        return rc;
    /* after a failure the rest of the data still has to leave the socket */
    if (flyt_skip_data(s, c) != 0)
        return FLYT_END_IO;
    return finish_sync_htod(s, c, stream);
}

int handle_MEMCPY_DTOH(flyt_session *s, flyt_call *c)
{
    const flyt_req_memcpy *r = c->req;
    flyt_bhandle stream;
    box b = box_1d(r->src, r->size);
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS && r->size > MAX_DTOH_DATA)
        c->result = CUDA_ERROR_INVALID_VALUE;
    if (c->result == CUDA_SUCCESS && r->size > 0)
        c->result = check_box(&b);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT; /* plain error reply, no data */
    return send_box(s, c, &b, r->size, stream);
}

int handle_MEMCPY_DTOD(flyt_session *s, flyt_call *c)
{
    const flyt_req_memcpy *r = c->req;
    flyt_bhandle stream;
    box src = box_1d(r->src, r->size), dst = box_1d(r->dst, r->size);
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result != CUDA_SUCCESS || r->size == 0)
        return FLYT_CONT;
    c->result = check_box(&src);
    if (c->result == CUDA_SUCCESS)
        c->result = check_box(&dst);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, dtod_2d, r->dst, r->size, r->src, r->size, r->size, 1, stream);
    return FLYT_CONT;
}

/* ---- 3D copies ----
 * Host sides are packed by the client and ignored here; each device side is
 * a box of the copy's extent. */

static box side_box(const flyt_pitched *side, const flyt_req_memcpy_3d *r)
{
    box b = {*side, r->width_bytes, r->height, r->depth};
    return b;
}

static int copy3d_htod(flyt_session *s, flyt_call *c, const flyt_req_memcpy_3d *r,
                       flyt_bhandle stream)
{
    box dst = side_box(&r->dst, r);
    c->result = check_box(&dst);
    if (c->result == CUDA_SUCCESS) {
        int rc = recv_box(s, c, &dst, stream);
        if (rc != FLYT_CONT)
            return rc;
    }
    if (flyt_skip_data(s, c) != 0)
        return FLYT_END_IO;
    return finish_sync_htod(s, c, stream);
}

static int copy3d_dtoh(flyt_session *s, flyt_call *c, const flyt_req_memcpy_3d *r,
                       flyt_bhandle stream, uint64_t total)
{
    if (c->hdr->flags & FLYT_F_NOREPLY) {
        c->result = CUDA_ERROR_INVALID_VALUE; /* the data would have nowhere to go */
        return FLYT_CONT;
    }
    box src = side_box(&r->src, r);
    if (total > MAX_DTOH_DATA)
        c->result = CUDA_ERROR_INVALID_VALUE;
    else if (total > 0)
        c->result = check_box(&src);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    /* an empty box copies nothing, as in CUDA, but answers in the streamed shape */
    return send_box(s, c, &src, total, stream);
}

static void copy3d_dtod(flyt_session *s, flyt_call *c, const flyt_req_memcpy_3d *r,
                        flyt_bhandle stream)
{
    box dst = side_box(&r->dst, r), src = side_box(&r->src, r);
    c->result = check_box(&dst);
    if (c->result == CUDA_SUCCESS)
        c->result = check_box(&src);
    for (uint64_t z = 0; z < r->depth && c->result == CUDA_SUCCESS; z++)
        c->result = FLYT_BCALL(s, dtod_2d, box_addr(&dst, z, 0), r->dst.pitch, box_addr(&src, z, 0),
                               r->src.pitch, r->width_bytes, r->height, stream);
}

int handle_MEMCPY_3D(flyt_session *s, flyt_call *c)
{
    const flyt_req_memcpy_3d *r = c->req;
    uint64_t total;
    int overflow = __builtin_mul_overflow(r->width_bytes, r->height, &total) ||
                   __builtin_mul_overflow(total, r->depth, &total);
    /* framing first: only HTOD carries data, exactly the packed box */
    int rc = flyt_expect_data(s, c, r->dir == FLYT_DIR_HTOD ? (overflow ? UINT64_MAX : total) : 0);
    if (rc != FLYT_CONT)
        return rc;
    if (overflow) { /* only reachable without data: DTOH or DTOD */
        c->result = CUDA_ERROR_INVALID_VALUE;
        return FLYT_CONT;
    }
    flyt_bhandle stream;
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS && r->dir != FLYT_DIR_HTOD && r->dir != FLYT_DIR_DTOH &&
        r->dir != FLYT_DIR_DTOD)
        c->result = CUDA_ERROR_INVALID_VALUE;
    if (c->result == CUDA_SUCCESS && r->dir == FLYT_DIR_HTOD)
        c->result = flyt_capture_refuse(s, stream, "a 3D copy from pageable memory");
    if (c->result != CUDA_SUCCESS)
        return flyt_skip_data(s, c) == 0 ? FLYT_CONT : FLYT_END_IO;
    switch (r->dir) {
    case FLYT_DIR_HTOD:
        return total == 0 ? FLYT_CONT : copy3d_htod(s, c, r, stream);
    case FLYT_DIR_DTOH:
        return copy3d_dtoh(s, c, r, stream, total);
    default:
        if (total != 0)
            copy3d_dtod(s, c, r, stream);
        return FLYT_CONT;
    }
}

/* ---- memset ---- */

int handle_MEMSET(flyt_session *s, flyt_call *c)
{
    const flyt_req_memset *r = c->req;
    flyt_bhandle stream;
    unsigned elem = r->elem_size ? r->elem_size : 1;
    if (elem != 1 && elem != 2 && elem != 4)
        return flyt_violation(s, c, "memset element size %u", r->elem_size);
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result != CUDA_SUCCESS || r->width_bytes == 0 || r->height == 0 || r->depth == 0)
        return FLYT_CONT;
    if (r->width_bytes % elem || (uint64_t)r->dst % elem || (r->height > 1 && r->pitch % elem)) {
        c->result = CUDA_ERROR_INVALID_VALUE;
        return FLYT_CONT;
    }
    /* one row needs no pitch; several must not overlap */
    uint64_t pitch = r->height == 1 ? (r->pitch > r->width_bytes ? r->pitch : r->width_bytes)
                                    : r->pitch;
    uint64_t zoff, yoff, end;
    if (pitch < r->width_bytes || __builtin_mul_overflow(r->depth - 1, r->slice_pitch, &zoff) ||
        __builtin_mul_overflow(r->height - 1, pitch, &yoff) ||
        __builtin_add_overflow(r->dst, zoff, &end) || __builtin_add_overflow(end, yoff, &end) ||
        __builtin_add_overflow(end, r->width_bytes, &end)) {
        c->result = CUDA_ERROR_INVALID_VALUE;
        return FLYT_CONT;
    }
    for (uint64_t z = 0; z < r->depth && c->result == CUDA_SUCCESS; z++)
        c->result = FLYT_BCALL(s, memset_2d, r->dst + z * r->slice_pitch, pitch, r->value, elem,
                               r->width_bytes, r->height, stream);
    return FLYT_CONT;
}

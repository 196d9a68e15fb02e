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

/* ---- boxes: a device-side region of rows, slices apart ---- */

typedef struct {
    flyt_pitched dev; /* the device side: address, pitch, slice height, position */
    uint64_t     width, height, depth;
    /* not NULL: the side is this (an array), moved with copy_3d, and dev is unused */
    const struct flyt_bside *side;
} box;

/* A 1D copy is one row of size bytes. */
static box box_1d(uint64_t ptr, uint64_t size)
{
    box b = {{ptr, size, 1, 0, 0, 0}, size, 1, 1, NULL};
    return b;
}

/* The box must lie in its pitch (x + width <= pitch), slices of several
 * must not share rows (a slice height of at least the box's, which CUDA asks
 * too: "may be 0 if Depth==1"; else a huge depth would copy the same bytes
 * without end) and every address box_addr computes must fit in 64 bits;
 * *end: just past its last byte. */
static CUresult box_end(const box *b, uint64_t *end)
{
    const flyt_pitched *p = &b->dev;
    uint64_t row_end, slice, zoff, yoff, addr;
    if (__builtin_add_overflow(p->x, b->width, &row_end) || row_end > p->pitch)
        return CUDA_ERROR_INVALID_VALUE;
    if (b->depth > 1 && p->height < b->height)
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
    *end = addr;
    return CUDA_SUCCESS;
}

static CUresult check_box(const box *b)
{
    uint64_t end;
    return box_end(b, &end);
}

/* Device address of row y of slice z; check_box proved it fits. */
static uint64_t box_addr(const box *b, uint64_t z, uint64_t y)
{
    const flyt_pitched *p = &b->dev;
    return p->ptr + (p->z + z) * p->pitch * p->height + (p->y + y) * p->pitch + p->x;
}

/* ---- pieces: what fits a staging buffer ---- */

/* Whole rows of one slice, or part of a row wider than the buffer. */
typedef struct {
    uint64_t z, y, off, width, rows;
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
    if (b->width <= cap) {
        *p = (piece){k->z, k->y, 0, b->width, min_u64(b->height - k->y, cap / b->width)};
        k->y += p->rows;
    } else {
        *p = (piece){k->z, k->y, k->off, min_u64(b->width - k->off, cap), 1};
        k->off += p->width;
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

/* A piece of an array box as a copy between it and packed host memory. */
static struct flyt_bcopy piece_copy(const box *b, const piece *p, void *host, int to_host)
{
    struct flyt_bside side = *b->side;
    side.x += p->off;
    side.y += p->y;
    side.z += p->z;
    struct flyt_bside packed = {.kind = FLYT_BSIDE_HOST, .host = host, .pitch = p->width,
                                .height = p->rows};
    struct flyt_bcopy c = {to_host ? packed : side, to_host ? side : packed, p->width, p->rows, 1};
    return c;
}

/* Device to the staging buffer buf; done when it returns. */
static CUresult get_piece(flyt_session *s, const box *b, const piece *p, void *buf,
                          flyt_bhandle stream)
{
    if (b->side == NULL)
        return s->b->ops->dtoh_2d(s->b, buf, box_addr(b, p->z, p->y) + p->off, b->dev.pitch,
                                  p->width, p->rows, stream);
    struct flyt_bcopy c = piece_copy(b, p, buf, 1);
    return FLYT_BCALL(s, copy_3d, &c, stream, 1);
}

/* The staging buffer buf to the device; buf is given up here. */
static CUresult put_piece(flyt_session *s, const box *b, const piece *p, void *buf,
                          flyt_bhandle stream)
{
    if (b->side == NULL) /* htod_2d owns buf from here on, even when it fails */
        return s->b->ops->htod_2d(s->b, box_addr(b, p->z, p->y) + p->off, b->dev.pitch, buf,
                                  p->width, p->rows, stream);
    struct flyt_bcopy c = piece_copy(b, p, buf, 0);
    CUresult r = FLYT_BCALL(s, copy_3d, &c, stream, 1);
    s->b->ops->staging_put(s->b, buf);
    return r;
}

/* ---- host to device ---- */

/* Reads the box's total bytes from the request into staging buffers, piece
 * by piece. Backend failures land in c->result; the caller then skips what
 * is left of the data. */
static int recv_box(flyt_session *s, flyt_call *c, const box *b, uint64_t total,
                    flyt_bhandle stream)
{
    cursor k = {b, 0, 0, 0};
    piece p = {0}; /* next_piece fills it; zeroed for -O3's flow analysis */
    for (uint64_t left = total; left > 0 && c->result == CUDA_SUCCESS;) {
        size_t got = 0;
        void *buf = s->b->ops->staging_get(s->b, (size_t)min_u64(left, CHUNK), &got);
        if (buf == NULL || got == 0) {
            if (buf)
                s->b->ops->staging_put(s->b, buf);
            c->result = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        next_piece(&k, got, &p);
        uint64_t n = p.width * p.rows;
        if (flyt_recv_data(s, c, buf, (size_t)n) != 0) {
            s->b->ops->staging_put(s->b, buf);
            return FLYT_END_IO;
        }
        c->result = put_piece(s, b, &p, buf, stream);
        left -= n;
    }
    return FLYT_CONT;
}

/* ---- device to host ---- */

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
        err = get_piece(s, k->b, &p, buf, stream);
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
    piece p = {0}; /* next_piece fills it; zeroed for -O3's flow analysis */
    next_piece(&k, cap, &p);
    c->result = get_piece(s, b, &p, buf, stream);
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
        rc = recv_box(s, c, &b, r->size, stream);
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
    box b = {*side, r->width_bytes, r->height, r->depth, NULL};
    return b;
}

static int copy3d_htod(flyt_session *s, flyt_call *c, const flyt_req_memcpy_3d *r,
                       flyt_bhandle stream, uint64_t total)
{
    box dst = side_box(&r->dst, r);
    c->result = check_box(&dst);
    if (c->result == CUDA_SUCCESS) {
        int rc = recv_box(s, c, &dst, total, stream);
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

static int copy3d_dtod(flyt_session *s, flyt_call *c, const flyt_req_memcpy_3d *r,
                       flyt_bhandle stream)
{
    box dst = side_box(&r->dst, r), src = side_box(&r->src, r);
    c->result = check_box(&dst);
    if (c->result == CUDA_SUCCESS)
        c->result = check_box(&src);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    for (uint64_t z = 0; z < r->depth && c->result == CUDA_SUCCESS; z++) {
        if (flyt_client_gone(s, z))
            return FLYT_END_IO;
        c->result = FLYT_BCALL(s, dtod_2d, box_addr(&dst, z, 0), r->dst.pitch, box_addr(&src, z, 0),
                               r->src.pitch, r->width_bytes, r->height, stream);
    }
    return FLYT_CONT;
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
        return total == 0 ? FLYT_CONT : copy3d_htod(s, c, r, stream, total);
    case FLYT_DIR_DTOH:
        return copy3d_dtoh(s, c, r, stream, total);
    default:
        return total == 0 ? FLYT_CONT : copy3d_dtod(s, c, r, stream);
    }
}

/* ---- copies with array sides (ARRAY_COPY) ---- */

/* A side as copy_3d takes it, checked: device boxes as any copy's, arrays
 * by id, shared regions by their size. A packed side is the staging buffers. */
static CUresult resolve_side(flyt_session *s, const flyt_copy_side *w,
                             const flyt_req_array_copy *r, struct flyt_bside *out)
{
    *out = (struct flyt_bside){.pitch = w->pitch, .height = w->height, .x = w->x, .y = w->y,
                               .z = w->z};
    box b = {{w->handle, w->pitch, w->height, w->x, w->y, w->z}, r->width_bytes, r->height,
             r->depth, NULL};
    uint64_t end;
    switch (w->kind) {
    case FLYT_SIDE_DEVICE:
        out->kind = FLYT_BSIDE_DEVICE;
        out->dptr = w->handle;
        return check_box(&b);
    case FLYT_SIDE_ARRAY:
        out->kind = FLYT_BSIDE_ARRAY;
        return flyt_lookup(s, w->handle, FLYT_H_ARRAY, &out->array);
    case FLYT_SIDE_REGION:
        out->kind = FLYT_BSIDE_HOST;
        b.dev.ptr = 0;
        if (box_end(&b, &end) != CUDA_SUCCESS)
            return CUDA_ERROR_INVALID_VALUE;
        return flyt_region_span(s, w->handle, w->offset, end, (char **)&out->host);
    case FLYT_SIDE_PACKED:
        out->kind = FLYT_BSIDE_HOST;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

int handle_ARRAY_COPY(flyt_session *s, flyt_call *c)
{
    const flyt_req_array_copy *r = c->req;
    uint64_t total;
    int overflow = __builtin_mul_overflow(r->width_bytes, r->height, &total) ||
                   __builtin_mul_overflow(total, r->depth, &total);
    int from_client = r->src.kind == FLYT_SIDE_PACKED, to_client = r->dst.kind == FLYT_SIDE_PACKED;
    if (from_client && to_client)
        return flyt_violation(s, c, "both sides of an array copy are packed");
    int rc = flyt_expect_data(s, c, from_client ? (overflow ? UINT64_MAX : total) : 0);
    if (rc != FLYT_CONT)
        return rc;
    struct flyt_bcopy bc = {.width = r->width_bytes, .height = r->height, .depth = r->depth};
    flyt_bhandle stream;
    int noreply = (c->hdr->flags & FLYT_F_NOREPLY) != 0;
    if (overflow || (to_client && (noreply || total > MAX_DTOH_DATA)))
        c->result = CUDA_ERROR_INVALID_VALUE; /* data to the client needs a reply to go in */
    else
        c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS && total > 0)
        c->result = resolve_side(s, &r->dst, r, &bc.dst);
    if (c->result == CUDA_SUCCESS && total > 0)
        c->result = resolve_side(s, &r->src, r, &bc.src);
    if (c->result != CUDA_SUCCESS || (total == 0 && !to_client))
        return flyt_skip_data(s, c) == 0 ? FLYT_CONT : FLYT_END_IO;
    if (to_client) {
        box b = {{0}, r->width_bytes, r->height, r->depth, &bc.src};
        return send_box(s, c, &b, total, stream);
    }
    if (from_client) {
        box b = {{0}, r->width_bytes, r->height, r->depth, &bc.dst};
        rc = recv_box(s, c, &b, total, stream);
        if (rc != FLYT_CONT)
            return rc;
        if (flyt_skip_data(s, c) != 0)
            return FLYT_END_IO;
        return finish_sync_htod(s, c, stream);
    }
    /* a copy the client waits for is complete when answered */
    c->result = FLYT_BCALL(s, copy_3d, &bc, stream, !noreply);
    return FLYT_CONT;
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
    /* one row needs no pitch; several must not overlap, nor may slices:
     * else a huge depth would set the same bytes without end */
    uint64_t pitch = r->height == 1 ? (r->pitch > r->width_bytes ? r->pitch : r->width_bytes)
                                    : r->pitch;
    uint64_t span, zoff, end, rows = r->height, depth = r->depth, slice;
    if (pitch < r->width_bytes || __builtin_mul_overflow(r->height - 1, pitch, &span) ||
        __builtin_add_overflow(span, r->width_bytes, &span) ||
        (r->depth > 1 && r->slice_pitch < span) ||
        __builtin_mul_overflow(r->depth - 1, r->slice_pitch, &zoff) ||
        __builtin_add_overflow(r->dst, zoff, &end) || __builtin_add_overflow(end, span, &end)) {
        c->result = CUDA_ERROR_INVALID_VALUE;
        return FLYT_CONT;
    }
    /* slices that follow each other are one memset of all their rows */
    if (depth > 1 && pitch % elem == 0 && !__builtin_mul_overflow(pitch, rows, &slice) &&
        slice == r->slice_pitch && !__builtin_mul_overflow(rows, depth, &rows))
        depth = 1;
    else
        rows = r->height;
    for (uint64_t z = 0; z < depth && c->result == CUDA_SUCCESS; z++) {
        if (flyt_client_gone(s, z))
            return FLYT_END_IO;
        c->result = FLYT_BCALL(s, memset_2d, r->dst + z * r->slice_pitch, pitch, r->value, elem,
                               r->width_bytes, rows, stream);
    }
    return FLYT_CONT;
}

/*
 * MEMCPY_* and MEMSET. Bulk data never sits in a buffer of the size the
 * client declares: it streams through the backend's staging buffers, at most
 * FLYT_STAGING_CHUNK at a time, straight between the socket and the GPU.
 *
 * Every copy is a list of "row runs" (rows of width bytes, pitch apart on
 * the device side); a 1D copy is one row. A row wider than a staging buffer
 * is moved in column pieces.
 */
#include <string.h>

#include "flyt_log.h"
#include "session.h"

#define CHUNK FLYT_STAGING_CHUNK

/* Largest DTOH data that fits a reply with its headers and trailer. */
#define MAX_DTOH_DATA ((uint64_t)FLYT_MAX_PAYLOAD - 32)

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

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

/* ---- device to host ---- */

typedef struct {
    void    *buf; /* staging buffer, reused for every chunk */
    size_t   cap;
    uint64_t sent;  /* data bytes sent so far */
    int32_t  error; /* first failed chunk */
} dtoh_state;

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

/* Copies n rows into the staging buffer and sends them; stops at the first
 * backend failure (the caller pads the rest with zeros). */
static int send_chunk(flyt_session *s, dtoh_state *st, uint64_t src, uint64_t pitch,
                      uint64_t width, uint64_t n, flyt_bhandle stream)
{
    CUresult e = s->b->ops->dtoh_2d(s->b, st->buf, src, pitch, width, n, stream);
    if (e != CUDA_SUCCESS) {
        st->error = e;
        return 0;
    }
    if (flyt_reply_data(s, st->buf, (size_t)(width * n)) != 0)
        return -1;
    st->sent += width * n;
    return 0;
}

static int send_rows(flyt_session *s, dtoh_state *st, uint64_t src, uint64_t pitch, uint64_t width,
                     uint64_t rows, flyt_bhandle stream)
{
    while (rows > 0 && st->error == CUDA_SUCCESS) {
        if (width <= st->cap) {
            uint64_t n = min_u64(rows, st->cap / width);
            if (send_chunk(s, st, src, pitch, width, n, stream) != 0)
                return -1;
            src += n * pitch;
            rows -= n;
            continue;
        }
        for (uint64_t off = 0; off < width && st->error == CUDA_SUCCESS;) {
            uint64_t g = min_u64(width - off, st->cap);
            if (send_chunk(s, st, src + off, g, g, 1, stream) != 0)
                return -1;
            off += g;
        }
        src += pitch;
        rows--;
    }
    return 0;
}

/* Starts a streamed DTOH reply of total data bytes: a staging buffer first
 * (so a failure there is still a plain error reply, result in c->result),
 * then the reply head, keeping the sender role until dtoh_end.
 * 0: nothing sent; 1: head sent; -1: head started but the connection failed. */
static int dtoh_begin(flyt_session *s, flyt_call *c, dtoh_state *st, uint64_t total)
{
    memset(st, 0, sizeof *st);
    if (total > 0) {
        st->buf = s->b->ops->staging_get(s->b, (size_t)min_u64(total, CHUNK), &st->cap);
        if (st->buf == NULL || st->cap == 0) {
            c->result = CUDA_ERROR_OUT_OF_MEMORY;
            return 0;
        }
    }
    return flyt_reply_begin(s, c, CUDA_SUCCESS, total + sizeof(struct flyt_reply)) == 0 ? 1 : -1;
}

/* Pads after a failure, sends the trailer with the copy's final result,
 * gives the sender role and the staging buffer back. */
static int dtoh_end(flyt_session *s, flyt_call *c, dtoh_state *st, uint64_t total, int io_failed)
{
    int rc = io_failed ? -1 : 0;
    if (rc == 0)
        rc = send_zeros(s, total - st->sent);
    struct flyt_reply trailer = {st->error, 0};
    if (rc == 0)
        rc = flyt_reply_data(s, &trailer, sizeof trailer);
    flyt_reply_end(s);
    if (st->buf)
        s->b->ops->staging_put(s->b, st->buf);
    if (st->error != CUDA_SUCCESS)
        flyt_debug("%s (seq %u) failed during the copy: %d", flyt_op_name(c->hdr->op),
                   c->hdr->seq, st->error);
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
    uint64_t end;
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS && __builtin_add_overflow(r->dst, r->size, &end))
        c->result = CUDA_ERROR_INVALID_VALUE;
    if (c->result == CUDA_SUCCESS && r->size > 0)
        rc = recv_rows(s, c, r->dst, r->size, r->size, 1, stream);
    if (rc != FLYT_CONT)
        return rc;
    /* after a failure the rest of the data still has to leave the socket */
    return flyt_skip_data(s, c) == 0 ? FLYT_CONT : FLYT_END_IO;
}

int handle_MEMCPY_DTOH(flyt_session *s, flyt_call *c)
{
    const flyt_req_memcpy *r = c->req;
    flyt_bhandle stream;
    uint64_t end;
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS &&
        (r->size > MAX_DTOH_DATA || __builtin_add_overflow(r->src, r->size, &end)))
        c->result = CUDA_ERROR_INVALID_VALUE;
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT; /* plain error reply, no data */
    dtoh_state st;
    int begun = dtoh_begin(s, c, &st, r->size);
    if (begun == 0)
        return FLYT_CONT;
    int failed = begun < 0;
    if (!failed && r->size > 0)
        failed = send_rows(s, &st, r->src, r->size, r->size, 1, stream) != 0;
    return dtoh_end(s, c, &st, r->size, failed);
}

int handle_MEMCPY_DTOD(flyt_session *s, flyt_call *c)
{
    const flyt_req_memcpy *r = c->req;
    flyt_bhandle stream;
    uint64_t end;
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS && (__builtin_add_overflow(r->src, r->size, &end) ||
                                      __builtin_add_overflow(r->dst, r->size, &end)))
        c->result = CUDA_ERROR_INVALID_VALUE;
    if (c->result == CUDA_SUCCESS && r->size > 0)
        c->result = FLYT_BCALL(s, dtod_2d, r->dst, r->size, r->src, r->size, r->size, 1, stream);
    return FLYT_CONT;
}

/* ---- 3D copies ---- */

/* A device side must hold the whole box: x + width within the pitch, and
 * every address computed below without overflow. */
static CUresult check_device_side(const flyt_pitched *p, uint64_t width, uint64_t height,
                                  uint64_t depth)
{
    uint64_t row_end, slice, zoff, yoff, addr;
    if (__builtin_add_overflow(p->x, width, &row_end) || row_end > p->pitch)
        return CUDA_ERROR_INVALID_VALUE;
    if (__builtin_mul_overflow(p->pitch, p->height, &slice) ||
        __builtin_add_overflow(p->z, depth - 1, &zoff) ||
        __builtin_mul_overflow(zoff, slice, &zoff) ||
        __builtin_add_overflow(p->y, height - 1, &yoff) ||
        __builtin_mul_overflow(yoff, p->pitch, &yoff) ||
        __builtin_add_overflow(p->ptr, zoff, &addr) ||
        __builtin_add_overflow(addr, yoff, &addr) ||
        __builtin_add_overflow(addr, row_end, &addr))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Address of row y of slice z; check_device_side proved it fits. */
static uint64_t side_addr(const flyt_pitched *p, uint64_t z, uint64_t y)
{
    return p->ptr + (p->z + z) * p->pitch * p->height + (p->y + y) * p->pitch + p->x;
}

static int copy3d_htod(flyt_session *s, flyt_call *c, const flyt_req_memcpy_3d *r,
                       flyt_bhandle stream)
{
    c->result = check_device_side(&r->dst, r->width_bytes, r->height, r->depth);
    for (uint64_t z = 0; z < r->depth && c->result == CUDA_SUCCESS; z++) {
        int rc = recv_rows(s, c, side_addr(&r->dst, z, 0), r->dst.pitch, r->width_bytes,
                           r->height, stream);
        if (rc != FLYT_CONT)
            return rc;
    }
    return flyt_skip_data(s, c) == 0 ? FLYT_CONT : FLYT_END_IO;
}

static int copy3d_dtoh(flyt_session *s, flyt_call *c, const flyt_req_memcpy_3d *r,
                       flyt_bhandle stream, uint64_t total)
{
    if (c->hdr->flags & FLYT_F_NOREPLY) {
        c->result = CUDA_ERROR_INVALID_VALUE; /* the data would have nowhere to go */
        return FLYT_CONT;
    }
    /* An empty box copies nothing, as in CUDA, but still answers in the
     * streamed shape (no data, then the trailer). */
    if (total > 0)
        c->result = check_device_side(&r->src, r->width_bytes, r->height, r->depth);
    if (c->result == CUDA_SUCCESS && total > MAX_DTOH_DATA)
        c->result = CUDA_ERROR_INVALID_VALUE;
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    dtoh_state st;
    int begun = dtoh_begin(s, c, &st, total);
    if (begun == 0)
        return FLYT_CONT;
    int failed = begun < 0;
    for (uint64_t z = 0; total > 0 && z < r->depth && !failed && st.error == CUDA_SUCCESS; z++)
        failed = send_rows(s, &st, side_addr(&r->src, z, 0), r->src.pitch, r->width_bytes,
                           r->height, stream) != 0;
    return dtoh_end(s, c, &st, total, failed);
}

static void copy3d_dtod(flyt_session *s, flyt_call *c, const flyt_req_memcpy_3d *r,
                        flyt_bhandle stream)
{
    c->result = check_device_side(&r->dst, r->width_bytes, r->height, r->depth);
    if (c->result == CUDA_SUCCESS)
        c->result = check_device_side(&r->src, r->width_bytes, r->height, r->depth);
    for (uint64_t z = 0; z < r->depth && c->result == CUDA_SUCCESS; z++)
        c->result = FLYT_BCALL(s, dtod_2d, side_addr(&r->dst, z, 0), r->dst.pitch,
                               side_addr(&r->src, z, 0), r->src.pitch, r->width_bytes, r->height,
                               stream);
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
    flyt_bhandle stream;
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS && r->dir != FLYT_DIR_HTOD && r->dir != FLYT_DIR_DTOH &&
        r->dir != FLYT_DIR_DTOD)
        c->result = CUDA_ERROR_INVALID_VALUE;
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
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result != CUDA_SUCCESS || r->width_bytes == 0 || r->height == 0 || r->depth == 0)
        return FLYT_CONT;
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
        c->result = FLYT_BCALL(s, memset_2d, r->dst + z * r->slice_pitch, pitch,
                               (unsigned char)r->value, r->width_bytes, r->height, stream);
    return FLYT_CONT;
}

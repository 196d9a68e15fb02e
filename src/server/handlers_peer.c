/*
 * MEMCPY_HTOD_PEER / MEMCPY_DTOH_PEER: pageable copies for a client on this
 * machine. The server moves the bytes between the client's buffer and its
 * pinned staging buffers with process_vm_readv/writev (one copy, no socket),
 * and the staging ring overlaps that with the DMA of the previous chunk.
 * The process is the socket's peer by SO_PEERCRED: a client can only name
 * addresses of its own.
 */
#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "flyt_log.h"
#include "session.h"

#define CHUNK FLYT_STAGING_CHUNK

static pid_t peer_pid(flyt_session *s)
{
    if (s->peer_pid == 0) {
        struct ucred cred;
        socklen_t len = sizeof cred;
        s->peer_pid = getsockopt(s->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0
                          ? cred.pid
                          : -1;
    }
    return s->peer_pid;
}

/* Moves len bytes between local and the peer's remote address. */
static CUresult peer_io(pid_t pid, void *local, uint64_t remote, size_t len, int write)
{
    while (len > 0) {
        struct iovec l = {local, len}, r = {(void *)(uintptr_t)remote, len};
        ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                          : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EFAULT ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_PERMITTED;
        if (n == 0)
            return CUDA_ERROR_INVALID_VALUE;
        local = (char *)local + n;
        remote += (uint64_t)n;
        len -= (size_t)n;
    }
    return CUDA_SUCCESS;
}

static CUresult peer_ready(flyt_session *s, const flyt_req_memcpy_peer *r, flyt_bhandle *stream)
{
    if (peer_pid(s) <= 0)
        return CUDA_ERROR_NOT_PERMITTED;
    CUresult e = flyt_lookup_stream(s, r->stream, stream);
    if (e == CUDA_SUCCESS && (r->flags & ~FLYT_PEER_ASYNC))
        e = CUDA_ERROR_INVALID_VALUE;
    return e;
}

int handle_MEMCPY_HTOD_PEER(flyt_session *s, flyt_call *c)
{
    const flyt_req_memcpy_peer *r = c->req;
    flyt_bhandle stream;
    c->result = peer_ready(s, r, &stream);
    for (uint64_t off = 0; c->result == CUDA_SUCCESS && off < r->size;) {
        size_t want = r->size - off < CHUNK ? (size_t)(r->size - off) : CHUNK, got = 0;
        void *buf = s->b->ops->staging_get(s->b, want, &got);
        if (buf == NULL || got == 0) {
            c->result = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        c->result = peer_io(s->peer_pid, buf, r->src + off, got, 0);
        if (c->result != CUDA_SUCCESS) {
            s->b->ops->staging_put(s->b, buf);
            break;
        }
        /* htod_2d owns buf from here on */
        c->result = s->b->ops->htod_2d(s->b, r->dst + off, got, buf, got, 1, stream);
        off += got;
    }
    if (c->result == CUDA_SUCCESS && !(r->flags & FLYT_PEER_ASYNC))
        c->result = FLYT_BCALL(s, stream_sync, stream);
    return FLYT_CONT;
}

int handle_MEMCPY_DTOH_PEER(flyt_session *s, flyt_call *c)
{
    const flyt_req_memcpy_peer *r = c->req;
    flyt_bhandle stream;
    c->result = peer_ready(s, r, &stream);
    if (c->result != CUDA_SUCCESS || r->size == 0)
        return FLYT_CONT;
    size_t got = 0;
    void *buf = s->b->ops->staging_get(s->b, r->size < CHUNK ? (size_t)r->size : CHUNK, &got);
    if (buf == NULL || got == 0) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return FLYT_CONT;
    }
    for (uint64_t off = 0; c->result == CUDA_SUCCESS && off < r->size;) {
        size_t n = r->size - off < got ? (size_t)(r->size - off) : got;
        c->result = s->b->ops->dtoh_2d(s->b, buf, r->src + off, n, n, 1, stream);
        if (c->result == CUDA_SUCCESS)
            c->result = peer_io(s->peer_pid, buf, r->dst + off, n, 1);
        off += n;
    }
    s->b->ops->staging_put(s->b, buf);
    return FLYT_CONT;
}

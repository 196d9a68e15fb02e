/*
 * MEMCPY_HTOD_PEER / MEMCPY_DTOH_PEER: pageable copies for a client on this
 * machine. The server moves the bytes between the client's buffer and its
 * pinned staging buffers with process_vm_readv/writev (one copy, no socket),
 * and the staging ring overlaps that with the DMA of the previous chunk.
 * The process is the socket's peer by SO_PEERCRED, and every access runs
 * with the credentials the client connected with: the kernel's own ptrace
 * check then allows exactly what the client could do itself. A process that
 * since became another user's (the client forked, kept the socket in the
 * child and the parent exec'd a setuid program; or its pid was reused) is
 * refused like memory of another machine (CUDA_ERROR_NOT_PERMITTED: the
 * client falls back to the socket), and its addresses are never probed.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "flyt_log.h"
#include "session.h"

#define CHUNK FLYT_STAGING_CHUNK

static pid_t peer_pid(flyt_session *s)
{
    if (s->peer_pid == 0 && s->cfg->no_peer_memory)
        s->peer_pid = -1;
    if (s->peer_pid == 0) {
        struct ucred cred;
        socklen_t len = sizeof cred;
        s->peer_pid = getsockopt(s->link.fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0
                          ? cred.pid
                          : -1;
        s->peer_uid = cred.uid;
        s->peer_gid = cred.gid;
    }
    return s->peer_pid;
}

/* This thread takes the client's user and group for real and effective ids
 * (raw system calls: only this thread changes; the saved ids keep what it
 * was, to come back). Effective ids other than root's also leave no
 * capability, so CAP_SYS_PTRACE cannot bypass the kernel's check. 0, or -1
 * when this server may not act as that user. */
static int become_peer(const flyt_session *s, uid_t *uid_was, gid_t *gid_was)
{
    *uid_was = geteuid();
    *gid_was = getegid();
    if (*uid_was == s->peer_uid && *gid_was == s->peer_gid)
        return 0; /* already the client's user: the kernel checks with these */
    if (*uid_was != 0)
        return -1; /* another unprivileged user: never on its behalf */
    if (syscall(SYS_setresgid, s->peer_gid, s->peer_gid, (gid_t)-1) != 0)
        return -1;
    if (syscall(SYS_setresuid, s->peer_uid, s->peer_uid, (uid_t)-1) != 0) {
        syscall(SYS_setresgid, *gid_was, *gid_was, (gid_t)-1);
        return -1;
    }
    return 0;
}

static void become_server(uid_t uid_was, gid_t gid_was)
{
    if (geteuid() == uid_was && getegid() == gid_was)
        return;
    /* both back from the saved ids; failing here would leave the session
     * thread as the client: nothing it could safely go on doing */
    if (syscall(SYS_setresuid, uid_was, uid_was, (uid_t)-1) != 0 ||
        syscall(SYS_setresgid, gid_was, gid_was, (gid_t)-1) != 0)
        abort();
}

/* Moves len bytes between local and the peer's remote address, as the peer's
 * user (become_peer). */
static CUresult peer_io(const flyt_session *s, void *local, uint64_t remote, size_t len, int write)
{
    uid_t uid_was;
    gid_t gid_was;
    if (become_peer(s, &uid_was, &gid_was) != 0)
        return CUDA_ERROR_NOT_PERMITTED;
    CUresult res = CUDA_SUCCESS;
    pid_t pid = s->peer_pid;
    while (len > 0 && res == CUDA_SUCCESS) {
        struct iovec l = {local, len}, r = {(void *)(uintptr_t)remote, len};
        ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                          : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            res = errno == EFAULT ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_PERMITTED;
        else if (n == 0)
            res = CUDA_ERROR_INVALID_VALUE;
        else {
            local = (char *)local + n;
            remote += (uint64_t)n;
            len -= (size_t)n;
        }
    }
    become_server(uid_was, gid_was);
    return res;
}

/* ---- large moves split over helper threads ----
 * One thread's process_vm_readv/writev moves 6-8 GB/s (it pins and copies
 * page by page), below what the DMA behind it does; a move of at least
 * SPLIT_MIN is cut into equal parts, the calling thread doing the first and
 * helpers the others. The helpers live for the process (a session's), one
 * move at a time. */
#define WAYS_MAX  4
#define SPLIT_MIN ((size_t)1 << 20)

static struct {
    pthread_once_t   once;
    int              ways;    /* parts of a split move, 1: no helpers */
    pthread_mutex_t  busy;    /* one move at a time */
    pthread_mutex_t  mu;
    pthread_cond_t   go, done;
    uint64_t         gen;     /* bumped per move */
    int              pending; /* helpers still moving */
    const flyt_session *s;
    int              write;
    struct { void *local; uint64_t remote; size_t len; CUresult res; } part[WAYS_MAX];
} helpers = {.once = PTHREAD_ONCE_INIT, .busy = PTHREAD_MUTEX_INITIALIZER,
             .mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER,
             .done = PTHREAD_COND_INITIALIZER};

static void *helper_main(void *arg)
{
    int me = (int)(intptr_t)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&helpers.mu);
    for (;;) {
        while (helpers.gen == seen)
            pthread_cond_wait(&helpers.go, &helpers.mu);
        seen = helpers.gen;
        pthread_mutex_unlock(&helpers.mu);
        helpers.part[me].res = peer_io(helpers.s, helpers.part[me].local, helpers.part[me].remote,
                                       helpers.part[me].len, helpers.write);
        pthread_mutex_lock(&helpers.mu);
        if (--helpers.pending == 0)
            pthread_cond_signal(&helpers.done);
    }
    return NULL;
}

/* As many helpers as half the CPUs allow, up to WAYS_MAX - 1; FLYT_PEER_THREADS
 * (1 to WAYS_MAX) sets the parts instead. Helpers block every signal. */
static void helpers_start(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int ways = cpus >= 8 ? WAYS_MAX : cpus >= 4 ? 2 : 1;
    const char *env = getenv("FLYT_PEER_THREADS");
    if (env && *env >= '1' && *env <= '0' + WAYS_MAX && env[1] == '\0')
        ways = *env - '0';
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    helpers.ways = 1;
    for (int i = 1; i < ways; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, helper_main, (void *)(intptr_t)i) != 0)
            break;
        pthread_detach(t);
        helpers.ways = i + 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static CUresult peer_move(const flyt_session *s, void *local, uint64_t remote, size_t len, int write)
{
    pthread_once(&helpers.once, helpers_start);
    if (len < SPLIT_MIN || helpers.ways < 2 || pthread_mutex_trylock(&helpers.busy) != 0)
        return peer_io(s, local, remote, len, write); /* small, no helpers, or another move runs */
    int ways = helpers.ways;
    /* page-aligned parts of about len / ways; the last takes what is left */
    size_t each = (len / (size_t)ways + 4095) & ~(size_t)4095, at = 0;
    pthread_mutex_lock(&helpers.mu);
    helpers.s = s;
    helpers.write = write;
    for (int i = 0; i < ways; i++) {
        size_t n = i == ways - 1 || len - at < each ? len - at : each;
        helpers.part[i].local = (char *)local + at;
        helpers.part[i].remote = remote + at;
        helpers.part[i].len = n;
        helpers.part[i].res = CUDA_SUCCESS;
        at += n;
    }
    helpers.pending = ways - 1;
    helpers.gen++;
    pthread_cond_broadcast(&helpers.go);
    pthread_mutex_unlock(&helpers.mu);
    CUresult res = peer_io(s, helpers.part[0].local, helpers.part[0].remote, helpers.part[0].len, write);
    pthread_mutex_lock(&helpers.mu);
    while (helpers.pending > 0)
        pthread_cond_wait(&helpers.done, &helpers.mu);
    pthread_mutex_unlock(&helpers.mu);
    for (int i = 1; i < ways && res == CUDA_SUCCESS; i++)
        res = helpers.part[i].res;
    pthread_mutex_unlock(&helpers.busy);
    return res;
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
    if (c->result == CUDA_SUCCESS)
        c->result = flyt_capture_refuse(s, stream, "a host-to-device copy from pageable memory");
    for (uint64_t off = 0; c->result == CUDA_SUCCESS && off < r->size;) {
        size_t want = r->size - off < CHUNK ? (size_t)(r->size - off) : CHUNK, got = 0;
        void *buf = s->b->ops->staging_get(s->b, want, &got);
        if (buf == NULL || got == 0) {
            c->result = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        c->result = peer_move(s, buf, r->src + off, got, 0);
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

/* Two staging buffers: while one chunk is written into the client, the DMA
 * of the next fills the other. */
struct dtoh_pipe {
    void        *buf[2];
    size_t       cap;
    flyt_bhandle done[2]; /* events marking each buffer's DMA */
};

static CUresult pipe_open(flyt_session *s, struct dtoh_pipe *p, uint64_t size)
{
    size_t want = size < CHUNK ? (size_t)size : CHUNK, got[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        p->buf[i] = s->b->ops->staging_get(s->b, want, &got[i]);
        if (p->buf[i] == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (FLYT_BCALL(s, event_create, CU_EVENT_DISABLE_TIMING, &p->done[i]) != CUDA_SUCCESS)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->cap = got[0] < got[1] ? got[0] : got[1];
    return CUDA_SUCCESS;
}

static void pipe_close(flyt_session *s, struct dtoh_pipe *p)
{
    for (int i = 0; i < 2; i++) {
        if (p->buf[i])
            s->b->ops->staging_put(s->b, p->buf[i]);
        if (p->done[i])
            FLYT_BCALL(s, event_destroy, p->done[i]);
    }
}

static CUresult pipe_fill(flyt_session *s, struct dtoh_pipe *p, int i, uint64_t src, size_t n,
                          flyt_bhandle stream)
{
    CUresult e = FLYT_BCALL(s, dtoh_host, p->buf[i], src, n, stream);
    return e == CUDA_SUCCESS ? FLYT_BCALL(s, event_record, p->done[i], stream, 0) : e;
}

int handle_MEMCPY_DTOH_PEER(flyt_session *s, flyt_call *c)
{
    const flyt_req_memcpy_peer *r = c->req;
    flyt_bhandle stream;
    c->result = peer_ready(s, r, &stream);
    if (c->result != CUDA_SUCCESS || r->size == 0)
        return FLYT_CONT;
    struct dtoh_pipe p = {{NULL, NULL}, 0, {NULL, NULL}};
    c->result = pipe_open(s, &p, r->size);
    uint64_t next = 0; /* first byte not yet queued */
    int cur = 0;
    if (c->result == CUDA_SUCCESS) {
        size_t n = r->size < p.cap ? (size_t)r->size : p.cap;
        c->result = pipe_fill(s, &p, cur, r->src, n, stream);
        next = n;
    }
    for (uint64_t off = 0; c->result == CUDA_SUCCESS && off < r->size;) {
        size_t n = r->size - off < p.cap ? (size_t)(r->size - off) : p.cap;
        if (next < r->size) { /* queue the next chunk before waiting on this one */
            size_t m = r->size - next < p.cap ? (size_t)(r->size - next) : p.cap;
            c->result = pipe_fill(s, &p, !cur, r->src + next, m, stream);
            next += m;
        }
        if (c->result == CUDA_SUCCESS)
            c->result = FLYT_BCALL(s, event_sync, p.done[cur]);
        if (c->result == CUDA_SUCCESS)
            c->result = peer_move(s, p.buf[cur], r->dst + off, n, 1);
        off += n;
        cur = !cur;
    }
    if (c->result != CUDA_SUCCESS)
        FLYT_BCALL(s, stream_sync, stream); /* nothing may still write a buffer we return */
    pipe_close(s, &p);
    return FLYT_CONT;
}

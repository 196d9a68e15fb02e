/*
 * The per-connection loop run in a forked child: HELLO, then read a frame,
 * validate it, dispatch it through the table generated from flyt_ops.def,
 * answer it. Also the one path every outgoing frame takes.
 */
#include "ipc.h"
#include "session.h"
#include "resize.h"
#include "state.h"
#include "stream_attrs.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "flyt_assert.h"
#include "flyt_clock.h"
#include "flyt_log.h"
#include "flyt_reader.h"
#include "flyt_transport.h"

/* Room for any op's request and reply struct. */
union flyt_req_any {
#define FLYT_OP(name, num, req, rep, flags) req r_##name;
#include "flyt_ops.def"
#undef FLYT_OP
};
union flyt_rep_any {
#define FLYT_OP(name, num, req, rep, flags) rep r_##name;
#include "flyt_ops.def"
#undef FLYT_OP
};

static const flyt_handler handlers[FLYT_OP_MAX] = {
#define FLYT_OP(name, num, req, rep, flags) [num] = handle_##name,
#include "flyt_ops.def"
#undef FLYT_OP
};

/* ---- sending ---------------------------------------------------------
 * One thread at a time holds the sender role (send_busy). The session thread
 * waits for it; a driver thread posting a callback never waits: if the role
 * is taken it queues its frame, and the holder sends the queue on release.
 * This matters because the session thread keeps the role for a whole
 * streamed DTOH reply while the copy may wait on a host function. */

static void send_acquire(flyt_session *s)
{
    pthread_mutex_lock(&s->send_mu);
    while (s->send_busy)
        pthread_cond_wait(&s->send_cv, &s->send_mu);
    s->send_busy = 1;
    pthread_mutex_unlock(&s->send_mu);
}

/* Only the role holder calls this. After one failure nothing more is sent:
 * the frame stream would be broken anyway. */
static int send_iov(flyt_session *s, struct iovec *iov, int n)
{
    FLYT_ASSERT(s->send_busy);
    if (s->send_failed)
        return -1;
    if (flyt_link_writev(&s->link, iov, n) != 0) {
        s->send_failed = 1;
        flyt_debug("send to %s failed: %s", s->peer, strerror(errno));
        return -1;
    }
    return 0;
}

/* What the driver printed since the last frame goes out ahead of the next
 * one: a reply to a call that synchronised brings its device output with
 * it, and a host function runs after the output printed before it (the
 * driver flushes device printf before running a stream callback). Costs an
 * lseek per stream when there is none. The caller holds the sender role. */
static void send_output(flyt_session *s)
{
    static char chunk[FLYT_MAX_OUTPUT_CHUNK]; /* one sender at a time */
    FLYT_ASSERT(s->send_busy);
    if (!flyt_output_flush(&s->output))
        return;
    for (uint32_t stream = 0; stream < 2; stream++) {
        size_t n;
        while ((n = flyt_output_take(&s->output, (int)stream, chunk, sizeof chunk)) > 0) {
            struct flyt_msg_output m = {stream + 1, 0};
            struct flyt_frame_hdr h = {(uint32_t)(sizeof m + n), FLYT_OP_OUTPUT, 0, 0, 0};
            struct iovec iov[3] = {{&h, sizeof h}, {&m, sizeof m}, {chunk, n}};
            send_iov(s, iov, 3);
        }
    }
}

static void send_callback_frame(flyt_session *s, const struct flyt_cb_msg *m)
{
    send_output(s);
    struct flyt_frame_hdr h = {sizeof(struct flyt_msg_callback), FLYT_OP_CALLBACK, 0, 0, 0};
    struct flyt_msg_callback msg = {m->callback_id, m->status, m->keep};
    struct iovec iov[2] = {{&h, sizeof h}, {&msg, sizeof msg}};
    send_iov(s, iov, 2);
}

static void send_release(flyt_session *s);

void flyt_send_share_changed(flyt_session *s, int sm_count, uint64_t total_mem)
{
    if (!s->share_frames)
        return;
    struct flyt_frame_hdr h = {sizeof(struct flyt_msg_share), FLYT_OP_SHARE_CHANGED, 0, 0, 0};
    struct flyt_msg_share m = {total_mem, sm_count, 0};
    struct iovec iov[2] = {{&h, sizeof h}, {&m, sizeof m}};
    send_acquire(s);
    send_output(s);
    send_iov(s, iov, 2);
    send_release(s);
}

static void send_release(flyt_session *s)
{
    pthread_mutex_lock(&s->send_mu);
    FLYT_ASSERT(s->send_busy); /* released only by its holder */
    while (s->cbq_head) {
        struct flyt_cb_msg *m = s->cbq_head;
        s->cbq_head = s->cbq_tail = NULL;
        pthread_mutex_unlock(&s->send_mu);
        while (m) {
            struct flyt_cb_msg *next = m->next;
            send_callback_frame(s, m);
            free(m);
            m = next;
        }
        pthread_mutex_lock(&s->send_mu);
    }
    s->send_busy = 0;
    pthread_cond_signal(&s->send_cv);
    pthread_mutex_unlock(&s->send_mu);
}

uint64_t flyt_post_callback(struct flyt_cb_msg *m)
{
    flyt_session *s = m->s;
    m->next = NULL;
    pthread_mutex_lock(&s->send_mu);
    /* tickets in the order the frames go out, which is the order the client
     * runs and acknowledges them */
    uint64_t ticket = ++s->cb_posted, id = m->callback_id; /* m is freed once sent */
    /* the queue waits only behind a send in progress */
    FLYT_ASSERT((s->cbq_head == NULL) == (s->cbq_tail == NULL));
    FLYT_ASSERT(s->send_busy || s->cbq_head == NULL);
    if (s->send_busy) {
        if (s->cbq_tail)
            s->cbq_tail->next = m;
        else
            s->cbq_head = m;
        s->cbq_tail = m;
        pthread_mutex_unlock(&s->send_mu);
        flyt_debug("CALLBACK %llu (host function %llu) queued behind a send in progress",
                   (unsigned long long)id, (unsigned long long)ticket);
        return ticket;
    }
    s->send_busy = 1;
    pthread_mutex_unlock(&s->send_mu);
    flyt_debug("CALLBACK %llu (host function %llu) sent", (unsigned long long)id,
               (unsigned long long)ticket);
    send_callback_frame(s, m);
    free(m);
    send_release(s);
    return ticket;
}

static int32_t take_deferred(flyt_session *s)
{
    int32_t d = s->deferred;
    s->deferred = 0;
    return d;
}

static void note_failure(flyt_session *s, const flyt_call *c, int32_t result)
{
    if (result == CUDA_SUCCESS)
        return;
    if (c->hdr->flags & FLYT_F_NOREPLY) {
        flyt_debug("%s (seq %u, no reply) failed: %d; deferred", flyt_op_name(c->hdr->op),
                   c->hdr->seq, result);
        if (s->deferred == CUDA_SUCCESS)
            s->deferred = result;
    } else {
        flyt_debug("%s (seq %u) failed: %d", flyt_op_name(c->hdr->op), c->hdr->seq, result);
    }
}

/* Header, {result, deferred} and the reply struct, for a reply whose payload
 * also carries data_len more bytes. The caller holds the sender role. */
static int send_reply_head(flyt_session *s, flyt_call *c, int32_t result, uint64_t data_len)
{
    FLYT_ASSERT(s->send_busy);
    uint64_t length = sizeof(struct flyt_reply) + c->rep_size + data_len;
    if (length > UINT32_MAX)
        return -1; /* callers bound data_len far below this */
    send_output(s);
    struct flyt_frame_hdr h = {(uint32_t)length, c->hdr->op, FLYT_F_REPLY, c->hdr->seq, 0};
    struct flyt_reply r = {result, take_deferred(s)};
    struct iovec iov[3] = {{&h, sizeof h}, {&r, sizeof r}, {c->rep, c->rep_size}};
    return send_iov(s, iov, 3);
}

int flyt_reply(flyt_session *s, flyt_call *c, int32_t result, const void *data, size_t data_len)
{
    c->replied = 1;
    note_failure(s, c, result);
    if (c->hdr->flags & FLYT_F_NOREPLY)
        return 0;
    send_acquire(s);
    int rc = send_reply_head(s, c, result, data_len);
    if (rc == 0 && data_len > 0) {
        struct iovec iov = {(void *)data, data_len};
        rc = send_iov(s, &iov, 1);
    }
    send_release(s);
    return rc;
}

int flyt_reply_begin(flyt_session *s, flyt_call *c, int32_t result, uint64_t data_len)
{
    c->replied = 1;
    note_failure(s, c, result);
    send_acquire(s);
    return send_reply_head(s, c, result, data_len);
}

int flyt_reply_data(flyt_session *s, const void *buf, size_t len)
{
    struct iovec iov = {(void *)buf, len};
    return send_iov(s, &iov, 1);
}

void flyt_reply_end(flyt_session *s) { send_release(s); }

/* ---- receiving ------------------------------------------------------- */

#define IN_BUF (64 * 1024)


/* ---- the reader role (host functions in stream order) ------------------
 * A host function's driver thread waits for the client's HOST_FUNC_DONE.
 * The session thread may itself be blocked in the driver on that very host
 * function (a synchronisation, a copy on its stream), so the waiting thread
 * reads the socket itself whenever the session thread is not reading: it
 * appends what arrives to the input buffer, which the session thread later
 * consumes as if it had read it, and counts the acknowledgements among the
 * frames. The session thread takes the role around each read only once the
 * session has had a host function; before that no such thread exists. */

static void note_frame(flyt_session *s, const struct flyt_frame_hdr *h, uint64_t at)
{
    if (at < s->scan_pos)
        return; /* looked at already, by a read-ahead */
    if (h->op == FLYT_OP_HOST_FUNC_DONE && !(h->flags & FLYT_F_REPLY))
        __atomic_add_fetch(&s->cb_acked, 1, __ATOMIC_RELEASE);
    s->scan_pos = at + sizeof *h + h->length;
}

/* The frame headers among the buffered bytes beyond scan_pos. */
static void scan_ahead(flyt_session *s)
{
    while (s->scan_pos + sizeof(struct flyt_frame_hdr) <= s->in.total) {
        struct flyt_frame_hdr h;
        memcpy(&h, flyt_reader_at(&s->in, s->scan_pos), sizeof h);
        note_frame(s, &h, s->scan_pos);
    }
}


/* One step of reading ahead, as the role's holder: waits for bytes or for
 * the session thread's wake-up. A descriptor not yet taken, or a full
 * buffer, leaves only the wake-up to wait for (and a timeout, to look again). */
static int read_ahead_step(flyt_session *s)
{
    FLYT_ASSERT(s->rd_owner == FLYT_RD_AHEAD); /* no other thread writes it meanwhile */
    if (s->in.passed_fd >= 0 && s->n_ahead_fds < FLYT_AHEAD_FDS) {
        s->ahead_fds[s->n_ahead_fds].fd = s->in.passed_fd;
        s->ahead_fds[s->n_ahead_fds++].end = s->in.fd_end;
        s->in.passed_fd = -1;
    }
    int can_read = s->in.passed_fd < 0 &&
                   flyt_reader_make_room(&s->in, IN_BUF, (size_t)FLYT_MAX_PAYLOAD * 2) == 0;
    struct pollfd p[2] = {{.fd = s->wake_fd, .events = POLLIN}, {.fd = s->link.fd, .events = POLLIN}};
    int waiting = can_read && flyt_link_pending(&s->link); /* poll cannot see those */
    if (poll(p, can_read ? 2 : 1, waiting ? 0 : can_read ? -1 : 50) < 0)
        return 0;
    p[1].revents |= waiting ? POLLIN : 0;
    if (p[0].revents & POLLIN) {
        uint64_t n;
        if (read(s->wake_fd, &n, sizeof n) < 0) {
            /* counted down already by another read */
        }
        return 0;
    }
    if (!can_read || !(p[1].revents & (POLLIN | POLLHUP | POLLERR)))
        return 0;
    if (flyt_reader_fill(&s->in) <= 0)
        return -1; /* the connection is gone: the session thread finds out too */
    scan_ahead(s);
    return 0;
}

static int acked(flyt_session *s, uint64_t ticket)
{
    return __atomic_load_n(&s->cb_acked, __ATOMIC_ACQUIRE) >= ticket;
}

void flyt_host_func_wait(flyt_session *s, uint64_t ticket)
{
    if (!s->hf_ack)
        return;
    flyt_debug("host function %llu waits for its acknowledgement (%llu so far)",
               (unsigned long long)ticket,
               (unsigned long long)__atomic_load_n(&s->cb_acked, __ATOMIC_RELAXED));
    pthread_mutex_lock(&s->rd_mu);
    while (!acked(s, ticket) && !s->rd_over) {
        if (s->rd_owner != FLYT_RD_NONE || s->rd_want) {
            pthread_cond_wait(&s->rd_cv, &s->rd_mu);
            continue;
        }
        s->rd_owner = FLYT_RD_AHEAD;
        pthread_mutex_unlock(&s->rd_mu);
        /* The session thread's last read may have brought the acknowledgement
         * in with its own frame (one recv takes what has arrived), then blocked
         * in the driver on this very host function: look at the buffer first. */
        scan_ahead(s);
        int gone = acked(s, ticket) ? 0 : read_ahead_step(s);
        pthread_mutex_lock(&s->rd_mu);
        if (gone)
            s->rd_over = 1;
        s->rd_owner = FLYT_RD_NONE;
        pthread_cond_broadcast(&s->rd_cv);
    }
    int over = s->rd_over;
    pthread_mutex_unlock(&s->rd_mu);
    flyt_debug("host function %llu %s", (unsigned long long)ticket,
               over ? "waits no more: the session ends" : "acknowledged");
}

/* The session thread's side: 1 when it took the role (give it back). */
static int role_take(flyt_session *s)
{
    if (!s->hf_used)
        return 0;
    pthread_mutex_lock(&s->rd_mu);
    s->rd_want = 1;
    int woke = 0;
    while (s->rd_owner == FLYT_RD_AHEAD) {
        if (!woke++) {
            uint64_t one = 1;
            if (write(s->wake_fd, &one, sizeof one) < 0) {
                /* an eventfd write fails only at its limit: it is readable then */
            }
        }
        pthread_cond_wait(&s->rd_cv, &s->rd_mu);
    }
    FLYT_ASSERT(s->rd_owner == FLYT_RD_NONE); /* only the session thread takes it so */
    s->rd_owner = FLYT_RD_SESSION;
    s->rd_want = 0;
    pthread_mutex_unlock(&s->rd_mu);
    return 1;
}

static void role_give(flyt_session *s, int taken)
{
    if (!taken)
        return;
    pthread_mutex_lock(&s->rd_mu);
    FLYT_ASSERT(s->rd_owner == FLYT_RD_SESSION);
    s->rd_owner = FLYT_RD_NONE;
    pthread_cond_broadcast(&s->rd_cv);
    pthread_mutex_unlock(&s->rd_mu);
}

/* No more reading: host functions still waiting return (session end). */
static void reading_over(flyt_session *s)
{
    pthread_mutex_lock(&s->rd_mu);
    s->rd_over = 1;
    uint64_t one = 1;
    if (s->wake_fd >= 0 && write(s->wake_fd, &one, sizeof one) < 0) {
        /* readable already */
    }
    pthread_cond_broadcast(&s->rd_cv);
    pthread_mutex_unlock(&s->rd_mu);
}

/* Exactly len bytes, with the reader role. */
static int sess_read(flyt_session *s, void *buf, size_t len)
{
    int taken = role_take(s);
    int rc = flyt_reader_read(&s->in, buf, len);
    role_give(s, taken);
    return rc;
}

/* Drops len bytes, with the reader role (as one long read would hold it). */
static int sess_skip(flyt_session *s, uint64_t len)
{
    int taken = role_take(s);
    int rc = flyt_reader_skip(&s->in, len);
    role_give(s, taken);
    return rc;
}

/* Descriptors and the read-ahead: each passed descriptor belongs to the
 * frame that ends where the read that brought it ended. A read-ahead moves
 * the one not yet taken aside (ahead_fds) before it reads on, so that a
 * later one does not replace it. All of this with the reader role. */
int flyt_take_passed_fd(flyt_session *s)
{
    int taken = role_take(s);
    int fd = -1;
    if (s->in.passed_fd >= 0 && s->in.fd_end == s->frame_end) {
        fd = s->in.passed_fd;
        s->in.passed_fd = -1;
    }
    for (int i = 0; fd < 0 && i < s->n_ahead_fds; i++)
        if (s->ahead_fds[i].end == s->frame_end) {
            fd = s->ahead_fds[i].fd;
            s->ahead_fds[i] = s->ahead_fds[--s->n_ahead_fds];
        }
    role_give(s, taken);
    return fd;
}

int flyt_client_gone(flyt_session *s, uint64_t step)
{
    if (step % 256 != 0 || !flyt_peer_hung_up(s->link.fd))
        return 0;
    flyt_info("%s hung up during a request; ending its session", s->peer);
    return 1;
}

/* A descriptor that arrived with this frame or an earlier one and that no
 * handler took is closed; one for a later frame stays. */
static void drop_stray_fd(flyt_session *s)
{
    int taken = role_take(s);
    if (s->in.passed_fd >= 0 && s->in.fd_end <= s->frame_end) {
        close(s->in.passed_fd);
        s->in.passed_fd = -1;
    }
    for (int i = 0; i < s->n_ahead_fds;)
        if (s->ahead_fds[i].end <= s->frame_end) {
            close(s->ahead_fds[i].fd);
            s->ahead_fds[i] = s->ahead_fds[--s->n_ahead_fds];
        } else {
            i++;
        }
    role_give(s, taken);
}

int flyt_recv_data(flyt_session *s, flyt_call *c, void *buf, size_t len)
{
    if (len > c->data_len)
        return -1; /* a handler bug: never read into the next frame */
    if (sess_read(s, buf, len) != 0)
        return -1;
    c->data_len -= (uint32_t)len;
    return 0;
}

int flyt_skip_data(flyt_session *s, flyt_call *c)
{
    if (sess_skip(s, c->data_len) != 0)
        return -1;
    c->data_len = 0;
    return 0;
}

int flyt_violation(flyt_session *s, const flyt_call *c, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    flyt_error("protocol violation by %s: op %u (%s) seq %u length %u: %s; ending session",
               s->peer, c->hdr->op, flyt_op_name(c->hdr->op), c->hdr->seq, c->hdr->length, why);
    return FLYT_END_PROTO;
}

int flyt_expect_data(flyt_session *s, flyt_call *c, uint64_t extra)
{
    if (c->data_len != extra)
        return flyt_violation(s, c, "payload carries %u bytes after the request, expected %llu",
                              c->data_len, (unsigned long long)extra);
    return FLYT_CONT;
}

/* ---- lookups --------------------------------------------------------- */

CUresult flyt_lookup_stream(flyt_session *s, uint64_t id, flyt_bhandle *out)
{
    switch (id) {
    case FLYT_STREAM_DEFAULT: *out = FLYT_BSTREAM_DEFAULT; return CUDA_SUCCESS;
    case FLYT_STREAM_LEGACY: *out = FLYT_BSTREAM_LEGACY; return CUDA_SUCCESS;
    case FLYT_STREAM_PER_THREAD: *out = FLYT_BSTREAM_PER_THREAD; return CUDA_SUCCESS;
    default: return flyt_lookup(s, id, FLYT_H_STREAM, out);
    }
}

CUresult flyt_lookup(flyt_session *s, uint64_t id, enum flyt_htype type, flyt_bhandle *out)
{
    struct flyt_hentry *e = flyt_handles_get(&s->handles, id, type);
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = e->bh;
    return CUDA_SUCCESS;
}

/* ---- session ops handled here ----------------------------------------- */

int handle_HELLO(flyt_session *s, flyt_call *c)
{
    return flyt_violation(s, c, "HELLO after the session started");
}

/* Counted as it was read (note_frame): nothing more to do. */
int handle_HOST_FUNC_DONE(flyt_session *s, flyt_call *c)
{
    (void)s;
    (void)c;
    return FLYT_CONT;
}

int handle_GOODBYE(flyt_session *s, flyt_call *c)
{
    if (flyt_reply(s, c, CUDA_SUCCESS, NULL, 0) != 0)
        return FLYT_END_IO;
    return FLYT_END_BYE;
}

/* Answered once every request before it was consumed: nothing to do. */
int handle_PING(flyt_session *s, flyt_call *c)
{
    (void)s;
    (void)c;
    return FLYT_CONT;
}

/* ---- session moves (docs/protocol.md) ---------------------------------- */

void flyt_session_stream_starts(flyt_session *s)
{
    s->stream_base = s->frame_end - s->resume_at;
}

uint64_t flyt_session_consumed(const flyt_session *s)
{
    return flyt_reader_offset(&s->in) - s->stream_base;
}

int flyt_capture_holds(flyt_session *s, struct flyt_capture_hold *h, uint64_t gen, long wait_ms,
                       const char *what)
{
    long long now = flyt_mono_ms();
    if (!s->b || s->captures == 0 || (h->gen == gen && now >= h->until_ms)) {
        h->gen = 0;
        return 0;
    }
    if (h->gen != gen) {
        h->gen = gen;
        h->until_ms = now + wait_ms;
        flyt_info("session for %s: the %s waits up to %ld ms for its stream capture to end",
                  s->peer, what, wait_ms);
    }
    return 1;
}

uint64_t flyt_session_acks_ahead(const flyt_session *s)
{
    uint64_t n = 0;
    for (uint64_t pos = flyt_reader_offset(&s->in);
         pos < s->scan_pos && pos + sizeof(struct flyt_frame_hdr) <= s->in.total;) {
        struct flyt_frame_hdr h;
        memcpy(&h, flyt_reader_at(&s->in, pos), sizeof h);
        n += h.op == FLYT_OP_HOST_FUNC_DONE && !(h.flags & FLYT_F_REPLY);
        pos += sizeof h + h.length;
    }
    return n;
}

/* The identity the HELLO reply gives: a restored session's own, else a new one. */
static void choose_instance(flyt_session *s, flyt_rep_hello *rep)
{
    uint64_t at;
    if (s->cfg->restore && flyt_state_client(s->cfg->restore, s->instance, &at)) {
        rep->flags |= FLYT_HELLO_RESTORED;
        rep->resume_offset = at;
    } else if (getrandom(s->instance, sizeof s->instance, 0) != (ssize_t)sizeof s->instance) {
        struct timespec t; /* no entropy: the clock and the pid still tell sessions apart */
        clock_gettime(CLOCK_REALTIME, &t);
        uint64_t mix[2] = {(uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec,
                           (uint64_t)getpid()};
        memcpy(s->instance, mix, sizeof s->instance);
    }
    memcpy(rep->instance, s->instance, sizeof rep->instance);
}

int flyt_session_tell_moved(flyt_session *s, uint32_t reason)
{
    if (s->client_minor < FLYT_MINOR_RESUME)
        return -1;
    struct flyt_msg_moved m = {flyt_session_consumed(s), reason, 0};
    struct flyt_frame_hdr h = {sizeof m, FLYT_OP_SESSION_MOVED, 0, 0, 0};
    struct iovec iov[2] = {{&h, sizeof h}, {&m, sizeof m}};
    send_acquire(s);
    int rc = send_iov(s, iov, 2);
    send_release(s);
    flyt_info("told %s its session %s at request byte %llu", s->peer,
              m.reason == FLYT_MOVED_SUSPENDED ? "is suspended (preempted)" : "moved",
              (unsigned long long)m.consumed);
    s->moved_told = rc == 0;
    return rc == 0 ? 0 : -1;
}

/* After a checkpoint that stopped the session (its client told already, see
 * flyt_session_tell_moved): the socket is half-closed and the requests the
 * client sent meanwhile are read and dropped until it closes (closing with
 * unread bytes would reset the connection, and the reset could destroy the
 * frame before the client read it). */
static void close_after_move(flyt_session *s)
{
    if (!s->moved_told || shutdown(s->link.fd, SHUT_WR) != 0)
        return;
    char scrap[4096];
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        struct pollfd p = {.fd = s->link.fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0 && read(s->link.fd, scrap, sizeof scrap) <= 0)
            return; /* the client closed */
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (t.tv_sec - t0.tv_sec < 5);
}

/* ---- the loop -------------------------------------------------------- */

/* 0: a header was read; 1: woken for a live resize before any byte came;
 * -1: the connection ended. */
static int read_header(flyt_session *s, struct flyt_frame_hdr *h, const char *when)
{
    int taken = role_take(s);
    if (s->cfg->poll_us && flyt_reader_buffered(&s->in) == 0 && !flyt_link_pending(&s->link))
        flyt_spin_readable(s->link.fd, s->cfg->poll_us);
    /* idle: a live resize wakes us too, and is applied by serve() without the role
     * (it drains the device, which may wait for a host function's acknowledgement) */
    if (flyt_reader_buffered(&s->in) == 0 && !flyt_link_pending(&s->link) && flyt_resize_wait(s)) {
        role_give(s, taken);
        return 1;
    }
    s->frame_start = flyt_reader_offset(&s->in);
    int rc = flyt_reader_read(&s->in, h, sizeof *h);
    if (rc == 0) {
        s->frame_end = s->frame_start + sizeof *h + h->length;
        note_frame(s, h, s->frame_start); /* with the role: counted once */
    }
    role_give(s, taken);
    if (rc == 0)
        return 0;
    if (errno == 0)
        flyt_info("%s closed the connection%s", s->peer, when);
    else if (flyt_peer_vanished(errno)) /* TCP keepalive or TCP_USER_TIMEOUT gave up on it */
        flyt_info("%s stopped answering%s (its machine or network is gone: no answer to TCP "
                  "keepalive); ending its session", s->peer, when);
    else
        flyt_info("reading from %s failed%s: %s", s->peer, when, strerror(errno));
    return -1;
}

/* A minimal error answer to a frame we refuse before the session starts:
 * the client learns why if it is a Flyt client at all. */
static void refuse(flyt_session *s, const struct flyt_frame_hdr *req, const void *rep,
                   uint32_t rep_size)
{
    struct flyt_frame_hdr h = {(uint32_t)sizeof(struct flyt_reply) + rep_size, req->op,
                               FLYT_F_REPLY, req->seq, 0};
    struct flyt_reply r = {FLYT_ERR_PROTOCOL, 0};
    struct iovec iov[3] = {{&h, sizeof h}, {&r, sizeof r}, {(void *)rep, rep_size}};
    send_acquire(s);
    send_iov(s, iov, rep_size ? 3 : 2);
    send_release(s);
}

static int hello(flyt_session *s)
{
    struct flyt_frame_hdr h;
    int got;
    while ((got = read_header(s, &h, " before HELLO")) > 0)
        ; /* a resize before HELLO: the backend opens on the latest share anyway */
    if (got != 0)
        return FLYT_END_IO;
    flyt_call c = {.hdr = &h};
    flyt_rep_hello rep = {.major = FLYT_PROTO_MAJOR, .minor = FLYT_PROTO_MINOR,
                          .server_pid = (uint32_t)getpid()};
    if (h.op != FLYT_OP_HELLO) {
        refuse(s, &h, NULL, 0);
        return flyt_violation(s, &c, "first frame is not HELLO");
    }
    const char *why = flyt_check_request(&h);
    if (why) {
        refuse(s, &h, &rep, sizeof rep);
        return flyt_violation(s, &c, "%s", why);
    }
    flyt_req_hello req;
    if (sess_read(s, &req, sizeof req) != 0)
        return FLYT_END_IO;
    if (req.magic != FLYT_PROTO_MAGIC || req.major != FLYT_PROTO_MAJOR) {
        refuse(s, &h, &rep, sizeof rep);
        return flyt_violation(s, &c, "client speaks magic 0x%08x protocol %u.%u, server 0x%08x %u.%u",
                              req.magic, req.major, req.minor, FLYT_PROTO_MAGIC,
                              FLYT_PROTO_MAJOR, FLYT_PROTO_MINOR);
    }
    req.client_host[sizeof req.client_host - 1] = '\0';
    flyt_info("session for %s: client pid %u on '%s', protocol %u.%u", s->peer, req.client_pid,
              req.client_host, req.major, req.minor);
    s->hf_ack = req.minor >= FLYT_MINOR_HOST_FUNC_ACK;
    s->client_minor = req.minor;
    if (req.flags & FLYT_HELLO_RESUME)
        flyt_info("%s reconnects to resume its session", s->peer);
    s->share_frames = req.minor >= FLYT_MINOR_SHARE_CHANGED;
    if (req.minor >= FLYT_MINOR_DEVICE_OUTPUT && flyt_output_capture(&s->output) != 0)
        flyt_warn("the driver's output stays in this log, not with the client: %s",
                  strerror(errno));

    c.rep = &rep;
    c.rep_size = sizeof rep;
    choose_instance(s, &rep);
    if (s->cfg->cache_dir)
        rep.flags |= FLYT_HELLO_IMAGE_CACHE;
    if (!s->cfg->session_id && flyt_session_admit(s) != 0) {
        refuse(s, &h, &rep, sizeof rep);
        return FLYT_END_AUTH;
    }
    if (s->cfg->session_id) {
        /* Admission first: the GPU opens only for a client whose session
         * token verifies (handle_AUTH). The session sees one device. */
        rep.flags |= FLYT_HELLO_AUTH_REQUIRED;
        rep.device_count = 1;
        snprintf(rep.backend, sizeof rep.backend, "%s", s->cfg->backend_kind);
        if (flyt_reply(s, &c, CUDA_SUCCESS, NULL, 0) != 0)
            return FLYT_END_IO;
        return FLYT_CONT;
    }

    /* The backend opens only now, so a stray connection never touches the GPU. */
    char err[256] = "";
    int32_t result = flyt_session_open_backend(s, err, sizeof err);
    if (s->b == NULL) {
        flyt_error("%s", err);
    } else {
        int count = 0;
        result = FLYT_BCALL(s, device_count, &count);
        rep.device_count = count > 0 ? (uint32_t)count : 0;
        snprintf(rep.backend, sizeof rep.backend, "%s", s->b->ops->name ? s->b->ops->name : "?");
    }
    if (flyt_reply(s, &c, result, NULL, 0) != 0)
        return FLYT_END_IO;
    flyt_session_stream_starts(s);
    return s->b ? FLYT_CONT : FLYT_END_BACKEND;
}

static flyt_backend *preopened; /* flyt_session_preopen's (one session per process) */

int flyt_session_preopen(const struct flyt_server_config *cfg, char *err, size_t errlen)
{
    char why[256] = "";
    preopened = flyt_backend_open(cfg->backend_kind, cfg->gpu, why, sizeof why);
    if (preopened == NULL)
        snprintf(err, errlen, "cannot open backend %s on gpu %d: %s", cfg->backend_kind,
                 cfg->gpu, why);
    return preopened ? 0 : -1;
}

flyt_backend *flyt_session_preopened(void)
{
    return preopened;
}

/* The process's one session: static, as a driver thread may still post a callback
 * while the process exits and must not find a dead stack frame. */
static flyt_session the_session;
static int restored_early; /* flyt_session_restore_early's: its HELLO finds it restored */

static void session_init(flyt_session *s, const struct flyt_server_config *cfg)
{
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    flyt_resize_init(s);
    flyt_handles_init(&s->handles);
    flyt_hash_init(&s->stream_attrs);
    flyt_mutex_init(&s->send_mu);
    pthread_cond_init(&s->send_cv, NULL);
    flyt_mutex_init(&s->rd_mu);
    pthread_cond_init(&s->rd_cv, NULL);
}

int32_t flyt_session_restore_early(const struct flyt_server_config *cfg, char *err, size_t errlen)
{
    session_init(&the_session, cfg);
    the_session.peer = "(its client still to come)";
    int32_t r = flyt_session_open_backend(&the_session, err, errlen);
    the_session.admitted = 0; /* its client's HELLO (and token) admit it */
    restored_early = r == CUDA_SUCCESS;
    return r;
}

int32_t flyt_session_open_backend(flyt_session *s, char *err, size_t errlen)
{
    const struct flyt_server_config *cfg = s->cfg;
    if (restored_early) { /* backend, share and state in place before the client came */
        restored_early = 0;
        s->admitted = 1;
        return CUDA_SUCCESS;
    }
    if (preopened == NULL && flyt_session_preopen(cfg, err, errlen) != 0)
        return CUDA_ERROR_NO_DEVICE;
    s->b = preopened;
    preopened = NULL;
    const int *groups = cfg->sm_groups;
    int ngroups = cfg->sm_ngroups;
    unsigned gran = cfg->sm_granularity;
    flyt_resize_initial(s, &groups, &ngroups, &gran); /* resized before this session began */
    if (ngroups > 0) {
        int sms = 0;
        CUresult r = FLYT_BCALL(s, set_sm_share, gran, groups, ngroups, &sms);
        if (r != CUDA_SUCCESS) {
            snprintf(err, errlen, "cannot run on SM groups of %u SMs as asked (--sm-groups): "
                     "CUDA error %d", gran, (int)r);
            s->b->ops->close(s->b);
            s->b = NULL;
            return CUDA_ERROR_NO_DEVICE;
        }
        s->sm_count = sms;
        struct flyt_server_status *page = flyt_status_page();
        if (page)
            __atomic_store_n(&page->sm_count, (uint32_t)sms, __ATOMIC_RELEASE);
        flyt_info("session for %s runs on %d SMs", s->peer, sms);
    }
    if (cfg->restore) {
        CUresult r = flyt_state_restore(s, cfg->restore, err, errlen);
        if (r != CUDA_SUCCESS) { /* nothing of it stays */
            flyt_memtab_clear(&s->mem);
            flyt_handles_clear(&s->handles);
            flyt_state_globals_drop(s, 0);
            s->detached_mapped = 0;
            s->b->ops->close(s->b);
            s->b = NULL;
            return r;
        }
    }
    s->admitted = 1;
    return CUDA_SUCCESS;
}

static int admitted_fd = -1; /* one session per process */

int flyt_session_admit(flyt_session *s)
{
    alarm(0); /* admitted: no admission deadline any more */
    if (flyt_quota_child_admitted() != 0) {
        flyt_error("refusing %s: this server already has %d sessions, or its VM %d on this "
                   "node", s->peer, FLYT_STATUS_SLOTS, FLYT_VMQ_SLOTS);
        return -1;
    }
    if (admitted_fd >= 0) {
        char one = 'A';
        ssize_t w = write(admitted_fd, &one, 1);
        (void)w; /* the parent gone: nothing to tell */
        close(admitted_fd);
        admitted_fd = -1;
    }
    return 0;
}

/* Before admission: a short error answer (for a request that wants one),
 * then the session ends. */
static int refuse_unadmitted(flyt_session *s, const struct flyt_frame_hdr *h)
{
    if (!(h->flags & FLYT_F_NOREPLY)) {
        struct flyt_frame_hdr rh = {(uint32_t)sizeof(struct flyt_reply), h->op, FLYT_F_REPLY,
                                    h->seq, 0};
        struct flyt_reply r = {CUDA_ERROR_NOT_PERMITTED, 0};
        struct iovec iov[2] = {{&rh, sizeof rh}, {&r, sizeof r}};
        send_acquire(s);
        send_iov(s, iov, 2);
        send_release(s);
    }
    flyt_error("admission refused for %s: %s (op %u) before a session token was accepted; "
               "ending session", s->peer, flyt_op_name(h->op), h->op);
    return FLYT_END_AUTH;
}

static int dispatch(flyt_session *s, const struct flyt_frame_hdr *h)
{
    const struct flyt_op_info *info = flyt_op_info(h->op);
    union flyt_req_any req;
    union flyt_rep_any rep;
    if (sess_read(s, &req, info->req_size) != 0) {
        flyt_info("connection to %s lost inside a %s request", s->peer, flyt_op_name(h->op));
        return FLYT_END_IO;
    }
    memset(&rep, 0, info->rep_size);
    flyt_call c = {.hdr = h, .req = &req, .rep = &rep, .rep_size = info->rep_size,
                   .data_len = h->length - info->req_size};
    flyt_watch_enter(&s->watch, h->op, h->op == FLYT_OP_CALL ? req.r_CALL.id : 0);
    int rc = handlers[h->op](s, &c);
    flyt_watch_leave(&s->watch);
    if (rc == FLYT_END_IO)
        flyt_info("connection to %s lost during %s", s->peer, flyt_op_name(h->op));
    if (rc != FLYT_CONT)
        return rc;
    if (c.data_len != 0) {
        /* handlers consume their data; this only guards the frame stream */
        flyt_warn("%s left %u request bytes unread; skipping them", flyt_op_name(h->op), c.data_len);
        if (flyt_skip_data(s, &c) != 0)
            return FLYT_END_IO;
    }
    if (!c.replied && flyt_reply(s, &c, c.result, NULL, 0) != 0)
        return FLYT_END_IO;
    return FLYT_CONT;
}

static int serve(flyt_session *s)
{
    for (;;) {
        struct flyt_frame_hdr h;
        flyt_resize_poll(s); /* a live resize posted since the last request applies here */
        if (flyt_state_poll(s) != FLYT_CONT) { /* and a checkpoint */
            flyt_watch_stop(&s->watch); /* its client now leaves on purpose */
            close_after_move(s);
            return FLYT_END_BYE;
        }
        int got = read_header(s, &h, "");
        if (got > 0)
            continue; /* woken by a resize while idle */
        if (got != 0)
            return FLYT_END_IO;
        const char *why = flyt_check_request(&h);
        if (why) {
            flyt_call c = {.hdr = &h};
            return flyt_violation(s, &c, "%s", why);
        }
        if (!s->admitted && h.op != FLYT_OP_AUTH && h.op != FLYT_OP_GOODBYE)
            return refuse_unadmitted(s, &h);
        int rc = dispatch(s, &h);
        drop_stray_fd(s);
        if (rc != FLYT_CONT)
            return rc;
    }
}

/* A connection that has not been admitted in time (a valid HELLO, and on a managed
 * server a valid session token): the process just ends; the parent logs its exit status. */
static int admission_wants_token; /* which of the two lines admission_expired writes */

static void admission_expired(int sig)
{
    (void)sig;
    static const char token[] = "flyt-server: admission refused: no valid session token in time; "
                                "ending session\n";
    static const char hello[] = "flyt-server: admission refused: no valid HELLO in time; "
                                "ending session\n";
    ssize_t w = admission_wants_token ? write(flyt_log_fd(), token, sizeof token - 1)
                                      : write(flyt_log_fd(), hello, sizeof hello - 1);
    (void)w;
    _exit(FLYT_EXIT_AUTH);
}

/* TLS on this connection (cfg->tls_ctx: a TCP connection to a server with
 * --tls-cert), before any frame: within the admission time, as HELLO. 0, or
 * -1 when refused (logged). */
static int start_tls(flyt_session *s, const char *peer, const struct flyt_server_config *cfg)
{
    char err[512], how[128];
    int timeout_ms = (int)(cfg->admission_timeout_s ? cfg->admission_timeout_s : 5) * 1000;
    if (flyt_tls_accept(cfg->tls_ctx, s->link.fd, timeout_ms, &s->link.tls, err, sizeof err) != 0) {
        flyt_warn("refusing %s: %s", peer, err);
        return -1;
    }
    if (s->link.tls)
        flyt_tls_set_timeout(s->link.tls, 0);
    flyt_tls_describe(s->link.tls, how, sizeof how);
    flyt_info("%s: TLS (%s)", peer, how);
    s->in.tls = s->link.tls;
    return 0;
}

int flyt_session_run(int fd, const char *peer, const struct flyt_server_config *cfg)
{
    admitted_fd = cfg->admitted_fd;
    if (cfg->admission_timeout_s) {
        admission_wants_token = cfg->session_id != NULL;
        signal(SIGALRM, admission_expired);
        alarm(cfg->admission_timeout_s);
    }
    flyt_session *s = &the_session;
    if (!restored_early)
        session_init(s, cfg);
    s->cfg = cfg;
    s->link.fd = fd;
    if (flyt_reader_init(&s->in, fd, IN_BUF, 1) != 0) {
        flyt_error("out of memory for session %s", peer);
        return FLYT_EXIT_BACKEND;
    }
    if (cfg->tls_ctx && start_tls(s, peer, cfg) != 0)
        return FLYT_EXIT_AUTH;
    s->peer = peer;
    s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->wake_fd < 0) {
        flyt_error("no eventfd for session %s: %s", peer, strerror(errno));
        return FLYT_EXIT_BACKEND;
    }

    int rc = hello(s);
    if (rc == FLYT_CONT) {
        if (cfg->watch_hangup)
            flyt_watch_start(&s->watch, fd, peer);
        rc = serve(s);
    }
    if (s->images_received || s->images_from_cache)
        flyt_info("session for %s: %llu kernel images received (%llu bytes), %llu from the cache dir; "
                  "hashing (what the loads did not hide) or reading them %.1f ms, the driver's "
                  "loads %.1f ms, cache writes %.1f ms",
                  peer, (unsigned long long)s->images_received,
                  (unsigned long long)s->image_bytes_received, (unsigned long long)s->images_from_cache,
                  (double)s->image_verify_ns / 1e6, (double)s->image_load_ns / 1e6,
                  (double)s->image_store_ns / 1e6);

    /* Closing the backend frees the session's GPU objects; host functions
     * still pending may run now and send (or fail to) on the socket, and
     * wait for no acknowledgement. */
    reading_over(s);
    flyt_watch_enter(&s->watch, FLYT_WATCH_CLOSE, 0); /* the driver synchronises first */
    if (s->b)
        s->b->ops->close(s->b);
    s->b = NULL;
    flyt_watch_leave(&s->watch);
    flyt_watch_stop(&s->watch);
    flyt_output_to_log(&s->output);
    flyt_memtab_free(&s->mem); /* closing the backend freed it all */
    flyt_ipc_end(s);
    flyt_regions_forget(s); /* the client's shared memory: unmapped, not leaked */
    while (s->kept) {
        struct flyt_cb_msg *next = s->kept->next;
        free(s->kept);
        s->kept = next;
    }
    flyt_handles_clear(&s->handles);
    flyt_state_globals_drop(s, 0);
    flyt_stream_attrs_clear(s);
    for (int i = 0; i < s->n_ahead_fds; i++)
        close(s->ahead_fds[i].fd);
    close(s->wake_fd);
    flyt_reader_free(&s->in);
    flyt_tls_free(s->link.tls);
    close(fd);

    switch (rc) {
    case FLYT_END_PROTO: return FLYT_EXIT_PROTOCOL;
    case FLYT_END_BACKEND: return FLYT_EXIT_BACKEND;
    case FLYT_END_AUTH: return FLYT_EXIT_AUTH;
    default: return FLYT_EXIT_OK;
    }
}


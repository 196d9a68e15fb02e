/*
 * The client's one connection to its flyt-server.
 *
 * Any application thread may send (under send_lock, so frames never
 * interleave). One receiver thread reads every frame the server sends:
 * replies go to the thread waiting on that seq, callback frames go to the
 * callback thread, which runs the application's host functions in order.
 * Invariant: a waiter is registered before its request is sent, so a reply
 * always finds it.
 */
#include "client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "flyt_clock.h"
#include "flyt_cmgr_proto.h"
#include "flyt_reader.h"
#include "flyt_tls.h"
#include "flyt_transport.h"
#include "replay.h"

struct waiter {
    uint32_t seq;
    uint16_t op;
    struct flyt_reply_sink *sink;
    struct flyt_reply reply;
    uint64_t callbacks_seen; /* callbacks received before this reply */
    uint64_t end_off; /* the request stream's offset after this request: consumed once answered */
    atomic_int done;
    sem_t sem;
    struct waiter *next;
};

struct callback {
    uint64_t id;
    int counted; /* a stream's host function: counted in cb_stream_sent/run */
    uint64_t wire; /* its stream's wire id */
    void (*host_fn)(void *);
    CUstreamCallback stream_cb;
    CUstream stream;
    void *user;
    struct callback *next;
};

#define FD_FRAMES 16

struct client_conn {
    pthread_mutex_t init_lock;
    int initialized; /* 1 connected, -1 failed */
    flyt_link link; /* the socket, and its TLS session (tls://, FLYT_TLS_CA) */
    atomic_int broken;
    pthread_mutex_t send_lock;
    uint32_t next_seq;
    pthread_mutex_t wait_lock;
    struct waiter *waiters;
    pthread_t receiver;
    int device_count;
    int shares_memory;
    int same_machine; /* a Unix socket: bytes cost less to send than to hash */
    int image_cache;  /* the server keeps images across sessions (FLYT_HELLO_IMAGE_CACHE) */
    int server_minor;
    pid_t server_pid; /* the session's process, from HELLO */
    pid_t pid; /* the process that connected: a forked child has no receiver */
    flyt_rep_device_snapshot snapshot;

    /* callbacks: registered (by id) -> queued (received) -> run */
    pthread_mutex_t cb_lock;
    pthread_cond_t cb_cond;
    struct callback *cb_registered;
    struct callback *cb_queue_head, *cb_queue_tail;
    uint64_t cb_next_id;
    uint64_t cb_received;
    uint64_t cb_done;
    uint64_t cb_stream_sent; /* stream host functions enqueued outside any capture */
    uint64_t cb_stream_run;  /* ... of which have run */
    uint64_t cb_running_wire; /* the running counted callback's stream + 1, or 0 */
    pthread_t cb_thread;

    /* Session moves (docs/protocol.md): with a 2.3 server every request is
     * kept in `replay` until a reply proves it consumed, so that a restored
     * server can be sent again what its checkpoint did not consume. */
    int resumable;
    uint8_t instance[16];      /* the session's identity, from HELLO */
    struct target *target;     /* where the session was found: tried again after a move */
    struct flyt_replay replay; /* under send_lock */
    uint64_t confirmed;        /* atomic: request-stream bytes known consumed */
    int gate_closed;           /* under send_lock: a move is under way, nothing is sent */
    pthread_cond_t gate_cv;    /* with send_lock */
    uint64_t epoch;            /* moves completed: written under send_lock and wait_lock */
    pthread_cond_t move_cv;    /* with wait_lock: epoch changed, or the connection was lost */
    uint64_t replay_from;      /* where the replay after a move starts */
    /* Under send_lock: frames sent with a descriptor (HOST_MAP's memfd), not
     * known consumed: a replay passes it again (their callers, waiting for
     * the reply, still hold it open). */
    struct { uint64_t at, end; int fd; } fd_frames[FD_FRAMES];
    int n_fd_frames;
};
#define CONN_INITIAL                                                                            \
    {                                                                                           \
        .init_lock = FLYT_MUTEX_INITIALIZER, .send_lock = FLYT_MUTEX_INITIALIZER,               \
        .wait_lock = FLYT_MUTEX_INITIALIZER, .cb_lock = FLYT_MUTEX_INITIALIZER,                 \
        .cb_cond = PTHREAD_COND_INITIALIZER, .gate_cv = PTHREAD_COND_INITIALIZER,               \
        .move_cv = PTHREAD_COND_INITIALIZER, .link = {.fd = -1}, .next_seq = 1, .cb_next_id = 1 \
    }
static struct client_conn conn = CONN_INITIAL;

/* How long a waiting caller spins before sleeping: replies on a local
 * server usually arrive within this, and a futex sleep/wake costs more. */
#define SPIN_NS 30000

static void report_once(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report_once(const char *fmt, ...)
{
    static atomic_int reported;
    if (atomic_exchange(&reported, 1) == 0) {
        /* one write, so the line does not interleave with the program's output */
        char line[1024];
        va_list ap;
        va_start(ap, fmt);
        int n = snprintf(line, sizeof line, "flyt: ");
        vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
        va_end(ap);
        size_t len = strlen(line);
        line[len++] = '\n';
        if (write(STDERR_FILENO, line, len) < 0) {
            /* nowhere left to say it */
        }
    }
}

/* FLYT_TRACE=1: every error the server answers is said on stderr, with the
 * operation it answered (for finding why a library gave up). */
static void trace_error(uint16_t op, const char *which, int32_t result)
{
    if (!flyt_tracing())
        return;
    char where[96];
    snprintf(where, sizeof where, "%s, %s", flyt_op_name(op), which);
    flyt_trace(where, (CUresult)result);
}

/* ---- waiters ---- */

static void waiter_add(struct waiter *w)
{
    pthread_mutex_lock(&conn.wait_lock);
    w->next = conn.waiters;
    conn.waiters = w;
    pthread_mutex_unlock(&conn.wait_lock);
}

static struct waiter *waiter_take(uint32_t seq)
{
    pthread_mutex_lock(&conn.wait_lock);
    struct waiter **pp = &conn.waiters, *w = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->seq == seq) {
            w = *pp;
            *pp = w->next;
            break;
        }
    pthread_mutex_unlock(&conn.wait_lock);
    return w;
}

static void waiter_finish(struct waiter *w)
{
    atomic_store_explicit(&w->done, 1, memory_order_release);
    sem_post(&w->sem);
}

/* The connection is gone: fail every waiting call. */
static void fail_all(const char *why)
{
    if (atomic_exchange(&conn.broken, 1) == 0)
        report_once("lost the connection to the server: %s", why);
    pthread_mutex_lock(&conn.wait_lock);
    struct waiter *w = conn.waiters;
    conn.waiters = NULL;
    pthread_cond_broadcast(&conn.move_cv);
    pthread_mutex_unlock(&conn.wait_lock);
    while (w) {
        struct waiter *next = w->next;
        w->reply.result = -1;
        waiter_finish(w);
        w = next;
    }
    pthread_mutex_lock(&conn.cb_lock);
    pthread_cond_broadcast(&conn.cb_cond);
    pthread_mutex_unlock(&conn.cb_lock);
}

/* ---- callbacks ---- */

uint64_t flyt_callback_register(CUhostFn host_fn, CUstreamCallback stream_cb, CUstream stream,
                                void *user, int counted, uint64_t wire)
{
    struct callback *cb = calloc(1, sizeof *cb);
    if (cb == NULL)
        return 0;
    cb->host_fn = host_fn;
    cb->stream_cb = stream_cb;
    cb->stream = stream;
    cb->user = user;
    cb->counted = counted;
    cb->wire = wire;
    pthread_mutex_lock(&conn.cb_lock);
    cb->id = conn.cb_next_id++;
    __atomic_add_fetch(&conn.cb_stream_sent, counted != 0, __ATOMIC_RELEASE);
    cb->next = conn.cb_registered;
    conn.cb_registered = cb;
    pthread_mutex_unlock(&conn.cb_lock);
    return cb->id;
}

int flyt_callback_find(uint64_t id, CUhostFn *host_fn, void **user)
{
    pthread_mutex_lock(&conn.cb_lock);
    struct callback *cb = conn.cb_registered;
    while (cb && cb->id != id)
        cb = cb->next;
    if (cb) {
        *host_fn = cb->host_fn;
        *user = cb->user;
    }
    pthread_mutex_unlock(&conn.cb_lock);
    return cb ? 0 : -1;
}

/* keep: the callback is a graph's host node, which runs at every launch of
 * the graph, so a copy runs and the registration stays (for the life of
 * the process: the client does not learn when the last graph holding it is
 * destroyed). */
static void callback_arrived(uint64_t id, int keep, int32_t status)
{
    pthread_mutex_lock(&conn.cb_lock);
    struct callback **pp = &conn.cb_registered, *cb = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id) {
            cb = *pp;
            if (!keep)
                *pp = cb->next;
            break;
        }
    if (cb && keep) {
        struct callback *copy = malloc(sizeof *copy);
        if (copy) {
            *copy = *cb;
            copy->counted = 0;
        }
        cb = copy;
    }
    if (cb && status != 0) { /* never enqueued: runs nothing, counts as run */
        cb->host_fn = NULL;
        cb->stream_cb = NULL;
    }
    if (cb == NULL) /* unknown id: nothing to run, but acknowledged in its turn */
        cb = calloc(1, sizeof *cb);
    conn.cb_received++;
    FLYT_ASSERT((conn.cb_queue_head == NULL) == (conn.cb_queue_tail == NULL));
    if (cb == NULL) {
        conn.cb_done++; /* out of memory: the server waits in vain for this one */
    } else {
        cb->next = NULL;
        if (conn.cb_queue_tail)
            conn.cb_queue_tail->next = cb;
        else
            conn.cb_queue_head = cb;
        conn.cb_queue_tail = cb;
    }
    pthread_cond_broadcast(&conn.cb_cond);
    pthread_mutex_unlock(&conn.cb_lock);
}

static void *callback_thread(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&conn.cb_lock);
    for (;;) {
        while (conn.cb_queue_head == NULL)
            pthread_cond_wait(&conn.cb_cond, &conn.cb_lock);
        struct callback *cb = conn.cb_queue_head;
        conn.cb_queue_head = cb->next;
        if (conn.cb_queue_head == NULL)
            conn.cb_queue_tail = NULL;
        conn.cb_running_wire = cb->counted ? cb->wire + 1 : 0;
        pthread_mutex_unlock(&conn.cb_lock);
        if (cb->host_fn)
            cb->host_fn(cb->user);
        else if (cb->stream_cb)
            cb->stream_cb(cb->stream, CUDA_SUCCESS, cb->user);
        int counted = cb->counted;
        free(cb);
        /* the server holds the stream until it hears this (docs/protocol.md) */
        if (conn.server_minor >= FLYT_MINOR_HOST_FUNC_ACK) {
            flyt_req_none done = {0};
            flyt_send_async(FLYT_OP_HOST_FUNC_DONE, &done, sizeof done, NULL, 0);
        }
        pthread_mutex_lock(&conn.cb_lock);
        conn.cb_done++;
        FLYT_ASSERT(conn.cb_done <= conn.cb_received); /* each one runs once, in order */
        __atomic_add_fetch(&conn.cb_stream_run, counted != 0, __ATOMIC_RELEASE);
        conn.cb_running_wire = 0;
        pthread_cond_broadcast(&conn.cb_cond);
    }
    return NULL;
}

static int pending_in(const struct callback *cb, uint64_t wire)
{
    for (; cb; cb = cb->next)
        if (cb->counted && (wire <= FLYT_STREAM_LEGACY || cb->wire == wire))
            return 1;
    return 0;
}

/* Bytes of pinned memory that cross the socket are read when the copy is
 * called, not when its stream reaches it: a host function enqueued before
 * may still have to write them. So such a copy first waits for the host
 * functions of its stream (of every stream, for the legacy one) that have
 * not run yet; those of graphs are not counted. */
int flyt_host_funcs_pending(void)
{
    return __atomic_load_n(&conn.cb_stream_run, __ATOMIC_ACQUIRE) !=
           __atomic_load_n(&conn.cb_stream_sent, __ATOMIC_ACQUIRE);
}

void flyt_host_funcs_wait(uint64_t wire)
{
    if (!flyt_host_funcs_pending())
        return; /* none pending: the usual case costs no lock */
    pthread_mutex_lock(&conn.cb_lock);
    while ((pending_in(conn.cb_registered, wire) || pending_in(conn.cb_queue_head, wire) ||
            (wire <= FLYT_STREAM_LEGACY ? conn.cb_running_wire != 0
                                        : conn.cb_running_wire == wire + 1)) &&
           !atomic_load(&conn.broken))
        pthread_cond_wait(&conn.cb_cond, &conn.cb_lock);
    pthread_mutex_unlock(&conn.cb_lock);
}

/* A synchronizing call returns only after the host functions that the
 * server reported before its reply have run. */
static void wait_callbacks(uint64_t seen)
{
    pthread_mutex_lock(&conn.cb_lock);
    while (conn.cb_done < seen && !atomic_load(&conn.broken))
        pthread_cond_wait(&conn.cb_cond, &conn.cb_lock);
    pthread_mutex_unlock(&conn.cb_lock);
}

/* ---- receiver ---- */

/* The receiver's input (flyt_reader): one recv usually brings a whole reply
 * (or several), instead of one call per piece; bulk data goes straight to
 * its destination. Only the receiver thread reads it. */
#define RX_BUF (64 * 1024)
static flyt_reader rx;

static int rx_read(void *dst, size_t n) { return flyt_reader_read(&rx, dst, n); }

static int read_reply_body(struct waiter *w, uint32_t length)
{
    struct flyt_reply_sink *sink = w->sink;
    size_t rep_size = sink ? sink->rep_size : 0;
    if (length < sizeof(struct flyt_reply))
        return -1;
    if (rx_read(&w->reply, sizeof w->reply) != 0)
        return -1;
    size_t left = length - sizeof(struct flyt_reply);
    if (left == 0)
        return 0;
    if (left < rep_size)
        return -1;
    if (rep_size && rx_read(sink->rep, rep_size) != 0)
        return -1;
    left -= rep_size;
    if (left == 0 || sink == NULL)
        return left == 0 ? 0 : flyt_reader_skip(&rx, left);
    size_t trailer = sink->streamed ? sizeof(struct flyt_reply) : 0;
    if (left < trailer || left - trailer > sink->data_max)
        return -1;
    size_t data = left - trailer;
    if (data && rx_read(sink->data, data) != 0)
        return -1;
    sink->data_got = data;
    if (trailer) {
        struct flyt_reply t;
        if (rx_read(&t, sizeof t) != 0)
            return -1;
        if (t.result != 0)
            w->reply.result = t.result;
        if (t.deferred != 0 && w->reply.deferred == 0)
            w->reply.deferred = t.deferred;
    }
    return 0;
}

/* How long the receiver busy-polls for a reply while a caller waits. */
#define RECEIVER_SPIN_US 200

/* An OUTPUT frame's payload, read with read_fn: the driver's output,
 * written out before the reply that follows it is handed to its caller. */
static int read_output(uint32_t length, int (*read_fn)(void *, size_t))
{
    struct flyt_msg_output m;
    if (length < sizeof m || length - sizeof m > FLYT_MAX_OUTPUT_CHUNK ||
        read_fn(&m, sizeof m) != 0 || (m.fd != 1 && m.fd != 2))
        return -1;
    char piece[8192];
    for (size_t left = length - sizeof m; left > 0;) {
        size_t n = left < sizeof piece ? left : sizeof piece;
        if (read_fn(piece, n) != 0)
            return -1;
        flyt_device_output(m.fd, piece, n);
        left -= n;
    }
    return 0;
}

/* A reply proves its request, and every one before it, consumed. */
static void confirm(uint64_t end_off)
{
    uint64_t known = __atomic_load_n(&conn.confirmed, __ATOMIC_RELAXED);
    while (end_off > known && !__atomic_compare_exchange_n(&conn.confirmed, &known, end_off, 0,
                                                           __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
}

static int resume_session(uint64_t moved_at, uint32_t reason);

/* FLYT_TRACE: where a move's downtime went, as this client saw it (receiver thread only) */
static struct {
    double last_reply; /* ms, monotonic: the last reply before the move */
    double moved;      /* the SESSION_MOVED frame */
    double resumed;    /* the restored server answered the resuming HELLO */
    double hello_ms;   /* that last try's connect, HELLO and AUTH */
    int    tries;
    int    awaiting;   /* the first reply after the move is still to come */
} move_clock;

static double clock_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* A reply came: the first after a move ends its downtime (traced). */
static void reply_clocked(void)
{
    if (!flyt_tracing())
        return;
    double now = clock_ms();
    if (move_clock.awaiting) {
        move_clock.awaiting = 0;
        fprintf(stderr, "flyt: move timing: last reply to SESSION_MOVED %.1f ms, SESSION_MOVED to "
                "resumed %.1f ms (%d tries; the last one's connect and HELLO %.1f ms), resumed to "
                "first reply %.1f ms; downtime seen %.1f ms\n",
                move_clock.moved - move_clock.last_reply, move_clock.resumed - move_clock.moved,
                move_clock.tries, move_clock.hello_ms, now - move_clock.resumed,
                now - move_clock.last_reply);
    }
    move_clock.last_reply = now;
}

static void *receiver_thread(void *arg)
{
    (void)arg;
    for (;;) {
        struct flyt_frame_hdr h;
        if (flyt_reader_buffered(&rx) == 0 && __atomic_load_n(&conn.waiters, __ATOMIC_RELAXED) != NULL &&
            !flyt_link_pending(&conn.link))
            flyt_spin_readable(conn.link.fd, RECEIVER_SPIN_US);
        if (rx_read(&h, sizeof h) != 0) {
            fail_all(errno ? strerror(errno) : "server closed the connection");
            return NULL;
        }
        if (h.op == FLYT_OP_CALLBACK && !(h.flags & FLYT_F_REPLY)) {
            struct flyt_msg_callback m;
            if (h.length != sizeof m || rx_read(&m, sizeof m) != 0) {
                fail_all("malformed callback frame");
                return NULL;
            }
            callback_arrived(m.callback_id, m.keep != 0, m.status);
            continue;
        }
        if (h.op == FLYT_OP_SESSION_MOVED && !(h.flags & FLYT_F_REPLY)) {
            struct flyt_msg_moved m;
            if (h.length != sizeof m || rx_read(&m, sizeof m) != 0) {
                fail_all("malformed session-moved frame");
                return NULL;
            }
            if (!conn.resumable) {
                fail_all("the server moved the session, and FLYT_RESUME=0 says not to follow it");
                return NULL;
            }
            move_clock.moved = flyt_tracing() ? clock_ms() : 0;
            if (resume_session(m.consumed, m.reason) != 0)
                return NULL;
            continue;
        }
        if (h.op == FLYT_OP_SHARE_CHANGED && !(h.flags & FLYT_F_REPLY)) {
            struct flyt_msg_share m;
            if (h.length != sizeof m || rx_read(&m, sizeof m) != 0) {
                fail_all("malformed share frame");
                return NULL;
            }
            flyt_device_share_changed(&m);
            continue;
        }
        if (h.op == FLYT_OP_OUTPUT && !(h.flags & FLYT_F_REPLY)) {
            if (read_output(h.length, rx_read) != 0) {
                fail_all("malformed output frame");
                return NULL;
            }
            continue;
        }
        struct waiter *w = (h.flags & FLYT_F_REPLY) ? waiter_take(h.seq) : NULL;
        if (w == NULL || w->op != h.op) {
            fail_all("reply to no pending call");
            if (w != NULL) { /* taken off the list, so fail_all did not wake its caller */
                w->reply.result = -1;
                waiter_finish(w);
            }
            return NULL;
        }
        if (read_reply_body(w, h.length) != 0) {
            w->reply.result = -1;
            waiter_finish(w);
            fail_all("malformed reply");
            return NULL;
        }
        pthread_mutex_lock(&conn.cb_lock);
        w->callbacks_seen = conn.cb_received;
        pthread_mutex_unlock(&conn.cb_lock);
        confirm(w->end_off);
        reply_clocked();
        if ((w->op == FLYT_OP_HOST_MAP || w->op == FLYT_OP_HOST_MAP_AT) && w->reply.result == 0)
            flyt_region_reply_delivered(); /* its caller keeps it (regions.c) */
        waiter_finish(w);
    }
}

/* ---- finding the server ----
 *
 * FLYT_SERVER (with FLYT_SESSION_TOKEN when the server asks for one) is the
 * standalone way. Without it, the local flyt-client-manager is asked over its
 * Unix socket (FLYT_CLIENT_MANAGER, default /run/flyt/client.sock) for this
 * process's endpoint and session token; docs/api.md describes that line
 * protocol. Every step is bounded in time: a missing or silent manager or
 * server means "no GPU", never a hang. */

#define DEFAULT_CLIENT_MANAGER "/run/flyt/client.sock"

struct target {
    char endpoint[512];
    char token[FLYT_MAX_TOKEN + 1];
    char origin[160]; /* where the endpoint came from, for messages */
    int  from_manager; /* the client manager gave it: ask again where a moved session went */
};

/* A whole number of seconds from the environment, else def. */
static int env_seconds(const char *name, int def)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return def;
    char *end;
    long n = strtol(v, &end, 10);
    return (*end == '\0' && n > 0 && n <= 86400) ? (int)n : def;
}

static long ms_left(const struct timespec *deadline)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (deadline->tv_sec - t.tv_sec) * 1000L + (deadline->tv_nsec - t.tv_nsec) / 1000000L;
}

/* Asks the client manager for this process's server. 0 with t filled, or -1
 * with the reason in why. */
static int ask_client_manager(struct target *t, char *why, size_t whylen)
{
    const char *path = getenv("FLYT_CLIENT_MANAGER");
    if (path == NULL || *path == '\0')
        path = DEFAULT_CLIENT_MANAGER;
    if (strncmp(path, "unix:", 5) == 0)
        path += 5;
    int timeout_s = env_seconds("FLYT_CLIENT_MANAGER_TIMEOUT", 90);
    char line[FLYT_CMGR_LINE_MAX];
    int n = flyt_cmgr_format_request(line, sizeof line, FLYT_CMGR_ACQUIRE, (long)getpid());
    if (n < 0 || flyt_cmgr_ask(path, line, timeout_s, line, sizeof line, why, whylen) < 0)
        return -1;
    char status[16], msg[512];
    if (!flyt_cmgr_field(line, "status", status, sizeof status)) {
        snprintf(why, whylen, "the client manager at %s sent a malformed answer", path);
        return -1;
    }
    if (strcmp(status, "ok") != 0) {
        if (!flyt_cmgr_field(line, "message", msg, sizeof msg))
            snprintf(msg, sizeof msg, "no reason given");
        snprintf(why, whylen, "the client manager at %s could not get a GPU: %s", path, msg);
        return -1;
    }
    if (!flyt_cmgr_field(line, "endpoint", t->endpoint, sizeof t->endpoint)) {
        snprintf(why, whylen, "the client manager at %s answered without an endpoint", path);
        return -1;
    }
    if (!flyt_cmgr_field(line, "token", t->token, sizeof t->token))
        t->token[0] = '\0';
    char session[96];
    if (flyt_cmgr_field(line, "session", session, sizeof session))
        snprintf(t->origin, sizeof t->origin, "session %s from the client manager", session);
    else
        snprintf(t->origin, sizeof t->origin, "the client manager");
    return 0;
}

/* ---- connecting ---- */

/* Handshake I/O happens before the receiver thread exists, on a socket with
 * send and receive timeouts, so a silent server cannot hang the caller. */
static void set_io_timeout(const flyt_link *l, int seconds)
{
    struct timeval tv = {seconds, 0};
    setsockopt(l->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(l->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (l->tls)
        flyt_tls_set_timeout(l->tls, seconds * 1000);
}

static const flyt_link *handshake_link; /* the connection read_output reads during a handshake */
static int handshake_read(void *buf, size_t len) { return flyt_link_read_full(handshake_link, buf, len); }

/* Sends one request on fd (with the descriptor pass_fd, unless -1) and
 * reads its reply: result and up to rep_size bytes of the reply struct. 0,
 * or -1 when the connection failed (errno: 0 at EOF). */
static int handshake_call_fd(const flyt_link *l, uint16_t op, const void *req, size_t req_size,
                             const void *data, size_t data_size, int pass_fd, int32_t *result,
                             void *rep, size_t rep_size)
{
    uint32_t seq = conn.next_seq++;
    struct flyt_frame_hdr h = {.length = (uint32_t)(req_size + data_size), .op = op, .seq = seq};
    struct iovec iov[3] = {{&h, sizeof h}, {(void *)req, req_size}, {(void *)data, data_size}};
    int n = data_size ? 3 : 2;
    if ((pass_fd >= 0 ? flyt_writev_full_fd(l->fd, iov, n, pass_fd) : flyt_link_writev(l, iov, n)) != 0)
        return -1;
    struct flyt_frame_hdr rh;
    struct flyt_reply r;
    handshake_link = l;
    do { /* what the driver printed as the server opened the GPU comes first */
        if (flyt_link_read_full(l, &rh, sizeof rh) != 0)
            return -1;
    } while (rh.op == FLYT_OP_OUTPUT && !(rh.flags & FLYT_F_REPLY) &&
             read_output(rh.length, handshake_read) == 0);
    if (!(rh.flags & FLYT_F_REPLY) || rh.op != op || rh.seq != seq ||
        rh.length < sizeof r || rh.length > 65536) {
        errno = EPROTO;
        return -1;
    }
    if (flyt_link_read_full(l, &r, sizeof r) != 0)
        return -1;
    size_t left = rh.length - sizeof r, take = left < rep_size ? left : rep_size;
    memset(rep, 0, rep_size);
    if (take && flyt_link_read_full(l, rep, take) != 0)
        return -1;
    static char scrap[65536]; /* the rest of a longer reply; one handshake at a time */
    if (left > take && flyt_link_read_full(l, scrap, left - take) != 0)
        return -1;
    *result = r.result;
    return 0;
}

static int handshake_call(const flyt_link *l, uint16_t op, const void *req, size_t req_size,
                          const void *data, size_t data_size, int32_t *result, void *rep,
                          size_t rep_size)
{
    return handshake_call_fd(l, op, req, req_size, data, data_size, -1, result, rep, rep_size);
}

/* Whether a resuming client found its session: the server holds it restored. */
static int holds_this_session(const flyt_rep_hello *rep)
{
    return (rep->flags & FLYT_HELLO_RESTORED) &&
           memcmp(rep->instance, conn.instance, sizeof conn.instance) == 0;
}

/* HELLO on fd (as a client resuming its session, or not), then AUTH when the
 * server asks for a session token. 0 with the HELLO reply in rep, or -1
 * with why (one line). */
static int handshake(const flyt_link *l, const char *where, const struct target *t, int resume,
                     flyt_rep_hello *rep, char *why, size_t whylen)
{
    flyt_req_hello req = {.magic = FLYT_PROTO_MAGIC,
                          .major = FLYT_PROTO_MAJOR,
                          .minor = FLYT_PROTO_MINOR,
                          .client_pid = (uint32_t)getpid(),
                          .flags = resume ? FLYT_HELLO_RESUME : 0};
    gethostname(req.client_host, sizeof req.client_host - 1);
    int32_t result = 0;
    if (handshake_call(l, FLYT_OP_HELLO, &req, sizeof req, NULL, 0, &result, rep, sizeof *rep) != 0) {
        int plain_tcp = l->tls == NULL && strncmp(where, "unix:", 5) != 0;
        snprintf(why, whylen, "server at %s did not complete HELLO: %s%s", where,
                 errno == EAGAIN ? "no answer in time (FLYT_CONNECT_TIMEOUT)"
                 : errno ? strerror(errno) : "it closed the connection",
                 plain_tcp && (errno == 0 || errno == ECONNRESET)
                     ? " (a TLS server? connect with tls://HOST:PORT)" : "");
        return -1;
    }
    if (result != 0 || rep->major != FLYT_PROTO_MAJOR) {
        snprintf(why, whylen, "server at %s refused the session (protocol %u.%u, ours %d.%d)",
                 where, rep->major, rep->minor, FLYT_PROTO_MAJOR, FLYT_PROTO_MINOR);
        return -1;
    }
    if (resume && !holds_this_session(rep)) {
        snprintf(why, whylen, "the server at %s does not hold this session", where);
        return -1;
    }
    if (!(rep->flags & FLYT_HELLO_AUTH_REQUIRED))
        return 0;
    size_t len = strlen(t->token);
    if (len == 0) {
        snprintf(why, whylen, "server at %s requires a session token and none is known (%s)", where,
                 getenv("FLYT_SERVER") && *getenv("FLYT_SERVER")
                     ? "set FLYT_SESSION_TOKEN, or leave FLYT_SERVER unset to use the "
                       "client manager"
                     : "the client manager gave none");
        return -1;
    }
    if (len > FLYT_MAX_TOKEN) {
        snprintf(why, whylen, "the session token for %s is longer than %u bytes", where,
                 FLYT_MAX_TOKEN);
        return -1;
    }
    flyt_req_auth auth = {.token_len = (uint32_t)len};
    flyt_rep_none none;
    if (handshake_call(l, FLYT_OP_AUTH, &auth, sizeof auth, t->token, len, &result, &none,
                       sizeof none) != 0) {
        snprintf(why, whylen, "server at %s refused the session token (it closed the connection: %s)",
                 where, errno == EAGAIN ? "no answer in time" : errno ? strerror(errno) : "");
        return -1;
    }
    if (result != 0) {
        snprintf(why, whylen, "server at %s refused the session token (error %d)", where,
                 (int)result);
        return -1;
    }
    return 0;
}

/* Every device query is answered from this snapshot from now on. */
static int fetch_snapshot(void)
{
    if (conn.device_count < 1)
        return 0;
    flyt_req_device req = {.device = 0};
    struct flyt_reply_sink sink = {.rep = &conn.snapshot, .rep_size = sizeof conn.snapshot};
    return flyt_call(FLYT_OP_DEVICE_SNAPSHOT, &req, sizeof req, NULL, 0, &sink) == CUDA_SUCCESS
               ? 0
               : -1;
}

static int start_threads(void)
{
    if (flyt_reader_init(&rx, conn.link.fd, RX_BUF, 0) != 0)
        return -1;
    rx.tls = conn.link.tls;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&conn.receiver, &attr, receiver_thread, NULL);
    if (rc == 0)
        rc = pthread_create(&conn.cb_thread, &attr, callback_thread, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

/* TLS for a TCP address written tls://, or for every TCP address when
 * FLYT_TLS_CA names the CA to verify servers with (docs/tls.md). The
 * context is made once, on the first such connection. 0, or -1 with err. */
static flyt_tls_ctx *tls_ctx; /* under init_lock, or on the receiver thread once connected */

static int start_tls(flyt_link *l, const flyt_addr *addr, int timeout_s, char *err, size_t errlen)
{
    flyt_tls_ctx *ctx = tls_ctx;
    const char *ca = getenv("FLYT_TLS_CA");
    if (ca && *ca == '\0')
        ca = NULL;
    l->tls = NULL;
    if (addr->kind != FLYT_ADDR_TCP || (!addr->tls && ca == NULL))
        return 0;
    char why[512];
    if (ctx == NULL && (ctx = tls_ctx = flyt_tls_client_ctx(ca, why, sizeof why)) == NULL) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    if (flyt_tls_connect(ctx, l->fd, addr->host, timeout_s * 1000, &l->tls, why, sizeof why) != 0) {
        /* Dropped so a retry reads the CA again, and so nothing is left
         * when the runtime unloads this library after a failed cuInit. */
        flyt_tls_ctx_free(ctx);
        tls_ctx = NULL;
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    if (flyt_tracing()) {
        flyt_tls_describe(l->tls, why, sizeof why);
        fprintf(stderr, "flyt: TLS to %s (%s)\n", addr->host, why);
    }
    return 0;
}

/* FLYT_KEEPALIVE ("IDLE,INTERVAL,COUNT" or "off"; default 5,2,4): a server
 * whose machine vanished ends the connection in IDLE + INTERVAL * COUNT s,
 * and this process's calls fail as for any lost server. A malformed value
 * is said once and the default kept. */
static struct flyt_keepalive client_keepalive(void)
{
    struct flyt_keepalive k = FLYT_KEEPALIVE_DEFAULT;
    const char *v = getenv("FLYT_KEEPALIVE");
    char why[160];
    static int told;
    if (v && *v && flyt_keepalive_parse(v, &k, why, sizeof why) != 0) {
        k = FLYT_KEEPALIVE_DEFAULT;
        if (!told++)
            fprintf(stderr, "flyt: FLYT_KEEPALIVE: %s; using 5,2,4\n", why);
    }
    return k;
}

/* The first of the comma-separated alternatives of endpoint that accepts a
 * connection, in order: a node lists its server's Unix socket before its
 * TCP address, so a client on the same machine gets the Unix socket (and
 * with it shared memory), one elsewhere finds no such path and goes on.
 * 0 with the connection in *l; -1 when none connected, -2 when an
 * alternative is malformed, -3 when TLS with the server failed. */
static int connect_any(const char *endpoint, int timeout_s, flyt_addr *addr, flyt_link *l,
                       char *err, size_t errlen)
{
    char list[sizeof ((struct target *)0)->endpoint], *save = NULL;
    snprintf(list, sizeof list, "%s", endpoint);
    snprintf(err, errlen, "no address");
    l->fd = -1;
    l->tls = NULL;
    for (char *one = strtok_r(list, ",", &save); one && l->fd < 0; one = strtok_r(NULL, ",", &save)) {
        if (flyt_addr_parse(one, addr, err, errlen) != 0)
            return -2;
        l->fd = flyt_connect_timeout(addr, timeout_s * 1000, err, errlen);
    }
    if (l->fd < 0)
        return -1;
    struct flyt_keepalive keepalive = client_keepalive();
    if (flyt_keepalive_set(l->fd, &keepalive) != 0 && flyt_tracing())
        fprintf(stderr, "flyt: no TCP keepalive to %s: %s\n", addr->host, strerror(errno));
    if (start_tls(l, addr, timeout_s, err, errlen) != 0) {
        close(l->fd);
        l->fd = -1;
        return -3;
    }
    return 0;
}

/* Closes a connection (the socket and its TLS session). */
static void link_close(flyt_link *l)
{
    flyt_tls_free(l->tls);
    l->tls = NULL;
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
}

/* What a handshake on a connection of kind addr told us about its server. */
static void take_server(const flyt_addr *addr, const flyt_rep_hello *rep)
{
    const char *shm = getenv("FLYT_SHM");
    conn.shares_memory = addr->kind == FLYT_ADDR_UNIX && !(shm && strcmp(shm, "0") == 0);
    conn.same_machine = addr->kind == FLYT_ADDR_UNIX;
    conn.image_cache = (rep->flags & FLYT_HELLO_IMAGE_CACHE) != 0;
    conn.server_minor = rep->minor;
    conn.server_pid = (pid_t)rep->server_pid;
    /* The server copies pageable memory of this process as this process's
     * user; where Yama restricts such access to ancestors, this names the
     * session's process as allowed (no effect elsewhere). */
    if (addr->kind == FLYT_ADDR_UNIX && conn.server_pid > 0)
        prctl(PR_SET_PTRACER, (unsigned long)conn.server_pid, 0, 0, 0);
}

#define REPLAY_MIN ((size_t)4 << 20)

/* Requests are kept for a replay only for a server that can resume a
 * session (and not with FLYT_RESUME=0, which spares the copy of every
 * request); the target is kept to find it again, its token too (a managed
 * server asks for it again). The buffer holds what the
 * socket buffers can hold unconsumed, and more (fewer PINGs). A session
 * that was restored before this client came continues the stream's count. */
static int prepare_moves(const struct target *t, const flyt_rep_hello *rep)
{
    const char *resume = getenv("FLYT_RESUME");
    if (conn.server_minor < FLYT_MINOR_RESUME || (resume && strcmp(resume, "0") == 0))
        return 0;
    int sndbuf = 0;
    socklen_t len = sizeof sndbuf;
    getsockopt(conn.link.fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len);
    size_t limit = sndbuf > 0 && (size_t)sndbuf * 4 > REPLAY_MIN ? (size_t)sndbuf * 4 : REPLAY_MIN;
    const char *bytes = getenv("FLYT_REPLAY_BYTES"); /* less memory, more PINGs (tests) */
    if (bytes && atol(bytes) >= 4096)
        limit = (size_t)atol(bytes);
    conn.target = malloc(sizeof *conn.target);
    if (conn.target == NULL || flyt_replay_init(&conn.replay, limit) != 0)
        return -1;
    *conn.target = *t;
    if (rep->flags & FLYT_HELLO_RESTORED)
        conn.replay.base = conn.confirmed = rep->resume_offset;
    conn.resumable = 1;
    return 0;
}

/* A child forked after this process began to connect: the connection is the
 * parent's (its receiver thread did not come along, its locks may be held),
 * so the child forgets it, as if never made, and closes its copy of the
 * socket: the parent's session ends with the parent, however long the child
 * lives. When the program itself had called cuInit, the child's calls then
 * fail as NVIDIA's driver fails them after a fork, CUDA_ERROR_NOT_INITIALIZED;
 * when only a tool (Flyt's NVML) had, the child starts afresh, as natively
 * NVML leaves CUDA uninitialised. A tool may ask in either child
 * (flyt_client_table.h): it connects anew. */
static atomic_int forked_child;

/* The parent's connection as the child found it: nothing of it is freed (another thread
 * of the parent may have been inside a realloc or free of its buffers at the fork), and
 * kept here it stays reachable, not a leak. The child never touches its copy-on-write
 * pages. The TLS context, whose locks such a thread may have held, is left too: a child
 * that connects makes its own. */
static struct {
    struct client_conn conn;
    flyt_reader rx;
    flyt_tls_ctx *tls_ctx;
} parents;

static void forget_connection(void)
{
    if (conn.link.fd >= 0)
        close(conn.link.fd);
    parents.conn = conn;
    parents.rx = rx;
    parents.tls_ctx = tls_ctx;
    conn = (struct client_conn)CONN_INITIAL;
    rx = (flyt_reader){0};
    tls_ctx = NULL;
}

static void after_fork_in_child(void)
{
    if (flyt_program_started())
        atomic_store(&forked_child, 1);
    forget_connection();
    flyt_init_forget();
}

static void watch_forks(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

int flyt_conn_forked(void)
{
    return atomic_load_explicit(&forked_child, memory_order_relaxed) && !flyt_in_tool_scope();
}

static int connect_server(void)
{
    /* before any socket: a child forked while this thread connects (another
     * holding init_lock meanwhile) must not wait for it nor keep the socket */
    static pthread_once_t fork_watch = PTHREAD_ONCE_INIT;
    pthread_once(&fork_watch, watch_forks);
    struct target t;
    memset(&t, 0, sizeof t);
    const char *env = getenv("FLYT_SERVER");
    if (env != NULL && *env != '\0') {
        snprintf(t.endpoint, sizeof t.endpoint, "%s", env);
        const char *tok = getenv("FLYT_SESSION_TOKEN");
        snprintf(t.token, sizeof t.token, "%s", tok ? tok : "");
        snprintf(t.origin, sizeof t.origin, "FLYT_SERVER");
    } else {
        char why[768];
        if (ask_client_manager(&t, why, sizeof why) != 0) {
            report_once("FLYT_SERVER is not set and %s, so there is no GPU (standalone use: "
                        "FLYT_SERVER=tcp://host:port or unix:/path)", why);
            return -1;
        }
        t.from_manager = 1;
    }
    const char *where = t.endpoint;
    flyt_addr addr;
    char err[256];
    int timeout_s = env_seconds("FLYT_CONNECT_TIMEOUT", 20);
    int got = connect_any(where, timeout_s, &addr, &conn.link, err, sizeof err);
    if (got == -2)
        report_once("bad server address from %s: %s", t.origin, err);
    else if (got == -3)
        report_once("no secure connection to the GPU server at %s (from %s): %s", where, t.origin,
                    err);
    else if (got < 0)
        report_once("no GPU server reachable at %s (from %s): %s", where, t.origin, err);
    if (got < 0)
        return -1;
    set_io_timeout(&conn.link, timeout_s);
    flyt_rep_hello rep;
    char why[768];
    int ok = handshake(&conn.link, where, &t, 0, &rep, why, sizeof why) == 0;
    set_io_timeout(&conn.link, 0); /* before the receiver blocks in recv */
    if (!ok) {
        report_once("%s", why);
        explicit_bzero(t.token, sizeof t.token);
        link_close(&conn.link);
        return -1;
    }
    conn.device_count = (int)rep.device_count;
    memcpy(conn.instance, rep.instance, sizeof conn.instance);
    take_server(&addr, &rep);
    ok = prepare_moves(&t, &rep) == 0;
    explicit_bzero(t.token, sizeof t.token);
    conn.pid = getpid();
    if (!ok || start_threads() != 0) {
        report_once("cannot start the client threads");
        return -1;
    }
    if (fetch_snapshot() != 0) {
        report_once("server at %s failed to describe its device", where);
        return -1;
    }
    return 0;
}

/* ---- session moves (docs/protocol.md, "Session moves") ----
 *
 * The server checkpointed the session and stopped it; a restored server will
 * take it up. Until then nothing is sent (the gate is closed) and every
 * caller stays blocked; the receiver tries the session's endpoint again,
 * with backoff, until a server says in its HELLO reply that it holds this
 * session, then sends again the requests from the byte that server resumes
 * at and opens the gate. Past FLYT_RECONNECT_TIMEOUT_S the connection is
 * lost, as when a server dies. */

static void gate_close(void)
{
    pthread_mutex_lock(&conn.send_lock);
    conn.gate_closed = 1;
    pthread_mutex_unlock(&conn.send_lock);
}

/* Under send_lock: callers may send again; with moved, on a new connection. */
static void gate_open(int moved)
{
    pthread_mutex_lock(&conn.wait_lock);
    conn.epoch += moved != 0;
    pthread_cond_broadcast(&conn.move_cv);
    pthread_mutex_unlock(&conn.wait_lock);
    conn.gate_closed = 0;
    pthread_cond_broadcast(&conn.gate_cv);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* One try: a connection to the session's endpoint whose server holds the
 * session restored; the fd and *resume_at, or -1 with why. */
/* A session moved to another node (migration, restore elsewhere) has another
 * endpoint: the client manager, asked again by this process, answers the
 * session's endpoint now and a fresh token. Kept as it was when it cannot say. */
static void refresh_target(void)
{
    struct target fresh;
    char why[768];
    memset(&fresh, 0, sizeof fresh);
    if (!conn.target->from_manager || ask_client_manager(&fresh, why, sizeof why) != 0)
        return;
    fresh.from_manager = 1;
    *conn.target = fresh;
    explicit_bzero(&fresh, sizeof fresh);
}

/* ---- host memory shared with the server, after a move ---- */

struct remap_ctx {
    const flyt_link *link;
    size_t failed;
    int    first_error;
};

/* HOST_REMAP of one region on the resumed connection; -1 when it failed. */
static int remap_one(const flyt_req_host_remap *req, int memfd, void *arg)
{
    struct remap_ctx *x = arg;
    int32_t result = 0;
    flyt_rep_none none;
    if (handshake_call_fd(x->link, FLYT_OP_HOST_REMAP, req, sizeof *req, NULL, 0, memfd, &result,
                          &none, sizeof none) != 0)
        return -1;
    /* INVALID_HANDLE: unmapped before the checkpoint (its HOST_UNMAP answered
     * as the move began) */
    if (result != CUDA_SUCCESS && result != CUDA_ERROR_INVALID_HANDLE) {
        if (x->failed++ == 0)
            x->first_error = result;
    }
    return 0;
}

/* Shares the kept regions with the restored server again, before the
 * replay: on one machine (Unix socket) their memfds go with HOST_REMAP; a
 * server elsewhere cannot map them, and the client says so once. 0, or -1
 * when the connection failed. */
static int reattach_regions(const flyt_link *l, const flyt_addr *addr)
{
    size_t count = 0;
    const char *shm = getenv("FLYT_SHM");
    if (addr->kind != FLYT_ADDR_UNIX || (shm && strcmp(shm, "0") == 0)) {
        flyt_regions_each(NULL, NULL, &count);
        if (count > 0)
            fprintf(stderr, "flyt: the session resumed on a server this process shares no "
                    "memory with (TCP, or FLYT_SHM=0): its %zu host memory region(s) (pinned or "
                    "managed memory) cannot be shared again; copies and kernels using them fail "
                    "with CUDA_ERROR_NOT_MAPPED\n", count);
        return 0;
    }
    struct remap_ctx x = {l, 0, 0};
    if (flyt_regions_each(remap_one, &x, &count) != 0)
        return -1;
    if (x.failed > 0)
        fprintf(stderr, "flyt: the restored server could not share %zu of %zu host memory "
                "region(s) again (first: CUDA error %d; see its log); copies and kernels using "
                "them fail with CUDA_ERROR_NOT_MAPPED\n", x.failed, count, x.first_error);
    else if (count > 0 && flyt_tracing())
        fprintf(stderr, "flyt: %zu host memory region(s) shared again\n", count);
    return 0;
}

static int try_resume(long ms_left_now, flyt_link *l, uint64_t *resume_at, char *why,
                      size_t whylen)
{
    refresh_target();
    const struct target *t = conn.target;
    int timeout_s = ms_left_now > 5000 ? 5 : (int)(ms_left_now / 1000) + 1;
    flyt_addr addr;
    char err[256];
    if (connect_any(t->endpoint, timeout_s, &addr, l, err, sizeof err) != 0) {
        snprintf(why, whylen, "no server reachable at %s: %s", t->endpoint, err);
        return -1;
    }
    set_io_timeout(l, timeout_s);
    flyt_rep_hello rep;
    if (handshake(l, t->endpoint, t, 1, &rep, why, whylen) != 0) {
        link_close(l);
        return -1;
    }
    struct iovec held[FLYT_REPLAY_REF_IOVS];
    if (flyt_replay_iov_from(&conn.replay, rep.resume_offset, held) < 0) {
        snprintf(why, whylen, "the restored session resumes at request byte %llu, which this "
                 "client no longer holds (it holds %llu to %llu)",
                 (unsigned long long)rep.resume_offset, (unsigned long long)conn.replay.base,
                 (unsigned long long)flyt_replay_end(&conn.replay));
        link_close(l);
        return -2;
    }
    if (reattach_regions(l, &addr) != 0) {
        snprintf(why, whylen, "the server at %s closed the connection while this client shared "
                 "its host memory again", t->endpoint);
        link_close(l);
        return -1;
    }
    set_io_timeout(l, 0);
    take_server(&addr, &rep);
    *resume_at = rep.resume_offset;
    return 0;
}

/* Sends the requests the restored server did not consume, then opens the
 * gate: on a thread of its own, as the receiver must read the replies
 * meanwhile (a replayed copy from the device may answer with more bytes than
 * the socket holds). */
/* The held bytes from `from` on conn.link.fd, each frame that came with a
 * descriptor in a write of its own that passes it again. Under send_lock. */
static int replay_write(uint64_t from)
{
    if (conn.replay.nref) { /* a frame held by reference, alone */
        struct iovec held[FLYT_REPLAY_REF_IOVS];
        int nheld = flyt_replay_iov_from(&conn.replay, from, held);
        return nheld < 0 ? -1 : nheld == 0 ? 0 : flyt_link_writev(&conn.link, held, nheld);
    }
    size_t n = 0;
    const char *bytes = flyt_replay_from(&conn.replay, from, &n);
    for (uint64_t pos = from, end = from + n; pos < end;) {
        uint64_t stop = end;
        int fd = -1;
        for (int i = 0; i < conn.n_fd_frames; i++) {
            if (conn.fd_frames[i].at == pos) {
                fd = conn.fd_frames[i].fd;
                stop = conn.fd_frames[i].end;
                break;
            }
            if (conn.fd_frames[i].at > pos && conn.fd_frames[i].at < stop)
                stop = conn.fd_frames[i].at;
        }
        struct iovec iov = {(void *)(bytes + (pos - from)), (size_t)(stop - pos)};
        if ((fd >= 0 ? flyt_writev_full_fd(conn.link.fd, &iov, 1, fd) : flyt_link_writev(&conn.link, &iov, 1)) != 0)
            return -1;
        pos = stop;
    }
    return 0;
}

static void *replay_thread(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&conn.send_lock);
    if (replay_write(conn.replay_from) != 0) {
        /* the new server is gone too: the receiver finds out */
    }
    gate_open(1);
    pthread_mutex_unlock(&conn.send_lock);
    return NULL;
}

static void start_replay(uint64_t from)
{
    conn.replay_from = from;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, replay_thread, NULL) != 0)
        replay_thread(NULL); /* no thread to be had: here, hoping the replies fit meanwhile */
    pthread_attr_destroy(&attr);
}

/* Seconds a moved session is waited for: a suspended (preempted) one is restored
 * whenever the operator does, so by default without a limit (10 years). */
static int resume_timeout_s(uint32_t reason, const char **which)
{
    int suspended = reason == FLYT_MOVED_SUSPENDED;
    *which = suspended ? "FLYT_SUSPEND_TIMEOUT_S" : "FLYT_RECONNECT_TIMEOUT_S";
    int s = env_seconds(*which, suspended ? 0 : 300);
    if (suspended && s == 0) {
        fprintf(stderr, "flyt: the session is suspended (preempted); the program waits until it "
                        "is restored (FLYT_SUSPEND_TIMEOUT_S sets a limit)\n");
        return 10 * 365 * 86400;
    }
    return s;
}

static int resume_session(uint64_t moved_at, uint32_t reason)
{
    /* a sender blocked on the old socket fails now, and waits for the verdict */
    shutdown(conn.link.fd, SHUT_RDWR);
    gate_close();
    link_close(&conn.link);
    flyt_reader_free(&rx);
    const char *which;
    int timeout_s = resume_timeout_s(reason, &which);
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_s;
    char why[768] = "";
    uint64_t resume_at = 0;
    flyt_link l = {.fd = -1};
    move_clock.tries = 0;
    /* short at first: the restored server usually listens within milliseconds of the move */
    for (long backoff = 5, rc = -1; rc != 0;) {
        long left = ms_left(&deadline);
        double t_try = clock_ms();
        move_clock.tries++;
        if (left <= 0 || (rc = try_resume(left, &l, &resume_at, why, sizeof why)) == -2)
            break;
        move_clock.hello_ms = clock_ms() - t_try;
        if (rc != 0) {
            sleep_ms(backoff < left ? backoff : left);
            backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
        }
    }
    if (l.fd < 0 || flyt_reader_init(&rx, l.fd, RX_BUF, 0) != 0) {
        char line[1024];
        snprintf(line, sizeof line, "the server moved the session at request byte %llu and it "
                 "was not resumed within %d s (%s); last try: %s",
                 (unsigned long long)moved_at, timeout_s, which, l.fd < 0 ? why : "out of memory");
        link_close(&l);
        conn.link = l;
        fail_all(line);
        pthread_mutex_lock(&conn.send_lock);
        gate_open(0);
        pthread_mutex_unlock(&conn.send_lock);
        return -1;
    }
    conn.link = l;
    rx.tls = l.tls;
    confirm(resume_at);
    move_clock.resumed = clock_ms();
    move_clock.awaiting = 1;
    if (flyt_tracing())
        fprintf(stderr, "flyt: session resumed at request byte %llu (moved at %llu): sending "
                "%llu bytes of requests again\n", (unsigned long long)resume_at,
                (unsigned long long)moved_at,
                (unsigned long long)(flyt_replay_end(&conn.replay) - resume_at));
    start_replay(resume_at);
    return 0;
}

CUresult flyt_connect_once(void)
{
    if (flyt_conn_forked())
        return CUDA_ERROR_NOT_INITIALIZED;
    int state = __atomic_load_n(&conn.initialized, __ATOMIC_ACQUIRE);
    if (state == 0) {
        pthread_mutex_lock(&conn.init_lock);
        if (conn.initialized == 0) {
            int ok = connect_server() == 0;
            /* a tool's failed start is not the program's: its cuInit tries again */
            int remembered = ok || !flyt_in_tool_scope();
            if (!ok && remembered)
                atomic_store(&conn.broken, 1);
            if (remembered)
                __atomic_store_n(&conn.initialized, ok ? 1 : -1, __ATOMIC_RELEASE);
        }
        state = conn.initialized;
        pthread_mutex_unlock(&conn.init_lock);
    }
    return state == 1 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

int flyt_conn_gets_output(void)
{
    return __atomic_load_n(&conn.initialized, __ATOMIC_ACQUIRE) == 1 && !atomic_load(&conn.broken) &&
           conn.pid == getpid() && conn.server_minor >= FLYT_MINOR_DEVICE_OUTPUT;
}

int flyt_conn_device_count(void)
{
    return flyt_connect_once() == CUDA_SUCCESS ? conn.device_count : 0;
}

const flyt_rep_device_snapshot *flyt_conn_snapshot(void) { return &conn.snapshot; }
flyt_rep_device_snapshot *flyt_conn_snapshot_mut(void) { return &conn.snapshot; }

/* ---- calls ---- */

int flyt_conn_shares_memory(void)
{
    return flyt_connect_once() == CUDA_SUCCESS && conn.shares_memory;
}

int flyt_conn_server_minor(void)
{
    return flyt_connect_once() == CUDA_SUCCESS ? conn.server_minor : -1;
}

int flyt_conn_ships_images_unhashed(void)
{
    return flyt_connect_once() == CUDA_SUCCESS && (conn.same_machine || !conn.image_cache) &&
           conn.server_minor >= FLYT_MINOR_IMAGE_UNHASHED;
}

/* A frame sent with a descriptor, for a replay. Under send_lock. More such
 * frames in flight than FD_FRAMES (threads mapping host memory at once) go
 * unrecorded: replayed, such a frame would reach the server without it. */
static void note_fd_frame(uint64_t at, uint64_t end, int fd)
{
    if (conn.n_fd_frames == FD_FRAMES)
        return;
    conn.fd_frames[conn.n_fd_frames].at = at;
    conn.fd_frames[conn.n_fd_frames].end = end;
    conn.fd_frames[conn.n_fd_frames++].fd = fd;
}

/* Bytes of a frame: header, request, data. */
static uint64_t frame_bytes(size_t req_size, const struct iovec *data, int data_count)
{
    uint64_t n = sizeof(struct flyt_frame_hdr) + req_size;
    for (int i = 0; i < data_count; i++)
        n += data[i].iov_len;
    return n;
}

/* Sends one frame; with a server that can resume the session it goes out of
 * its copy in the replay buffer. 0; -1 when the write failed (errno); -2 out
 * of memory for the copy (nothing sent). Under send_lock. */
static int send_frame_fd(uint16_t op, uint16_t flags, uint32_t seq, const void *req,
                         size_t req_size, const struct iovec *data, int data_count, int pass_fd)
{
    struct iovec iov[8];
    if (data_count > 6)
        return -1;
    uint64_t length = frame_bytes(req_size, data, data_count) - sizeof(struct flyt_frame_hdr);
    if (length > FLYT_MAX_PAYLOAD)
        return -1;
    struct flyt_frame_hdr h = {.length = (uint32_t)length, .op = op, .flags = flags, .seq = seq};
    iov[0].iov_base = &h;
    iov[0].iov_len = sizeof h;
    iov[1].iov_base = (void *)req;
    iov[1].iov_len = req_size;
    for (int i = 0; i < data_count; i++)
        iov[2 + i] = data[i];
    int n = 2 + data_count;
    if (conn.resumable && flyt_replay_by_ref(&conn.replay, sizeof h + (size_t)length)) {
        /* sent alone (send_lock_for), and its sender waits until it is consumed */
        struct iovec held[FLYT_REPLAY_REF_IOVS];
        int nheld;
        if (pass_fd >= 0 || flyt_replay_append_ref(&conn.replay, iov, n, 2, sizeof h + length,
                                                   held, &nheld) != 0)
            return -2;
        return flyt_link_writev(&conn.link, held, nheld);
    }
    if (conn.resumable) {
        size_t total = sizeof h + (size_t)length;
        uint64_t at = flyt_replay_end(&conn.replay);
        const char *copy = flyt_replay_append(&conn.replay, iov, n, total);
        if (copy == NULL)
            return -2;
        if (pass_fd >= 0)
            note_fd_frame(at, at + total, pass_fd);
        iov[0].iov_base = (void *)copy;
        iov[0].iov_len = total;
        n = 1;
    }
    if (pass_fd >= 0)
        return flyt_writev_full_fd(conn.link.fd, iov, n, pass_fd);
    return flyt_link_writev(&conn.link, iov, n);
}

static CUresult call(uint16_t op, const void *req, size_t req_size, const struct iovec *data,
                     int data_count, int pass_fd, struct flyt_reply_sink *sink);

/* Forgets the descriptors of frames known consumed. Under send_lock. */
static void forget_fd_frames(uint64_t consumed)
{
    for (int i = 0; i < conn.n_fd_frames;)
        if (conn.fd_frames[i].end <= consumed)
            conn.fd_frames[i] = conn.fd_frames[--conn.n_fd_frames];
        else
            i++;
}

/* Frames that never wait for room in the replay buffer: the server may need
 * them to consume what is there (a host function's acknowledgement), or they
 * make the room. */
static int never_waits(uint16_t op) { return op == FLYT_OP_PING || op == FLYT_OP_HOST_FUNC_DONE; }

/* Takes send_lock for a frame of n bytes: once no move is under way and,
 * with a server that can resume the session, the replay buffer has room
 * (a PING makes it: its reply proves every earlier request consumed). 0, or
 * -1 when the connection is lost (send_lock not held). */
static int send_lock_for(uint16_t op, uint64_t n)
{
    pthread_mutex_lock(&conn.send_lock);
    for (;;) {
        while (conn.gate_closed && !atomic_load(&conn.broken))
            pthread_cond_wait(&conn.gate_cv, &conn.send_lock);
        if (atomic_load(&conn.broken)) {
            pthread_mutex_unlock(&conn.send_lock);
            return -1;
        }
        if (!conn.resumable)
            return 0;
        uint64_t consumed = __atomic_load_n(&conn.confirmed, __ATOMIC_ACQUIRE);
        flyt_replay_trim(&conn.replay, consumed);
        forget_fd_frames(consumed);
        if (never_waits(op) || !flyt_replay_must_wait(&conn.replay, (size_t)n))
            return 0;
        pthread_mutex_unlock(&conn.send_lock);
        flyt_req_none ping = {0};
        CUresult r = call(FLYT_OP_PING, &ping, sizeof ping, NULL, 0, -1, NULL);
        if (r != CUDA_SUCCESS && atomic_load(&conn.broken))
            return -1;
        pthread_mutex_lock(&conn.send_lock);
    }
}

/* A send failed on a connection that may be moving: 0 once the receiver
 * resumed the session elsewhere (the frame, kept for replay, went out
 * again), -1 when it gave the connection up. */
static int await_move(uint64_t epoch)
{
    pthread_mutex_lock(&conn.wait_lock);
    while (conn.epoch == epoch && !atomic_load(&conn.broken))
        pthread_cond_wait(&conn.move_cv, &conn.wait_lock);
    int moved = conn.epoch != epoch;
    pthread_mutex_unlock(&conn.wait_lock);
    return moved ? 0 : -1;
}

/* The frame was sent, or kept and sent again after a move: 0; else -1 (the
 * connection is lost) or -2 (out of memory, nothing sent). */
static int sent_or_moved(int rc, uint64_t epoch)
{
    if (rc == -1 && conn.resumable)
        return await_move(epoch);
    return rc;
}

static CUresult lost(void)
{
    return conn.initialized == 1 ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_ERROR_NO_DEVICE;
}

static void wait_reply(struct waiter *w)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (atomic_load_explicit(&w->done, memory_order_acquire))
            break;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > SPIN_NS)
            break;
    }
    while (sem_wait(&w->sem) != 0 && errno == EINTR)
        ;
}

static CUresult call(uint16_t op, const void *req, size_t req_size, const struct iovec *data,
                        int data_count, int pass_fd, struct flyt_reply_sink *sink)
{
    if (flyt_conn_forked())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (op != FLYT_OP_HELLO && op != FLYT_OP_DEVICE_SNAPSHOT && flyt_connect_once() != CUDA_SUCCESS)
        return CUDA_ERROR_NO_DEVICE;
    if (atomic_load(&conn.broken))
        return lost();
    uint64_t n = frame_bytes(req_size, data, data_count);
    if (send_lock_for(op, n) != 0)
        return lost();
    struct waiter w = {.op = op, .sink = sink};
    sem_init(&w.sem, 0, 0);
    w.seq = conn.next_seq++;
    w.end_off = conn.resumable ? flyt_replay_end(&conn.replay) + n : 0;
    uint64_t epoch = conn.epoch;
    waiter_add(&w);
    int rc = send_frame_fd(op, 0, w.seq, req, req_size, data, data_count, pass_fd);
    pthread_mutex_unlock(&conn.send_lock);
    rc = sent_or_moved(rc, epoch);
    if (rc != 0) {
        if (waiter_take(w.seq) != NULL) {
            sem_destroy(&w.sem);
            if (rc == -2)
                return CUDA_ERROR_OUT_OF_MEMORY;
            fail_all(strerror(errno));
            return lost();
        }
        /* the receiver already failed it */
    }
    wait_reply(&w);
    sem_destroy(&w.sem);
    if (w.reply.result == -1 && atomic_load(&conn.broken))
        return lost();
    if (w.callbacks_seen)
        wait_callbacks(w.callbacks_seen);
    if (w.reply.deferred != 0)
        trace_error(op, "an earlier pipelined call", w.reply.deferred);
    if (w.reply.result != CUDA_SUCCESS)
        trace_error(op, "this call", w.reply.result);
    if (w.reply.result == CUDA_SUCCESS && w.reply.deferred != 0)
        return (CUresult)w.reply.deferred;
    return (CUresult)w.reply.result;
}

/* Set once, never unset (managed memory between machines installs them). */
static _Atomic(flyt_before_hook) hook_before;
static _Atomic(flyt_after_hook) hook_after;

void flyt_conn_set_hooks(flyt_before_hook before, flyt_after_hook after)
{
    atomic_store(&hook_before, before);
    atomic_store(&hook_after, after);
}

static CUresult hooked_call(uint16_t op, const void *req, size_t req_size,
                            const struct iovec *data, int data_count, int pass_fd,
                            struct flyt_reply_sink *sink)
{
    flyt_before_hook before = atomic_load_explicit(&hook_before, memory_order_acquire);
    CUresult r = before ? before(op, req) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t t0 = flyt_profiling() ? flyt_mono_ns() : 0;
    r = call(op, req, req_size, data, data_count, pass_fd, sink);
    if (t0)
        flyt_profile_call(op, frame_bytes(req_size, data, data_count), flyt_mono_ns() - t0, 1);
    flyt_after_hook after = atomic_load_explicit(&hook_after, memory_order_acquire);
    if (after)
        after(op, r);
    return r;
}

CUresult flyt_call(uint16_t op, const void *req, size_t req_size, const struct iovec *data,
                      int data_count, struct flyt_reply_sink *sink)
{
    return hooked_call(op, req, req_size, data, data_count, -1, sink);
}

CUresult flyt_call_fd(uint16_t op, const void *req, size_t req_size, int fd,
                         struct flyt_reply_sink *sink)
{
    return hooked_call(op, req, req_size, NULL, 0, fd, sink);
}

CUresult flyt_send_async(uint16_t op, const void *req, size_t req_size,
                            const struct iovec *data, int data_count)
{
    if (flyt_conn_forked())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult err = flyt_connect_once();
    if (err != CUDA_SUCCESS)
        return err;
    if (atomic_load(&conn.broken))
        return lost();
    flyt_before_hook before = atomic_load_explicit(&hook_before, memory_order_acquire);
    if (before && (err = before(op, req)) != CUDA_SUCCESS)
        return err;
    uint64_t n = frame_bytes(req_size, data, data_count);
    if (flyt_profiling())
        flyt_profile_call(op, n, 0, 0);
    if (send_lock_for(op, n) != 0)
        return lost();
    uint64_t epoch = conn.epoch;
    int by_ref = conn.resumable && flyt_replay_by_ref(&conn.replay, (size_t)n);
    int rc = send_frame_fd(op, FLYT_F_NOREPLY, conn.next_seq++, req, req_size, data, data_count, -1);
    pthread_mutex_unlock(&conn.send_lock);
    rc = sent_or_moved(rc, epoch);
    if (rc == -2)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != 0) {
        fail_all(strerror(errno));
        return lost();
    }
    if (by_ref) { /* the replay holds the caller's memory: it is the caller's again once consumed */
        flyt_req_none ping = {0};
        CUresult r = call(FLYT_OP_PING, &ping, sizeof ping, NULL, 0, -1, NULL);
        if (r != CUDA_SUCCESS && atomic_load(&conn.broken))
            return lost();
    }
    return CUDA_SUCCESS;
}

CUresult flyt_call_u64(uint16_t op, const void *req, size_t req_size, uint64_t *out)
{
    flyt_rep_u64 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    CUresult err = flyt_call(op, req, req_size, NULL, 0, &sink);
    if (err == CUDA_SUCCESS && out)
        *out = rep.value;
    return err;
}

CUresult flyt_call_handle(uint16_t op, uint64_t handle)
{
    flyt_req_handle req = {.handle = handle};
    return flyt_call(op, &req, sizeof req, NULL, 0, NULL);
}

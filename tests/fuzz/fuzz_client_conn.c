/*
 * libFuzzer target: the client library's decoder of what its server sends
 * (src/client/conn.c's receiver: replies, OUTPUT and CALLBACK frames). The
 * input is the server's byte stream after a HELLO it accepted. Three calls
 * are waiting when it arrives, in a fixed order (seq 1: MEM_ALLOC with a
 * u64 reply, seq 2: MEMCPY_DTOH with a reply struct, 64 bytes of data and a
 * trailer, seq 3: DEVICE_SNAPSHOT with no reply struct), and two host
 * functions are registered (callback ids 1 and 2). Whatever the bytes,
 * every call must return, the connection must end with an error on a
 * protocol violation, and nothing may touch memory it does not own.
 *
 * conn.c keeps its one connection in static state, so it is included here:
 * each input starts from the state the library has before it connects.
 */
#include "../../src/client/conn.c"

#include <signal.h>

#define NCALLS 3

/* The application's output (OUTPUT frames) is dropped. */
void flyt_device_output(uint32_t fd, const void *buf, size_t len)
{
    (void)fd;
    volatile const char *p = buf;
    for (size_t i = 0; i < len; i++) /* every byte must be readable */
        (void)p[i];
}

/* A resize's new share (SHARE_CHANGED) would update device.c's snapshot. */
void flyt_device_share_changed(const struct flyt_msg_share *m)
{
    volatile int64_t seen = (int64_t)m->total_mem + m->sm_count;
    (void)seen;
}

/* No host memory is shared here (regions.c): a move has none to share again. */
void flyt_region_reply_delivered(void) {}

int flyt_regions_each(int (*fn)(const flyt_req_host_remap *req, int fd, void *arg), void *arg,
                      size_t *count)
{
    (void)fn, (void)arg;
    *count = 0;
    return 0;
}

/* The program's cuInit (device.c): the fuzzed connection is the program's. */
int flyt_in_tool_scope(void) { return 0; }
int flyt_program_started(void) { return 1; }
void flyt_init_forget(void) {}

/* Tracing (errors.c, with the generated error names) and profiling are off here. */
int flyt_tracing(void) { return 0; }
int flyt_profiling(void) { return 0; }
void flyt_profile_call(uint16_t op, uint64_t bytes, uint64_t wait_ns, int waited)
{
    (void)op, (void)bytes, (void)wait_ns, (void)waited;
}
CUresult flyt_trace(const char *where, CUresult r)
{
    (void)where;
    return r;
}

static __typeof__(conn) pristine;
static sem_t may_call[NCALLS];
static int server_fd;
static const uint8_t *input;
static size_t input_size;

static void host_fn(void *user) { (void)user; }

static void stream_fn(CUstream stream, CUresult status, void *user)
{
    (void)stream;
    (void)status;
    (void)user;
}

/* The server's side: waits for each call in turn, then sends the input. */
static void *server_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < NCALLS; i++) {
        struct flyt_frame_hdr h;
        if (flyt_read_full(server_fd, &h, sizeof h) != 0 || flyt_skip(server_fd, h.length) != 0)
            abort(); /* the client sent no well-formed request: the harness is wrong */
        if (i + 1 < NCALLS)
            sem_post(&may_call[i + 1]);
    }
    flyt_write_full(server_fd, input, input_size); /* fails once the client gave up: fine */
    shutdown(server_fd, SHUT_WR);
    char sink[4096];
    while (read(server_fd, sink, sizeof sink) > 0) /* HOST_FUNC_DONE frames */
        ;
    return NULL;
}

static void *caller_thread(void *arg)
{
    int i = (int)(intptr_t)arg;
    while (sem_wait(&may_call[i]) != 0)
        ;
    if (i == 0) {
        flyt_req_mem_alloc req = {0};
        uint64_t ptr;
        flyt_call_u64(FLYT_OP_MEM_ALLOC, &req, sizeof req, &ptr);
    } else if (i == 1) {
        flyt_req_memcpy req = {0};
        flyt_rep_none rep;
        char data[64];
        struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep, .data = data,
                                       .data_max = sizeof data, .streamed = 1};
        flyt_call(FLYT_OP_MEMCPY_DTOH, &req, sizeof req, NULL, 0, &sink);
    } else {
        flyt_req_device req = {0};
        flyt_call(FLYT_OP_DEVICE_SNAPSHOT, &req, sizeof req, NULL, 0, NULL);
    }
    return NULL;
}

static void free_callbacks(struct callback *cb)
{
    while (cb) {
        struct callback *next = cb->next;
        free(cb);
        cb = next;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int first = 1;
    if (first) {
        pristine = conn;
        signal(SIGPIPE, SIG_IGN);
        first = 0;
    }
    conn = pristine;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        abort();
    conn.link.fd = sv[0];
    conn.initialized = 1;
    conn.device_count = 1;
    conn.server_minor = FLYT_PROTO_MINOR;
    conn.pid = getpid();
    /* a SESSION_MOVED frame ends the connection (FLYT_RESUME=0) instead of
     * reconnecting to endpoints this harness does not have */
    conn.resumable = 0;
    server_fd = sv[1];
    input = data;
    input_size = size;
    if (flyt_reader_init(&rx, conn.link.fd, RX_BUF, 0) != 0)
        abort();
    flyt_callback_register(host_fn, NULL, NULL, NULL, 1, FLYT_STREAM_LEGACY);
    flyt_callback_register(NULL, stream_fn, NULL, NULL, 0, 0);

    pthread_t receiver, callbacks, server, callers[NCALLS];
    for (int i = 0; i < NCALLS; i++)
        sem_init(&may_call[i], 0, i == 0);
    if (pthread_create(&receiver, NULL, receiver_thread, NULL) != 0 ||
        pthread_create(&callbacks, NULL, callback_thread, NULL) != 0 ||
        pthread_create(&server, NULL, server_thread, NULL) != 0)
        abort();
    for (int i = 0; i < NCALLS; i++)
        if (pthread_create(&callers[i], NULL, caller_thread, (void *)(intptr_t)i) != 0)
            abort();
    for (int i = 0; i < NCALLS; i++)
        pthread_join(callers[i], NULL);
    pthread_join(receiver, NULL); /* it ends at the end of the input at the latest */
    shutdown(sv[0], SHUT_RDWR); /* the server's writes and reads end too */

    /* the callbacks received have run; then the callback thread (in its wait) goes */
    pthread_mutex_lock(&conn.cb_lock);
    while (conn.cb_done < conn.cb_received)
        pthread_cond_wait(&conn.cb_cond, &conn.cb_lock);
    pthread_mutex_unlock(&conn.cb_lock);
    pthread_cancel(callbacks);
    pthread_join(callbacks, NULL);

    pthread_join(server, NULL);
    close(sv[0]);
    close(sv[1]);
    flyt_reader_free(&rx);
    free_callbacks(conn.cb_registered);
    free_callbacks(conn.cb_queue_head);
    for (int i = 0; i < NCALLS; i++)
        sem_destroy(&may_call[i]);
    return 0;
}

/*
 * One client session: the loop a forked child runs on its connection, and
 * the helpers op handlers use to read trailing data and send replies.
 *
 * Every handler has the shape  int handle_NAME(flyt_session *s, flyt_call *c)
 * and returns FLYT_CONT to go on with the next frame or one of the FLYT_END_*
 * codes to end the session. A handler that does not send its reply itself
 * (flyt_reply*) leaves c->result and c->rep for the loop, which sends the
 * standard reply, or, for FLYT_F_NOREPLY frames, keeps a failure as the
 * session's deferred error.
 */
#ifndef FLYT_SESSION_H
#define FLYT_SESSION_H

#include <pthread.h>
#include <sys/types.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "device_output.h"
#include "flyt_proto.h"
#include "flyt_reader.h"
#include "flyt_tls.h"
#include "handles.h"
#include "quota.h"
#include "session_watch.h"

struct flyt_state;

/* Chunk size of bulk copies through staging buffers. */
#define FLYT_STAGING_CHUNK ((size_t)8 << 20)

/* Child exit statuses. */
#define FLYT_EXIT_OK       0 /* goodbye, disconnect or a read/write error */
#define FLYT_EXIT_BACKEND  1 /* the backend could not be opened */
#define FLYT_EXIT_PROTOCOL 3 /* the client broke the protocol */
#define FLYT_EXIT_AUTH     4 /* admission refused (no or a bad session token) */

enum flyt_hstatus {
    FLYT_CONT = 0,  /* next frame */
    FLYT_END_BYE,   /* client said goodbye */
    FLYT_END_IO,    /* connection lost or closed */
    FLYT_END_PROTO, /* protocol violation (already logged) */
    FLYT_END_BACKEND, /* the backend could not be opened */
    FLYT_END_AUTH,  /* admission refused (already logged and answered) */
};

struct flyt_server_config {
    const char *backend_kind; /* "cuda" or "host" */
    int         gpu;
    const char *cache_dir;    /* NULL: no fatbinary cache on disk */
    uint64_t    cache_max_bytes; /* the cache folder's limit, 0: none */
    uint64_t    max_image_bytes; /* images a session may hold loaded, 0: none */
    unsigned    poll_us;      /* busy-poll this long for the next frame before sleeping */

    /* Admission (--session-id / --session-key-file): with a key, a client must
     * AUTH with a session token for session_id before any other op. */
    const char          *session_id;     /* NULL: standalone, no token asked */
    const unsigned char *session_key;
    size_t               session_key_len;
    /* read again at each admission: the node manager rewrites it when the session's tokens
     * are revoked (docs/api.md, "Revoking a session's tokens") */
    const char          *session_key_file;
    unsigned             admission_timeout_s; /* a client not admitted by then is dropped */
    int                  admitted_fd; /* one byte is written here at admission (-1: none) */

    /* The share (--memory-quota, --sm-groups): 0 / no groups = the whole GPU. */
    uint64_t   memory_quota;
    const int *sm_groups;
    int        sm_ngroups;
    unsigned   sm_granularity;

    /* In-process fuzzing: the peer is this very process, so the server must
     * never read or write the peer's memory (peer copies are refused and the
     * client falls back to the socket). */
    int no_peer_memory;

    /* --restore: the state the first admitted session starts from (state.h) */
    const struct flyt_state *restore;

    /* --tls-cert/--tls-key: a TCP connection starts with a TLS handshake (NULL: none) */
    flyt_tls_ctx *tls_ctx;

    /* The session owns its process (flyt-server's forked child): a call blocked in
     * the driver whose client hung up ends it (session_watch.h). Not for sessions
     * run inside a test or fuzzer. */
    int watch_hangup;
};

/* A host-function notification: made when the host function is enqueued
 * (so the driver thread that runs it never allocates), sent and freed by
 * flyt_post_callback. */
struct flyt_cb_msg {
    struct flyt_cb_msg    *next;
    struct flyt_session   *s;
    uint64_t               callback_id;
    int                    keep; /* a graph's host node: posted as a copy, kept by the session */
    int32_t                status; /* not 0: enqueueing failed, the client runs nothing */
};

enum { FLYT_RD_NONE, FLYT_RD_SESSION, FLYT_RD_AHEAD };
#define FLYT_AHEAD_FDS 16 /* descriptors a read-ahead may hold for later frames */

/* A request of the status page (a checkpoint's, a share's) held while a stream
 * capture is open in the session: looked at again at each request boundary, and
 * an idle session wakes at until_ms (flyt_resize_wait). */
struct flyt_capture_hold {
    uint64_t  gen;      /* the request held (0: none) */
    long long until_ms; /* monotonic: when it stops waiting */
};

typedef struct flyt_session {
    flyt_link                        link;      /* the socket, and its TLS session (TCP, --tls-cert) */
    pid_t                            peer_pid;  /* SO_PEERCRED pid; 0 unknown yet, -1 none (TCP) */
    uid_t                            peer_uid;  /* and its credentials at connect */
    gid_t                            peer_gid;

    /* Input: one recv brings in as many pipelined frames as have arrived
     * (a launch costs no syscall of its own); the buffer grows while reading
     * ahead. A passed descriptor (in.passed_fd) belongs to the frame that
     * ends at in.fd_end. */
    flyt_reader                      in;
    uint64_t                         frame_start; /* offset of the current frame */
    uint64_t                         frame_end;
    const char                      *peer;
    const struct flyt_server_config *cfg;
    flyt_backend                    *b;
    flyt_handles                     handles;
    int32_t                          deferred;        /* first failed NOREPLY result */
    uint64_t                         default_pool_id; /* 0 until POOL_DEFAULT */
    int                              admitted;  /* may use the GPU: no token needed, or AUTH passed */
    int                              sm_count;  /* SMs of the share, 0 = whole GPU */
    struct flyt_memtab               mem;       /* live allocations, when accounted (quota.h) */
    int                              share_sigfd; /* SIGURG: a live resize was posted (resize.h) */
    int                              moved_told;    /* the client holds its SESSION_MOVED */
    struct flyt_capture_hold         ckpt_hold, share_hold; /* requests an open capture holds */
    uint64_t                         share_gen;   /* the page's share this session runs on */
    int                              share_frames; /* the client takes SHARE_CHANGED frames */
    flyt_hash                        stream_attrs; /* stream id + 1 -> attributes set (stream_attrs.h) */
    struct flyt_output               output;    /* the driver's stdout/stderr, for the client */
    struct flyt_watch                watch;     /* ends the session when a blocked call's client left */
    struct flyt_ipc                 *ipc;       /* CUDA IPC with other sessions (ipc.h), NULL until used */

    /* Sending: one frame at a time. Driver threads (host functions) never
     * wait for the session thread: when a send is in progress they queue
     * their frame and whoever holds the sender role sends it on release. */
    pthread_mutex_t     send_mu;
    pthread_cond_t      send_cv;
    int                 send_busy;
    int                 send_failed;
    struct flyt_cb_msg *cbq_head, *cbq_tail;
    struct flyt_cb_msg *kept;     /* graph host nodes' messages, freed at the end */
    int                 captures; /* stream captures begun and not yet ended */
    uint32_t            detached_mapped; /* device-mapped regions restored, not shared again */
    uint64_t            cb_posted; /* CALLBACK frames sent or queued: a host function's ticket */

    /* Host functions in stream order (flyt_host_func_wait, docs/protocol.md).
     * Whoever reads the socket holds the reader role (rd_owner): the session
     * thread while it reads a frame, or a host function waiting for its
     * HOST_FUNC_DONE while the session thread is busy in a handler (the
     * read-ahead: it buffers what comes in, counting acknowledgements). Until
     * the first host function the session thread reads without the role. */
    int                 hf_ack;    /* the client acknowledges host functions */
    int                 hf_used;   /* a host function was enqueued: reads take the role */
    pthread_mutex_t     rd_mu;
    pthread_cond_t      rd_cv;
    int                 rd_owner;  /* FLYT_RD_NONE, FLYT_RD_SESSION, FLYT_RD_AHEAD */
    int                 rd_want;   /* the session thread waits for the role */
    int                 rd_over;   /* no more reading: waiting host functions return */
    int                 wake_fd;   /* eventfd: the session thread wakes a read-ahead */
    uint64_t            scan_pos;  /* offset of the first frame not yet looked at */
    uint64_t            cb_acked;  /* HOST_FUNC_DONE frames seen (atomic) */
    struct { int fd; uint64_t end; } ahead_fds[FLYT_AHEAD_FDS]; /* passed, read ahead */
    int                 n_ahead_fds;

    /* Session moves (docs/protocol.md, "Session moves"): the instance the
     * client knows this session by, and where its request stream starts in
     * `in` (offsets there minus stream_base are the client's stream offsets,
     * which continue across a restore). */
    uint8_t  instance[16];
    int      client_minor;
    uint64_t stream_base;
    uint64_t resume_at; /* restored: the stream offset the client resumes at */

    /* kernel images of the session: shipped by the client (bytes) or found
     * in the cache dir, said when the session ends */
    uint64_t images_received, image_bytes_received, images_from_cache;
    uint64_t image_verify_ns, image_load_ns, image_store_ns; /* hashing or reading, the
                                                             * driver's load, the cache's write */
    uint64_t image_bytes_live; /* images of the loaded modules, which the server keeps */

    /* module globals the client looked up (GLOBAL_GET): a checkpoint writes
     * their contents, a restore checks the driver put them at the same
     * addresses (state.c) */
    struct flyt_global_seen *globals;
    size_t                   nglobals, cap_globals;
} flyt_session;

struct flyt_global_seen {
    uint64_t module; /* its module's id */
    uint64_t addr, size;
    char    *name;
};

typedef struct {
    const struct flyt_frame_hdr *hdr;
    const void                  *req;      /* the op's request struct, already read */
    void                        *rep;      /* the op's reply struct, zeroed */
    uint32_t                     rep_size;
    uint32_t                     data_len; /* trailing request bytes still unread */
    int32_t                      result;   /* CUresult for the standard reply */
    int                          replied;  /* the handler sent the reply itself */
} flyt_call;

typedef int (*flyt_handler)(flyt_session *s, flyt_call *c);

#define FLYT_OP(name, num, req, rep, flags) int handle_##name(flyt_session *s, flyt_call *c);
#include "flyt_ops.def"
#undef FLYT_OP

/* Runs a session on a connected socket until it ends; returns the child's
 * exit status. */
int flyt_session_run(int fd, const char *peer, const struct flyt_server_config *cfg);
/* Opens the backend ahead of the session this process will run (--restore-listen: the
 * device is ready before the state arrives); its HELLO then takes it. 0, or -1 with err. */
int flyt_session_preopen(const struct flyt_server_config *cfg, char *err, size_t errlen);
/* The backend flyt_session_preopen opened, until a session takes it (NULL: none). */
flyt_backend *flyt_session_preopened(void);
/* After flyt_session_preopen, with cfg->restore: opens the session this process will run
 * and restores the state into it now, before its client comes (--restore-listen); the
 * client's HELLO then finds it ready. CUDA_SUCCESS, or the error with err (nothing kept). */
int32_t flyt_session_restore_early(const struct flyt_server_config *cfg, char *err, size_t errlen);

/* ---- helpers for handlers ---- */

/* Logs a protocol violation (op, reason, peer) and returns FLYT_END_PROTO. */
int flyt_violation(flyt_session *s, const flyt_call *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reads exactly len trailing bytes (counted against c->data_len). 0 or -1. */
int flyt_recv_data(flyt_session *s, flyt_call *c, void *buf, size_t len);
/* Reads and drops whatever trailing bytes are left. 0 or -1. */
int flyt_skip_data(flyt_session *s, flyt_call *c);

/* The whole standard reply: {result, deferred}, the reply struct c->rep,
 * then data_len bytes of data. Nothing is sent for NOREPLY frames (a failure
 * becomes the deferred error). 0, or -1 when the connection failed. */
int flyt_reply(flyt_session *s, flyt_call *c, int32_t result, const void *data, size_t data_len);

/* A reply whose data is streamed: begin sends the header (length counts
 * data_len), {result, deferred} and c->rep and keeps the sender role; send
 * data with flyt_reply_data; end gives the role back. Never for NOREPLY. */
int  flyt_reply_begin(flyt_session *s, flyt_call *c, int32_t result, uint64_t data_len);
int  flyt_reply_data(flyt_session *s, const void *buf, size_t len);
void flyt_reply_end(flyt_session *s);

/* Sends an unsolicited CALLBACK frame for m and frees m. Safe from any
 * thread; never waits for a send in progress (it queues m instead).
 * Returns the frame's ticket for flyt_host_func_wait. */
uint64_t flyt_post_callback(struct flyt_cb_msg *m);
/* Sends a SHARE_CHANGED frame (a client that takes them only): what the
 * device reports from now on. The session thread. */
void flyt_send_share_changed(flyt_session *s, int sm_count, uint64_t total_mem);
/* The memory the device reports: the quota, else the GPU's. */
uint64_t flyt_device_total_mem(flyt_session *s);
/* Returns once the client acknowledged the host function of ticket (or the
 * session ends, or the client does not acknowledge). Any thread. */
void flyt_host_func_wait(flyt_session *s, uint64_t ticket);

/* A host function's message for stream st (a graph's host node when graph
 * is not NULL or st is capturing); NULL when out of memory. */
struct flyt_cb_msg *flyt_host_func_msg(flyt_session *s, flyt_bhandle st, int graph_node,
                                       uint64_t callback_id);
/* The trampoline the backend calls a host function message through. */
void flyt_host_func_run(void *msg);

/* CUDA_ERROR_NOT_SUPPORTED (and a warning saying why) when st is capturing:
 * for copies whose source bytes came with the request. */
CUresult flyt_capture_refuse(flyt_session *s, flyt_bhandle st, const char *what);

/* Stream ids 0/1/2 map to the backend's fixed streams; others must be
 * STREAM_CREATE ids. CUDA_SUCCESS or CUDA_ERROR_INVALID_HANDLE. */
CUresult flyt_lookup_stream(flyt_session *s, uint64_t id, flyt_bhandle *out);
/* Any other typed id. */
CUresult flyt_lookup(flyt_session *s, uint64_t id, enum flyt_htype type, flyt_bhandle *out);
/* A new backend stream or event under the client's id wanted (0: one the
 * server picks, *id); if the table cannot take it the object is destroyed
 * again so nothing leaks, and c->result says why (handlers_stream.c). */
void flyt_publish_stream_event(flyt_session *s, flyt_call *c, enum flyt_htype type, flyt_bhandle bh,
                               uint64_t wanted, uint64_t *id);

/* Checks the frame's payload length is exactly the request struct plus
 * extra trailing bytes; logs and returns FLYT_END_PROTO if not, else FLYT_CONT. */
int flyt_expect_data(flyt_session *s, flyt_call *c, uint64_t extra);

/* The descriptor passed with the current frame, or -1; the caller owns it. */
int flyt_take_passed_fd(flyt_session *s);
/* For loops a request drives: 1 when the client has hung up, so the work
 * can stop (nobody is left to see it). Looks at the socket every 256th step
 * only. */
int flyt_client_gone(flyt_session *s, uint64_t step);

/* The client proved itself (a valid HELLO on a standalone server, a valid session token on
 * a managed one): its admission deadline ends, it takes a slot of the status page, and
 * the parent learns it may no longer drop it. -1 (logged) when every slot is taken. */
int flyt_session_admit(flyt_session *s);

/* Opens the backend and applies the SM share; on failure the backend is
 * closed again and err says why. CUDA_SUCCESS or the failing result. */
int32_t flyt_session_open_backend(flyt_session *s, char *err, size_t errlen);
/* The handshake is over (HELLO, or AUTH on a managed server): the client's
 * request stream starts at the next byte. */
void flyt_session_stream_starts(flyt_session *s);
/* Bytes of the client's request stream consumed so far (at a request
 * boundary: every request before the next one read). */
uint64_t flyt_session_consumed(const flyt_session *s);
/* Sends the client SESSION_MOVED (reason: FLYT_MOVED_*) before the checkpoint
 * that stops the session is answered: whoever asked for it stops this server
 * next, and the client must have the frame by then, or it would see only a
 * closed connection. 0 when sent, -1 when the client cannot be told (an older
 * client, a broken socket). */
int flyt_session_tell_moved(flyt_session *s, uint32_t reason);
/* Whether request gen (what: "checkpoint", "new share") is to wait for the session's
 * open stream capture to end, at most wait_ms from the first time it is asked (said
 * once in the log); 0 when it goes ahead (no capture, or the wait is over), h
 * then holds nothing. */
int flyt_capture_holds(flyt_session *s, struct flyt_capture_hold *h, uint64_t gen, long wait_ms,
                       const char *what);

/* HOST_FUNC_DONE frames among the bytes read ahead past the consumed ones
 * (counted already; a client replays them after a move). */
uint64_t flyt_session_acks_ahead(const flyt_session *s);

/* The shared bytes [offset, offset + size) of a HOST_MAP region, in *host. */
CUresult flyt_region_span(flyt_session *s, uint64_t region, uint64_t offset, uint64_t size,
                          char **host);
/* Reserves [addr, addr + size) in this process (PROT_NONE) for a detached
 * device-mapped region, so that nothing takes the address before its client
 * shares the memory again; 0, or -1 when it is taken. */
int flyt_region_reserve(uint64_t addr, uint64_t size);
/* CUDA_SUCCESS when a region is mapped here; a detached one (restored, not
 * shared again by its client) answers CUDA_ERROR_NOT_MAPPED, logged once. */
CUresult flyt_region_attached(struct flyt_hentry *e);
/* CUDA_ERROR_NOT_MAPPED when one of a launch's 8-byte parameter words points
 * into a detached device-mapped region (the kernel would fault on it). */
CUresult flyt_regions_check_params(flyt_session *s, const void *params, uint32_t bytes);
/* Unmaps the shared host-memory regions (device reset). */
void flyt_regions_forget(flyt_session *s);

/* Backend calls; an operation a backend leaves NULL is "not supported". */
#define FLYT_BCALL(s, fn, ...) \
    ((s)->b->ops->fn ? (s)->b->ops->fn((s)->b, __VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)
#define FLYT_BCALL0(s, fn) ((s)->b->ops->fn ? (s)->b->ops->fn((s)->b) : CUDA_ERROR_NOT_SUPPORTED)

#endif

/*
 * Checkpoint and restore of a session (docs/state-format.md) with the host
 * backend: a session allocates buffers with patterns, makes streams, events,
 * a module and a function; a checkpoint request through the status page
 * writes its state; a new flyt-server --restore FILE serves a client the same
 * pointers with the same contents and the same ids. A stream capture makes the capture
 * fail naming it, with the session carrying on; a corrupted file and one of a
 * newer format version are refused at start. Host memory the client shared
 * (HOST_MAP, HOST_MAP_AT) is captured without its contents: restored, such a
 * region is detached (its copies fail cleanly) until HOST_REMAP gives the
 * server the memfd again; a version-3 file (no such sections) still restores.
 * A state of several 4 MiB chunks carries the chunked trailer of format
 * version 6, and a changed byte in any chunk, two chunks swapped or a
 * version-5 style trailer are refused.
 *
 * usage: test_server_state PATH-TO-flyt-server
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "check.h"
#include "ckpt_request.h"
#include "flyt_server_status.h"
#include "harness.h"
#include "state_format.h"

#define NBUF 3
static const uint64_t buf_size[NBUF] = {4096, (1u << 20) + 13, 3 * 4096 + 100};
static uint64_t buf_ptr[NBUF];
#define STREAM_ID (FLYT_CLIENT_IDS + 7)
#define EVENT_ID  (FLYT_CLIENT_IDS + 9)
#define T_NOT_READY 600

#define T_ALREADY_MAPPED 208
#define T_NOT_MAPPED     211
#define REGION_SIZE      (4 * 4096)

static char dir[64], status_path[128], state_path[128], big_path[128];
#define BIG_SIZE (3 * FLYT_STATE_CHUNK + 4099) /* a state of several chunks, the last short */
/* host memory shared with the session: [0] by HOST_MAP, [1] by HOST_MAP_AT */
static int region_fd[2];
static unsigned char *region_view[2];
static uint64_t region_id[2];
static uint64_t server_stream, module_id, func_id;

static unsigned char pattern(int buf, uint64_t i)
{
    return (unsigned char)(i * 31u + (uint64_t)buf * 7u + (i >> 9));
}

static unsigned char *expected(int b)
{
    unsigned char *p = malloc(buf_size[b]);
    for (uint64_t i = 0; i < buf_size[b]; i++)
        p[i] = pattern(b, i);
    return p;
}

static int stream_create(int fd, uint32_t flags, int prio, uint64_t id, uint64_t *out)
{
    flyt_req_stream_create req = {flags, prio, id};
    flyt_rep_u64 rep = {0};
    int rc = th_call_rep(fd, FLYT_OP_STREAM_CREATE, &req, sizeof req, NULL, 0, &rep, sizeof rep);
    *out = rep.value;
    return rc;
}

static int func_get(int fd, uint64_t module, const char *name, uint64_t *func)
{
    flyt_req_named req = {module, (uint32_t)strlen(name) + 1, 0};
    struct th_reply r;
    int rc = th_call(fd, FLYT_OP_FUNC_GET, &req, sizeof req, name, req.name_len, &r);
    if (rc == T_SUCCESS && r.body_len >= sizeof(flyt_rep_func))
        *func = ((const flyt_rep_func *)(const void *)r.body)->func;
    th_reply_free(&r);
    return rc;
}

static int handle_op(int fd, uint16_t op, uint64_t handle)
{
    flyt_req_handle req = {handle};
    return th_call(fd, op, &req, sizeof req, NULL, 0, NULL);
}

/* Posts a checkpoint request for the connected session as the node manager
 * would, and waits for its answer; returns its result. */
static int checkpoint(const char *path, char *error, size_t errlen)
{
    int result = ckpt_wait(status_path, ckpt_post(status_path, path, 0), 5000, error, errlen);
    CHECK_NE(result, -1, "the checkpoint was answered");
    return result;
}

static void build_session(int fd)
{
    th_say("a session with buffers, streams, events, a module and a function");
    for (int b = 0; b < NBUF; b++) {
        CHECK_EQ(th_alloc(fd, buf_size[b], &buf_ptr[b]), T_SUCCESS, "MEM_ALLOC %d", b);
        unsigned char *p = expected(b);
        CHECK_EQ(th_htod(fd, buf_ptr[b], p, buf_size[b]), T_SUCCESS, "pattern into buffer %d", b);
        free(p);
    }
    uint64_t id;
    CHECK_EQ(stream_create(fd, 1 /* CU_STREAM_NON_BLOCKING */, -2, STREAM_ID, &id), T_SUCCESS,
             "stream with a client id");
    CHECK_EQ(stream_create(fd, 0, 0, 0, &server_stream), T_SUCCESS, "stream with a server id");
    flyt_req_event_create ev = {2 /* CU_EVENT_DISABLE_TIMING */, 0, EVENT_ID};
    CHECK_EQ(th_call(fd, FLYT_OP_EVENT_CREATE, &ev, sizeof ev, NULL, 0, NULL), T_SUCCESS, "event");
    size_t img_size;
    unsigned char *img = th_fake_fatbin(&img_size);
    CHECK_EQ(th_module_load(fd, img, img_size, &module_id), T_SUCCESS, "MODULE_LOAD");
    free(img);
    CHECK_EQ(func_get(fd, module_id, "kernel_one", &func_id), T_SUCCESS, "FUNC_GET");
}

static unsigned char region_pattern(int r, uint64_t i) { return (unsigned char)(i * 13u + 101u * (unsigned)r); }

/* Two regions of the client's memory, filled with their patterns. */
static void share_regions(int fd)
{
    th_say("host memory shared by HOST_MAP and (device-mapped) HOST_MAP_AT");
    for (int r = 0; r < 2; r++) {
        region_fd[r] = th_memfd(REGION_SIZE, 1);
        region_view[r] = mmap(NULL, REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, region_fd[r], 0);
        CHECK(region_view[r] != MAP_FAILED, "region %d mapped here", r);
        for (uint64_t i = 0; i < REGION_SIZE; i++)
            region_view[r][i] = region_pattern(r, i);
    }
    flyt_req_host_map m = {REGION_SIZE};
    flyt_rep_u64 one;
    CHECK_EQ(th_call_fd(fd, FLYT_OP_HOST_MAP, &m, sizeof m, region_fd[0], &one, sizeof one),
             T_SUCCESS, "HOST_MAP");
    region_id[0] = one.value;
    flyt_req_host_map_at at = {.size = REGION_SIZE, .addr = (uint64_t)(uintptr_t)region_view[1],
                               .flags = 0x08 /* CU_MEMHOSTREGISTER_READ_ONLY */}; /* kept across a move */
    flyt_rep_u64_pair two;
    CHECK_EQ(th_call_fd(fd, FLYT_OP_HOST_MAP_AT, &at, sizeof at, region_fd[1], &two, sizeof two),
             T_SUCCESS, "HOST_MAP_AT");
    region_id[1] = two.a;
    CHECK_EQ(two.b, at.addr, "device pointer = host pointer");
}

/* A region's bytes through the GPU side: copied into buffer 0 (4096 bytes)
 * by MEMCPY_HTOD_MAPPED, then read back. The copy's result. */
static int region_roundtrip(int fd, int r, uint64_t offset, unsigned char *got)
{
    flyt_req_memcpy_mapped c = {buf_ptr[0], region_id[r], offset, 4096, FLYT_STREAM_DEFAULT};
    int rc = th_call(fd, FLYT_OP_MEMCPY_HTOD_MAPPED, &c, sizeof c, NULL, 0, NULL);
    int had;
    if (rc == T_SUCCESS)
        CHECK_EQ(th_dtoh(fd, buf_ptr[0], 4096, got, &had), T_SUCCESS, "read back");
    return rc;
}

struct hostmap_query {
    uint64_t id;
    int      flags; /* -1: no section names it */
};

static void hostmap_seen(uint32_t type, const unsigned char *body, uint64_t len, void *arg)
{
    struct hostmap_query *q = arg;
    struct flyt_state_hostmap rec;
    if (type != FLYT_SS_HOSTMAP || len != sizeof rec)
        return;
    memcpy(&rec, body, sizeof rec);
    if (rec.id == q->id)
        q->flags = (int)rec.flags;
}

/* The flags of region id's HOSTMAP section in the state file at path (-1: none). */
static int hostmap_flags(const char *path, uint64_t id)
{
    struct hostmap_query q = {id, -1};
    ckpt_sections(path, hostmap_seen, &q);
    return q.flags;
}

static int remap(int fd, int r, uint64_t size, int pass_fd)
{
    flyt_req_host_remap req = {region_id[r], size, r ? (uint64_t)(uintptr_t)region_view[r] : 0,
                               (uint32_t)r, 0};
    flyt_rep_none none;
    return th_call_fd(fd, FLYT_OP_HOST_REMAP, &req, sizeof req, pass_fd, &none, sizeof none);
}

/* After the restore: detached regions refuse their copies, logged once;
 * HOST_REMAP checks what it is given, then the same bytes flow again. */
static void restored_regions(int fd)
{
    th_say("restored regions: detached until HOST_REMAP, then the client's bytes again");
    unsigned char got[4096];
    CHECK_EQ(region_roundtrip(fd, 0, 0, got), T_NOT_MAPPED, "a detached HOST_MAP region refuses");
    CHECK_EQ(region_roundtrip(fd, 1, 0, got), T_NOT_MAPPED, "a detached HOST_MAP_AT region refuses");
    CHECK_EQ(region_roundtrip(fd, 0, 4096, got), T_NOT_MAPPED, "and again");
    CHECK_EQ(th_server_log_count("is not shared with this server"), 2, "one log line per region");
    for (int r = 0; r < 2; r++) {
        CHECK_EQ(remap(fd, r, REGION_SIZE, region_fd[r]), T_SUCCESS, "HOST_REMAP region %d", r);
        CHECK_EQ(remap(fd, r, REGION_SIZE, region_fd[r]), T_ALREADY_MAPPED, "not twice");
        memset(region_view[r] + 4096, 0x5a + r, 16); /* written after the checkpoint */
        CHECK_EQ(region_roundtrip(fd, r, 4096, got), T_SUCCESS, "region %d copies again", r);
        int same = 1;
        for (uint64_t i = 0; i < 4096; i++)
            same &= got[i] == (i < 16 ? 0x5a + r : region_pattern(r, 4096 + i));
        CHECK(same, "region %d: the client's current bytes", r);
        if (r == 1) {
            char path[160], error[256];
            snprintf(path, sizeof path, "%s/remapped.state", dir);
            CHECK_EQ(checkpoint(path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
            CHECK_EQ(hostmap_flags(path, region_id[1]), FLYT_STATE_HOSTMAP_READ_ONLY,
                     "the read-only registration came back read-only");
            unlink(path);
        }
        CHECK_EQ(handle_op(fd, FLYT_OP_HOST_UNMAP, region_id[r]), T_SUCCESS, "HOST_UNMAP %d", r);
        munmap(region_view[r], REGION_SIZE);
        close(region_fd[r]);
    }
    unsigned char *want = expected(0);
    int had;
    CHECK_EQ(th_dtoh(fd, buf_ptr[0], 4096, got, &had), T_SUCCESS, "DTOH buffer 0");
    CHECK_EQ(th_htod(fd, buf_ptr[0], want, 4096), T_SUCCESS, "buffer 0 as it was");
    free(want);
}

#define CAPTURE_WAIT_MS 400 /* the server's FLYT_CKPT_CAPTURE_WAIT_MS here */

/* A stream capture in progress holds a checkpoint request until it ends (then the
 * checkpoint runs), or until FLYT_CKPT_CAPTURE_WAIT_MS passes, when it is refused naming
 * the capture: also while the session is idle, and the session carries on. */
static void capture_holds_checkpoint(int fd)
{
    th_say("a stream capture in progress: the checkpoint waits for its end, else is refused");
    flyt_req_capture_begin g = {STREAM_ID, FLYT_CLIENT_IDS + 100, 0, 0};
    CHECK_EQ(th_call(fd, FLYT_OP_CAPTURE_BEGIN, &g, sizeof g, NULL, 0, NULL), T_SUCCESS,
             "capture begins");
    char error[256], bad[160];
    snprintf(bad, sizeof bad, "%s/never.state", dir);
    double t0 = th_now_s();
    CHECK_EQ(checkpoint(bad, error, sizeof error), T_NOT_SUPPORTED, "refused at the deadline");
    CHECK_GE(th_now_s() - t0, CAPTURE_WAIT_MS * 0.9e-3, "after waiting for the capture");
    CHECK(strstr(error, "stream capture") != NULL, "the error names the capture: %s", error);
    CHECK(access(bad, F_OK) != 0 && errno == ENOENT, "no file left");
    unsigned char got[64];
    int had;
    CHECK_EQ(th_dtoh(fd, buf_ptr[0], sizeof got, got, &had), T_SUCCESS, "session still serves");
    CHECK_EQ(got[5], pattern(0, 5), "contents untouched");

    char held[160];
    snprintf(held, sizeof held, "%s/held.state", dir);
    uint64_t gen = ckpt_post(status_path, held, 0);
    usleep(CAPTURE_WAIT_MS * 1000 / 4); /* the session saw it and holds it */
    CHECK(access(held, F_OK) != 0, "nothing written while the capture runs");
    CHECK_EQ(handle_op(fd, FLYT_OP_CAPTURE_END, STREAM_ID), T_SUCCESS, "capture ended");
    CHECK_EQ(ckpt_wait(status_path, gen, 5000, error, sizeof error), T_SUCCESS,
             "the held checkpoint ran once the capture ended: %s", error);
    CHECK(access(held, F_OK) == 0, "its file is written");
    unlink(held);
    CHECK_EQ(handle_op(fd, FLYT_OP_GRAPH_DESTROY, g.graph), T_SUCCESS, "graph destroyed");
}

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "open %s", path);
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*size);
    CHECK_EQ(fread(p, 1, *size, f), *size, "read %s", path);
    fclose(f);
    return p;
}

/* CUDA IPC: a session that shares memory with another process is not
 * checkpointed (the other process would keep the old memory); once the
 * allocation is freed it is again. Handles this server did not make, or its
 * own, open nothing; the session carries on through every refusal. */
static void ipc_refuses_checkpoint(int fd)
{
    th_say("IPC: a shared allocation refuses a checkpoint; bad handles refused");
    uint64_t shared;
    CHECK_EQ(th_alloc(fd, 4096, &shared), T_SUCCESS, "an allocation to share");
    flyt_req_handle ex = {shared};
    flyt_rep_ipc_handle h;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_IPC_MEM_EXPORT, &ex, sizeof ex, NULL, 0, &h, sizeof h),
             T_SUCCESS, "IPC_MEM_EXPORT");
    flyt_req_handle inner = {shared + 512};
    CHECK_EQ(th_call(fd, FLYT_OP_IPC_MEM_EXPORT, &inner, sizeof inner, NULL, 0, NULL),
             T_INVALID_VALUE, "not the start of an allocation: refused");
    char error[256], bad[160];
    snprintf(bad, sizeof bad, "%s/shared.state", dir);
    CHECK_EQ(checkpoint(bad, error, sizeof error), T_NOT_SUPPORTED, "checkpoint refused");
    CHECK(strstr(error, "shared with another process") != NULL, "the error says why: %s", error);

    flyt_req_ipc_open op;
    memset(&op, 0, sizeof op);
    memcpy(op.handle, h.handle, sizeof op.handle);
    CHECK_EQ(th_call(fd, FLYT_OP_IPC_MEM_OPEN, &op, sizeof op, NULL, 0, NULL), 201,
             "its own handle: CUDA_ERROR_INVALID_CONTEXT");
    op.flags = 2;
    CHECK_EQ(th_call(fd, FLYT_OP_IPC_MEM_OPEN, &op, sizeof op, NULL, 0, NULL), T_INVALID_VALUE,
             "an unknown flag");
    op.flags = 0;
    op.handle[FLYT_IPC_HANDLE_BYTES - 1] = 1;
    CHECK_EQ(th_call(fd, FLYT_OP_IPC_MEM_OPEN, &op, sizeof op, NULL, 0, NULL), T_INVALID_VALUE,
             "a handle with bytes past its fields");
    memset(op.handle, 0, sizeof op.handle);
    CHECK_EQ(th_call(fd, FLYT_OP_IPC_MEM_OPEN, &op, sizeof op, NULL, 0, NULL), T_INVALID_VALUE,
             "a handle Flyt did not make");
    memcpy(op.handle, h.handle, sizeof op.handle);
    op.handle[12] ^= 1; /* another pid: no such session's broker */
    CHECK_EQ(th_call(fd, FLYT_OP_IPC_MEM_OPEN, &op, sizeof op, NULL, 0, NULL), T_INVALID_HANDLE,
             "a handle of a session that is not there");
    op.id = 5;
    CHECK_EQ(th_call(fd, FLYT_OP_IPC_EVENT_OPEN, &op, sizeof op, NULL, 0, NULL), T_INVALID_VALUE,
             "IPC_EVENT_OPEN of an id outside the client's range");
    CHECK_EQ(handle_op(fd, FLYT_OP_IPC_MEM_CLOSE, shared), T_INVALID_VALUE,
             "IPC_MEM_CLOSE of memory that was not opened");
    CHECK_EQ(handle_op(fd, FLYT_OP_IPC_VMM_EXPORT, FLYT_CLIENT_IDS + 999), T_INVALID_VALUE,
             "IPC_VMM_EXPORT of no VMM allocation");
    op.id = 0;
    CHECK_EQ(th_call(fd, FLYT_OP_IPC_VMM_IMPORT, &op, sizeof op, NULL, 0, NULL), T_INVALID_VALUE,
             "IPC_VMM_IMPORT of a memory handle: the kinds differ");
    CHECK_EQ(th_free(fd, shared), T_SUCCESS, "the shared allocation freed");
    CHECK_EQ(checkpoint(bad, error, sizeof error), T_SUCCESS, "then a checkpoint runs: %s", error);
    unlink(bad);
}

/* Shareable memory pools (2.7): such a pool refuses a checkpoint while it
 * lives; exports of what is not shareable, imports of the session's own
 * handles and of a handle of another kind are refused. */
static void ipc_pools(int fd)
{
    th_say("IPC: a shareable pool refuses a checkpoint; bad pool exports and imports refused");
    flyt_req_pool_create pc = {.max_size = 0, .device = 0, .handle_types = 8 /* fabric */};
    uint64_t shareable = 0, plain = 0, from_plain = 0;
    CHECK_EQ(th_call(fd, FLYT_OP_POOL_CREATE, &pc, sizeof pc, NULL, 0, NULL), T_INVALID_VALUE,
             "a pool of fabric handles: refused");
    pc.handle_types = 1; /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
    CHECK_EQ(th_call_rep(fd, FLYT_OP_POOL_CREATE, &pc, sizeof pc, NULL, 0, &shareable, sizeof shareable),
             T_SUCCESS, "a shareable pool");
    pc.handle_types = 0;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_POOL_CREATE, &pc, sizeof pc, NULL, 0, &plain, sizeof plain),
             T_SUCCESS, "a plain pool");
    char error[256], path[160];
    snprintf(path, sizeof path, "%s/pool.state", dir);
    CHECK_EQ(checkpoint(path, error, sizeof error), T_NOT_SUPPORTED, "checkpoint refused");
    CHECK(strstr(error, "shared with other processes") != NULL, "the error says why: %s", error);
    flyt_rep_ipc_handle h;
    flyt_req_handle ex = {shareable};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_IPC_POOL_EXPORT, &ex, sizeof ex, NULL, 0, &h, sizeof h), T_SUCCESS,
             "IPC_POOL_EXPORT of the shareable pool");
    CHECK_EQ(handle_op(fd, FLYT_OP_IPC_POOL_EXPORT, plain), T_INVALID_VALUE,
             "IPC_POOL_EXPORT of a pool not shareable");
    flyt_req_mem_alloc ma = {.size = 4096, .pool = plain};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_MEM_ALLOC_ASYNC, &ma, sizeof ma, NULL, 0, &from_plain,
                         sizeof from_plain),
             T_SUCCESS, "an allocation of the plain pool");
    CHECK_EQ(handle_op(fd, FLYT_OP_IPC_PTR_EXPORT, from_plain), T_INVALID_VALUE,
             "IPC_PTR_EXPORT of it");
    flyt_req_ipc_open op;
    memset(&op, 0, sizeof op);
    memcpy(op.handle, h.handle, sizeof op.handle);
    CHECK_EQ(th_call(fd, FLYT_OP_IPC_POOL_IMPORT, &op, sizeof op, NULL, 0, NULL), 201,
             "its own pool's handle: CUDA_ERROR_INVALID_CONTEXT");
    op.id = shareable;
    CHECK_EQ(th_call(fd, FLYT_OP_IPC_POOL_IMPORT, &op, sizeof op, NULL, 0, NULL), T_INVALID_VALUE,
             "IPC_POOL_IMPORT with an id");
    CHECK_EQ(th_call(fd, FLYT_OP_IPC_PTR_IMPORT, &op, sizeof op, NULL, 0, NULL), T_INVALID_VALUE,
             "IPC_PTR_IMPORT of a pool handle: the kinds differ");
    CHECK_EQ(th_free(fd, from_plain), T_SUCCESS, "the allocation freed");
    CHECK_EQ(handle_op(fd, FLYT_OP_POOL_DESTROY, shareable), T_SUCCESS, "the shareable pool destroyed");
    CHECK_EQ(handle_op(fd, FLYT_OP_POOL_DESTROY, plain), T_SUCCESS, "the plain one too");
    CHECK_EQ(checkpoint(path, error, sizeof error), T_SUCCESS, "then a checkpoint runs: %s", error);
    unlink(path);
}

/* The request-stream bytes a checkpoint of the session says it consumed. */
static uint64_t consumed_now(void)
{
    char path[160], error[256];
    snprintf(path, sizeof path, "%s/again.state", dir);
    CHECK_EQ(checkpoint(path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    size_t size;
    unsigned char *p = read_file(path, &size);
    struct flyt_state_section sec;
    size_t pos = sizeof(struct flyt_state_header);
    memcpy(&sec, p + pos, sizeof sec); /* SESSION, then CLIENT */
    pos += sizeof sec + sec.length;
    memcpy(&sec, p + pos, sizeof sec);
    CHECK_EQ(sec.type, FLYT_SS_CLIENT, "the CLIENT section follows SESSION");
    struct flyt_state_client client;
    memcpy(&client, p + pos + sizeof sec, sizeof client);
    free(p);
    unlink(path);
    return client.consumed;
}

/* HOST_REMAPs that are refused, checked before the regions are used; none
 * is counted in the request stream (a checkpoint says the same offset). */
static void remap_refusals(int fd)
{
    th_say("HOST_REMAP checks what it is given, and is not counted in the request stream");
    uint64_t before = consumed_now();
    flyt_req_host_remap unknown = {region_id[1] + 1000, REGION_SIZE, 0, 0, 0};
    flyt_rep_none none;
    CHECK_EQ(th_call_fd(fd, FLYT_OP_HOST_REMAP, &unknown, sizeof unknown, region_fd[0], &none,
                        sizeof none), T_INVALID_HANDLE, "HOST_REMAP of an unknown id");
    CHECK_EQ(remap(fd, 0, REGION_SIZE / 2, region_fd[0]), T_INVALID_VALUE, "another size");
    int unsealed = th_memfd(REGION_SIZE, 0);
    CHECK_EQ(remap(fd, 0, REGION_SIZE, unsealed), T_INVALID_VALUE, "an unsealed memfd");
    close(unsealed);
    CHECK_EQ(remap(fd, 0, REGION_SIZE, -1), T_INVALID_VALUE, "no memfd");
    flyt_req_host_remap other_kind = {region_id[0], REGION_SIZE, 0x7000000000ull, 1, 0};
    CHECK_EQ(th_call_fd(fd, FLYT_OP_HOST_REMAP, &other_kind, sizeof other_kind, region_fd[0],
                        &none, sizeof none), T_INVALID_VALUE, "another kind");
    CHECK_EQ(consumed_now(), before, "the consumed offset is where it was");
}

static void restored_session_matches(void)
{
    th_say("the restored session: same pointers, contents and ids");
    int fd = th_connect();
    CHECK(fd >= 0 && th_hello(fd) == 0, "HELLO resumes the restored session");
    remap_refusals(fd);
    for (int b = 0; b < NBUF; b++) {
        unsigned char *want = expected(b), *got = malloc(buf_size[b]);
        int had;
        CHECK_EQ(th_dtoh(fd, buf_ptr[b], buf_size[b], got, &had), T_SUCCESS, "DTOH buffer %d", b);
        CHECK_MEM_EQ(got, want, buf_size[b], "buffer %d at its address", b);
        free(want);
        free(got);
    }
    flyt_req_handle sreq = {STREAM_ID};
    flyt_rep_i32 i32;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_STREAM_GET_FLAGS, &sreq, sizeof sreq, NULL, 0, &i32, sizeof i32),
             T_SUCCESS, "stream id known");
    CHECK_EQ(i32.value, 1, "stream flags kept");
    CHECK_EQ(th_call_rep(fd, FLYT_OP_STREAM_GET_PRIO, &sreq, sizeof sreq, NULL, 0, &i32, sizeof i32),
             T_SUCCESS, "stream priority");
    CHECK_EQ(i32.value, -2, "stream priority kept");
    CHECK_EQ(handle_op(fd, FLYT_OP_STREAM_SYNC, server_stream), T_SUCCESS, "server-id stream");
    flyt_req_event_record rec = {EVENT_ID, STREAM_ID, 0, 0};
    CHECK_EQ(th_call(fd, FLYT_OP_EVENT_RECORD, &rec, sizeof rec, NULL, 0, NULL), T_SUCCESS,
             "event recorded on the stream");
    CHECK_EQ(handle_op(fd, FLYT_OP_EVENT_QUERY, EVENT_ID), T_SUCCESS, "event query");
    flyt_req_func_attr fa = {func_id, 0 /* MAX_THREADS_PER_BLOCK */, 0};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_FUNC_GET_ATTR, &fa, sizeof fa, NULL, 0, &i32, sizeof i32),
             T_SUCCESS, "function id known");
    uint64_t again;
    CHECK_EQ(func_get(fd, module_id, "kernel_two", &again), T_SUCCESS, "module id known");
    CHECK_GT(again, func_id, "new ids follow the restored ones");
    uint64_t fresh;
    CHECK_EQ(th_alloc(fd, 8192, &fresh), T_SUCCESS, "a new allocation");
    for (int b = 0; b < NBUF; b++)
        CHECK(fresh + 8192 <= buf_ptr[b] || fresh >= buf_ptr[b] + buf_size[b],
              "new allocation clear of buffer %d", b);
    restored_regions(fd);
    CHECK_EQ(th_free(fd, buf_ptr[1]), T_SUCCESS, "a restored buffer frees");
    th_post(fd, FLYT_OP_GOODBYE, NULL, 0, NULL, 0);
    close(fd);
}

/* flyt-server --restore path: its exit status, stderr in err_out. */
static int restore_refused(const char *bin, const char *path, char *err_out, size_t len)
{
    char sock[160];
    snprintf(sock, sizeof sock, "unix:%s/never.sock", dir);
    const char *args[] = {"--backend", "host", "--listen", sock, "--restore", path, NULL};
    return th_run_server(bin, args, err_out, len);
}

static void write_file(const char *path, const unsigned char *p, size_t size)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(p, 1, size, f) == size, "write %s", path);
    fclose(f);
}

static void bad_files_refused(const char *bin)
{
    th_say("a corrupted state and a newer format version are refused");
    size_t size;
    unsigned char *orig = read_file(state_path, &size);
    char path[160], err[2048];
    snprintf(path, sizeof path, "%s/bad.state", dir);

    unsigned char *p = malloc(size);
    memcpy(p, orig, size);
    p[size / 2] ^= 0x40; /* in a buffer's contents */
    write_file(path, p, size);
    CHECK_EQ(restore_refused(bin, path, err, sizeof err), 1, "corrupted: exit 1");
    CHECK(strstr(err, "SHA-256 does not match") != NULL, "corrupted: says why: %s", err);

    memcpy(p, orig, size);
    struct flyt_state_header h;
    memcpy(&h, p, sizeof h);
    h.version = FLYT_STATE_VERSION + 1;
    memcpy(p, &h, sizeof h);
    unsigned n = 0;
    CHECK(EVP_Digest(p, size - FLYT_STATE_HASH, p + size - FLYT_STATE_HASH, &n, EVP_sha256(), NULL) == 1,
          "rehash");
    write_file(path, p, size);
    CHECK_EQ(restore_refused(bin, path, err, sizeof err), 1, "newer version: exit 1");
    CHECK(strstr(err, "newer Flyt") != NULL, "newer version: says why: %s", err);

    write_file(path, orig, size / 3);
    CHECK_EQ(restore_refused(bin, path, err, sizeof err), 1, "cut short: exit 1");
    unlink(path);
    free(p);
    free(orig);
}

/* The version-6 trailer of a body, computed here as docs/state-format.md
 * describes it (not with the server's code). */
static void chunked_root(const unsigned char *body, size_t len, unsigned char root[32])
{
    size_t nchunks = (len + FLYT_STATE_CHUNK - 1) / FLYT_STATE_CHUNK;
    unsigned char *in = malloc(24 + nchunks * 32);
    uint64_t len64 = len, chunk = FLYT_STATE_CHUNK;
    memcpy(in, "FLYTSHA6", 8);
    memcpy(in + 8, &len64, 8);
    memcpy(in + 16, &chunk, 8);
    for (size_t c = 0; c < nchunks; c++) {
        size_t off = c * FLYT_STATE_CHUNK, n = len - off < FLYT_STATE_CHUNK ? len - off : FLYT_STATE_CHUNK;
        unsigned k = 0;
        CHECK(EVP_Digest(body + off, n, in + 24 + c * 32, &k, EVP_sha256(), NULL) == 1, "chunk hash");
    }
    unsigned k = 0;
    CHECK(EVP_Digest(in, 24 + nchunks * 32, root, &k, EVP_sha256(), NULL) == 1, "root hash");
    free(in);
}

/* p (size bytes) as a state file at path: refused for a bad hash? */
static void refused_as_corrupt(const char *bin, const char *path, const unsigned char *p,
                               size_t size, const char *what)
{
    char err[2048];
    write_file(path, p, size);
    CHECK_EQ(restore_refused(bin, path, err, sizeof err), 1, "%s: exit 1", what);
    CHECK(strstr(err, "SHA-256 does not match") != NULL, "%s: says why: %s", what, err);
}

/* The state records the GPU's architecture (the host backend's 9.0), and a
 * restore on a GPU of another one is refused, saying why: the client shipped
 * kernel images cut to the first. */
static void other_architecture_refused(const char *bin)
{
    th_say("a state of another GPU architecture is refused at restore, saying why");
    size_t size;
    unsigned char *p = read_file(state_path, &size);
    size_t at = sizeof(struct flyt_state_header) + sizeof(struct flyt_state_section) +
                offsetof(struct flyt_state_session, arch);
    uint32_t arch = 0;
    memcpy(&arch, p + at, sizeof arch);
    CHECK_EQ(arch, 90, "the state records compute capability 9.0 (%u)", arch);
    arch = 80;
    memcpy(p + at, &arch, sizeof arch);
    chunked_root(p, size - FLYT_STATE_HASH, p + size - FLYT_STATE_HASH);
    char path[160], err[2048];
    snprintf(path, sizeof path, "%s/arch.state", dir);
    write_file(path, p, size);
    /* the file is sound: the server takes it; the session, on the device, refuses it */
    const char *args[] = {"--restore", path, NULL};
    th_server_start_args(bin, NULL, args);
    int fd = th_connect();
    CHECK(fd < 0 || th_hello(fd) != 0, "another architecture: the session is not restored");
    if (fd >= 0)
        close(fd);
    usleep(200 * 1000);
    CHECK_EQ(th_server_log_count("compute capability 8.0; this one is 9.0: a session moves to a GPU "
                                 "of its own architecture"), 1, "another architecture: the log says why");
    th_server_stop();
    (void)err;
    unlink(path);
    free(p);
}

/* Integrity of the chunked form: every chunk counts, and in its place. */
static void chunked_integrity(const char *bin)
{
    th_say("a state of several chunks: the chunked trailer covers every byte in its place");
    size_t size;
    unsigned char *orig = read_file(big_path, &size);
    size_t body = size - FLYT_STATE_HASH, nchunks = (body + FLYT_STATE_CHUNK - 1) / FLYT_STATE_CHUNK;
    CHECK_GE(nchunks, (size_t)4, "the state spans %zu chunks", nchunks);
    struct flyt_state_header h;
    memcpy(&h, orig, sizeof h);
    CHECK_EQ(h.version, FLYT_STATE_VERSION, "written in the current version");
    unsigned char root[32];
    chunked_root(orig, body, root);
    CHECK_MEM_EQ(orig + body, root, 32, "the trailer is the documented chunked root");

    char path[160];
    snprintf(path, sizeof path, "%s/bad-chunk.state", dir);
    unsigned char *p = malloc(size);
    for (size_t c = 0; c < nchunks; c++) {
        memcpy(p, orig, size);
        size_t off = c * FLYT_STATE_CHUNK + (c + 1) * 977 % (body - c * FLYT_STATE_CHUNK);
        p[off] ^= 0x01;
        char what[64];
        snprintf(what, sizeof what, "a bit flipped in chunk %zu", c);
        refused_as_corrupt(bin, path, p, size, what);
    }
    memcpy(p, orig, size);
    memcpy(p + FLYT_STATE_CHUNK, orig + 2 * FLYT_STATE_CHUNK, FLYT_STATE_CHUNK);
    memcpy(p + 2 * FLYT_STATE_CHUNK, orig + FLYT_STATE_CHUNK, FLYT_STATE_CHUNK);
    CHECK(memcmp(p, orig, size) != 0, "chunks 1 and 2 differ");
    refused_as_corrupt(bin, path, p, size, "chunks 1 and 2 swapped");
    memcpy(p, orig, size);
    unsigned n = 0;
    CHECK(EVP_Digest(p, body, p + body, &n, EVP_sha256(), NULL) == 1, "whole-body hash");
    refused_as_corrupt(bin, path, p, size, "a version-5 trailer on a version-6 file");
    memcpy(p, orig, size);
    memcpy(p + FLYT_STATE_CHUNK, orig + FLYT_STATE_CHUNK + 1, size - FLYT_STATE_CHUNK - 1);
    refused_as_corrupt(bin, path, p, size - 1, "a byte cut from chunk 1");
    unlink(path);
    free(p);
    free(orig);
}

/* The sections of a state file (after its header) other than type drop,
 * in a new buffer of *size bytes, with the header's version set; hashed. */
static unsigned char *without_sections(const unsigned char *p, size_t *size, uint32_t drop,
                                       uint32_t version, int *dropped)
{
    unsigned char *out = malloc(*size);
    struct flyt_state_header h;
    memcpy(&h, p, sizeof h);
    h.version = version;
    memcpy(out, &h, sizeof h);
    size_t in = sizeof h, len = sizeof h;
    *dropped = 0;
    for (;;) {
        struct flyt_state_section sec;
        memcpy(&sec, p + in, sizeof sec);
        size_t whole = sizeof sec + (size_t)sec.length;
        if (sec.type == drop)
            ++*dropped;
        else
            memcpy(out + len, p + in, whole), len += whole;
        in += whole;
        if (sec.type == FLYT_SS_END)
            break;
    }
    unsigned n = 0;
    CHECK(EVP_Digest(out, len, out + len, &n, EVP_sha256(), NULL) == 1, "rehash");
    *size = len + FLYT_STATE_HASH;
    return out;
}

/* A version-3 file (before HOSTMAP sections) restores as it did. */
static void old_version_restores(const char *bin)
{
    th_say("a version-3 state file still restores");
    size_t size;
    unsigned char *orig = read_file(state_path, &size);
    int dropped;
    unsigned char *v3 = without_sections(orig, &size, FLYT_SS_HOSTMAP, 3, &dropped);
    CHECK_EQ(dropped, 2, "the checkpoint held one section per region");
    char path[160];
    snprintf(path, sizeof path, "%s/v3.state", dir);
    write_file(path, v3, size);
    const char *rargs[] = {"--restore", path, NULL};
    th_server_start_args(bin, NULL, rargs);
    int fd = th_connect();
    CHECK(fd >= 0 && th_hello(fd) == 0, "HELLO resumes the version-3 session");
    unsigned char *want = expected(2), *got = malloc(buf_size[2]);
    int had;
    CHECK_EQ(th_dtoh(fd, buf_ptr[2], buf_size[2], got, &had), T_SUCCESS, "DTOH buffer 2");
    CHECK_MEM_EQ(got, want, buf_size[2], "buffer 2 at its address");
    flyt_req_memcpy_mapped c = {buf_ptr[0], region_id[0], 0, 16, FLYT_STREAM_DEFAULT};
    CHECK_EQ(th_call(fd, FLYT_OP_MEMCPY_HTOD_MAPPED, &c, sizeof c, NULL, 0, NULL), T_INVALID_HANDLE,
             "no region in it");
    close(fd);
    CHECK(th_server_log_clean(), "no session crashed");
    th_server_stop();
    unlink(path);
    free(want);
    free(got);
    free(v3);
    free(orig);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-flyt-server\n", argv[0]);
        return 2;
    }
    const char *bin = argv[1];
    th_watchdog(120);
    char wait_ms[16];
    snprintf(wait_ms, sizeof wait_ms, "%d", CAPTURE_WAIT_MS);
    setenv("FLYT_CKPT_CAPTURE_WAIT_MS", wait_ms, 1); /* for the servers it starts */
    signal(SIGPIPE, SIG_IGN);
    snprintf(dir, sizeof dir, "/tmp/flyt-state-XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    snprintf(status_path, sizeof status_path, "%s/server.status", dir);
    snprintf(state_path, sizeof state_path, "%s/session.state", dir);
    snprintf(big_path, sizeof big_path, "%s/big.state", dir);

    const char *args[] = {"--status-file", status_path, NULL};
    th_server_start_args(bin, NULL, args);
    int fd = th_connect();
    CHECK(fd >= 0 && th_hello(fd) == 0, "HELLO");
    build_session(fd);
    share_regions(fd);
    capture_holds_checkpoint(fd);
    ipc_refuses_checkpoint(fd);
    ipc_pools(fd);

    th_say("checkpoint through the status page");
    char error[256];
    CHECK_EQ(checkpoint(state_path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    struct stat sb;
    CHECK(stat(state_path, &sb) == 0 && (uint64_t)sb.st_size > buf_size[1], "state written");
    CHECK_EQ(hostmap_flags(state_path, region_id[0]), 0, "a HOST_MAP region: no flags");
    CHECK_EQ(hostmap_flags(state_path, region_id[1]), FLYT_STATE_HOSTMAP_READ_ONLY,
             "the HOST_MAP_AT region registered read-only says so");
    unsigned char got[16];
    int had;
    CHECK_EQ(th_dtoh(fd, buf_ptr[2], sizeof got, got, &had), T_SUCCESS, "session carries on");
    uint64_t big;
    unsigned char *fill = malloc(BIG_SIZE);
    for (size_t i = 0; i < BIG_SIZE; i++)
        fill[i] = (unsigned char)(i * 131u + (i >> 20) * 17u + (i >> 11));
    CHECK_EQ(th_alloc(fd, BIG_SIZE, &big), T_SUCCESS, "a buffer of several chunks");
    CHECK_EQ(th_htod(fd, big, fill, BIG_SIZE), T_SUCCESS, "its contents");
    CHECK_EQ(checkpoint(big_path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    CHECK_EQ(th_free(fd, big), T_SUCCESS, "freed");
    free(fill);
    close(fd);
    th_server_stop();

    bad_files_refused(bin);
    other_architecture_refused(bin);
    chunked_integrity(bin);
    unlink(big_path);

    th_say("flyt-server --restore");
    th_ckpt_restore(bin, status_path, state_path);
    restored_session_matches();
    CHECK(th_server_log_has("restored: 3 allocation(s)"), "the server says what it restored");
    CHECK(th_server_log_has("2 host memory region(s)"), "and the regions waiting for the client");
    CHECK(th_server_log_clean(), "no session crashed");
    th_server_stop();

    old_version_restores(bin);

    unlink(state_path);
    unlink(status_path);
    rmdir(dir);
    th_passed();
    printf("test_server_state: all checks passed\n");
    return 0;
}

/*
 * flyt-server against hostile and broken clients, over raw frames:
 * a proper session works; each malformed request either ends the session or
 * is answered with an error, as fits; after every case a new connection
 * still works (the server survived); clients dying mid-frame; 20 sessions at
 * once.
 *
 * usage: test_server_malformed PATH-TO-flyt-server
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flyt_transport.h"
#include "flyt_calls.h"
#include "harness.h"

enum outcome { CLOSED, ERROR_REPLY, OTHER };

static const char *outcome_name(enum outcome o)
{
    return o == CLOSED ? "session ended" : o == ERROR_REPLY ? "error reply" : "unexpected answer";
}

/* "session ended" or "error reply 400" */
static const char *told(enum outcome o, int32_t result)
{
    static char buf[64];
    if (o == ERROR_REPLY)
        snprintf(buf, sizeof buf, "error reply %d", result);
    else
        snprintf(buf, sizeof buf, "%s", outcome_name(o));
    return buf;
}

/* After a bad request: either the session ends (EOF or reset, possibly after
 * one error reply) or an error reply comes. A success reply, silence or a
 * malformed frame are failures (OTHER). */
static enum outcome refused(int fd, int32_t *result)
{
    struct th_reply r;
    int rc = th_read_frame(fd, &r);
    if (rc == -1)
        return CLOSED;
    if (rc != 0) {
        printf("        (no answer within the timeout)\n");
        return OTHER;
    }
    enum outcome o = OTHER;
    if (result)
        *result = 0;
    if (r.hdr.flags == FLYT_F_REPLY && r.hdr.length >= sizeof(struct flyt_reply) && r.result != 0) {
        o = ERROR_REPLY;
        if (result)
            *result = r.result;
    } else {
        printf("        (answer: op %u flags %u length %u result %d)\n", r.hdr.op, r.hdr.flags, r.hdr.length,
               r.result);
    }
    th_reply_free(&r);
    return o;
}

/* After a protocol violation the session must end: at most one error reply,
 * then end of stream. */
static int ended(int fd)
{
    struct th_reply r;
    for (int frames = 0; frames < 2; frames++) {
        int rc = th_read_frame(fd, &r);
        if (rc == -1)
            return 1;
        if (rc != 0) {
            printf("        (the connection stayed open)\n");
            return 0;
        }
        int bad = r.hdr.length >= sizeof(struct flyt_reply) && r.result == 0;
        printf("        (answered first: op %u result %d)\n", r.hdr.op, r.result);
        th_reply_free(&r);
        if (bad)
            return 0;
    }
    printf("        (more than one frame after the violation)\n");
    return 0;
}

/* A bad frame went out; the server may end the session before all of it
 * was taken, which is no failure (what it did is checked next). */
static void sent(int rc, const char *what)
{
    printf("  ok    sent %s%s\n", what, rc == 0 ? "" : " (the server closed before taking all of it)");
}

static void survived(const char *after)
{
    CHECK(th_server_works(), "server still serves a new session after %s", after);
    CHECK(th_server_log_clean(), "no session died of a signal, no sanitizer report (server log)");
}

/* The bad request must end the session; then the fd is closed and the
 * server must still serve others. */
static void must_end(int fd, const char *what)
{
    CHECK(ended(fd), "%s: session ended", what);
    close(fd);
    survived(what);
}

/* The bad request must get the error reply want, and the session go on. */
static void must_answer(int fd, const char *what, int32_t want)
{
    int32_t result = 0;
    enum outcome o = refused(fd, &result);
    CHECK_EQ(o, ERROR_REPLY, "%s: %s (want error reply %d)", what, told(o, result), want);
    CHECK_EQ(result, want, "%s: %s (want error reply %d)", what, told(o, result), want);
    flyt_req_none none = {0};
    flyt_rep_i32 cnt;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &cnt, sizeof cnt), 0,
             "the session goes on");
    CHECK_EQ(cnt.value, 1, "the session goes on");
}

static int session(void)
{
    int fd = th_connect();
    CHECK_GE(fd, 0, "connect");
    CHECK_EQ(th_hello(fd), 0, "HELLO accepted");
    return fd;
}

static void hello_cases(void)
{
    th_say("HELLO required and checked");
    int fd = th_connect();
    flyt_req_none none = {0};
    sent(th_send(fd, FLYT_OP_DEVICE_COUNT, 0, 1, &none, sizeof none, NULL, 0), "DEVICE_COUNT before HELLO");
    int32_t result = 0;
    enum outcome o = refused(fd, &result);
    CHECK_NE(o, OTHER, "no HELLO first: %s", told(o, result));
    close(fd);
    survived("a request before HELLO");

    flyt_req_hello h;
    memset(&h, 0, sizeof h);
    h.magic = 0x12345678;
    h.major = FLYT_PROTO_MAJOR;
    fd = th_connect();
    th_send(fd, FLYT_OP_HELLO, 0, 1, &h, sizeof h, NULL, 0);
    o = refused(fd, &result);
    CHECK_NE(o, OTHER, "HELLO with a wrong magic: %s", told(o, result));
    close(fd);
    survived("a wrong magic");

    h.magic = FLYT_PROTO_MAGIC;
    h.major = FLYT_PROTO_MAJOR + 1;
    fd = th_connect();
    th_send(fd, FLYT_OP_HELLO, 0, 1, &h, sizeof h, NULL, 0);
    o = refused(fd, &result);
    CHECK_NE(o, OTHER, "HELLO with major version %d: %s", FLYT_PROTO_MAJOR + 1, told(o, result));
    close(fd);
    survived("a wrong major version");

    fd = session();
    h.major = FLYT_PROTO_MAJOR;
    th_send(fd, FLYT_OP_HELLO, 0, 9, &h, sizeof h, NULL, 0);
    o = refused(fd, &result);
    CHECK_NE(o, OTHER, "a second HELLO in a session: %s", told(o, result));
    close(fd);
    survived("a second HELLO");
}

/* Header-level violations: flyt_check_request rejects them; the session ends. */
static void header_cases(void)
{
    th_say("frame header violations end the session");
    static const struct {
        const char *what;
        uint32_t length;
        uint16_t op, flags;
        uint32_t send; /* payload bytes actually sent */
    } cases[] = {
        {"unknown op 7", 8, 7, 0, 8},
        {"unknown op 199", 8, 199, 0, 8},
        {"op 200 (CALLBACK) as a request", 16, 200, 0, 16},
        {"unknown op 65535", 8, 65535, 0, 8},
        {"MEM_ALLOC with length 8, too short for its 24-byte request", 8, FLYT_OP_MEM_ALLOC, 0, 8},
        {"MEM_FREE with length 0", 0, FLYT_OP_MEM_FREE, 0, 0},
        {"DEVICE_COUNT with 8 bytes of trailing data", 16, FLYT_OP_DEVICE_COUNT, 0, 16},
        {"MEMCPY_DTOH with trailing data", 40, FLYT_OP_MEMCPY_DTOH, 0, 40},
        {"NOREPLY on DEVICE_COUNT (synchronous)", 8, FLYT_OP_DEVICE_COUNT, FLYT_F_NOREPLY, 8},
        {"NOREPLY on MEM_ALLOC (synchronous)", 24, FLYT_OP_MEM_ALLOC, FLYT_F_NOREPLY, 24},
        {"the REPLY flag on a request", 8, FLYT_OP_DEVICE_COUNT, FLYT_F_REPLY, 8},
        {"an unknown frame flag", 8, FLYT_OP_DEVICE_COUNT, 0x100, 8},
        {"MEMCPY_HTOD with length over FLYT_MAX_PAYLOAD", FLYT_MAX_PAYLOAD + 1u, FLYT_OP_MEMCPY_HTOD, 0, 32},
        {"LAUNCH with length 0xFFFFFFFF", 0xFFFFFFFFu, FLYT_OP_LAUNCH, 0, 56},
        {"HOST_REMAP with length 16, too short for its 32-byte request", 16, FLYT_OP_HOST_REMAP, 0, 16},
        {"NOREPLY on HOST_REMAP (synchronous)", 32, FLYT_OP_HOST_REMAP, FLYT_F_NOREPLY, 32},
    };
    unsigned char zeros[64] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fd = session();
        struct flyt_frame_hdr h = {cases[i].length, cases[i].op, cases[i].flags, 77, 0};
        struct iovec iov[2] = {{&h, sizeof h}, {zeros, cases[i].send}};
        sent(flyt_writev_full(fd, iov, 2), cases[i].what);
        CHECK(ended(fd), "%s: session ended", cases[i].what);
        close(fd);
        survived(cases[i].what);
    }
}

static void data_cases(void)
{
    th_say("bulk data cut short, and request fields that disagree with the frame");
    int fd = session();
    uint64_t ptr;
    CHECK_EQ(th_alloc(fd, 1 << 20, &ptr), 0, "MEM_ALLOC 1 MiB");
    flyt_req_memcpy req = {ptr, 0, 1 << 20, FLYT_STREAM_DEFAULT};
    static unsigned char data[4096];
    memset(data, 0x5C, sizeof data);
    CHECK_EQ(th_send_raw_hdr(fd, sizeof req + (1u << 20), FLYT_OP_MEMCPY_HTOD, 0, 5), 0,
             "MEMCPY_HTOD declaring 1 MiB, 1000 bytes sent");
    CHECK_EQ(write(fd, &req, sizeof req), sizeof req, "MEMCPY_HTOD declaring 1 MiB, 1000 bytes sent");
    CHECK_EQ(write(fd, data, 1000), 1000, "MEMCPY_HTOD declaring 1 MiB, 1000 bytes sent");
    close(fd);
    survived("an HTOD whose data stopped short and whose socket closed");

    /* docs/server.md: declared sizes that disagree with the frame, and
     * counts over the limits, end the session; bad field values (a name
     * without its NUL, an unknown id) are answered and the session goes on. */
    fd = session();
    CHECK_EQ(th_alloc(fd, 1 << 20, &ptr), 0, "MEM_ALLOC 1 MiB");
    req.dst = ptr;
    req.size = 1 << 20; /* but only 4096 bytes in the frame */
    sent(th_send(fd, FLYT_OP_MEMCPY_HTOD, 0, 6, &req, sizeof req, data, 4096),
         "MEMCPY_HTOD whose size field (1 MiB) exceeds its 4096 data bytes");
    must_end(fd, "HTOD size above the frame's data");

    fd = session();
    CHECK_EQ(th_alloc(fd, 1 << 20, &ptr), 0, "MEM_ALLOC 1 MiB");
    req.dst = ptr;
    req.size = 100; /* 4096 bytes follow */
    sent(th_send(fd, FLYT_OP_MEMCPY_HTOD, 0, 7, &req, sizeof req, data, 4096),
         "MEMCPY_HTOD whose size field (100) is below its 4096 data bytes");
    must_end(fd, "HTOD size below the frame's data");

    fd = session();
    size_t fsize;
    unsigned char *fat = th_fake_fatbin(&fsize);
    flyt_req_module_load mreq = {.size = fsize, .has_data = 3};
    sent(th_send(fd, FLYT_OP_MODULE_LOAD, 0, 16, &mreq, sizeof mreq, fat, fsize),
         "MODULE_LOAD with has_data 3 (0, 1 and 2 exist)");
    must_end(fd, "an unknown has_data");

    fd = session();
    uint64_t module = 0;
    CHECK_EQ(th_module_load(fd, fat, fsize, &module), 0, "MODULE_LOAD of a fake fatbinary");
    free(fat);
    flyt_req_named nreq = {module, 6, 0};
    sent(th_send(fd, FLYT_OP_FUNC_GET, 0, 8, &nreq, sizeof nreq, "kernel", 6),
         "FUNC_GET with a 6-byte name lacking its NUL");
    must_answer(fd, "name without NUL", T_INVALID_VALUE);
    sent(th_send(fd, FLYT_OP_FUNC_GET, 0, 9, &nreq, sizeof nreq, "ke\0nel", 6),
         "FUNC_GET with a NUL inside the name and none at its end");
    must_answer(fd, "NUL not at the end", T_INVALID_VALUE);
    nreq.name_len = 100;
    sent(th_send(fd, FLYT_OP_FUNC_GET, 0, 10, &nreq, sizeof nreq, "kernel", 7),
         "FUNC_GET with name_len 100 and 7 bytes of name");
    must_end(fd, "name_len above the frame's data");

    fd = session();
    nreq.name_len = FLYT_MAX_NAME + 1;
    static char long_name[FLYT_MAX_NAME + 1];
    memset(long_name, 'k', sizeof long_name - 1);
    sent(th_send(fd, FLYT_OP_FUNC_GET, 0, 11, &nreq, sizeof nreq, long_name, sizeof long_name),
         "FUNC_GET with a 1025-byte name");
    must_end(fd, "name over FLYT_MAX_NAME");

    fd = session();
    nreq.name_len = 0;
    sent(th_send(fd, FLYT_OP_FUNC_GET, 0, 12, &nreq, sizeof nreq, NULL, 0), "FUNC_GET with an empty name");
    int32_t result = 0;
    enum outcome o = refused(fd, &result);
    CHECK_NE(o, OTHER, "empty name: %s", told(o, result));
    close(fd);
    survived("an empty name");

    fd = session();
    flyt_req_launch l;
    memset(&l, 0, sizeof l);
    l.func = 0xdeadbeef;
    l.grid[0] = l.grid[1] = l.grid[2] = 1;
    l.block[0] = l.block[1] = l.block[2] = 1;
    sent(th_send(fd, FLYT_OP_LAUNCH, 0, 13, &l, sizeof l, NULL, 0), "LAUNCH of unknown function id 0xdeadbeef");
    must_answer(fd, "unknown function", T_INVALID_HANDLE);
    l.attr_count = FLYT_MAX_LAUNCH_ATTRS + 1;
    sent(th_send(fd, FLYT_OP_LAUNCH, 0, 14, &l, sizeof l, NULL, 0), "LAUNCH claiming 17 attributes, sending none");
    must_end(fd, "launch attributes over the limit");

    fd = session();
    l.attr_count = 1; /* but no attribute follows */
    sent(th_send(fd, FLYT_OP_LAUNCH, 0, 15, &l, sizeof l, NULL, 0), "LAUNCH claiming 1 attribute, sending none");
    must_end(fd, "launch attribute count above the frame's data");
}

/* The ops of the driver-level client (protocol 2). */
static void driver_op_cases(void)
{
    th_say("malformed requests of the driver-level ops");
    int fd = session();
    flyt_req_memset ms = {.dst = 0x1000, .pitch = 8, .slice_pitch = 8, .width_bytes = 8, .height = 1,
                          .depth = 1, .value = 1, .elem_size = 3};
    sent(th_send(fd, FLYT_OP_MEMSET, 0, 20, &ms, sizeof ms, NULL, 0), "MEMSET of 3-byte elements");
    must_end(fd, "memset element size 3");

    fd = session();
    flyt_req_tensor_map tm = {.kind = 9, .rank = 2};
    sent(th_send(fd, FLYT_OP_TENSOR_MAP, 0, 21, &tm, sizeof tm, NULL, 0), "TENSOR_MAP of kind 9");
    must_end(fd, "unknown tensor map kind");
    fd = session();
    tm.kind = FLYT_TMAP_TILED;
    tm.rank = FLYT_TMAP_RANK + 1;
    sent(th_send(fd, FLYT_OP_TENSOR_MAP, 0, 22, &tm, sizeof tm, NULL, 0), "TENSOR_MAP of rank 6");
    must_end(fd, "tensor map rank over 5");

    fd = session();
    flyt_req_link lk = {.input_count = FLYT_MAX_LINK_INPUTS + 1, .total_bytes = 0};
    sent(th_send(fd, FLYT_OP_LINK, 0, 23, &lk, sizeof lk, NULL, 0), "LINK of 257 inputs");
    must_end(fd, "too many link inputs");
    fd = session();
    /* one input whose header claims more bytes than the message holds */
    unsigned char body[sizeof(flyt_link_input) + 8];
    flyt_link_input in = {.type = 1 /* CU_JIT_INPUT_PTX */, .name_len = 2, .size = 1000};
    memcpy(body, &in, sizeof in);
    memcpy(body + sizeof in, "a\0xxxxxx", 8);
    lk = (flyt_req_link){.input_count = 1, .total_bytes = sizeof body};
    sent(th_send(fd, FLYT_OP_LINK, 0, 24, &lk, sizeof lk, body, sizeof body),
         "LINK whose input claims 1000 bytes in a 32-byte message");
    must_answer(fd, "link input past the data", T_INVALID_VALUE);
    close(fd);

    fd = session();
    flyt_req_vmm_access va = {.ptr = 0x200000, .size = 0x200000, .count = 65};
    sent(th_send(fd, FLYT_OP_VMM_SET_ACCESS, 0, 26, &va, sizeof va, NULL, 0),
         "VMM_SET_ACCESS of 65 entries");
    must_end(fd, "too many access entries");
    fd = session();
    flyt_vmm_access entry = {.location_type = 1, .flags = 3};
    va.count = 2; /* but one entry's bytes */
    sent(th_send(fd, FLYT_OP_VMM_SET_ACCESS, 0, 27, &va, sizeof va, &entry, sizeof entry),
         "VMM_SET_ACCESS claiming 2 entries with 1");
    must_end(fd, "access entries short of their count");
    fd = session();
    va.count = 1;
    entry.location_id = 3;
    sent(th_send(fd, FLYT_OP_VMM_SET_ACCESS, 0, 28, &va, sizeof va, &entry, sizeof entry),
         "VMM_SET_ACCESS for device 3");
    must_answer(fd, "access for a device the session lacks", T_INVALID_DEVICE);
    close(fd);

    fd = session();
    flyt_req_launch oc;
    memset(&oc, 0, sizeof oc);
    oc.func = 0xdeadbeef;
    oc.pad = 7;
    sent(th_send(fd, FLYT_OP_OCCUPANCY_CLUSTER, 0, 25, &oc, sizeof oc, NULL, 0),
         "OCCUPANCY_CLUSTER with question 7");
    must_end(fd, "unknown cluster question");
    fd = session();
    oc.pad = FLYT_CLUSTER_MAX_ACTIVE;
    sent(th_send(fd, FLYT_OP_OCCUPANCY_CLUSTER, 0, 26, &oc, sizeof oc, NULL, 0),
         "OCCUPANCY_CLUSTER of an unknown function");
    must_answer(fd, "unknown function", T_INVALID_HANDLE);
    flyt_req_handle mh = {0x4242};
    sent(th_send(fd, FLYT_OP_MODULE_FUNCS, 0, 27, &mh, sizeof mh, NULL, 0), "MODULE_FUNCS of unknown module");
    must_answer(fd, "unknown module", T_INVALID_HANDLE);
    close(fd);

    /* CALL: the plain calls are checked against their generated table */
    fd = session();
    flyt_req_call call = {.id = 9999};
    sent(th_send(fd, FLYT_OP_CALL, 0, 28, &call, sizeof call, NULL, 0), "CALL of call id 9999");
    must_end(fd, "unknown call id");
    fd = session();
    call = (flyt_req_call){.id = FLYT_CALL_cuStreamSetAttribute, .in_size = 3};
    sent(th_send(fd, FLYT_OP_CALL, 0, 29, &call, sizeof call, "abc", 3),
         "CALL of cuStreamSetAttribute with 3 bytes of attribute value");
    must_end(fd, "call with the wrong in size");
    fd = session();
    call = (flyt_req_call){.id = FLYT_CALL_cuStreamGetAttribute};
    sent(th_send(fd, FLYT_OP_CALL, FLYT_F_NOREPLY, 30, &call, sizeof call, NULL, 0),
         "CALL of cuStreamGetAttribute without a reply");
    must_end(fd, "a call that answers, sent without reply");
    fd = session();
    call = (flyt_req_call){.id = FLYT_CALL_cuStreamWriteValue32_v2, .args = {0x7777, 0x1000, 1, 0}};
    sent(th_send(fd, FLYT_OP_CALL, 0, 31, &call, sizeof call, NULL, 0),
         "CALL of cuStreamWriteValue32 on unknown stream 0x7777");
    must_answer(fd, "unknown stream", T_INVALID_HANDLE);
    close(fd);
    survived("the driver-level ops' bad requests");
}

/* HOST_REMAP outside a restored session: no region is detached, so every
 * one is answered with an error, with or without a memfd. */
static void host_remap_cases(void)
{
    th_say("HOST_REMAP of unknown, attached and wrong-kind ids: error replies");
    int fd = session();
    int memfd = th_memfd(8192, 1);
    flyt_req_host_map m = {8192};
    flyt_rep_u64 region;
    CHECK_EQ(th_call_fd(fd, FLYT_OP_HOST_MAP, &m, sizeof m, memfd, &region, sizeof region), 0,
             "HOST_MAP");
    flyt_rep_none none;
    struct {
        const char *what;
        flyt_req_host_remap req;
        int pass;
        int32_t want;
    } cases[] = {
        {"an unknown id", {0x7777, 8192, 0, 0, 0}, 1, 400},
        {"an unknown id, no memfd", {0x7777, 8192, 0, 0, 0}, 0, 400},
        {"id 0", {0, 8192, 0, 0, 0}, 1, 400},
        {"a stream's id", {FLYT_STREAM_DEFAULT, 8192, 0, 0, 0}, 1, 400},
        {"a region mapped already", {region.value, 8192, 0, 0, 0}, 1, 208},
        {"a region mapped already, other fields", {region.value, ~0ull, ~0ull, 7, 9}, 0, 208},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_EQ(th_call_fd(fd, FLYT_OP_HOST_REMAP, &cases[i].req, sizeof cases[i].req,
                            cases[i].pass ? memfd : -1, &none, sizeof none),
                 cases[i].want, "HOST_REMAP of %s", cases[i].what);
    CHECK_EQ(th_call_fd(fd, FLYT_OP_HOST_UNMAP, &(flyt_req_handle){region.value},
                        sizeof(flyt_req_handle), -1, &none, sizeof none), 0,
             "the session goes on: its region unmaps");
    close(memfd);
    close(fd);
    survived("the HOST_REMAP cases");
}

/* Errors the backend reports: answered, and the session goes on. */
static void error_reply_cases(void)
{
    th_say("bad addresses and ids get error replies; the session goes on");
    int fd = session();
    static unsigned char buf[8192];
    int had_data = 0;
    int rc = th_dtoh(fd, 0x1000, 4096, buf, &had_data);
    CHECK_NE(rc, 0,
             "MEMCPY_DTOH from 0x1000 (no allocation): error %d (%s)", rc, had_data ? "after data" : "refused up front");
    CHECK_NE(rc, -1000,
             "MEMCPY_DTOH from 0x1000 (no allocation): error %d (%s)", rc, had_data ? "after data" : "refused up front");
    rc = th_dtoh(fd, (uint64_t)(uintptr_t)buf, 64, buf, &had_data);
    CHECK_NE(rc, 0, "MEMCPY_DTOH from an address of this test process: error %d", rc);
    CHECK_NE(rc, -1000, "MEMCPY_DTOH from an address of this test process: error %d", rc);
    uint64_t ptr;
    CHECK_EQ(th_alloc(fd, 4096, &ptr), 0, "MEM_ALLOC 4096");
    rc = th_dtoh(fd, ptr + 4000, 200, buf, &had_data);
    CHECK_NE(rc, 0, "MEMCPY_DTOH running 104 bytes past an allocation: error %d", rc);
    CHECK_NE(rc, -1000, "MEMCPY_DTOH running 104 bytes past an allocation: error %d", rc);
    rc = th_dtoh(fd, ptr, 4096, buf, &had_data);
    CHECK_EQ(rc, 0, "MEMCPY_DTOH of the allocation itself works");
    rc = th_htod(fd, 0x2000, buf, 4096);
    CHECK_NE(rc, 0, "MEMCPY_HTOD to 0x2000: error %d", rc);
    CHECK_NE(rc, -1000, "MEMCPY_HTOD to 0x2000: error %d", rc);
    rc = th_htod(fd, ptr + 1, buf, 4096);
    CHECK_NE(rc, 0, "MEMCPY_HTOD one byte past the end: error %d", rc);
    CHECK_NE(rc, -1000, "MEMCPY_HTOD one byte past the end: error %d", rc);
    flyt_req_memset ms = {ptr, 4097, 4097, 4097, 1, 1, FLYT_STREAM_DEFAULT, 0, 0};
    rc = th_call(fd, FLYT_OP_MEMSET, &ms, sizeof ms, NULL, 0, NULL);
    CHECK_NE(rc, 0, "MEMSET of 4097 bytes on 4096: error %d", rc);
    CHECK_NE(rc, -1000, "MEMSET of 4097 bytes on 4096: error %d", rc);
    flyt_req_memcpy dd = {ptr, 0x3000, 16, FLYT_STREAM_DEFAULT};
    rc = th_call(fd, FLYT_OP_MEMCPY_DTOD, &dd, sizeof dd, NULL, 0, NULL);
    CHECK_NE(rc, 0, "MEMCPY_DTOD from 0x3000: error %d", rc);
    CHECK_NE(rc, -1000, "MEMCPY_DTOD from 0x3000: error %d", rc);
    rc = th_free(fd, 0xbad0000);
    CHECK_NE(rc, 0, "MEM_FREE of a bogus pointer: error %d", rc);
    CHECK_NE(rc, -1000, "MEM_FREE of a bogus pointer: error %d", rc);
    rc = th_free(fd, ptr + 8);
    CHECK_NE(rc, 0, "MEM_FREE of an interior pointer: error %d", rc);
    CHECK_NE(rc, -1000, "MEM_FREE of an interior pointer: error %d", rc);
    flyt_req_handle sh = {0x7777};
    rc = th_call(fd, FLYT_OP_STREAM_SYNC, &sh, sizeof sh, NULL, 0, NULL);
    CHECK_EQ(rc, T_INVALID_HANDLE,
             "STREAM_SYNC of unknown stream id 0x7777: %d (CUDA_ERROR_INVALID_HANDLE)", rc);
    flyt_req_handle eh = {0x8888};
    rc = th_call(fd, FLYT_OP_EVENT_QUERY, &eh, sizeof eh, NULL, 0, NULL);
    CHECK_EQ(rc, T_INVALID_HANDLE, "EVENT_QUERY of unknown event id: %d", rc);
    flyt_req_handle mh = {0x9999};
    rc = th_call(fd, FLYT_OP_MODULE_UNLOAD, &mh, sizeof mh, NULL, 0, NULL);
    CHECK_NE(rc, 0, "MODULE_UNLOAD of unknown module id: error %d", rc);
    CHECK_NE(rc, -1000, "MODULE_UNLOAD of unknown module id: error %d", rc);
    flyt_req_named nreq = {0x9999, 7, 0};
    rc = th_call(fd, FLYT_OP_FUNC_GET, &nreq, sizeof nreq, "kernel", 7, NULL);
    CHECK_NE(rc, 0, "FUNC_GET in unknown module id: error %d", rc);
    CHECK_NE(rc, -1000, "FUNC_GET in unknown module id: error %d", rc);

    th_say("errors of pipelined requests come back deferred");
    flyt_req_memset bad = {0x4000, 16, 16, 16, 1, 1, FLYT_STREAM_DEFAULT, 0, 0};
    CHECK_EQ(th_post(fd, FLYT_OP_MEMSET, &bad, sizeof bad, NULL, 0), 0, "NOREPLY MEMSET to 0x4000 sent");
    flyt_req_memcpy hd = {0x5000, 0, 2048, FLYT_STREAM_DEFAULT};
    CHECK_EQ(th_post(fd, FLYT_OP_MEMCPY_HTOD, &hd, sizeof hd, buf, 2048), 0,
             "NOREPLY MEMCPY_HTOD to 0x5000 sent");
    flyt_req_launch l;
    memset(&l, 0, sizeof l);
    l.func = 0xdeadbeef;
    l.grid[0] = l.grid[1] = l.grid[2] = l.block[0] = l.block[1] = l.block[2] = 1;
    CHECK_EQ(th_post(fd, FLYT_OP_LAUNCH, &l, sizeof l, NULL, 0), 0,
             "NOREPLY LAUNCH of an unknown function sent");
    flyt_req_none none = {0};
    rc = th_call(fd, FLYT_OP_DEVICE_SYNC, &none, sizeof none, NULL, 0, NULL);
    CHECK_NE(rc, -1000, "DEVICE_SYNC answered (result %d)", rc);
    CHECK_EQ(th_last_deferred, T_INVALID_VALUE,
             "its deferred field holds the first error: %d (CUDA_ERROR_INVALID_VALUE)", th_last_deferred);
    rc = th_call(fd, FLYT_OP_DEVICE_SYNC, &none, sizeof none, NULL, 0, NULL);
    CHECK_EQ(rc, 0, "the next reply's deferred field is clear");
    CHECK_EQ(th_last_deferred, 0, "the next reply's deferred field is clear");
    CHECK_EQ(th_free(fd, ptr), 0, "MEM_FREE of the allocation");
    CHECK_NE(th_free(fd, ptr), 0, "MEM_FREE again: error");
    flyt_rep_i32 cnt;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &cnt, sizeof cnt), 0,
             "the session still works");
    CHECK_EQ(cnt.value, 1, "the session still works");
    close(fd);
    survived("the error replies");
}

static void dying_clients(void)
{
    th_say("clients that die mid-frame");
    for (int variant = 0; variant < 4; variant++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            th_watchdog(0);
            int fd = th_connect();
            if (fd < 0)
                _exit(3);
            struct flyt_frame_hdr h = {sizeof(flyt_req_hello), FLYT_OP_HELLO, 0, 1, 0};
            if (variant == 0) { /* half a header, no HELLO */
                if (write(fd, &h, 7) != 7)
                    _exit(4);
            } else {
                if (th_hello(fd) != 0)
                    _exit(5);
                if (variant == 1) { /* half a header */
                    h.op = FLYT_OP_MEM_ALLOC;
                    h.length = sizeof(flyt_req_mem_alloc);
                    if (write(fd, &h, 9) != 9)
                        _exit(4);
                } else if (variant == 2) { /* header and part of a request */
                    h.op = FLYT_OP_MEM_ALLOC;
                    h.length = sizeof(flyt_req_mem_alloc);
                    uint64_t part = 4096;
                    if (write(fd, &h, sizeof h) != sizeof h || write(fd, &part, sizeof part) != sizeof part)
                        _exit(4);
                } else { /* a DTOH it never reads */
                    uint64_t ptr;
                    if (th_alloc(fd, 8 << 20, &ptr) != 0)
                        _exit(5);
                    flyt_req_memcpy req = {0, ptr, 8 << 20, FLYT_STREAM_DEFAULT};
                    th_send(fd, FLYT_OP_MEMCPY_DTOH, 0, 50, &req, sizeof req, NULL, 0);
                }
            }
            _exit(0); /* dies with the frame unfinished */
        }
        int st;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st), "client variant %d connected, sent part of a frame, died", variant);
        CHECK_EQ(WEXITSTATUS(st), 0, "client variant %d connected, sent part of a frame, died", variant);
        survived("a client dying mid-frame");
    }
}

/* One concurrent session: alloc, copy in, copy out, compare, free. */
static int worker(int id)
{
    int fd = th_connect();
    if (fd < 0 || th_hello(fd) != 0)
        return 10;
    const size_t n = (1 << 20) + id * 4099;
    unsigned char *out = malloc(n), *in = malloc(n);
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)(i * (id + 3) + id);
    for (int round = 0; round < 3; round++) {
        uint64_t ptr;
        int had;
        if (th_alloc(fd, n, &ptr) != 0)
            return 11;
        if (th_htod(fd, ptr, out, n) != 0)
            return 12;
        memset(in, 0, n);
        if (th_dtoh(fd, ptr, n, in, &had) != 0 || memcmp(in, out, n) != 0)
            return 13;
        if (th_free(fd, ptr) != 0)
            return 14;
    }
    free(in);
    free(out);
    close(fd);
    return 0;
}

static void concurrent_sessions(void)
{
    enum { N = 20 };
    th_say("%d concurrent sessions each allocating, copying and freeing", N);
    pid_t pids[N];
    fflush(stdout);
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            th_watchdog(0);
            alarm(90);
            _exit(worker(i));
        }
    }
    int ok = 0;
    for (int i = 0; i < N; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            ok++;
        else
            printf("        (session %d: %s %d)\n", i, WIFEXITED(st) ? "exit" : "signal",
                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    CHECK_EQ(ok, N, "%d of %d sessions copied their data intact", ok, N);
    survived("the concurrent sessions");
}

int main(int argc, char **argv)
{
    const char *bin = th_server_bin(argc, argv);
    th_watchdog(240);
    th_server_start(bin, NULL);

    th_say("a proper session");
    int fd = session();
    flyt_req_none none = {0};
    flyt_rep_i32 cnt;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &cnt, sizeof cnt), 0,
             "DEVICE_COUNT = 1");
    CHECK_EQ(cnt.value, 1, "DEVICE_COUNT = 1");
    CHECK_EQ(th_call(fd, FLYT_OP_GOODBYE, &none, sizeof none, NULL, 0, NULL), 0, "GOODBYE answered");
    close(fd);

    hello_cases();
    header_cases();
    data_cases();
    error_reply_cases();
    host_remap_cases();
    driver_op_cases();
    dying_clients();
    concurrent_sessions();

    CHECK(th_server_alive(), "the server is still running at the end");
    CHECK(th_server_log_clean(), "no session died of a signal, no sanitizer report (server log)");
    th_server_stop();
    th_passed();
    printf("all malformed-client checks passed\n");
    return 0;
}

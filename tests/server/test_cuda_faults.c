/*
 * The cuda backend's error paths without a GPU (issue 7), by fault injection
 * through its driver table as SQLite overrides its system calls: the backend
 * runs on a fake driver (fake_cuda.c: host memory as device memory, every
 * object a malloc'd token, so a leaked one is an ASan leak), then entries of
 * the table are replaced by versions that fail on a chosen call. Each case
 * checks the result the client sees, that the session stays in step, that
 * the memory quota's accounting is restored and no handle is left half
 * registered, and, at the session's end, that the backend gave every driver
 * object back.
 *
 * Sessions run in this process (a thread, over a socketpair), on a status
 * page in anonymous shared memory so that allocations are accounted.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/check.h" /* before harness.h: the one set of assertions */
#include "fake_cuda.h"
#include "flyt_log.h"
#include "harness.h"
#include "quota.h"
#include "session.h"

static struct flyt_cu_api table; /* what backends opened from now on call */

static void table_reset(void)
{
    fake_cuda_table(&table);
}

/* ---- faults: an entry that fails on its nth call from now on ---- */

static struct {
    int      nth, calls;
    CUresult code;
} fault;

#define FAULTY(fn, params, args)                                                               \
    static CUresult faulty_##fn params                                                         \
    {                                                                                          \
        if (++fault.calls == fault.nth)                                                        \
            return fault.code;                                                                 \
        return fake_##fn args;                                                                 \
    }
FAULTY(cuInit, (unsigned f), (f))
FAULTY(cuDevicePrimaryCtxRetain, (CUcontext *c, CUdevice d), (c, d))
FAULTY(cuCtxSynchronize, (void), ())
FAULTY(cuMemAlloc, (CUdeviceptr *p, size_t n), (p, n))
FAULTY(cuMemAllocPitch, (CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e),
       (p, pitch, w, h, e))
FAULTY(cuMemAddressReserve, (CUdeviceptr *p, size_t n, size_t a, CUdeviceptr at, unsigned long long f),
       (p, n, a, at, f))
FAULTY(cuMemCreate, (CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *pr,
                     unsigned long long f), (h, n, pr, f))
FAULTY(cuMemMap, (CUdeviceptr p, size_t n, size_t o, CUmemGenericAllocationHandle h,
                  unsigned long long f), (p, n, o, h, f))
FAULTY(cuMemSetAccess, (CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t k), (p, n, d, k))
FAULTY(cuMemUnmap, (CUdeviceptr p, size_t n), (p, n))
FAULTY(cuMemHostRegister, (void *p, size_t n, unsigned f), (p, n, f))
FAULTY(cuMemcpyHtoDAsync, (CUdeviceptr d, const void *s, size_t n, CUstream st), (d, s, n, st))
FAULTY(cuMemcpyDtoHAsync, (void *d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st))
FAULTY(cuStreamCreateWithPriority, (CUstream *s, unsigned f, int p), (s, f, p))
FAULTY(cuEventCreate, (CUevent *e, unsigned f), (e, f))
FAULTY(cuModuleLoadData, (CUmodule *m, const void *image), (m, image))
FAULTY(cuModuleGetFunction, (CUfunction *f, CUmodule m, const char *name), (f, m, name))
FAULTY(cuMemPoolCreate, (CUmemoryPool *p, const CUmemPoolProps *props), (p, props))

/* Makes entry fn of the table fail with err on its nth call (counting from 1)
 * in the next session; the others go to the fake. */
#define INJECT(fn, nth_call, err)                                                              \
    do {                                                                                       \
        fault.nth = (nth_call);                                                                \
        fault.calls = 0;                                                                       \
        fault.code = (err);                                                                    \
        CHECK_EQ(flyt_cu_table_set(&table, #fn, (void *)faulty_##fn, NULL), 0,                 \
                 "inject: %s fails on call %d with %d", #fn, (int)(nth_call), (int)(err));     \
    } while (0)

/* ---- an in-process session on the fake driver ---- */

#define QUOTA ((uint64_t)64 << 20)

static const struct flyt_server_config config = {
    .backend_kind = "cuda",
    .no_peer_memory = 1,
    .admitted_fd = -1,
};

static int sess_fd; /* the client's end of the session's socket */

/* Starts a session on the table as it is now; HELLO answers hello_want. */
static void session_begin(int hello_want)
{
    flyt_rep_hello rep;
    CHECK_EQ(fake_session_begin(&table, &config, &sess_fd, &rep), hello_want, "HELLO answers %d",
             hello_want);
    if (hello_want == CUDA_SUCCESS)
        CHECK_STR_EQ(rep.backend, "cuda", "the session runs the cuda backend");
}

/* Ends the session; the backend must have given back every driver object. */
static void session_end(void)
{
    fake_session_end();
    table_reset();
    CHECK_EQ(fake_live.ctx_refs, 0, "the primary context is released");
    CHECK_EQ(fake_live.streams + fake_live.events + fake_live.pools + fake_live.modules, 0,
             "no stream, event, pool or module is left");
    CHECK_EQ(fake_live.registered, 0, "no host memory is left registered");
    CHECK_EQ(fake_live.allocs, 0, "no device memory is left");
    CHECK_EQ(fake_live.reservations + fake_live.mappings + fake_live.handles, 0,
             "no arena, mapping or physical allocation is left");
    CHECK_EQ(flyt_quota_used_total(), 0, "the quota is given back whole");
}

static int no_args(uint16_t op, void *rep, size_t rep_len)
{
    flyt_req_none req = {0};
    char none;
    return th_call_rep(sess_fd, op, &req, sizeof req, NULL, 0, rep ? rep : &none, rep_len);
}

/* The session still answers in step. */
static void session_in_step(void)
{
    flyt_rep_i32 rep;
    CHECK_EQ(no_args(FLYT_OP_DEVICE_COUNT, &rep, sizeof rep), CUDA_SUCCESS, "the session answers the next call");
}

static int stream_create(uint64_t id)
{
    flyt_req_stream_create r = {0, 0, id};
    return th_call(sess_fd, FLYT_OP_STREAM_CREATE, &r, sizeof r, NULL, 0, NULL);
}

static int event_create(uint64_t id)
{
    flyt_req_event_create r = {0, 0, id};
    return th_call(sess_fd, FLYT_OP_EVENT_CREATE, &r, sizeof r, NULL, 0, NULL);
}

static int destroy(uint16_t op, uint64_t id)
{
    flyt_req_handle r = {id};
    return th_call(sess_fd, op, &r, sizeof r, NULL, 0, NULL);
}

/* ---- the cases ---- */

static void open_failures(void)
{
    th_say("the backend cannot be opened: cuInit, then the primary context, fail");
    INJECT(cuInit, 1, CUDA_ERROR_NO_DEVICE);
    session_begin(CUDA_ERROR_NO_DEVICE);
    session_end();
    INJECT(cuDevicePrimaryCtxRetain, 1, CUDA_ERROR_OUT_OF_MEMORY);
    session_begin(CUDA_ERROR_NO_DEVICE);
    session_end();
}

/* Allocating the whole quota fails once through fn's fault, then works:
 * nothing stays charged, reserved or mapped in between. */
static void alloc_fault(const char *fn_name, uint64_t size)
{
    uint64_t p = 0;
    CHECK_EQ(th_alloc(sess_fd, size, &p), CUDA_ERROR_OUT_OF_MEMORY, "MEM_ALLOC fails (%s)", fn_name);
    CHECK_EQ(flyt_quota_used_total(), 0, "nothing stays charged");
    CHECK_EQ(fake_live.mappings + fake_live.handles, 0, "nothing stays mapped or created");
    CHECK_EQ(th_alloc(sess_fd, size, &p), CUDA_SUCCESS, "the same allocation works next time");
    CHECK_EQ(flyt_quota_used_total(), size, "and is charged");
    CHECK_EQ(th_free(sess_fd, p), CUDA_SUCCESS, "MEM_FREE");
    CHECK_EQ(flyt_quota_used_total(), 0, "uncharged");
}

static void alloc_out_of_memory(void)
{
    static const struct {
        const char *fn;
        void       *faulty;
        uint64_t    size;
    } cases[] = {
        {"cuMemAddressReserve", (void *)faulty_cuMemAddressReserve, QUOTA},
        {"cuMemCreate", (void *)faulty_cuMemCreate, QUOTA},
        {"cuMemMap", (void *)faulty_cuMemMap, QUOTA},
        {"cuMemSetAccess", (void *)faulty_cuMemSetAccess, QUOTA},
        {"cuMemCreate", (void *)faulty_cuMemCreate, 4096}, /* a new chunk for a small one */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_say("%s fails for an allocation of %llu bytes: everything given back", cases[i].fn,
               (unsigned long long)cases[i].size);
        fault.nth = 1, fault.calls = 0, fault.code = CUDA_ERROR_OUT_OF_MEMORY;
        CHECK_EQ(flyt_cu_table_set(&table, cases[i].fn, cases[i].faulty, NULL), 0, "inject");
        session_begin(CUDA_SUCCESS);
        alloc_fault(cases[i].fn, cases[i].size);
        session_end();
    }
}

static void alloc_pitch_fails(void)
{
    th_say("cuMemAllocPitch fails: the quota is given back");
    INJECT(cuMemAllocPitch, 1, CUDA_ERROR_OUT_OF_MEMORY);
    session_begin(CUDA_SUCCESS);
    flyt_req_mem_pitch r = {1000, 100};
    CHECK_EQ(th_call(sess_fd, FLYT_OP_MEM_ALLOC_PITCH, &r, sizeof r, NULL, 0, NULL),
             CUDA_ERROR_OUT_OF_MEMORY, "MEM_ALLOC_PITCH fails");
    CHECK_EQ(flyt_quota_used_total(), 0, "nothing stays charged");
    session_end();
}

static void free_fails(void)
{
    static const uint64_t sizes[] = {4u << 20, 4096};
    for (int i = 0; i < 2; i++) {
        int small = sizes[i] < FAKE_GRANULE / 2;
        th_say("a free of %llu bytes fails (%s): the allocation stays charged until it is freed",
               (unsigned long long)sizes[i], small ? "the wait for the device" : "cuMemUnmap");
        if (small)
            INJECT(cuCtxSynchronize, 0, CUDA_ERROR_ILLEGAL_ADDRESS);
        else
            INJECT(cuMemUnmap, 0, CUDA_ERROR_ILLEGAL_ADDRESS);
        session_begin(CUDA_SUCCESS);
        fault.calls = 0, fault.nth = 1; /* armed now: the session's start may call them */
        uint64_t p = 0;
        CHECK_EQ(th_alloc(sess_fd, sizes[i], &p), CUDA_SUCCESS, "MEM_ALLOC");
        CHECK_EQ(th_free(sess_fd, p), CUDA_ERROR_ILLEGAL_ADDRESS, "MEM_FREE reports the driver's error");
        CHECK_EQ(flyt_quota_used_total(), sizes[i], "the memory that still exists stays charged");
        CHECK_EQ(th_free(sess_fd, p), CUDA_SUCCESS, "a second MEM_FREE frees it");
        CHECK_EQ(flyt_quota_used_total(), 0, "uncharged");
        session_end();
    }
}

static void sticky_error(void)
{
    th_say("a context with a sticky error: MEM_ALLOC answers it, even with room in a chunk");
    session_begin(CUDA_SUCCESS);
    uint64_t p = 0, q = 0;
    CHECK_EQ(th_alloc(sess_fd, 4096, &p), CUDA_SUCCESS, "MEM_ALLOC");
    fake_live.sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
    CHECK_EQ(th_alloc(sess_fd, 4096, &q), CUDA_ERROR_ILLEGAL_ADDRESS, "MEM_ALLOC after the fault");
    CHECK_EQ(flyt_quota_used_total(), 4096, "nothing more is charged");
    fake_live.sticky = CUDA_ERROR_NOT_READY;
    CHECK_EQ(th_alloc(sess_fd, 4096, &q), CUDA_SUCCESS, "work still running is no error");
    fake_live.sticky = 0;
    CHECK_EQ(th_free(sess_fd, q), CUDA_SUCCESS, "MEM_FREE");
    CHECK_EQ(th_free(sess_fd, p), CUDA_SUCCESS, "MEM_FREE");
    session_end();
}

/* A create that fails with a client-chosen id leaves the id free. */
static void create_fails(const char *what, uint16_t destroy_op, int (*create)(uint64_t),
                         const int *count)
{
    uint64_t id = FLYT_CLIENT_IDS + 7;
    CHECK_EQ(create(id), CUDA_ERROR_OUT_OF_MEMORY, "%s create fails", what);
    CHECK_EQ(*count, 0, "the driver holds no %s", what);
    CHECK_EQ(destroy(destroy_op, id), CUDA_ERROR_INVALID_HANDLE, "its id names nothing");
    CHECK_EQ(create(id), CUDA_SUCCESS, "the same id can be created again");
    CHECK_EQ(destroy(destroy_op, id), CUDA_SUCCESS, "and destroyed");
    CHECK_EQ(*count, 0, "the driver holds no %s", what);
}

static void stream_and_event_create_fail(void)
{
    th_say("cuStreamCreateWithPriority fails: no half-registered stream");
    INJECT(cuStreamCreateWithPriority, 1, CUDA_ERROR_OUT_OF_MEMORY);
    session_begin(CUDA_SUCCESS);
    create_fails("stream", FLYT_OP_STREAM_DESTROY, stream_create, &fake_live.streams);
    session_end();

    th_say("cuEventCreate fails: no half-registered event");
    INJECT(cuEventCreate, 1, CUDA_ERROR_OUT_OF_MEMORY);
    session_begin(CUDA_SUCCESS);
    create_fails("event", FLYT_OP_EVENT_DESTROY, event_create, &fake_live.events);
    session_end();
}

static void pool_create_fails(void)
{
    th_say("cuMemPoolCreate fails");
    INJECT(cuMemPoolCreate, 1, CUDA_ERROR_OUT_OF_MEMORY);
    session_begin(CUDA_SUCCESS);
    flyt_req_pool_create r = {0, 0, 0};
    flyt_rep_u64 rep = {0};
    CHECK_EQ(th_call_rep(sess_fd, FLYT_OP_POOL_CREATE, &r, sizeof r, NULL, 0, &rep, sizeof rep),
             CUDA_ERROR_OUT_OF_MEMORY, "POOL_CREATE fails");
    CHECK_EQ(rep.value, 0, "and names no pool");
    CHECK_EQ(fake_live.pools, 0, "the driver holds no pool");
    CHECK_EQ(th_call_rep(sess_fd, FLYT_OP_POOL_CREATE, &r, sizeof r, NULL, 0, &rep, sizeof rep),
             CUDA_SUCCESS, "the next POOL_CREATE works (its pool is destroyed at the end)");
    session_end();
}

static int func_get(uint64_t module, const char *name)
{
    flyt_req_named r = {module, (uint32_t)strlen(name) + 1, 0};
    return th_call(sess_fd, FLYT_OP_FUNC_GET, &r, sizeof r, name, strlen(name) + 1, NULL);
}

static void module_faults(void)
{
    size_t size = 0;
    unsigned char *image = th_fake_fatbin(&size);
    th_say("cuModuleLoadData, then cuModuleGetFunction, fail");
    INJECT(cuModuleLoadData, 1, CUDA_ERROR_INVALID_PTX);
    session_begin(CUDA_SUCCESS);
    uint64_t module = 0;
    CHECK_EQ(th_module_load(sess_fd, image, size, &module), CUDA_ERROR_INVALID_PTX,
             "MODULE_LOAD reports the driver's error");
    CHECK_EQ(fake_live.modules, 0, "the driver holds no module");
    CHECK_EQ(destroy(FLYT_OP_MODULE_UNLOAD, module), CUDA_ERROR_INVALID_HANDLE,
             "no module was registered");
    session_end();

    INJECT(cuModuleGetFunction, 1, CUDA_ERROR_NOT_FOUND);
    session_begin(CUDA_SUCCESS);
    CHECK_EQ(th_module_load(sess_fd, image, size, &module), CUDA_SUCCESS, "MODULE_LOAD");
    CHECK_EQ(func_get(module, "kernel"), CUDA_ERROR_NOT_FOUND, "FUNC_GET reports the error");
    CHECK_EQ(func_get(module, "kernel"), CUDA_SUCCESS, "the next FUNC_GET finds it");
    CHECK_EQ(destroy(FLYT_OP_MODULE_UNLOAD, module), CUDA_SUCCESS, "MODULE_UNLOAD");
    CHECK_EQ(fake_live.modules, 0, "the driver holds no module");
    session_end();
    free(image);
}

static void sync_fails_mid_session(void)
{
    th_say("cuCtxSynchronize fails mid-session, with objects live");
    INJECT(cuCtxSynchronize, 2, CUDA_ERROR_LAUNCH_FAILED);
    session_begin(CUDA_SUCCESS);
    uint64_t p = 0;
    CHECK_EQ(stream_create(FLYT_CLIENT_IDS + 1), CUDA_SUCCESS, "STREAM_CREATE");
    CHECK_EQ(event_create(FLYT_CLIENT_IDS + 2), CUDA_SUCCESS, "EVENT_CREATE");
    CHECK_EQ(th_alloc(sess_fd, 1 << 20, &p), CUDA_SUCCESS, "MEM_ALLOC");
    CHECK_EQ(no_args(FLYT_OP_DEVICE_SYNC, NULL, 0), CUDA_SUCCESS,
             "DEVICE_SYNC");
    CHECK_EQ(no_args(FLYT_OP_DEVICE_SYNC, NULL, 0),
             CUDA_ERROR_LAUNCH_FAILED, "the next DEVICE_SYNC reports the failure");
    session_in_step();
    CHECK_EQ(flyt_quota_used_total(), 1 << 20, "the allocation stays charged");
    session_end(); /* and everything is destroyed, the allocation uncharged */
}

/* A copy of several staging buffers' worth whose nth chunk fails. */
static void copies_fail(void)
{
    const size_t big = 2 * FLYT_STAGING_BYTES + 4096;
    unsigned char *data = malloc(big), *back = malloc(big);
    CHECK(data && back, "buffers");
    for (size_t i = 0; i < big; i++)
        data[i] = (unsigned char)(i * 7 + 3);

    th_say("cuMemcpyHtoDAsync fails on the second chunk of a %zu-byte copy", big);
    INJECT(cuMemcpyHtoDAsync, 2, CUDA_ERROR_ILLEGAL_ADDRESS);
    session_begin(CUDA_SUCCESS);
    uint64_t p = 0;
    CHECK_EQ(th_alloc(sess_fd, big, &p), CUDA_SUCCESS, "MEM_ALLOC");
    CHECK_EQ(th_htod(sess_fd, p, data, big), CUDA_ERROR_ILLEGAL_ADDRESS,
             "MEMCPY_HTOD reports the failed chunk");
    session_in_step();
    CHECK_EQ(th_htod(sess_fd, p, data, big), CUDA_SUCCESS, "the copy again works");
    int had = 0;
    CHECK_EQ(th_dtoh(sess_fd, p, big, back, &had), CUDA_SUCCESS, "MEMCPY_DTOH");
    CHECK_MEM_EQ(back, data, big, "the data came back");
    session_end();

    th_say("cuMemcpyDtoHAsync fails");
    INJECT(cuMemcpyDtoHAsync, 1, CUDA_ERROR_ILLEGAL_ADDRESS);
    session_begin(CUDA_SUCCESS);
    CHECK_EQ(th_alloc(sess_fd, 4096, &p), CUDA_SUCCESS, "MEM_ALLOC");
    CHECK_EQ(th_dtoh(sess_fd, p, 4096, back, &had), CUDA_ERROR_ILLEGAL_ADDRESS,
             "MEMCPY_DTOH reports the error");
    session_in_step();
    session_end();

    th_say("cuMemHostRegister fails: staging stays pageable and copies still work");
    INJECT(cuMemHostRegister, 1, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    session_begin(CUDA_SUCCESS);
    CHECK_EQ(th_alloc(sess_fd, big, &p), CUDA_SUCCESS, "MEM_ALLOC");
    CHECK_EQ(th_htod(sess_fd, p, data, big), CUDA_SUCCESS, "MEMCPY_HTOD");
    memset(back, 0, big);
    CHECK_EQ(th_dtoh(sess_fd, p, big, back, &had), CUDA_SUCCESS, "MEMCPY_DTOH");
    CHECK_MEM_EQ(back, data, big, "the data came back");
    session_end();
    free(data);
    free(back);
}

/* LINK's inputs: per image a flyt_link_input, the name "in" and the bytes. */
static size_t link_inputs(char *buf, const char *const *images, uint32_t count)
{
    size_t at = 0;
    for (uint32_t i = 0; i < count; i++) {
        flyt_link_input in = {.type = CU_JIT_INPUT_PTX, .name_len = 3, .size = strlen(images[i]) + 1};
        memcpy(buf + at, &in, sizeof in);
        memcpy(buf + at + sizeof in, "in", 3);
        memcpy(buf + at + sizeof in + 3, images[i], in.size);
        at += sizeof in + 3 + in.size;
    }
    return at;
}

/* LINK answers the JIT's info and error logs after the cubin, and only
 * them when the link fails. */
static void link_logs(void)
{
    th_say("LINK: the JIT's logs come back, verbose when asked, and on failure");
    session_begin(CUDA_SUCCESS);
    const char *good[] = {"first", "second"}, *bad[] = {"first", "undefined x"};
    char data[256];
    for (int round = 0; round < 3; round++) {
        size_t len = link_inputs(data, round == 2 ? bad : good, 2);
        flyt_req_link req = {.input_count = 2, .flags = round == 1 ? FLYT_LINK_VERBOSE : 0,
                             .total_bytes = len};
        struct th_reply reply = {0};
        int result = th_call(sess_fd, FLYT_OP_LINK, &req, sizeof req, data, len, &reply);
        uint64_t cubin_size = 0;
        CHECK(reply.body_len >= sizeof cubin_size, "a reply struct");
        memcpy(&cubin_size, reply.body, sizeof cubin_size);
        const char *cubin = (const char *)reply.body + sizeof cubin_size;
        const char *info = cubin + cubin_size, *error = info + strlen(info) + 1;
        CHECK_EQ(reply.body_len, sizeof cubin_size + cubin_size + strlen(info) + strlen(error) + 2,
                 "the cubin and two NUL-terminated logs");
        if (round < 2) {
            CHECK_EQ(result, CUDA_SUCCESS, "the link succeeds");
            CHECK_EQ(cubin_size, 13, "the cubin is both inputs");
            CHECK_STR_EQ(cubin + 6, "second", "in order");
            CHECK_STR_EQ(info, round ? "info: 13 bytes linked, verbose" : "info: 13 bytes linked",
                         "the info log, verbose when asked");
            CHECK_STR_EQ(error, "", "an empty error log");
        } else {
            CHECK_EQ(result, CUDA_ERROR_INVALID_IMAGE, "the link fails");
            CHECK_EQ(cubin_size, 0, "no cubin");
            CHECK_STR_EQ(error, "error: undefined reference", "the error log comes back");
        }
        th_reply_free(&reply);
    }
    session_end();
}

/* The override on an open backend, without a session. */
static void live_override(void)
{
    th_say("flyt_cuda_table_override on an open backend");
    flyt_cuda_driver_use(&table);
    char err[256] = "";
    flyt_backend *b = flyt_backend_open("cuda", 0, err, sizeof err);
    CHECK(b != NULL, "the cuda backend opens on the fake driver (%s)", err);
    void *old = NULL;
    CHECK_EQ(flyt_cuda_table_override(b, "cuMemAlloc", (void *)faulty_cuMemAlloc, &old), 0,
             "cuMemAlloc is an entry (its symbol is cuMemAlloc_v2)");
    CHECK_EQ(old, (void *)fake_cuMemAlloc, "the former entry is given back");
    CHECK_EQ(flyt_cuda_table_override(b, "cuMemAlloc", old, NULL), 0, "restored");
    CHECK_EQ(flyt_cuda_table_override(b, "cuNoSuchCall", old, NULL), -1, "an unknown name is refused");
    CHECK_EQ(flyt_cuda_table_override(b, "cuMemCreate", (void *)faulty_cuMemCreate, &old), 0,
             "cuMemCreate overridden");
    fault.nth = 1, fault.calls = 0, fault.code = CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t p = 0;
    CHECK_EQ(b->ops->mem_alloc(b, 64, &p), CUDA_ERROR_OUT_OF_MEMORY, "mem_alloc fails");
    CHECK_EQ(p, 0, "and returns no pointer");
    CHECK_EQ(b->ops->mem_alloc(b, 64, &p), CUDA_SUCCESS, "the next one works");
    CHECK_EQ(b->ops->mem_free(b, p), CUDA_SUCCESS, "mem_free");
    CHECK_EQ(flyt_cuda_table_override(b, "cuMemCreate", old, NULL), 0, "restored");
    b->ops->close(b);
    CHECK_EQ(fake_live.ctx_refs, 0, "close released the primary context");
}

int main(void)
{
    flyt_log_init("test_cuda_faults", FLYT_LOG_ERROR);
    signal(SIGPIPE, SIG_IGN);
    th_watchdog(120);
    char err[256];
    CHECK_EQ(flyt_status_open(NULL, QUOTA, err, sizeof err), 0, "a status page with a quota");
    table_reset();

    open_failures();
    alloc_out_of_memory();
    alloc_pitch_fails();
    free_fails();
    sticky_error();
    stream_and_event_create_fail();
    pool_create_fails();
    module_faults();
    link_logs();
    sync_fails_mid_session();
    copies_fail();
    live_override();
    flyt_cuda_driver_use(NULL);
    th_passed();
    printf("PASS\n");
    return 0;
}

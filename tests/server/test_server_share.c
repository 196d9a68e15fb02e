/*
 * A tenant's share of flyt-server over raw frames with the host backend:
 * --memory-quota (every allocation accounted by pointer, across
 * connections; refusals are CUDA_ERROR_OUT_OF_MEMORY; the device reports the
 * quota as its memory), --sm-groups / --sm-granularity (the device reports
 * the share's SMs; groups the GPU does not have are refused), and the status
 * page of --status-file (listening, connected clients, memory used).
 *
 * usage: test_server_share PATH-TO-flyt-server
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <driver_types.h>

#include "flyt_server_status.h"
#include "harness.h"

#define MiB (1ull << 20)
#define QUOTA (64 * MiB)
#define T_NO_DEVICE 100

static const flyt_req_none none;
static char status_path[256];

static void mem_info(int fd, uint64_t *free_b, uint64_t *total_b)
{
    flyt_rep_mem_info mi;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_MEM_INFO, &none, sizeof none, NULL, 0, &mi, sizeof mi), 0,
             "DEVICE_MEM_INFO");
    *free_b = mi.free_bytes;
    *total_b = mi.total_bytes;
}

static struct flyt_server_status read_status(void)
{
    struct flyt_server_status st;
    memset(&st, 0, sizeof st);
    int fd = open(status_path, O_RDONLY);
    if (fd >= 0) {
        if (pread(fd, &st, sizeof st, 0) != (ssize_t)sizeof st)
            memset(&st, 0, sizeof st);
        close(fd);
    }
    return st;
}

/* Waits up to 5 s for the page's connected count to be n. */
static int wait_sessions(uint32_t n)
{
    for (int i = 0; i < 500; i++) {
        if (read_status().sessions == n)
            return 1;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static int alloc_pitch(int fd, uint64_t width, uint64_t height, uint64_t *ptr, uint64_t *pitch)
{
    flyt_req_mem_pitch req = {width, height};
    flyt_rep_u64_pair rep;
    int rc = th_call_rep(fd, FLYT_OP_MEM_ALLOC_PITCH, &req, sizeof req, NULL, 0, &rep, sizeof rep);
    *ptr = rep.a;
    *pitch = rep.b;
    return rc;
}

static int alloc_async(int fd, uint64_t size, uint64_t *ptr)
{
    flyt_req_mem_alloc req = {size, FLYT_STREAM_DEFAULT, 0};
    flyt_rep_u64 rep;
    int rc = th_call_rep(fd, FLYT_OP_MEM_ALLOC_ASYNC, &req, sizeof req, NULL, 0, &rep, sizeof rep);
    *ptr = rep.value;
    return rc;
}

static int hello_result(int fd)
{
    flyt_req_hello h;
    memset(&h, 0, sizeof h);
    h.magic = FLYT_PROTO_MAGIC;
    h.major = FLYT_PROTO_MAJOR;
    h.minor = FLYT_PROTO_MINOR;
    return th_call(fd, FLYT_OP_HELLO, &h, sizeof h, NULL, 0, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-flyt-server\n", argv[0]);
        return 2;
    }
    const char *bin = argv[1];
    th_watchdog(120);
    signal(SIGPIPE, SIG_IGN);

    th_say("arguments");
    const char *bad1[] = {"--listen", "unix:/tmp/flyt-never.sock", "--sm-groups", "1,1", NULL};
    const char *bad2[] = {"--listen", "unix:/tmp/flyt-never.sock", "--memory-quota", "lots", NULL};
    const char *bad3[] = {"--listen", "unix:/tmp/flyt-never.sock", "--sm-granularity", "0", NULL};
    const char *bad4[] = {"--listen", "unix:/tmp/flyt-never.sock", "--sm-groups", "0,x", NULL};
    CHECK_EQ(th_run_server(bin, bad1, NULL, 0), 2, "--sm-groups 1,1 refused");
    CHECK_EQ(th_run_server(bin, bad2, NULL, 0), 2, "--memory-quota lots refused");
    CHECK_EQ(th_run_server(bin, bad3, NULL, 0), 2, "--sm-granularity 0 refused");
    CHECK_EQ(th_run_server(bin, bad4, NULL, 0), 2, "--sm-groups 0,x refused");

    th_prepare_dir();
    snprintf(status_path, sizeof status_path, "%s/server.status", th_temp_dir());
    const char *args[] = {"--memory-quota", "64MiB", "--sm-groups", "0,1,3", "--sm-granularity",
                          "8", "--status-file", status_path, NULL};
    th_server_start_args(bin, "FLYT_HOST_BACKEND_MEM=1073741824", args);

    th_say("status page");
    struct flyt_server_status st = read_status();
    CHECK_EQ(st.magic, FLYT_STATUS_MAGIC, "published");
    CHECK_EQ(st.version, FLYT_STATUS_VERSION, "published");
    CHECK_EQ(st.memory_quota, QUOTA,
             "quota %llu, used %llu", (unsigned long long)st.memory_quota, (unsigned long long)st.memory_used);
    CHECK_EQ(st.memory_used, 0,
             "quota %llu, used %llu", (unsigned long long)st.memory_quota, (unsigned long long)st.memory_used);
    CHECK(wait_sessions(0), "no client connected");

    int fd = th_connect();
    CHECK_GE(fd, 0, "HELLO");
    CHECK_EQ(th_hello(fd), 0, "HELLO");
    CHECK(wait_sessions(1), "one client connected");

    th_say("the tenant sees its share");
    flyt_req_device dev = {0, 0};
    flyt_rep_props props;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_PROPS, &dev, sizeof dev, NULL, 0, &props, sizeof props), 0,
             "DEVICE_PROPS");
    struct cudaDeviceProp dp;
    memcpy(&dp, props.bytes, sizeof dp);
    uint64_t total_mem = dp.totalGlobalMem;
    int sms = dp.multiProcessorCount;
    CHECK_EQ(total_mem, QUOTA, "totalGlobalMem = quota (%llu)", (unsigned long long)total_mem);
    CHECK_EQ(sms, 24, "multiProcessorCount = 3 groups of 8 = %d", sms);
    flyt_req_device_attr da = {16 /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */, 0};
    flyt_rep_i32 v;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_ATTR, &da, sizeof da, NULL, 0, &v, sizeof v), 0,
             "DEVICE_ATTR MULTIPROCESSOR_COUNT = %d", v.value);
    CHECK_EQ(v.value, 24, "DEVICE_ATTR MULTIPROCESSOR_COUNT = %d", v.value);
    CHECK_EQ(read_status().sm_count, 24, "status page: 24 SMs");
    uint64_t fr, tot;
    mem_info(fd, &fr, &tot);
    CHECK_EQ(tot, QUOTA, "mem info: total %llu free %llu", (unsigned long long)tot, (unsigned long long)fr);
    CHECK_EQ(fr, QUOTA, "mem info: total %llu free %llu", (unsigned long long)tot, (unsigned long long)fr);

    th_say("allocations count against the quota");
    uint64_t a, b, c2, d;
    CHECK_EQ(th_alloc(fd, 40 * MiB, &a), 0, "40 MiB allocated");
    CHECK(a, "40 MiB allocated");
    mem_info(fd, &fr, &tot);
    CHECK_EQ(fr, 24 * MiB, "free %llu MiB", (unsigned long long)(fr / MiB));
    CHECK_EQ(th_alloc(fd, 30 * MiB, &b), T_OUT_OF_MEMORY, "30 MiB more: out of memory");
    CHECK_EQ(b, 0, "30 MiB more: out of memory");
    CHECK_EQ(alloc_async(fd, 30 * MiB, &b), T_OUT_OF_MEMORY, "30 MiB async: out of memory");
    CHECK_EQ(th_alloc(fd, 24 * MiB, &b), 0, "24 MiB allocated (exactly the quota)");
    CHECK(b, "24 MiB allocated (exactly the quota)");
    mem_info(fd, &fr, &tot);
    CHECK_EQ(fr, 0, "free 0");
    CHECK_EQ(tot, QUOTA, "free 0");
    CHECK_EQ(th_alloc(fd, 1, &c2), T_OUT_OF_MEMORY, "1 byte more: out of memory");
    CHECK_EQ(read_status().memory_used, QUOTA, "status page: 64 MiB used");
    CHECK_EQ(th_free(fd, a), 0, "the 40 MiB freed");
    mem_info(fd, &fr, &tot);
    CHECK_EQ(fr, 40 * MiB, "free %llu MiB", (unsigned long long)(fr / MiB));
    CHECK_NE(th_free(fd, a), 0, "freeing it again fails");
    mem_info(fd, &fr, &tot);
    CHECK_EQ(fr, 40 * MiB, "and changes nothing");

    uint64_t pitch;
    CHECK_EQ(alloc_pitch(fd, 1000, 1000, &c2, &pitch), 0,
             "pitched 1000x1000: pitch %llu", (unsigned long long)pitch);
    CHECK_EQ(pitch, 1024, "pitched 1000x1000: pitch %llu", (unsigned long long)pitch);
    mem_info(fd, &fr, &tot);
    CHECK_EQ(fr, 40 * MiB - 1024 * 1000, "counted as pitch x height (free %llu)", (unsigned long long)fr);
    CHECK_EQ(alloc_pitch(fd, 8192, 8192, &d, &pitch), T_OUT_OF_MEMORY, "pitched 8192x8192 (64 MiB): refused");
    CHECK_EQ(alloc_async(fd, 8 * MiB, &d), 0, "8 MiB async");
    CHECK(d, "8 MiB async");
    mem_info(fd, &fr, &tot);
    CHECK_EQ(fr, 32 * MiB - 1024 * 1000, "counted (free %llu)", (unsigned long long)fr);
    flyt_req_mem_free_async fa = {d, FLYT_STREAM_DEFAULT};
    CHECK_EQ(th_call(fd, FLYT_OP_MEM_FREE_ASYNC, &fa, sizeof fa, NULL, 0, NULL), 0, "freed async");
    CHECK_EQ(th_free(fd, c2), 0, "pitched freed");
    mem_info(fd, &fr, &tot);
    CHECK_EQ(fr, 40 * MiB, "free %llu MiB again", (unsigned long long)(fr / MiB));

    th_say("the quota holds across connections");
    int fd2 = th_connect();
    CHECK_GE(fd2, 0, "second connection");
    CHECK_EQ(th_hello(fd2), 0, "second connection");
    CHECK(wait_sessions(2), "two clients connected");
    CHECK_EQ(th_alloc(fd2, 41 * MiB, &a), T_OUT_OF_MEMORY, "41 MiB on the second: out of memory");
    CHECK_EQ(th_alloc(fd2, 30 * MiB, &a), 0, "30 MiB on the second");
    mem_info(fd, &fr, &tot);
    CHECK_EQ(fr, 10 * MiB, "the first sees 10 MiB free");
    close(fd2);
    CHECK(wait_sessions(1), "second closed: one client");
    mem_info(fd, &fr, &tot);
    CHECK_EQ(fr, 40 * MiB,
             "what the second held is given back (free %llu MiB)", (unsigned long long)(fr / MiB));

    th_say("device reset gives everything back");
    CHECK_EQ(th_call(fd, FLYT_OP_DEVICE_RESET, &none, sizeof none, NULL, 0, NULL), 0, "DEVICE_RESET");
    mem_info(fd, &fr, &tot);
    CHECK_EQ(fr, QUOTA, "free = quota");
    CHECK_EQ(th_alloc(fd, QUOTA, &a), 0, "the whole quota in one allocation");
    close(fd);
    CHECK(wait_sessions(0), "no client connected");
    CHECK_EQ(read_status().memory_used, 0, "status page: nothing used after the session ended");
    CHECK(th_server_alive(), "the server is alive and clean");
    CHECK(th_server_log_clean(), "the server is alive and clean");
    unlink(status_path);
    th_server_stop();

    th_say("SM groups the GPU does not have");
    const char *args2[] = {"--sm-groups", "0,16", NULL}; /* 132 SMs: groups 0..15 of 8 */
    th_server_start_args(bin, NULL, args2);
    fd = th_connect();
    CHECK_GE(fd, 0, "HELLO answers CUDA_ERROR_NO_DEVICE");
    CHECK_EQ(hello_result(fd), T_NO_DEVICE, "HELLO answers CUDA_ERROR_NO_DEVICE");
    close(fd);
    CHECK(th_server_log_has("SM groups"), "and the server says why");
    th_server_stop();

    th_say("a fake GPU of 64 SMs, groups of 16");
    const char *args3[] = {"--sm-groups", "2,3", "--sm-granularity", "16", NULL};
    th_server_start_args(bin, "FLYT_HOST_BACKEND_SMS=64", args3);
    fd = th_connect();
    CHECK_GE(fd, 0, "HELLO");
    CHECK_EQ(th_hello(fd), 0, "HELLO");
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_ATTR, &da, sizeof da, NULL, 0, &v, sizeof v), 0,
             "MULTIPROCESSOR_COUNT = %d", v.value);
    CHECK_EQ(v.value, 32, "MULTIPROCESSOR_COUNT = %d", v.value);
    mem_info(fd, &fr, &tot);
    CHECK_EQ(tot, 1ull << 30, "no quota: the backend's memory (%llu)", (unsigned long long)tot);
    close(fd);
    th_server_stop();

    th_passed();
    printf("all share checks passed\n");
    return 0;
}

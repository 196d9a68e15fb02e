/*
 * A session that moves under a running driver-API program (issue 10): the
 * program allocates, copies data in, issues pipelined copies and memsets,
 * then has its session checkpointed and stopped (status page + SIGURG with
 * FLYT_CKPT_STOP, as the node manager posts it) while it keeps issuing more;
 * its next synchronising call blocks until run_reconnect.sh has started
 * flyt-server --restore on the same endpoint, and then succeeds: same
 * pointers, every byte right, no error.
 *
 * usage: test_reconnect resume|deadline   (FLYT_TEST_STATUS: the server's
 * status page; FLYT_TEST_STATE: where the checkpoint goes). deadline: no
 * server comes back, so the call fails with CUDA_ERROR_DEVICE_UNAVAILABLE
 * once FLYT_RECONNECT_TIMEOUT_S has passed. With FLYT_TEST_SESSION_KEY (the
 * key file of a managed server) and FLYT_TEST_SESSION_ID, the program makes
 * its session token, which the reconnect presents again (AUTH).
 *
 * Pinned host memory (cuMemHostAlloc without and with DEVICEMAP), shared
 * with the server on one machine, is used around the move too
 * (docs/host-memory.md): FLYT_TEST_REGIONS=same (the default) wants its
 * copies to give the right bytes after the move (the client shared the
 * memory again with the restored server, before replaying the copies from
 * it that were not consumed); =lost (restored on a server reached over
 * TCP) wants copies through it to fail with CUDA_ERROR_NOT_MAPPED while
 * device memory still works.
 *
 * CUDA graphs cross the move too (docs/state-format.md, "CUDA graphs"): one
 * built node by node (memset, copy, host function) and one captured from
 * the stream (memset, host function) whose graph is destroyed once
 * instantiated, as PyTorch does; after the move both execs launch with the
 * same effects and the built graph's node handle still answers.
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "ckpt_request.h"
#include "flyt_server_status.h"
#include "flyt_token.h"

#define CU_OK(call) CHECK_EQ((call), CUDA_SUCCESS, "%s", #call)

#define BIG   ((size_t)(1u << 20) + 13) /* copied in whole, before */
#define SETS  (64 * 1024)                /* memset in pieces, around the stop */
#define PIPED (3 * 4096 + 100)           /* copied in pieces, around the stop */
#define ROUNDS 400                       /* pipelined operations on each side of the stop */

static unsigned char big_byte(size_t i) { return (unsigned char)(i * 31u + (i >> 9)); }

/* What the memsets and piece copies leave: piece i of each gets value i. */
static size_t set_piece(int i) { return (size_t)i * (SETS / (2 * ROUNDS)); }
static size_t piped_piece(int i) { return (size_t)i * (PIPED / (2 * ROUNDS)); }

/* Host functions among the pipelined work: each must run once, in order. */
#define HOST_FUNC_EVERY 50
static int host_funcs_run, host_funcs_in_order = 1;

static void host_func(void *arg)
{
    int i = (int)(intptr_t)arg;
    host_funcs_in_order &= i == host_funcs_run * HOST_FUNC_EVERY;
    host_funcs_run++;
}

static void pipeline(CUstream s, CUdeviceptr sets, CUdeviceptr piped, int from, int to)
{
    for (int i = from; i < to; i++) {
        if (i % HOST_FUNC_EVERY == 0)
            CU_OK(cuLaunchHostFunc(s, host_func, (void *)(intptr_t)i));
        size_t n = SETS / (2 * ROUNDS);
        CU_OK(cuMemsetD8Async(sets + set_piece(i), (unsigned char)(i + 1), n, s));
        size_t m = PIPED / (2 * ROUNDS);
        unsigned char *host = malloc(m);
        memset(host, (unsigned char)(0x80 ^ i), m);
        CU_OK(cuMemcpyHtoDAsync(piped + piped_piece(i), host, m, s));
        memset(host, 0xee, m); /* the copy took the bytes when it was called */
        free(host);
    }
}

static void check_contents(CUdeviceptr big, CUdeviceptr sets, CUdeviceptr piped)
{
    unsigned char *got = malloc(BIG);
    CU_OK(cuMemcpyDtoH(got, big, BIG));
    size_t bad = BIG;
    for (size_t i = 0; i < BIG && bad == BIG; i++)
        if (got[i] != big_byte(i))
            bad = i;
    CHECK_EQ(bad, BIG, "the buffer copied in before the move is intact (first bad byte %zu)", bad);
    CU_OK(cuMemcpyDtoH(got, sets, SETS));
    for (int i = 0; i < 2 * ROUNDS; i++)
        for (size_t k = set_piece(i); k < set_piece(i + 1); k++)
            if (got[k] != (unsigned char)(i + 1))
                CHECK_EQ(got[k], (unsigned char)(i + 1), "memset %d: byte %zu", i, k);
    CU_OK(cuMemcpyDtoH(got, piped, PIPED));
    for (int i = 0; i < 2 * ROUNDS; i++)
        for (size_t k = piped_piece(i); k < piped_piece(i + 1); k++)
            if (got[k] != (unsigned char)(0x80 ^ i))
                CHECK_EQ(got[k], (unsigned char)(0x80 ^ i), "copy %d: byte %zu", i, k);
    CHECK(1, "every memset and copy issued around the move landed (%d of each)", 2 * ROUNDS);
    free(got);
}

/* ---- pinned host memory around the move ---- */

#define PINNED (2 * 4096 + 5)
/* ---- graphs across the move ---- */

#define GSIZE 4096
static CUdeviceptr gbuf; /* [0] memset by the built graph, [1] its copy of [0], [2] the captured memset */
static CUgraph built;
static CUgraphNode built_set;
static CUgraphExec built_exec, captured_exec;
static int graph_host_runs;

static void graph_host_func(void *arg)
{
    (void)arg;
    graph_host_runs++;
}

static void graphs_launch(CUstream s)
{
    graph_host_runs = 0;
    CU_OK(cuMemsetD8(gbuf, 0, 3 * GSIZE));
    CU_OK(cuGraphLaunch(built_exec, s));
    CU_OK(cuGraphLaunch(captured_exec, s));
    CU_OK(cuStreamSynchronize(s));
    unsigned char got[3 * GSIZE];
    CU_OK(cuMemcpyDtoH(got, gbuf, sizeof got));
    int ok = 1;
    for (size_t i = 0; i < sizeof got; i++)
        ok &= got[i] == (i < 2 * GSIZE ? 0x21 : 0x43);
    CHECK(ok, "the graphs' memsets and copy wrote what they say");
    CHECK_EQ(graph_host_runs, 2, "both graphs' host functions ran");
}

static void graphs_setup(CUcontext ctx, CUstream s)
{
    CU_OK(cuMemAlloc(&gbuf, 3 * GSIZE));
    CU_OK(cuGraphCreate(&built, 0));
    CUDA_MEMSET_NODE_PARAMS m = {.dst = gbuf, .value = 0x21, .elementSize = 1, .width = GSIZE, .height = 1};
    CU_OK(cuGraphAddMemsetNode(&built_set, built, NULL, 0, &m, ctx));
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = gbuf, c.dstDevice = gbuf + GSIZE;
    c.WidthInBytes = GSIZE, c.Height = 1, c.Depth = 1;
    CUgraphNode copy, host;
    CU_OK(cuGraphAddMemcpyNode(&copy, built, &built_set, 1, &c, ctx));
    CUDA_HOST_NODE_PARAMS h = {graph_host_func, NULL};
    CU_OK(cuGraphAddHostNode(&host, built, &copy, 1, &h));
    CU_OK(cuGraphInstantiate(&built_exec, built, 0));
    CUgraph captured;
    CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_OK(cuMemsetD8Async(gbuf + 2 * GSIZE, 0x43, GSIZE, s));
    CU_OK(cuLaunchHostFunc(s, graph_host_func, NULL));
    CU_OK(cuStreamEndCapture(s, &captured));
    CU_OK(cuGraphInstantiate(&captured_exec, captured, 0));
    CU_OK(cuGraphDestroy(captured));
    graphs_launch(s);
}

static void graphs_after_move(CUstream s)
{
    graphs_launch(s);
    CUDA_MEMSET_NODE_PARAMS m;
    memset(&m, 0, sizeof m);
    CU_OK(cuGraphMemsetNodeGetParams(built_set, &m));
    CHECK(m.dst == gbuf && m.value == 0x21 && m.width == GSIZE, "the built graph's node handle answers");
    CU_OK(cuGraphExecDestroy(built_exec));
    CU_OK(cuGraphExecDestroy(captured_exec));
    CU_OK(cuGraphDestroy(built));
    CU_OK(cuMemFree(gbuf));
}

static unsigned char *pinned[2]; /* cuMemHostAlloc flags 0, DEVICEMAP */
static CUdeviceptr pinned_dev;    /* where copies from them land */

static unsigned char pinned_byte(int k, size_t i, int round) { return (unsigned char)(i * 7u + 50u * k + round); }

static void pinned_fill(int round)
{
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < PINNED; i++)
            pinned[k][i] = pinned_byte(k, i, round);
}

static void pinned_setup(void)
{
    CU_OK(cuMemHostAlloc((void **)&pinned[0], PINNED, 0));
    CU_OK(cuMemHostAlloc((void **)&pinned[1], PINNED, CU_MEMHOSTALLOC_DEVICEMAP));
    CU_OK(cuMemAlloc(&pinned_dev, 2 * PINNED));
    pinned_fill(0);
    for (int k = 0; k < 2; k++)
        CU_OK(cuMemcpyHtoD(pinned_dev + (size_t)k * PINNED, pinned[k], PINNED));
}

/* Copies from the pinned buffers issued after the checkpoint request: the
 * restored server may get them in the replay, after the client shared the
 * memory again. The buffers are not touched until a synchronisation. */
static void pinned_pipeline(CUstream s)
{
    for (int k = 0; k < 2; k++)
        CU_OK(cuMemcpyHtoDAsync(pinned_dev + (size_t)k * PINNED, pinned[k], PINNED, s));
}

static void pinned_check_after_move(int lost)
{
    unsigned char *got = malloc(PINNED);
    if (lost) {
        pinned_fill(2);
        CHECK_EQ(cuMemcpyHtoD(pinned_dev, pinned[0], PINNED), CUDA_ERROR_NOT_MAPPED,
                 "a copy from pinned memory the restored server cannot share fails");
        CHECK_EQ(cuMemcpyDtoH(pinned[1], pinned_dev, PINNED), CUDA_ERROR_NOT_MAPPED,
                 "and one into it");
        CU_OK(cuMemcpyDtoH(got, pinned_dev, PINNED));
        CHECK_EQ(got[PINNED - 1], pinned_byte(0, PINNED - 1, 0), "device memory still serves");
        free(got);
        return;
    }
    for (int k = 0; k < 2; k++) {
        CU_OK(cuMemcpyDtoH(got, pinned_dev + (size_t)k * PINNED, PINNED));
        size_t bad = PINNED;
        for (size_t i = 0; i < PINNED && bad == PINNED; i++)
            if (got[i] != pinned_byte(k, i, 0))
                bad = i;
        CHECK_EQ(bad, PINNED, "pinned buffer %d copied in around the move (first bad byte %zu)", k, bad);
    }
    pinned_fill(1); /* written after the move: the server reads the client's memory itself */
    for (int k = 0; k < 2; k++)
        CU_OK(cuMemcpyHtoD(pinned_dev + (size_t)k * PINNED, pinned[k], PINNED));
    CU_OK(cuMemcpyDtoH(pinned[0], pinned_dev + PINNED, PINNED)); /* buffer 1's bytes into 0 */
    size_t bad = PINNED;
    for (size_t i = 0; i < PINNED && bad == PINNED; i++)
        if (pinned[0][i] != pinned_byte(1, i, 1))
            bad = i;
    CHECK_EQ(bad, PINNED, "copies to and from pinned memory after the move (first bad byte %zu)", bad);
    for (int k = 0; k < 2; k++)
        CU_OK(cuMemFreeHost(pinned[k]));
    CU_OK(cuMemFree(pinned_dev));
    free(got);
}

/* A managed server's session token, made as the node manager makes it. */
static void token_from_key(void)
{
    const char *key_path = getenv("FLYT_TEST_SESSION_KEY"), *sid = getenv("FLYT_TEST_SESSION_ID");
    if (!key_path || !sid)
        return;
    char hex[160] = "";
    FILE *f = fopen(key_path, "r");
    CHECK(f && fgets(hex, sizeof hex, f), "session key %s read", key_path);
    fclose(f);
    hex[strcspn(hex, "\n")] = '\0';
    unsigned char key[64];
    size_t klen = 0;
    CHECK_EQ(flyt_hex_decode(hex, key, sizeof key, &klen), 0, "session key decodes");
    char token[256];
    CHECK_EQ(flyt_session_token_make(key, klen, sid, (long long)time(NULL) + 3600, token, sizeof token),
             0, "session token made");
    setenv("FLYT_SESSION_TOKEN", token, 1);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *status = getenv("FLYT_TEST_STATUS"), *state = getenv("FLYT_TEST_STATE");
    if (argc != 2 || !status || !state) {
        fprintf(stderr, "usage: FLYT_TEST_STATUS=P FLYT_TEST_STATE=P %s resume|deadline\n", argv[0]);
        return 2;
    }
    int resume = strcmp(argv[1], "resume") == 0;
    const char *regions = getenv("FLYT_TEST_REGIONS");
    int lost = regions && strcmp(regions, "lost") == 0;
    token_from_key();
    CUdevice dev;
    CUcontext ctx;
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGet(&dev, 0));
    CU_OK(cuCtxCreate(&ctx, NULL, 0, dev));
    CUdeviceptr big, sets, piped;
    CU_OK(cuMemAlloc(&big, BIG));
    CU_OK(cuMemAlloc(&sets, SETS));
    CU_OK(cuMemAlloc(&piped, PIPED));
    unsigned char *host = malloc(BIG);
    for (size_t i = 0; i < BIG; i++)
        host[i] = big_byte(i);
    CU_OK(cuMemcpyHtoD(big, host, BIG));
    free(host);
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    if (resume) {
        pinned_setup();
        graphs_setup(ctx, s);
    }
    pipeline(s, sets, piped, 0, ROUNDS);
    /* the server stops at its next request boundary; FLYT_TEST_SUSPEND: as a preemption */
    const char *suspend = getenv("FLYT_TEST_SUSPEND");
    ckpt_post(status, state, FLYT_CKPT_STOP | (suspend && *suspend == '1' ? FLYT_CKPT_SUSPEND : 0));
    if (resume && !lost)
        pinned_pipeline(s);
    pipeline(s, sets, piped, ROUNDS, 2 * ROUNDS);
    double t0 = now_s();
    CUresult r = cuStreamSynchronize(s);
    double waited = now_s() - t0;
    if (!resume) {
        CHECK_EQ(r, CUDA_ERROR_DEVICE_UNAVAILABLE, "no server resumed the session: the call "
                 "fails as with a lost server, after %.1f s", waited);
        CHECK_EQ(cuMemAlloc(&big, 16), CUDA_ERROR_DEVICE_UNAVAILABLE, "and so do later calls");
        printf("test_reconnect deadline: all checks passed\n");
        return 0;
    }
    CHECK_EQ(r, CUDA_SUCCESS, "the synchronisation after the move succeeds (blocked %.1f s)", waited);
    CHECK_EQ(host_funcs_run, 2 * ROUNDS / HOST_FUNC_EVERY, "every host function ran once");
    CHECK(host_funcs_in_order, "in stream order");
    check_contents(big, sets, piped);
    pinned_check_after_move(lost);
    graphs_after_move(s);
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OK(cuMemGetAddressRange(&base, &size, big + 100));
    CHECK(base == big && size == BIG, "the restored server knows the same pointer and size");
    CUdeviceptr fresh;
    CU_OK(cuMemAlloc(&fresh, 4096));
    CHECK(fresh + 4096 <= big || fresh >= big + BIG, "a new allocation is clear of the old ones");
    CU_OK(cuMemsetD8(fresh, 7, 4096));
    CU_OK(cuMemFree(fresh));
    CU_OK(cuMemFree(big));
    CU_OK(cuStreamDestroy(s));
    CU_OK(cuCtxDestroy(ctx));
    printf("test_reconnect: all checks passed\n");
    return 0;
}

// launch_pdl: the launch attributes newer code (CUTLASS, FlashAttention,
// cuBLAS's own kernels) puts on cudaLaunchKernelEx:
//   - programmatic dependent launch: a secondary kernel launched with
//     ProgrammaticStreamSerialization starts before its primary ends and
//     waits in cudaGridDependencySynchronize for the primary's trigger; in a
//     stream, and captured into a graph (programmatic edges) replayed 3 times;
//   - ProgrammaticEvent and LaunchCompletionEvent: events recorded by a launch,
//     waited on by another stream;
//   - Priority, MemSyncDomain and MemSyncDomainMap attributes on a launch,
//     an L2 access-policy window on a launch and on a stream (read back), the
//     persisting-L2 limit set and read back, cudaCtxResetPersistingL2Cache;
//   - a stream's launches keep their order around all of these.
// Prints results and values read back only.
#include <string.h>
#include "test_util.h"

#define N (1 << 20)

// Writes out[i] = i + base, then lets the dependent grid go.
__global__ void primary(int *out, int base)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N)
        out[i] = i + base;
#if __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}

// Waits for the primary grid's memory, then doubles what it wrote.
__global__ void secondary(const int *in, int *out)
{
#if __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N)
        out[i] = 2 * in[i];
}

__global__ void add_one(int *data)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N)
        data[i] += 1;
}

static long long checksum(const int *d)
{
    static int h[N];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    long long s = 0;
    for (int i = 0; i < N; i++)
        s += h[i];
    return s;
}

static long long expected_doubled(int base)
{
    long long s = 0;
    for (int i = 0; i < N; i++)
        s += 2LL * (i + base);
    return s;
}

static cudaLaunchConfig_t config(cudaStream_t s, cudaLaunchAttribute *attrs, int n)
{
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(N / 256);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cfg.attrs = attrs;
    cfg.numAttrs = n;
    return cfg;
}

// primary then secondary (PDL) on stream s, from base
static void pdl_pair(cudaStream_t s, int *a, int *b, int base)
{
    cudaLaunchConfig_t plain = config(s, NULL, 0);
    CHECK(cudaLaunchKernelEx(&plain, primary, a, base));
    cudaLaunchAttribute pdl[1];
    pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t dep = config(s, pdl, 1);
    CHECK(cudaLaunchKernelEx(&dep, secondary, (const int *)a, b));
}

static void stream_pdl(int *a, int *b)
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int ok = 1;
    for (int round = 0; round < 5; round++) {
        pdl_pair(s, a, b, round * 7);
        CHECK(cudaStreamSynchronize(s));
        ok = ok && checksum(b) == expected_doubled(round * 7);
    }
    expect(ok, "programmatic dependent launch in a stream: 5 rounds, secondary saw the primary's writes");
    CHECK(cudaStreamDestroy(s));
}

static void graph_pdl(int *a, int *b)
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    pdl_pair(s, a, b, 100);
    add_one<<<N / 256, 256, 0, s>>>(b);
    CHECK(cudaStreamEndCapture(s, &g));
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &nodes));
    size_t edges = 0;
    CHECK(cudaGraphGetEdges(g, NULL, NULL, NULL, &edges));
    printf("captured graph: %zu nodes, %zu edges\n", nodes, edges);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        ok = ok && checksum(b) == expected_doubled(100) + N;
    }
    expect(ok, "programmatic dependent launch captured in a graph, replayed 3 times");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
}

static void launch_events(int *a, int *b)
{
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t prog, done;
    CHECK(cudaEventCreateWithFlags(&prog, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));

    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticEvent;
    at[0].val.programmaticEvent.event = prog;
    at[0].val.programmaticEvent.triggerAtBlockStart = 0;
    at[0].val.programmaticEvent.flags = 0;
    cudaLaunchConfig_t cfg = config(s1, at, 1);
    CHECK(cudaLaunchKernelEx(&cfg, primary, a, 3));
    // the event fires when every block triggered: the primary's writes are
    // visible to a kernel that waits for it with a grid dependency sync only,
    // so the waiting stream synchronizes on the whole stream afterwards
    CHECK(cudaStreamWaitEvent(s2, prog, 0));
    CHECK(cudaStreamSynchronize(s1));
    secondary<<<N / 256, 256, 0, s2>>>(a, b);
    CHECK(cudaStreamSynchronize(s2));
    expect(checksum(b) == expected_doubled(3), "programmatic event waited on by another stream");

    at[0].id = cudaLaunchAttributeLaunchCompletionEvent;
    at[0].val.launchCompletionEvent.event = done;
    at[0].val.launchCompletionEvent.flags = 0;
    cfg = config(s1, at, 1);
    CHECK(cudaLaunchKernelEx(&cfg, primary, a, 5));
    CHECK(cudaEventSynchronize(done));
    CHECK(cudaStreamSynchronize(s1));
    secondary<<<N / 256, 256, 0, s2>>>(a, b);
    CHECK(cudaStreamSynchronize(s2));
    expect(checksum(b) == expected_doubled(5), "launch completion event synchronized");

    CHECK(cudaEventDestroy(prog));
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
}

static void other_attributes(int *a, int *b)
{
    int lo = 0, hi = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    cudaLaunchAttribute at[3];
    at[0].id = cudaLaunchAttributePriority;
    at[0].val.priority = hi;
    at[1].id = cudaLaunchAttributeMemSyncDomain;
    at[1].val.memSyncDomain = cudaLaunchMemSyncDomainRemote;
    at[2].id = cudaLaunchAttributeMemSyncDomainMap;
    at[2].val.memSyncDomainMap.default_ = 0;
    at[2].val.memSyncDomainMap.remote = 1;
    cudaLaunchConfig_t cfg = config(s, at, 3);
    CHECK(cudaLaunchKernelEx(&cfg, primary, a, 11));
    secondary<<<N / 256, 256, 0, s>>>(a, b);
    CHECK(cudaStreamSynchronize(s));
    expect(checksum(b) == expected_doubled(11), "priority and memory-sync-domain launch attributes");

    int l2 = 0, persist_max = 0;
    CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    CHECK(cudaDeviceGetAttribute(&persist_max, cudaDevAttrMaxPersistingL2CacheSize, 0));
    printf("persisting L2 maximum is positive and at most the L2 size: %s\n",
           persist_max > 0 && persist_max <= l2 ? "yes" : "no");
    size_t want = (size_t)persist_max / 2, got = 0;
    CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, want));
    CHECK(cudaDeviceGetLimit(&got, cudaLimitPersistingL2CacheSize));
    printf("persisting L2 limit set to half the maximum, read back within [half - 1 MiB, max]: %s\n",
           got + (1 << 20) >= want && got <= (size_t)persist_max ? "yes" : "no");

    int window_max = 0;
    CHECK(cudaDeviceGetAttribute(&window_max, cudaDevAttrMaxAccessPolicyWindowSize, 0));
    size_t bytes = (size_t)N * sizeof(int) < (size_t)window_max ? (size_t)N * sizeof(int) : (size_t)window_max;
    cudaStreamAttrValue sv;
    memset(&sv, 0, sizeof sv);
    sv.accessPolicyWindow.base_ptr = a;
    sv.accessPolicyWindow.num_bytes = bytes;
    sv.accessPolicyWindow.hitRatio = 0.5f;
    sv.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    sv.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &sv));
    cudaStreamAttrValue back;
    memset(&back, 0, sizeof back);
    CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &back));
    printf("stream access-policy window read back: same base %s, same size %s, hit ratio %.2f, "
           "hit %d, miss %d\n",
           back.accessPolicyWindow.base_ptr == (void *)a ? "yes" : "no",
           back.accessPolicyWindow.num_bytes == bytes ? "yes" : "no",
           back.accessPolicyWindow.hitRatio, (int)back.accessPolicyWindow.hitProp,
           (int)back.accessPolicyWindow.missProp);

    cudaLaunchAttribute win[1];
    win[0].id = cudaLaunchAttributeAccessPolicyWindow;
    win[0].val.accessPolicyWindow = sv.accessPolicyWindow;
    cfg = config(s, win, 1);
    CHECK(cudaLaunchKernelEx(&cfg, primary, a, 13));
    secondary<<<N / 256, 256, 0, s>>>(a, b);
    CHECK(cudaStreamSynchronize(s));
    expect(checksum(b) == expected_doubled(13), "launches under an L2 access-policy window");

    sv.accessPolicyWindow.num_bytes = 0; // take the window off, then let the lines go
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &sv));
    CHECK(cudaCtxResetPersistingL2Cache());
    CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0));
    CHECK(cudaDeviceGetLimit(&got, cudaLimitPersistingL2CacheSize));
    printf("persisting L2 limit after reset to 0: %zu\n", got);
    add_one<<<N / 256, 256, 0, s>>>(b);
    CHECK(cudaStreamSynchronize(s));
    expect(checksum(b) == expected_doubled(13) + N, "stream order kept after the L2 reset");
    CHECK(cudaStreamDestroy(s));
}

int main(void)
{
    double t0 = now_s();
    int *a, *b;
    CHECK(cudaMalloc(&a, N * sizeof(int)));
    CHECK(cudaMalloc(&b, N * sizeof(int)));
    stream_pdl(a, b);
    graph_pdl(a, b);
    launch_events(a, b);
    other_attributes(a, b);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    fprintf(stderr, "launch_pdl: %.3f s\n", now_s() - t0);
    printf("%s launch_pdl\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}

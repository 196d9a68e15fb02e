// graphs_capture: CUDA graphs made by stream capture.  Captures kernels, a
// device-to-device memcpy, a memset, a host function and event records
// across two streams forked and joined by events; instantiates it and
// launches it several times with new input; updates the exec from a second
// capture of the same shape; clones, uploads; captures cudaMallocAsync /
// cudaFreeAsync (memory nodes); writes the dot text to a file; and checks
// the capture errors: a synchronization inside a capture, and invalidation.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test_util.h"

#define N 4096

__global__ void scale(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i];
}

__global__ void add_into(float *y, const float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += x[i];
}

static int host_runs;
static void CUDART_CB count_run(void *arg) { (*(int *)arg)++; }

struct bufs {
    float *in_host; // copied to in before each launch (host copies in a graph
                    // need memory the server shares: docs/graphs.md)
    float *in, *stage, *a, *b, *out;
    cudaStream_t s1, s2;
    cudaEvent_t fork, join, done;
};

// out = 2*in + (in scaled by `second`), b zeroed first by a memset
static cudaGraph_t capture(struct bufs *B, float second)
{
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(B->s1, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemcpyAsync(B->in, B->stage, N * sizeof(float), cudaMemcpyDeviceToDevice, B->s1));
    CHECK(cudaEventRecord(B->fork, B->s1));
    CHECK(cudaStreamWaitEvent(B->s2, B->fork, 0));
    CHECK(cudaMemsetAsync(B->b, 0, N * sizeof(float), B->s2));
    scale<<<N / 256, 256, 0, B->s2>>>(B->b, B->in, second, N);
    CHECK(cudaEventRecord(B->join, B->s2));
    scale<<<N / 256, 256, 0, B->s1>>>(B->a, B->in, 2.0f, N);
    CHECK(cudaStreamWaitEvent(B->s1, B->join, 0));
    add_into<<<N / 256, 256, 0, B->s1>>>(B->a, B->b, N);
    CHECK(cudaMemcpyAsync(B->out, B->a, N * sizeof(float), cudaMemcpyDeviceToDevice, B->s1));
    CHECK(cudaLaunchHostFunc(B->s1, count_run, &host_runs));
    CHECK(cudaEventRecordWithFlags(B->done, B->s1, cudaEventRecordExternal));
    CHECK(cudaStreamEndCapture(B->s1, &g));
    return g;
}

static int out_is(struct bufs *B, float factor)
{
    static float h[N];
    CHECK(cudaMemcpy(h, B->out, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        if (h[i] != factor * B->in_host[i])
            return 0;
    return 1;
}

static void fill_input(struct bufs *B, int round)
{
    for (int i = 0; i < N; i++)
        B->in_host[i] = (float)((i * 7 + round * 13) % 101);
}

int main(void)
{
    struct bufs B;
    CHECK(cudaMallocHost(&B.in_host, N * sizeof(float)));
    CHECK(cudaMalloc(&B.in, N * sizeof(float)));
    CHECK(cudaMalloc(&B.stage, N * sizeof(float)));
    CHECK(cudaMalloc(&B.a, N * sizeof(float)));
    CHECK(cudaMalloc(&B.b, N * sizeof(float)));
    CHECK(cudaMalloc(&B.out, N * sizeof(float)));
    CHECK(cudaStreamCreateWithFlags(&B.s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&B.s2, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&B.fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&B.join, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&B.done, cudaEventDisableTiming));

    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(B.s1, &st));
    expect(st == cudaStreamCaptureStatusNone, "no capture at first");

    cudaGraph_t g = capture(&B, 3.0f);
    size_t nodes = 0, roots = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &nodes));
    CHECK(cudaGraphGetRootNodes(g, NULL, &roots));
    printf("captured graph: %zu nodes, %zu root\n", nodes, roots);
    expect(host_runs == 0, "capturing runs nothing");

    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    int good = 1;
    for (int round = 0; round < 5; round++) {
        fill_input(&B, round); // the input changes between launches
        CHECK(cudaMemcpy(B.stage, B.in_host, N * sizeof(float), cudaMemcpyHostToDevice));
        CHECK(cudaGraphLaunch(x, B.s1));
        CHECK(cudaStreamSynchronize(B.s1));
        good = good && out_is(&B, 5.0f);
    }
    expect(good, "5 launches with new input each: out = 5 * in");
    printf("host function ran %d times\n", host_runs);
    expect(cudaEventQuery(B.done) == cudaSuccess, "the captured external event record completed");

    cudaGraph_t g2 = capture(&B, 10.0f);
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(x, g2, &info));
    expect(info.result == cudaGraphExecUpdateSuccess, "exec update from a graph of the same shape");
    CHECK(cudaGraphUpload(x, B.s1));
    CHECK(cudaGraphLaunch(x, B.s1));
    CHECK(cudaStreamSynchronize(B.s1));
    expect(out_is(&B, 12.0f), "the updated exec: out = 12 * in");

    cudaGraph_t clone;
    cudaGraphExec_t xc;
    CHECK(cudaGraphClone(&clone, g));
    // the upload flag needs the stream only the params form names
    printf("instantiate with the upload flag but no stream: %s\n",
           cudaGetErrorName(cudaGraphInstantiateWithFlags(&xc, clone, cudaGraphInstantiateFlagUpload)));
    cudaGraphInstantiateParams ip;
    memset(&ip, 0, sizeof ip);
    ip.flags = cudaGraphInstantiateFlagUpload;
    ip.uploadStream = B.s1;
    CHECK(cudaGraphInstantiateWithParams(&xc, clone, &ip));
    expect(ip.result_out == cudaGraphInstantiateSuccess, "the clone instantiated and uploaded");
    CHECK(cudaGraphLaunch(xc, B.s1));
    CHECK(cudaStreamSynchronize(B.s1));
    expect(out_is(&B, 5.0f), "the clone runs the original's work");

    // memory nodes: an allocation made and freed inside the graph
    cudaGraph_t gm;
    float *tmp = NULL;
    CHECK(cudaStreamBeginCapture(B.s1, cudaStreamCaptureModeGlobal));
    CHECK(cudaMallocAsync(&tmp, N * sizeof(float), B.s1));
    scale<<<N / 256, 256, 0, B.s1>>>(tmp, B.in, 4.0f, N);
    CHECK(cudaMemcpyAsync(B.out, tmp, N * sizeof(float), cudaMemcpyDeviceToDevice, B.s1));
    CHECK(cudaFreeAsync(tmp, B.s1));
    CHECK(cudaStreamEndCapture(B.s1, &gm));
    cudaGraphExec_t xm;
    CHECK(cudaGraphInstantiate(&xm, gm, 0));
    CHECK(cudaGraphLaunch(xm, B.s1));
    CHECK(cudaStreamSynchronize(B.s1));
    expect(out_is(&B, 4.0f), "a graph allocating, using and freeing its own memory");
    CHECK(cudaDeviceGraphMemTrim(0));

    char path[] = "/tmp/graphs_capture-dot-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0)
        close(fd);
    CHECK(cudaGraphDebugDotPrint(g, path, 0));
    FILE *f = fopen(path, "r");
    char line[256] = "";
    expect(f && fgets(line, sizeof line, f) && strncmp(line, "digraph", 7) == 0,
           "the dot text is in the named file");
    if (f)
        fclose(f);
    unlink(path);

    // errors: synchronizing inside a capture is unsupported and invalidates it
    CHECK(cudaStreamBeginCapture(B.s1, cudaStreamCaptureModeGlobal));
    scale<<<1, 32, 0, B.s1>>>(B.a, B.in, 1.0f, 32);
    cudaError_t e = cudaStreamSynchronize(B.s1);
    printf("sync inside a capture: %s\n", cudaGetErrorName(e));
    CHECK(cudaStreamIsCapturing(B.s1, &st));
    expect(st == cudaStreamCaptureStatusInvalidated, "the capture is invalidated");
    cudaGraph_t bad = NULL;
    e = cudaStreamEndCapture(B.s1, &bad);
    printf("end of an invalidated capture: %s, graph %s\n", cudaGetErrorName(e), bad ? "set" : "NULL");
    cudaGetLastError();

    CHECK(cudaGraphExecDestroy(xm));
    CHECK(cudaGraphExecDestroy(xc));
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(gm));
    CHECK(cudaGraphDestroy(clone));
    CHECK(cudaGraphDestroy(g2));
    CHECK(cudaGraphDestroy(g));
    printf("%s\n", failures ? "FAIL" : "PASS");
    /* leaves inside a capture (its server session must end cleanly) */
    cudaStream_t open_capture;
    CHECK(cudaStreamCreateWithFlags(&open_capture, cudaStreamNonBlocking));
    CHECK(cudaStreamBeginCapture(open_capture, cudaStreamCaptureModeRelaxed));
    return failures ? 1 : 0;
}

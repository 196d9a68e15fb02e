// graphs_explicit: a CUDA graph built node by node: kernel, memset, memcpy
// (device to device), host, event record and wait, a child graph,
// memory allocation and free nodes, extra dependencies; launched twice,
// results checked.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include "test_util.h"

#define N 2048

__global__ void axpb(float *y, const float *x, float a, float b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + b;
}

static int host_runs;
static void CUDART_CB count_run(void *arg) { (*(int *)arg)++; }

static cudaGraphNode_t kernel_node(cudaGraph_t g, const cudaGraphNode_t *deps, size_t n, float *y,
                                   float *x, float a, float b)
{
    int len = N;
    void *args[] = {&y, &x, &a, &b, &len};
    cudaKernelNodeParams p = {};
    p.func = (void *)axpb;
    p.gridDim = dim3(N / 256);
    p.blockDim = dim3(256);
    p.kernelParams = args;
    cudaGraphNode_t node;
    CHECK(cudaGraphAddKernelNode(&node, g, deps, n, &p));
    return node;
}

static cudaGraphNode_t copy_node(cudaGraph_t g, const cudaGraphNode_t *deps, size_t n, void *dst,
                                 const void *src, cudaMemcpyKind kind)
{
    cudaGraphNode_t node;
    CHECK(cudaGraphAddMemcpyNode1D(&node, g, deps, n, dst, src, N * sizeof(float), kind));
    return node;
}

int main(void)
{
    float *host, *in, *x, *y, *z, *out;
    CHECK(cudaMallocHost(&host, N * sizeof(float)));
    CHECK(cudaMalloc(&in, N * sizeof(float)));
    CHECK(cudaMalloc(&out, N * sizeof(float)));
    CHECK(cudaMalloc(&x, N * sizeof(float)));
    CHECK(cudaMalloc(&y, N * sizeof(float)));
    CHECK(cudaMalloc(&z, N * sizeof(float)));
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));

    // child: z = 3 * y + 1
    cudaGraph_t child;
    CHECK(cudaGraphCreate(&child, 0));
    kernel_node(child, NULL, 0, z, y, 3.0f, 1.0f);

    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t up = copy_node(g, NULL, 0, x, in, cudaMemcpyDeviceToDevice);
    cudaMemsetParams ms = {};
    ms.dst = y;
    ms.value = 0;
    ms.elementSize = 4;
    ms.width = N;
    ms.height = 1;
    cudaGraphNode_t clear;
    CHECK(cudaGraphAddMemsetNode(&clear, g, NULL, 0, &ms));
    cudaGraphNode_t deps2[2] = {up, clear};
    cudaGraphNode_t k1 = kernel_node(g, deps2, 2, y, x, 2.0f, 0.5f); // y = 2x + 0.5
    cudaGraphNode_t rec, wait, sub, host_node, down, empty;
    CHECK(cudaGraphAddEventRecordNode(&rec, g, &k1, 1, ev));
    CHECK(cudaGraphAddEventWaitNode(&wait, g, &rec, 1, ev));
    CHECK(cudaGraphAddChildGraphNode(&sub, g, &wait, 1, child));
    // scratch memory of the graph's own: z copied there and back
    cudaMemAllocNodeParams mp = {};
    mp.poolProps.allocType = cudaMemAllocationTypePinned;
    mp.poolProps.location.type = cudaMemLocationTypeDevice;
    mp.poolProps.location.id = 0;
    mp.bytesize = N * sizeof(float);
    cudaGraphNode_t alloc, free_node, tmp_in, tmp_out;
    CHECK(cudaGraphAddMemAllocNode(&alloc, g, &sub, 1, &mp));
    float *scratch = (float *)mp.dptr;
    tmp_in = copy_node(g, &alloc, 1, scratch, z, cudaMemcpyDeviceToDevice);
    tmp_out = copy_node(g, &tmp_in, 1, z, scratch, cudaMemcpyDeviceToDevice);
    CHECK(cudaGraphAddMemFreeNode(&free_node, g, &tmp_out, 1, scratch));
    down = copy_node(g, &free_node, 1, out, z, cudaMemcpyDeviceToDevice);
    cudaHostNodeParams hp = {count_run, &host_runs};
    CHECK(cudaGraphAddHostNode(&host_node, g, NULL, 0, &hp));
    CHECK(cudaGraphAddEmptyNode(&empty, g, NULL, 0));
    CHECK(cudaGraphAddDependencies(g, &down, &host_node, NULL, 1));
    CHECK(cudaGraphAddDependencies(g, &host_node, &empty, NULL, 1));

    size_t nodes = 0, edges = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &nodes));
    CHECK(cudaGraphGetEdges(g, NULL, NULL, NULL, &edges));
    printf("explicit graph: %zu nodes, %zu edges\n", nodes, edges);
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(sub, &type));
    expect(type == cudaGraphNodeTypeGraph, "a child graph node's type");

    cudaGraphExec_t xg;
    CHECK(cudaGraphInstantiate(&xg, g, 0));
    int good = 1;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++)
            host[i] = (float)(i % 97 + round);
        float want0 = 3.0f * (2.0f * host[0] + 0.5f) + 1.0f, want1 = 3.0f * (2.0f * host[N - 1] + 0.5f) + 1.0f;
        CHECK(cudaMemcpy(in, host, N * sizeof(float), cudaMemcpyHostToDevice));
        CHECK(cudaGraphLaunch(xg, 0));
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(host, out, N * sizeof(float), cudaMemcpyDeviceToHost));
        good = good && host[0] == want0 && host[N - 1] == want1;
    }
    expect(good, "two launches: host = 3 * (2 * in + 0.5) + 1");
    printf("host node ran %d times\n", host_runs);

    CHECK(cudaGraphExecDestroy(xg));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphDestroy(child));
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}

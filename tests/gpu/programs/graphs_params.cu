// graphs_params: one graph node's parameters read back and changed. Every
// node kind's getter and setter (kernel, memset, memcpy, host, event record
// and wait, child graph, memory alloc and free), kernel node attributes,
// dependencies and dependents, find in clone, destroy node, enable and
// disable in an exec, the per-node exec updates, the generic add and set
// calls, and the parameters of a kernel node a stream capture made.
// Results are exact; native and Flyt must print the same.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"

#define N 1024

__global__ void axpb(float *y, const float *x, float a, float b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + b;
}

static int runs_a, runs_b;
static void CUDART_CB count_run(void *arg) { (*(int *)arg)++; }

static float first(const float *d)
{
    float v = 0;
    CHECK(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

static float last(const float *d)
{
    float v = 0;
    CHECK(cudaMemcpy(&v, d + N - 1, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

static void run(cudaGraphExec_t x, cudaStream_t s)
{
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
}

int main(void)
{
    float *x, *y, *z, *w;
    CHECK(cudaMalloc(&x, N * sizeof(float)));
    CHECK(cudaMalloc(&y, N * sizeof(float)));
    CHECK(cudaMalloc(&z, N * sizeof(float)));
    CHECK(cudaMalloc(&w, N * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e1, e2;
    CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));

    // child graph: w = 1 (memset of 0x3f800000)
    cudaGraph_t child, g;
    CHECK(cudaGraphCreate(&child, 0));
    cudaMemsetParams cm = {};
    cm.dst = w, cm.value = 0x3f800000u, cm.elementSize = 4, cm.width = N, cm.height = 1;
    cudaGraphNode_t child_set;
    CHECK(cudaGraphAddMemsetNode(&child_set, child, NULL, 0, &cm));

    // x = 2; y = 3x + 1; z = y (copy); host; record e1; child; wait e1
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemsetParams m = {};
    m.dst = x, m.value = 0x40000000u /* 2.0f */, m.elementSize = 4, m.width = N, m.height = 1;
    cudaGraphNode_t set, kern, copy, host, rec, sub, wait;
    CHECK(cudaGraphAddMemsetNode(&set, g, NULL, 0, &m));
    float a = 3.0f, b = 1.0f;
    int len = N;
    void *args[] = {&y, &x, &a, &b, &len};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)axpb, kp.gridDim = dim3(N / 256), kp.blockDim = dim3(256), kp.kernelParams = args;
    CHECK(cudaGraphAddKernelNode(&kern, g, &set, 1, &kp));
    CHECK(cudaGraphAddMemcpyNode1D(&copy, g, &kern, 1, z, y, N * sizeof(float), cudaMemcpyDeviceToDevice));
    cudaHostNodeParams hp = {count_run, &runs_a};
    CHECK(cudaGraphAddHostNode(&host, g, &copy, 1, &hp));
    CHECK(cudaGraphAddEventRecordNode(&rec, g, &copy, 1, e1));
    CHECK(cudaGraphAddChildGraphNode(&sub, g, &rec, 1, child));
    CHECK(cudaGraphAddEventWaitNode(&wait, g, &sub, 1, e1));

    // ---- getters ----
    cudaKernelNodeParams kg = {};
    CHECK(cudaGraphKernelNodeGetParams(kern, &kg));
    expect(kg.func == (void *)axpb && kg.gridDim.x == N / 256 && kg.blockDim.x == 256 &&
               *(float **)kg.kernelParams[0] == y && *(float *)kg.kernelParams[2] == 3.0f &&
               *(int *)kg.kernelParams[4] == N,
           "kernel node parameters read back");
    cudaMemsetParams mg = {};
    CHECK(cudaGraphMemsetNodeGetParams(set, &mg));
    expect(mg.dst == x && mg.value == 0x40000000u && mg.elementSize == 4 && mg.width == N,
           "memset node parameters read back");
    cudaMemcpy3DParms cg = {};
    CHECK(cudaGraphMemcpyNodeGetParams(copy, &cg));
    expect(cg.srcPtr.ptr == y && cg.dstPtr.ptr == z && cg.extent.width == N * sizeof(float),
           "memcpy node parameters read back");
    cudaHostNodeParams hg = {};
    CHECK(cudaGraphHostNodeGetParams(host, &hg));
    expect(hg.fn == count_run && hg.userData == &runs_a, "host node parameters read back");
    cudaEvent_t eg = NULL;
    CHECK(cudaGraphEventRecordNodeGetEvent(rec, &eg));
    expect(eg == e1, "event record node's event");
    CHECK(cudaGraphEventWaitNodeGetEvent(wait, &eg));
    expect(eg == e1, "event wait node's event");
    cudaGraph_t owned = NULL;
    CHECK(cudaGraphChildGraphNodeGetGraph(sub, &owned));
    size_t n = 0;
    CHECK(cudaGraphGetNodes(owned, NULL, &n));
    expect(owned != NULL && owned != child && n == 1, "the child graph node's own graph");
    expect(cudaGraphMemsetNodeGetParams(copy, &mg) == cudaErrorInvalidValue,
           "a memset getter of a copy node fails");
    (void)cudaGetLastError();

    // ---- kernel node attributes ----
    cudaKernelNodeAttrValue av = {};
    av.priority = 0;
    CHECK(cudaGraphKernelNodeSetAttribute(kern, cudaKernelNodeAttributePriority, &av));
    cudaKernelNodeAttrValue ag = {};
    CHECK(cudaGraphKernelNodeGetAttribute(kern, cudaKernelNodeAttributePriority, &ag));
    expect(ag.priority == 0, "kernel node attribute set and read back");

    // ---- dependencies, dependents, clone, destroy ----
    cudaGraphNode_t list[4] = {};
    n = 4;
    CHECK(cudaGraphNodeGetDependencies(sub, list, NULL, &n));
    expect(n == 1 && list[0] == rec, "the child node depends on the record node");
    n = 0;
    CHECK(cudaGraphNodeGetDependentNodes(copy, NULL, NULL, &n));
    expect(n == 2, "the copy node has two dependents");
    cudaGraph_t clone;
    CHECK(cudaGraphClone(&clone, g));
    cudaGraphNode_t kclone = NULL;
    CHECK(cudaGraphNodeFindInClone(&kclone, kern, clone));
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(kclone, &type));
    expect(kclone != kern && type == cudaGraphNodeTypeKernel, "the kernel node found in the clone");
    cudaGraphNode_t extra;
    CHECK(cudaGraphAddEmptyNode(&extra, g, &wait, 1));
    CHECK(cudaGraphDestroyNode(extra));
    CHECK(cudaGraphGetNodes(g, NULL, &n));
    expect(n == 7, "seven nodes after destroying the added one");

    // ---- setters in the graph: x = 4, y = 3x + 1 = 13 ----
    m.value = 0x40800000u; // 4.0f
    CHECK(cudaGraphMemsetNodeSetParams(set, &m));
    CHECK(cudaGraphEventRecordNodeSetEvent(rec, e2));
    CHECK(cudaGraphEventWaitNodeSetEvent(wait, e2));
    cudaHostNodeParams hp2 = {count_run, &runs_b};
    CHECK(cudaGraphHostNodeSetParams(host, &hp2));
    cudaGraphExec_t ex;
    CHECK(cudaGraphInstantiate(&ex, g, 0));
    run(ex, s);
    expect(first(y) == 13.0f && last(z) == 13.0f && first(w) == 1.0f && runs_b == 1 && runs_a == 0,
           "the graph's new parameters ran");

    // ---- per-node exec updates: y = 5x + 2 from x = 4 -> 22; copy half ----
    float a2 = 5.0f, b2 = 2.0f;
    void *args2[] = {&y, &x, &a2, &b2, &len};
    kp.kernelParams = args2;
    CHECK(cudaGraphExecKernelNodeSetParams(ex, kern, &kp));
    CHECK(cudaMemset(z, 0, N * sizeof(float)));
    CHECK(cudaGraphExecMemcpyNodeSetParams1D(ex, copy, z, y, N / 2 * sizeof(float),
                                             cudaMemcpyDeviceToDevice));
    CHECK(cudaGraphExecHostNodeSetParams(ex, host, &hp));
    CHECK(cudaGraphExecEventRecordNodeSetEvent(ex, rec, e1));
    CHECK(cudaGraphExecEventWaitNodeSetEvent(ex, wait, e1));
    cudaGraph_t child2;
    CHECK(cudaGraphCreate(&child2, 0));
    cm.value = 0x40400000u; // 3.0f
    cudaGraphNode_t child2_set;
    CHECK(cudaGraphAddMemsetNode(&child2_set, child2, NULL, 0, &cm));
    CHECK(cudaGraphExecChildGraphNodeSetParams(ex, sub, child2));
    run(ex, s);
    expect(first(y) == 22.0f && first(z) == 22.0f && last(z) == 0.0f && first(w) == 3.0f &&
               runs_a == 1 && runs_b == 1,
           "the exec's new kernel, copy, host and child parameters ran");
    CHECK(cudaGraphKernelNodeGetParams(kern, &kg));
    expect(*(float *)kg.kernelParams[2] == 3.0f, "the graph keeps its own kernel parameters");

    // ---- enable and disable the kernel node in the exec ----
    CHECK(cudaGraphExecMemsetNodeSetParams(ex, set, &m));
    unsigned enabled = 0;
    CHECK(cudaGraphNodeSetEnabled(ex, kern, 0));
    CHECK(cudaGraphNodeGetEnabled(ex, kern, &enabled));
    CHECK(cudaMemset(y, 0, N * sizeof(float)));
    run(ex, s);
    expect(enabled == 0 && first(y) == 0.0f, "a disabled kernel node does not run");
    CHECK(cudaGraphNodeSetEnabled(ex, kern, 1));
    CHECK(cudaGraphNodeGetEnabled(ex, kern, &enabled));
    run(ex, s);
    expect(enabled == 1 && first(y) == 22.0f, "enabled again, it runs");

    // ---- generic add and set ----
    cudaGraphNodeParams np = {};
    np.type = cudaGraphNodeTypeMemset;
    np.memset.dst = w, np.memset.value = 0x40e00000u /* 7.0f */, np.memset.elementSize = 4;
    np.memset.width = N, np.memset.height = 1;
    cudaGraphNode_t gen;
    CHECK(cudaGraphAddNode(&gen, g, &wait, NULL, 1, &np));
    np.memset.value = 0x41000000u; // 8.0f
    CHECK(cudaGraphNodeSetParams(gen, &np));
    CHECK(cudaGraphMemsetNodeGetParams(gen, &mg));
    expect(mg.value == 0x41000000u, "cudaGraphAddNode then cudaGraphNodeSetParams");
    cudaGraphExec_t ex2;
    CHECK(cudaGraphInstantiate(&ex2, g, 0));
    np.memset.value = 0x41100000u; // 9.0f
    CHECK(cudaGraphExecNodeSetParams(ex2, gen, &np));
    run(ex2, s);
    expect(last(w) == 9.0f, "cudaGraphExecNodeSetParams's memset ran");

    // ---- memory nodes ----
    cudaGraph_t mg_graph;
    CHECK(cudaGraphCreate(&mg_graph, 0));
    cudaMemAllocNodeParams ap = {};
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = N * sizeof(float);
    cudaGraphNode_t alloc, freed;
    CHECK(cudaGraphAddMemAllocNode(&alloc, mg_graph, NULL, 0, &ap));
    CHECK(cudaGraphAddMemFreeNode(&freed, mg_graph, &alloc, 1, ap.dptr));
    cudaMemAllocNodeParams apg = {};
    CHECK(cudaGraphMemAllocNodeGetParams(alloc, &apg));
    void *fptr = NULL;
    CHECK(cudaGraphMemFreeNodeGetParams(freed, &fptr));
    expect(apg.bytesize == N * sizeof(float) && apg.dptr == ap.dptr && fptr == ap.dptr,
           "memory alloc and free nodes read back");

    // ---- a captured kernel node ----
    cudaGraph_t cap;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    axpb<<<N / 256, 256, 0, s>>>(z, x, 2.0f, 0.5f, N);
    CHECK(cudaStreamEndCapture(s, &cap));
    cudaGraphNode_t cn[2];
    n = 2;
    CHECK(cudaGraphGetNodes(cap, cn, &n));
    CHECK(cudaGraphKernelNodeGetParams(cn[0], &kg));
    expect(n == 1 && kg.func == (void *)axpb && *(float **)kg.kernelParams[0] == z &&
               *(float *)kg.kernelParams[2] == 2.0f && *(float *)kg.kernelParams[3] == 0.5f,
           "a captured kernel node's parameters");
    *(float *)kg.kernelParams[3] = 1.5f;
    CHECK(cudaGraphKernelNodeSetParams(cn[0], &kg));
    cudaGraphExec_t ex3;
    CHECK(cudaGraphInstantiate(&ex3, cap, 0));
    run(ex3, s);
    expect(first(z) == 9.5f, "the captured kernel with a parameter changed");

    CHECK(cudaGraphExecDestroy(ex3));
    CHECK(cudaGraphExecDestroy(ex2));
    CHECK(cudaGraphExecDestroy(ex));
    CHECK(cudaGraphDestroy(cap));
    CHECK(cudaGraphDestroy(mg_graph));
    CHECK(cudaGraphDestroy(clone));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphDestroy(child2));
    CHECK(cudaGraphDestroy(child));
    printf("%s\n", failures ? "graphs_params: FAILED" : "graphs_params: all checks passed");
    return failures ? 1 : 0;
}

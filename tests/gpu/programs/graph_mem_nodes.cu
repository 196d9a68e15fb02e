/* Graph memory nodes built by hand: an allocation node, kernels on the
 * pointer it returns, a device copy out and a free node, replayed; graph
 * memory attributes (printed only as comparisons) and a trim; allocations
 * that outlive the graph (instantiated with AutoFreeOnLaunch, or freed by
 * cudaFreeAsync / cudaFree after the launch), and the error of relaunching
 * a graph whose allocation was not freed. */
#include <cuda_runtime.h>

#include <string.h>

#include "test_util.h"

#define N (1 << 16)
#define BYTES (N * sizeof(int))

__global__ void fill(int *v, int n, const int *round)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] = i + *round * 1000;
}

__global__ void twice_plus(int *v, int n, int add)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] = 2 * v[i] + add;
}

static cudaMemAllocNodeParams alloc_params(size_t bytes)
{
    cudaMemAllocNodeParams p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = cudaMemAllocationTypePinned;
    p.poolProps.location.type = cudaMemLocationTypeDevice;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    return p;
}

static cudaGraphNode_t add_kernel(cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps,
                                  void *func, void **args)
{
    cudaKernelNodeParams k;
    memset(&k, 0, sizeof k);
    k.func = func;
    k.gridDim = dim3(N / 256);
    k.blockDim = dim3(256);
    k.kernelParams = args;
    cudaGraphNode_t node;
    CHECK(cudaGraphAddKernelNode(&node, g, deps, ndeps, &k));
    return node;
}

static int check_values(const int *host, int round, int add)
{
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += host[i] != 2 * (i + round * 1000) + add;
    return bad == 0;
}

static int *d_round; /* the round number the fill kernel reads */
static int h_out[N];

/* Sets the round, launches exec on s and copies src to h_out. */
static void launch_and_read(cudaGraphExec_t exec, cudaStream_t s, int round, const int *src)
{
    CHECK(cudaMemcpyAsync(d_round, &round, sizeof round, cudaMemcpyHostToDevice, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(h_out, src, BYTES, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
}

/* alloc -> fill -> twice_plus -> copy to out -> free, five launches. */
static void alloc_use_free(cudaStream_t s)
{
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams ap = alloc_params(BYTES);
    cudaGraphNode_t alloc, k1, k2, copy, free_node;
    CHECK(cudaGraphAddMemAllocNode(&alloc, g, NULL, 0, &ap));
    int *buf = (int *)ap.dptr;
    expect(buf != NULL, "allocation node returns a pointer");
    int n = N, add = 7;
    void *fill_args[] = {&buf, &n, &d_round};
    void *twice_args[] = {&buf, &n, &add};
    k1 = add_kernel(g, &alloc, 1, (void *)fill, fill_args);
    k2 = add_kernel(g, &k1, 1, (void *)twice_plus, twice_args);
    int *out;
    CHECK(cudaMalloc(&out, BYTES));
    CHECK(cudaGraphAddMemcpyNode1D(&copy, g, &k2, 1, out, buf, BYTES, cudaMemcpyDeviceToDevice));
    CHECK(cudaGraphAddMemFreeNode(&free_node, g, &copy, 1, buf));

    cudaMemAllocNodeParams got;
    CHECK(cudaGraphMemAllocNodeGetParams(alloc, &got));
    expect(got.dptr == buf && got.bytesize == BYTES && got.poolProps.location.id == 0,
           "cudaGraphMemAllocNodeGetParams");
    void *freed = NULL;
    CHECK(cudaGraphMemFreeNodeGetParams(free_node, &freed));
    expect(freed == buf, "cudaGraphMemFreeNodeGetParams");
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &nodes));
    printf("alloc/use/free graph: %zu nodes\n", nodes);
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(alloc, &type));
    expect(type == cudaGraphNodeTypeMemAlloc, "node type MemAlloc");
    CHECK(cudaGraphNodeGetType(free_node, &type));
    expect(type == cudaGraphNodeTypeMemFree, "node type MemFree");

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    int ok = 1;
    for (int round = 0; round < 5; round++) {
        launch_and_read(exec, s, round, out);
        ok &= check_values(h_out, round, 7);
    }
    expect(ok, "five launches of alloc -> kernels -> copy -> free");

    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaFree(out));
}

static unsigned long long graph_mem(cudaGraphMemAttributeType attr)
{
    unsigned long long v = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, attr, &v));
    return v;
}

static void memory_attributes(void)
{
    unsigned long long used = graph_mem(cudaGraphMemAttrUsedMemCurrent);
    unsigned long long used_high = graph_mem(cudaGraphMemAttrUsedMemHigh);
    unsigned long long reserved = graph_mem(cudaGraphMemAttrReservedMemCurrent);
    unsigned long long reserved_high = graph_mem(cudaGraphMemAttrReservedMemHigh);
    printf("graph memory: used current %s, used high >= %d bytes: %s, reserved high >= used high: %s, "
           "reserved current >= used current: %s\n",
           used == 0 ? "0" : "> 0", (int)BYTES, used_high >= BYTES ? "yes" : "no",
           reserved_high >= used_high ? "yes" : "no", reserved >= used ? "yes" : "no");
    CHECK(cudaDeviceGraphMemTrim(0));
    unsigned long long zero = 0;
    CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
    CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &zero));
    expect(graph_mem(cudaGraphMemAttrUsedMemHigh) == graph_mem(cudaGraphMemAttrUsedMemCurrent),
           "used high reset to used current");
    expect(graph_mem(cudaGraphMemAttrReservedMemHigh) == graph_mem(cudaGraphMemAttrReservedMemCurrent),
           "reserved high reset to reserved current");
    zero = 1;
    cudaError_t e = cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &zero);
    printf("setting UsedMemCurrent -> %s\n", cudaGetErrorName(e));
    cudaGetLastError();
}

/* alloc -> fill -> twice_plus with no free node: the pointer outlives the
 * launch. Returns the graph; *ptr is the allocation. */
static cudaGraph_t alloc_only_graph(int **ptr, int add)
{
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams ap = alloc_params(BYTES);
    cudaGraphNode_t alloc, k1;
    CHECK(cudaGraphAddMemAllocNode(&alloc, g, NULL, 0, &ap));
    int *buf = (int *)ap.dptr, n = N;
    void *fill_args[] = {&buf, &n, &d_round}; /* the node copies the values */
    void *twice_args[] = {&buf, &n, &add};
    k1 = add_kernel(g, &alloc, 1, (void *)fill, fill_args);
    add_kernel(g, &k1, 1, (void *)twice_plus, twice_args);
    *ptr = buf;
    return g;
}

/* count launches from round first, each result read from buf and checked,
 * then buf freed after the last (cudaFreeAsync). */
static int launch_rounds(cudaGraphExec_t exec, cudaStream_t s, int first, int count, int *buf, int add)
{
    int ok = 1;
    for (int round = first; round < first + count; round++) {
        launch_and_read(exec, s, round, buf);
        ok &= check_values(h_out, round, add);
    }
    CHECK(cudaFreeAsync(buf, s));
    CHECK(cudaStreamSynchronize(s));
    return ok;
}

static void auto_free_on_launch(cudaStream_t s)
{
    int *buf;
    cudaGraph_t g = alloc_only_graph(&buf, 3);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    unsigned long long flags = 0;
    CHECK(cudaGraphExecGetFlags(exec, &flags));
    expect(flags == cudaGraphInstantiateFlagAutoFreeOnLaunch, "cudaGraphExecGetFlags: AutoFreeOnLaunch");
    /* each launch frees the last one's allocation */
    expect(launch_rounds(exec, s, 0, 4, buf, 3), "AutoFreeOnLaunch: four launches, allocation read after each");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

static void freed_outside(cudaStream_t s)
{
    int *buf;
    cudaGraph_t g = alloc_only_graph(&buf, 5);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    int round = 2;
    launch_and_read(exec, s, round, buf);
    expect(check_values(h_out, 2, 5), "allocation read after the launch");

    CHECK(cudaFreeAsync(buf, s)); /* freed in stream order after the launch */
    round = 3;
    launch_and_read(exec, s, round, buf);
    expect(check_values(h_out, 3, 5), "relaunch after cudaFreeAsync");

    CHECK(cudaFree(buf)); /* a synchronous free of a graph allocation */
    round = 4;
    launch_and_read(exec, s, round, buf);
    expect(check_values(h_out, 4, 5), "relaunch after cudaFree");
    CHECK(cudaFreeAsync(buf, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

/* cudaMallocAsync captured into a graph, freed by the program after the launch. */
static void captured_alloc_freed_outside(cudaStream_t s)
{
    int *buf = NULL, n = N;
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK(cudaMallocAsync(&buf, BYTES, s));
    fill<<<N / 256, 256, 0, s>>>(buf, n, d_round);
    twice_plus<<<N / 256, 256, 0, s>>>(buf, n, 11);
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphNode_t first;
    size_t count = 1;
    CHECK(cudaGraphGetRootNodes(g, &first, &count));
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(first, &type));
    expect(count == 1 && type == cudaGraphNodeTypeMemAlloc, "captured cudaMallocAsync is an allocation node");
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    expect(launch_rounds(exec, s, 5, 3, buf, 11), "captured allocation, AutoFreeOnLaunch, three launches");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
}

/* What CUDA refuses for graphs with memory nodes, each result printed, last
 * of all (an error reported late would fail what follows): a clone, a
 * second instantiation while one exists, a relaunch while the last launch's
 * allocation is live; and the synchronisation after each. */
static void refusals(cudaStream_t s)
{
    int *buf;
    cudaGraph_t g = alloc_only_graph(&buf, 1);
    cudaGraphExec_t exec, second;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    cudaError_t e = cudaGraphInstantiate(&second, g, 0);
    printf("a second instantiation while the first exists -> %s\n", cudaGetErrorName(e));
    if (e == cudaSuccess)
        CHECK(cudaGraphExecDestroy(second));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    e = cudaGraphLaunch(exec, s);
    printf("relaunch before the allocation is freed -> %s\n", cudaGetErrorName(e));
    printf("  then cudaStreamSynchronize -> %s\n", cudaGetErrorName(cudaStreamSynchronize(s)));
    cudaGetLastError();
    printf("  cudaFreeAsync + synchronize -> %s\n",
           cudaGetErrorName(cudaFreeAsync(buf, s) == cudaSuccess ? cudaStreamSynchronize(s) : cudaGetLastError()));
    cudaGraph_t clone = NULL;
    e = cudaGraphClone(&clone, g);
    printf("cudaGraphClone of a graph with memory nodes -> %s\n", cudaGetErrorName(e));
    printf("  then cudaDeviceSynchronize -> %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    cudaGetLastError();
    if (e == cudaSuccess)
        cudaGraphDestroy(clone);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaGetLastError();
}

int main(void)
{
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMalloc(&d_round, sizeof(int)));
    alloc_use_free(s);
    memory_attributes();
    auto_free_on_launch(s);
    freed_outside(s);
    captured_alloc_freed_outside(s);
    refusals(s);
    CHECK(cudaDeviceGraphMemTrim(0));
    CHECK(cudaDeviceSynchronize());
    printf("graph memory after the frees and a trim: used current %s\n",
           graph_mem(cudaGraphMemAttrUsedMemCurrent) == 0 ? "0" : "> 0");
    CHECK(cudaFree(d_round));
    CHECK(cudaStreamDestroy(s));
    printf("%s\n", failures ? "graph_mem_nodes: FAILED" : "graph_mem_nodes: all checks passed");
    return failures ? 1 : 0;
}

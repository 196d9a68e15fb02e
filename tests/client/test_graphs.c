/*
 * CUDA graphs through Flyt's libcuda.so.1 against the host-memory test
 * backend (run by run_with_server.sh): stream capture across two streams,
 * instantiate, launch, update, clone, inspection, explicit graphs of copies,
 * memsets, host functions and child graphs, node parameters read back and
 * changed, and the errors CUDA gives.
 */
#include <cuda.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define CU_OK(call) CHECK_EQ((call), CUDA_SUCCESS, "%s", #call)

#define N 256 /* 32-bit words per buffer */

static atomic_int host_calls;
static void count_call(void *arg) { atomic_fetch_add((atomic_int *)arg, 1); }

static uint32_t word(CUdeviceptr p, size_t i)
{
    uint32_t v = 0;
    cuMemcpyDtoH(&v, p + i * 4, 4);
    return v;
}

/* memset a to value, then (on s2, forked and joined by events) copy a to
 * b, then a host function: the graph a captured stream makes. */
static CUgraph capture(CUstream s1, CUstream s2, CUevent fork, CUevent join, CUdeviceptr a,
                       CUdeviceptr b, unsigned value)
{
    CUgraph g = NULL;
    CU_OK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_OK(cuMemsetD32Async(a, value, N, s1));
    CU_OK(cuEventRecord(fork, s1));
    CU_OK(cuStreamWaitEvent(s2, fork, 0));
    CU_OK(cuMemcpyDtoDAsync(b, a, N * 4, s2));
    CU_OK(cuEventRecord(join, s2));
    CU_OK(cuStreamWaitEvent(s1, join, 0));
    CU_OK(cuLaunchHostFunc(s1, count_call, &host_calls));
    CU_OK(cuStreamEndCapture(s1, &g));
    return g;
}

static void test_capture(CUdeviceptr a, CUdeviceptr b)
{
    CUstream s1, s2;
    CUevent fork, join;
    CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CU_OK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    CU_OK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));

    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    CU_OK(cuStreamIsCapturing(s1, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE, "no stream captures at first");

    CU_OK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_OK(cuStreamIsCapturing(s1, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE, "a begun capture is active");
    CHECK_NE(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS,
             "a capturing stream cannot begin another");
    CU_OK(cuMemsetD32Async(a, 5, N, s1));
    cuuint64_t id = 0;
    CUgraph cg = NULL;
    const CUgraphNode *deps = NULL;
    size_t ndeps = 0;
    CU_OK(cuStreamGetCaptureInfo(s1, &st, &id, &cg, &deps, NULL, &ndeps));
    CHECK_NE(cg, NULL, "capture info: the graph and one dependency");
    CHECK_EQ(ndeps, 1, "capture info: the graph and one dependency");
    CHECK(deps, "capture info: the graph and one dependency");
    CHECK(deps[0], "capture info: the graph and one dependency");
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    CU_OK(cuGraphNodeGetType(deps[0], &type));
    CHECK_EQ(type, CU_GRAPH_NODE_TYPE_MEMSET, "the dependency is the memset node (%d)", (int)type);
    CUgraph g0 = NULL;
    CU_OK(cuStreamEndCapture(s1, &g0));
    CHECK_EQ(g0, cg, "the ended capture gives the graph it built");
    CHECK_EQ(word(a, 0), 0, "captured work did not run");
    CU_OK(cuGraphDestroy(g0));

    CUgraph g = capture(s1, s2, fork, join, a, b, 7);
    CHECK_NE(g, NULL, "a captured host function does not run");
    CHECK_EQ(atomic_load(&host_calls), 0, "a captured host function does not run");
    size_t n = 0;
    CU_OK(cuGraphGetNodes(g, NULL, &n));
    CHECK_EQ(n, 3, "three nodes: memset, copy, host function (%zu)", n);
    CUgraphNode roots[4] = {0}, from[4] = {0}, to[4] = {0};
    size_t nroots = 4, nedges = 4;
    CU_OK(cuGraphGetRootNodes(g, roots, &nroots));
    CU_OK(cuGraphGetEdges(g, from, to, NULL, &nedges));
    /* the join adds the copy to the memset the host function depends on */
    CHECK_EQ(nroots, 1, "one root, three edges, from the root (%zu, %zu)", nroots, nedges);
    CHECK_EQ(nedges, 3, "one root, three edges, from the root (%zu, %zu)", nroots, nedges);
    CHECK_EQ(from[0], roots[0], "one root, three edges, from the root (%zu, %zu)", nroots, nedges);
    CHECK_EQ(to[2], to[1], "one root, three edges, from the root (%zu, %zu)", nroots, nedges);

    CUgraphExec x = NULL;
    CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
    for (int i = 0; i < 3; i++)
        CU_OK(cuGraphLaunch(x, s1));
    CU_OK(cuStreamSynchronize(s1));
    CHECK_EQ(atomic_load(&host_calls), 3,
             "the host function ran at each of 3 launches (%d)", atomic_load(&host_calls));
    CHECK_EQ(word(b, N - 1), 7, "the launches copied the memset value (%u)", word(b, N - 1));

    CUgraph g9 = capture(s1, s2, fork, join, a, b, 9);
    CUgraphExecUpdateResultInfo info;
    CU_OK(cuGraphExecUpdate_v2(x, g9, &info));
    CHECK_EQ(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS, "an exec takes a graph of the same shape");
    CU_OK(cuGraphUpload(x, s1));
    CU_OK(cuGraphLaunch(x, s1));
    CU_OK(cuStreamSynchronize(s1));
    CHECK_EQ(word(b, 0), 9, "the updated exec runs the new values (%u)", word(b, 0));

    CUgraph clone = NULL;
    CUgraphExec xc = NULL;
    CU_OK(cuGraphClone(&clone, g));
    CHECK_EQ(cuGraphInstantiateWithFlags(&xc, clone, CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD), CUDA_ERROR_INVALID_VALUE,
             "the upload flag without the params form's stream is refused, as by the driver");
    CU_OK(cuGraphInstantiateWithFlags(&xc, clone, 0));
    CU_OK(cuGraphLaunch(xc, s1));
    CU_OK(cuStreamSynchronize(s1));
    CHECK_EQ(word(b, 0), 7, "a clone runs the original's work (%u)", word(b, 0));

    char path[] = "/tmp/flyt-test-dot-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0)
        close(fd);
    CU_OK(cuGraphDebugDotPrint(g, path, 0));
    FILE *f = fopen(path, "r");
    char line[64] = "";
    CHECK(f, "the dot text lands in the caller's file");
    CHECK(fgets(line, sizeof line, f), "the dot text lands in the caller's file");
    CHECK_EQ(strncmp(line, "digraph", 7), 0, "the dot text lands in the caller's file");
    if (f)
        fclose(f);
    unlink(path);

    CUgraph g2 = NULL;
    /* an allocation in RELAXED mode during a capture, as PyTorch's allocator makes */
    CU_OK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CU_OK(cuThreadExchangeStreamCaptureMode(&mode));
    CUdeviceptr extra = 0;
    CU_OK(cuMemAlloc(&extra, 64));
    CU_OK(cuThreadExchangeStreamCaptureMode(&mode));
    CHECK_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED, "the thread's mode is exchanged back");
    CU_OK(cuStreamEndCapture(s1, &g2));
    CU_OK(cuGraphDestroy(g2));
    CU_OK(cuMemFree(extra));

    /* a synchronisation inside a capture fails and invalidates it */
    CU_OK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_EQ(cuStreamSynchronize(s1), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
             "synchronising a capturing stream is unsupported");
    CU_OK(cuStreamIsCapturing(s1, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED, "and invalidates the capture");
    CUgraph bad = (CUgraph)1;
    CHECK_EQ(cuStreamEndCapture(s1, &bad), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
             "ending it says so and gives no graph");
    CHECK_EQ(bad, NULL, "ending it says so and gives no graph");
    CHECK_EQ(cuStreamEndCapture(s1, &bad), CUDA_ERROR_ILLEGAL_STATE, "nothing left to end");
    CHECK_EQ(cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
             "the legacy stream cannot capture");

    /* bytes that travel with a request would be stale at the next launch */
    uint32_t pageable[4] = {1, 2, 3, 4};
    CU_OK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUresult copy = cuMemcpyHtoDAsync(a, pageable, sizeof pageable, s1);
    g2 = NULL;
    CUresult end = cuStreamEndCapture(s1, &g2);
    CHECK(copy == CUDA_ERROR_NOT_SUPPORTED || end == CUDA_ERROR_NOT_SUPPORTED,
          "a pageable copy in a capture is refused (%d, %d)", (int)copy, (int)end);
    if (g2)
        cuGraphDestroy(g2);

    CU_OK(cuGraphExecDestroy(xc));
    CU_OK(cuGraphExecDestroy(x));
    CU_OK(cuGraphDestroy(clone));
    CU_OK(cuGraphDestroy(g9));
    CU_OK(cuGraphDestroy(g));
    CU_OK(cuEventDestroy(fork));
    CU_OK(cuEventDestroy(join));
    CU_OK(cuStreamDestroy(s1));
    CU_OK(cuStreamDestroy(s2));
}

static void test_explicit(CUdeviceptr a, CUdeviceptr b)
{
    CUgraph child = NULL, g = NULL;
    CU_OK(cuGraphCreate(&child, 0));
    CUgraphNode set_b, set_a, copy, host, sub, empty;
    CUDA_MEMSET_NODE_PARAMS m = {.dst = b, .value = 3, .elementSize = 4, .width = N, .height = 1};
    CU_OK(cuGraphAddMemsetNode(&set_b, child, NULL, 0, &m, NULL));

    CU_OK(cuGraphCreate(&g, 0));
    m.dst = a;
    m.value = 0x11223344;
    CU_OK(cuGraphAddMemsetNode(&set_a, g, NULL, 0, &m, NULL));
    CUDA_MEMCPY3D c = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a,
                       .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = b + 4 * N / 2,
                       .WidthInBytes = 4 * N / 2, .Height = 1, .Depth = 1};
    CU_OK(cuGraphAddChildGraphNode(&sub, g, &set_a, 1, child));
    CU_OK(cuGraphAddMemcpyNode(&copy, g, &sub, 1, &c, NULL));
    CUDA_HOST_NODE_PARAMS h = {.fn = count_call, .userData = &host_calls};
    CU_OK(cuGraphAddHostNode(&host, g, NULL, 0, &h));
    CU_OK(cuGraphAddEmptyNode(&empty, g, NULL, 0));
    CU_OK(cuGraphAddDependencies(g, &copy, &host, NULL, 1));
    size_t nedges = 0;
    CU_OK(cuGraphGetEdges(g, NULL, NULL, NULL, &nedges));
    CHECK_EQ(nedges, 3, "three edges (%zu)", nedges);

    uint32_t pageable[N];
    CUDA_MEMCPY3D up = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = pageable,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = a,
                        .WidthInBytes = sizeof pageable, .Height = 1, .Depth = 1};
    CUgraphNode refused;
    CHECK_EQ(cuGraphAddMemcpyNode(&refused, g, NULL, 0, &up, NULL), CUDA_ERROR_NOT_SUPPORTED,
             "a copy node from pageable memory is refused");

    int before = atomic_load(&host_calls);
    CUgraphExec x = NULL;
    CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
    CU_OK(cuGraphLaunch(x, NULL));
    CU_OK(cuCtxSynchronize());
    CHECK_EQ(word(b, 0), 3, "child memset, then the copy (%x %x)", word(b, 0), word(b, N - 1));
    CHECK_EQ(word(b, N - 1), 0x11223344, "child memset, then the copy (%x %x)", word(b, 0), word(b, N - 1));
    CHECK_EQ(atomic_load(&host_calls), before + 1, "the host node ran once");
    cuuint64_t flags = 1;
    CU_OK(cuGraphExecGetFlags(x, &flags));
    CHECK_EQ(flags, 0, "the exec's flags");
    CU_OK(cuGraphExecDestroy(x));
    CU_OK(cuGraphDestroy(g));
    CU_OK(cuGraphDestroy(child));
}

static atomic_int other_calls;

/* Node parameters read back and changed: in the graph (then a new exec
 * sees them) and in an exec (the graph keeps its own). */
static void test_node_params(CUdeviceptr a, CUdeviceptr b)
{
    CUgraph g = NULL, child = NULL;
    CUgraphNode set, copy, host, rec, sub, empty;
    CUevent e1, e2;
    CU_OK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
    CU_OK(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
    CU_OK(cuGraphCreate(&child, 0));
    CU_OK(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS m = {.dst = a, .value = 7, .elementSize = 4, .width = N, .height = 1};
    CU_OK(cuGraphAddMemsetNode(&set, g, NULL, 0, &m, NULL));
    CUDA_MEMCPY3D c = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a,
                       .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = b,
                       .WidthInBytes = 4 * N, .Height = 1, .Depth = 1};
    CU_OK(cuGraphAddMemcpyNode(&copy, g, &set, 1, &c, NULL));
    CUDA_HOST_NODE_PARAMS h = {.fn = count_call, .userData = &host_calls};
    CU_OK(cuGraphAddHostNode(&host, g, &copy, 1, &h));
    CU_OK(cuGraphAddEventRecordNode(&rec, g, &copy, 1, e1));
    CUgraphNode deps2[2] = {host, rec};
    CU_OK(cuGraphAddChildGraphNode(&sub, g, deps2, 2, child));
    CU_OK(cuGraphAddEmptyNode(&empty, g, NULL, 0));

    /* getters: what was set */
    CUDA_MEMSET_NODE_PARAMS m2;
    memset(&m2, 0, sizeof m2);
    CU_OK(cuGraphMemsetNodeGetParams(set, &m2));
    CHECK_EQ(m2.dst, a, "memset parameters read back");
    CHECK_EQ(m2.value, 7, "memset parameters read back");
    CHECK_EQ(m2.elementSize, 4, "memset parameters read back");
    CHECK_EQ(m2.width, N, "memset parameters read back");
    CHECK_EQ(m2.height, 1, "memset parameters read back");
    CUDA_MEMCPY3D c2;
    memset(&c2, 0, sizeof c2);
    CU_OK(cuGraphMemcpyNodeGetParams(copy, &c2));
    CHECK_EQ(c2.srcDevice, a, "copy parameters read back");
    CHECK_EQ(c2.dstDevice, b, "copy parameters read back");
    CHECK_EQ(c2.WidthInBytes, 4 * N, "copy parameters read back");
    CHECK_EQ(c2.dstMemoryType, CU_MEMORYTYPE_DEVICE, "copy parameters read back");
    CUDA_HOST_NODE_PARAMS h2 = {0};
    CU_OK(cuGraphHostNodeGetParams(host, &h2));
    CHECK_EQ(h2.fn, count_call, "host node read back");
    CHECK_EQ(h2.userData, &host_calls, "host node read back");
    CUevent got = NULL;
    CU_OK(cuGraphEventRecordNodeGetEvent(rec, &got));
    CHECK_EQ(got, e1, "event record node's event");
    CHECK_EQ(cuGraphEventWaitNodeGetEvent(rec, &got), CUDA_ERROR_INVALID_VALUE,
             "a getter of another kind fails");
    CHECK_EQ(cuGraphMemsetNodeGetParams(copy, &m2), CUDA_ERROR_INVALID_VALUE,
             "a memset getter of a copy node fails");
    CUgraph owned = NULL, owned2 = NULL;
    CU_OK(cuGraphChildGraphNodeGetGraph(sub, &owned));
    CU_OK(cuGraphChildGraphNodeGetGraph(sub, &owned2));
    CHECK(owned, "the child graph is the node's, one id");
    CHECK_EQ(owned, owned2, "the child graph is the node's, one id");
    CHECK_NE(owned, child, "the child graph is the node's, one id");

    /* dependencies and dependents */
    CUgraphNode list[4] = {0};
    size_t n = 4;
    CU_OK(cuGraphNodeGetDependencies(sub, list, NULL, &n));
    CHECK_EQ(n, 2, "the child node's two dependencies (%zu)", n);
    CHECK((list[0] == host && list[1] == rec) || (list[0] == rec && list[1] == host),
          "the child node's two dependencies (%zu)", n);
    n = 0;
    CU_OK(cuGraphNodeGetDependentNodes(copy, NULL, NULL, &n));
    CHECK_EQ(n, 2, "the copy has two dependents (%zu)", n);
    CUgraphEdgeData ed[4];
    memset(ed, 0xff, sizeof ed);
    n = 4;
    CU_OK(cuGraphNodeGetDependentNodes_v2(set, list, ed, &n));
    CHECK_EQ(n, 1, "the memset's one dependent, default edge");
    CHECK_EQ(list[0], copy, "the memset's one dependent, default edge");
    CHECK_EQ(ed[0].type, 0, "the memset's one dependent, default edge");

    /* find in a clone, destroy a node */
    CUgraph clone = NULL;
    CU_OK(cuGraphClone(&clone, g));
    CUgraphNode in_clone = NULL;
    CU_OK(cuGraphNodeFindInClone(&in_clone, copy, clone));
    CUgraphNodeType type;
    CU_OK(cuGraphNodeGetType(in_clone, &type));
    CHECK_NE(in_clone, copy, "the copy found in the clone");
    CHECK_EQ(type, CU_GRAPH_NODE_TYPE_MEMCPY, "the copy found in the clone");
    CU_OK(cuGraphDestroyNode(empty));
    n = 0;
    CU_OK(cuGraphGetNodes(g, NULL, &n));
    CHECK_EQ(n, 5, "five nodes after destroying one (%zu)", n);

    /* setters: the graph's node, then an exec's copy */
    m.value = 9;
    CU_OK(cuGraphMemsetNodeSetParams(set, &m));
    CU_OK(cuGraphEventRecordNodeSetEvent(rec, e2));
    CU_OK(cuGraphEventRecordNodeGetEvent(rec, &got));
    CHECK_EQ(got, e2, "the record node's new event");
    CUgraphExec x = NULL;
    CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
    CU_OK(cuGraphLaunch(x, NULL));
    CU_OK(cuCtxSynchronize());
    CHECK_EQ(word(b, 0), 9, "the new memset value ran (%u)", word(b, 0));
    CHECK_EQ(word(b, N - 1), 9, "the new memset value ran (%u)", word(b, 0));
    m.value = 5;
    CU_OK(cuGraphExecMemsetNodeSetParams(x, set, &m, NULL));
    CUDA_HOST_NODE_PARAMS h3 = {.fn = count_call, .userData = &other_calls};
    CU_OK(cuGraphExecHostNodeSetParams(x, host, &h3));
    c.WidthInBytes = 4 * N / 2;
    CU_OK(cuGraphExecMemcpyNodeSetParams(x, copy, &c, NULL));
    CU_OK(cuMemsetD32(b, 0, N));
    int before = atomic_load(&host_calls);
    CU_OK(cuGraphLaunch(x, NULL));
    CU_OK(cuCtxSynchronize());
    CHECK_EQ(word(b, 0), 5, "the exec's new memset and copy (%u %u)", word(b, 0), word(b, N - 1));
    CHECK_EQ(word(b, N - 1), 0, "the exec's new memset and copy (%u %u)", word(b, 0), word(b, N - 1));
    CHECK_EQ(atomic_load(&other_calls), 1, "the exec's new host function ran instead");
    CHECK_EQ(atomic_load(&host_calls), before, "the exec's new host function ran instead");
    CU_OK(cuGraphMemsetNodeGetParams(set, &m2));
    CHECK_EQ(m2.value, 9, "the graph keeps its own memset value (%u)", m2.value);

    /* the generic forms */
    CUgraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_MEMSET;
    np.memset.dst = a;
    np.memset.value = 3;
    np.memset.elementSize = 4;
    np.memset.width = N;
    np.memset.height = 1;
    CU_OK(cuGraphExecNodeSetParams(x, set, &np));
    CU_OK(cuGraphLaunch(x, NULL));
    CU_OK(cuCtxSynchronize());
    CHECK_EQ(word(b, 0), 3, "cuGraphExecNodeSetParams's memset (%u)", word(b, 0));
    CUgraphNode gen = NULL;
    np.memset.value = 4;
    CU_OK(cuGraphAddNode(&gen, g, &sub, NULL, 1, &np));
    CU_OK(cuGraphMemsetNodeGetParams(gen, &m2));
    CHECK_EQ(m2.value, 4, "cuGraphAddNode's memset node");
    CHECK_EQ(m2.dst, a, "cuGraphAddNode's memset node");
    np.memset.value = 6;
    CU_OK(cuGraphNodeSetParams(gen, &np));
    CU_OK(cuGraphMemsetNodeGetParams(gen, &m2));
    CHECK_EQ(m2.value, 6, "cuGraphNodeSetParams (%u)", m2.value);

    CU_OK(cuGraphExecDestroy(x));
    CU_OK(cuGraphDestroy(clone));
    CU_OK(cuGraphDestroy(g));
    CU_OK(cuGraphDestroy(child));
    CU_OK(cuEventDestroy(e1));
    CU_OK(cuEventDestroy(e2));
}

/* A conditional node of type and size on handle h in g; its bodies in out. */
static CUgraphNode add_cond(CUgraph g, CUgraphConditionalHandle h, CUgraphConditionalNodeType type,
                            unsigned size, CUgraph *out)
{
    CUgraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.conditional.handle = h;
    np.conditional.type = type;
    np.conditional.size = size;
    CUgraphNode node = NULL;
    CU_OK(cuGraphAddNode(&node, g, NULL, NULL, 0, &np));
    for (unsigned i = 0; np.conditional.phGraph_out && i < size; i++)
        out[i] = np.conditional.phGraph_out[i];
    return node;
}

static void add_memset(CUgraph g, CUdeviceptr dst, unsigned value)
{
    CUDA_MEMSET_NODE_PARAMS m = {.dst = dst, .value = value, .elementSize = 4, .width = N, .height = 1};
    CUgraphNode n;
    CU_OK(cuGraphAddMemsetNode(&n, g, NULL, 0, &m, NULL));
}

/* Instantiates g, launches it once and waits. */
static void run_graph(CUgraph g)
{
    CUgraphExec x;
    CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
    CU_OK(cuGraphLaunch(x, NULL));
    CU_OK(cuCtxSynchronize());
    CU_OK(cuGraphExecDestroy(x));
}

/* The host backend's condition is its default value (no kernel sets it). */
static void test_conditional(CUcontext ctx, CUdeviceptr a)
{
    CUgraph g, body[3] = {NULL, NULL, NULL};
    CUgraphConditionalHandle yes = 0, no = 0, sw = 0;
    CU_OK(cuGraphCreate(&g, 0));
    CU_OK(cuGraphConditionalHandleCreate(&yes, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CU_OK(cuGraphConditionalHandleCreate(&no, g, ctx, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CHECK(yes != 0 && no != 0 && yes != no, "conditional handles (%llx, %llx)",
          (unsigned long long)yes, (unsigned long long)no);
    CUgraphNode ifelse = add_cond(g, no, CU_GRAPH_COND_TYPE_IF, 2, body);
    CHECK(body[0] != NULL && body[1] != NULL && body[0] != body[1], "an IF/ELSE node's two bodies");
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    CU_OK(cuGraphNodeGetType(ifelse, &type));
    CHECK_EQ(type, CU_GRAPH_NODE_TYPE_CONDITIONAL, "the node's type");
    add_memset(body[0], a, 7);
    add_memset(body[1], a, 9);
    run_graph(g);
    CHECK_EQ(word(a, 0), 9, "a false IF runs its ELSE body (%u)", word(a, 0));
    CU_OK(cuGraphDestroy(g));

    /* IF, nested in the body of an IF; the inner body filled by capture */
    CU_OK(cuGraphCreate(&g, 0));
    CU_OK(cuGraphConditionalHandleCreate(&yes, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUgraph outer, inner;
    add_cond(g, yes, CU_GRAPH_COND_TYPE_IF, 1, &outer);
    add_cond(outer, yes, CU_GRAPH_COND_TYPE_IF, 1, &inner);
    size_t n = 0;
    CU_OK(cuGraphGetNodes(outer, NULL, &n));
    CHECK_EQ(n, 1, "the outer body holds the inner node");
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuStreamBeginCaptureToGraph(s, inner, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CU_OK(cuStreamIsCapturing(s, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE, "a capture into a graph is active");
    CU_OK(cuMemsetD32Async(a, 11, N, s));
    CU_OK(cuStreamEndCapture(s, NULL));
    CU_OK(cuGraphGetNodes(inner, NULL, &n));
    CHECK_EQ(n, 1, "the capture added its memset to the body");
    run_graph(g);
    CHECK_EQ(word(a, 0), 11, "nested IFs ran the captured body (%u)", word(a, 0));
    CU_OK(cuGraphDestroy(g));

    /* SWITCH: body[2] of 3 */
    CU_OK(cuGraphCreate(&g, 0));
    CU_OK(cuGraphConditionalHandleCreate(&sw, g, ctx, 2, CU_GRAPH_COND_ASSIGN_DEFAULT));
    add_cond(g, sw, CU_GRAPH_COND_TYPE_SWITCH, 3, body);
    for (unsigned i = 0; i < 3; i++)
        add_memset(body[i], a, 20 + i);
    run_graph(g);
    CHECK_EQ(word(a, 0), 22, "SWITCH ran body 2 (%u)", word(a, 0));

    CUgraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.conditional.handle = sw;
    np.conditional.type = CU_GRAPH_COND_TYPE_IF;
    np.conditional.size = 3;
    CUgraphNode bad;
    CHECK_EQ(cuGraphAddNode(&bad, g, NULL, NULL, 0, &np), CUDA_ERROR_INVALID_VALUE,
             "an IF of three bodies is refused");
    np.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
    np.conditional.size = 1;
    CU_OK(cuGraphAddNode(&bad, g, NULL, NULL, 0, &np));
    CHECK(np.conditional.phGraph_out != NULL, "a WHILE node's body");
    CU_OK(cuGraphDestroy(g));
    CU_OK(cuStreamDestroy(s));
}

static atomic_int destroyed;
static void destroy_object(void *arg) { atomic_fetch_add(&destroyed, *(int *)arg); }

static int destroyed_soon(int want)
{
    for (int i = 0; i < 50 && atomic_load(&destroyed) != want; i++) {
        CU_OK(cuCtxSynchronize());
        usleep(10000);
    }
    return atomic_load(&destroyed);
}

static void test_user_objects(void)
{
    static int one = 1;
    CUuserObject obj = NULL;
    CHECK_EQ(cuUserObjectCreate(&obj, &one, destroy_object, 1, 0), CUDA_ERROR_INVALID_VALUE,
             "a user object needs CU_USER_OBJECT_NO_DESTRUCTOR_SYNC");
    CU_OK(cuUserObjectCreate(&obj, &one, destroy_object, 2, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    CU_OK(cuUserObjectRetain(obj, 1));
    CU_OK(cuUserObjectRelease(obj, 2));
    CHECK_EQ(destroyed_soon(1), 0, "one reference left: not destroyed");

    CUgraph g, clone;
    CUgraphExec x;
    CU_OK(cuGraphCreate(&g, 0));
    CU_OK(cuGraphRetainUserObject(g, obj, 1, CU_GRAPH_USER_OBJECT_MOVE)); /* the graph's now */
    CU_OK(cuGraphRetainUserObject(g, obj, 2, 0));
    CU_OK(cuGraphReleaseUserObject(g, obj, 2));
    CU_OK(cuGraphClone(&clone, g));
    CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
    CU_OK(cuGraphDestroy(g));
    CU_OK(cuGraphDestroy(clone));
    /* a clone is answered at once (the driver refuses graphs with memory
     * nodes there), not at the next synchronisation */
    CUgraph none = NULL;
    CHECK_EQ(cuGraphClone(&none, g), CUDA_ERROR_INVALID_HANDLE, "cloning a destroyed graph fails at the call");
    CU_OK(cuCtxSynchronize());
    CHECK_EQ(destroyed_soon(1), 0, "the exec still holds the object");
    CU_OK(cuGraphExecDestroy(x));
    CHECK_EQ(destroyed_soon(1), 1, "the destructor ran in the client when the last holder went");
    CHECK_EQ(destroyed_soon(2), 1, "and only once");
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGet(&dev, 0));
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_OK(cuCtxSetCurrent(ctx));
    CUdeviceptr a = 0, b = 0;
    CU_OK(cuMemAlloc(&a, N * 4));
    CU_OK(cuMemAlloc(&b, N * 4));
    test_capture(a, b);
    test_explicit(a, b);
    test_node_params(a, b);
    test_conditional(ctx, a);
    test_user_objects();
    cuuint64_t used = 1;
    CU_OK(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
    CU_OK(cuDeviceGraphMemTrim(dev));
    CU_OK(cuMemFree(a));
    CU_OK(cuMemFree(b));
    /* the program leaves inside a capture: its session ends cleanly (the capture's
     * graph freed once; run_with_server.sh fails on a crashed session) */
    CUstream open_capture;
    CU_OK(cuStreamCreate(&open_capture, CU_STREAM_NON_BLOCKING));
    CU_OK(cuStreamBeginCapture(open_capture, CU_STREAM_CAPTURE_MODE_RELAXED));
    return check_done();
}

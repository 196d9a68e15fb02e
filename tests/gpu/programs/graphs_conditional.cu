/* Conditional graph nodes, user objects and capture into an existing graph
 * (docs/graphs.md): IF, IF/ELSE, a WHILE loop a kernel counts down, SWITCH,
 * nested conditionals, a body filled by cudaStreamBeginCaptureToGraph, a
 * conditional node added during a capture, and a user object whose
 * destructor runs once the graph holding it is gone. Checks itself. */
#include <atomic>
#include <unistd.h>

#include "test_util.h"

__global__ void set_cond(cudaGraphConditionalHandle h, const int *value)
{
    cudaGraphSetConditional(h, *value);
}

__global__ void store(int *dst, int value) { *dst = value; }

__global__ void add(int *dst, int value) { *dst += value; }

/* One WHILE iteration: count down, and keep looping while it is not 0. */
__global__ void count_down(cudaGraphConditionalHandle h, int *counter, int *iterations)
{
    *counter -= 1;
    *iterations += 1;
    cudaGraphSetConditional(h, *counter > 0);
}

static cudaGraphNode_t add_cond(cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps,
                                cudaGraphConditionalHandle h, cudaGraphConditionalNodeType type,
                                unsigned size, cudaGraph_t *bodies)
{
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = h;
    p.conditional.type = type;
    p.conditional.size = size;
    cudaGraphNode_t node;
    CHECK(cudaGraphAddNode(&node, g, deps, NULL, ndeps, &p));
    for (unsigned i = 0; i < size; i++)
        bodies[i] = p.conditional.phGraph_out[i];
    return node;
}

/* A kernel node of one thread in g after dep (NULL: a root). */
template <typename... A>
static cudaGraphNode_t add_kernel(cudaGraph_t g, cudaGraphNode_t dep, void (*fn)(A...), A... args)
{
    void *params[] = {&args...};
    cudaKernelNodeParams k = {};
    k.func = (void *)fn;
    k.gridDim = dim3(1);
    k.blockDim = dim3(1);
    k.kernelParams = params;
    cudaGraphNode_t node;
    CHECK(cudaGraphAddKernelNode(&node, g, dep ? &dep : NULL, dep ? 1 : 0, &k));
    return node;
}

static void run(cudaGraph_t g, cudaStream_t s)
{
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(x));
}

static int read_int(const int *d)
{
    int v = 0;
    CHECK(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

/* IF (size 1) or IF/ELSE (size 2) on the value *cond: stores 1 or 2 in out. */
static int if_else(int cond_value, unsigned size, int *cond, int *out, cudaStream_t s)
{
    CHECK(cudaMemcpy(cond, &cond_value, sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(out, 0, sizeof(int)));
    cudaGraph_t g, bodies[2];
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
    cudaGraphNode_t setter = add_kernel(g, NULL, set_cond, h, (const int *)cond);
    add_cond(g, &setter, 1, h, cudaGraphCondTypeIf, size, bodies);
    add_kernel(bodies[0], NULL, store, out, 1);
    if (size == 2)
        add_kernel(bodies[1], NULL, store, out, 2);
    run(g, s);
    CHECK(cudaGraphDestroy(g));
    return read_int(out);
}

static void test_while(int *counter, int *iterations, cudaStream_t s)
{
    int ten = 10;
    CHECK(cudaMemcpy(counter, &ten, sizeof ten, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(iterations, 0, sizeof(int)));
    cudaGraph_t g, body;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
    add_cond(g, NULL, 0, h, cudaGraphCondTypeWhile, 1, &body);
    add_kernel(body, NULL, count_down, h, counter, iterations);
    run(g, s);
    CHECK(cudaGraphDestroy(g));
    expect(read_int(counter) == 0 && read_int(iterations) == 10, "WHILE counted down from 10 in 10 iterations");
}

static void test_switch(int *cond, int *out, cudaStream_t s)
{
    cudaGraph_t g, bodies[4];
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
    cudaGraphNode_t setter = add_kernel(g, NULL, set_cond, h, (const int *)cond);
    add_cond(g, &setter, 1, h, cudaGraphCondTypeSwitch, 4, bodies);
    for (int i = 0; i < 4; i++)
        add_kernel(bodies[i], NULL, store, out, 100 + i);
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    int ok = 1;
    for (int v = 0; v < 6; v++) {
        CHECK(cudaMemcpy(cond, &v, sizeof v, cudaMemcpyHostToDevice));
        CHECK(cudaMemset(out, 0, sizeof(int)));
        CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaStreamSynchronize(s));
        ok &= read_int(out) == (v < 4 ? 100 + v : 0);
    }
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    expect(ok, "SWITCH ran body n for n < 4 and none for 4 and 5");
}

/* An IF whose body holds an IF; the inner body is filled by capturing into it. */
static void test_nested_capture(int *out, cudaStream_t s)
{
    CHECK(cudaMemset(out, 0, sizeof(int)));
    cudaGraph_t g, outer, inner;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle yes, yes_too;
    CHECK(cudaGraphConditionalHandleCreate(&yes, g, 1, cudaGraphCondAssignDefault));
    CHECK(cudaGraphConditionalHandleCreate(&yes_too, g, 1, cudaGraphCondAssignDefault));
    add_cond(g, NULL, 0, yes, cudaGraphCondTypeIf, 1, &outer);
    add_cond(outer, NULL, 0, yes_too, cudaGraphCondTypeIf, 1, &inner);
    cudaStream_t cap;
    CHECK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
    CHECK(cudaStreamBeginCaptureToGraph(cap, inner, NULL, NULL, 0, cudaStreamCaptureModeRelaxed));
    store<<<1, 1, 0, cap>>>(out, 40);
    add<<<1, 1, 0, cap>>>(out, 2);
    CHECK(cudaStreamEndCapture(cap, NULL));
    CHECK(cudaStreamDestroy(cap));
    size_t n = 0;
    CHECK(cudaGraphGetNodes(inner, NULL, &n));
    run(g, s);
    CHECK(cudaGraphDestroy(g));
    expect(n == 2 && read_int(out) == 42, "nested IFs ran the body captured into the inner one");
}

/* A WHILE node added to a graph being captured (the samples' capturedWhileGraph). */
static void test_captured_while(int *counter, int *iterations, cudaStream_t s)
{
    int five = 5;
    CHECK(cudaMemcpy(counter, &five, sizeof five, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(iterations, 0, sizeof(int)));
    cudaStream_t cs;
    CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    add<<<1, 1, 0, cs>>>(iterations, 0);
    cudaStreamCaptureStatus st;
    cudaGraph_t g;
    const cudaGraphNode_t *deps;
    size_t ndeps;
    CHECK(cudaStreamGetCaptureInfo(cs, &st, NULL, &g, &deps, NULL, &ndeps));
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
    cudaGraph_t body;
    cudaGraphNode_t node = add_cond(g, deps, ndeps, h, cudaGraphCondTypeWhile, 1, &body);
    CHECK(cudaStreamUpdateCaptureDependencies(cs, &node, NULL, 1, cudaStreamSetCaptureDependencies));
    add_kernel(body, NULL, count_down, h, counter, iterations);
    add<<<1, 1, 0, cs>>>(iterations, 1000);
    cudaGraph_t captured;
    CHECK(cudaStreamEndCapture(cs, &captured));
    run(captured, s);
    CHECK(cudaGraphDestroy(captured));
    CHECK(cudaStreamDestroy(cs));
    expect(read_int(counter) == 0 && read_int(iterations) == 1005,
           "a WHILE node added during a capture looped 5 times, then the capture went on");
}

static std::atomic<int> destroyed{0};
static void destroy_object(void *arg) { destroyed += *(int *)arg; }

static void test_user_object(int *out, cudaStream_t s)
{
    static int one = 1;
    cudaUserObject_t obj;
    CHECK(cudaUserObjectCreate(&obj, &one, destroy_object, 1, cudaUserObjectNoDestructorSync));
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove));
    add_kernel(g, NULL, store, out, 5);
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    int before = destroyed.load();
    CHECK(cudaGraphExecDestroy(x));
    /* the driver runs destructors asynchronously (NO_DESTRUCTOR_SYNC): wait for it */
    for (int i = 0; i < 500 && destroyed.load() == 0; i++) {
        CHECK(cudaDeviceSynchronize());
        usleep(10000);
    }
    expect(before == 0 && destroyed.load() == 1 && read_int(out) == 5,
           "a user object's destructor ran once, after the exec holding it was destroyed");
}

int main()
{
    int *d;
    CHECK(cudaMalloc(&d, 4 * sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    expect(if_else(1, 1, d, d + 1, s) == 1, "IF with a true condition ran its body");
    expect(if_else(0, 1, d, d + 1, s) == 0, "IF with a false condition ran nothing");
    expect(if_else(7, 2, d, d + 1, s) == 1, "IF/ELSE with a true condition ran the IF body");
    expect(if_else(0, 2, d, d + 1, s) == 2, "IF/ELSE with a false condition ran the ELSE body");
    test_while(d + 2, d + 3, s);
    test_switch(d, d + 1, s);
    test_nested_capture(d + 1, s);
    test_captured_while(d + 2, d + 3, s);
    test_user_object(d + 1, s);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    printf("%s\n", failures ? "FAILED" : "ALL PASSED");
    return failures ? 1 : 0;
}

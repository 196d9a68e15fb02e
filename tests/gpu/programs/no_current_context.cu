/* Driver calls from a thread that has no current context while the
 * process's primary context lives (as in PyTorch's pin-memory thread,
 * where NVIDIA's runtime makes no context current for cudaEventQuery):
 * each call's result is printed, so native and Flyt are compared call by
 * call. Then the runtime calls PyTorch makes there. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>

#include "test_util.h"

__global__ void add_one(int *p) { p[threadIdx.x] += 1; }

struct objects {
    CUstream stream;
    CUevent a, b;
    CUdeviceptr dev;
    void *pinned;
    void *registered;
    CUfunction func;
};

static void say(const char *what, CUresult r)
{
    const char *name = NULL;
    cuGetErrorName(r, &name);
    printf("%-44s %s\n", what, name ? name : "?");
}

static void *bare_thread(void *arg)
{
    struct objects *o = (struct objects *)arg;
    CUcontext cur = (CUcontext)1;
    say("cuCtxGetCurrent", cuCtxGetCurrent(&cur));
    printf("%-44s %s\n", "current context", cur ? "set" : "none");
    say("cuEventRecord(explicit stream)", cuEventRecord(o->a, o->stream));
    say("cuEventRecord(explicit stream) again", cuEventRecord(o->b, o->stream));
    say("cuStreamSynchronize(explicit)", cuStreamSynchronize(o->stream));
    say("cuStreamQuery(explicit)", cuStreamQuery(o->stream));
    say("cuEventQuery", cuEventQuery(o->b));
    say("cuEventSynchronize", cuEventSynchronize(o->a));
    float ms = -1;
    say("cuEventElapsedTime", cuEventElapsedTime(&ms, o->a, o->b));
    say("cuStreamWaitEvent(explicit)", cuStreamWaitEvent(o->stream, o->a, 0));
    unsigned flags = 0;
    say("cuStreamGetFlags(explicit)", cuStreamGetFlags(o->stream, &flags));
    unsigned host_flags = 0;
    say("cuMemHostGetFlags(pinned)", cuMemHostGetFlags(&host_flags, o->pinned));
    CUdeviceptr mapped = 0;
    say("cuMemHostGetDevicePointer(pinned)", cuMemHostGetDevicePointer(&mapped, o->pinned, 0));
    unsigned mem_type = 0;
    say("cuPointerGetAttribute(dev, MEMORY_TYPE)",
        cuPointerGetAttribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, o->dev));
    int regs = -1;
    say("cuFuncGetAttribute(NUM_REGS)", cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, o->func));
    int value = 0;
    say("cuDeviceGetAttribute", cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
    say("cuMemHostUnregister", cuMemHostUnregister(o->registered));
    say("cuMemFreeHost", cuMemFreeHost(o->pinned));
    /* these need the current context's default stream or its memory */
    say("cuStreamSynchronize(NULL)", cuStreamSynchronize(NULL));
    say("cuEventRecord(NULL stream)", cuEventRecord(o->a, NULL));
    int word = 0;
    say("cuMemcpyDtoH", cuMemcpyDtoH(&word, o->dev, sizeof word));
    CUdeviceptr more = 0;
    say("cuMemAlloc", cuMemAlloc(&more, 64));
    size_t free_b = 0, total_b = 0;
    say("cuMemGetInfo", cuMemGetInfo(&free_b, &total_b));
    say("cuCtxSynchronize", cuCtxSynchronize());
    /* the runtime, as PyTorch's pin-memory thread uses it */
    cudaError_t e = cudaEventQuery((cudaEvent_t)o->b);
    printf("%-44s %s\n", "cudaEventQuery", cudaGetErrorName(e));
    e = cudaEventSynchronize((cudaEvent_t)o->b);
    printf("%-44s %s\n", "cudaEventSynchronize", cudaGetErrorName(e));
    void *p = NULL;
    e = cudaHostAlloc(&p, 4096, cudaHostAllocDefault);
    printf("%-44s %s\n", "cudaHostAlloc", cudaGetErrorName(e));
    if (p)
        cudaFreeHost(p);
    return NULL;
}

int main(void)
{
    CHECK(cudaFree(0));
    struct objects o;
    memset(&o, 0, sizeof o);
    DRV(cuStreamCreate(&o.stream, CU_STREAM_NON_BLOCKING));
    DRV(cuEventCreate(&o.a, 0));
    DRV(cuEventCreate(&o.b, 0));
    DRV(cuMemAlloc(&o.dev, 32 * sizeof(int)));
    DRV(cuMemsetD32(o.dev, 41, 32));
    DRV(cuMemHostAlloc(&o.pinned, 4096, 0));
    o.registered = aligned_alloc(4096, 4096);
    DRV(cuMemHostRegister(o.registered, 4096, 0));
    CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&o.func, (const void *)add_one));
    add_one<<<1, 32>>>((int *)o.dev);
    CHECK(cudaDeviceSynchronize());
    pthread_t t;
    if (pthread_create(&t, NULL, bare_thread, &o) != 0) {
        printf("FAIL pthread_create\n");
        return 1;
    }
    pthread_join(t, NULL);
    int host[32];
    CHECK(cudaMemcpy(host, (void *)o.dev, sizeof host, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int i = 0; i < 32; i++)
        ok &= host[i] == 42;
    printf("%s kernel result after the thread\n", ok ? "PASS" : "FAIL");
    free(o.registered);
    return ok ? 0 : 1;
}

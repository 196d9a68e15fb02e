// device_heap_limits: the device's limits and what kernels do within them,
// each result checked against the host:
//   - cudaDeviceSetLimit / cudaDeviceGetLimit for the malloc heap, the stack
//     and the printf FIFO, read back (set before any kernel ran, as CUDA
//     requires for the heap);
//   - device-side malloc/free (a linked list built per thread and freed),
//     new/delete of an array of objects with constructors, one block's
//     shared buffer from malloc by thread 0, a malloc larger than the heap
//     returning NULL;
//   - a recursion 200 frames deep (14 KiB of stack) that needs the larger
//     stack; cudaFuncGetAttributes' local size of its kernel printed.
#include <string.h>
#include "test_util.h"

struct node {
    int value;
    node *next;
};

// Each thread builds a list of k nodes, sums it and frees it.
__global__ void list_kernel(long long *sums, int k)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    node *head = NULL;
    for (int i = 0; i < k; i++) {
        node *n = (node *)malloc(sizeof(node));
        if (n == NULL) {
            sums[t] = -1;
            return;
        }
        n->value = t * 1000 + i;
        n->next = head;
        head = n;
    }
    long long s = 0;
    while (head) {
        node *next = head->next;
        s += head->value;
        free(head);
        head = next;
    }
    sums[t] = s;
}

struct counter {
    int v;
    __device__ counter() : v(7) {}
    __device__ ~counter() { v = -1; }
};

__global__ void new_delete_kernel(int *out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    counter *c = new counter[16];
    if (c == NULL) {
        out[t] = -1;
        return;
    }
    int s = 0;
    for (int i = 0; i < 16; i++)
        s += c[i].v + i;
    delete[] c;
    out[t] = s;
}

// Thread 0 allocates the block's buffer, everyone fills it, thread 0 sums.
__global__ void block_buffer_kernel(long long *out)
{
    __shared__ int *buf;
    if (threadIdx.x == 0)
        buf = (int *)malloc(blockDim.x * sizeof(int));
    __syncthreads();
    if (buf == NULL) {
        if (threadIdx.x == 0)
            out[blockIdx.x] = -1;
        return;
    }
    buf[threadIdx.x] = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    __syncthreads();
    if (threadIdx.x == 0) {
        long long s = 0;
        for (unsigned i = 0; i < blockDim.x; i++)
            s += buf[i];
        out[blockIdx.x] = s;
        free(buf);
    }
}

__global__ void too_big_kernel(int *out, size_t bytes)
{
    void *p = malloc(bytes);
    *out = p == NULL ? 1 : 0;
    if (p)
        free(p);
}

// Not a tail call: the frame holds a local array so the stack use is real.
__device__ __noinline__ long long deep(int n, volatile int *sink)
{
    int local[8];
    for (int i = 0; i < 8; i++)
        local[i] = n + i;
    sink[n & 7] = local[n & 7];
    if (n == 0)
        return local[3];
    return deep(n - 1, sink) + local[n & 7];
}

__global__ void recursion_kernel(long long *out, int depth, int *scratch)
{
    out[threadIdx.x] = deep(depth, scratch + threadIdx.x * 8);
}

int main(void)
{
    double t0 = now_s();
    const size_t heap = 64u << 20, stack = 20u << 10, fifo = 4u << 20;
    CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, heap));
    CHECK(cudaDeviceSetLimit(cudaLimitStackSize, stack));
    CHECK(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, fifo));
    size_t got_heap = 0, got_stack = 0, got_fifo = 0;
    CHECK(cudaDeviceGetLimit(&got_heap, cudaLimitMallocHeapSize));
    CHECK(cudaDeviceGetLimit(&got_stack, cudaLimitStackSize));
    CHECK(cudaDeviceGetLimit(&got_fifo, cudaLimitPrintfFifoSize));
    printf("limits read back: heap %s, stack %s, printf fifo %s\n",
           got_heap >= heap ? ">= set" : "< set", got_stack >= stack ? ">= set" : "< set",
           got_fifo >= fifo ? ">= set" : "< set");
    expect(got_heap >= heap && got_stack >= stack && got_fifo >= fifo, "limits read back");

    const int blocks = 64, threads = 128, nt = blocks * threads, k = 32;
    long long *dsums, *hsums = (long long *)malloc(nt * sizeof(long long));
    CHECK(cudaMalloc(&dsums, nt * sizeof(long long)));
    list_kernel<<<blocks, threads>>>(dsums, k);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hsums, dsums, nt * sizeof(long long), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int t = 0; t < nt; t++)
        ok = ok && hsums[t] == (long long)t * 1000 * k + (long long)k * (k - 1) / 2;
    expect(ok, "8192 threads x 32 device malloc'd list nodes, summed and freed");

    int *dints, *hints = (int *)malloc(nt * sizeof(int));
    CHECK(cudaMalloc(&dints, nt * sizeof(int)));
    new_delete_kernel<<<blocks, threads>>>(dints);
    CHECK(cudaMemcpy(hints, dints, nt * sizeof(int), cudaMemcpyDeviceToHost));
    ok = true;
    for (int t = 0; t < nt; t++)
        ok = ok && hints[t] == 16 * 7 + 120;
    expect(ok, "device new[] / delete[] with constructors");

    block_buffer_kernel<<<blocks, threads>>>(dsums);
    CHECK(cudaMemcpy(hsums, dsums, blocks * sizeof(long long), cudaMemcpyDeviceToHost));
    ok = true;
    for (int b = 0; b < blocks; b++) {
        long long first = (long long)b * threads;
        ok = ok && hsums[b] == first * threads + (long long)threads * (threads - 1) / 2;
    }
    expect(ok, "a block's buffer malloc'd by one thread, shared through shared memory");

    too_big_kernel<<<1, 1>>>(dints, heap * 2);
    int null_seen = 0;
    CHECK(cudaMemcpy(&null_seen, dints, sizeof(int), cudaMemcpyDeviceToHost));
    expect(null_seen == 1, "a malloc larger than the heap returns NULL");

    const int depth = 200, rthreads = 32; // 72-byte frames on sm_90: 14 KiB
    long long *drec, hrec[rthreads];
    int *scratch;
    CHECK(cudaMalloc(&drec, sizeof hrec));
    CHECK(cudaMalloc(&scratch, rthreads * 8 * sizeof(int)));
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, recursion_kernel));
    printf("recursive kernel's local size: %zu bytes\n", fa.localSizeBytes);
    recursion_kernel<<<1, rthreads>>>(drec, depth, scratch);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hrec, drec, sizeof hrec, cudaMemcpyDeviceToHost));
    long long want = 3;
    for (int n = 1; n <= depth; n++)
        want += n + (n & 7);
    printf("recursion of depth %d: %lld\n", depth, hrec[0]);
    ok = true;
    for (int t = 0; t < rthreads; t++)
        ok = ok && hrec[t] == want;
    expect(ok, "a recursion 200 frames deep within the larger stack");

    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(dsums));
    CHECK(cudaFree(dints));
    CHECK(cudaFree(drec));
    CHECK(cudaFree(scratch));
    free(hsums);
    free(hints);
    fprintf(stderr, "device_heap_limits: %.3f s\n", now_s() - t0);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "ALL PASSED", failures);
    return failures ? 1 : 0;
}

// batch_ops: CUDA's batched operations. cudaMemcpy3DBatchAsync moves a 32x8
// block of floats from a host buffer with rows of 64 into a CUDA array at
// (5, 2), out of it into packed device memory and back to the host within
// the call; cudaMemPrefetchBatchAsync and cudaMemDiscardAndPrefetchBatchAsync
// hint managed ranges before a kernel uses them (where the device has
// concurrent managed access: else the kernel runs unhinted, same output); cuStreamBatchMemOp (the driver's, through
// cudaGetDriverEntryPointByVersion) writes flags a wait in the same batch
// and a kernel after it depend on.
//
// stdout: deterministic results only.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include "test_util.h"

#define W 32
#define H 8
#define ROW 64

__global__ void add_flag(float *v, int n, const unsigned *flag)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v[i] += (float)*flag;
}

static cudaMemcpy3DOperand pointer_operand(void *p, size_t row)
{
    cudaMemcpy3DOperand o;
    memset(&o, 0, sizeof o);
    o.type = cudaMemcpyOperandTypePointer;
    o.op.ptr.ptr = p;
    o.op.ptr.rowLength = row;
    return o;
}

static cudaMemcpy3DOperand array_operand(cudaArray_t a, unsigned x, unsigned y)
{
    cudaMemcpy3DOperand o;
    memset(&o, 0, sizeof o);
    o.type = cudaMemcpyOperandTypeArray;
    o.op.array.array = a;
    o.op.array.offset.x = x;
    o.op.array.offset.y = y;
    return o;
}

static void copies(cudaStream_t s)
{
    static float src[H][ROW], back[H * W];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < ROW; x++)
            src[y][x] = (float)(y * 100 + x);
    cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &fmt, 64, 16));
    float *d;
    CHECK(cudaMalloc(&d, sizeof back));
    cudaMemcpy3DBatchOp ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].src = pointer_operand(src, ROW);
    ops[0].dst = array_operand(a, 5, 2);
    ops[0].extent = make_cudaExtent(W, H, 1);
    ops[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    ops[1].src = array_operand(a, 5, 2);
    ops[1].dst = pointer_operand(d, 0);
    ops[1].extent = make_cudaExtent(W, H, 1);
    ops[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    ops[2].src = pointer_operand(d, 0);
    ops[2].dst = pointer_operand(back, 0);
    ops[2].extent = make_cudaExtent(sizeof back, 1, 1);
    ops[2].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
    CHECK(cudaMemcpy3DBatchAsync(3, ops, 0, s));
    CHECK(cudaStreamSynchronize(s));
    double sum = 0;
    int same = 1;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            sum += back[y * W + x];
            same &= back[y * W + x] == src[y][x];
        }
    printf("3D batch: block through an array and device memory: %s, sum %.0f\n", same ? "same" : "DIFFERENT", sum);
    CHECK(cudaFreeArray(a));
    CHECK(cudaFree(d));
}

static void prefetches(cudaStream_t s)
{
    /* the batches need concurrent managed access (a GPU on another machine
     * has none): without it the kernel runs unhinted, as programs do */
    int concurrent = 0;
    CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
    fprintf(stderr, "concurrent managed access: %d\n", concurrent);
    const int n = 1 << 16;
    float *m;
    unsigned *flag;
    CHECK(cudaMallocManaged(&m, 2 * n * sizeof(float)));
    CHECK(cudaMallocManaged(&flag, sizeof *flag));
    for (int i = 0; i < 2 * n; i++)
        m[i] = (float)(i % 7);
    *flag = 3;
    void *ptrs[2] = {m, m + n};
    size_t sizes[2] = {n * sizeof(float), n * sizeof(float)}, first[1] = {0};
    cudaMemLocation gpu;
    memset(&gpu, 0, sizeof gpu);
    gpu.type = cudaMemLocationTypeDevice;
    gpu.id = 0;
    if (concurrent)
        CHECK(cudaMemPrefetchBatchAsync(ptrs, sizes, 2, &gpu, first, 1, 0, s));
    add_flag<<<64, 256, 0, s>>>(m, 2 * n, flag);
    CHECK(cudaStreamSynchronize(s));
    double sum = 0;
    for (int i = 0; i < 2 * n; i++)
        sum += m[i];
    printf("batched prefetches: a kernel after them sums %.0f\n", sum);
    if (concurrent)
        CHECK(cudaMemDiscardAndPrefetchBatchAsync(ptrs + 1, sizes + 1, 1, &gpu, first, 1, 0, s));
    CHECK(cudaStreamSynchronize(s));
    m[0] = 42; /* a discarded range is written again */
    printf("written after: %.0f\n", m[0]);
    CHECK(cudaFree(m));
    CHECK(cudaFree(flag));
}

static void mem_ops(cudaStream_t s)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion("cuStreamBatchMemOp", &fn, 12000, cudaEnableDefault, &q));
    CUresult (*batch)(CUstream, unsigned, CUstreamBatchMemOpParams *, unsigned) =
        (CUresult(*)(CUstream, unsigned, CUstreamBatchMemOpParams *, unsigned))fn;
    unsigned *flags;
    float *v;
    const int n = 4096;
    CHECK(cudaMalloc(&flags, 2 * sizeof(unsigned)));
    CHECK(cudaMemset(flags, 0, 2 * sizeof(unsigned)));
    CHECK(cudaMalloc(&v, n * sizeof(float)));
    CHECK(cudaMemset(v, 0, n * sizeof(float)));
    CUstreamBatchMemOpParams ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = (CUdeviceptr)flags;
    ops[0].writeValue.value = 5;
    ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[1].waitValue.address = (CUdeviceptr)flags;
    ops[1].waitValue.value = 5;
    ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    ops[2].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[2].writeValue.address = (CUdeviceptr)(flags + 1);
    ops[2].writeValue.value = 9;
    CUresult r = batch ? batch((CUstream)s, 3, ops, 0) : CUDA_ERROR_NOT_FOUND;
    printf("cuStreamBatchMemOp: %s\n", r == CUDA_SUCCESS ? "ok" : "FAILED");
    add_flag<<<16, 256, 0, s>>>(v, n, flags + 1);
    unsigned got[2];
    float first = -1;
    CHECK(cudaMemcpyAsync(got, flags, sizeof got, cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(&first, v + n - 1, sizeof first, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    printf("flags %u %u; the kernel after the batch added %.0f\n", got[0], got[1], first);
    CHECK(cudaFree(flags));
    CHECK(cudaFree(v));
}

int main(void)
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    copies(s);
    prefetches(s);
    mem_ops(s);
    CHECK(cudaStreamDestroy(s));
    printf("PASS batch_ops\n");
    return 0;
}

/*
 * cuStreamBatchMemOp: a batch of stream memory operations, enqueued in
 * order. Each goes as the single call it names (cuStreamWaitValue32_v2 and
 * its kin, carried and pipelined), in the batch's order on the same stream,
 * so the batch keeps its place in the stream and its operations theirs.
 * A memory barrier (CU_STREAM_MEM_OP_BARRIER, _v2 only) orders the memory
 * operations before it against those after it: the writes after one go
 * with their own barrier (CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER cleared).
 * Remote-write flushes name GPUDirect RDMA peers, which a VM's program does
 * not have: the virtual GPU reports CAN_FLUSH_REMOTE_WRITES 0 and they are
 * refused as the driver refuses them on such a device.
 */
#include "client.h"

#define MEMOP_MAX 256 /* the driver's documented limit: fewer than 256 */

/* The single calls, for the stream as given (_v2) or the per-thread one (_ptsz). */
struct memop_calls {
    CUresult (*wait32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
    CUresult (*wait64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
    CUresult (*write32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
    CUresult (*write64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
};

static const struct memop_calls by_stream = {cuStreamWaitValue32_v2, cuStreamWaitValue64_v2,
                                             cuStreamWriteValue32_v2, cuStreamWriteValue64_v2};
static const struct memop_calls per_thread = {cuStreamWaitValue32_v2_ptsz, cuStreamWaitValue64_v2_ptsz,
                                              cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue64_v2_ptsz};

/* Whether op can go: CUDA_SUCCESS, or why the whole batch is refused. */
static CUresult memop_check(const CUstreamBatchMemOpParams *op, int barriers)
{
    switch (op->operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64: return CUDA_SUCCESS;
    case CU_STREAM_MEM_OP_BARRIER:
        if (!barriers)
            return CUDA_ERROR_INVALID_VALUE; /* only the _v2 API has them */
        return op->memoryBarrier.flags == CU_STREAM_MEMORY_BARRIER_TYPE_SYS ||
                       op->memoryBarrier.flags == CU_STREAM_MEMORY_BARRIER_TYPE_GPU
                   ? CUDA_SUCCESS
                   : CUDA_ERROR_INVALID_VALUE;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES: return CUDA_ERROR_NOT_SUPPORTED;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult batch(CUstream stream, unsigned int count, const CUstreamBatchMemOpParams *ops,
                      unsigned int flags, const struct memop_calls *c, int barriers)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (count == 0 || count >= MEMOP_MAX || ops == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < count; i++) /* nothing is enqueued for a batch these refuse */
        if ((r = memop_check(&ops[i], barriers)) != CUDA_SUCCESS)
            return r;
    int fenced = 0; /* a barrier came: later writes keep their own */
    for (unsigned int i = 0; i < count && r == CUDA_SUCCESS; i++) {
        const CUstreamBatchMemOpParams *op = &ops[i];
        unsigned int wflags = op->writeValue.flags;
        if (fenced)
            wflags &= ~(unsigned int)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;
        switch (op->operation) {
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
            r = c->wait32(stream, op->waitValue.address, op->waitValue.value, op->waitValue.flags);
            break;
        case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            r = c->wait64(stream, op->waitValue.address, op->waitValue.value64, op->waitValue.flags);
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
            r = c->write32(stream, op->writeValue.address, op->writeValue.value, wflags);
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            r = c->write64(stream, op->writeValue.address, op->writeValue.value64, wflags);
            break;
        default: fenced = 1; break; /* a barrier: checked above */
        }
    }
    return r;
}

FLYT_EXPORT CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count,
                                           CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    return batch(stream, count, ops, flags, &by_stream, 1);
}
FLYT_EXPORT CUresult cuStreamBatchMemOp_v2_ptsz(CUstream stream, unsigned int count,
                                                CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    return batch(stream, count, ops, flags, &per_thread, 1);
}
/* The CUDA 8 ABI: the same operations, without barriers. */
FLYT_EXPORT CUresult cuStreamBatchMemOp(CUstream stream, unsigned int count,
                                        CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    return batch(stream, count, ops, flags, &by_stream, 0);
}
FLYT_EXPORT CUresult cuStreamBatchMemOp_ptsz(CUstream stream, unsigned int count,
                                             CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    return batch(stream, count, ops, flags, &per_thread, 0);
}

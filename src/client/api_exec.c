/*
 * Execution control: <<<>>> configuration, kernel launches (one pipelined
 * message each), function attributes and occupancy.
 */
#include "client.h"

#include <stdlib.h>
#include <string.h>

/* ---- <<<grid, block, shmem, stream>>> ---- */

struct call_config {
    dim3 grid, block;
    size_t shared_mem;
    void *stream;
};

#define CONFIG_DEPTH 16
static _Thread_local struct call_config config_stack[CONFIG_DEPTH];
static _Thread_local int config_depth;

FLYT_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared_mem,
                                                 struct CUstream_st *stream)
{
    if (config_depth >= CONFIG_DEPTH)
        return 1;
    config_stack[config_depth++] = (struct call_config){grid, block, shared_mem, stream};
    return 0;
}

FLYT_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared_mem,
                                                   void *stream)
{
    if (config_depth <= 0)
        return cudaErrorMissingConfiguration;
    struct call_config *c = &config_stack[--config_depth];
    *grid = c->grid;
    *block = c->block;
    *shared_mem = c->shared_mem;
    *(void **)stream = c->stream;
    return cudaSuccess;
}

/* ---- launches ---- */

/* The checks CUDA makes before a launch reaches the GPU, made here so that a
 * pipelined launch still reports them at once, as CUDA does. CUDA 13 reports
 * every one of them as cudaErrorInvalidValue (measured against native). */
static cudaError_t check_config(const struct flyt_function *f, dim3 grid, dim3 block,
                                size_t shared_mem)
{
    const struct cudaDeviceProp *p = flyt_device_props();
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0)
        return cudaErrorInvalidValue;
    if (threads > (uint64_t)p->maxThreadsPerBlock || block.x > (unsigned)p->maxThreadsDim[0] ||
        block.y > (unsigned)p->maxThreadsDim[1] || block.z > (unsigned)p->maxThreadsDim[2])
        return cudaErrorInvalidValue;
    if (grid.x > (unsigned)p->maxGridSize[0] || grid.y > (unsigned)p->maxGridSize[1] ||
        grid.z > (unsigned)p->maxGridSize[2])
        return cudaErrorInvalidValue;
    if (shared_mem > f->max_dynamic_smem)
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

static cudaError_t launch(struct flyt_function *f, dim3 grid, dim3 block, void **args,
                          size_t shared_mem, cudaStream_t stream, const cudaLaunchAttribute *attrs,
                          unsigned attr_count)
{
    cudaError_t err = flyt_sticky_error();
    if (err != cudaSuccess)
        return err;
    err = check_config(f, grid, block, shared_mem);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    if (attr_count > FLYT_MAX_LAUNCH_ATTRS || shared_mem > UINT32_MAX)
        return flyt_set_error(cudaErrorInvalidValue);
    if (f->param_count > 0 && args == NULL)
        return flyt_set_error(cudaErrorInvalidValue);

    char small[1024];
    char *params = f->param_bytes <= sizeof small ? small : malloc(f->param_bytes);
    if (params == NULL)
        return flyt_set_error(cudaErrorMemoryAllocation);
    memset(params, 0, f->param_bytes);
    for (uint32_t i = 0; i < f->param_count; i++)
        memcpy(params + f->params[i].offset, args[i], f->params[i].size);

    flyt_launch_attr wire_attrs[FLYT_MAX_LAUNCH_ATTRS];
    _Static_assert(sizeof(cudaLaunchAttribute) == sizeof(flyt_launch_attr), "attribute layout");
    if (attr_count)
        memcpy(wire_attrs, attrs, attr_count * sizeof *wire_attrs);

    flyt_req_launch req = {
        .func = f->server_id,
        .stream = flyt_stream_id(stream),
        .grid = {grid.x, grid.y, grid.z},
        .block = {block.x, block.y, block.z},
        .shared_mem = (uint32_t)shared_mem,
        .attr_count = attr_count,
        .param_bytes = f->param_bytes,
    };
    struct iovec data[2] = {{wire_attrs, attr_count * sizeof *wire_attrs},
                            {params, f->param_bytes}};
    err = flyt_send_async(FLYT_OP_LAUNCH, &req, sizeof req, data, 2);
    if (params != small)
        free(params);
    return flyt_set_error(err);
}

static cudaError_t launch_by_pointer(const void *func, dim3 grid, dim3 block, void **args,
                                     size_t shared_mem, cudaStream_t stream,
                                     const cudaLaunchAttribute *attrs, unsigned attr_count)
{
    struct flyt_function *f;
    cudaError_t err = flyt_function_resolve(func, &f);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    return launch(f, grid, block, args, shared_mem, stream, attrs, attr_count);
}

FLYT_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                                           size_t shared_mem, cudaStream_t stream)
{
    struct flyt_function *f;
    cudaError_t err = flyt_kernel_ready(kernel, &f);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    return launch(f, grid, block, args, shared_mem, stream, NULL, 0);
}

FLYT_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block,
                                                void **args, size_t shared_mem, cudaStream_t stream)
{
    return __cudaLaunchKernel(kernel, grid, block, args, shared_mem, flyt_ptsz(stream));
}

FLYT_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                                         size_t shared_mem, cudaStream_t stream)
{
    return launch_by_pointer(func, grid, block, args, shared_mem, stream, NULL, 0);
}

FLYT_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args,
                                              size_t shared_mem, cudaStream_t stream)
{
    return cudaLaunchKernel(func, grid, block, args, shared_mem, flyt_ptsz(stream));
}

FLYT_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                            void **args)
{
    if (config == NULL || (config->numAttrs && config->attrs == NULL))
        return flyt_set_error(cudaErrorInvalidValue);
    return launch_by_pointer(func, config->gridDim, config->blockDim, args,
                             config->dynamicSmemBytes, config->stream, config->attrs,
                             config->numAttrs);
}

FLYT_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config,
                                                 const void *func, void **args)
{
    if (config == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    cudaLaunchConfig_t c = *config;
    c.stream = flyt_ptsz(c.stream);
    return cudaLaunchKernelExC(&c, func, args);
}

FLYT_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block,
                                                    void **args, size_t shared_mem,
                                                    cudaStream_t stream)
{
    cudaLaunchAttribute coop;
    memset(&coop, 0, sizeof coop);
    coop.id = cudaLaunchAttributeCooperative;
    coop.val.cooperative = 1;
    return launch_by_pointer(func, grid, block, args, shared_mem, stream, &coop, 1);
}

FLYT_EXPORT cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 grid, dim3 block,
                                                         void **args, size_t shared_mem,
                                                         cudaStream_t stream)
{
    return cudaLaunchCooperativeKernel(func, grid, block, args, shared_mem, flyt_ptsz(stream));
}

/* ---- function attributes ---- */

static cudaError_t func_attr(struct flyt_function *f, int attr, int *value)
{
    flyt_req_func_attr req = {.func = f->server_id, .attr = attr};
    flyt_rep_i32 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    cudaError_t err = flyt_call(FLYT_OP_FUNC_GET_ATTR, &req, sizeof req, NULL, 0, &sink);
    *value = rep.value;
    return err;
}

FLYT_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    if (attr == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    struct flyt_function *f;
    cudaError_t err = flyt_function_resolve(func, &f);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    memset(attr, 0, sizeof *attr);
    int v[16] = {0};
    for (int a = 0; a < 16 && err == cudaSuccess; a++)
        err = func_attr(f, a, &v[a]);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    attr->maxThreadsPerBlock = v[0] /* CUfunction_attribute order */;
    attr->sharedSizeBytes = (size_t)v[1];
    attr->constSizeBytes = (size_t)v[2];
    attr->localSizeBytes = (size_t)v[3];
    attr->numRegs = v[4];
    attr->ptxVersion = v[5];
    attr->binaryVersion = v[6];
    attr->cacheModeCA = v[7];
    attr->maxDynamicSharedSizeBytes = v[8];
    attr->preferredShmemCarveout = v[9];
    attr->clusterDimMustBeSet = v[10];
    attr->requiredClusterWidth = v[11];
    attr->requiredClusterHeight = v[12];
    attr->requiredClusterDepth = v[13];
    attr->nonPortableClusterSizeAllowed = v[14];
    attr->clusterSchedulingPolicyPreference = v[15];
    return cudaSuccess;
}

static cudaError_t func_set(const void *func, uint16_t op, int attr, int value)
{
    struct flyt_function *f;
    cudaError_t err = flyt_function_resolve(func, &f);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    flyt_req_func_attr req = {.func = f->server_id, .attr = attr, .value = value};
    err = flyt_call(op, &req, sizeof req, NULL, 0, NULL);
    if (err == cudaSuccess && op == FLYT_OP_FUNC_SET_ATTR &&
        attr == cudaFuncAttributeMaxDynamicSharedMemorySize)
        f->max_dynamic_smem = (uint32_t)value;
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    return func_set(func, FLYT_OP_FUNC_SET_ATTR, (int)attr, value);
}

FLYT_EXPORT cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache config)
{
    return func_set(func, FLYT_OP_FUNC_SET_CACHE, 0, (int)config);
}

/* Bank size is fixed on every GPU CUDA 13 supports; CUDA itself ignores it. */
FLYT_EXPORT cudaError_t cudaFuncSetSharedMemConfig(const void *func, enum cudaSharedMemConfig config)
{
    struct flyt_function *f;
    (void)config;
    return flyt_set_error(flyt_function_resolve(func, &f));
}

FLYT_EXPORT cudaError_t cudaFuncGetName(const char **name, const void *func)
{
    struct flyt_function *f;
    if (name == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    cudaError_t err = flyt_function_resolve(func, &f);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    *name = f->name;
    return cudaSuccess;
}

FLYT_EXPORT cudaError_t cudaFuncGetParamInfo(const void *func, size_t index, size_t *offset,
                                             size_t *size)
{
    struct flyt_function *f;
    cudaError_t err = flyt_function_resolve(func, &f);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    if (index >= f->param_count)
        return flyt_set_error(cudaErrorInvalidValue);
    if (offset)
        *offset = f->params[index].offset;
    if (size)
        *size = f->params[index].size;
    return cudaSuccess;
}

/* ---- occupancy ---- */

static cudaError_t occupancy(uint16_t op, const void *func, int block_size, int num_blocks,
                             size_t dyn_smem, unsigned flags, uint64_t *out)
{
    struct flyt_function *f;
    cudaError_t err = flyt_function_resolve(func, &f);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    flyt_req_occupancy req = {.func = f->server_id, .block_size = block_size,
                              .num_blocks = num_blocks, .dyn_smem = dyn_smem, .flags = flags};
    flyt_rep_u64 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    err = flyt_call(op, &req, sizeof req, NULL, 0, &sink);
    *out = rep.value;
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int *num_blocks, const void *func, int block_size, size_t dyn_smem, unsigned flags)
{
    if (num_blocks == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    uint64_t n = 0;
    cudaError_t err = occupancy(FLYT_OP_OCCUPANCY, func, block_size, 0, dyn_smem, flags, &n);
    *num_blocks = (int)n;
    return err;
}

FLYT_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *num_blocks,
                                                                      const void *func,
                                                                      int block_size,
                                                                      size_t dyn_smem)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num_blocks, func, block_size,
                                                                  dyn_smem, 0);
}

FLYT_EXPORT cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *smem, const void *func,
                                                                  int num_blocks, int block_size)
{
    if (smem == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    uint64_t n = 0;
    cudaError_t err = occupancy(FLYT_OP_OCCUPANCY_SMEM, func, block_size, num_blocks, 0, 0, &n);
    *smem = (size_t)n;
    return err;
}

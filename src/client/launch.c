/*
 * Kernel launches (one pipelined message each), function attributes and
 * occupancy.
 *
 * A launch is checked here as the driver checks it before it reaches the
 * GPU, so a pipelined launch still fails at once where CUDA's would; the few
 * launches only the driver can judge wait for its answer (launch_needs_answer);
 * what only the GPU can find (a fault) surfaces at the next synchronising call.
 */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static CUresult check_config(const struct flyt_function *f, const unsigned grid[3],
                             const unsigned block[3], unsigned shared_mem)
{
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (threads == 0 || grid[0] == 0 || grid[1] == 0 || grid[2] == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (threads > (uint64_t)f->attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] ||
        block[0] > (unsigned)flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X) ||
        block[1] > (unsigned)flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y) ||
        block[2] > (unsigned)flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z))
        return CUDA_ERROR_INVALID_VALUE;
    if (grid[0] > (unsigned)flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X) ||
        grid[1] > (unsigned)flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y) ||
        grid[2] > (unsigned)flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z))
        return CUDA_ERROR_INVALID_VALUE;
    if (shared_mem > (unsigned)f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] &&
        shared_mem + (unsigned)f->attrs[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES] >
            (unsigned)flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* The parameter block: from kernelParams (one pointer per parameter, laid
 * out at the offsets the server reported) or from extra's ready buffer. */
static CUresult pack_params(const struct flyt_function *f, void **args, void **extra, char *buf)
{
    memset(buf, 0, f->param_bytes);
    if (args != NULL) {
        for (uint32_t i = 0; i < f->param_count; i++)
            memcpy(buf + f->params[i].offset, args[i], f->params[i].size);
        return CUDA_SUCCESS;
    }
    if (extra == NULL)
        return f->param_count == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    const void *data = NULL;
    size_t size = 0;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            data = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
            size = *(size_t *)extra[i + 1];
        else
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (f->param_bytes && (data == NULL || size < f->param_bytes))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(buf, data, f->param_bytes);
    return CUDA_SUCCESS;
}

CUresult flyt_launch_pack(const void *handle, const unsigned grid[3], const unsigned block[3],
                          unsigned shared_mem, void **args, void **extra, struct flyt_packed *out)
{
    struct flyt_function *f;
    CUresult r;
    out->params = out->small;
    if ((r = flyt_function_use(handle, &f, &out->func)) != CUDA_SUCCESS)
        return flyt_trace("a launch", r);
    if ((r = check_config(f, grid, block, shared_mem)) != CUDA_SUCCESS)
        return flyt_trace("a launch's configuration", r);
    if (args != NULL && extra != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    out->bytes = f->param_bytes;
    if (f->param_bytes > sizeof out->small && (out->params = malloc(f->param_bytes)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = pack_params(f, args, extra, out->params);
    if (r == CUDA_SUCCESS)
        r = flyt_pinned_remote_scan(out->params, out->bytes);
    if (r != CUDA_SUCCESS)
        flyt_packed_free(out);
    return r;
}

void flyt_packed_free(struct flyt_packed *p)
{
    if (p->params != p->small)
        free(p->params);
    p->params = p->small;
}

/* Whether the driver may refuse the launch for what only the GPU knows (how
 * many blocks can be co-resident for a cooperative launch; whether clusters
 * tile the grid, or fit in a GPC beyond the portable 8 blocks): such a launch
 * waits for the server's answer, so that its error comes from the launch
 * call as CUDA's does. Everyday launches stay pipelined. */
static int launch_needs_answer(const void *handle, const unsigned grid[3],
                               const CUlaunchAttribute *attrs, unsigned attr_count)
{
    const struct flyt_function *f = flyt_function_from(handle);
    unsigned cluster[3] = {1, 1, 1};
    if (f != NULL && f->attrs[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] > 0) {
        cluster[0] = (unsigned)f->attrs[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH];
        cluster[1] = (unsigned)f->attrs[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT];
        cluster[2] = (unsigned)f->attrs[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH];
    }
    for (unsigned i = 0; i < attr_count; i++) {
        if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && attrs[i].value.cooperative)
            return 1;
        if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            cluster[0] = attrs[i].value.clusterDim.x;
            cluster[1] = attrs[i].value.clusterDim.y;
            cluster[2] = attrs[i].value.clusterDim.z;
        }
    }
    uint64_t blocks = 1;
    for (int d = 0; d < 3; d++) {
        if (cluster[d] == 0 || grid[d] % cluster[d] != 0)
            return 1;
        blocks *= cluster[d];
    }
    return blocks > 8;
}

static CUresult launch(const void *handle, const unsigned grid[3], const unsigned block[3],
                       unsigned shared_mem, CUstream stream, int per_thread, void **args,
                       void **extra, const CUlaunchAttribute *attrs, unsigned attr_count)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (attr_count > FLYT_MAX_LAUNCH_ATTRS || (attr_count && attrs == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    struct flyt_packed p;
    if ((r = flyt_launch_pack(handle, grid, block, shared_mem, args, extra, &p)) != CUDA_SUCCESS)
        return r;
    _Static_assert(sizeof(CUlaunchAttribute) == sizeof(flyt_launch_attr), "attribute layout");
    flyt_req_launch req = {
        .func = p.func,
        .stream = flyt_stream_wire(stream, per_thread),
        .grid = {grid[0], grid[1], grid[2]},
        .block = {block[0], block[1], block[2]},
        .shared_mem = shared_mem,
        .attr_count = attr_count,
        .param_bytes = p.bytes,
    };
    struct iovec data[2] = {{(void *)attrs, attr_count * sizeof(flyt_launch_attr)},
                            {p.params, p.bytes}};
    if (launch_needs_answer(handle, grid, attrs, attr_count))
        r = flyt_call(FLYT_OP_LAUNCH, &req, sizeof req, data, 2, NULL);
    else
        r = flyt_send_async(FLYT_OP_LAUNCH, &req, sizeof req, data, 2);
    flyt_packed_free(&p);
    return r;
}

FLYT_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                    unsigned by, unsigned bz, unsigned smem, CUstream s, void **args,
                                    void **extra)
{
    return launch(f, (unsigned[]){gx, gy, gz}, (unsigned[]){bx, by, bz}, smem, s, 0, args, extra,
                  NULL, 0);
}
FLYT_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                         unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                         CUstream s, void **args, void **extra)
{
    return launch(f, (unsigned[]){gx, gy, gz}, (unsigned[]){bx, by, bz}, smem, s, 1, args, extra,
                  NULL, 0);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **args, void **extra,
                          int per_thread)
{
    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, (unsigned[]){c->gridDimX, c->gridDimY, c->gridDimZ},
                  (unsigned[]){c->blockDimX, c->blockDimY, c->blockDimZ}, c->sharedMemBytes,
                  c->hStream, per_thread, args, extra, c->attrs, c->numAttrs);
}
FLYT_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **args, void **extra)
{
    return launch_ex(c, f, args, extra, 0);
}
FLYT_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **args,
                                           void **extra)
{
    return launch_ex(c, f, args, extra, 1);
}

static CUresult launch_cooperative(CUfunction f, const unsigned grid[3], const unsigned block[3],
                                   unsigned smem, CUstream s, void **args, int per_thread)
{
    CUlaunchAttribute coop;
    memset(&coop, 0, sizeof coop);
    coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    coop.value.cooperative = 1;
    return launch(f, grid, block, smem, s, per_thread, args, NULL, &coop, 1);
}
FLYT_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                               unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                               CUstream s, void **args)
{
    return launch_cooperative(f, (unsigned[]){gx, gy, gz}, (unsigned[]){bx, by, bz}, smem, s, args, 0);
}
FLYT_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                    unsigned gz, unsigned bx, unsigned by,
                                                    unsigned bz, unsigned smem, CUstream s,
                                                    void **args)
{
    return launch_cooperative(f, (unsigned[]){gx, gy, gz}, (unsigned[]){bx, by, bz}, smem, s, args, 1);
}

/* ---- function and kernel attributes ---- */

static CUresult func_attr_get(int *value, CUfunction_attribute attr, const void *handle)
{
    if (value == NULL || (int)attr < 0 || (int)attr >= CU_FUNC_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    struct flyt_function *f;
    uint64_t id;
    CUresult r = flyt_function_use(handle, &f, &id);
    if (r == CUDA_SUCCESS)
        *value = __atomic_load_n(&f->attrs[attr], __ATOMIC_RELAXED);
    return r;
}

static CUresult func_attr_set(CUfunction_attribute attr, int value, const void *handle)
{
    if ((int)attr < 0 || (int)attr >= CU_FUNC_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    struct flyt_function *f;
    uint64_t id;
    CUresult r = flyt_function_use(handle, &f, &id);
    if (r != CUDA_SUCCESS)
        return r;
    flyt_req_func_attr req = {.func = id, .attr = (int32_t)attr, .value = value};
    r = flyt_call(FLYT_OP_FUNC_SET_ATTR, &req, sizeof req, NULL, 0, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    /* the snapshot answers cuFuncGetAttribute: keep the driver's value, which
     * may differ from the one given (rare calls: one more round trip) */
    int32_t now = value;
    flyt_rep_i32 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    if (flyt_call(FLYT_OP_FUNC_GET_ATTR, &req, sizeof req, NULL, 0, &sink) == CUDA_SUCCESS)
        now = rep.value;
    __atomic_store_n(&f->attrs[attr], now, __ATOMIC_RELAXED);
    __atomic_fetch_add(&f->settings, 1, __ATOMIC_RELAXED); /* occupancy answers change */
    return r;
}

static CUresult func_cache_set(const void *handle, CUfunc_cache config)
{
    struct flyt_function *f;
    uint64_t id;
    CUresult r = flyt_function_use(handle, &f, &id);
    if (r != CUDA_SUCCESS)
        return r;
    flyt_req_func_attr req = {.func = id, .value = (int32_t)config};
    r = flyt_call(FLYT_OP_FUNC_SET_CACHE, &req, sizeof req, NULL, 0, NULL);
    if (r == CUDA_SUCCESS)
        __atomic_fetch_add(&f->settings, 1, __ATOMIC_RELAXED);
    return r;
}

FLYT_EXPORT CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attr, CUfunction f)
{
    return func_attr_get(value, attr, f);
}
FLYT_EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int value)
{
    return func_attr_set(attr, value, f);
}
FLYT_EXPORT CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config)
{
    return func_cache_set(f, config);
}
FLYT_EXPORT CUresult cuFuncSetSharedMemConfig(CUfunction f, CUsharedconfig config)
{
    /* deprecated: the bank size is fixed on every GPU CUDA 13 runs, and the
     * driver accepts any valid setting and changes nothing */
    if (flyt_function_from(f) == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return (unsigned)config <= CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_SUCCESS
                                                                         : CUDA_ERROR_INVALID_VALUE;
}
FLYT_EXPORT CUresult cuKernelGetAttribute(int *value, CUfunction_attribute attr, CUkernel k,
                                          CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    return r != CUDA_SUCCESS ? r : func_attr_get(value, attr, k);
}
FLYT_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attr, int value, CUkernel k,
                                          CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    return r != CUDA_SUCCESS ? r : func_attr_set(attr, value, k);
}
FLYT_EXPORT CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache config, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    return r != CUDA_SUCCESS ? r : func_cache_set(k, config);
}

/* ---- occupancy: asked once per (function and its settings, block, shared
 * memory, flags) and share (a live resize changes the GPU under it) ---- */

/* The share's generation, which every cached occupancy answer was given for. */
static uint64_t share_now(void)
{
    int sms;
    uint64_t total;
    return flyt_device_share(&sms, &total);
}

#define OCC_SLOTS 1024
struct occ_entry {
    uint64_t func;
    uint32_t settings; /* the function's, when asked */
    uint64_t share;    /* flyt_device_share's generation, when asked */
    int block;
    unsigned flags;
    uint64_t smem;
    int blocks;
};
static struct {
    pthread_mutex_t lock;
    struct occ_entry e[OCC_SLOTS];
} occ = {.lock = FLYT_MUTEX_INITIALIZER};

static size_t occ_slot(uint64_t func, int block, uint64_t smem, unsigned flags)
{
    uint64_t h = func * 0x9e3779b97f4a7c15ull ^ (uint64_t)block * 0xff51afd7ed558ccdull ^
                 smem * 0xc4ceb9fe1a85ec53ull ^ flags;
    return (size_t)(h >> 54) % OCC_SLOTS;
}

static CUresult max_active_blocks(int *blocks, struct flyt_function *f, int block, size_t smem,
                                  unsigned flags)
{
    uint64_t id;
    CUresult r = flyt_function_ready(f, &id);
    if (r != CUDA_SUCCESS)
        return r;
    size_t slot = occ_slot(id, block, smem, flags);
    uint32_t settings = __atomic_load_n(&f->settings, __ATOMIC_RELAXED);
    uint64_t share = share_now();
    pthread_mutex_lock(&occ.lock);
    struct occ_entry e = occ.e[slot];
    pthread_mutex_unlock(&occ.lock);
    if (e.func == id && e.settings == settings && e.share == share && e.block == block &&
        e.smem == smem && e.flags == flags) {
        *blocks = e.blocks;
        return CUDA_SUCCESS;
    }
    flyt_req_occupancy req = {.func = id, .block_size = block, .dyn_smem = smem, .flags = flags};
    uint64_t n = 0;
    r = flyt_call_u64(FLYT_OP_OCCUPANCY, &req, sizeof req, &n);
    if (r != CUDA_SUCCESS)
        return r;
    *blocks = (int)n;
    pthread_mutex_lock(&occ.lock);
    occ.e[slot] = (struct occ_entry){id, settings, share, block, flags, smem, (int)n};
    pthread_mutex_unlock(&occ.lock);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *blocks, CUfunction func,
                                                                         int block, size_t smem,
                                                                         unsigned int flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    struct flyt_function *f = flyt_function_from(func);
    if (blocks == NULL || block <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    return f ? max_active_blocks(blocks, f, block, smem, flags) : CUDA_ERROR_INVALID_HANDLE;
}

FLYT_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction func,
                                                                 int block, size_t smem)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, block, smem, 0);
}

/* The block size with the most resident threads per SM, trying every
 * multiple of the warp size, as the driver does. */
FLYT_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *min_grid, int *block_size,
                                                               CUfunction func,
                                                               CUoccupancyB2DSize smem_of_block,
                                                               size_t smem, int limit,
                                                               unsigned int flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (min_grid == NULL || block_size == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct flyt_function *f;
    uint64_t id;
    if ((r = flyt_function_use(func, &f, &id)) != CUDA_SUCCESS)
        return r;
    int warp = flyt_device_attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    int most = f->attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK];
    if (limit > 0 && limit < most)
        most = limit;
    int best_threads = 0, best_block = 0, best_blocks = 0;
    for (int b = (most / warp) * warp; b > 0 && r == CUDA_SUCCESS; b -= warp) {
        int n = 0;
        r = max_active_blocks(&n, f, b, smem_of_block ? smem_of_block(b) : smem, flags);
        if (r == CUDA_SUCCESS && n * b > best_threads) {
            best_threads = n * b;
            best_block = b;
            best_blocks = n;
        }
    }
    if (r != CUDA_SUCCESS)
        return r;
    *block_size = best_block;
    *min_grid = best_blocks * flyt_device_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block_size, CUfunction func,
                                                      CUoccupancyB2DSize smem_of_block, size_t smem,
                                                      int limit)
{
    return cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid, block_size, func, smem_of_block,
                                                     smem, limit, 0);
}

FLYT_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *smem, CUfunction func,
                                                             int blocks, int block)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (smem == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct flyt_function *f;
    uint64_t id;
    if ((r = flyt_function_use(func, &f, &id)) != CUDA_SUCCESS)
        return r;
    flyt_req_occupancy req = {.func = id, .block_size = block, .num_blocks = blocks};
    uint64_t v = 0;
    r = flyt_call_u64(FLYT_OP_OCCUPANCY_SMEM, &req, sizeof req, &v);
    if (r == CUDA_SUCCESS)
        *smem = (size_t)v;
    return r;
}

/* Cluster questions depend on the whole launch configuration and the
 * function's attributes, and on nothing else: each answer is kept, under a
 * 128-bit digest of all of them (cuBLASLt asks dozens of times per matmul). */
#define CLUSTER_SLOTS 512
struct cluster_key {
    uint64_t a, b;
};
static struct {
    pthread_mutex_t lock;
    struct cluster_key key[CLUSTER_SLOTS];
    int value[CLUSTER_SLOTS];
} cluster_cache = {.lock = FLYT_MUTEX_INITIALIZER};

static void digest(struct cluster_key *k, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        k->a = (k->a ^ b[i]) * 0x100000001b3ull;                  /* FNV-1a */
        k->b = (k->b + b[i] + 1) * 0x9e3779b97f4a7c15ull ^ (k->b >> 29); /* an unrelated mix */
    }
}

static void cluster_key_of(struct cluster_key *k, const flyt_req_launch *req,
                           const struct iovec *attrs, const struct flyt_function *f)
{
    *k = (struct cluster_key){0xcbf29ce484222325ull, 0x6a09e667f3bcc909ull};
    digest(k, req, sizeof *req);
    digest(k, attrs->iov_base, attrs->iov_len);
    digest(k, f->attrs, sizeof f->attrs);
    uint32_t settings = __atomic_load_n(&f->settings, __ATOMIC_RELAXED);
    digest(k, &settings, sizeof settings);
    uint64_t share = share_now();
    digest(k, &share, sizeof share);
}

static int cluster_cached(const struct cluster_key *k, int *value)
{
    size_t slot = k->a % CLUSTER_SLOTS;
    pthread_mutex_lock(&cluster_cache.lock);
    int hit = cluster_cache.key[slot].a == k->a && cluster_cache.key[slot].b == k->b;
    if (hit)
        *value = cluster_cache.value[slot];
    pthread_mutex_unlock(&cluster_cache.lock);
    return hit;
}

static void cluster_remember(const struct cluster_key *k, int value)
{
    size_t slot = k->a % CLUSTER_SLOTS;
    pthread_mutex_lock(&cluster_cache.lock);
    cluster_cache.key[slot] = *k;
    cluster_cache.value[slot] = value;
    pthread_mutex_unlock(&cluster_cache.lock);
}

static CUresult cluster_query(int *count, CUfunction func, const CUlaunchConfig *config,
                              unsigned what)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (count == NULL || config == NULL || config->numAttrs > FLYT_MAX_LAUNCH_ATTRS ||
        (config->numAttrs && config->attrs == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    struct flyt_function *f;
    uint64_t id;
    if ((r = flyt_function_use(func, &f, &id)) != CUDA_SUCCESS)
        return r;
    flyt_req_launch req = {
        .func = id,
        .grid = {config->gridDimX, config->gridDimY, config->gridDimZ},
        .block = {config->blockDimX, config->blockDimY, config->blockDimZ},
        .shared_mem = config->sharedMemBytes,
        .attr_count = config->numAttrs,
        .pad = what,
    };
    struct iovec data = {config->attrs, config->numAttrs * sizeof(flyt_launch_attr)};
    struct cluster_key key;
    cluster_key_of(&key, &req, &data, f);
    if (cluster_cached(&key, count))
        return CUDA_SUCCESS;
    flyt_rep_i32 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_OCCUPANCY_CLUSTER, &req, sizeof req, &data, 1, &sink);
    if (r == CUDA_SUCCESS) {
        *count = rep.value;
        cluster_remember(&key, rep.value);
    }
    return r;
}

FLYT_EXPORT CUresult cuOccupancyMaxActiveClusters(int *clusters, CUfunction func,
                                                  const CUlaunchConfig *config)
{
    return cluster_query(clusters, func, config, FLYT_CLUSTER_MAX_ACTIVE);
}

FLYT_EXPORT CUresult cuOccupancyMaxPotentialClusterSize(int *size, CUfunction func,
                                                        const CUlaunchConfig *config)
{
    return cluster_query(size, func, config, FLYT_CLUSTER_MAX_SIZE);
}

/* ---- tensor maps: encoded by the driver beside the GPU ---- */

static CUresult tensor_map_call(CUtensorMap *map, flyt_req_tensor_map *req)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (map == NULL || req->rank > FLYT_TMAP_RANK || (req->kind != FLYT_TMAP_REPLACE && req->rank == 0))
        return CUDA_ERROR_INVALID_VALUE;
    flyt_rep_tensor_map rep;
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_TENSOR_MAP, req, sizeof *req, NULL, 0, &sink);
    _Static_assert(sizeof rep.map == sizeof(CUtensorMap), "tensor map size");
    if (r == CUDA_SUCCESS)
        memcpy(map, rep.map, sizeof rep.map);
    return r;
}

/* The arrays every encoding takes: dimensions, strides (one fewer) and
 * element strides, each up to rank entries. */
static CUresult tensor_map_arrays(flyt_req_tensor_map *req, const cuuint64_t *dim,
                                  const cuuint64_t *strides, const cuuint32_t *elem_strides)
{
    if (req->rank == 0 || req->rank > FLYT_TMAP_RANK || dim == NULL || elem_strides == NULL ||
        (req->rank > 1 && strides == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    for (uint32_t i = 0; i < req->rank; i++) {
        req->global_dim[i] = dim[i];
        req->element_strides[i] = elem_strides[i];
        if (i + 1 < req->rank)
            req->global_strides[i] = strides[i];
    }
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                                            void *addr, const cuuint64_t *dim,
                                            const cuuint64_t *strides, const cuuint32_t *box,
                                            const cuuint32_t *elem_strides,
                                            CUtensorMapInterleave interleave,
                                            CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                            CUtensorMapFloatOOBfill oob)
{
    flyt_req_tensor_map req = {.kind = FLYT_TMAP_TILED, .data_type = type, .rank = rank,
                               .interleave = interleave, .swizzle = swizzle, .l2_promotion = l2,
                               .oob_fill = oob, .global_address = (uint64_t)(uintptr_t)addr};
    CUresult r = tensor_map_arrays(&req, dim, strides, elem_strides);
    if (r != CUDA_SUCCESS || box == NULL)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    for (uint32_t i = 0; i < rank; i++)
        req.box_dim[i] = box[i];
    return tensor_map_call(map, &req);
}

FLYT_EXPORT CUresult cuTensorMapEncodeIm2col(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                                             void *addr, const cuuint64_t *dim,
                                             const cuuint64_t *strides, const int *lower,
                                             const int *upper, cuuint32_t channels,
                                             cuuint32_t pixels, const cuuint32_t *elem_strides,
                                             CUtensorMapInterleave interleave,
                                             CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                             CUtensorMapFloatOOBfill oob)
{
    flyt_req_tensor_map req = {.kind = FLYT_TMAP_IM2COL, .data_type = type, .rank = rank,
                               .interleave = interleave, .swizzle = swizzle, .l2_promotion = l2,
                               .oob_fill = oob, .global_address = (uint64_t)(uintptr_t)addr,
                               .channels_per_pixel = channels, .pixels_per_column = pixels};
    CUresult r = tensor_map_arrays(&req, dim, strides, elem_strides);
    if (r != CUDA_SUCCESS || rank < 3 || lower == NULL || upper == NULL)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    for (uint32_t i = 0; i + 2 < rank; i++) {
        req.lower_corner[i] = lower[i];
        req.upper_corner[i] = upper[i];
    }
    return tensor_map_call(map, &req);
}

FLYT_EXPORT CUresult cuTensorMapEncodeIm2colWide(CUtensorMap *map, CUtensorMapDataType type,
                                                 cuuint32_t rank, void *addr, const cuuint64_t *dim,
                                                 const cuuint64_t *strides, int lower, int upper,
                                                 cuuint32_t channels, cuuint32_t pixels,
                                                 const cuuint32_t *elem_strides,
                                                 CUtensorMapInterleave interleave,
                                                 CUtensorMapIm2ColWideMode mode,
                                                 CUtensorMapSwizzle swizzle,
                                                 CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    flyt_req_tensor_map req = {.kind = FLYT_TMAP_IM2COL_WIDE, .data_type = type, .rank = rank,
                               .interleave = interleave, .swizzle = swizzle, .l2_promotion = l2,
                               .oob_fill = oob, .wide_mode = mode,
                               .global_address = (uint64_t)(uintptr_t)addr,
                               .channels_per_pixel = channels, .pixels_per_column = pixels,
                               .lower_corner = {lower}, .upper_corner = {upper}};
    CUresult r = tensor_map_arrays(&req, dim, strides, elem_strides);
    return r != CUDA_SUCCESS ? r : tensor_map_call(map, &req);
}

FLYT_EXPORT CUresult cuTensorMapReplaceAddress(CUtensorMap *map, void *addr)
{
    if (map == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_tensor_map req = {.kind = FLYT_TMAP_REPLACE, .global_address = (uint64_t)(uintptr_t)addr};
    memcpy(req.map, map, sizeof req.map);
    return tensor_map_call(map, &req);
}

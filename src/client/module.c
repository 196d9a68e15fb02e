/*
 * Fatbinaries, kernels and device variables as the application registers
 * them (the __cudaRegister* calls nvcc's host code makes before main).
 *
 * Nothing goes to the server at registration: a module is shipped on the
 * first use of one of its kernels or variables, and only if the server does
 * not already hold it under its SHA-256. A kernel's parameter layout comes
 * from the server once and is cached here, so a launch is one message.
 */
#include "client.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xBA55ED50u
#define FUNCTION_MAGIC 0x464c5946u /* marks our cudaKernel_t handles */

struct fatbin_wrapper {
    int32_t magic;
    int32_t version;
    const uint64_t *data;
    void *filename_or_fatbins;
};

struct fatbin_header {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;
};

struct flyt_module {
    const void *image;
    size_t size;
    uint8_t sha256[32];
    uint64_t server_id; /* 0 until loaded */
    struct flyt_module *next;
};

/* Open-addressing map from a host pointer (stub or variable) to its record. */
struct ptrmap {
    const void **keys;
    void **values;
    size_t cap, count;
};

static struct {
    pthread_mutex_t lock; /* registration and first-use loading */
    struct flyt_module *modules;
    struct ptrmap functions; /* host stub -> flyt_function */
    struct ptrmap kernels;   /* flyt_function -> itself (cudaKernel_t check) */
    struct ptrmap variables; /* host variable -> flyt_variable */
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t ptr_hash(const void *p, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static void *ptrmap_get(const struct ptrmap *m, const void *key)
{
    if (m->cap == 0)
        return NULL;
    for (size_t i = ptr_hash(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == NULL)
            return NULL;
        if (m->keys[i] == key)
            return m->values[i];
    }
}

static int ptrmap_put(struct ptrmap *m, const void *key, void *value)
{
    if ((m->count + 1) * 2 > m->cap) {
        struct ptrmap bigger = {0};
        bigger.cap = m->cap ? m->cap * 2 : 256;
        bigger.keys = calloc(bigger.cap, sizeof *bigger.keys);
        bigger.values = calloc(bigger.cap, sizeof *bigger.values);
        if (!bigger.keys || !bigger.values) {
            free(bigger.keys);
            free(bigger.values);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i])
                ptrmap_put(&bigger, m->keys[i], m->values[i]);
        free(m->keys);
        free(m->values);
        *m = bigger;
    }
    size_t i = ptr_hash(key, m->cap);
    while (m->keys[i] != NULL && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (m->keys[i] == NULL)
        m->count++;
    m->keys[i] = key;
    m->values[i] = value;
    return 0;
}

/* ---- registration entry points (called by nvcc-generated code) ---- */

FLYT_EXPORT void **__cudaRegisterFatBinary(void *fat_cubin)
{
    const struct fatbin_wrapper *w = fat_cubin;
    struct flyt_module *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    const struct fatbin_header *h = w ? (const void *)w->data : NULL;
    if (w && (uint32_t)w->magic == FATBIN_WRAPPER_MAGIC && h && h->magic == FATBIN_MAGIC) {
        m->image = h;
        m->size = (size_t)h->header_size + (size_t)h->fat_size;
    }
    pthread_mutex_lock(&reg.lock);
    m->next = reg.modules;
    reg.modules = m;
    pthread_mutex_unlock(&reg.lock);
    return (void **)m;
}

FLYT_EXPORT void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

/* At exit the server session ends with the connection and frees the module,
 * and other exit handlers may still use it, so nothing is freed here. */
FLYT_EXPORT void __cudaUnregisterFatBinary(void **handle) { (void)handle; }

FLYT_EXPORT void __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun,
                                        const char *device_name, int thread_limit, uint3 *tid,
                                        uint3 *bid, dim3 *bdim, dim3 *gdim, int *wsize)
{
    (void)device_fun, (void)thread_limit, (void)tid, (void)bid, (void)bdim, (void)gdim, (void)wsize;
    struct flyt_function *f = calloc(1, sizeof *f);
    if (f == NULL || device_name == NULL || (f->name = strdup(device_name)) == NULL) {
        free(f);
        return;
    }
    f->module = (struct flyt_module *)handle;
    f->host_fun = host_fun;
    f->magic = FUNCTION_MAGIC;
    pthread_mutex_lock(&reg.lock);
    ptrmap_put(&reg.functions, host_fun, f);
    ptrmap_put(&reg.kernels, f, f);
    pthread_mutex_unlock(&reg.lock);
}

FLYT_EXPORT void __cudaRegisterVar(void **handle, char *host_var, char *device_address,
                                   const char *device_name, int ext, size_t size, int constant,
                                   int global)
{
    (void)device_address, (void)ext, (void)constant, (void)global;
    struct flyt_variable *v = calloc(1, sizeof *v);
    if (v == NULL || device_name == NULL || (v->name = strdup(device_name)) == NULL) {
        free(v);
        return;
    }
    v->module = (struct flyt_module *)handle;
    v->host_var = host_var;
    v->size = size;
    pthread_mutex_lock(&reg.lock);
    ptrmap_put(&reg.variables, host_var, v);
    pthread_mutex_unlock(&reg.lock);
}

/* Managed variables need memory the GPU and this host share: not possible
 * across a network, so the module registers but the variable is unusable. */
FLYT_EXPORT void __cudaRegisterManagedVar(void **handle, void **host_var_ptr, char *device_address,
                                          const char *device_name, int ext, size_t size,
                                          int constant, int global)
{
    (void)handle, (void)host_var_ptr, (void)device_address, (void)device_name, (void)ext,
        (void)size, (void)constant, (void)global;
    flyt_unsupported("__cudaRegisterManagedVar (managed variables)");
}

/* ---- loading on first use ---- */

static cudaError_t module_load_locked(struct flyt_module *m)
{
    if (m->server_id != 0)
        return cudaSuccess;
    if (m->image == NULL || m->size == 0)
        return cudaErrorInvalidKernelImage;
    if (m->sha256[0] == 0 && m->sha256[1] == 0) {
        unsigned int len = 0;
        if (!EVP_Digest(m->image, m->size, m->sha256, &len, EVP_sha256(), NULL))
            return cudaErrorUnknown;
    }
    flyt_req_module_load req = {.size = m->size};
    memcpy(req.sha256, m->sha256, sizeof req.sha256);
    flyt_rep_module_load rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    cudaError_t err = flyt_call(FLYT_OP_MODULE_LOAD, &req, sizeof req, NULL, 0, &sink);
    if (err == cudaSuccess && rep.need_data) {
        req.has_data = 1;
        struct iovec data = {(void *)m->image, m->size};
        err = flyt_call(FLYT_OP_MODULE_LOAD, &req, sizeof req, &data, 1, &sink);
        if (err == cudaSuccess && rep.need_data)
            err = cudaErrorInvalidKernelImage;
    }
    if (err == cudaSuccess)
        m->server_id = rep.module;
    return err;
}

static cudaError_t function_fetch_locked(struct flyt_function *f)
{
    cudaError_t err = module_load_locked(f->module);
    if (err != cudaSuccess)
        return err;
    size_t name_len = strlen(f->name) + 1;
    flyt_req_named req = {.module = f->module->server_id, .name_len = (uint32_t)name_len};
    struct iovec name = {f->name, name_len};
    flyt_rep_func rep = {0};
    flyt_param *params = malloc(FLYT_MAX_PARAMS * sizeof *params);
    if (params == NULL)
        return cudaErrorMemoryAllocation;
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep, .data = params,
                                   .data_max = FLYT_MAX_PARAMS * sizeof *params};
    err = flyt_call(FLYT_OP_FUNC_GET, &req, sizeof req, &name, 1, &sink);
    if (err == cudaErrorSymbolNotFound)
        err = cudaErrorInvalidDeviceFunction;
    if (err == cudaSuccess && sink.data_got != rep.param_count * sizeof *params)
        err = cudaErrorUnknown;
    if (err != cudaSuccess) {
        free(params);
        return err;
    }
    /* The dynamic shared memory limit, checked at each launch as CUDA does. */
    flyt_req_func_attr areq = {.func = rep.func, .attr = 8 /* MAX_DYNAMIC_SHARED_SIZE_BYTES */};
    flyt_rep_i32 arep = {0};
    struct flyt_reply_sink asink = {.rep = &arep, .rep_size = sizeof arep};
    err = flyt_call(FLYT_OP_FUNC_GET_ATTR, &areq, sizeof areq, NULL, 0, &asink);
    if (err != cudaSuccess) {
        free(params);
        return err;
    }
    f->max_dynamic_smem = (uint32_t)arep.value;
    /* shrink to what the kernel has; keeping the big buffer is also fine */
    flyt_param *fitted = realloc(params, rep.param_count ? rep.param_count * sizeof *params : 1);
    free(f->params);
    f->params = fitted ? fitted : params;
    f->param_count = rep.param_count;
    f->param_bytes = rep.param_bytes;
    __atomic_store_n(&f->server_id, rep.func, __ATOMIC_RELEASE);
    return cudaSuccess;
}

cudaError_t flyt_function_resolve(const void *func, struct flyt_function **out)
{
    pthread_mutex_lock(&reg.lock);
    struct flyt_function *f = ptrmap_get(&reg.functions, func);
    if (f == NULL)
        f = ptrmap_get(&reg.kernels, func);
    cudaError_t err = cudaSuccess;
    if (f == NULL)
        err = cudaErrorInvalidDeviceFunction;
    else if (__atomic_load_n(&f->server_id, __ATOMIC_ACQUIRE) == 0)
        err = function_fetch_locked(f);
    pthread_mutex_unlock(&reg.lock);
    *out = f;
    return err;
}


cudaError_t flyt_variable_resolve(const void *symbol, struct flyt_variable **out)
{
    pthread_mutex_lock(&reg.lock);
    struct flyt_variable *v = ptrmap_get(&reg.variables, symbol);
    cudaError_t err = cudaSuccess;
    if (v == NULL) {
        err = cudaErrorInvalidSymbol;
    } else if (v->dptr == 0) {
        err = module_load_locked(v->module);
        if (err == cudaSuccess) {
            size_t name_len = strlen(v->name) + 1;
            flyt_req_named req = {.module = v->module->server_id, .name_len = (uint32_t)name_len};
            struct iovec name = {v->name, name_len};
            flyt_rep_u64_pair rep = {0};
            struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
            err = flyt_call(FLYT_OP_GLOBAL_GET, &req, sizeof req, &name, 1, &sink);
            if (err == cudaErrorSymbolNotFound)
                err = cudaErrorInvalidSymbol;
            if (err == cudaSuccess) {
                v->dptr = rep.a;
                v->size = rep.b;
                flyt_range_add(FLYT_RANGE_DEVICE, rep.a, rep.b, 0);
            }
        }
    }
    pthread_mutex_unlock(&reg.lock);
    *out = v;
    return err;
}

void flyt_registry_reset_server_ids(void)
{
    pthread_mutex_lock(&reg.lock);
    for (struct flyt_module *m = reg.modules; m; m = m->next)
        m->server_id = 0;
    for (size_t i = 0; i < reg.kernels.cap; i++)
        if (reg.kernels.keys[i])
            ((struct flyt_function *)reg.kernels.values[i])->server_id = 0;
    for (size_t i = 0; i < reg.variables.cap; i++)
        if (reg.variables.keys[i])
            ((struct flyt_variable *)reg.variables.values[i])->dptr = 0;
    pthread_mutex_unlock(&reg.lock);
}

/* ---- kernel handles ---- */

FLYT_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *host_fun)
{
    pthread_mutex_lock(&reg.lock);
    struct flyt_function *f = ptrmap_get(&reg.functions, host_fun);
    pthread_mutex_unlock(&reg.lock);
    if (kernel)
        *kernel = (cudaKernel_t)f;
    return f ? cudaSuccess : flyt_set_error(cudaErrorInvalidDeviceFunction);
}

FLYT_EXPORT cudaError_t cudaGetKernel(cudaKernel_t *kernel, const void *entry)
{
    if (kernel == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    return __cudaGetKernel(kernel, entry);
}

FLYT_EXPORT char __cudaInitModule(void **handle)
{
    struct flyt_module *m = (struct flyt_module *)handle;
    pthread_mutex_lock(&reg.lock);
    cudaError_t err = m ? module_load_locked(m) : cudaErrorInvalidValue;
    pthread_mutex_unlock(&reg.lock);
    return err == cudaSuccess;
}

cudaError_t flyt_kernel_ready(cudaKernel_t kernel, struct flyt_function **out)
{
    struct flyt_function *f = (struct flyt_function *)kernel;
    if (f && f->magic == FUNCTION_MAGIC && __atomic_load_n(&f->server_id, __ATOMIC_ACQUIRE)) {
        *out = f;
        return cudaSuccess;
    }
    return flyt_function_resolve(kernel, out);
}

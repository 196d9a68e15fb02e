/*
 * Modules, libraries, kernels and globals.
 *
 * A CUmodule and a CUlibrary are both a struct flyt_module here (the server
 * loads either as a module); a CUfunction and a CUkernel are both a struct
 * flyt_function, so a CUkernel is accepted wherever a function is, as NVIDIA's
 * runtime expects. Between machines images are shipped once, by SHA-256:
 * the server answers from its cache when it holds them; on one machine they
 * go at once, unhashed (cheaper than hashing them). A function's parameter
 * layout and attributes come with its lookup, so launches and attribute
 * queries need no further round trip.
 *
 * Records are never freed while the process runs: handles to an unloaded
 * module read as invalid (magic cleared) rather than as freed memory.
 */
#include "client.h"

#include <dlfcn.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fatbin.h"
#include "flyt_clock.h"

#define MODULE_MAGIC   0x4d4c5946u /* "FYLM" */
#define FUNCTION_MAGIC 0x464c5946u
#define DEAD_MAGIC     0x44414544u

struct global {
    char *name;
    uint64_t dptr, size;
    unsigned gen;
    int managed;         /* a managed variable, attached here (managed_remote.c) */
    struct global *next;
};

struct flyt_module {
    uint32_t magic;
    int library;
    const void *image;   /* kept for a library, to ship again after a reset */
    void *owned;         /* our copy of the image, when the program's may go */
    size_t size;
    uint8_t sha256[32];
    int hashed;          /* sha256 holds the image's hash (not needed on one machine) */
    int in_object;       /* image lies in a loaded shared object, not copied */
    uint64_t server_id;
    unsigned gen;        /* reset generation server_id belongs to */
    struct flyt_function *funcs;
    struct global *globals;
    struct flyt_module *next; /* every module loaded, unloaded ones too */
};

static pthread_mutex_t lock = FLYT_MUTEX_INITIALIZER; /* records and first loads */
static unsigned reset_gen = 1;
static struct flyt_module *modules; /* kept reachable: records are never freed */

void flyt_modules_reset(void)
{
    pthread_mutex_lock(&lock);
    reset_gen++;
    pthread_mutex_unlock(&lock);
}

/* ---- loading ---- */

/* An image inside a loaded shared object (the fatbinaries NVIDIA's runtime
 * registers for its libraries: ~100 MB for cuBLAS) lives as long as the
 * object, whose runtime unloads its libraries before it goes: no copy. */
static int in_loaded_object(const void *p)
{
    Dl_info info;
    return dladdr(p, &info) != 0 && info.dli_fbase != NULL;
}

/* The session's GPU as an sm number (90 for compute capability 9.0). */
static unsigned device_sm(void)
{
    return (unsigned)(flyt_device_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
                      flyt_device_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
}

/* The bytes that go to the server for m: only what this GPU loads (a
 * library's cubins for every other architecture stay here: fatbin.c), cut
 * into *cut, which the caller frees; or the image itself (*cut NULL). Cut
 * again for every shipment rather than kept: an image inside a loaded
 * object costs no memory of its own. */
static struct iovec shipped(const struct flyt_module *m, void **cut)
{
    size_t n = 0;
    *cut = NULL;
    if (flyt_fatbin_trim(m->image, m->size, device_sm(), cut, &n) == 1)
        return (struct iovec){*cut, n};
    return (struct iovec){(void *)m->image, m->size};
}

/* m's sha256: of the bytes shipped (the same for every shipment). */
static int hash_image(struct flyt_module *m, struct iovec data)
{
    unsigned int len = 0;
    uint64_t t0 = flyt_profiling() ? flyt_mono_ns() : 0;
    if (!EVP_Digest(data.iov_base, data.iov_len, m->sha256, &len, EVP_sha256(), NULL))
        return -1;
    if (t0)
        flyt_profile_hash(data.iov_len, flyt_mono_ns() - t0);
    m->hashed = 1;
    return 0;
}

static CUresult ship_bytes_locked(struct flyt_module *m, struct iovec data);

/* On one machine the image goes at once, unhashed; else its hash goes first
 * and the bytes only when the server holds no image of that hash. */
static CUresult ship_locked(struct flyt_module *m)
{
    FLYT_ASSERT_HELD(&lock);
    if (m->server_id != 0 && m->gen == reset_gen)
        return CUDA_SUCCESS;
    if (m->image == NULL)
        return CUDA_ERROR_INVALID_HANDLE; /* a module does not survive a reset */
    if (m->server_id != 0 && m->in_object && !in_loaded_object(m->image))
        return CUDA_ERROR_INVALID_HANDLE; /* its object was unloaded, the library not */
    void *cut;
    struct iovec data = shipped(m, &cut);
    CUresult r = ship_bytes_locked(m, data);
    free(cut);
    return r;
}

static CUresult ship_bytes_locked(struct flyt_module *m, struct iovec data)
{
    FLYT_ASSERT_HELD(&lock);
    flyt_req_module_load req = {.size = data.iov_len};
    flyt_rep_module_load rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    CUresult r;
    if (!m->hashed && flyt_conn_ships_images_unhashed()) {
        req.has_data = 2;
        r = flyt_call(FLYT_OP_MODULE_LOAD, &req, sizeof req, &data, 1, &sink);
    } else {
        if (!m->hashed && hash_image(m, data) != 0)
            return CUDA_ERROR_UNKNOWN;
        memcpy(req.sha256, m->sha256, sizeof req.sha256);
        r = flyt_call(FLYT_OP_MODULE_LOAD, &req, sizeof req, NULL, 0, &sink);
        if (r == CUDA_SUCCESS && rep.need_data) {
            req.has_data = 1;
            r = flyt_call(FLYT_OP_MODULE_LOAD, &req, sizeof req, &data, 1, &sink);
        }
    }
    if (r == CUDA_SUCCESS && rep.need_data)
        r = CUDA_ERROR_INVALID_IMAGE;
    if (r == CUDA_SUCCESS) {
        m->server_id = rep.module;
        m->gen = reset_gen;
    }
    return r;
}

/* keep: the image must outlive the call (libraries, shipped again after a
 * reset); it is copied unless the program promised to keep it. */
static CUresult module_load(struct flyt_module **out, const void *image, int library, int preserved)
{
    /* libraries belong to no context: NVIDIA's runtime loads them from
     * threads that have none current; the session's one context serves all */
    CUresult r = flyt_trace(__func__, flyt_init_state());
    if (r != CUDA_SUCCESS)
        return r;
    if (out == NULL || image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const void *start;
    size_t size;
    if (flyt_image_extent(image, &start, &size) != 0 || size == 0 || size > FLYT_MAX_FATBIN)
        return CUDA_ERROR_INVALID_IMAGE;
    struct flyt_module *m = calloc(1, sizeof *m);
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *m = (struct flyt_module){.magic = MODULE_MAGIC, .library = library, .image = start,
                              .size = size};
    void *cut;
    struct iovec data = shipped(m, &cut);
    if (cut != NULL)
        flyt_profile_trim(size, data.iov_len);
    /* hashed outside the lock: threads may load at once */
    if (!flyt_conn_ships_images_unhashed() && hash_image(m, data) != 0) {
        free(cut);
        free(m);
        return CUDA_ERROR_UNKNOWN;
    }
    int must_outlive = library && !preserved; /* shipped again after a reset */
    m->in_object = must_outlive && in_loaded_object(start);
    if (must_outlive && !m->in_object) { /* our copy: the cut one where there is one */
        if (cut != NULL) {
            m->image = m->owned = cut;
            m->size = data.iov_len;
            cut = NULL;
        } else if ((m->owned = malloc(size)) != NULL) {
            memcpy(m->owned, start, size);
            m->image = m->owned;
        }
    }
    pthread_mutex_lock(&lock);
    r = ship_bytes_locked(m, data);
    pthread_mutex_unlock(&lock);
    free(cut);
    if (r != CUDA_SUCCESS) {
        free(m->owned);
        free(m);
        return r;
    }
    if (!library)
        m->image = NULL; /* the program may free it now */
    pthread_mutex_lock(&lock);
    m->next = modules;
    modules = m;
    pthread_mutex_unlock(&lock);
    *out = m;
    return CUDA_SUCCESS;
}

static struct flyt_module *module_from(const void *handle)
{
    const struct flyt_module *m = handle;
    return flyt_aligned(m) && m->magic == MODULE_MAGIC ? (struct flyt_module *)m : NULL;
}

FLYT_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    return module_load((struct flyt_module **)module, image, 0, 0);
}

FLYT_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int n,
                                        CUjit_option *options, void **values)
{
    (void)n, (void)options, (void)values; /* JIT options are the server's: it compiles */
    return module_load((struct flyt_module **)module, image, 0, 0);
}

FLYT_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatbin)
{
    return module_load((struct flyt_module **)module, fatbin, 0, 0);
}

static CUresult read_file(const char *path, char **data)
{
    if (path == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return CUDA_ERROR_FILE_NOT_FOUND;
    CUresult r = CUDA_ERROR_INVALID_IMAGE;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *buf = n > 0 && (uint64_t)n <= FLYT_MAX_FATBIN ? malloc((size_t)n + 1) : NULL;
    if (buf && fseek(f, 0, SEEK_SET) == 0 && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0'; /* PTX files need not end in NUL */
        *data = buf;
        buf = NULL;
        r = CUDA_SUCCESS;
    }
    free(buf);
    fclose(f);
    return r;
}

FLYT_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *path)
{
    char *data = NULL;
    CUresult r = read_file(path, &data);
    if (r == CUDA_SUCCESS)
        r = module_load((struct flyt_module **)module, data, 0, 0);
    free(data);
    return r;
}

/* Option values travel in the pointer itself, as with JIT options. */
static int preserved_option(unsigned n, CUlibraryOption *options, void **values)
{
    for (unsigned i = 0; options && values && i < n; i++)
        if (options[i] == CU_LIBRARY_BINARY_IS_PRESERVED && (uintptr_t)values[i] != 0)
            return 1;
    return 0;
}

FLYT_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jit_options,
                                       void **jit_values, unsigned int n_jit,
                                       CUlibraryOption *options, void **values, unsigned int n)
{
    (void)jit_options, (void)jit_values, (void)n_jit;
    return module_load((struct flyt_module **)library, code, 1, preserved_option(n, options, values));
}

FLYT_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *path,
                                           CUjit_option *jit_options, void **jit_values,
                                           unsigned int n_jit, CUlibraryOption *options,
                                           void **values, unsigned int n)
{
    (void)jit_options, (void)jit_values, (void)n_jit, (void)options, (void)values, (void)n;
    char *data = NULL;
    CUresult r = read_file(path, &data);
    if (r == CUDA_SUCCESS)
        r = module_load((struct flyt_module **)library, data, 1, 0);
    free(data);
    return r;
}

static CUresult module_unload(const void *handle)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&lock);
    struct flyt_module *m = module_from(handle);
    if (m == NULL) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    m->magic = DEAD_MAGIC;
    for (struct flyt_function *f = m->funcs; f; f = f->next)
        f->magic = DEAD_MAGIC;
    for (struct global *g = m->globals; g; g = g->next)
        if (g->managed && g->gen == reset_gen) { /* freed with the module */
            flyt_mremote_detach(g->dptr);
            flyt_range_remove(FLYT_RANGE_MANAGED, g->dptr);
            g->gen = 0;
        }
    uint64_t id = m->gen == reset_gen ? m->server_id : 0;
    free(m->owned);
    m->owned = NULL;
    m->image = NULL;
    pthread_mutex_unlock(&lock);
    return id ? flyt_call_handle(FLYT_OP_MODULE_UNLOAD, id) : CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuModuleUnload(CUmodule module) { return module_unload(module); }
FLYT_EXPORT CUresult cuLibraryUnload(CUlibrary library) { return module_unload(library); }

FLYT_EXPORT CUresult cuLibraryGetModule(CUmodule *module, CUlibrary library)
{
    if (module == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (module_from(library) == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *module = (CUmodule)(void *)library;
    return CUDA_SUCCESS;
}

/* Modules load when asked, so the runtime loads kernels lazily too. */
FLYT_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    if (mode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *mode = CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
}

/* ---- functions and kernels ---- */

struct flyt_function *flyt_function_from(const void *handle)
{
    const struct flyt_function *f = handle;
    return flyt_aligned(f) && f->magic == FUNCTION_MAGIC ? (struct flyt_function *)f : NULL;
}

/* Asks the server for the function's id, layout and attributes. */
static CUresult fetch_locked(struct flyt_function *f)
{
    FLYT_ASSERT_HELD(&lock);
    CUresult r = ship_locked(f->module);
    if (r != CUDA_SUCCESS)
        return r;
    size_t name_len = strlen(f->name) + 1;
    if (name_len > FLYT_MAX_NAME)
        return CUDA_ERROR_NOT_FOUND;
    flyt_req_named req = {.module = f->module->server_id, .name_len = (uint32_t)name_len};
    struct iovec name = {f->name, name_len};
    flyt_rep_func rep = {0};
    flyt_param *params = malloc(FLYT_MAX_PARAMS * sizeof *params);
    if (params == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep, .data = params,
                                   .data_max = FLYT_MAX_PARAMS * sizeof *params};
    r = flyt_call(FLYT_OP_FUNC_GET, &req, sizeof req, &name, 1, &sink);
    if (r == CUDA_SUCCESS && sink.data_got != rep.param_count * sizeof *params)
        r = CUDA_ERROR_UNKNOWN;
    if (r != CUDA_SUCCESS) {
        free(params);
        return r;
    }
    flyt_param *fitted = realloc(params, rep.param_count ? rep.param_count * sizeof *params : 1);
    free(f->params);
    f->params = fitted ? fitted : params;
    f->param_count = rep.param_count;
    f->param_bytes = rep.param_bytes;
    memcpy(f->attrs, rep.attrs, sizeof f->attrs);
    f->server_id = rep.func;
    f->gen = reset_gen;
    return CUDA_SUCCESS;
}

CUresult flyt_function_use(const void *handle, struct flyt_function **f, uint64_t *server_id)
{
    *f = flyt_function_from(handle);
    return *f == NULL ? CUDA_ERROR_INVALID_HANDLE : flyt_function_ready(*f, server_id);
}

struct flyt_function *flyt_function_by_server_id(uint64_t id)
{
    struct flyt_function *found = NULL;
    pthread_mutex_lock(&lock);
    for (struct flyt_module *m = modules; m && !found; m = m->next)
        for (struct flyt_function *f = m->funcs; f && !found; f = f->next)
            if (id && f->server_id == id && f->gen == reset_gen)
                found = f;
    pthread_mutex_unlock(&lock);
    return found;
}

CUresult flyt_function_ready(struct flyt_function *f, uint64_t *server_id)
{
    unsigned gen = __atomic_load_n(&f->gen, __ATOMIC_ACQUIRE);
    if (gen == __atomic_load_n(&reset_gen, __ATOMIC_ACQUIRE) && f->server_id) {
        *server_id = f->server_id;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&lock);
    CUresult r = f->gen == reset_gen && f->server_id ? CUDA_SUCCESS : fetch_locked(f);
    *server_id = f->server_id;
    pthread_mutex_unlock(&lock);
    return r;
}

/* The module's record for name; fetched: its layout is asked for now (so an
 * unknown name fails here, as cuModuleGetFunction must). */
static CUresult function_get(struct flyt_function **out, const void *module, const char *name,
                             int fetched)
{
    CUresult r = flyt_trace(__func__, flyt_init_state());
    if (r != CUDA_SUCCESS)
        return r;
    if (out == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct flyt_module *m = module_from(module);
    struct flyt_function *f = NULL;
    if (m == NULL)
        r = CUDA_ERROR_INVALID_HANDLE;
    for (f = m ? m->funcs : NULL; f && strcmp(f->name, name) != 0;)
        f = f->next;
    if (r == CUDA_SUCCESS && f == NULL) {
        f = calloc(1, sizeof *f);
        if (f == NULL || (f->name = strdup(name)) == NULL) {
            free(f);
            f = NULL;
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            f->magic = FUNCTION_MAGIC;
            f->module = m;
            if (fetched && (r = fetch_locked(f)) != CUDA_SUCCESS) {
                free(f->name);
                free(f);
                f = NULL;
            } else {
                f->next = m->funcs;
                m->funcs = f;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    if (r == CUDA_SUCCESS)
        *out = f;
    return r;
}

FLYT_EXPORT CUresult cuModuleGetFunction(CUfunction *func, CUmodule module, const char *name)
{
    return function_get((struct flyt_function **)func, module, name, 1);
}

FLYT_EXPORT CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name)
{
    return function_get((struct flyt_function **)kernel, library, name, 1);
}

FLYT_EXPORT CUresult cuKernelGetFunction(CUfunction *func, CUkernel kernel)
{
    if (func == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct flyt_function *f = flyt_function_from(kernel);
    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *func = (CUfunction)(void *)f;
    return CUDA_SUCCESS;
}

/* The names of a module's functions, from the server. */
static CUresult function_names(struct flyt_module *m, char **names, unsigned *count)
{
    pthread_mutex_lock(&lock);
    CUresult r = ship_locked(m);
    uint64_t id = m->server_id;
    pthread_mutex_unlock(&lock);
    if (r != CUDA_SUCCESS)
        return r;
    char *buf = malloc(FLYT_MAX_MODULE_FUNCS_BYTES + 1);
    if (buf == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    flyt_req_handle req = {.handle = id};
    flyt_rep_u64 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep, .data = buf,
                                   .data_max = FLYT_MAX_MODULE_FUNCS_BYTES};
    r = flyt_call(FLYT_OP_MODULE_FUNCS, &req, sizeof req, NULL, 0, &sink);
    if (r != CUDA_SUCCESS) {
        free(buf);
        return r;
    }
    buf[sink.data_got] = '\0';
    *names = buf;
    *count = (unsigned)rep.value;
    return CUDA_SUCCESS;
}

static CUresult function_count(unsigned *count, const void *module)
{
    struct flyt_module *m = module_from(module);
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (m == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    char *names = NULL;
    CUresult r = function_names(m, &names, count);
    free(names);
    return r;
}

static CUresult function_enumerate(struct flyt_function **out, unsigned want, const void *module)
{
    struct flyt_module *m = module_from(module);
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (m == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    char *names = NULL;
    unsigned count = 0;
    CUresult r = function_names(m, &names, &count);
    const char *name = names;
    for (unsigned i = 0; r == CUDA_SUCCESS && i < count && i < want; i++) {
        r = function_get(&out[i], m, name, 0);
        name += strlen(name) + 1;
    }
    free(names);
    return r;
}

FLYT_EXPORT CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule module)
{
    return function_count(count, module);
}
FLYT_EXPORT CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary library)
{
    return function_count(count, library);
}
FLYT_EXPORT CUresult cuModuleEnumerateFunctions(CUfunction *funcs, unsigned int n, CUmodule module)
{
    return function_enumerate((struct flyt_function **)funcs, n, module);
}
FLYT_EXPORT CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int n, CUlibrary library)
{
    return function_enumerate((struct flyt_function **)kernels, n, library);
}

static CUresult function_name(const char **name, const void *handle)
{
    struct flyt_function *f = flyt_function_from(handle);
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = f->name;
    return CUDA_SUCCESS;
}
FLYT_EXPORT CUresult cuFuncGetName(const char **name, CUfunction func) { return function_name(name, func); }
FLYT_EXPORT CUresult cuKernelGetName(const char **name, CUkernel kernel) { return function_name(name, kernel); }

static CUresult param_info(const void *handle, size_t index, size_t *offset, size_t *size)
{
    struct flyt_function *f;
    uint64_t id;
    CUresult r = flyt_function_use(handle, &f, &id);
    if (r != CUDA_SUCCESS)
        return r;
    if (index >= f->param_count)
        return CUDA_ERROR_INVALID_VALUE;
    if (offset)
        *offset = f->params[index].offset;
    if (size)
        *size = f->params[index].size;
    return CUDA_SUCCESS;
}
FLYT_EXPORT CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t *offset, size_t *size)
{
    return param_info(f, i, offset, size);
}
FLYT_EXPORT CUresult cuKernelGetParamInfo(CUkernel k, size_t i, size_t *offset, size_t *size)
{
    return param_info(k, i, offset, size);
}

FLYT_EXPORT CUresult cuFuncGetModule(CUmodule *module, CUfunction func)
{
    struct flyt_function *f = flyt_function_from(func);
    if (module == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *module = (CUmodule)(void *)f->module;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuKernelGetLibrary(CUlibrary *library, CUkernel kernel)
{
    return cuFuncGetModule((CUmodule *)library, (CUfunction)(void *)kernel);
}

FLYT_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction func)
{
    struct flyt_function *f = flyt_function_from(func);
    if (state == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *state = f->server_id && f->gen == reset_gen ? CU_FUNCTION_LOADING_STATE_LOADED
                                                 : CU_FUNCTION_LOADING_STATE_UNLOADED;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuFuncLoad(CUfunction func)
{
    struct flyt_function *f;
    uint64_t id;
    return flyt_function_use(func, &f, &id);
}

/* ---- globals ---- */

/* A variable's address and size, asked of the server once (GLOBAL_GET, or
 * MANAGED_GET for a managed one, whose bytes are then also kept here at
 * that address: host code reads and writes it as CUDA's does). Under lock. */
static CUresult global_fetch(struct flyt_module *m, const char *name, int managed,
                             struct global **out)
{
    size_t name_len = strlen(name) + 1;
    flyt_req_named req = {.module = m->server_id, .name_len = (uint32_t)name_len};
    struct iovec data = {(void *)name, name_len};
    flyt_rep_u64_pair rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    CUresult r = flyt_call(managed ? FLYT_OP_MANAGED_GET : FLYT_OP_GLOBAL_GET, &req, sizeof req,
                           &data, 1, &sink);
    if (r == CUDA_SUCCESS && managed)
        r = flyt_mremote_attach(rep.a, rep.b);
    if (r != CUDA_SUCCESS)
        return r;
    struct global *g = calloc(1, sizeof *g);
    if (g == NULL || (g->name = strdup(name)) == NULL) {
        free(g);
        if (managed)
            flyt_mremote_detach(rep.a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g->dptr = rep.a;
    g->size = rep.b;
    g->gen = reset_gen;
    g->managed = managed;
    g->next = m->globals;
    m->globals = g;
    flyt_range_add(managed ? FLYT_RANGE_MANAGED : FLYT_RANGE_DEVICE, rep.a, rep.b, 0);
    *out = g;
    return CUDA_SUCCESS;
}

static CUresult global_get(CUdeviceptr *dptr, size_t *bytes, const void *module, const char *name,
                           int managed)
{
    CUresult r = flyt_trace(__func__, flyt_init_state());
    if (r != CUDA_SUCCESS)
        return r;
    if (name == NULL || strlen(name) + 1 > FLYT_MAX_NAME)
        return CUDA_ERROR_INVALID_VALUE;
    if (managed && flyt_conn_server_minor() < FLYT_MINOR_MANAGED_VAR)
        return flyt_unsupported_why("cuLibraryGetManaged", "managed variables on this server");
    pthread_mutex_lock(&lock);
    struct flyt_module *m = module_from(module);
    struct global *g = NULL;
    if (m == NULL)
        r = CUDA_ERROR_INVALID_HANDLE;
    for (g = m ? m->globals : NULL; g && (g->gen != reset_gen || strcmp(g->name, name) != 0);)
        g = g->next;
    if (g && managed && !g->managed) { /* known as a plain one so far: it is managed */
        flyt_range_remove(FLYT_RANGE_DEVICE, g->dptr);
        g->gen = 0;
        g = NULL;
    }
    if (r == CUDA_SUCCESS && g == NULL)
        r = ship_locked(m);
    if (r == CUDA_SUCCESS && g == NULL)
        r = global_fetch(m, name, managed, &g);
    if (r == CUDA_SUCCESS) {
        if (dptr)
            *dptr = flyt_dptr(g->dptr);
        if (bytes)
            *bytes = (size_t)g->size;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

FLYT_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule module,
                                          const char *name)
{
    return global_get(dptr, bytes, module, name, 0);
}

FLYT_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                                        const char *name)
{
    return global_get(dptr, bytes, library, name, 0);
}

/* What NVIDIA's runtime asks for each __managed__ variable it registered. */
FLYT_EXPORT CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                                         const char *name)
{
    return global_get(dptr, bytes, library, name, 1);
}

/*
 * The "cuda" backend: the real GPU through the CUDA driver API.
 *
 * libcuda.so.1 is opened with dlopen at run time (never linked), so the
 * server starts on machines without an NVIDIA driver and uses the host
 * backend there. The backend retains the device's primary context and makes
 * it current on the session thread; driver results are returned unchanged.
 *
 * Handles given to the server: streams, events and memory pools are the
 * driver's own CUstream / CUevent / CUmemoryPool values (so launch attributes
 * that carry an event need no translation); modules and functions are small
 * structs of this file (a function caches its parameter layout). Streams,
 * events, pools and modules this backend created are tracked, so that
 * device_reset and close can destroy them.
 *
 * The copies and the staging buffers are in backend_cuda_copy.c, the device
 * properties in backend_cuda_props.c.
 */
#include <assert.h>
#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_int.h"
#include "flyt_client_table.h"
#include "flyt_log.h"

/* ---- the driver's function table ---- */

#define FLYT_CU_SYM(fn) { FLYT_CU_STR(fn), offsetof(struct flyt_cu_api, fn) },
const struct flyt_cu_sym flyt_cu_syms[] = { FLYT_CU_FUNCS(FLYT_CU_SYM) };
const size_t flyt_cu_nsyms = sizeof flyt_cu_syms / sizeof flyt_cu_syms[0];

/* Resolves every entry; on failure err names the missing symbols. */
static int cu_resolve(struct flyt_cu_api *cu, char *err, size_t errlen)
{
    size_t used = 0;
    int missing = 0;
    for (size_t i = 0; i < flyt_cu_nsyms; i++) {
        void *p = dlsym(cu->lib, flyt_cu_syms[i].name);
        if (!p) {
            if (missing++ == 0)
                used = (size_t)snprintf(err, errlen, "libcuda.so.1 lacks");
            if (used < errlen)
                used += (size_t)snprintf(err + used, errlen - used, " %s", flyt_cu_syms[i].name);
            continue;
        }
        memcpy((char *)cu + flyt_cu_syms[i].offset, &p, sizeof p);
    }
    if (missing && used < errlen)
        snprintf(err + used, errlen - used, " (NVIDIA driver older than CUDA 13 needs)");
    return missing ? -1 : 0;
}

/* Whether the loader found Flyt's own client library under NVIDIA's name (its
 * lib directory on LD_LIBRARY_PATH, or a VM-wide install on this machine):
 * the server would then talk to itself. Asked of a table only Flyt answers. */
static int is_flyt_client(struct flyt_cu_api *cu, char *err, size_t errlen)
{
    static const CUuuid marker = {FLYT_CLIENT_MARKER_UUID};
    const void **table = NULL;
    if (cu->cuGetExportTable((const void **)&table, &marker) != CUDA_SUCCESS || table == NULL)
        return 0;
    Dl_info where;
    const char *path = dladdr((void *)cu->cuInit, &where) && where.dli_fname ? where.dli_fname
                                                                            : "libcuda.so.1";
    snprintf(err, errlen, "%s is Flyt's client library, not NVIDIA's driver: run flyt-server "
             "without Flyt's lib directory on LD_LIBRARY_PATH or LD_PRELOAD", path);
    return 1;
}

static const char *cu_errname(struct flyt_cu_api *cu, CUresult r)
{
    const char *s = NULL;
    if (cu->cuGetErrorName && cu->cuGetErrorName(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "CUDA_ERROR_?";
}

/* "CUDA_ERROR_X (code N: description)" for the messages of open */
static const char *cu_errdesc(struct flyt_cu_api *cu, CUresult r, char *buf, size_t len)
{
    const char *s = NULL;
    if (!cu->cuGetErrorString || cu->cuGetErrorString(r, &s) != CUDA_SUCCESS || !s)
        s = r == CUDA_ERROR_STUB_LIBRARY ? "the CUDA stub library, not a driver" : "no description";
    snprintf(buf, len, "%s (code %d: %s)", cu_errname(cu, r), (int)r, s);
    return buf;
}

/* ---- the table a backend calls: libcuda.so.1's, or a test's ---- */

/* NULL in production: backends load libcuda.so.1 (flyt_cuda_driver_use). */
static const struct flyt_cu_api *given_table;

void flyt_cuda_driver_use(const struct flyt_cu_api *table) { given_table = table; }

/* The entry named name: its cuda.h name ("cuMemAlloc") or its symbol
 * ("cuMemAlloc_v2"). NULL when the table has none. */
static const struct flyt_cu_sym *cu_sym_find(const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < flyt_cu_nsyms; i++)
        if (strcmp(flyt_cu_syms[i].name, name) == 0)
            return &flyt_cu_syms[i];
    for (size_t i = 0; i < flyt_cu_nsyms; i++) /* cuda.h renamed it to a versioned symbol */
        if (strncmp(flyt_cu_syms[i].name, name, len) == 0 &&
            strncmp(flyt_cu_syms[i].name + len, "_v", 2) == 0)
            return &flyt_cu_syms[i];
    return NULL;
}

int flyt_cu_table_set(struct flyt_cu_api *table, const char *name, void *fn, void **old)
{
    const struct flyt_cu_sym *sym = table && name ? cu_sym_find(name) : NULL;
    if (!sym)
        return -1;
    char *entry = (char *)table + sym->offset;
    if (old)
        memcpy(old, entry, sizeof fn);
    memcpy(entry, &fn, sizeof fn);
    return 0;
}

int flyt_cuda_table_override(flyt_backend *base, const char *name, void *fn, void **old)
{
    struct flyt_cuda_backend *b = cb(base);
    return b ? flyt_cu_table_set(&b->cu, name, fn, old) : -1;
}

/* Fills cu from libcuda.so.1 (or copies the table a test gave). 0, or -1
 * with the reason in err; nothing of the driver ran yet then. */
static int driver_load(struct flyt_cu_api *cu, char *err, size_t errlen)
{
    if (given_table) {
        *cu = *given_table;
        cu->lib = NULL; /* no library: the plain calls answer CUDA_ERROR_NOT_SUPPORTED */
        return 0;
    }
    dlerror();
    cu->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu->lib) {
        const char *why = dlerror();
        snprintf(err, errlen, "libcuda.so.1 not found: no NVIDIA driver on this machine (%s)",
                 why ? why : "dlopen failed");
        return -1;
    }
    if (cu_resolve(cu, err, errlen) != 0 || is_flyt_client(cu, err, errlen)) {
        dlclose(cu->lib);
        return -1;
    }
    return 0;
}

/* ---- pointer sets ---- */

static uint64_t pkey(const void *p) { return (uint64_t)(uintptr_t)p; }

int flyt_pset_has(const flyt_hash *s, const void *p)
{
    return p != NULL && flyt_hash_find(s, pkey(p)) != NULL;
}

int flyt_pset_add(flyt_hash *s, void *p)
{
    if (!p)
        return -1;
    if (flyt_hash_find(s, pkey(p)))
        return 0;
    return flyt_hash_insert(s, pkey(p)) ? 0 : -1;
}

int flyt_pset_del(flyt_hash *s, void *p) { return flyt_hash_remove(s, pkey(p)); }

void *flyt_pset_pop(flyt_hash *s)
{
    flyt_hash_iter it;
    flyt_hash_iter_init(s, &it);
    flyt_hash_slot *slot = flyt_hash_iter_next(s, &it);
    if (!slot)
        return NULL;
    void *p = (void *)(uintptr_t)slot->key;
    flyt_hash_iter_remove(s, &it);
    return p;
}

/* ---- context ---- */

/* The context this thread last made current through the backend. */
static _Thread_local CUcontext tls_ctx;

CUresult flyt_cuda_ctx(struct flyt_cuda_backend *b)
{
    if (!b->ctx)
        return b->ctx_err != CUDA_SUCCESS ? b->ctx_err : CUDA_ERROR_INVALID_CONTEXT;
    if (tls_ctx == b->ctx)
        return CUDA_SUCCESS;
    CUresult r = b->cu.cuCtxSetCurrent(b->ctx);
    if (r == CUDA_SUCCESS)
        tls_ctx = b->ctx;
    return r;
}


/* Retains the primary context and makes it current; with an SM share, then
 * builds the green context and makes that current instead. */
static CUresult ctx_acquire(struct flyt_cuda_backend *b)
{
    CUcontext ctx = NULL;
    CUresult r = b->cu.cuDevicePrimaryCtxRetain(&ctx, b->dev);
    if (r != CUDA_SUCCESS) {
        b->ctx_err = r;
        return r;
    }
    b->primary = b->ctx = ctx;
    tls_ctx = NULL;
    r = flyt_cuda_ctx(b);
    if (r == CUDA_SUCCESS && b->share_n > 0)
        r = flyt_cuda_green_build(b);
    if (r != CUDA_SUCCESS) {
        b->cu.cuCtxSetCurrent(NULL);
        tls_ctx = NULL;
        b->cu.cuDevicePrimaryCtxRelease(b->dev);
        b->primary = b->ctx = NULL;
        b->ctx_err = r;
    } else {
        b->ctx_err = CUDA_SUCCESS;
    }
    return r;
}

static void ctx_drop(struct flyt_cuda_backend *b)
{
    if (!b->primary)
        return;
    flyt_cuda_green_drop(b);
    b->cu.cuCtxSetCurrent(NULL);
    tls_ctx = NULL;
    b->cu.cuDevicePrimaryCtxRelease(b->dev);
    b->primary = b->ctx = NULL;
}

/* ---- tracked objects ---- */

static void func_free_all(struct flyt_cuda_module *m)
{
    struct flyt_cuda_func *f = m->funcs;
    while (f) {
        struct flyt_cuda_func *n = f->next;
        free(f->poff);
        free(f->psize);
        free(f);
        f = n;
    }
    m->funcs = NULL;
}

static void module_unlink(struct flyt_cuda_backend *b, struct flyt_cuda_module *m)
{
    if (m->prev)
        m->prev->next = m->next;
    else
        b->modules = m->next;
    if (m->next)
        m->next->prev = m->prev;
    m->prev = m->next = NULL;
}

/* Destroys every stream, event, pool and module this backend created, with
 * the driver when the context is usable (it should be idle), else only
 * forgets them (the context that held them is gone). */
static void destroy_tracked(struct flyt_cuda_backend *b)
{
    int drv = b->ctx != NULL && flyt_cuda_ctx(b) == CUDA_SUCCESS;
    for (void *p; (p = flyt_pset_pop(&b->streams)) != NULL;)
        if (drv)
            b->cu.cuStreamDestroy(p);
    for (void *p; (p = flyt_pset_pop(&b->events)) != NULL;)
        if (drv)
            b->cu.cuEventDestroy(p);
    for (void *p; (p = flyt_pset_pop(&b->pools)) != NULL;)
        if (drv)
            b->cu.cuMemPoolDestroy(p);
    flyt_hash_free(&b->streams);
    flyt_hash_free(&b->events);
    flyt_hash_free(&b->pools);
    while (b->modules) {
        struct flyt_cuda_module *m = b->modules;
        module_unlink(b, m);
        func_free_all(m);
        if (drv)
            b->cu.cuModuleUnload(m->mod);
        free(m->image);
        free(m);
    }
}

/* ---- session ---- */

static void cuda_close(flyt_backend *base)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b)
        return;
    if (b->ctx && flyt_cuda_ctx(b) == CUDA_SUCCESS) {
        CUresult r = b->cu.cuCtxSynchronize();
        if (r != CUDA_SUCCESS)
            flyt_debug("cuda backend: synchronize at close: %s", cu_errname(&b->cu, r));
    }
    flyt_cuda_staging_release(b, 1); /* also unmaps the host memory */
    flyt_cuda_ordered_drop(b); /* restored stream-ordered memory is Flyt's */
    flyt_cuda_mem_drop(b);
    flyt_cuda_aliases_drop(b); /* the modules and objects they named are gone */
    destroy_tracked(b);
    ctx_drop(b);
    free(b->kparams);
    free(b->ckpt.kparam_copy);
    free(b->ckpt.kobj_copy);
    free(b->share_groups);
    /* libcuda stays loaded: unloading an initialized driver is not safe */
    free(b);
}

/* ---- device ---- */

static CUresult cuda_device_count(flyt_backend *base, int *count)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b || !count)
        return CUDA_ERROR_INVALID_VALUE;
    return b->cu.cuDeviceGetCount(count);
}

static CUresult cuda_device_attr(flyt_backend *base, int attr, int *value)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b || !value)
        return CUDA_ERROR_INVALID_VALUE;
    /* the tenant sees its share of the SMs */
    if (attr == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT && b->share_sms > 0) {
        *value = b->share_sms;
        return CUDA_SUCCESS;
    }
    /* cudaDeviceAttr values are the CUdevice_attribute values */
    return b->cu.cuDeviceGetAttribute(value, (CUdevice_attribute)attr, b->dev);
}

static CUresult cuda_device_sync(flyt_backend *base)
{
    ENTER(b, base);
    return b->cu.cuCtxSynchronize();
}

static CUresult cuda_device_reset(flyt_backend *base)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b)
        return CUDA_ERROR_INVALID_VALUE;
    if (b->ctx && flyt_cuda_ctx(b) == CUDA_SUCCESS)
        b->cu.cuCtxSynchronize(); /* an error here is what the reset clears */
    flyt_cuda_staging_release(b, 0); /* buffers stay mapped: the server may hold one */
    flyt_cuda_ordered_drop(b); /* restored stream-ordered memory is Flyt's */
    flyt_cuda_mem_drop(b);
    flyt_cuda_aliases_drop(b); /* the modules and objects they named are gone */
    destroy_tracked(b);
    flyt_cuda_green_drop(b); /* rebuilt by ctx_acquire below */
    CUresult r = b->cu.cuDevicePrimaryCtxReset(b->dev);
    if (r != CUDA_SUCCESS)
        flyt_warn("cuda backend: primary context reset: %s", cu_errname(&b->cu, r));
    ctx_drop(b);
    CUresult r2 = ctx_acquire(b);
    if (r2 != CUDA_SUCCESS) /* e.g. after an illegal address: CUDA is done in this process */
        flyt_error("cuda backend: cannot retain the primary context after reset: %s",
                   cu_errname(&b->cu, r2));
    return r != CUDA_SUCCESS ? r : r2;
}

static CUresult cuda_get_limit(flyt_backend *base, int limit, uint64_t *value)
{
    ENTER(b, base);
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    size_t v = 0;
    CUresult r = b->cu.cuCtxGetLimit(&v, (CUlimit)limit);
    if (r == CUDA_SUCCESS)
        *value = v;
    return r;
}

static CUresult cuda_set_limit(flyt_backend *base, int limit, uint64_t value)
{
    ENTER(b, base);
    return b->cu.cuCtxSetLimit((CUlimit)limit, (size_t)value);
}

static CUresult cuda_mem_info(flyt_backend *base, uint64_t *free_bytes, uint64_t *total_bytes)
{
    ENTER(b, base);
    size_t f = 0, t = 0;
    CUresult r = b->cu.cuMemGetInfo(&f, &t);
    if (r == CUDA_SUCCESS) {
        if (free_bytes)
            *free_bytes = f;
        if (total_bytes)
            *total_bytes = t;
    }
    return r;
}

static CUresult cuda_pci_bus_id(flyt_backend *base, char *buf, int len)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b || !buf || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    return b->cu.cuDeviceGetPCIBusId(buf, len, b->dev);
}

static CUresult cuda_prio_range(flyt_backend *base, int *least, int *greatest)
{
    ENTER(b, base);
    return b->cu.cuCtxGetStreamPriorityRange(least, greatest);
}

static CUresult cuda_get_cache_config(flyt_backend *base, int *config)
{
    ENTER(b, base);
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    CUfunc_cache c = CU_FUNC_CACHE_PREFER_NONE;
    CUresult r = b->cu.cuCtxGetCacheConfig(&c);
    if (r == CUDA_SUCCESS)
        *config = (int)c;
    return r;
}

static CUresult cuda_set_cache_config(flyt_backend *base, int config)
{
    ENTER(b, base);
    return b->cu.cuCtxSetCacheConfig((CUfunc_cache)config);
}

static CUresult cuda_get_ctx_flags(flyt_backend *base, unsigned *flags)
{
    ENTER(b, base);
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    return b->cu.cuCtxGetFlags(flags);
}

static CUresult cuda_set_ctx_flags(flyt_backend *base, unsigned flags)
{
    ENTER(b, base);
    return b->cu.cuCtxSetFlags(flags);
}

static CUresult cuda_driver_version(flyt_backend *base, int *version)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b || !version)
        return CUDA_ERROR_INVALID_VALUE;
    return b->cu.cuDriverGetVersion(version);
}

/* ---- memory ---- */

static CUresult cuda_mem_alloc(flyt_backend *base, uint64_t size, uint64_t *dptr)
{
    ENTER(b, base);
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    if (size == 0) { /* cudaMalloc(&p, 0) succeeds with p = NULL */
        *dptr = 0;
        return CUDA_SUCCESS;
    }
    return flyt_cuda_mem_place(b, size, dptr);
}

static CUresult cuda_mem_free(flyt_backend *base, uint64_t dptr)
{
    ENTER(b, base);
    if (dptr == 0) /* cudaFree(NULL) is a no-op */
        return CUDA_SUCCESS;
    flyt_cuda_ordered_reap(b);
    CUresult r;
    if (flyt_cuda_mem_release(b, dptr, &r))
        return r;
    if (flyt_cuda_ordered_free(b, dptr, NULL, 1, &r))
        return r;
    r = b->cu.cuMemFree((CUdeviceptr)dptr); /* e.g. stream-ordered memory, freed at once */
    if (r == CUDA_SUCCESS)
        flyt_cuda_ordered_forget(b, dptr);
    return r;
}

static CUresult cuda_mem_alloc_pitch(flyt_backend *base, uint64_t width, uint64_t height,
                                     uint64_t *dptr, uint64_t *pitch)
{
    ENTER(b, base);
    if (!dptr || !pitch)
        return CUDA_ERROR_INVALID_VALUE;
    if (width == 0 || height == 0) { /* cudaMallocPitch: success, NULL, pitch 0 */
        *dptr = 0;
        *pitch = 0;
        return CUDA_SUCCESS;
    }
    uint64_t pp = 0;
    CUresult r = flyt_cuda_mem_pitch(b, width, &pp);
    if (r == CUDA_SUCCESS && height > UINT64_MAX / pp)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS)
        r = flyt_cuda_mem_place(b, pp * height, dptr);
    if (r == CUDA_SUCCESS)
        *pitch = pp;
    return r;
}

static CUresult cuda_mem_alloc_async(flyt_backend *base, uint64_t size, flyt_bhandle pool,
                                     flyt_bhandle stream, uint64_t *dptr)
{
    ENTER(b, base);
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_cuda_ordered_reap(b);
    CUdeviceptr p = 0;
    CUresult r;
    if (pool)
        r = b->cu.cuMemAllocFromPoolAsync(&p, (size_t)size, (CUmemoryPool)pool,
                                          flyt_cuda_enqueue(b, stream));
    else
        r = b->cu.cuMemAllocAsync(&p, (size_t)size, flyt_cuda_enqueue(b, stream));
    if (r == CUDA_SUCCESS && flyt_cuda_ordered_note(b, p, size, pool) != 0) {
        b->cu.cuMemFreeAsync(p, flyt_cuda_enqueue(b, stream)); /* a capture would miss it */
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS)
        *dptr = p;
    return r;
}

static CUresult cuda_mem_free_async(flyt_backend *base, uint64_t dptr, flyt_bhandle stream)
{
    ENTER(b, base);
    CUresult r;
    if (flyt_cuda_ordered_free(b, dptr, flyt_cuda_enqueue(b, stream), 0, &r))
        return r; /* restored: not the driver's pools' */
    r = b->cu.cuMemFreeAsync((CUdeviceptr)dptr, flyt_cuda_enqueue(b, stream));
    if (r == CUDA_SUCCESS)
        flyt_cuda_ordered_forget(b, dptr);
    return r;
}

static CUresult cuda_pointer_attrs(flyt_backend *base, uint64_t ptr, flyt_rep_pointer_attrs *out)
{
    ENTER(b, base);
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned int type = 0, managed = 0;
    int ordinal = -2; /* CU_DEVICE_INVALID unless the driver knows the pointer */
    CUdeviceptr devptr = 0, start = 0;
    size_t range = 0;
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,   CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    };
    void *data[] = {&type, &managed, &ordinal, &devptr, &start, &range};
    static_assert(sizeof attrs / sizeof attrs[0] == sizeof data / sizeof data[0], "attr table");
    CUresult r = b->cu.cuPointerGetAttributes((unsigned)(sizeof attrs / sizeof attrs[0]), attrs,
                                              data, (CUdeviceptr)flyt_cuda_xlate(b, ptr));
    if (r != CUDA_SUCCESS)
        return r;
    memset(out, 0, sizeof *out);
    /* CUmemorytype -> cudaMemoryType */
    if (managed)
        out->type = 3; /* cudaMemoryTypeManaged */
    else if (type == CU_MEMORYTYPE_HOST)
        out->type = 1; /* cudaMemoryTypeHost */
    else if (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_ARRAY)
        out->type = 2; /* cudaMemoryTypeDevice */
    else if (type == CU_MEMORYTYPE_UNIFIED)
        out->type = 3;
    else
        out->type = 0; /* cudaMemoryTypeUnregistered */
    out->device = ordinal;
    out->device_pointer = devptr;
    out->base = start;
    out->size = range;
    /* the allocation's range, not the chunk's nor a restored one's granules */
    if (!flyt_cuda_mem_range(b, ptr, &out->base, &out->size) &&
        flyt_cuda_ordered_range(b, ptr, &out->base, &out->size))
        out->device_pointer = ptr; /* the client's address, also where it is aliased */
    return CUDA_SUCCESS;
}

static CUresult cuda_pool_default(flyt_backend *base, flyt_bhandle *pool)
{
    ENTER(b, base);
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    CUmemoryPool p = NULL;
    CUresult r = b->cu.cuDeviceGetDefaultMemPool(&p, b->dev);
    if (r == CUDA_SUCCESS)
        *pool = (flyt_bhandle)p;
    return r;
}

static CUresult cuda_pool_create(flyt_backend *base, uint64_t max_size, unsigned handle_types,
                                 flyt_bhandle *pool)
{
    ENTER(b, base);
    if (!pool || (handle_types & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = (CUmemAllocationHandleType)handle_types;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = b->dev;
    props.maxSize = (size_t)max_size;
    CUmemoryPool p = NULL;
    CUresult r = b->cu.cuMemPoolCreate(&p, &props);
    if (r != CUDA_SUCCESS)
        return r;
    if (flyt_pset_add(&b->pools, p) != 0) {
        b->cu.cuMemPoolDestroy(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pool = (flyt_bhandle)p;
    return CUDA_SUCCESS;
}

static CUresult cuda_pool_destroy(flyt_backend *base, flyt_bhandle pool)
{
    ENTER(b, base);
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    /* a pool not created here is the default pool: the driver refuses it */
    CUresult r = b->cu.cuMemPoolDestroy((CUmemoryPool)pool);
    if (r == CUDA_SUCCESS)
        flyt_pset_del(&b->pools, pool);
    return r;
}

static CUresult cuda_pool_trim(flyt_backend *base, flyt_bhandle pool, uint64_t keep_bytes)
{
    ENTER(b, base);
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return b->cu.cuMemPoolTrimTo((CUmemoryPool)pool, (size_t)keep_bytes);
}

/* The reuse policies are int; the thresholds and counters cuuint64_t. */
static int pool_attr_is_int(int attr)
{
    return attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

static CUresult cuda_pool_set_attr(flyt_backend *base, flyt_bhandle pool, int attr, uint64_t value)
{
    ENTER(b, base);
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (pool_attr_is_int(attr)) {
        int v = (int)value;
        return b->cu.cuMemPoolSetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, &v);
    }
    cuuint64_t v = value;
    return b->cu.cuMemPoolSetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, &v);
}

static CUresult cuda_pool_get_attr(flyt_backend *base, flyt_bhandle pool, int attr, uint64_t *value)
{
    ENTER(b, base);
    if (!pool || !value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r;
    if (pool_attr_is_int(attr)) {
        int v = 0;
        r = b->cu.cuMemPoolGetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, &v);
        if (r == CUDA_SUCCESS)
            *value = (uint64_t)(int64_t)v;
    } else {
        cuuint64_t v = 0;
        r = b->cu.cuMemPoolGetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, &v);
        if (r == CUDA_SUCCESS)
            *value = v;
    }
    /* restored stream-ordered allocations are Flyt's memory, outside the driver's pool,
     * yet the program's from that pool (PyTorch's cudaMallocAsync backend reports its
     * memory_allocated from USED_MEM_CURRENT); the high marks get them too (as if they
     * were all still live at the high point: exact until one is freed) */
    if (r == CUDA_SUCCESS && (attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT || attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH))
        *value += flyt_cuda_ordered_pool_bytes(b, pool, 0);
    if (r == CUDA_SUCCESS &&
        (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT || attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH))
        *value += flyt_cuda_ordered_pool_bytes(b, pool, 1);
    return r;
}

/* ---- streams ---- */

CUresult flyt_cuda_stream_make(struct flyt_cuda_backend *b, unsigned flags, int priority,
                               CUstream *out)
{
    CUstream s = NULL;
    CUresult r;
    /* In a green context: non-blocking streams through cuGreenCtxStreamCreate
     * (which takes only CU_STREAM_NON_BLOCKING); blocking ones are created
     * with the green context current, which makes them streams of it that
     * still synchronize with its legacy stream (backend_cuda_green.c). */
    if (b->green && (flags & CU_STREAM_NON_BLOCKING))
        r = b->cu.cuGreenCtxStreamCreate(&s, b->green, flags, priority);
    else
        r = b->cu.cuStreamCreateWithPriority(&s, flags, priority);
    if (r != CUDA_SUCCESS)
        return r;
    /* a blocking stream in a green context gets its legacy-stream
     * synchronization from backend_cuda_legacy.c */
    if (b->green && !(flags & CU_STREAM_NON_BLOCKING))
        r = flyt_cuda_blocking_add(b, s);
    if (r != CUDA_SUCCESS || flyt_pset_add(&b->streams, s) != 0) {
        flyt_cuda_blocking_del(b, s);
        b->cu.cuStreamDestroy(s);
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = s;
    return CUDA_SUCCESS;
}

static CUresult cuda_stream_create(flyt_backend *base, unsigned flags, int priority,
                                   flyt_bhandle *stream)
{
    ENTER(b, base);
    if (!stream)
        return CUDA_ERROR_INVALID_VALUE;
    CUstream s = NULL;
    CUresult r = flyt_cuda_stream_make(b, flags, priority, &s);
    if (r == CUDA_SUCCESS)
        *stream = (flyt_bhandle)s;
    return r;
}

static CUresult cuda_stream_destroy(flyt_backend *base, flyt_bhandle stream)
{
    ENTER(b, base);
    /* only streams created here; the NULL / legacy / per-thread streams are not */
    if (!flyt_pset_del(&b->streams, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    flyt_cuda_blocking_del(b, (CUstream)stream);
    return b->cu.cuStreamDestroy((CUstream)stream);
}

static CUresult cuda_stream_sync(flyt_backend *base, flyt_bhandle stream)
{
    ENTER(b, base);
    return b->cu.cuStreamSynchronize(flyt_cuda_stream(b, stream));
}

static CUresult cuda_stream_query(flyt_backend *base, flyt_bhandle stream)
{
    ENTER(b, base);
    return b->cu.cuStreamQuery(flyt_cuda_stream(b, stream));
}

static CUresult cuda_stream_wait_event(flyt_backend *base, flyt_bhandle stream, flyt_bhandle event,
                                       unsigned flags)
{
    ENTER(b, base);
    if (!event)
        return CUDA_ERROR_INVALID_HANDLE;
    return b->cu.cuStreamWaitEvent(flyt_cuda_enqueue(b, stream), (CUevent)event, flags);
}

static CUresult cuda_stream_get_flags(flyt_backend *base, flyt_bhandle stream, unsigned *flags)
{
    ENTER(b, base);
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUstream s = flyt_cuda_stream(b, stream);
    if (b->green && flyt_cuda_is_blocking(b, s)) {
        *flags = CU_STREAM_DEFAULT; /* what the application asked for */
        return CUDA_SUCCESS;
    }
    return b->cu.cuStreamGetFlags(s, flags);
}

static CUresult cuda_stream_get_priority(flyt_backend *base, flyt_bhandle stream, int *priority)
{
    ENTER(b, base);
    if (!priority)
        return CUDA_ERROR_INVALID_VALUE;
    return b->cu.cuStreamGetPriority(flyt_cuda_stream(b, stream), priority);
}

static CUresult cuda_stream_host_func(flyt_backend *base, flyt_bhandle stream, flyt_host_func_cb fn,
                                      void *arg)
{
    ENTER(b, base);
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    /* the driver calls fn(arg) on its own thread, in stream order */
    return b->cu.cuLaunchHostFunc(flyt_cuda_enqueue(b, stream), (CUhostFn)fn, arg);
}

/* ---- events ---- */

static CUresult cuda_event_create(flyt_backend *base, unsigned flags, flyt_bhandle *event)
{
    ENTER(b, base);
    if (!event)
        return CUDA_ERROR_INVALID_VALUE;
    CUevent e = NULL;
    CUresult r = b->cu.cuEventCreate(&e, flags);
    return r == CUDA_SUCCESS ? flyt_cuda_event_adopt(b, e, event) : r;
}

CUresult flyt_cuda_event_adopt(struct flyt_cuda_backend *b, CUevent e, flyt_bhandle *event)
{
    if (flyt_pset_add(&b->events, e) != 0) {
        b->cu.cuEventDestroy(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *event = (flyt_bhandle)e;
    return CUDA_SUCCESS;
}

static CUresult cuda_event_destroy(flyt_backend *base, flyt_bhandle event)
{
    ENTER(b, base);
    if (!flyt_pset_del(&b->events, event))
        return CUDA_ERROR_INVALID_HANDLE;
    return b->cu.cuEventDestroy((CUevent)event);
}

static CUresult cuda_event_record(flyt_backend *base, flyt_bhandle event, flyt_bhandle stream,
                                  unsigned flags)
{
    ENTER(b, base);
    if (!event)
        return CUDA_ERROR_INVALID_HANDLE;
    return b->cu.cuEventRecordWithFlags((CUevent)event, flyt_cuda_enqueue(b, stream), flags);
}

static CUresult cuda_event_query(flyt_backend *base, flyt_bhandle event)
{
    ENTER(b, base);
    if (!event)
        return CUDA_ERROR_INVALID_HANDLE;
    return b->cu.cuEventQuery((CUevent)event);
}

static CUresult cuda_event_sync(flyt_backend *base, flyt_bhandle event)
{
    ENTER(b, base);
    if (!event)
        return CUDA_ERROR_INVALID_HANDLE;
    return b->cu.cuEventSynchronize((CUevent)event);
}

static CUresult cuda_event_elapsed(flyt_backend *base, flyt_bhandle start, flyt_bhandle end, float *ms)
{
    ENTER(b, base);
    if (!start || !end)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    return b->cu.cuEventElapsedTime(ms, (CUevent)start, (CUevent)end);
}

/* ---- modules and kernels ---- */

#define FATBIN_MAGIC 0xBA55ED50u

/* cuModuleLoadData takes no size: make sure the driver's own size fields
 * stay inside what the client sent, so a bad image cannot make it read past
 * the buffer. Returns 0 when the image may be passed as is. */
static int image_check(const void *image, size_t size)
{
    const unsigned char *p = image;
    if (size >= 16) {
        uint32_t magic;
        memcpy(&magic, p, 4);
        if (magic == FATBIN_MAGIC) { /* u32 magic, u16 version, u16 header size, u64 body size */
            uint16_t hdr;
            uint64_t body;
            memcpy(&hdr, p + 6, 2);
            memcpy(&body, p + 8, 8);
            return (hdr >= 16 && hdr <= size && body <= size - hdr) ? 0 : -1;
        }
    }
    if (size >= 4 && memcmp(p, ELFMAG, SELFMAG) == 0) {
        if (size < sizeof(Elf64_Ehdr) || p[EI_CLASS] != ELFCLASS64)
            return -1;
        Elf64_Ehdr eh;
        memcpy(&eh, p, sizeof eh);
        if (eh.e_shnum && (eh.e_shoff > size ||
                           (uint64_t)eh.e_shnum * eh.e_shentsize > size - eh.e_shoff))
            return -1;
        if (eh.e_phnum && (eh.e_phoff > size ||
                           (uint64_t)eh.e_phnum * eh.e_phentsize > size - eh.e_phoff))
            return -1;
        return 0;
    }
    /* anything else is PTX text: it must end within the buffer */
    return memchr(p, 0, size) ? 0 : 1;
}

static CUresult cuda_module_load(flyt_backend *base, const void *image, size_t size, void *owned,
                                 flyt_bhandle *module)
{
    ENTER(b, base);
    if (!image || size == 0 || !module || (owned != NULL && owned != image))
        return CUDA_ERROR_INVALID_VALUE;
    int chk = image_check(image, size);
    if (chk < 0)
        return CUDA_ERROR_INVALID_IMAGE;
    const void *image_sent = image; /* kept as sent, for a checkpoint */
    char *text = NULL;
    if (chk > 0) { /* PTX without its NUL: load a terminated copy */
        text = malloc(size + 1);
        if (!text)
            return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(text, image, size);
        text[size] = '\0';
        image = text;
    }
    struct flyt_cuda_module *m = calloc(1, sizeof *m);
    if (!m) {
        free(text);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = b->cu.cuModuleLoadData(&m->mod, image);
    free(text);
    if (r == CUDA_SUCCESS && flyt_cuda_state_keep_image(m, image_sent, size, owned) != 0) {
        b->cu.cuModuleUnload(m->mod);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
        free(m);
        return r;
    }
    m->next = b->modules;
    if (b->modules)
        b->modules->prev = m;
    b->modules = m;
    *module = m;
    return CUDA_SUCCESS;
}

static CUresult cuda_module_unload(flyt_backend *base, flyt_bhandle module)
{
    ENTER(b, base);
    struct flyt_cuda_module *m = module;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = b->cu.cuModuleUnload(m->mod);
    module_unlink(b, m);
    func_free_all(m);
    free(m->image);
    free(m);
    return r;
}

/* Reads a function's parameter layout. nparams = -1 when the driver cannot
 * say; launches then pass the buffer whole (CU_LAUNCH_PARAM_BUFFER_POINTER). */
static void func_read_params(struct flyt_cuda_backend *b, struct flyt_cuda_func *f)
{
    size_t cap = 0;
    f->nparams = 0;
    for (uint32_t i = 0; i < FLYT_MAX_PARAMS; i++) {
        size_t off = 0, sz = 0;
        CUresult r = b->cu.cuFuncGetParamInfo(f->fn, i, &off, &sz);
        if (r == CUDA_ERROR_INVALID_VALUE)
            return; /* past the last parameter */
        if (r != CUDA_SUCCESS || off > UINT32_MAX || sz > UINT32_MAX)
            goto unknown;
        if (i == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            uint32_t *no = realloc(f->poff, ncap * sizeof *no);
            if (!no)
                goto unknown;
            f->poff = no;
            uint32_t *ns = realloc(f->psize, ncap * sizeof *ns);
            if (!ns)
                goto unknown;
            f->psize = ns;
            cap = ncap;
        }
        f->poff[i] = (uint32_t)off;
        f->psize[i] = (uint32_t)sz;
        f->nparams = (int)i + 1;
    }
unknown:
    free(f->poff);
    free(f->psize);
    f->poff = f->psize = NULL;
    f->nparams = -1;
}

static CUresult cuda_func_get(flyt_backend *base, flyt_bhandle module, const char *name,
                              flyt_bhandle *func)
{
    ENTER(b, base);
    struct flyt_cuda_module *m = module;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!name || !func)
        return CUDA_ERROR_INVALID_VALUE;
    CUfunction fn = NULL;
    CUresult r = b->cu.cuModuleGetFunction(&fn, m->mod, name);
    if (r != CUDA_SUCCESS)
        return r;
    for (struct flyt_cuda_func *f = m->funcs; f; f = f->next)
        if (f->fn == fn) {
            *func = f;
            return CUDA_SUCCESS;
        }
    struct flyt_cuda_func *f = calloc(1, sizeof *f);
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    f->fn = fn;
    func_read_params(b, f);
    f->next = m->funcs;
    m->funcs = f;
    *func = f;
    return CUDA_SUCCESS;
}

static CUresult cuda_func_param_info(flyt_backend *base, flyt_bhandle func, uint32_t index,
                                     uint32_t *offset, uint32_t *size)
{
    ENTER(b, base);
    struct flyt_cuda_func *f = func;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!offset || !size)
        return CUDA_ERROR_INVALID_VALUE;
    if (f->nparams >= 0) {
        if (index >= (uint32_t)f->nparams)
            return CUDA_ERROR_INVALID_VALUE;
        *offset = f->poff[index];
        *size = f->psize[index];
        return CUDA_SUCCESS;
    }
    size_t off = 0, sz = 0;
    CUresult r = b->cu.cuFuncGetParamInfo(f->fn, index, &off, &sz);
    if (r == CUDA_SUCCESS) {
        *offset = (uint32_t)off;
        *size = (uint32_t)sz;
    }
    return r;
}

static CUresult cuda_tensor_map(flyt_backend *base, const flyt_req_tensor_map *r, uint64_t out[16])
{
    ENTER(b, base);
    CUtensorMap map;
    void *addr = (void *)(uintptr_t)r->global_address;
    CUresult res;
    switch (r->kind) {
    case FLYT_TMAP_TILED:
        res = b->cu.cuTensorMapEncodeTiled(&map, r->data_type, r->rank, addr, r->global_dim,
                                           r->global_strides, r->box_dim, r->element_strides,
                                           r->interleave, r->swizzle, r->l2_promotion, r->oob_fill);
        break;
    case FLYT_TMAP_IM2COL:
        res = b->cu.cuTensorMapEncodeIm2col(&map, r->data_type, r->rank, addr, r->global_dim,
                                            r->global_strides, r->lower_corner, r->upper_corner,
                                            r->channels_per_pixel, r->pixels_per_column,
                                            r->element_strides, r->interleave, r->swizzle,
                                            r->l2_promotion, r->oob_fill);
        break;
    case FLYT_TMAP_IM2COL_WIDE:
        res = b->cu.cuTensorMapEncodeIm2colWide(&map, r->data_type, r->rank, addr, r->global_dim,
                                                r->global_strides, r->lower_corner[0],
                                                r->upper_corner[0], r->channels_per_pixel,
                                                r->pixels_per_column, r->element_strides,
                                                r->interleave, r->wide_mode, r->swizzle,
                                                r->l2_promotion, r->oob_fill);
        break;
    default:
        memcpy(&map, r->map, sizeof map);
        res = b->cu.cuTensorMapReplaceAddress(&map, addr);
        break;
    }
    if (res == CUDA_SUCCESS)
        memcpy(out, &map, sizeof map);
    return res;
}

static CUresult cuda_link(flyt_backend *base, uint32_t count, const uint32_t *types,
                          const void *const *images, const size_t *sizes, const char *const *names,
                          uint32_t flags, char *const logs[2], void **cubin, size_t *cubin_size)
{
    ENTER(b, base);
    CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                              CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                              CU_JIT_LOG_VERBOSE};
    void *values[] = {logs[0], (void *)(uintptr_t)FLYT_LINK_LOG, logs[1],
                      (void *)(uintptr_t)FLYT_LINK_LOG,
                      (void *)(uintptr_t)((flags & FLYT_LINK_VERBOSE) != 0)};
    logs[0][0] = logs[1][0] = '\0';
    CUlinkState state;
    CUresult r = b->cu.cuLinkCreate(5, options, values, &state);
    if (r != CUDA_SUCCESS)
        return r;
    for (uint32_t i = 0; i < count && r == CUDA_SUCCESS; i++)
        r = b->cu.cuLinkAddData(state, (CUjitInputType)types[i], (void *)images[i], sizes[i],
                                names[i], 0, NULL, NULL);
    void *out = NULL;
    size_t out_size = 0;
    if (r == CUDA_SUCCESS)
        r = b->cu.cuLinkComplete(state, &out, &out_size);
    /* the cubin belongs to the link state: copied before it goes */
    if (r == CUDA_SUCCESS && (*cubin = malloc(out_size ? out_size : 1)) == NULL)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        memcpy(*cubin, out, out_size);
        *cubin_size = out_size;
    }
    b->cu.cuLinkDestroy(state);
    return r;
}

static CUresult cuda_module_func_names(flyt_backend *base, flyt_bhandle module, char *buf,
                                       size_t cap, size_t *len, uint32_t *count)
{
    ENTER(b, base);
    struct flyt_cuda_module *m = module;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    unsigned n = 0;
    CUresult r = b->cu.cuModuleGetFunctionCount(&n, m->mod);
    if (r != CUDA_SUCCESS)
        return r;
    CUfunction *fns = calloc(n ? n : 1, sizeof *fns);
    if (!fns)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = b->cu.cuModuleEnumerateFunctions(fns, n, m->mod);
    size_t used = 0;
    for (unsigned i = 0; r == CUDA_SUCCESS && i < n; i++) {
        const char *name = NULL;
        r = b->cu.cuFuncGetName(&name, fns[i]);
        size_t l = r == CUDA_SUCCESS && name ? strlen(name) + 1 : 0;
        if (r == CUDA_SUCCESS && (l == 0 || l > cap - used))
            r = CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS) {
            memcpy(buf + used, name, l);
            used += l;
        }
    }
    free(fns);
    *len = used;
    *count = n;
    return r;
}

static CUresult cuda_global_get(flyt_backend *base, flyt_bhandle module, const char *name,
                                uint64_t *dptr, uint64_t *size)
{
    ENTER(b, base);
    struct flyt_cuda_module *m = module;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p = 0;
    size_t sz = 0;
    CUresult r = b->cu.cuModuleGetGlobal(&p, &sz, m->mod, name);
    if (r == CUDA_SUCCESS) {
        if (dptr)
            *dptr = p;
        if (size)
            *size = sz;
    }
    return r;
}

static CUresult cuda_managed_get(flyt_backend *base, flyt_bhandle module, const char *name,
                                 uint64_t *dptr, uint64_t *size)
{
    CUresult r = cuda_global_get(base, module, name, dptr, size);
    ENTER(b, base);
    unsigned managed = 0;
    CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_IS_MANAGED;
    void *data = &managed;
    if (r == CUDA_SUCCESS)
        r = b->cu.cuPointerGetAttributes(1, &attr, &data, (CUdeviceptr)*dptr);
    return r == CUDA_SUCCESS && !managed ? CUDA_ERROR_NOT_FOUND : r;
}

static CUresult cuda_func_get_attr(flyt_backend *base, flyt_bhandle func, int attr, int *value)
{
    ENTER(b, base);
    struct flyt_cuda_func *f = func;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    return b->cu.cuFuncGetAttribute(value, (CUfunction_attribute)attr, f->fn);
}

static CUresult cuda_func_set_attr(flyt_backend *base, flyt_bhandle func, int attr, int value)
{
    ENTER(b, base);
    struct flyt_cuda_func *f = func;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    return b->cu.cuFuncSetAttribute(f->fn, (CUfunction_attribute)attr, value);
}

static CUresult cuda_func_set_cache(flyt_backend *base, flyt_bhandle func, int config)
{
    ENTER(b, base);
    struct flyt_cuda_func *f = func;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    return b->cu.cuFuncSetCacheConfig(f->fn, (CUfunc_cache)config);
}

/* The wire's launch attribute is the driver's, byte for byte. */
static_assert(sizeof(flyt_launch_attr) == sizeof(CUlaunchAttribute), "launch attr size");
static_assert(offsetof(flyt_launch_attr, id) == offsetof(CUlaunchAttribute, id), "launch attr id");
static_assert(offsetof(flyt_launch_attr, value) == offsetof(CUlaunchAttribute, value),
              "launch attr value");
static_assert(sizeof(((flyt_launch_attr *)0)->value) == sizeof(CUlaunchAttributeValue),
              "launch attr value size");
static_assert(sizeof(CUlaunchAttributeID) == sizeof(uint32_t), "launch attr id size");

/*
 * Parameters go to cuLaunchKernelEx as kernelParams, an array of pointers
 * into the packed buffer at the offsets cuFuncGetParamInfo gave, as the
 * runtime's own cudaLaunchKernel passes them. The other form, the whole
 * buffer through `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER), is documented
 * for cuLaunchKernel but not for cooperative launches, which
 * cuLaunchKernelEx does through an attribute; kernelParams works for every
 * launch. `extra` remains the fallback for a function whose layout the
 * driver could not report.
 */
/* A kernel's parameters as the driver takes them (see above); ka points
 * into params and b's scratch, valid until the next call. */
CUresult flyt_cuda_kernel_args(struct flyt_cuda_backend *b, const struct flyt_cuda_func *f,
                               const void *params, uint32_t param_bytes, struct flyt_kargs *ka)
{
    ka->kp = NULL;
    ka->extra = NULL;
    ka->buf_size = param_bytes;
    params = flyt_cuda_params_xlate(b, params, param_bytes);
    params = flyt_cuda_params_xlate_objs(b, f, params, param_bytes);
    if (f->nparams > 0) {
        if ((size_t)f->nparams > b->kparams_cap) {
            void **n = realloc(b->kparams, (size_t)f->nparams * sizeof *n);
            if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
            b->kparams = n;
            b->kparams_cap = (size_t)f->nparams;
        }
        for (int i = 0; i < f->nparams; i++) {
            if ((uint64_t)f->poff[i] + f->psize[i] > param_bytes)
                return CUDA_ERROR_INVALID_VALUE; /* buffer shorter than the layout */
            b->kparams[i] = (char *)params + f->poff[i];
        }
        ka->kp = b->kparams;
    } else if (f->nparams < 0 && param_bytes) {
        ka->ex[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
        ka->ex[1] = (void *)params;
        ka->ex[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
        ka->ex[3] = &ka->buf_size;
        ka->ex[4] = CU_LAUNCH_PARAM_END;
        ka->extra = ka->ex;
    }
    return CUDA_SUCCESS;
}

static CUresult cuda_occupancy_cluster(flyt_backend *base, flyt_bhandle func, unsigned what,
                                       const uint32_t grid[3], const uint32_t block[3],
                                       uint32_t shared_mem, const flyt_launch_attr *attrs,
                                       uint32_t attr_count, int *count)
{
    ENTER(b, base);
    struct flyt_cuda_func *f = func;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    CUlaunchAttribute la[FLYT_MAX_LAUNCH_ATTRS];
    if (attr_count)
        memcpy(la, attrs, attr_count * sizeof la[0]);
    CUlaunchConfig cfg = {.gridDimX = grid[0], .gridDimY = grid[1], .gridDimZ = grid[2],
                          .blockDimX = block[0], .blockDimY = block[1], .blockDimZ = block[2],
                          .sharedMemBytes = shared_mem, .attrs = attr_count ? la : NULL,
                          .numAttrs = attr_count};
    if (what == FLYT_CLUSTER_MAX_SIZE)
        return b->cu.cuOccupancyMaxPotentialClusterSize(count, f->fn, &cfg);
    return b->cu.cuOccupancyMaxActiveClusters(count, f->fn, &cfg);
}

static CUresult cuda_launch(flyt_backend *base, flyt_bhandle func, const uint32_t grid[3],
                            const uint32_t block[3], uint32_t shared_mem, flyt_bhandle stream,
                            const void *params, uint32_t param_bytes, const flyt_launch_attr *attrs,
                            uint32_t attr_count)
{
    ENTER(b, base);
    struct flyt_cuda_func *f = func;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!grid || !block || attr_count > FLYT_MAX_LAUNCH_ATTRS || (attr_count && !attrs) ||
        (param_bytes && !params))
        return CUDA_ERROR_INVALID_VALUE;

    /* a copy: the driver may write results back into attributes */
    CUlaunchAttribute la[FLYT_MAX_LAUNCH_ATTRS];
    if (attr_count)
        memcpy(la, attrs, attr_count * sizeof la[0]);

    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = grid[0];
    cfg.gridDimY = grid[1];
    cfg.gridDimZ = grid[2];
    cfg.blockDimX = block[0];
    cfg.blockDimY = block[1];
    cfg.blockDimZ = block[2];
    cfg.sharedMemBytes = shared_mem;
    cfg.hStream = flyt_cuda_enqueue(b, stream);
    cfg.attrs = attr_count ? la : NULL;
    cfg.numAttrs = attr_count;

    struct flyt_kargs ka;
    CUresult r = flyt_cuda_kernel_args(b, f, params, param_bytes, &ka);
    if (r != CUDA_SUCCESS)
        return r;
    return b->cu.cuLaunchKernelEx(&cfg, f->fn, ka.kp, ka.extra);
}

static CUresult cuda_occupancy(flyt_backend *base, flyt_bhandle func, int block_size, uint64_t dyn_smem,
                               unsigned flags, int *num_blocks)
{
    ENTER(b, base);
    struct flyt_cuda_func *f = func;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!num_blocks)
        return CUDA_ERROR_INVALID_VALUE;
    return b->cu.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num_blocks, f->fn, block_size,
                                                                      (size_t)dyn_smem, flags);
}

static CUresult cuda_occupancy_smem(flyt_backend *base, flyt_bhandle func, int num_blocks,
                                    int block_size, uint64_t *smem)
{
    ENTER(b, base);
    struct flyt_cuda_func *f = func;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!smem)
        return CUDA_ERROR_INVALID_VALUE;
    size_t s = 0;
    CUresult r = b->cu.cuOccupancyAvailableDynamicSMemPerBlock(&s, f->fn, num_blocks, block_size);
    if (r == CUDA_SUCCESS)
        *smem = s;
    return r;
}

static const struct flyt_backend_ops cuda_ops = {
    .name = "cuda",
    .close = cuda_close,
    .capture_begin = flyt_cuda_capture_begin,
    .capture_end = flyt_cuda_capture_end,
    .capture_mode = flyt_cuda_capture_mode,
    .capture_info = flyt_cuda_capture_info,
    .capture_deps = flyt_cuda_capture_deps,
    .graph_create = flyt_cuda_graph_create,
    .graph_destroy = flyt_cuda_graph_destroy,
    .graph_clone = flyt_cuda_graph_clone,
    .graph_instantiate = flyt_cuda_graph_instantiate,
    .exec_destroy = flyt_cuda_exec_destroy,
    .exec_update = flyt_cuda_exec_update,
    .graph_nodes = flyt_cuda_graph_nodes,
    .graph_node_type = flyt_cuda_graph_node_type,
    .graph_dot = flyt_cuda_graph_dot,
    .graph_add_node = flyt_cuda_graph_add_node,
    .graph_add_deps = flyt_cuda_graph_add_deps,
    .graph_node_get = flyt_cuda_graph_node_get,
    .graph_node_set = flyt_cuda_graph_node_set,
    .graph_node_misc = flyt_cuda_graph_node_misc,
    .capture_to_graph = flyt_cuda_capture_to_graph,
    .user_object_create = flyt_cuda_user_object_create,
    .device_count = cuda_device_count,
    .device_props = flyt_cuda_device_props,
    .device_attr = cuda_device_attr,
    .device_sync = cuda_device_sync,
    .device_reset = cuda_device_reset,
    .get_limit = cuda_get_limit,
    .set_limit = cuda_set_limit,
    .mem_info = cuda_mem_info,
    .pci_bus_id = cuda_pci_bus_id,
    .prio_range = cuda_prio_range,
    .get_cache_config = cuda_get_cache_config,
    .set_cache_config = cuda_set_cache_config,
    .get_ctx_flags = cuda_get_ctx_flags,
    .set_ctx_flags = cuda_set_ctx_flags,
    .driver_version = cuda_driver_version,
    .set_sm_share = flyt_cuda_set_sm_share,
    .resize_sm_share = flyt_cuda_resize_sm_share,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .mem_alloc_pitch = cuda_mem_alloc_pitch,
    .mem_alloc_async = cuda_mem_alloc_async,
    .mem_free_async = cuda_mem_free_async,
    .pointer_attrs = cuda_pointer_attrs,
    .pool_default = cuda_pool_default,
    .pool_create = cuda_pool_create,
    .pool_destroy = cuda_pool_destroy,
    .pool_trim = cuda_pool_trim,
    .pool_set_attr = cuda_pool_set_attr,
    .pool_get_attr = cuda_pool_get_attr,
    .staging_get = flyt_cuda_staging_get,
    .staging_put = flyt_cuda_staging_put,
    .htod_2d = flyt_cuda_htod_2d,
    .dtoh_2d = flyt_cuda_dtoh_2d,
    .dtod_2d = flyt_cuda_dtod_2d,
    .memset_2d = flyt_cuda_memset_2d,
    .vmm_granularity = flyt_cuda_vmm_granularity,
    .vmm_reserve = flyt_cuda_vmm_reserve,
    .vmm_free = flyt_cuda_vmm_free,
    .vmm_create = flyt_cuda_vmm_create,
    .vmm_release = flyt_cuda_vmm_release,
    .vmm_map = flyt_cuda_vmm_map,
    .vmm_unmap = flyt_cuda_vmm_unmap,
    .vmm_set_access = flyt_cuda_vmm_set_access,
    .vmm_retain = flyt_cuda_vmm_retain,
    .host_register = flyt_cuda_host_register,
    .host_unregister = flyt_cuda_host_unregister,
    .host_register_mapped = flyt_cuda_host_register_mapped,
    .htod_host = flyt_cuda_htod_host,
    .dtoh_host = flyt_cuda_dtoh_host,
    .array_create = flyt_cuda_array_create,
    .array_destroy = flyt_cuda_array_destroy,
    .mipmap_create = flyt_cuda_mipmap_create,
    .mipmap_destroy = flyt_cuda_mipmap_destroy,
    .mipmap_level = flyt_cuda_mipmap_level,
    .copy_3d = flyt_cuda_copy_3d,
    .tex_create = flyt_cuda_tex_create,
    .tex_destroy = flyt_cuda_tex_destroy,
    .surf_create = flyt_cuda_surf_create,
    .surf_destroy = flyt_cuda_surf_destroy,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .stream_query = cuda_stream_query,
    .stream_wait_event = cuda_stream_wait_event,
    .stream_get_flags = cuda_stream_get_flags,
    .stream_get_priority = cuda_stream_get_priority,
    .stream_host_func = cuda_stream_host_func,
    .ipc_mem_export = flyt_cuda_ipc_mem_export,
    .ipc_mem_import = flyt_cuda_ipc_mem_import,
    .ipc_mem_unimport = flyt_cuda_ipc_mem_unimport,
    .ipc_event_export = flyt_cuda_ipc_event_export,
    .ipc_event_import = flyt_cuda_ipc_event_import,
    .ipc_vmm_export = flyt_cuda_ipc_vmm_export,
    .ipc_vmm_import = flyt_cuda_ipc_vmm_import,
    .ipc_pool_export = flyt_cuda_ipc_pool_export,
    .ipc_pool_import = flyt_cuda_ipc_pool_import,
    .ipc_ptr_export = flyt_cuda_ipc_ptr_export,
    .ipc_ptr_import = flyt_cuda_ipc_ptr_import,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .event_elapsed = cuda_event_elapsed,
    .module_load = cuda_module_load,
    .module_unload = cuda_module_unload,
    .func_get = cuda_func_get,
    .func_param_info = cuda_func_param_info,
    .module_func_names = cuda_module_func_names,
    .link = cuda_link,
    .tensor_map = cuda_tensor_map,
    .call = flyt_cuda_call,
    .global_get = cuda_global_get,
    .managed_get = cuda_managed_get,
    .func_get_attr = cuda_func_get_attr,
    .func_set_attr = cuda_func_set_attr,
    .func_set_cache = cuda_func_set_cache,
    .launch = cuda_launch,
    .occupancy = cuda_occupancy,
    .occupancy_smem = cuda_occupancy_smem,
    .occupancy_cluster = cuda_occupancy_cluster,
    .state_allocs = flyt_cuda_state_allocs,
    .state_vmm = flyt_cuda_state_vmm,
    .mem_alloc_at = flyt_cuda_mem_alloc_at,
    .state_async = flyt_cuda_state_async,
    .async_spans = flyt_cuda_async_spans,
    .async_alloc_at = flyt_cuda_async_alloc_at,
    .module_image = flyt_cuda_module_image,
    .state_arenas = flyt_cuda_mem_arenas,
    .arena_at = flyt_cuda_mem_arena_at,
    .global_alias = flyt_cuda_global_alias,
    .obj_alias = flyt_cuda_obj_alias,
};

/* ---- open ---- */

flyt_backend *flyt_backend_cuda_open(int gpu, char *err, size_t errlen)
{
    char dummy[8], eb[256];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    struct flyt_cuda_backend *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    b->base.ops = &cuda_ops;
    b->ordinal = gpu;

    if (driver_load(&b->cu, err, errlen) != 0) {
        free(b);
        return NULL;
    }
    flyt_cuda_calls_resolve(b);

    /* From here on the driver may have started threads: never dlclose it. */
    CUresult r = b->cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "cuInit failed: %s", cu_errdesc(&b->cu, r, eb, sizeof eb));
        free(b);
        return NULL;
    }
    int count = 0;
    r = b->cu.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "cuDeviceGetCount failed: %s", cu_errdesc(&b->cu, r, eb, sizeof eb));
        free(b);
        return NULL;
    }
    if (gpu < 0 || gpu >= count) {
        snprintf(err, errlen, "no GPU %d: the driver sees %d device%s", gpu, count,
                 count == 1 ? "" : "s");
        free(b);
        return NULL;
    }
    r = b->cu.cuDeviceGet(&b->dev, gpu);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "cuDeviceGet(%d) failed: %s", gpu, cu_errdesc(&b->cu, r, eb, sizeof eb));
        free(b);
        return NULL;
    }
    r = ctx_acquire(b);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "cannot retain the primary context of GPU %d: %s", gpu,
                 cu_errdesc(&b->cu, r, eb, sizeof eb));
        free(b);
        return NULL;
    }
    char name[256] = "";
    b->cu.cuDeviceGetName(name, (int)sizeof name, b->dev);
    flyt_info("cuda backend: GPU %d (%s)", gpu, name);
    return &b->base;
}

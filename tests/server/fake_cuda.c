/* A fake CUDA driver over host memory: see fake_cuda.h. */
#include "fake_cuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "session.h"

struct fake_live fake_live;

/* ---- driver objects: malloc'd tokens naming their kind ---- */

static const char token_stream, token_event, token_module, token_func, token_pool, token_ctx,
    token_vmem, token_array;

static void *obj_new(const char *kind, int *count)
{
    const char **o = malloc(sizeof *o);
    if (o) {
        *o = kind;
        ++*count;
    }
    return o;
}

static CUresult obj_free(void *o, const char *kind, int *count)
{
    if (!o || *(const char **)o != kind)
        return CUDA_ERROR_INVALID_HANDLE;
    free(o);
    --*count;
    return CUDA_SUCCESS;
}

/* ---- the fake device address space ---- */

#define SPACE_BYTES ((uint64_t)6 << 30) /* virtual (MAP_NORESERVE): arenas of 2 GiB fit, twice */
#define MAX_RANGES  512

enum range_kind { R_ALLOC = 1, R_RESERVED, R_OCCUPIED, R_MAPPED, R_GLOBAL, R_POOL };

#define GLOBAL_BYTES ((uint64_t)64 << 10) /* module globals: the top of the space */

static uint64_t space; /* its base, granule-aligned */
static struct range {
    uint64_t base, size;
    int      kind;
} ranges[MAX_RANGES];
static int nranges;

static void space_init(void)
{
    if (space)
        return;
    uint64_t span = SPACE_BYTES + FAKE_GRANULE;
    void *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
        perror("fake_cuda: mmap of the fake device address space");
        abort();
    }
    space = ((uint64_t)(uintptr_t)m + FAKE_GRANULE - 1) & ~(FAKE_GRANULE - 1);
    ranges[nranges++] = (struct range){space + SPACE_BYTES - GLOBAL_BYTES, GLOBAL_BYTES, R_GLOBAL};
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int overlaps(const struct range *r, uint64_t base, uint64_t size)
{
    return r->base < base + size && base < r->base + r->size;
}

/* Whether [base, base + size) is inside the space and meets no range of
 * the kinds that own addresses (mappings live inside reservations). */
static int range_free(uint64_t base, uint64_t size)
{
    if (base < space || base + size > space + SPACE_BYTES)
        return 0;
    for (int i = 0; i < nranges; i++)
        if (ranges[i].kind != R_MAPPED && overlaps(&ranges[i], base, size))
            return 0;
    return 1;
}

/* The lowest free address of that alignment, 0 when none. */
static uint64_t first_fit(uint64_t size, uint64_t align)
{
    for (uint64_t at = align_up(space, align); at + size <= space + SPACE_BYTES;) {
        uint64_t next = at;
        for (int i = 0; i < nranges; i++)
            if (ranges[i].kind != R_MAPPED && overlaps(&ranges[i], at, size))
                next = align_up(ranges[i].base + ranges[i].size, align);
        if (next == at)
            return at;
        at = next;
    }
    return 0;
}

static int range_add(uint64_t base, uint64_t size, int kind)
{
    if (nranges == MAX_RANGES)
        return -1;
    ranges[nranges++] = (struct range){base, size, kind};
    return 0;
}

/* The range of that kind that contains [base, base + size), or -1. */
static int range_find(uint64_t base, uint64_t size, int kind)
{
    for (int i = 0; i < nranges; i++)
        if (ranges[i].kind == kind && base >= ranges[i].base &&
            base + size <= ranges[i].base + ranges[i].size)
            return i;
    return -1;
}

/* Drops range i; memory that was device memory (an allocation or a
 * mapping) is scribbled over. */
static void range_del(int i)
{
    if (ranges[i].kind == R_ALLOC || ranges[i].kind == R_MAPPED)
        memset((void *)(uintptr_t)ranges[i].base, FAKE_FREED, ranges[i].size);
    ranges[i] = ranges[--nranges];
}

void fake_cuda_occupy(uint64_t addr, uint64_t size, int occupy)
{
    space_init();
    int i = range_find(addr, size, R_OCCUPIED);
    if (occupy && i < 0)
        range_add(addr, size, R_OCCUPIED);
    else if (!occupy && i >= 0)
        range_del(i);
}

/* ---- the driver ---- */

static CUresult fake_cuGetErrorName(CUresult r, const char **s)
{
    *s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_FAKE";
    return CUDA_SUCCESS;
}
static CUresult fake_cuGetErrorString(CUresult r, const char **s)
{
    (void)r;
    *s = "an error of the fake driver";
    return CUDA_SUCCESS;
}
CUresult fake_cuInit(unsigned flags) { return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
static CUresult fake_cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
static CUresult fake_cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
static CUresult fake_cuDeviceGet(CUdevice *d, int ordinal)
{
    *d = ordinal;
    return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
static CUresult fake_cuDeviceGetName(char *name, int len, CUdevice d)
{
    (void)d;
    snprintf(name, (size_t)len, "fake GPU");
    return CUDA_SUCCESS;
}
static CUresult fake_cuDeviceTotalMem(size_t *bytes, CUdevice d)
{
    (void)d;
    *bytes = (size_t)1 << 30; /* as cuMemGetInfo says */
    return CUDA_SUCCESS;
}
static CUresult fake_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)a, (void)d;
    *v = 1;
    return CUDA_SUCCESS;
}
CUresult fake_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    (void)d;
    fake_live.ctx_refs++;
    *c = (CUcontext)(uintptr_t)&token_ctx;
    return CUDA_SUCCESS;
}
static void pool_trim(void);

/* The last release destroys the context and, as the driver does, its
 * allocations (VMM reservations and mappings are the process's). */
static CUresult fake_cuDevicePrimaryCtxRelease(CUdevice d)
{
    (void)d;
    if (fake_live.ctx_refs == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (--fake_live.ctx_refs == 0) {
        for (int i = nranges - 1; i >= 0; i--)
            if (ranges[i].kind == R_ALLOC) {
                range_del(i);
                fake_live.allocs--;
            }
        pool_trim(); /* its pools too */
    }
    return CUDA_SUCCESS;
}
static CUresult fake_cuCtxSetCurrent(CUcontext c)
{
    return !c || c == (CUcontext)(uintptr_t)&token_ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
CUresult fake_cuCtxSynchronize(void) { return CUDA_SUCCESS; }
static CUresult fake_cuCtxGetLimit(size_t *v, CUlimit l)
{
    (void)v, (void)l;
    return CUDA_ERROR_NOT_SUPPORTED; /* a capture then records no limit */
}
static CUresult fake_cuCtxGetCacheConfig(CUfunc_cache *c) { (void)c; return CUDA_ERROR_NOT_SUPPORTED; }
static CUresult fake_cuCtxGetFlags(unsigned *f) { (void)f; return CUDA_ERROR_NOT_SUPPORTED; }
static CUresult fake_cuMemGetInfo(size_t *free_bytes, size_t *total)
{
    *free_bytes = *total = (size_t)1 << 30;
    return CUDA_SUCCESS;
}

CUresult fake_cuMemAlloc(CUdeviceptr *p, size_t n)
{
    space_init();
    uint64_t at = n ? first_fit(n, 512) : 0;
    if (at == 0 || range_add(at, n, R_ALLOC) != 0)
        return n ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    fake_live.allocs++;
    *p = at;
    return CUDA_SUCCESS;
}
CUresult fake_cuMemAllocPitch(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e)
{
    (void)e;
    *pitch = (w + 511) / 512 * 512;
    return fake_cuMemAlloc(p, *pitch * h);
}
CUresult fake_cuMemFree(CUdeviceptr p)
{
    for (int i = 0; i < nranges; i++)
        if (ranges[i].kind == R_ALLOC && ranges[i].base == p) {
            range_del(i);
            fake_live.allocs--;
            pool_trim();
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}
/* The stream-ordered pool, as the H100's default pool: one reservation at a
 * FAKE_HINT_ALIGN boundary (made at the first allocation, given back when its last
 * allocation is freed, as a fresh process would have none), allocations placed one
 * after another inside it. */
#define FAKE_POOL_BYTES ((uint64_t)256 << 20)
static uint64_t pool_base;

/* The pool's reservation goes once it holds no allocation. */
static void pool_trim(void)
{
    for (int i = 0; pool_base && i < nranges; i++)
        if (ranges[i].kind == R_ALLOC && overlaps(&ranges[i], pool_base, FAKE_POOL_BYTES))
            return;
    int i = pool_base ? range_find(pool_base, FAKE_POOL_BYTES, R_POOL) : -1;
    if (i >= 0)
        range_del(i);
    pool_base = 0;
}

static uint64_t pool_fit(uint64_t n)
{
    for (uint64_t at = pool_base; at + n <= pool_base + FAKE_POOL_BYTES;) {
        uint64_t next = at;
        for (int i = 0; i < nranges; i++)
            if (ranges[i].kind == R_ALLOC && overlaps(&ranges[i], at, n))
                next = align_up(ranges[i].base + ranges[i].size, 512);
        if (next == at)
            return at;
        at = next;
    }
    return 0;
}

static CUresult fake_cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s)
{
    (void)s;
    space_init();
    if (pool_base == 0 && ((pool_base = first_fit(FAKE_POOL_BYTES, FAKE_HINT_ALIGN)) == 0 ||
                           range_add(pool_base, FAKE_POOL_BYTES, R_POOL) != 0)) {
        pool_base = 0;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t at = n ? pool_fit(n) : 0;
    if (at == 0 || range_add(at, n, R_ALLOC) != 0)
        return n ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    fake_live.allocs++;
    *p = at;
    return CUDA_SUCCESS;
}
static CUresult fake_cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    (void)s;
    return fake_cuMemFree(p);
}
CUresult fake_cuMemHostRegister(void *p, size_t n, unsigned flags)
{
    (void)p, (void)n, (void)flags;
    fake_live.registered++;
    return CUDA_SUCCESS;
}
static CUresult fake_cuMemHostUnregister(void *p)
{
    (void)p;
    fake_live.registered--;
    return CUDA_SUCCESS;
}

/* Device memory the program may touch: an allocation, or mappings one
 * after another (adjacent ones are one range of addresses to the device). */
static int reachable(uint64_t p, uint64_t n)
{
    if (range_find(p, n, R_ALLOC) >= 0 || range_find(p, n, R_GLOBAL) >= 0)
        return 1;
    for (uint64_t end = p + n; p < end;) {
        int i = range_find(p, 1, R_MAPPED);
        if (i < 0)
            return 0;
        p = ranges[i].base + ranges[i].size;
    }
    return 1;
}

CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    (void)s;
    if (!reachable(dst, n))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    memcpy((void *)(uintptr_t)dst, src, n);
    return CUDA_SUCCESS;
}
CUresult fake_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    (void)s;
    if (!reachable(src, n))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

/* ---- virtual memory management ---- */

static CUresult fake_cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option)
{
    (void)option;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    *g = FAKE_GRANULE;
    return CUDA_SUCCESS;
}
/* addr is a hint, as the driver's: granted when free, else another address;
 * as on the H100 (tests/gpu/probes/pool_span_probe.c), never for a small
 * range (2 MiB there; 32 MiB granted) nor off a 32 MiB boundary, where it
 * lays large reservations out itself. */
#define FAKE_HINT_MIN ((uint64_t)16 << 20)
CUresult fake_cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                                  unsigned long long flags)
{
    space_init();
    if (size == 0 || size % FAKE_GRANULE || flags)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t at = addr && addr % FAKE_HINT_ALIGN == 0 && size >= FAKE_HINT_MIN && range_free(addr, size)
                      ? addr : first_fit(size, size >= FAKE_HINT_MIN ? FAKE_HINT_ALIGN
                                               : align > FAKE_GRANULE ? align : FAKE_GRANULE);
    if (at == 0 || range_add(at, size, R_RESERVED) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fake_live.reservations++;
    *p = at;
    return CUDA_SUCCESS;
}
static CUresult fake_cuMemAddressFree(CUdeviceptr p, size_t size)
{
    int i = range_find(p, size, R_RESERVED);
    if (i < 0 || ranges[i].base != p || ranges[i].size != size)
        return CUDA_ERROR_INVALID_VALUE;
    if (range_find(p, 1, R_MAPPED) >= 0)
        return CUDA_ERROR_INVALID_VALUE; /* still mapped: unmap first */
    range_del(i);
    fake_live.reservations--;
    return CUDA_SUCCESS;
}
CUresult fake_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (size == 0 || size % FAKE_GRANULE || flags || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id != 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *o = obj_new(&token_vmem, &fake_live.handles);
    *h = (CUmemGenericAllocationHandle)(uintptr_t)o;
    return o ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult fake_cuMemRelease(CUmemGenericAllocationHandle h)
{
    return obj_free((void *)(uintptr_t)h, &token_vmem, &fake_live.handles);
}
CUresult fake_cuMemMap(CUdeviceptr p, size_t size, size_t offset,
                              CUmemGenericAllocationHandle h, unsigned long long flags)
{
    const char **o = (const char **)(uintptr_t)h;
    if (!o || *o != &token_vmem || offset || flags || range_find(p, size, R_RESERVED) < 0 ||
        range_find(p, 1, R_MAPPED) >= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (range_add(p, size, R_MAPPED) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fake_live.mappings++;
    return CUDA_SUCCESS;
}
CUresult fake_cuMemUnmap(CUdeviceptr p, size_t size)
{
    int i = range_find(p, size, R_MAPPED);
    if (i < 0 || ranges[i].base != p || ranges[i].size != size)
        return CUDA_ERROR_INVALID_VALUE;
    range_del(i);
    fake_live.mappings--;
    return CUDA_SUCCESS;
}
CUresult fake_cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n)
{
    if (n != 1 || d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE ||
        d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || range_find(p, size, R_MAPPED) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
/* The range is the allocation's or the mapping's, as the driver answers. */
static CUresult fake_cuPointerGetAttributes(unsigned n, CUpointer_attribute *attrs, void **data,
                                            CUdeviceptr p)
{
    int i = range_find(p, 1, R_ALLOC);
    if (i < 0)
        i = range_find(p, 1, R_MAPPED);
    for (unsigned k = 0; k < n; k++) {
        switch (attrs[k]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            *(unsigned *)data[k] = i >= 0 ? CU_MEMORYTYPE_DEVICE : 0;
            break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned *)data[k] = 0; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[k] = i >= 0 ? 0 : -2; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data[k] = i >= 0 ? p : 0; break;
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
            *(CUdeviceptr *)data[k] = i >= 0 ? ranges[i].base : 0;
            break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data[k] = i >= 0 ? ranges[i].size : 0; break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return CUDA_SUCCESS;
}

/* ---- streams, events, modules, launches, pools ---- */

CUresult fake_cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio)
{
    (void)flags, (void)prio;
    *s = obj_new(&token_stream, &fake_live.streams);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult fake_cuStreamDestroy(CUstream s) { return obj_free(s, &token_stream, &fake_live.streams); }
static CUresult fake_cuStreamSynchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }
static CUresult fake_cuStreamQuery(CUstream s) { (void)s; return (CUresult)fake_live.sticky; }
CUresult fake_cuEventCreate(CUevent *e, unsigned flags)
{
    (void)flags;
    *e = obj_new(&token_event, &fake_live.events);
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult fake_cuEventDestroy(CUevent e) { return obj_free(e, &token_event, &fake_live.events); }
static CUresult fake_cuEventRecord(CUevent e, CUstream s) { (void)e, (void)s; return CUDA_SUCCESS; }
static CUresult fake_cuEventQuery(CUevent e) { (void)e; return CUDA_SUCCESS; }
static CUresult fake_cuEventSynchronize(CUevent e) { (void)e; return CUDA_SUCCESS; }

CUresult fake_cuModuleLoadData(CUmodule *m, const void *image)
{
    (void)image;
    *m = obj_new(&token_module, &fake_live.modules);
    return *m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult fake_cuModuleUnload(CUmodule m) { return obj_free(m, &token_module, &fake_live.modules); }
/* One function, "kernel", in every module. */
CUresult fake_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    (void)m;
    if (strcmp(name, "kernel") != 0)
        return CUDA_ERROR_NOT_FOUND;
    *f = (CUfunction)(uintptr_t)&token_func;
    return CUDA_SUCCESS;
}
static CUresult fake_cuModuleGetGlobal(CUdeviceptr *p, size_t *size, CUmodule m, const char *name)
{
    (void)m, (void)name;
    space_init();
    fake_live.globals++;
    *p = space + SPACE_BYTES - GLOBAL_BYTES + (uint64_t)fake_live.global_shift;
    *size = 64;
    return CUDA_SUCCESS;
}
static CUresult fake_cuFuncGetParamInfo(CUfunction f, size_t i, size_t *off, size_t *size)
{
    (void)f;
    if (i > 0)
        return CUDA_ERROR_INVALID_VALUE; /* one parameter: a pointer */
    *off = 0;
    *size = 8;
    return CUDA_SUCCESS;
}
static CUresult fake_cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f)
{
    (void)a, (void)f;
    *v = 0;
    return CUDA_SUCCESS;
}
/* ---- arrays (2D and 3D of 1-byte to 16-byte elements, packed), texture and surface objects ---- */

struct fake_array {
    const char *kind;
    size_t      row, rows;
    unsigned char *mem;
};

static CUresult fake_cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    size_t elem = (d->Format == CU_AD_FORMAT_FLOAT ? 4 : 1) * d->NumChannels;
    size_t rows = (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1);
    struct fake_array *f = malloc(sizeof *f);
    unsigned char *mem = calloc(rows, d->Width * elem);
    if (f == NULL || mem == NULL) {
        free(f);
        free(mem);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *f = (struct fake_array){&token_array, d->Width * elem, rows, mem};
    fake_live.arrays++;
    *a = (CUarray)f;
    return CUDA_SUCCESS;
}
static CUresult fake_cuArrayDestroy(CUarray a)
{
    struct fake_array *f = (struct fake_array *)a;
    if (f && f->kind == &token_array)
        free(f->mem);
    return obj_free(f, &token_array, &fake_live.arrays);
}

/* Where a side of a 3D copy starts and its pitch (an array: its rows). */
static unsigned char *side_at(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray arr,
                              size_t x, size_t y, size_t pitch, size_t *out_pitch)
{
    const struct fake_array *f = (const struct fake_array *)arr;
    if (t == CU_MEMORYTYPE_ARRAY) {
        *out_pitch = f->row;
        return f->mem + y * f->row + x;
    }
    *out_pitch = pitch;
    return (unsigned char *)(uintptr_t)(t == CU_MEMORYTYPE_HOST ? (uintptr_t)host : dev) + y * pitch + x;
}
static CUresult fake_cuMemcpy3DAsync(const CUDA_MEMCPY3D *c, CUstream s)
{
    (void)s;
    size_t dp, sp, rows = c->Height * c->Depth; /* packed slices: a 2D copy of all rows */
    unsigned char *dst = side_at(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray,
                                 c->dstXInBytes, c->dstY + c->dstZ * c->dstHeight, c->dstPitch, &dp);
    const unsigned char *src = side_at(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray,
                                       c->srcXInBytes, c->srcY + c->srcZ * c->srcHeight, c->srcPitch, &sp);
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * dp, src + r * sp, c->WidthInBytes);
    return CUDA_SUCCESS;
}

static uint64_t obj_values[64]; /* live texture and surface values; 0: a free slot */

static int obj_live(uint64_t v)
{
    for (int i = 0; v && i < 64; i++)
        if (obj_values[i] == v)
            return 1;
    return 0;
}
static CUresult obj_make(unsigned long long *v)
{
    static uint64_t next;
    for (int i = 0; i < 64; i++)
        if (obj_values[i] == 0) {
            *v = obj_values[i] = fake_live.obj_base + ++next;
            fake_live.objs++;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult obj_drop(uint64_t v)
{
    for (int i = 0; v && i < 64; i++)
        if (obj_values[i] == v) {
            obj_values[i] = 0;
            fake_live.objs--;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult fake_cuTexObjectCreate(CUtexObject *t, const CUDA_RESOURCE_DESC *r,
                                       const CUDA_TEXTURE_DESC *td, const CUDA_RESOURCE_VIEW_DESC *v)
{
    (void)td, (void)v;
    if (r->resType == CU_RESOURCE_TYPE_ARRAY &&
        *(const char **)(const void *)r->res.array.hArray != &token_array)
        return CUDA_ERROR_INVALID_HANDLE;
    return obj_make(t);
}
static CUresult fake_cuTexObjectDestroy(CUtexObject t) { return obj_drop(t); }
static CUresult fake_cuSurfObjectCreate(CUsurfObject *s, const CUDA_RESOURCE_DESC *r)
{
    return fake_cuTexObjectCreate(s, r, NULL, NULL);
}
static CUresult fake_cuSurfObjectDestroy(CUsurfObject s) { return obj_drop(s); }

static CUresult fake_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                      void **extra)
{
    (void)config, (void)extra;
    fake_live.launches++;
    if (f != (CUfunction)(uintptr_t)&token_func || params == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    memcpy(&p, params[0], sizeof p);
    fake_live.last_param = p;
    if (obj_live(p))
        return CUDA_SUCCESS;
    if (!reachable(p, FAKE_KERNEL_BYTES))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (int i = 0; i < FAKE_KERNEL_BYTES; i++)
        ((unsigned char *)(uintptr_t)p)[i]++;
    return CUDA_SUCCESS;
}
CUresult fake_cuMemPoolCreate(CUmemoryPool *p, const CUmemPoolProps *props)
{
    (void)props;
    *p = obj_new(&token_pool, &fake_live.pools);
    return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult fake_cuMemPoolDestroy(CUmemoryPool p) { return obj_free(p, &token_pool, &fake_live.pools); }
/* ---- graphs: empty ones only, for what the driver says of them ---- */

static char token_graph;
static CUresult fake_cuGraphCreate(CUgraph *g, unsigned flags)
{
    *g = flags ? NULL : obj_new(&token_graph, &fake_live.graphs);
    return flags ? CUDA_ERROR_INVALID_VALUE : *g ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult fake_cuGraphDestroy(CUgraph g) { return obj_free(g, &token_graph, &fake_live.graphs); }
/* As the H100's driver: an array with room for no node is refused even where there
 * are none (measured, an empty graph's cuGraphGetNodes(g, nodes, &0)). */
static CUresult fake_cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *n)
{
    if (!g || *(const char **)g != &token_graph || !n || (nodes && *n == 0))
        return CUDA_ERROR_INVALID_VALUE;
    *n = 0;
    return CUDA_SUCCESS;
}

static char token_default_pool; /* the device's default pool: the stream-ordered region */
static CUresult fake_cuDeviceGetDefaultMemPool(CUmemoryPool *p, CUdevice d)
{
    (void)d;
    *p = (CUmemoryPool)&token_default_pool;
    return CUDA_SUCCESS;
}
/* The default pool's usage: its allocations' bytes, its reservation's; 0 for another. */
static CUresult fake_cuMemPoolGetAttribute(CUmemoryPool p, CUmemPool_attribute attr, void *value)
{
    uint64_t used = 0;
    for (int i = 0; pool_base && i < nranges; i++)
        if (ranges[i].kind == R_ALLOC && overlaps(&ranges[i], pool_base, FAKE_POOL_BYTES))
            used += ranges[i].size;
    int dflt = p == (CUmemoryPool)&token_default_pool;
    switch (attr) {
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = dflt ? used : 0;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *(cuuint64_t *)value = dflt && pool_base ? FAKE_POOL_BYTES : 0;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* ---- run-time linking: the cubin is the inputs one after another; an
 * input starting with "undefined" fails the link with an error log ---- */

struct fake_link {
    char *info, *error;
    size_t info_cap, error_cap;
    int verbose;
    char image[4096];
    size_t size;
    int undefined;
};

static CUresult fake_cuLinkCreate(unsigned n, CUjit_option *options, void **values, CUlinkState *out)
{
    struct fake_link *l = calloc(1, sizeof *l);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < n; i++) {
        uintptr_t v = (uintptr_t)values[i];
        switch (options[i]) {
        case CU_JIT_INFO_LOG_BUFFER: l->info = values[i]; break;
        case CU_JIT_ERROR_LOG_BUFFER: l->error = values[i]; break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: l->info_cap = v; break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: l->error_cap = v; break;
        case CU_JIT_LOG_VERBOSE: l->verbose = v != 0; break;
        default: break;
        }
    }
    *out = (CUlinkState)l;
    return CUDA_SUCCESS;
}

static CUresult fake_cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size,
                                   const char *name, unsigned n, CUjit_option *options, void **values)
{
    (void)type, (void)name, (void)n, (void)options, (void)values;
    struct fake_link *l = (struct fake_link *)state;
    if (size > sizeof l->image - l->size)
        return CUDA_ERROR_INVALID_VALUE;
    l->undefined |= size >= 9 && memcmp(data, "undefined", 9) == 0;
    memcpy(l->image + l->size, data, size);
    l->size += size;
    return CUDA_SUCCESS;
}

static CUresult fake_cuLinkComplete(CUlinkState state, void **cubin, size_t *size)
{
    struct fake_link *l = (struct fake_link *)state;
    if (l->info && l->info_cap)
        snprintf(l->info, l->info_cap, "info: %zu bytes linked%s", l->size, l->verbose ? ", verbose" : "");
    if (l->undefined) {
        if (l->error && l->error_cap)
            snprintf(l->error, l->error_cap, "error: undefined reference");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *cubin = l->image;
    *size = l->size;
    return CUDA_SUCCESS;
}

static CUresult fake_cuLinkDestroy(CUlinkState state)
{
    free(state);
    return CUDA_SUCCESS;
}

#define FAKE_ENTRY(fn) flyt_cu_table_set(table, #fn, (void *)fake_##fn, NULL);
#define FAKE_ENTRIES(X)                                                                        \
    X(cuGetErrorName) X(cuGetErrorString) X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount)    \
    X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)        \
    X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuCtxGetLimit)         \
    X(cuCtxGetCacheConfig) X(cuCtxGetFlags) X(cuMemGetInfo) X(cuMemAlloc) X(cuMemAllocPitch)      \
    X(cuMemFree) X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemHostRegister)                       \
    X(cuMemHostUnregister) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)                             \
    X(cuMemGetAllocationGranularity) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate)    \
    X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) X(cuPointerGetAttributes)         \
    X(cuStreamCreateWithPriority) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery) X(cuEventCreate)     \
    X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) X(cuModuleLoadData) \
    X(cuModuleUnload) X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuFuncGetParamInfo)          \
    X(cuFuncGetAttribute) X(cuLaunchKernelEx) X(cuMemPoolCreate) X(cuMemPoolDestroy)           \
    X(cuDeviceGetDefaultMemPool) X(cuMemPoolGetAttribute) X(cuGraphCreate) X(cuGraphDestroy)   \
    X(cuGraphGetNodes)          \
    X(cuArray3DCreate) X(cuArrayDestroy) X(cuMemcpy3DAsync) X(cuTexObjectCreate)                 \
    X(cuTexObjectDestroy) X(cuSurfObjectCreate) X(cuSurfObjectDestroy) \
    X(cuLinkCreate) X(cuLinkAddData) X(cuLinkComplete) X(cuLinkDestroy)

void fake_cuda_table(struct flyt_cu_api *table)
{
    space_init();
    memset(table, 0, sizeof *table);
    FAKE_ENTRIES(FAKE_ENTRY)
}

/* ---- in-process sessions ---- */

static struct {
    pthread_t                        thread;
    int                              fd, server_fd;
    const struct flyt_server_config *cfg;
} sess;

static void *session_main(void *arg)
{
    (void)arg;
    flyt_session_run(sess.server_fd, "test", sess.cfg); /* closes server_fd */
    return NULL;
}

int fake_session_begin(const struct flyt_cu_api *table, const struct flyt_server_config *cfg,
                       int *fd, flyt_rep_hello *rep)
{
    flyt_cuda_driver_use(table);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0, "socketpair");
    sess.fd = *fd = sv[0];
    sess.server_fd = sv[1];
    sess.cfg = cfg;
    CHECK_EQ(pthread_create(&sess.thread, NULL, session_main, NULL), 0, "session thread");
    flyt_req_hello h;
    memset(&h, 0, sizeof h);
    h.magic = FLYT_PROTO_MAGIC;
    h.major = FLYT_PROTO_MAJOR;
    h.minor = 0; /* the session keeps this process's stdout and stderr */
    snprintf(h.client_host, sizeof h.client_host, "test");
    memset(rep, 0, sizeof *rep);
    return th_call_rep(sess.fd, FLYT_OP_HELLO, &h, sizeof h, NULL, 0, rep, sizeof *rep);
}

void fake_session_end(void)
{
    close(sess.fd);
    pthread_join(sess.thread, NULL);
}

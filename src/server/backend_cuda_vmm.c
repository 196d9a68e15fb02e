/*
 * Virtual memory management on the "cuda" backend: the driver's own
 * cuMemCreate/cuMemMap/cuMemSetAccess, with the session's one device put
 * in every location (the client names it 0). Reservations are carved out
 * of Flyt's arenas (backend_cuda_mem.c), never left to the driver, so that
 * a restored process reserves the same addresses again; the program maps
 * only inside its own. What it holds is recorded for a checkpoint
 * (state_vmm). What a program may ask is checked by handlers_vmm.c; the
 * driver checks sizes, alignment and ranges as it does natively.
 */
#include <stdlib.h>

#include "backend_cuda_int.h"

static CUmemAllocationProp driver_prop(const struct flyt_cuda_backend *b, const flyt_vmm_prop *p)
{
    CUmemAllocationProp prop = {
        .type = (CUmemAllocationType)p->type,
        .requestedHandleTypes = (CUmemAllocationHandleType)p->handle_types,
        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = b->dev},
    };
    prop.allocFlags.compressionType = p->compression;
    prop.allocFlags.gpuDirectRDMACapable = p->rdma_capable;
    prop.allocFlags.usage = p->usage;
    return prop;
}

CUresult flyt_cuda_vmm_granularity(flyt_backend *base, const flyt_vmm_prop *prop, uint64_t *bytes)
{
    ENTER(b, base);
    CUmemAllocationProp p = driver_prop(b, prop);
    size_t g = 0;
    CUresult r = b->cu.cuMemGetAllocationGranularity(&g, &p,
                                                     (CUmemAllocationGranularity_flags)prop->option);
    *bytes = g;
    return r;
}

/* ---- records ---- */

static struct flyt_cuda_vmem *vmem_of(const struct flyt_cuda_backend *b, uint64_t h)
{
    flyt_hash_slot *s = flyt_hash_find(&b->ckpt.vmems, h);
    return s ? s->value.ptr : NULL;
}

/* Forgets an allocation the driver has freed (no handle, no mapping). */
static void vmem_settle(struct flyt_cuda_backend *b, uint64_t h)
{
    struct flyt_cuda_vmem *v = vmem_of(b, h);
    if (v && v->refs == 0 && v->maps == 0) {
        flyt_hash_remove(&b->ckpt.vmems, h);
        free(v);
    }
}

/* Whether [ptr, ptr + size) lies inside one of the program's reservations. */
static int in_reservation(const struct flyt_cuda_backend *b, uint64_t ptr, uint64_t size)
{
    const flyt_hash *t = &b->ckpt.vranges.map;
    flyt_hash_iter it;
    flyt_hash_iter_init(t, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(t, &it)) != NULL;)
        if (ptr >= e->key && size <= e->value.u64 && ptr - e->key <= e->value.u64 - size)
            return 1;
    return 0;
}

/* The mapping holding addr, or NULL; its address in *at. */
static struct flyt_cuda_vmap *vmap_at(const struct flyt_cuda_backend *b, uint64_t addr, uint64_t *at)
{
    flyt_hash_iter it;
    flyt_hash_iter_init(&b->ckpt.vmaps, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(&b->ckpt.vmaps, &it)) != NULL;) {
        struct flyt_cuda_vmap *m = e->value.ptr;
        if (addr >= e->key && addr - e->key < m->size) {
            *at = e->key;
            return m;
        }
    }
    return NULL;
}

/* Whether a mapping starts in [ptr, ptr + size). */
static int mapped_in(const struct flyt_cuda_backend *b, uint64_t ptr, uint64_t size)
{
    flyt_hash_iter it;
    flyt_hash_iter_init(&b->ckpt.vmaps, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(&b->ckpt.vmaps, &it)) != NULL;)
        if (e->key >= ptr && e->key - ptr < size)
            return 1;
    return 0;
}

/* ---- the ops ---- */

CUresult flyt_cuda_vmm_reserve(flyt_backend *base, uint64_t size, uint64_t alignment, uint64_t addr,
                               uint64_t *ptr)
{
    ENTER(b, base);
    CUresult r = flyt_cuda_va_carve(b, size, alignment, addr, ptr);
    if (r == CUDA_SUCCESS && flyt_memtab_put(&b->ckpt.vranges, *ptr, size) != 0) {
        flyt_cuda_va_uncarve(b, *ptr, size);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

CUresult flyt_cuda_vmm_free(flyt_backend *base, uint64_t ptr, uint64_t size)
{
    ENTER(b, base);
    if (size == 0 || flyt_memtab_size(&b->ckpt.vranges, ptr) != size || mapped_in(b, ptr, size))
        return CUDA_ERROR_INVALID_VALUE; /* mappings must be gone first */
    flyt_memtab_take(&b->ckpt.vranges, ptr);
    flyt_cuda_va_uncarve(b, ptr, size);
    return CUDA_SUCCESS;
}

/* The compression the driver gave allocation h (asked: what prop asked for;
 * a driver table without the query answers that). */
static uint8_t granted_compression(struct flyt_cuda_backend *b, CUmemGenericAllocationHandle h,
                                   uint8_t asked)
{
    CUmemAllocationProp got = {0};
    if (!b->cu.cuMemGetAllocationPropertiesFromHandle ||
        b->cu.cuMemGetAllocationPropertiesFromHandle(&got, h) != CUDA_SUCCESS)
        return asked;
    return got.allocFlags.compressionType;
}

/* Records handle h, which r says the driver made (one reference), as the
 * backend's; on any failure nothing is kept (h released). */
static CUresult vmem_adopt(struct flyt_cuda_backend *b, CUresult r, CUmemGenericAllocationHandle h,
                           uint64_t size, const flyt_vmm_prop *prop, flyt_bhandle *mem)
{
    struct flyt_cuda_vmem *v = r == CUDA_SUCCESS ? malloc(sizeof *v) : NULL;
    flyt_hash_slot *s = v ? flyt_hash_insert(&b->ckpt.vmems, h) : NULL;
    if (s == NULL) {
        if (r == CUDA_SUCCESS) {
            b->cu.cuMemRelease(h);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        free(v);
        return r;
    }
    *v = (struct flyt_cuda_vmem){.size = size, .prop = *prop, .refs = 1};
    s->value.ptr = v;
    *mem = (flyt_bhandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

CUresult flyt_cuda_vmm_create(flyt_backend *base, uint64_t size, const flyt_vmm_prop *prop,
                              flyt_bhandle *mem, uint8_t *compression)
{
    ENTER(b, base);
    CUmemAllocationProp p = driver_prop(b, prop);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = b->cu.cuMemCreate(&h, (size_t)size, &p, 0);
    r = vmem_adopt(b, r, h, size, prop, mem); /* h is set by then: two statements */
    if (r == CUDA_SUCCESS && compression) /* the driver may decline compression (cudaCompressibleMemory checks) */
        *compression = granted_compression(b, h, prop->compression);
    return r;
}

CUresult flyt_cuda_vmm_release(flyt_backend *base, flyt_bhandle mem)
{
    ENTER(b, base);
    uint64_t h = (uint64_t)(uintptr_t)mem;
    struct flyt_cuda_vmem *v = vmem_of(b, h);
    if (v == NULL || v->refs == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = b->cu.cuMemRelease((CUmemGenericAllocationHandle)h);
    if (r == CUDA_SUCCESS) {
        v->refs--;
        vmem_settle(b, h);
    }
    return r;
}

CUresult flyt_cuda_vmm_map(flyt_backend *base, uint64_t ptr, uint64_t size, uint64_t offset,
                           flyt_bhandle mem)
{
    ENTER(b, base);
    uint64_t h = (uint64_t)(uintptr_t)mem;
    struct flyt_cuda_vmem *v = vmem_of(b, h);
    struct flyt_cuda_vmap *m = malloc(sizeof *m);
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = v && v->refs && in_reservation(b, ptr, size)
                     ? b->cu.cuMemMap(ptr, (size_t)size, (size_t)offset, h, 0)
                     : CUDA_ERROR_INVALID_VALUE;
    flyt_hash_slot *s = r == CUDA_SUCCESS ? flyt_hash_insert(&b->ckpt.vmaps, ptr) : NULL;
    if (s == NULL) {
        if (r == CUDA_SUCCESS) {
            b->cu.cuMemUnmap(ptr, (size_t)size);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        free(m);
        return r;
    }
    *m = (struct flyt_cuda_vmap){.size = size, .offset = offset, .mem = h};
    s->value.ptr = m;
    v->maps++;
    return CUDA_SUCCESS;
}

CUresult flyt_cuda_vmm_unmap(flyt_backend *base, uint64_t ptr, uint64_t size)
{
    ENTER(b, base);
    if (!in_reservation(b, ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = b->cu.cuMemUnmap(ptr, (size_t)size);
    if (r != CUDA_SUCCESS)
        return r;
    /* the range is whole mappings, one after another */
    uint64_t at, end = ptr + size;
    for (struct flyt_cuda_vmap *m; ptr < end && (m = vmap_at(b, ptr, &at)) != NULL;) {
        uint64_t h = m->mem;
        ptr = at + m->size;
        flyt_hash_remove(&b->ckpt.vmaps, at);
        free(m);
        struct flyt_cuda_vmem *v = vmem_of(b, h);
        if (v) {
            v->maps--;
            vmem_settle(b, h);
        }
    }
    return CUDA_SUCCESS;
}

CUresult flyt_cuda_vmm_set_access(flyt_backend *base, uint64_t ptr, uint64_t size, unsigned flags)
{
    ENTER(b, base);
    if (!in_reservation(b, ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = b->dev},
                         .flags = (CUmemAccess_flags)flags};
    CUresult r = b->cu.cuMemSetAccess(ptr, (size_t)size, &d, 1);
    uint64_t at, end = ptr + size;
    for (struct flyt_cuda_vmap *m; r == CUDA_SUCCESS && ptr < end && (m = vmap_at(b, ptr, &at));) {
        m->access = flags;
        ptr = at + m->size;
    }
    return r;
}

CUresult flyt_cuda_vmm_retain(flyt_backend *base, uint64_t addr, flyt_bhandle *mem)
{
    ENTER(b, base);
    uint64_t at;
    if (vmap_at(b, addr, &at) == NULL)
        return CUDA_ERROR_INVALID_VALUE; /* only the program's own mappings */
    CUmemGenericAllocationHandle h = 0;
    CUresult r = b->cu.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)addr);
    struct flyt_cuda_vmem *v = r == CUDA_SUCCESS ? vmem_of(b, h) : NULL;
    if (r == CUDA_SUCCESS && v == NULL) { /* cannot happen: every mapping is recorded */
        b->cu.cuMemRelease(h);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (v)
        v->refs++;
    *mem = (flyt_bhandle)(uintptr_t)h;
    return r;
}

/* ---- checkpoint ---- */

CUresult flyt_cuda_state_vmm(flyt_backend *base, const struct flyt_vmm_visit *fn, void *arg,
                             const char **what)
{
    struct flyt_cuda_backend *b = cb(base);
    *what = NULL;
    CUresult r = CUDA_SUCCESS;
    flyt_hash_iter it;
    flyt_hash_iter_init(&b->ckpt.vranges.map, &it);
    for (flyt_hash_slot *e; r == CUDA_SUCCESS && (e = flyt_hash_iter_next(&b->ckpt.vranges.map, &it));)
        r = fn->range(arg, e->key, e->value.u64);
    flyt_hash_iter_init(&b->ckpt.vmems, &it);
    for (flyt_hash_slot *e; r == CUDA_SUCCESS && (e = flyt_hash_iter_next(&b->ckpt.vmems, &it));) {
        const struct flyt_cuda_vmem *v = e->value.ptr;
        r = fn->mem(arg, (flyt_bhandle)(uintptr_t)e->key, v->size, &v->prop);
    }
    flyt_hash_iter_init(&b->ckpt.vmaps, &it);
    for (flyt_hash_slot *e; r == CUDA_SUCCESS && (e = flyt_hash_iter_next(&b->ckpt.vmaps, &it));) {
        const struct flyt_cuda_vmap *m = e->value.ptr;
        r = fn->map(arg, e->key, m->size, m->offset, (flyt_bhandle)(uintptr_t)m->mem, m->access);
    }
    return r;
}

void flyt_cuda_vmm_drop(struct flyt_cuda_backend *b, int live)
{
    flyt_hash_iter it;
    flyt_hash_iter_init(&b->ckpt.vmaps, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(&b->ckpt.vmaps, &it)) != NULL;) {
        struct flyt_cuda_vmap *m = e->value.ptr;
        if (live)
            b->cu.cuMemUnmap(e->key, (size_t)m->size);
        free(m);
    }
    flyt_hash_iter_init(&b->ckpt.vmems, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(&b->ckpt.vmems, &it)) != NULL;) {
        struct flyt_cuda_vmem *v = e->value.ptr;
        for (uint32_t i = 0; live && i < v->refs; i++)
            b->cu.cuMemRelease((CUmemGenericAllocationHandle)e->key);
        free(v);
    }
    flyt_hash_free(&b->ckpt.vmaps);
    flyt_hash_free(&b->ckpt.vmems);
    flyt_memtab_free(&b->ckpt.vranges); /* their space goes with the arenas */
}

/* ---- CUDA IPC of the program's own allocations (backend.h's ipc_vmm_*) ---- */

CUresult flyt_cuda_ipc_vmm_export(flyt_backend *base, flyt_bhandle mem, int *fd, uint64_t *size)
{
    ENTER(b, base);
    uint64_t h = (uint64_t)(uintptr_t)mem;
    struct flyt_cuda_vmem *v = vmem_of(b, h);
    if (v == NULL || v->refs == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int out = -1;
    /* the driver refuses an allocation not created exportable, as it would natively */
    CUresult r = b->cu.cuMemExportToShareableHandle(&out, (CUmemGenericAllocationHandle)h,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r == CUDA_SUCCESS) {
        *fd = out;
        *size = v->size;
    }
    return r;
}

CUresult flyt_cuda_ipc_vmm_import(flyt_backend *base, int fd, uint64_t size, flyt_bhandle *mem)
{
    ENTER(b, base);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = b->cu.cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    flyt_vmm_prop prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                          .handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                          .location_type = CU_MEM_LOCATION_TYPE_DEVICE};
    return vmem_adopt(b, r, h, size, &prop, mem);
}

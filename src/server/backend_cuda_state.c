/*
 * Checkpoint and restore on the "cuda" backend (docs/state-format.md):
 * the session's allocations are listed from the backend's own records, and
 * a restore places each one at its old address through the driver's
 * virtual-memory API: the address reserved with the old one as a fixed hint,
 * physical memory created, mapped and made accessible there.
 *
 * The driver packs small cuMemAlloc allocations into one granule (2 MiB),
 * so restored allocations are held in spans: granularity-aligned ranges,
 * each one reservation and one mapping, shared by every restored allocation
 * that overlaps it and unmapped when the last of them is freed.
 */
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_int.h"
#include "flyt_log.h"

/* ---- records ---- */

CUresult flyt_cuda_state_note(struct flyt_memtab *table, uint64_t dptr, uint64_t size)
{
    return flyt_memtab_put(table, dptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void flyt_cuda_state_forget(struct flyt_cuda_backend *b, uint64_t dptr)
{
    if (flyt_memtab_take(&b->ckpt.plain, dptr) == 0)
        flyt_memtab_take(&b->ckpt.async, dptr);
}

int flyt_cuda_state_keep_image(struct flyt_cuda_module *m, const void *image, size_t size)
{
    m->image = malloc(size);
    if (m->image == NULL)
        return -1;
    memcpy(m->image, image, size);
    m->image_size = size;
    return 0;
}

CUresult flyt_cuda_module_image(flyt_backend *base, flyt_bhandle module, const void **image,
                                size_t *size)
{
    const struct flyt_cuda_module *m = module;
    if (base == NULL || m == NULL || m->image == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *image = m->image;
    *size = m->image_size;
    return CUDA_SUCCESS;
}

int flyt_cuda_state_range(const struct flyt_cuda_backend *b, uint64_t ptr, uint64_t *base,
                          uint64_t *size)
{
    const flyt_hash *t = &b->ckpt.restored.map;
    flyt_hash_iter it;
    flyt_hash_iter_init(t, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(t, &it)) != NULL;)
        if (ptr >= e->key && ptr - e->key < e->value.u64) {
            *base = e->key;
            *size = e->value.u64;
            return 1;
        }
    return 0;
}

/* ---- capture ---- */

/* The first object the backend holds that a checkpoint cannot capture yet. */
static const char *uncapturable(const struct flyt_cuda_backend *b)
{
    for (const struct flyt_cuda_module *m = b->modules; m; m = m->next)
        if (m->globals)
            return "module global variable (cuModuleGetGlobal)";
    if (flyt_hash_count(&b->ckpt.async.map))
        return "stream-ordered allocation (cuMemAllocAsync)";
    if (b->ckpt.reservations)
        return "virtual address reservation (cuMemAddressReserve)";
    return NULL;
}

struct alloc_rec {
    uint64_t addr, size;
};

static int by_addr(const void *x, const void *y)
{
    uint64_t a = ((const struct alloc_rec *)x)->addr, c = ((const struct alloc_rec *)y)->addr;
    return (a > c) - (a < c);
}

static size_t collect(const struct flyt_memtab *t, struct alloc_rec *out, size_t n)
{
    flyt_hash_iter it;
    flyt_hash_iter_init(&t->map, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(&t->map, &it)) != NULL;)
        out[n++] = (struct alloc_rec){e->key, e->value.u64};
    return n;
}

CUresult flyt_cuda_state_allocs(flyt_backend *base,
                                CUresult (*fn)(void *arg, uint64_t addr, uint64_t size), void *arg,
                                const char **what)
{
    struct flyt_cuda_backend *b = cb(base);
    *what = uncapturable(b);
    if (*what)
        return CUDA_ERROR_NOT_SUPPORTED;
    size_t total = flyt_hash_count(&b->ckpt.plain.map) + flyt_hash_count(&b->ckpt.restored.map),
           n = 0;
    struct alloc_rec *list = malloc((total ? total : 1) * sizeof *list);
    if (list == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n = collect(&b->ckpt.plain, list, n);
    n = collect(&b->ckpt.restored, list, n);
    qsort(list, n, sizeof *list, by_addr);
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = fn(arg, list[i].addr, list[i].size);
    free(list);
    return r;
}

/* ---- spans ---- */

static CUmemAllocationProp pinned_prop(const struct flyt_cuda_backend *b)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = b->dev;
    return p;
}

static CUresult granularity(struct flyt_cuda_backend *b, uint64_t *gran)
{
    if (b->ckpt.gran == 0) {
        CUmemAllocationProp p = pinned_prop(b);
        size_t g = 0;
        CUresult r = b->cu.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (r != CUDA_SUCCESS)
            return r;
        if (g == 0 || (g & (g - 1)) != 0)
            return CUDA_ERROR_UNKNOWN; /* the driver's granularities are powers of two */
        b->ckpt.gran = g;
    }
    *gran = b->ckpt.gran;
    return CUDA_SUCCESS;
}

/* Memory at exactly [base, base + size): reserved, created, mapped, made
 * read-write for the device. The handle is released once mapped: the
 * mapping keeps the memory until it is unmapped. */
static CUresult span_map(struct flyt_cuda_backend *b, uint64_t base, uint64_t size)
{
    CUdeviceptr got = 0;
    CUresult r = b->cu.cuMemAddressReserve(&got, (size_t)size, (size_t)b->ckpt.gran, base, 0);
    if (r != CUDA_SUCCESS)
        return r;
    if (got != base) {
        b->cu.cuMemAddressFree(got, (size_t)size);
        flyt_error("restore: the driver cannot reserve 0x%llx (%llu bytes) again: it offered "
                   "0x%llx, the address is taken in this process", (unsigned long long)base,
                   (unsigned long long)size, (unsigned long long)got);
        return CUDA_ERROR_ALREADY_MAPPED;
    }
    CUmemAllocationProp p = pinned_prop(b);
    CUmemGenericAllocationHandle h = 0;
    r = b->cu.cuMemCreate(&h, (size_t)size, &p, 0);
    if (r == CUDA_SUCCESS) {
        r = b->cu.cuMemMap(base, (size_t)size, 0, h, 0);
        b->cu.cuMemRelease(h);
    }
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc access = {.location = p.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        r = b->cu.cuMemSetAccess(base, (size_t)size, &access, 1);
        if (r != CUDA_SUCCESS)
            b->cu.cuMemUnmap(base, (size_t)size);
    }
    if (r != CUDA_SUCCESS)
        b->cu.cuMemAddressFree(base, (size_t)size);
    return r;
}

static CUresult span_unmap(struct flyt_cuda_backend *b, const struct flyt_cuda_span *s)
{
    CUresult r = b->cu.cuMemUnmap(s->base, (size_t)s->size);
    CUresult r2 = b->cu.cuMemAddressFree(s->base, (size_t)s->size);
    return r != CUDA_SUCCESS ? r : r2;
}

/* Inserts [base, base + size) with no reference yet, keeping the order. */
static CUresult span_add(struct flyt_cuda_backend *b, uint64_t base, uint64_t size)
{
    struct flyt_cuda_ckpt *k = &b->ckpt;
    if (k->nspans == k->cap_spans) {
        size_t cap = k->cap_spans ? k->cap_spans * 2 : 16;
        struct flyt_cuda_span *s = realloc(k->spans, cap * sizeof *s);
        if (s == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        k->spans = s;
        k->cap_spans = cap;
    }
    CUresult r = span_map(b, base, size);
    if (r != CUDA_SUCCESS)
        return r;
    size_t i = k->nspans;
    while (i > 0 && k->spans[i - 1].base > base) {
        k->spans[i] = k->spans[i - 1];
        i--;
    }
    k->spans[i] = (struct flyt_cuda_span){base, size, 0};
    k->nspans++;
    return CUDA_SUCCESS;
}

/* Unmaps and removes the spans no restored allocation overlaps any more. */
static CUresult spans_prune(struct flyt_cuda_backend *b)
{
    struct flyt_cuda_ckpt *k = &b->ckpt;
    CUresult r = CUDA_SUCCESS;
    size_t kept = 0;
    for (size_t i = 0; i < k->nspans; i++) {
        if (k->spans[i].refs == 0) {
            CUresult e = span_unmap(b, &k->spans[i]);
            if (r == CUDA_SUCCESS)
                r = e;
        } else {
            k->spans[kept++] = k->spans[i];
        }
    }
    k->nspans = kept;
    return r;
}

/* Adds delta to the references of every span overlapping [lo, hi). */
static void spans_ref(struct flyt_cuda_ckpt *k, uint64_t lo, uint64_t hi, int delta)
{
    for (size_t i = 0; i < k->nspans; i++)
        if (k->spans[i].base < hi && k->spans[i].base + k->spans[i].size > lo)
            k->spans[i].refs += (uint64_t)(int64_t)delta;
}

/* The granules [lo, hi) an allocation of size bytes at addr touches. */
static void granules(uint64_t gran, uint64_t addr, uint64_t size, uint64_t *lo, uint64_t *hi)
{
    *lo = addr & ~(gran - 1);
    *hi = (addr + size + gran - 1) & ~(gran - 1);
}

/* Maps the gaps of [lo, hi) that no span covers yet. */
static CUresult spans_cover(struct flyt_cuda_backend *b, uint64_t lo, uint64_t hi)
{
    uint64_t cur = lo;
    for (size_t i = 0; i < b->ckpt.nspans && cur < hi; i++) {
        struct flyt_cuda_span s = b->ckpt.spans[i];
        if (s.base + s.size <= cur)
            continue;
        if (s.base > cur) {
            uint64_t end = s.base < hi ? s.base : hi;
            CUresult r = span_add(b, cur, end - cur);
            if (r != CUDA_SUCCESS)
                return r;
            i++; /* the new span sits before s */
        }
        cur = s.base + s.size;
    }
    return cur < hi ? span_add(b, cur, hi - cur) : CUDA_SUCCESS;
}

CUresult flyt_cuda_mem_alloc_at(flyt_backend *base, uint64_t addr, uint64_t size)
{
    ENTER(b, base);
    uint64_t gran, lo, hi;
    if (addr == 0 || size == 0 || addr + size < addr)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = granularity(b, &gran);
    if (r != CUDA_SUCCESS)
        return r;
    granules(gran, addr, size, &lo, &hi);
    r = spans_cover(b, lo, hi);
    if (r == CUDA_SUCCESS)
        r = flyt_cuda_state_note(&b->ckpt.restored, addr, size);
    if (r == CUDA_SUCCESS)
        spans_ref(&b->ckpt, lo, hi, +1);
    else
        spans_prune(b); /* the spans made for it, and only those, have no reference */
    return r;
}

int flyt_cuda_state_mem_free(struct flyt_cuda_backend *b, uint64_t dptr, CUresult *r)
{
    uint64_t size = flyt_memtab_take(&b->ckpt.restored, dptr), lo, hi;
    if (size == 0)
        return 0;
    granules(b->ckpt.gran, dptr, size, &lo, &hi);
    spans_ref(&b->ckpt, lo, hi, -1);
    *r = spans_prune(b);
    return 1;
}

void flyt_cuda_state_drop(struct flyt_cuda_backend *b)
{
    struct flyt_cuda_ckpt *k = &b->ckpt;
    if (k->nspans && b->ctx && flyt_cuda_ctx(b) == CUDA_SUCCESS)
        for (size_t i = 0; i < k->nspans; i++)
            span_unmap(b, &k->spans[i]);
    free(k->spans);
    k->spans = NULL;
    k->nspans = k->cap_spans = 0;
    flyt_memtab_free(&k->plain);
    flyt_memtab_free(&k->restored);
    flyt_memtab_free(&k->async);
}

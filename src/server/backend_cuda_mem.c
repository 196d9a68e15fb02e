/*
 * Tenant memory on the "cuda" backend: every cuMemAlloc and cuMemAllocPitch
 * of the tenant placed in address arenas Flyt reserves itself, so that a
 * checkpoint can be restored in a fresh process at the same addresses
 * (backend_cuda_int.h says why; docs/state-format.md, "Arenas").
 *
 * An arena is one large cuMemAddressReserve (twice the GPU's memory unless
 * FLYT_CUDA_ARENA_GIB says otherwise); a large reservation lands at the same
 * low address in every fresh process and is granted again with that address
 * as its hint (tests/gpu/probes/va_probe.sh). Inside it:
 * - an allocation over half a granule gets a range of whole granules and a
 *   mapping of its own (cuMemCreate, cuMemMap, cuMemSetAccess);
 * - smaller ones are packed, 512-byte aligned, into chunks: one granule
 *   mapped once, its space handed out by an extent list. At most one empty
 *   chunk stays mapped, so a malloc/free loop does not map every time.
 * A free waits for the device first, as cuMemFree does, so no work still
 * running can meet memory that was given to another allocation.
 */
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_int.h"
#include "flyt_log.h"

#define SMALL_ALIGN ((uint64_t)512) /* cuMemAlloc's alignment (texture alignment) */
#define DEFAULT_ARENA_FACTOR 2      /* arena bytes per byte of GPU memory */
#define GIB ((uint64_t)1 << 30)
/* The element size passed to cuMemAllocPitch (4, 8 or 16). Measured on an
 * H100 (driver 580): for widths 1..70000 all three give the pitch that
 * cudaMallocPitch returns (512-byte multiples); 16, the largest alignment,
 * is kept. */
#define FLYT_PITCH_ELEMENT_BYTES 16u

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

static CUmemAllocationProp device_prop(const struct flyt_cuda_backend *b)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = b->dev;
    return p;
}

static CUresult granularity(struct flyt_cuda_backend *b)
{
    if (b->mem.gran)
        return CUDA_SUCCESS;
    CUmemAllocationProp p = device_prop(b);
    size_t g = 0;
    CUresult r = b->cu.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS)
        return r;
    if (g < SMALL_ALIGN || (g & (g - 1)) != 0)
        return CUDA_ERROR_UNKNOWN; /* the driver's granularities are powers of two */
    b->mem.gran = g;
    return CUDA_SUCCESS;
}

static int is_small(const struct flyt_cuda_backend *b, uint64_t size) { return size <= b->mem.gran / 2; }

/* The bytes of address space an allocation of size takes. */
static uint64_t footprint(const struct flyt_cuda_backend *b, uint64_t size)
{
    return is_small(b, size) ? round_up(size, SMALL_ALIGN) : round_up(size, b->mem.gran);
}

/* ---- arenas ---- */

static struct flyt_cuda_arena *arena_of(struct flyt_cuda_backend *b, uint64_t addr)
{
    for (int i = 0; i < b->mem.narenas; i++) {
        struct flyt_cuda_arena *a = &b->mem.arenas[i];
        if (addr >= a->base && addr - a->base < a->size)
            return a;
    }
    return NULL;
}

static CUresult arena_bytes(struct flyt_cuda_backend *b, uint64_t *bytes)
{
    if (b->mem.arena_bytes == 0) {
        const char *env = getenv("FLYT_CUDA_ARENA_GIB");
        uint64_t want = 0;
        if (env && *env) {
            char *end;
            unsigned long long gib = strtoull(env, &end, 10);
            if (*end || gib == 0 || gib > 1u << 16) {
                flyt_error("FLYT_CUDA_ARENA_GIB=%s: give a number of GiB, 1 to 65536", env);
                return CUDA_ERROR_INVALID_VALUE;
            }
            want = (uint64_t)gib * GIB;
        } else {
            size_t total = 0;
            CUresult r = b->cu.cuDeviceTotalMem(&total, b->dev);
            if (r != CUDA_SUCCESS)
                return r;
            want = round_up((uint64_t)total * DEFAULT_ARENA_FACTOR, GIB);
        }
        b->mem.arena_bytes = round_up(want, b->mem.gran);
    }
    *bytes = b->mem.arena_bytes;
    return CUDA_SUCCESS;
}

/* Reserves an arena of size bytes, at hint when it is not 0. */
static CUresult arena_reserve(struct flyt_cuda_backend *b, uint64_t hint, uint64_t size,
                              struct flyt_cuda_arena **out)
{
    if (b->mem.narenas == FLYT_CUDA_ARENAS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUdeviceptr got = 0;
    CUresult r = b->cu.cuMemAddressReserve(&got, (size_t)size, (size_t)b->mem.gran, hint, 0);
    if (r != CUDA_SUCCESS)
        return r;
    if (hint && got != hint) {
        b->cu.cuMemAddressFree(got, (size_t)size);
        flyt_error("restore: the driver cannot reserve the arena at 0x%llx (%llu bytes) again: "
                   "it offered 0x%llx", (unsigned long long)hint, (unsigned long long)size,
                   (unsigned long long)got);
        return CUDA_ERROR_ALREADY_MAPPED;
    }
    struct flyt_cuda_arena *a = &b->mem.arenas[b->mem.narenas];
    if (flyt_extents_init(&a->va, size) != 0) {
        b->cu.cuMemAddressFree(got, (size_t)size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->base = got;
    a->size = size;
    b->mem.narenas++;
    flyt_debug("cuda backend: arena 0x%llx, %llu GiB", (unsigned long long)got,
               (unsigned long long)(size / GIB));
    *out = a;
    return CUDA_SUCCESS;
}

/* len bytes of arena a at an address aligned to align (a power of two, at
 * least the granularity; arenas are only granularity-aligned): 0 or -1. */
static int arena_take(struct flyt_cuda_backend *b, struct flyt_cuda_arena *a, uint64_t len,
                      uint64_t align, uint64_t *addr)
{
    uint64_t extra = align - b->mem.gran, off;
    if (len + extra < len || flyt_extents_alloc(&a->va, len + extra, b->mem.gran, &off) != 0)
        return -1;
    uint64_t start = round_up(a->base + off, align) - a->base;
    if (start > off)
        flyt_extents_put(&a->va, off, start - off);
    if (off + extra > start)
        flyt_extents_put(&a->va, start + len, off + extra - start);
    *addr = a->base + start;
    return 0;
}

/* An aligned range of len bytes in some arena, a new one when all are full. */
static CUresult va_take_aligned(struct flyt_cuda_backend *b, uint64_t len, uint64_t align,
                                uint64_t *addr)
{
    for (int i = 0; i < b->mem.narenas; i++)
        if (arena_take(b, &b->mem.arenas[i], len, align, addr) == 0)
            return CUDA_SUCCESS;
    uint64_t size, need = round_up(len + (align - b->mem.gran), b->mem.gran);
    CUresult r = arena_bytes(b, &size);
    struct flyt_cuda_arena *a = NULL;
    if (r == CUDA_SUCCESS)
        r = arena_reserve(b, 0, size > need ? size : need, &a);
    if (r != CUDA_SUCCESS)
        return r;
    return arena_take(b, a, len, align, addr) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult va_take(struct flyt_cuda_backend *b, uint64_t len, uint64_t *addr)
{
    return va_take_aligned(b, len, b->mem.gran, addr);
}

static void va_give(struct flyt_cuda_backend *b, uint64_t addr, uint64_t len)
{
    struct flyt_cuda_arena *a = arena_of(b, addr);
    int bad = a == NULL || flyt_extents_put(&a->va, addr - a->base, len) != 0;
    FLYT_ASSERT(!bad);
    (void)bad;
}

/* ---- mappings ---- */

/* Device memory at [addr, addr + len), inside an arena, read-write for the
 * device. The handle is released once mapped: the mapping keeps the memory. */
static CUresult map_range(struct flyt_cuda_backend *b, uint64_t addr, uint64_t len)
{
    CUmemAllocationProp p = device_prop(b);
    CUmemGenericAllocationHandle h = 0;
    /* exportable as a descriptor, for CUDA IPC (backend_cuda_ipc.c); a
     * driver that cannot is asked once, then plain memory is made */
    p.requestedHandleTypes = b->mem.no_share ? CU_MEM_HANDLE_TYPE_NONE
                                             : CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUresult r = b->cu.cuMemCreate(&h, (size_t)len, &p, 0);
    if (!b->mem.no_share && (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE)) {
        b->mem.no_share = 1;
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        r = b->cu.cuMemCreate(&h, (size_t)len, &p, 0);
    }
    if (r != CUDA_SUCCESS)
        return r;
    r = b->cu.cuMemMap(addr, (size_t)len, 0, h, 0);
    b->cu.cuMemRelease(h);
    if (r != CUDA_SUCCESS)
        return r;
    CUmemAccessDesc access = {.location = p.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    r = b->cu.cuMemSetAccess(addr, (size_t)len, &access, 1);
    if (r != CUDA_SUCCESS)
        b->cu.cuMemUnmap(addr, (size_t)len);
    return r;
}

CUresult flyt_cuda_mem_map(struct flyt_cuda_backend *b, uint64_t addr, uint64_t len)
{
    return map_range(b, addr, len);
}

CUresult flyt_cuda_mem_gran(struct flyt_cuda_backend *b, uint64_t *gran)
{
    CUresult r = granularity(b);
    *gran = b->mem.gran;
    return r;
}

/* A new mapping in the arenas' space: taken (fixed: at addr) and mapped. */
static CUresult map_new(struct flyt_cuda_backend *b, uint64_t len, int fixed, uint64_t *addr)
{
    CUresult r = CUDA_SUCCESS;
    if (!fixed) {
        r = va_take(b, len, addr);
    } else {
        struct flyt_cuda_arena *a = arena_of(b, *addr);
        if (a == NULL || flyt_extents_take(&a->va, *addr - a->base, len) != 0)
            r = CUDA_ERROR_ALREADY_MAPPED;
    }
    if (r != CUDA_SUCCESS)
        return r;
    r = map_range(b, *addr, len);
    if (r != CUDA_SUCCESS)
        va_give(b, *addr, len);
    return r;
}

static CUresult unmap(struct flyt_cuda_backend *b, uint64_t addr, uint64_t len)
{
    CUresult r = b->cu.cuMemUnmap(addr, (size_t)len);
    if (r == CUDA_SUCCESS)
        va_give(b, addr, len);
    return r;
}

/* ---- chunks: small allocations packed into one granule ---- */

static struct flyt_cuda_chunk *chunk_get(const struct flyt_cuda_backend *b, uint64_t base)
{
    flyt_hash_slot *s = flyt_hash_find(&b->mem.chunks, base);
    return s ? s->value.ptr : NULL;
}

static CUresult chunk_new(struct flyt_cuda_backend *b, int fixed, uint64_t *base,
                          struct flyt_cuda_chunk **out)
{
    struct flyt_cuda_chunk *c = malloc(sizeof *c);
    if (c == NULL || flyt_extents_init(&c->space, b->mem.gran) != 0) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = map_new(b, b->mem.gran, fixed, base);
    flyt_hash_slot *s = r == CUDA_SUCCESS ? flyt_hash_insert(&b->mem.chunks, *base) : NULL;
    if (r == CUDA_SUCCESS && s == NULL) {
        unmap(b, *base, b->mem.gran);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
        flyt_extents_destroy(&c->space);
        free(c);
        return r;
    }
    s->value.ptr = c;
    b->mem.empty_chunks++;
    *out = c;
    return CUDA_SUCCESS;
}

static void chunk_free(struct flyt_cuda_chunk *c)
{
    flyt_extents_destroy(&c->space);
    free(c);
}

/* Takes len bytes in chunk c at base (at *addr when fixed). 0, or -1 when they do not fit. */
static int chunk_take(struct flyt_cuda_backend *b, struct flyt_cuda_chunk *c, uint64_t base,
                      uint64_t len, int fixed, uint64_t *addr)
{
    int was_empty = flyt_extents_empty(&c->space);
    uint64_t off = fixed ? *addr - base : 0;
    int r = fixed ? flyt_extents_take(&c->space, off, len)
                  : flyt_extents_alloc(&c->space, len, SMALL_ALIGN, &off);
    if (r != 0)
        return -1;
    b->mem.empty_chunks -= was_empty;
    b->mem.last_chunk = base;
    *addr = base + off;
    return 0;
}

/* A small allocation: in the last chunk used, any chunk, or a new one. */
static CUresult small_place(struct flyt_cuda_backend *b, uint64_t len, uint64_t *addr)
{
    struct flyt_cuda_chunk *c = chunk_get(b, b->mem.last_chunk);
    if (c && chunk_take(b, c, b->mem.last_chunk, len, 0, addr) == 0)
        return CUDA_SUCCESS;
    flyt_hash_iter it;
    flyt_hash_iter_init(&b->mem.chunks, &it);
    for (flyt_hash_slot *s; (s = flyt_hash_iter_next(&b->mem.chunks, &it)) != NULL;)
        if (chunk_take(b, s->value.ptr, s->key, len, 0, addr) == 0)
            return CUDA_SUCCESS;
    uint64_t base = 0;
    CUresult r = chunk_new(b, 0, &base, &c);
    if (r == CUDA_SUCCESS && chunk_take(b, c, base, len, 0, addr) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY; /* len is at most half a granule: cannot happen */
    return r;
}

static CUresult small_place_at(struct flyt_cuda_backend *b, uint64_t addr, uint64_t len)
{
    uint64_t base = addr & ~(b->mem.gran - 1);
    if (addr - base + len > b->mem.gran)
        return CUDA_ERROR_INVALID_VALUE; /* small ones never cross a granule */
    struct flyt_cuda_chunk *c = chunk_get(b, base);
    CUresult r = c ? CUDA_SUCCESS : chunk_new(b, 1, &base, &c);
    if (r == CUDA_SUCCESS && chunk_take(b, c, base, len, 1, &addr) != 0)
        r = CUDA_ERROR_ALREADY_MAPPED;
    return r;
}

/* Gives len bytes at addr back to their chunk; an empty chunk is unmapped
 * unless it is the one kept. */
static CUresult small_release(struct flyt_cuda_backend *b, uint64_t addr, uint64_t len)
{
    uint64_t base = addr & ~(b->mem.gran - 1);
    struct flyt_cuda_chunk *c = chunk_get(b, base);
    if (c == NULL || flyt_extents_put(&c->space, addr - base, len) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!flyt_extents_empty(&c->space))
        return CUDA_SUCCESS;
    if (b->mem.empty_chunks == 0) {
        b->mem.empty_chunks = 1;
        return CUDA_SUCCESS;
    }
    CUresult r = unmap(b, base, b->mem.gran);
    if (r == CUDA_SUCCESS) {
        flyt_hash_remove(&b->mem.chunks, base);
        chunk_free(c);
    }
    return r; /* a chunk that failed to unmap stays, empty and usable */
}

/* ---- the backend's entry points ---- */

static int arena_disabled(struct flyt_cuda_backend *b)
{
    if (b->mem.disabled == 0) {
        const char *env = getenv("FLYT_CUDA_ARENA");
        b->mem.disabled = env && strcmp(env, "0") == 0 ? 1 : -1;
    }
    return b->mem.disabled > 0;
}

static CUresult outside_place(struct flyt_cuda_backend *b, uint64_t size, uint64_t *dptr)
{
    CUdeviceptr p = 0;
    CUresult r = b->cu.cuMemAlloc(&p, (size_t)size);
    if (r == CUDA_SUCCESS && flyt_memtab_put(&b->mem.outside, p, size) != 0) {
        b->cu.cuMemFree(p);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS)
        *dptr = p;
    return r;
}

/* The context's sticky error, as cuMemAlloc reports it even when the
 * allocation needs no driver call (a chunk with room). A stream query is
 * cheap and says it; not asked while a capture is open, where a query of
 * the NULL stream would invalidate a global-mode capture. */
static CUresult context_error(struct flyt_cuda_backend *b)
{
    if (b->captures > 0)
        return CUDA_SUCCESS;
    CUresult r = b->cu.cuStreamQuery(flyt_cuda_stream(b, FLYT_BSTREAM_DEFAULT));
    return r == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : r;
}

static CUresult place(struct flyt_cuda_backend *b, uint64_t size, int fixed, uint64_t *addr)
{
    CUresult r = fixed ? CUDA_SUCCESS : context_error(b);
    if (r != CUDA_SUCCESS)
        return r;
    r = granularity(b);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t len = footprint(b, size);
    if (len < size)
        return CUDA_ERROR_OUT_OF_MEMORY; /* size near 2^64 */
    if (is_small(b, size))
        r = fixed ? small_place_at(b, *addr, len) : small_place(b, len, addr);
    else
        r = map_new(b, len, fixed, addr);
    if (r == CUDA_SUCCESS && flyt_memtab_put(&b->mem.allocs, *addr, size) != 0) {
        if (is_small(b, size))
            small_release(b, *addr, len);
        else
            unmap(b, *addr, len);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

CUresult flyt_cuda_mem_place(struct flyt_cuda_backend *b, uint64_t size, uint64_t *dptr)
{
    if (arena_disabled(b))
        return outside_place(b, size, dptr);
    return place(b, size, 0, dptr);
}

CUresult flyt_cuda_mem_place_at(struct flyt_cuda_backend *b, uint64_t addr, uint64_t size)
{
    if (granularity(b) != CUDA_SUCCESS || arena_of(b, addr) == NULL) {
        flyt_error("restore: 0x%llx is outside the arenas the state names (a state file of a "
                   "Flyt without arenas cannot be restored on a GPU)", (unsigned long long)addr);
        return CUDA_ERROR_ALREADY_MAPPED;
    }
    return place(b, size, 1, &addr);
}

int flyt_cuda_mem_release(struct flyt_cuda_backend *b, uint64_t dptr, CUresult *r)
{
    uint64_t size = flyt_memtab_size(&b->mem.allocs, dptr);
    if (size == 0) {
        if (flyt_memtab_size(&b->mem.outside, dptr) == 0)
            return 0;
        *r = b->cu.cuMemFree((CUdeviceptr)dptr);
        if (*r == CUDA_SUCCESS)
            flyt_memtab_take(&b->mem.outside, dptr);
        return 1;
    }
    /* cuMemFree waits for the device: work still queued may use the memory */
    *r = b->cu.cuCtxSynchronize();
    if (*r != CUDA_SUCCESS)
        return 1;
    uint64_t len = footprint(b, size);
    *r = is_small(b, size) ? small_release(b, dptr, len) : unmap(b, dptr, len);
    if (*r == CUDA_SUCCESS)
        flyt_memtab_take(&b->mem.allocs, dptr);
    return 1;
}

int flyt_cuda_mem_range(const struct flyt_cuda_backend *b, uint64_t ptr, uint64_t *base,
                        uint64_t *size)
{
    const flyt_hash *t = &b->mem.allocs.map;
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

int flyt_cuda_mem_unit(const struct flyt_cuda_backend *b, uint64_t ptr, uint64_t *unit_base,
                       uint64_t *unit_size, uint64_t *size)
{
    uint64_t base = 0;
    if (!flyt_cuda_mem_range(b, ptr, &base, size) || base != ptr)
        return 0;
    if (is_small(b, *size)) {
        *unit_base = ptr & ~(b->mem.gran - 1);
        *unit_size = b->mem.gran;
    } else {
        *unit_base = ptr;
        *unit_size = footprint(b, *size);
    }
    return 1;
}

CUresult flyt_cuda_mem_pitch(struct flyt_cuda_backend *b, uint64_t width, uint64_t *pitch)
{
    flyt_hash_slot *s = flyt_hash_find(&b->mem.pitches, width);
    if (s) {
        *pitch = s->value.u64;
        return CUDA_SUCCESS;
    }
    /* asked of the driver once per width: its rule is not documented */
    CUdeviceptr p = 0;
    size_t pp = 0;
    CUresult r = b->cu.cuMemAllocPitch(&p, &pp, (size_t)width, 1, FLYT_PITCH_ELEMENT_BYTES);
    if (r != CUDA_SUCCESS)
        return r;
    b->cu.cuMemFree(p);
    if ((s = flyt_hash_insert(&b->mem.pitches, width)) != NULL)
        s->value.u64 = pp;
    *pitch = pp;
    return CUDA_SUCCESS;
}

CUresult flyt_cuda_mem_arena_at(flyt_backend *base, uint64_t addr, uint64_t size)
{
    ENTER(b, base);
    CUresult r = granularity(b);
    if (r != CUDA_SUCCESS)
        return r;
    if (addr == 0 || size == 0 || (addr | size) & (b->mem.gran - 1) || addr + size < addr)
        return CUDA_ERROR_INVALID_VALUE;
    struct flyt_cuda_arena *a = arena_of(b, addr);
    if (a)
        return a->base == addr && a->size == size ? CUDA_SUCCESS : CUDA_ERROR_ALREADY_MAPPED;
    return arena_reserve(b, addr, size, &a);
}

CUresult flyt_cuda_mem_arenas(flyt_backend *base,
                              CUresult (*fn)(void *arg, uint64_t addr, uint64_t size), void *arg)
{
    struct flyt_cuda_backend *b = cb(base);
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < b->mem.narenas && r == CUDA_SUCCESS; i++)
        r = fn(arg, b->mem.arenas[i].base, b->mem.arenas[i].size);
    return r;
}

CUresult flyt_cuda_va_carve(struct flyt_cuda_backend *b, uint64_t size, uint64_t align,
                            uint64_t hint, uint64_t *addr)
{
    CUresult r = granularity(b);
    if (r != CUDA_SUCCESS)
        return r;
    if (size == 0 || size % b->mem.gran || (align & (align - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    align = align > b->mem.gran ? align : b->mem.gran;
    struct flyt_cuda_arena *a = hint % align == 0 ? arena_of(b, hint) : NULL;
    if (a && size <= a->size - (hint - a->base) &&
        flyt_extents_take(&a->va, hint - a->base, size) == 0) {
        *addr = hint;
        return CUDA_SUCCESS;
    }
    return va_take_aligned(b, size, align, addr);
}

void flyt_cuda_va_uncarve(struct flyt_cuda_backend *b, uint64_t addr, uint64_t size)
{
    va_give(b, addr, size);
}

void flyt_cuda_mem_drop(struct flyt_cuda_backend *b)
{
    struct flyt_cuda_mem *m = &b->mem;
    int live = m->narenas && b->ctx && flyt_cuda_ctx(b) == CUDA_SUCCESS;
    flyt_cuda_vmm_drop(b, live); /* the program's mappings in the arenas go first */
    flyt_hash_iter it;
    flyt_hash_iter_init(&m->allocs.map, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(&m->allocs.map, &it)) != NULL;)
        if (live && !is_small(b, e->value.u64))
            b->cu.cuMemUnmap(e->key, (size_t)footprint(b, e->value.u64));
    flyt_hash_iter_init(&m->chunks, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(&m->chunks, &it)) != NULL;) {
        if (live)
            b->cu.cuMemUnmap(e->key, (size_t)m->gran);
        chunk_free(e->value.ptr);
    }
    for (int i = 0; i < m->narenas; i++) {
        if (live)
            b->cu.cuMemAddressFree(m->arenas[i].base, (size_t)m->arenas[i].size);
        flyt_extents_destroy(&m->arenas[i].va);
    }
    flyt_hash_free(&m->chunks);
    flyt_hash_free(&m->pitches);
    flyt_memtab_free(&m->allocs);
    flyt_memtab_free(&m->outside); /* the reset or close frees cuMemAlloc's memory */
    int disabled = m->disabled;
    uint64_t gran = m->gran, arena = m->arena_bytes;
    memset(m, 0, sizeof *m);
    m->disabled = disabled, m->gran = gran, m->arena_bytes = arena;
}

/*
 * Stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync) on
 * the "cuda" backend, for a checkpoint (docs/state-format.md, ASYNC): the
 * live ones with their pools, and a restore's, put back at their old
 * addresses as Flyt's own memory. The driver's pools choose addresses
 * themselves and no pool can be asked for one. So a restore first reserves
 * *spans* over all of them (cuMemAddressReserve with the address as hint,
 * at least SPAN_MIN each), before the receiving process's own pools take
 * that range (a streamed move's pre-copy reserves them even before the
 * first module loads; the restore then adds what is missing); each
 * restored allocation then maps the whole granules it
 * touches inside a span, shared by allocations in one granule. A free of
 * one waits for its stream through an event and unmaps later (checked at
 * the next stream-ordered call); the spans stay reserved until the session
 * ends or the device is reset.
 */
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_int.h"
#include "flyt_log.h"

static int note_pool(struct flyt_cuda_backend *b, uint64_t dptr, flyt_bhandle pool)
{
    flyt_hash_slot *s = flyt_hash_find(&b->ckpt.async_pools, dptr);
    if (s == NULL)
        s = flyt_hash_insert(&b->ckpt.async_pools, dptr);
    if (s == NULL)
        return -1;
    s->value.ptr = pool;
    return 0;
}

int flyt_cuda_ordered_note(struct flyt_cuda_backend *b, uint64_t dptr, uint64_t size, flyt_bhandle pool)
{
    if (note_pool(b, dptr, pool) != 0 || flyt_memtab_put(&b->ckpt.async, dptr, size) != 0) {
        flyt_hash_remove(&b->ckpt.async_pools, dptr);
        return -1;
    }
    return 0;
}

void flyt_cuda_ordered_forget(struct flyt_cuda_backend *b, uint64_t dptr)
{
    flyt_memtab_take(&b->ckpt.async, dptr);
    flyt_hash_remove(&b->ckpt.async_pools, dptr);
}

/* ---- restored ones: granules reserved at their addresses ---- */

/* Measured on the H100 (tests/gpu/probes/pool_span_probe.c): a hinted
 * reservation of 32 MiB is granted where no pool has allocated yet, one of
 * 2 MiB never (small ranges go among the host's mmaps), and only at a 32 MiB
 * boundary: 34 MiB at 0x304200000, right behind a granted one, got
 * 0x306000000; aligned ones side by side are granted. The driver lays large
 * reservations (a pool's too) out on those boundaries, so a span starts at
 * the boundary below its first allocation and ends at one. */
#define SPAN_MIN   ((uint64_t)32 << 20)
#define SPAN_ALIGN ((uint64_t)32 << 20)

static void granule_put(struct flyt_cuda_backend *b, uint64_t g, uint64_t gran)
{
    flyt_hash_slot *s = flyt_hash_find(&b->ckpt.granules, g);
    if (s == NULL || --s->value.u64 > 0)
        return;
    flyt_hash_remove_slot(&b->ckpt.granules, s);
    CUresult r = b->cu.cuMemUnmap(g, (size_t)gran);
    if (r != CUDA_SUCCESS)
        flyt_warn("cuda backend: unmapping the restored granule 0x%llx failed: CUDA error %d",
                  (unsigned long long)g, (int)r);
}

/* The end of the span holding at, or 0. */
static uint64_t span_end(const struct flyt_cuda_backend *b, uint64_t at)
{
    for (int i = 0; i < b->ckpt.nspans; i++)
        if (at >= b->ckpt.spans[i].base && at - b->ckpt.spans[i].base < b->ckpt.spans[i].size)
            return b->ckpt.spans[i].base + b->ckpt.spans[i].size;
    return 0;
}

/* One more reference on the granule at g, inside a span: mapped the first time. */
static CUresult granule_get(struct flyt_cuda_backend *b, uint64_t g, uint64_t gran)
{
    flyt_hash_slot *s = flyt_hash_find(&b->ckpt.granules, g);
    if (s) {
        s->value.u64++;
        return CUDA_SUCCESS;
    }
    if (span_end(b, g) < g + gran) { /* also 0: in no span */
        flyt_error("restore: the granule 0x%llx of a stream-ordered allocation was not reserved "
                   "before the restore", (unsigned long long)g);
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = flyt_cuda_mem_map(b, g, gran);
    if (r == CUDA_SUCCESS && (s = flyt_hash_insert(&b->ckpt.granules, g)) == NULL) {
        b->cu.cuMemUnmap(g, (size_t)gran);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS)
        return r;
    s->value.u64 = 1;
    return CUDA_SUCCESS;
}

/* The references of [addr, addr + size)'s granules below end dropped. */
static void granules_put(struct flyt_cuda_backend *b, uint64_t addr, uint64_t end, uint64_t gran)
{
    for (uint64_t g = addr & ~(gran - 1); g < end; g += gran)
        granule_put(b, g, gran);
}

CUresult flyt_cuda_async_alloc_at(flyt_backend *base, uint64_t addr, uint64_t size, flyt_bhandle pool)
{
    ENTER(b, base);
    uint64_t gran = 0;
    CUresult r = flyt_cuda_mem_gran(b, &gran);
    if (r != CUDA_SUCCESS)
        return r;
    if (addr == 0 || size == 0 || addr + size < addr || flyt_memtab_size(&b->ckpt.restored, addr))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t g = addr & ~(gran - 1); /* the first granule not taken */
    for (; g < addr + size; g += gran)
        if ((r = granule_get(b, g, gran)) != CUDA_SUCCESS)
            break;
    if (r == CUDA_SUCCESS && flyt_memtab_put(&b->ckpt.restored, addr, size) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && note_pool(b, addr, pool) != 0) {
        flyt_memtab_take(&b->ckpt.restored, addr);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS)
        granules_put(b, addr, g < addr + size ? g : addr + size, gran);
    return r;
}

/* ---- spans: reserved over the restored ones before any pool is used ---- */

static int by_addr(const void *x, const void *y)
{
    const uint64_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

/* The spans from the first'th on. */
static void spans_free_from(struct flyt_cuda_backend *b, int first)
{
    for (int i = first; i < b->ckpt.nspans; i++) {
        CUresult r = b->cu.cuMemAddressFree(b->ckpt.spans[i].base, (size_t)b->ckpt.spans[i].size);
        if (r != CUDA_SUCCESS)
            flyt_warn("cuda backend: freeing the reserved span 0x%llx failed: CUDA error %d",
                      (unsigned long long)b->ckpt.spans[i].base, (int)r);
    }
    b->ckpt.nspans = first;
    if (first == 0) {
        free(b->ckpt.spans);
        b->ckpt.spans = NULL;
    }
}

/* [base, end) at exactly base. Never placed elsewhere: the address is where the
 * receiving process's own pools lay out, whose allocations would then collide with an
 * alias (measured on the H100: wrong sums). The restore fails instead; a live
 * migration keeps the session on its source. */
static CUresult span_reserve(struct flyt_cuda_backend *b, uint64_t base, uint64_t end, uint64_t gran)
{
    struct flyt_cuda_span *more = realloc(b->ckpt.spans, (size_t)(b->ckpt.nspans + 1) * sizeof *more);
    if (more == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    b->ckpt.spans = more;
    CUdeviceptr got = 0;
    CUresult r = b->cu.cuMemAddressReserve(&got, (size_t)(end - base), (size_t)gran, base, 0);
    if (r == CUDA_SUCCESS && got != base) {
        b->cu.cuMemAddressFree(got, (size_t)(end - base));
        r = CUDA_ERROR_ALREADY_MAPPED;
    }
    if (r != CUDA_SUCCESS) {
        flyt_error("restore: stream-ordered allocations at 0x%llx..0x%llx cannot be put back at "
                   "their addresses here: the driver %s 0x%llx (CUDA error %d)",
                   (unsigned long long)base, (unsigned long long)end,
                   r == CUDA_ERROR_ALREADY_MAPPED ? "offered" : "failed; asked for",
                   (unsigned long long)(r == CUDA_ERROR_ALREADY_MAPPED ? got : base), (int)r);
        return r;
    }
    b->ckpt.spans[b->ckpt.nspans++] = (struct flyt_cuda_span){base, end - base};
    return CUDA_SUCCESS;
}

/* The highest span end at or below at (0: none). */
static uint64_t prev_span_end(const struct flyt_cuda_backend *b, uint64_t at)
{
    uint64_t prev = 0;
    for (int i = 0; i < b->ckpt.nspans; i++) {
        uint64_t end = b->ckpt.spans[i].base + b->ckpt.spans[i].size;
        if (end <= at && end > prev)
            prev = end;
    }
    return prev;
}

/* The lowest span base at or above at (UINT64_MAX: none). */
static uint64_t next_span(const struct flyt_cuda_backend *b, uint64_t at)
{
    uint64_t next = UINT64_MAX;
    for (int i = 0; i < b->ckpt.nspans; i++)
        if (b->ckpt.spans[i].base >= at && b->ckpt.spans[i].base < next)
            next = b->ckpt.spans[i].base;
    return next;
}

/* The granules of ranges[] outside every span reserved so far (an earlier call's: a
 * pre-copy's), as pieces that cross no span. */
static uint64_t (*uncovered(const struct flyt_cuda_backend *b, const uint64_t (*ranges)[2], size_t n,
                            uint64_t gran, size_t *npieces))[2]
{
    size_t cap = n + 1, k = 0; /* one piece per range, more where a range crosses spans */
    uint64_t (*piece)[2] = malloc(cap * sizeof *piece);
    for (size_t i = 0; piece && i < n; i++) {
        uint64_t at = ranges[i][0] & ~(gran - 1);
        uint64_t end = (ranges[i][0] + ranges[i][1] + gran - 1) & ~(gran - 1);
        while (piece && at < end) {
            uint64_t skip = span_end(b, at);
            if (skip) {
                at = skip;
                continue;
            }
            uint64_t stop = next_span(b, at);
            stop = stop < end ? stop : end;
            if (k == cap) {
                void *more = realloc(piece, (cap *= 2) * sizeof *piece);
                if (more == NULL) {
                    free(piece);
                    piece = NULL;
                    break;
                }
                piece = more;
            }
            piece[k][0] = at;
            piece[k++][1] = stop;
            at = stop;
        }
    }
    *npieces = k;
    return piece;
}

CUresult flyt_cuda_async_spans(flyt_backend *base, const uint64_t (*ranges)[2], size_t n)
{
    ENTER(b, base);
    uint64_t gran = 0;
    CUresult r = flyt_cuda_mem_gran(b, &gran);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    uint64_t span_min = (SPAN_MIN + gran - 1) & ~(gran - 1);
    size_t np = 0;
    uint64_t (*piece)[2] = uncovered(b, ranges, n, gran, &np); /* {start, end} */
    if (piece == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (np == 0) {
        free(piece);
        return CUDA_SUCCESS;
    }
    qsort(piece, np, sizeof *piece, by_addr);
    /* [lo, hi): the span being grown, at least span_min but never into the next span
     * already reserved (cap); a piece starting at or below its end joins it */
    uint64_t lo = piece[0][0], hi = piece[0][1], cap = next_span(b, lo);
    int nbefore = b->ckpt.nspans;
    for (size_t i = 1; i <= np && r == CUDA_SUCCESS; i++) {
        uint64_t want = hi > lo + span_min ? hi : lo + span_min;
        want = (want + SPAN_ALIGN - 1) & ~(SPAN_ALIGN - 1);
        want = want < cap ? want : cap;
        if (i < np && piece[i][0] <= want && piece[i][0] < cap) {
            hi = piece[i][1] > hi ? piece[i][1] : hi;
            continue;
        }
        uint64_t floor = prev_span_end(b, lo), start = lo & ~(SPAN_ALIGN - 1);
        r = span_reserve(b, start > floor ? start : floor, want, gran);
        if (i < np) {
            lo = piece[i][0];
            hi = piece[i][1];
            cap = next_span(b, lo);
        }
    }
    free(piece);
    if (r != CUDA_SUCCESS) /* this call's spans go again (no granule is mapped in them yet) */
        spans_free_from(b, nbefore);
    return r;
}

static void release_restored(struct flyt_cuda_backend *b, uint64_t addr, uint64_t size)
{
    uint64_t gran = 0;
    if (flyt_cuda_mem_gran(b, &gran) == CUDA_SUCCESS)
        granules_put(b, addr, addr + size, gran);
}

/* Restored allocations whose free the device passed are released (all: wait). */
static void reap(struct flyt_cuda_backend *b, int wait)
{
    int kept = 0;
    for (int i = 0; i < b->ckpt.npending; i++) {
        struct flyt_cuda_pending *p = &b->ckpt.pending[i];
        if (!wait && b->cu.cuEventQuery(p->done) == CUDA_ERROR_NOT_READY) {
            b->ckpt.pending[kept++] = *p;
            continue;
        }
        if (wait)
            b->cu.cuEventSynchronize(p->done);
        b->cu.cuEventDestroy(p->done);
        release_restored(b, p->addr, p->size);
    }
    b->ckpt.npending = kept;
}

void flyt_cuda_ordered_reap(struct flyt_cuda_backend *b)
{
    if (b->ckpt.npending)
        reap(b, 0);
}

int flyt_cuda_ordered_free(struct flyt_cuda_backend *b, uint64_t dptr, CUstream stream, int sync,
                           CUresult *r)
{
    flyt_cuda_ordered_reap(b);
    uint64_t size = flyt_memtab_size(&b->ckpt.restored, dptr);
    if (size == 0)
        return 0;
    CUevent done = NULL;
    struct flyt_cuda_pending *more = NULL;
    if (sync) { /* cuMemFree: the device first, as for any allocation */
        *r = b->cu.cuCtxSynchronize();
    } else if ((*r = b->cu.cuEventCreate(&done, CU_EVENT_DISABLE_TIMING)) == CUDA_SUCCESS &&
               (*r = b->cu.cuEventRecord(done, stream)) == CUDA_SUCCESS) {
        more = realloc(b->ckpt.pending, (size_t)(b->ckpt.npending + 1) * sizeof *more);
        *r = more ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (*r != CUDA_SUCCESS) {
        if (done)
            b->cu.cuEventDestroy(done);
        return 1;
    }
    flyt_memtab_take(&b->ckpt.restored, dptr);
    flyt_hash_remove(&b->ckpt.async_pools, dptr);
    if (sync) {
        release_restored(b, dptr, size);
        return 1;
    }
    b->ckpt.pending = more;
    b->ckpt.pending[b->ckpt.npending++] = (struct flyt_cuda_pending){dptr, size, done};
    return 1;
}

int flyt_cuda_ordered_range(const struct flyt_cuda_backend *b, uint64_t ptr, uint64_t *base,
                            uint64_t *size)
{
    flyt_hash_iter it;
    flyt_hash_iter_init(&b->ckpt.restored.map, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(&b->ckpt.restored.map, &it)) != NULL;)
        if (ptr >= e->key && ptr - e->key < e->value.u64) {
            *base = e->key;
            *size = e->value.u64;
            return 1;
        }
    return 0;
}

uint64_t flyt_cuda_ordered_pool_bytes(struct flyt_cuda_backend *b, flyt_bhandle pool, int granules)
{
    CUmemoryPool current = NULL;
    uint64_t gran = 0, bytes = 0;
    if (flyt_hash_count(&b->ckpt.restored.map) == 0 || flyt_cuda_mem_gran(b, &gran) != CUDA_SUCCESS)
        return 0;
    b->cu.cuDeviceGetDefaultMemPool(&current, b->dev); /* the server never sets another */
    flyt_hash_iter it;
    flyt_hash_iter_init(&b->ckpt.restored.map, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(&b->ckpt.restored.map, &it)) != NULL;) {
        flyt_hash_slot *p = flyt_hash_find(&b->ckpt.async_pools, e->key);
        flyt_bhandle from = p && p->value.ptr ? p->value.ptr : (flyt_bhandle)current;
        if (from == pool)
            bytes += granules ? (e->value.u64 + gran - 1) & ~(gran - 1) : e->value.u64;
    }
    return bytes;
}

void flyt_cuda_ordered_drop(struct flyt_cuda_backend *b)
{
    reap(b, 1);
    flyt_hash_iter it;
    flyt_hash_iter_init(&b->ckpt.restored.map, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(&b->ckpt.restored.map, &it)) != NULL;)
        release_restored(b, e->key, e->value.u64);
    free(b->ckpt.pending);
    b->ckpt.pending = NULL;
    spans_free_from(b, 0); /* their granules unmapped above */
    flyt_memtab_free(&b->ckpt.restored);
    flyt_memtab_free(&b->ckpt.async);
    flyt_hash_free(&b->ckpt.async_pools);
    flyt_hash_free(&b->ckpt.granules);
}

/* ---- capture ---- */

static CUresult visit(const struct flyt_cuda_backend *b, const struct flyt_memtab *t,
                      CUresult (*fn)(void *arg, uint64_t addr, uint64_t size, flyt_bhandle pool),
                      void *arg)
{
    flyt_hash_iter it;
    flyt_hash_iter_init(&t->map, &it);
    CUresult r = CUDA_SUCCESS;
    for (flyt_hash_slot *e; r == CUDA_SUCCESS && (e = flyt_hash_iter_next(&t->map, &it)) != NULL;) {
        flyt_hash_slot *p = flyt_hash_find(&b->ckpt.async_pools, e->key);
        r = fn(arg, e->key, e->value.u64, p ? p->value.ptr : NULL);
    }
    return r;
}

CUresult flyt_cuda_state_async(flyt_backend *base,
                               CUresult (*fn)(void *arg, uint64_t addr, uint64_t size, flyt_bhandle pool),
                               void *arg)
{
    ENTER(b, base);
    CUresult r = visit(b, &b->ckpt.async, fn, arg);
    return r == CUDA_SUCCESS ? visit(b, &b->ckpt.restored, fn, arg) : r;
}

/* Free extents of a range: see extent.h. */
#include "extent.h"

#include <stdlib.h>
#include <string.h>

#include "flyt_assert.h"

static void check_invariant(const struct flyt_extents *e)
{
#ifdef FLYT_ASSERTS
    uint64_t sum = 0;
    for (size_t i = 0; i < e->n; i++) {
        FLYT_ASSERT(e->free[i].len > 0 && e->free[i].off + e->free[i].len <= e->size);
        FLYT_ASSERT(i == 0 || e->free[i - 1].off + e->free[i - 1].len < e->free[i].off);
        sum += e->free[i].len;
    }
    FLYT_ASSERT(sum == e->avail);
#else
    (void)e;
#endif
}

int flyt_extents_init(struct flyt_extents *e, uint64_t size)
{
    memset(e, 0, sizeof *e);
    e->size = size;
    if (size == 0)
        return 0;
    e->free = malloc(4 * sizeof *e->free);
    if (e->free == NULL)
        return -1;
    e->cap = 4;
    e->free[0] = (struct flyt_extent){0, size};
    e->n = 1;
    e->avail = size;
    return 0;
}

void flyt_extents_destroy(struct flyt_extents *e)
{
    free(e->free);
    memset(e, 0, sizeof *e);
}

static int grow(struct flyt_extents *e)
{
    if (e->n < e->cap)
        return 0;
    size_t cap = e->cap ? e->cap * 2 : 4;
    struct flyt_extent *f = realloc(e->free, cap * sizeof *f);
    if (f == NULL)
        return -1;
    e->free = f;
    e->cap = cap;
    return 0;
}

/* Removes [off, off + len) from free extent i, which holds it whole. */
static int carve(struct flyt_extents *e, size_t i, uint64_t off, uint64_t len)
{
    struct flyt_extent x = e->free[i];
    uint64_t head = off - x.off, tail = x.off + x.len - (off + len);
    if (head && tail) {
        if (grow(e) != 0)
            return -1;
        memmove(&e->free[i + 2], &e->free[i + 1], (e->n - i - 1) * sizeof *e->free);
        e->free[i] = (struct flyt_extent){x.off, head};
        e->free[i + 1] = (struct flyt_extent){off + len, tail};
        e->n++;
    } else if (head) {
        e->free[i].len = head;
    } else if (tail) {
        e->free[i] = (struct flyt_extent){off + len, tail};
    } else {
        memmove(&e->free[i], &e->free[i + 1], (e->n - i - 1) * sizeof *e->free);
        e->n--;
    }
    e->avail -= len;
    check_invariant(e);
    return 0;
}

int flyt_extents_alloc(struct flyt_extents *e, uint64_t len, uint64_t align, uint64_t *off)
{
    FLYT_ASSERT(align && (align & (align - 1)) == 0);
    if (len == 0 || len > e->avail)
        return -1;
    for (size_t i = 0; i < e->n; i++) {
        uint64_t at = (e->free[i].off + align - 1) & ~(align - 1);
        if (at >= e->free[i].off && at - e->free[i].off <= e->free[i].len &&
            e->free[i].len - (at - e->free[i].off) >= len) {
            if (carve(e, i, at, len) != 0)
                return -1;
            *off = at;
            return 0;
        }
    }
    return -1;
}

/* The index of the first free extent ending after off (n when none). */
static size_t first_after(const struct flyt_extents *e, uint64_t off)
{
    size_t lo = 0, hi = e->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (e->free[mid].off + e->free[mid].len <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int flyt_extents_take(struct flyt_extents *e, uint64_t off, uint64_t len)
{
    if (len == 0 || off + len < off || off + len > e->size)
        return -1;
    size_t i = first_after(e, off);
    if (i == e->n || e->free[i].off > off || e->free[i].off + e->free[i].len < off + len)
        return -1;
    return carve(e, i, off, len);
}

int flyt_extents_put(struct flyt_extents *e, uint64_t off, uint64_t len)
{
    if (len == 0 || off + len < off || off + len > e->size)
        return -1;
    size_t i = first_after(e, off); /* the extent after the gap, if any */
    if (i < e->n && e->free[i].off < off + len)
        return -1; /* overlaps a free extent: a double free */
    int join_prev = i > 0 && e->free[i - 1].off + e->free[i - 1].len == off;
    int join_next = i < e->n && e->free[i].off == off + len;
    if (join_prev && join_next) {
        e->free[i - 1].len += len + e->free[i].len;
        memmove(&e->free[i], &e->free[i + 1], (e->n - i - 1) * sizeof *e->free);
        e->n--;
    } else if (join_prev) {
        e->free[i - 1].len += len;
    } else if (join_next) {
        e->free[i].off = off;
        e->free[i].len += len;
    } else {
        if (grow(e) != 0)
            return -1;
        memmove(&e->free[i + 1], &e->free[i], (e->n - i) * sizeof *e->free);
        e->free[i] = (struct flyt_extent){off, len};
        e->n++;
    }
    e->avail += len;
    check_invariant(e);
    return 0;
}

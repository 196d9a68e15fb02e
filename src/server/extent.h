/*
 * Free space of a range [0, size): a sorted list of free extents, first fit.
 * The CUDA backend places tenant memory with it twice over: allocations of
 * a reserved address arena, and small allocations inside one 2 MiB chunk.
 *
 * Invariant (asserted in checked builds): the free extents are sorted,
 * non-empty, disjoint and never adjacent (a freed extent merges with its
 * neighbours), and all lie inside [0, size).
 */
#ifndef FLYT_EXTENT_H
#define FLYT_EXTENT_H

#include <stddef.h>
#include <stdint.h>

struct flyt_extent {
    uint64_t off, len;
};

struct flyt_extents {
    struct flyt_extent *free; /* sorted by off */
    size_t              n, cap;
    uint64_t            size;  /* the whole range */
    uint64_t            avail; /* bytes free */
};

/* All of [0, size) free. 0, or -1 out of memory. */
int  flyt_extents_init(struct flyt_extents *e, uint64_t size);
void flyt_extents_destroy(struct flyt_extents *e);
/* The lowest free offset of len bytes aligned to align (a power of two),
 * taken: 0 with *off set, -1 when no extent fits (or out of memory). */
int flyt_extents_alloc(struct flyt_extents *e, uint64_t len, uint64_t align, uint64_t *off);
/* Takes exactly [off, off + len): 0, or -1 when any of it is not free. */
int flyt_extents_take(struct flyt_extents *e, uint64_t off, uint64_t len);
/* Gives [off, off + len) back: 0, or -1 when any of it is free already or
 * outside the range (nothing changed) or out of memory. */
int flyt_extents_put(struct flyt_extents *e, uint64_t off, uint64_t len);
/* Whether nothing is taken. */
static inline int flyt_extents_empty(const struct flyt_extents *e) { return e->avail == e->size; }

#endif

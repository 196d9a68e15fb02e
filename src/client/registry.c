/*
 * What the client knows without asking the server: which address ranges are
 * device memory (for cuMemcpy's unified addressing and pointer attributes)
 * and which are pinned or registered host memory.
 *
 * Invariant: ranges of one kind never overlap, and the array is sorted by
 * base, so a lookup is a binary search under a read lock.
 */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct range {
    uint64_t base, size;
    unsigned flags;
    int kind;
    uint64_t region; /* server region id of shared pinned memory, else 0 */
    uint64_t id;     /* CU_POINTER_ATTRIBUTE_BUFFER_ID: unique per allocation */
};

static struct {
    pthread_rwlock_t lock;
    struct range *items;
    size_t count, cap;
    uint64_t next_id;
} ranges = {.lock = PTHREAD_RWLOCK_INITIALIZER};

/* index of the first range with base > addr */
static size_t upper_bound(uint64_t addr)
{
    size_t lo = 0, hi = ranges.count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ranges.items[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

uint64_t flyt_range_add(enum flyt_range_kind kind, uint64_t base, uint64_t size, unsigned flags)
{
    pthread_rwlock_wrlock(&ranges.lock);
    uint64_t id = ++ranges.next_id;
    if (ranges.count == ranges.cap) {
        size_t cap = ranges.cap ? ranges.cap * 2 : 64;
        struct range *items = realloc(ranges.items, cap * sizeof *items);
        if (items == NULL) {
            pthread_rwlock_unlock(&ranges.lock);
            return id; /* lookups then treat the range as unknown host memory */
        }
        ranges.items = items;
        ranges.cap = cap;
    }
    size_t at = upper_bound(base);
    memmove(&ranges.items[at + 1], &ranges.items[at], (ranges.count - at) * sizeof *ranges.items);
    ranges.items[at] = (struct range){base, size ? size : 1, flags, (int)kind, 0, id};
    ranges.count++;
    pthread_rwlock_unlock(&ranges.lock);
    return id;
}

int flyt_range_remove(enum flyt_range_kind kind, uint64_t base)
{
    int rc = -1;
    pthread_rwlock_wrlock(&ranges.lock);
    size_t at = upper_bound(base);
    /* equal bases sort before `at`; look back over them */
    while (at > 0 && ranges.items[at - 1].base == base) {
        at--;
        if (ranges.items[at].kind == (int)kind) {
            memmove(&ranges.items[at], &ranges.items[at + 1],
                    (ranges.count - at - 1) * sizeof *ranges.items);
            ranges.count--;
            rc = 0;
            break;
        }
    }
    pthread_rwlock_unlock(&ranges.lock);
    return rc;
}

int flyt_range_find(uint64_t addr, uint64_t *base, uint64_t *size, unsigned *flags)
{
    int kind = 0;
    pthread_rwlock_rdlock(&ranges.lock);
    size_t at = upper_bound(addr);
    /* ranges of different kinds may nest (a registered range inside nothing
     * else), so scan back a little over candidates that start below addr */
    for (size_t i = at; i > 0 && at - i < 4; i--) {
        const struct range *r = &ranges.items[i - 1];
        if (addr - r->base < r->size) {
            kind = r->kind;
            if (base)
                *base = r->base;
            if (size)
                *size = r->size;
            if (flags)
                *flags = r->flags;
            break;
        }
    }
    pthread_rwlock_unlock(&ranges.lock);
    return kind;
}

uint64_t flyt_range_buffer_id(uint64_t addr)
{
    uint64_t id = 0;
    pthread_rwlock_rdlock(&ranges.lock);
    size_t at = upper_bound(addr);
    if (at > 0 && addr - ranges.items[at - 1].base < ranges.items[at - 1].size)
        id = ranges.items[at - 1].id;
    pthread_rwlock_unlock(&ranges.lock);
    return id;
}

void flyt_range_clear_device(void)
{
    pthread_rwlock_wrlock(&ranges.lock);
    size_t out = 0;
    for (size_t i = 0; i < ranges.count; i++)
        if (ranges.items[i].kind != FLYT_RANGE_DEVICE)
            ranges.items[out++] = ranges.items[i];
    ranges.count = out;
    pthread_rwlock_unlock(&ranges.lock);
}

int flyt_range_set_region(uint64_t base, uint64_t region)
{
    int rc = -1;
    pthread_rwlock_wrlock(&ranges.lock);
    size_t at = upper_bound(base);
    if (at > 0 && ranges.items[at - 1].base == base && ranges.items[at - 1].kind != FLYT_RANGE_DEVICE) {
        ranges.items[at - 1].region = region;
        rc = 0;
    }
    pthread_rwlock_unlock(&ranges.lock);
    return rc;
}

uint64_t flyt_range_region(uint64_t addr, uint64_t n, uint64_t *offset)
{
    uint64_t region = 0;
    pthread_rwlock_rdlock(&ranges.lock);
    size_t at = upper_bound(addr);
    if (at > 0) {
        const struct range *r = &ranges.items[at - 1];
        if (r->region && addr - r->base < r->size && n <= r->size - (addr - r->base)) {
            region = r->region;
            *offset = addr - r->base;
        }
    }
    pthread_rwlock_unlock(&ranges.lock);
    return region;
}

uint64_t flyt_range_region_base(uint64_t region)
{
    uint64_t base = 0;
    pthread_rwlock_rdlock(&ranges.lock);
    for (size_t i = 0; region && base == 0 && i < ranges.count; i++)
        if (ranges.items[i].region == region)
            base = ranges.items[i].base;
    pthread_rwlock_unlock(&ranges.lock);
    return base;
}

void flyt_range_forget_regions(void)
{
    pthread_rwlock_wrlock(&ranges.lock);
    for (size_t i = 0; i < ranges.count; i++)
        ranges.items[i].region = 0;
    pthread_rwlock_unlock(&ranges.lock);
}

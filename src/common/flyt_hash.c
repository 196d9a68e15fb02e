/* The one hash table: see flyt_hash.h. */
#include "flyt_hash.h"

#include <stdlib.h>
#include <string.h>

#define FIRST_CAP 16u

void flyt_hash_init(flyt_hash *h) { memset(h, 0, sizeof *h); }

void flyt_hash_free(flyt_hash *h)
{
    free(h->slots);
    flyt_hash_init(h);
}

void flyt_hash_clear(flyt_hash *h)
{
    if (h->slots)
        memset(h->slots, 0, h->cap * sizeof *h->slots);
    h->count = 0;
}

/* The empty slot where key's probe run ends. */
static flyt_hash_slot *free_slot(flyt_hash_slot *slots, size_t cap, uint64_t key)
{
    size_t mask = cap - 1, i = flyt_hash_home(key, cap);
    while (slots[i].key != 0) {
        FLYT_ASSERT(slots[i].key != key); /* insert only what is not there */
        i = (i + 1) & mask;
    }
    return &slots[i];
}

/* Keeps the table at most half full, so probe runs stay short. */
static int grow_if_needed(flyt_hash *h)
{
    if ((h->count + 1) * 2 <= h->cap)
        return 0;
    size_t cap = h->cap ? h->cap * 2 : FIRST_CAP;
    flyt_hash_slot *slots = calloc(cap, sizeof *slots);
    if (slots == NULL)
        return -1;
    for (size_t i = 0; i < h->cap; i++)
        if (h->slots[i].key != 0)
            *free_slot(slots, cap, h->slots[i].key) = h->slots[i];
    free(h->slots);
    h->slots = slots;
    h->cap = cap;
    return 0;
}

flyt_hash_slot *flyt_hash_insert(flyt_hash *h, uint64_t key)
{
    FLYT_ASSERT(key != 0);
    if (grow_if_needed(h) != 0)
        return NULL;
    flyt_hash_slot *s = free_slot(h->slots, h->cap, key);
    s->key = key;
    s->value.u64 = 0;
    h->count++;
    FLYT_ASSERT(h->count * 2 <= h->cap);
    return s;
}

/* Empties slot i and shifts later members of its probe run back, so that
 * lookups never need tombstones. */
static void remove_at(flyt_hash *h, size_t i)
{
    size_t mask = h->cap - 1;
    FLYT_ASSERT(h->slots[i].key != 0 && h->count > 0);
    h->slots[i].key = 0;
    h->count--;
    for (size_t j = (i + 1) & mask; h->slots[j].key != 0; j = (j + 1) & mask) {
        size_t k = flyt_hash_home(h->slots[j].key, h->cap);
        /* the entry at j may move to i unless its home lies cyclically in (i, j] */
        int stays = (i <= j) ? (k > i && k <= j) : (k > i || k <= j);
        if (stays)
            continue;
        h->slots[i] = h->slots[j];
        h->slots[j].key = 0;
        i = j;
    }
}

void flyt_hash_remove_slot(flyt_hash *h, flyt_hash_slot *s)
{
    FLYT_ASSERT(s >= h->slots && s < h->slots + h->cap);
    remove_at(h, (size_t)(s - h->slots));
}

int flyt_hash_remove(flyt_hash *h, uint64_t key)
{
    flyt_hash_slot *s = flyt_hash_find(h, key);
    if (s == NULL)
        return 0;
    flyt_hash_remove_slot(h, s);
    return 1;
}

/* Iteration starts after an empty slot, which stays empty while it goes on
 * (nothing is inserted): no backward shift moves an entry across it, so an
 * entry already visited never moves ahead of the cursor again. */
void flyt_hash_iter_init(const flyt_hash *h, flyt_hash_iter *it)
{
    it->start = 0;
    it->step = 1;
    while (it->start < h->cap && h->slots[it->start].key != 0)
        it->start++;
    FLYT_ASSERT(h->cap == 0 || it->start < h->cap); /* never full */
}

flyt_hash_slot *flyt_hash_iter_next(const flyt_hash *h, flyt_hash_iter *it)
{
    while (it->step < h->cap) {
        flyt_hash_slot *s = &h->slots[(it->start + it->step++) & (h->cap - 1)];
        if (s->key != 0)
            return s;
    }
    return NULL;
}

void flyt_hash_iter_remove(flyt_hash *h, flyt_hash_iter *it)
{
    FLYT_ASSERT(it->step > 1 && it->step <= h->cap);
    it->step--; /* look at this slot again: a later entry may move into it */
    remove_at(h, (it->start + it->step) & (h->cap - 1));
}

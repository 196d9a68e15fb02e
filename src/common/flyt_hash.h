/*
 * The one hash table: uint64_t keys to a pointer or a 64-bit value, open
 * addressing with linear probing and backward-shift deletion (no
 * tombstones), at most half full. Key 0 marks an empty slot, so 0 is never a
 * key: it is simply never found. Not thread-safe; slots move when the table
 * grows or an entry is removed, so a slot pointer is good only until the
 * next insert or remove.
 *
 * Lookups are on the hot path of every call (the server's id tables): the
 * hash and the probe loop are inline here, keys compared in the slot array
 * itself, no call through a pointer.
 */
#ifndef FLYT_HASH_H
#define FLYT_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "flyt_assert.h"

typedef struct {
    uint64_t key; /* 0: empty */
    union {
        void    *ptr;
        uint64_t u64;
    } value;
} flyt_hash_slot;

typedef struct {
    flyt_hash_slot *slots;
    size_t          cap; /* a power of two, or 0 before the first insert */
    size_t          count;
} flyt_hash;

/* Iteration over every entry, each visited exactly once, also while the
 * visited entries are removed with flyt_hash_iter_remove. */
typedef struct {
    size_t start; /* an empty slot: no probe run crosses it */
    size_t step;  /* slots looked at so far after start */
} flyt_hash_iter;

void flyt_hash_init(flyt_hash *h);
/* Frees the slots; the table is empty and usable again. */
void flyt_hash_free(flyt_hash *h);
/* Empties the table, keeping its slots. */
void flyt_hash_clear(flyt_hash *h);

/* The slot of key, which must not be in the table yet (nor be 0), with its
 * value zeroed; NULL when out of memory. */
flyt_hash_slot *flyt_hash_insert(flyt_hash *h, uint64_t key);
/* 1 when key was there and is removed, 0 when it was not there. */
int flyt_hash_remove(flyt_hash *h, uint64_t key);
/* Removes the entry in slot s (from flyt_hash_find). */
void flyt_hash_remove_slot(flyt_hash *h, flyt_hash_slot *s);

void            flyt_hash_iter_init(const flyt_hash *h, flyt_hash_iter *it);
/* The next entry, NULL after the last. */
flyt_hash_slot *flyt_hash_iter_next(const flyt_hash *h, flyt_hash_iter *it);
/* Removes the entry flyt_hash_iter_next returned last; iteration goes on
 * with the entry shifted into its place, if any. */
void flyt_hash_iter_remove(flyt_hash *h, flyt_hash_iter *it);

static inline size_t flyt_hash_count(const flyt_hash *h) { return h->count; }

/* Fibonacci hashing: the top bits of key times 2^64 / phi. Sequential ids
 * (the server's) land in distinct slots, one probe each; aligned pointers
 * spread too, every bit of the key reaching the top ones. cap: a power of
 * two, at least 2. */
static inline size_t flyt_hash_home(uint64_t key, size_t cap)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> (__builtin_clzll(cap) + 1));
}

/* The slot holding key, or NULL. */
static inline flyt_hash_slot *flyt_hash_find(const flyt_hash *h, uint64_t key)
{
    if (key == 0 || h->cap == 0)
        return NULL;
    FLYT_ASSERT(h->count < h->cap); /* an empty slot ends every probe run */
    size_t mask = h->cap - 1;
    for (size_t i = flyt_hash_home(key, h->cap);; i = (i + 1) & mask) {
        flyt_hash_slot *s = &h->slots[i];
        if (s->key == key)
            return s;
        if (s->key == 0)
            return NULL;
    }
}

#endif

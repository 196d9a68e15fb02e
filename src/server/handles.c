/* Typed id tables: one open-addressing hash map from id to entry. */
#include "handles.h"

#include <stdlib.h>
#include <string.h>

#include "flyt_assert.h"

/* First id handed out; 0, 1 and 2 are the fixed stream ids. */
#define FIRST_ID 16u

static size_t home_slot(const flyt_handles *t, uint64_t id)
{
    /* ids are sequential: mix them so neighbours spread over the table */
    uint64_t x = id * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    return (size_t)x & (t->cap - 1);
}

static void free_entry(struct flyt_hentry *e)
{
    if (e->type == FLYT_H_FUNC)
        free(e->u.func.params);
    free(e);
}

void flyt_handles_init(flyt_handles *t)
{
    memset(t, 0, sizeof *t);
    t->next_id = FIRST_ID;
}

void flyt_handles_clear(flyt_handles *t)
{
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i])
            free_entry(t->slots[i]);
    free(t->slots);
    uint64_t next = t->next_id; /* ids stay unique across a clear */
    flyt_handles_init(t);
    t->next_id = next;
}

static void insert_slot(flyt_handles *t, struct flyt_hentry *e)
{
    size_t i = home_slot(t, e->id);
    while (t->slots[i])
        i = (i + 1) & (t->cap - 1);
    t->slots[i] = e;
}

/* Keeps the load factor at or under one half. */
static int grow_if_needed(flyt_handles *t)
{
    if ((t->count + 1) * 2 <= t->cap)
        return 0;
    size_t old_cap = t->cap, new_cap = old_cap ? old_cap * 2 : 64;
    struct flyt_hentry **old = t->slots;
    struct flyt_hentry **slots = calloc(new_cap, sizeof *slots);
    if (slots == NULL)
        return -1;
    t->slots = slots;
    t->cap = new_cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i])
            insert_slot(t, old[i]);
    free(old);
    return 0;
}

struct flyt_hentry *flyt_handles_add(flyt_handles *t, enum flyt_htype type, flyt_bhandle bh)
{
    if (grow_if_needed(t) != 0)
        return NULL;
    struct flyt_hentry *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->id = t->next_id++;
    FLYT_ASSERT(e->id > 2 && e->id < FLYT_CLIENT_IDS); /* not a fixed stream, not a client's id */
    e->type = type;
    e->bh = bh;
    insert_slot(t, e);
    t->count++;
    return e;
}

static size_t find_slot(const flyt_handles *t, uint64_t id);

/* Client-chosen ids live at and above FLYT_CLIENT_IDS, which the server's
 * own counter never reaches, so the two kinds never collide. */
struct flyt_hentry *flyt_handles_add_id(flyt_handles *t, uint64_t id, enum flyt_htype type,
                                        flyt_bhandle bh)
{
    if (id < FLYT_CLIENT_IDS || find_slot(t, id) != SIZE_MAX || grow_if_needed(t) != 0)
        return NULL;
    struct flyt_hentry *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->id = id;
    e->type = type;
    e->bh = bh;
    insert_slot(t, e);
    t->count++;
    return e;
}

static size_t find_slot(const flyt_handles *t, uint64_t id)
{
    if (t->cap == 0)
        return SIZE_MAX;
    for (size_t i = home_slot(t, id);; i = (i + 1) & (t->cap - 1)) {
        if (t->slots[i] == NULL)
            return SIZE_MAX;
        if (t->slots[i]->id == id)
            return i;
    }
}

struct flyt_hentry *flyt_handles_get(flyt_handles *t, uint64_t id, enum flyt_htype type)
{
    size_t i = find_slot(t, id);
    if (i == SIZE_MAX || t->slots[i]->type != type)
        return NULL;
    return t->slots[i];
}

/* Empties slot i and shifts later members of its probe run back, so lookups
 * never need tombstones. */
static void remove_slot(flyt_handles *t, size_t i)
{
    size_t mask = t->cap - 1;
    free_entry(t->slots[i]);
    t->slots[i] = NULL;
    t->count--;
    for (size_t j = (i + 1) & mask; t->slots[j]; j = (j + 1) & mask) {
        size_t k = home_slot(t, t->slots[j]->id);
        /* the entry at j may move to i unless its home lies cyclically in (i, j] */
        int stays = (i <= j) ? (k > i && k <= j) : (k > i || k <= j);
        if (stays)
            continue;
        t->slots[i] = t->slots[j];
        t->slots[j] = NULL;
        i = j;
    }
}

int flyt_handles_remove(flyt_handles *t, uint64_t id)
{
    size_t i = find_slot(t, id);
    if (i == SIZE_MAX)
        return -1;
    remove_slot(t, i);
    return 0;
}

int flyt_handles_foreach(flyt_handles *t, int (*fn)(struct flyt_hentry *e, void *arg), void *arg)
{
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i]) {
            int rc = fn(t->slots[i], arg);
            if (rc)
                return rc;
        }
    return 0;
}

size_t flyt_handles_remove_if(flyt_handles *t, int (*pred)(const struct flyt_hentry *e, void *arg),
                              void *arg)
{
    size_t removed = 0;
    /* After a removal, slot i may hold an entry shifted back from later in
     * the table (or one already seen, after wrapping): look at i again. Every
     * entry is thus examined at least once, and a second look is harmless. */
    for (size_t i = 0; i < t->cap;) {
        if (t->slots[i] && pred(t->slots[i], arg)) {
            remove_slot(t, i);
            removed++;
        } else {
            i++;
        }
    }
    return removed;
}

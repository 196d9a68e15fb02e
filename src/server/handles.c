/* Typed id tables: one hash table (flyt_hash) from id to entry. */
#include "handles.h"

#include <stdlib.h>
#include <string.h>

#include "flyt_assert.h"

/* First id handed out; 0, 1 and 2 are the fixed stream ids. */
#define FIRST_ID 16u

static void free_entry(struct flyt_hentry *e)
{
    if (e->type == FLYT_H_FUNC)
        free(e->u.func.params);
    if (e->type == FLYT_H_TEXOBJ || e->type == FLYT_H_SURFOBJ)
        free(e->u.obj.desc);
    free(e);
}

void flyt_handles_init(flyt_handles *t)
{
    flyt_hash_init(&t->map);
    t->next_id = FIRST_ID;
}

void flyt_handles_clear(flyt_handles *t)
{
    flyt_hash_iter it;
    flyt_hash_slot *s;
    flyt_hash_iter_init(&t->map, &it);
    while ((s = flyt_hash_iter_next(&t->map, &it)) != NULL)
        free_entry(s->value.ptr);
    flyt_hash_free(&t->map);
    /* next_id stays: ids are unique across a clear */
}

static struct flyt_hentry *add_entry(flyt_handles *t, uint64_t id, enum flyt_htype type,
                                     flyt_bhandle bh)
{
    struct flyt_hentry *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    flyt_hash_slot *s = flyt_hash_insert(&t->map, id);
    if (s == NULL) {
        free(e);
        return NULL;
    }
    e->id = id;
    e->type = type;
    e->bh = bh;
    s->value.ptr = e;
    return e;
}

struct flyt_hentry *flyt_handles_add(flyt_handles *t, enum flyt_htype type, flyt_bhandle bh)
{
    FLYT_ASSERT(t->next_id > 2 && t->next_id < FLYT_CLIENT_IDS); /* not a fixed stream, not a client's id */
    struct flyt_hentry *e = add_entry(t, t->next_id, type, bh);
    if (e != NULL)
        t->next_id++;
    return e;
}

/* Client-chosen ids live at and above FLYT_CLIENT_IDS, which the server's
 * own counter never reaches, so the two kinds never collide. */
struct flyt_hentry *flyt_handles_add_id(flyt_handles *t, uint64_t id, enum flyt_htype type,
                                        flyt_bhandle bh)
{
    if (id < FLYT_CLIENT_IDS || flyt_hash_find(&t->map, id) != NULL)
        return NULL;
    return add_entry(t, id, type, bh);
}

int flyt_handles_remove(flyt_handles *t, uint64_t id)
{
    flyt_hash_slot *s = flyt_hash_find(&t->map, id);
    if (s == NULL)
        return -1;
    free_entry(s->value.ptr);
    flyt_hash_remove_slot(&t->map, s);
    return 0;
}

int flyt_handles_foreach(flyt_handles *t, int (*fn)(struct flyt_hentry *e, void *arg), void *arg)
{
    flyt_hash_iter it;
    flyt_hash_slot *s;
    flyt_hash_iter_init(&t->map, &it);
    while ((s = flyt_hash_iter_next(&t->map, &it)) != NULL) {
        int rc = fn(s->value.ptr, arg);
        if (rc)
            return rc;
    }
    return 0;
}

size_t flyt_handles_remove_if(flyt_handles *t, int (*pred)(const struct flyt_hentry *e, void *arg),
                              void *arg)
{
    size_t removed = 0;
    flyt_hash_iter it;
    flyt_hash_slot *s;
    flyt_hash_iter_init(&t->map, &it);
    while ((s = flyt_hash_iter_next(&t->map, &it)) != NULL)
        if (pred(s->value.ptr, arg)) {
            free_entry(s->value.ptr);
            flyt_hash_iter_remove(&t->map, &it);
            removed++;
        }
    return removed;
}

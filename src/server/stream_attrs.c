/* Stream attributes kept for a live resize: see stream_attrs.h. */
#include "stream_attrs.h"

#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "flyt_log.h"

struct attr_one {
    uint32_t          id;
    CUstreamAttrValue value;
};

/* One stream's attributes, in the order they were first set. */
struct attr_rec {
    uint32_t        n, cap;
    struct attr_one e[];
};

/* Stream ids 0/1/2 are real keys here: the table's key is id + 1. The NULL
 * stream and the legacy stream are one stream: one record. */
static uint64_t key_of(uint64_t stream)
{
    return (stream == FLYT_STREAM_LEGACY ? FLYT_STREAM_DEFAULT : stream) + 1;
}

static struct attr_rec *rec_of(flyt_session *s, uint64_t stream)
{
    flyt_hash_slot *slot = flyt_hash_find(&s->stream_attrs, key_of(stream));
    return slot ? slot->value.ptr : NULL;
}

/* 0, or -1 (r freed, said in the log) when out of memory. */
static int rec_put(flyt_session *s, uint64_t stream, struct attr_rec *r)
{
    flyt_hash_slot *slot = flyt_hash_find(&s->stream_attrs, key_of(stream));
    if (!slot)
        slot = flyt_hash_insert(&s->stream_attrs, key_of(stream));
    if (!slot) {
        flyt_warn("out of memory: stream %llu's attributes are not carried by a resize",
                  (unsigned long long)stream);
        free(r);
        return -1;
    }
    slot->value.ptr = r;
    return 0;
}

static void note_set(flyt_session *s, uint64_t stream, uint32_t id, const void *value)
{
    struct attr_rec *r = rec_of(s, stream);
    for (uint32_t i = 0; r && i < r->n; i++)
        if (r->e[i].id == id) {
            memcpy(&r->e[i].value, value, sizeof r->e[i].value);
            return;
        }
    if (!r || r->n == r->cap) {
        uint32_t cap = r ? r->cap * 2 : 4;
        struct attr_rec *grown = realloc(r, sizeof *r + cap * sizeof r->e[0]);
        if (!grown) {
            flyt_warn("out of memory: stream attribute %u is not carried by a resize", id);
            return;
        }
        if (!r)
            grown->n = 0;
        grown->cap = cap;
        r = grown;
        if (rec_put(s, stream, r) != 0) /* the pointer may have moved */
            return;
    }
    r->e[r->n].id = id;
    memcpy(&r->e[r->n].value, value, sizeof r->e[r->n].value);
    r->n++;
}

/* cuStreamCopyAttributes(dst, src): dst now has src's attributes, all of them. */
static void note_copy(flyt_session *s, uint64_t dst, uint64_t src)
{
    if (key_of(dst) == key_of(src)) /* one stream (the NULL and legacy streams are one) */
        return;
    const struct attr_rec *from = rec_of(s, src);
    flyt_stream_attrs_forget(s, dst);
    if (!from)
        return;
    size_t bytes = sizeof *from + from->cap * sizeof from->e[0];
    struct attr_rec *copy = malloc(bytes);
    if (!copy) {
        flyt_warn("out of memory: stream %llu's attributes are not carried by a resize",
                  (unsigned long long)dst);
        return;
    }
    memcpy(copy, from, bytes);
    (void)rec_put(s, dst, copy);
}

void flyt_stream_attrs_note(flyt_session *s, uint32_t call_id, const uint64_t *client_args,
                            const void *in)
{
    if (call_id == FLYT_CALL_cuStreamSetAttribute)
        note_set(s, client_args[0], (uint32_t)client_args[1], in);
    else if (call_id == FLYT_CALL_cuStreamCopyAttributes)
        note_copy(s, client_args[0], client_args[1]);
}

void flyt_stream_attrs_forget(flyt_session *s, uint64_t stream)
{
    flyt_hash_slot *slot = flyt_hash_find(&s->stream_attrs, key_of(stream));
    if (!slot)
        return;
    free(slot->value.ptr);
    flyt_hash_remove_slot(&s->stream_attrs, slot);
}

void flyt_stream_attrs_clear(flyt_session *s)
{
    flyt_hash_iter it;
    flyt_hash_slot *slot;
    flyt_hash_iter_init(&s->stream_attrs, &it);
    while ((slot = flyt_hash_iter_next(&s->stream_attrs, &it)) != NULL)
        free(slot->value.ptr);
    flyt_hash_free(&s->stream_attrs);
}

int flyt_stream_attrs_reapply(flyt_session *s)
{
    int failed = 0;
    flyt_hash_iter it;
    flyt_hash_slot *slot;
    flyt_hash_iter_init(&s->stream_attrs, &it);
    while ((slot = flyt_hash_iter_next(&s->stream_attrs, &it)) != NULL) {
        uint64_t stream = slot->key - 1;
        const struct attr_rec *r = slot->value.ptr;
        flyt_bhandle bh = NULL;
        if (flyt_lookup_stream(s, stream, &bh) != CUDA_SUCCESS)
            continue; /* not a stream any more */
        for (uint32_t i = 0; i < r->n; i++) {
            uint64_t args[FLYT_CALL_MAX_ARGS] = {(uint64_t)(uintptr_t)bh, r->e[i].id};
            unsigned char out[FLYT_CALL_MAX_BYTES];
            CUresult res = FLYT_BCALL(s, call, FLYT_CALL_cuStreamSetAttribute, args,
                                      &r->e[i].value, out);
            if (res != CUDA_SUCCESS) {
                flyt_warn("session for %s: stream %llu's attribute %u is lost in the resize "
                          "(CUDA error %d setting it again)", s->peer,
                          (unsigned long long)stream, r->e[i].id, (int)res);
                failed++;
            }
        }
    }
    return failed;
}

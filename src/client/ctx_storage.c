/*
 * Context-local storage (see ctx_storage.h).
 *
 * A process has a handful of contexts and each runtime copy keeps a key or
 * two in each, so small arrays searched linearly beat any hashing. Lookups
 * share a read lock; writers are rare (once per context and runtime copy).
 */
#include "ctx_storage.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

struct cls_entry {
    void *key;
    void *value;
    flyt_cls_dtor dtor;
};

struct cls_ctx {
    CUcontext ctx;
    struct cls_entry *entries;
    unsigned count, cap;
};

static pthread_rwlock_t cls_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct cls_ctx *cls_ctxs;
static unsigned cls_count, cls_cap;

/* NULL and (CUcontext)-1 stand for the calling thread's current context. */
static CUresult resolve_ctx(CUcontext *ctx)
{
    if (*ctx != NULL && *ctx != (CUcontext)(uintptr_t)-1)
        return CUDA_SUCCESS;
    CUcontext current = NULL;
    CUresult err = cuCtxGetCurrent(&current);
    if (err != CUDA_SUCCESS)
        return err;
    if (current == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *ctx = current;
    return CUDA_SUCCESS;
}

/* Callers hold cls_lock. */
static struct cls_ctx *find_ctx(CUcontext ctx)
{
    for (unsigned i = 0; i < cls_count; i++)
        if (cls_ctxs[i].ctx == ctx)
            return &cls_ctxs[i];
    return NULL;
}

static struct cls_entry *find_entry(struct cls_ctx *c, void *key)
{
    for (unsigned i = 0; c != NULL && i < c->count; i++)
        if (c->entries[i].key == key)
            return &c->entries[i];
    return NULL;
}

/* array with room for one more than count elements (doubling); NULL when
 * that cannot be had, array untouched. */
static void *room_for_one(void *array, unsigned count, unsigned *cap, size_t elem)
{
    if (count < *cap)
        return array;
    unsigned cap2 = *cap ? *cap * 2 : 4;
    void *a = realloc(array, (size_t)cap2 * elem);
    if (a != NULL)
        *cap = cap2;
    return a;
}

/* Callers hold cls_lock for writing. */
static struct cls_ctx *find_or_add_ctx(CUcontext ctx)
{
    struct cls_ctx *c = find_ctx(ctx);
    if (c != NULL)
        return c;
    struct cls_ctx *ctxs = room_for_one(cls_ctxs, cls_count, &cls_cap, sizeof *ctxs);
    if (ctxs == NULL)
        return NULL;
    cls_ctxs = ctxs;
    c = &cls_ctxs[cls_count++];
    *c = (struct cls_ctx){.ctx = ctx};
    return c;
}

static CUresult put_locked(CUcontext ctx, void *key, void *value, flyt_cls_dtor dtor)
{
    struct cls_ctx *c = find_or_add_ctx(ctx);
    if (c == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (find_entry(c, key) != NULL)
        return CUDA_ERROR_INVALID_HANDLE; /* as the driver: no overwriting */
    struct cls_entry *entries = room_for_one(c->entries, c->count, &c->cap, sizeof *entries);
    if (entries == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->entries = entries;
    c->entries[c->count++] = (struct cls_entry){.key = key, .value = value, .dtor = dtor};
    return CUDA_SUCCESS;
}

CUresult flyt_ctx_storage_put(CUcontext ctx, void *key, void *value, flyt_cls_dtor dtor)
{
    CUresult err = resolve_ctx(&ctx);
    if (err != CUDA_SUCCESS)
        return err;
    pthread_rwlock_wrlock(&cls_lock);
    err = put_locked(ctx, key, value, dtor);
    pthread_rwlock_unlock(&cls_lock);
    return err;
}

CUresult flyt_ctx_storage_delete(CUcontext ctx, void *key)
{
    CUresult err = resolve_ctx(&ctx);
    if (err != CUDA_SUCCESS)
        return err;
    pthread_rwlock_wrlock(&cls_lock);
    struct cls_ctx *c = find_ctx(ctx);
    struct cls_entry *e = find_entry(c, key);
    if (e != NULL)
        *e = c->entries[--c->count];
    pthread_rwlock_unlock(&cls_lock);
    return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult flyt_ctx_storage_get(void **value, CUcontext ctx, void *key)
{
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult err = resolve_ctx(&ctx);
    if (err != CUDA_SUCCESS)
        return err;
    pthread_rwlock_rdlock(&cls_lock);
    struct cls_entry *e = find_entry(find_ctx(ctx), key);
    if (e != NULL)
        *value = e->value;
    pthread_rwlock_unlock(&cls_lock);
    return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

void flyt_ctx_storage_drop(CUcontext ctx)
{
    pthread_rwlock_wrlock(&cls_lock);
    struct cls_ctx *c = find_ctx(ctx);
    struct cls_ctx gone = {0};
    if (c != NULL) {
        gone = *c;
        *c = cls_ctxs[--cls_count];
    }
    pthread_rwlock_unlock(&cls_lock);
    /* Outside the lock: a dtor may well call back into this store. */
    for (unsigned i = 0; i < gone.count; i++)
        if (gone.entries[i].dtor != NULL)
            gone.entries[i].dtor(ctx, gone.entries[i].key, gone.entries[i].value);
    free(gone.entries);
}

/*
 * Checkpoint and restore on the "cuda" backend (docs/state-format.md):
 * the session's allocations are listed from the backend's own records
 * (backend_cuda_mem.c), and a restore reserves the same arenas first, then
 * places each allocation at its old address inside them.
 */
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_int.h"
#include "flyt_log.h"

int flyt_cuda_state_keep_image(struct flyt_cuda_module *m, const void *image, size_t size,
                               void *owned)
{
    m->image = owned ? owned : malloc(size);
    if (m->image == NULL)
        return -1;
    if (owned == NULL)
        memcpy(m->image, image, size);
    m->image_size = size;
    return 0;
}

CUresult flyt_cuda_module_image(flyt_backend *base, flyt_bhandle module, const void **image,
                                size_t *size)
{
    const struct flyt_cuda_module *m = module;
    if (base == NULL || m == NULL || m->image == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *image = m->image;
    *size = m->image_size;
    return CUDA_SUCCESS;
}

/* ---- capture ---- */

/* The first object the backend holds that a checkpoint cannot capture yet. */
static const char *uncapturable(const struct flyt_cuda_backend *b)
{
    if (flyt_hash_count(&b->mem.outside.map))
        return "device memory allocated outside Flyt's arena (FLYT_CUDA_ARENA=0)";
    return NULL;
}

struct alloc_rec {
    uint64_t addr, size;
};

static int by_addr(const void *x, const void *y)
{
    uint64_t a = ((const struct alloc_rec *)x)->addr, c = ((const struct alloc_rec *)y)->addr;
    return (a > c) - (a < c);
}

static size_t collect(const struct flyt_memtab *t, struct alloc_rec *out, size_t n)
{
    flyt_hash_iter it;
    flyt_hash_iter_init(&t->map, &it);
    for (flyt_hash_slot *e; (e = flyt_hash_iter_next(&t->map, &it)) != NULL;)
        out[n++] = (struct alloc_rec){e->key, e->value.u64};
    return n;
}

CUresult flyt_cuda_state_allocs(flyt_backend *base,
                                CUresult (*fn)(void *arg, uint64_t addr, uint64_t size), void *arg,
                                const char **what)
{
    struct flyt_cuda_backend *b = cb(base);
    *what = uncapturable(b);
    if (*what)
        return CUDA_ERROR_NOT_SUPPORTED;
    size_t total = flyt_hash_count(&b->mem.allocs.map), n = 0;
    struct alloc_rec *list = malloc((total ? total : 1) * sizeof *list);
    if (list == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n = collect(&b->mem.allocs, list, n);
    qsort(list, n, sizeof *list, by_addr);
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = fn(arg, list[i].addr, list[i].size);
    free(list);
    return r;
}

CUresult flyt_cuda_mem_alloc_at(flyt_backend *base, uint64_t addr, uint64_t size)
{
    ENTER(b, base);
    if (addr == 0 || size == 0 || addr + size < addr)
        return CUDA_ERROR_INVALID_VALUE;
    return flyt_cuda_mem_place_at(b, addr, size);
}

/* ---- module globals the driver put elsewhere ---- */

CUresult flyt_cuda_alias_add(struct flyt_cuda_backend *b, uint64_t old, uint64_t now, uint64_t size)
{
    if (b == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct flyt_cuda_alias *a = realloc(b->ckpt.aliases, (size_t)(b->ckpt.naliases + 1) * sizeof *a);
    if (a == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a[b->ckpt.naliases++] = (struct flyt_cuda_alias){old, size, now};
    b->ckpt.aliases = a;
    return CUDA_SUCCESS;
}

void flyt_cuda_alias_remove(struct flyt_cuda_backend *b, uint64_t old)
{
    for (int i = 0; i < b->ckpt.naliases; i++)
        if (b->ckpt.aliases[i].old == old) {
            b->ckpt.aliases[i] = b->ckpt.aliases[--b->ckpt.naliases];
            return;
        }
}

CUresult flyt_cuda_global_alias(flyt_backend *base, uint64_t old, uint64_t now, uint64_t size)
{
    struct flyt_cuda_backend *b = cb(base);
    CUresult r = flyt_cuda_alias_add(b, old, now, size);
    if (r != CUDA_SUCCESS)
        return r;
    flyt_info("restore: module global of %llu bytes moved from 0x%llx to 0x%llx: the old "
              "address is translated in copies and kernel parameters", (unsigned long long)size,
              (unsigned long long)old, (unsigned long long)now);
    return CUDA_SUCCESS;
}

uint64_t flyt_cuda_xlate_slow(const struct flyt_cuda_backend *b, uint64_t addr)
{
    for (int i = 0; i < b->ckpt.naliases; i++) {
        const struct flyt_cuda_alias *a = &b->ckpt.aliases[i];
        if (addr >= a->old && addr - a->old < a->size)
            return a->now + (addr - a->old);
    }
    return addr;
}

/* The parameters copied into *buf (grown), to be translated there; NULL out of memory. */
static unsigned char *params_copy(unsigned char **buf, const void *params, uint32_t bytes)
{
    unsigned char *copy = realloc(*buf, bytes);
    if (copy == NULL)
        return NULL;
    *buf = copy;
    return memcpy(copy, params, bytes);
}

const void *flyt_cuda_params_xlate(struct flyt_cuda_backend *b, const void *params, uint32_t bytes)
{
    if (b->ckpt.naliases == 0 || params == NULL || bytes < 8)
        return params;
    unsigned char *copy = params_copy(&b->ckpt.kparam_copy, params, bytes);
    if (copy == NULL)
        return params; /* untranslated: the launch still runs, as before a move */
    /* a pointer parameter is 8-byte aligned in the buffer; a value equal to a
     * moved global's old address is taken for a pointer to it */
    for (uint32_t off = 0; off + 8 <= bytes; off += 8) {
        uint64_t v;
        memcpy(&v, copy + off, 8);
        uint64_t t = flyt_cuda_xlate_slow(b, v);
        if (t != v)
            memcpy(copy + off, &t, 8);
    }
    return copy;
}

/* ---- texture and surface objects the driver gave other values ---- */

CUresult flyt_cuda_obj_alias(flyt_backend *base, uint64_t client, uint64_t now)
{
    struct flyt_cuda_backend *b = cb(base);
    if (b == NULL || client == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < b->ckpt.nobjs; i++)
        if (b->ckpt.objs[2 * i] == client) { /* forgotten: the last pair takes its place */
            b->ckpt.nobjs--;
            b->ckpt.objs[2 * i] = b->ckpt.objs[2 * b->ckpt.nobjs];
            b->ckpt.objs[2 * i + 1] = b->ckpt.objs[2 * b->ckpt.nobjs + 1];
            break;
        }
    if (now == client)
        return CUDA_SUCCESS;
    uint64_t *o = realloc(b->ckpt.objs, (size_t)(b->ckpt.nobjs + 1) * 2 * sizeof *o);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o[2 * b->ckpt.nobjs] = client;
    o[2 * b->ckpt.nobjs + 1] = now;
    b->ckpt.nobjs++;
    b->ckpt.objs = o;
    return CUDA_SUCCESS;
}

static int xlate_obj(const struct flyt_cuda_backend *b, unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    for (int i = 0; i < b->ckpt.nobjs; i++)
        if (b->ckpt.objs[2 * i] == v) {
            memcpy(p, &b->ckpt.objs[2 * i + 1], 8);
            return 1;
        }
    return 0;
}

const void *flyt_cuda_params_xlate_objs(struct flyt_cuda_backend *b, const struct flyt_cuda_func *f,
                                        const void *params, uint32_t bytes)
{
    if (b->ckpt.nobjs == 0 || params == NULL || bytes < 8)
        return params;
    unsigned char *copy = params_copy(&b->ckpt.kobj_copy, params, bytes);
    if (copy == NULL)
        return params;
    /* an object is an 8-byte parameter; without the layout, any 8-byte aligned word */
    if (f && f->nparams >= 0) {
        for (int i = 0; i < f->nparams; i++)
            if (f->psize[i] == 8 && (uint64_t)f->poff[i] + 8 <= bytes)
                xlate_obj(b, copy + f->poff[i]);
    } else {
        for (uint32_t off = 0; off + 8 <= bytes; off += 8)
            xlate_obj(b, copy + off);
    }
    return copy;
}

void flyt_cuda_aliases_drop(struct flyt_cuda_backend *b)
{
    free(b->ckpt.aliases);
    b->ckpt.aliases = NULL;
    b->ckpt.naliases = 0;
    free(b->ckpt.objs);
    b->ckpt.objs = NULL;
    b->ckpt.nobjs = 0;
}

/* Checkpoint and restore of a session: see state.h, docs/state-format.md. */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "flyt_clock.h"
#include "flyt_log.h"
#include "ipc.h"
#include "module_cache.h"
#include "resize.h"
#include "state_array.h"
#include "state_graph.h"
#include "state_format.h"
#include "state_pipe.h"
#include "state_precopy.h"
#include "state_stream.h"
#include "vmm_state.h"

#define LOAD(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)


static void say(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- writing: through the pipeline of state_pipe.c ---- */

struct writer {
    struct flyt_swriter    *sw;
    struct flyt_state_times t; /* logged once per checkpoint */
};

static int w_put(struct writer *w, const void *p, size_t n)
{
    return flyt_sw_put(w->sw, p, n);
}

static int w_record(struct writer *w, uint32_t type, const void *rec, size_t rec_len, uint64_t extra)
{
    struct flyt_state_section sec = {type, 0, rec_len + extra};
    return w_put(w, &sec, sizeof sec) || w_put(w, rec, rec_len) ? -1 : 0;
}

/* ---- capture: what may be captured ---- */

struct scan {
    flyt_session          *s;
    const char            *kind; /* the first object refused */
    uint64_t               id;
    struct flyt_hentry   **list; /* the entries to write */
    size_t                 n, cap;
    uint64_t               alloc_bytes; /* the allocations' contents: most of the state */
    struct flyt_vmm_snap   vmm;         /* the program's VMM objects */
};

static const char *refused_kind(flyt_session *s, const struct flyt_hentry *e)
{
    switch (e->type) {
    case FLYT_H_STREAM:
    case FLYT_H_EVENT:
    case FLYT_H_MODULE: return NULL;
    case FLYT_H_FUNC: return e->u.func.name ? NULL : "function without a recorded name";
    case FLYT_H_POOL:
        if (e->u.pool.handle_types || e->u.pool.imported) /* its other processes would keep the old */
            return "memory pool shared with other processes (cuMemPoolCreate with handle types)";
        return e->id == s->default_pool_id || s->b->ops->state_async ? NULL
                                                                      : "memory pool (cuMemPoolCreate)";
    case FLYT_H_REGION: return NULL;
    case FLYT_H_VMEM: return s->b->ops->state_vmm ? NULL : "physical allocation (cuMemCreate)";
    case FLYT_H_ARRAY:
    case FLYT_H_MIPMAP:
    case FLYT_H_TEXOBJ:
    case FLYT_H_SURFOBJ: return flyt_state_array_refused(s, e);
    case FLYT_H_GRAPH:
    case FLYT_H_GRAPH_EXEC:
    case FLYT_H_GRAPH_NODE: return flyt_state_graph_refused(s, e);
    case FLYT_H_USER_OBJECT: return "user object";
    }
    return "object of an unknown kind";
}

static int scan_one(struct flyt_hentry *e, void *arg)
{
    struct scan *sc = arg;
    sc->kind = refused_kind(sc->s, e);
    if (sc->kind) {
        sc->id = e->id;
        return 1;
    }
    if (sc->n == sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 64;
        struct flyt_hentry **l = realloc(sc->list, cap * sizeof *l);
        if (l == NULL) {
            sc->kind = "(out of memory listing the session's objects)";
            return 1;
        }
        sc->list = l;
        sc->cap = cap;
    }
    sc->list[sc->n++] = e;
    return 0;
}

/* Ids in ascending order: a function comes after its module (made later). */
static int by_id(const void *a, const void *b)
{
    uint64_t x = (*(struct flyt_hentry *const *)a)->id, y = (*(struct flyt_hentry *const *)b)->id;
    return (x > y) - (x < y);
}

static CUresult count_alloc(void *arg, uint64_t addr, uint64_t size)
{
    (void)addr;
    *(uint64_t *)arg += size;
    return CUDA_SUCCESS;
}

static CUresult count_async(void *arg, uint64_t addr, uint64_t size, flyt_bhandle pool)
{
    (void)pool;
    return count_alloc(arg, addr, size);
}

/* Whether everything the session holds can be captured; fills sc->list. */
static CUresult check_capturable(flyt_session *s, struct scan *sc, char *err, size_t errlen)
{
    const struct flyt_backend_ops *ops = s->b->ops;
    if (!ops->state_allocs || !ops->mem_alloc_at || !ops->module_image) {
        say(err, errlen, "the %s backend cannot checkpoint a session yet", ops->name);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (s->captures > 0) {
        say(err, errlen, "a stream capture is in progress and did not end in time (FLYT_CKPT_CAPTURE_WAIT_MS), which a checkpoint cannot capture yet");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    const char *shared = flyt_ipc_busy(s);
    if (shared) {
        say(err, errlen, "the session holds %s, which a checkpoint cannot capture", shared);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (flyt_handles_foreach(&s->handles, scan_one, sc)) {
        say(err, errlen, "the session holds a %s (id %llu), which a checkpoint cannot capture yet",
            sc->kind, (unsigned long long)sc->id);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    const char *what = NULL;
    CUresult r = ops->state_allocs(s->b, count_alloc, &sc->alloc_bytes, &what);
    if (r != CUDA_SUCCESS) {
        say(err, errlen, "the session holds a %s, which a checkpoint cannot capture yet",
            what ? what : "device object");
        return r;
    }
    if (ops->state_async && (r = ops->state_async(s->b, count_async, &sc->alloc_bytes)) != CUDA_SUCCESS) {
        say(err, errlen, "listing the stream-ordered allocations failed: CUDA error %d", (int)r);
        return r;
    }
    if ((r = flyt_vmm_snap_take(s, &sc->vmm, &what)) != CUDA_SUCCESS) {
        say(err, errlen, "the session holds a %s, which a checkpoint cannot capture yet",
            what ? what : "VMM object");
        return r;
    }
    if (sc->n > 1) /* none held: the list is NULL, which qsort must not be given */
        qsort(sc->list, sc->n, sizeof *sc->list, by_id);
    return CUDA_SUCCESS;
}

/* ---- capture: the records ---- */

/* The GPU's architecture as major * 10 + minor (90 for 9.0); 0 when the backend does not say. */
static uint32_t device_arch(flyt_session *s)
{
    int major = 0, minor = 0;
    if (FLYT_BCALL(s, device_attr, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &major) != CUDA_SUCCESS ||
        FLYT_BCALL(s, device_attr, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &minor) != CUDA_SUCCESS)
        return 0;
    return (uint32_t)(major * 10 + minor);
}

static void session_record(flyt_session *s, struct flyt_state_session *r, const int **groups)
{
    memset(r, 0, sizeof *r);
    if (s->cfg->session_id)
        snprintf(r->session_id, sizeof r->session_id, "%s", s->cfg->session_id);
    r->next_id = s->handles.next_id;
    r->deferred = s->deferred;
    r->arch = device_arch(s);
    r->sm_count = (uint32_t)s->sm_count;
    r->memory_quota = flyt_quota_limit();
    r->memory_used = s->mem.used;
    *groups = NULL;
    if (s->sm_count > 0) { /* the share in force: the page's latest, else the command line's */
        const int *g = s->cfg->sm_groups;
        int n = s->cfg->sm_ngroups;
        unsigned gran = s->cfg->sm_granularity;
        uint64_t gen = s->share_gen;
        flyt_resize_initial(s, &g, &n, &gran);
        s->share_gen = gen;
        *groups = g;
        r->sm_ngroups = (uint32_t)n;
        r->sm_granularity = gran;
    }
    for (int i = 0; i < FLYT_STATE_LIMITS; i++)
        if (FLYT_BCALL(s, get_limit, i, &r->limits[i]) == CUDA_SUCCESS)
            r->valid |= 1u << i;
    if (FLYT_BCALL(s, get_cache_config, &r->cache_config) == CUDA_SUCCESS)
        r->valid |= FLYT_STATE_CACHE_VALID;
    if (FLYT_BCALL(s, get_ctx_flags, &r->ctx_flags) == CUDA_SUCCESS)
        r->valid |= FLYT_STATE_FLAGS_VALID;
}

struct alloc_ctx {
    flyt_session  *s;
    struct writer *w;
};

static CUresult write_arena(void *arg, uint64_t base, uint64_t size)
{
    struct flyt_state_arena rec = {base, size};
    return w_record(((struct alloc_ctx *)arg)->w, FLYT_SS_ARENA, &rec, sizeof rec, 0)
               ? CUDA_ERROR_OPERATING_SYSTEM : CUDA_SUCCESS;
}

/* size bytes of device memory at addr, read straight into the writer's
 * blocks (pinned staging buffers on a GPU) while the threads hash and write
 * the blocks before them. */
static CUresult write_device_bytes(flyt_session *s, struct writer *w, uint64_t addr, uint64_t size)
{
    flyt_backend *b = s->b;
    for (uint64_t off = 0; off < size;) {
        size_t room;
        void *dst = flyt_sw_reserve(w->sw, &room);
        if (dst == NULL)
            return CUDA_ERROR_OPERATING_SYSTEM;
        size_t take = size - off < room ? (size_t)(size - off) : room;
        uint64_t t0 = flyt_mono_ns();
        CUresult r = b->ops->dtoh_2d(b, dst, addr + off, take, take, 1, FLYT_BSTREAM_DEFAULT);
        w->t.d2h += flyt_mono_ns() - t0;
        if (r != CUDA_SUCCESS)
            return r;
        if (flyt_sw_commit(w->sw, take) != 0)
            return CUDA_ERROR_OPERATING_SYSTEM;
        off += take;
    }
    return CUDA_SUCCESS;
}

/* One allocation and its contents. */
static CUresult write_alloc(void *arg, uint64_t addr, uint64_t size)
{
    struct alloc_ctx *a = arg;
    struct flyt_state_alloc rec = {addr, size};
    if (w_record(a->w, FLYT_SS_ALLOC, &rec, sizeof rec, size) != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    return write_device_bytes(a->s, a->w, addr, size);
}

/* The program's VMM reservations. */
static CUresult write_vranges(struct writer *w, const struct flyt_vmm_snap *v)
{
    for (size_t i = 0; i < v->nranges; i++)
        if (w_record(w, FLYT_SS_VRANGE, &v->ranges[i], sizeof v->ranges[i], 0) != 0)
            return CUDA_ERROR_OPERATING_SYSTEM;
    return CUDA_SUCCESS;
}

/* A physical allocation, its mappings and its contents (read through a window). */
static CUresult write_vmem(flyt_session *s, struct writer *w, const struct flyt_vmm_smem *m)
{
    if (m == NULL)
        return CUDA_ERROR_INVALID_VALUE; /* the snapshot names every handle's allocation */
    size_t maps = m->rec.nmaps * sizeof *m->maps;
    if (w_record(w, FLYT_SS_VMEM, &m->rec, sizeof m->rec, maps + m->rec.size) ||
        w_put(w, m->maps, maps))
        return CUDA_ERROR_OPERATING_SYSTEM;
    uint64_t va;
    CUresult r = flyt_vmm_capture_open(s, m, &va);
    if (r != CUDA_SUCCESS)
        return r;
    r = write_device_bytes(s, w, va, m->rec.size);
    CUresult c = flyt_vmm_capture_close(s, m, va);
    return r != CUDA_SUCCESS ? r : c;
}

/* Physical allocations no handle names any more, alive through their mappings. */
static CUresult write_released_vmems(flyt_session *s, struct writer *w, const struct flyt_vmm_snap *v)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < v->nmems && r == CUDA_SUCCESS; i++)
        if (v->mems[i].rec.id == 0)
            r = write_vmem(s, w, &v->mems[i]);
    return r;
}

/* Every module global the client looked up, with its contents. */
static CUresult write_globals(flyt_session *s, struct writer *w)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < s->nglobals && r == CUDA_SUCCESS; i++) {
        const struct flyt_global_seen *g = &s->globals[i];
        struct flyt_state_global rec = {.module = g->module, .addr = g->addr, .size = g->size,
                                        .name_len = (uint32_t)strlen(g->name) + 1};
        if (w_record(w, FLYT_SS_GLOBAL, &rec, sizeof rec, rec.name_len + g->size) ||
            w_put(w, g->name, rec.name_len))
            return CUDA_ERROR_OPERATING_SYSTEM;
        r = write_device_bytes(s, w, g->addr, g->size);
    }
    return r;
}

int flyt_state_global_seen(flyt_session *s, uint64_t module, const char *name, uint64_t addr,
                           uint64_t size)
{
    for (size_t i = 0; i < s->nglobals; i++)
        if (s->globals[i].module == module && strcmp(s->globals[i].name, name) == 0)
            return 0;
    if (s->nglobals == s->cap_globals) {
        size_t cap = s->cap_globals ? s->cap_globals * 2 : 8;
        struct flyt_global_seen *g = realloc(s->globals, cap * sizeof *g);
        if (g == NULL)
            return -1;
        s->globals = g;
        s->cap_globals = cap;
    }
    char *copy = strdup(name);
    if (copy == NULL)
        return -1;
    s->globals[s->nglobals++] = (struct flyt_global_seen){module, addr, size, copy};
    return 0;
}

void flyt_state_globals_drop(flyt_session *s, uint64_t module)
{
    size_t kept = 0;
    for (size_t i = 0; i < s->nglobals; i++) {
        if (module == 0 || s->globals[i].module == module)
            free(s->globals[i].name);
        else
            s->globals[kept++] = s->globals[i];
    }
    s->nglobals = kept;
    if (module == 0) {
        free(s->globals);
        s->globals = NULL;
        s->cap_globals = 0;
    }
}

static CUresult write_module(flyt_session *s, struct writer *w, const struct flyt_hentry *e)
{
    const void *image;
    size_t size;
    CUresult r = s->b->ops->module_image(s->b, e->bh, &image, &size);
    if (r != CUDA_SUCCESS)
        return r;
    struct flyt_state_module rec = {.id = e->id, .refs = e->u.module.refs, .image_size = size};
    memcpy(rec.sha256, e->u.module.sha256, 32);
    /* a streamed state leaves out what the receiver holds (pre-copied): the file not */
    int held = flyt_precopy_receiver_holds(rec.id, rec.sha256, size);
    return w_record(w, FLYT_SS_MODULE, &rec, sizeof rec, size) ||
                   (held ? flyt_sw_put_unsent(w->sw, image, size) : w_put(w, image, size))
               ? CUDA_ERROR_OPERATING_SYSTEM : CUDA_SUCCESS;
}

/* The function attributes a program sets (cuFuncSetAttribute), kept across a restore. */
static const int func_attrs[FLYT_STATE_FUNC_ATTRS] = {
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT};

static CUresult write_func(flyt_session *s, struct writer *w, const struct flyt_hentry *e)
{
    const struct flyt_func_info *f = &e->u.func;
    struct flyt_state_func rec = {.id = e->id, .module = f->module, .param_count = f->param_count,
                                  .param_bytes = f->param_bytes,
                                  .name_len = (uint32_t)strlen(f->name) + 1};
    for (int i = 0; i < FLYT_STATE_FUNC_ATTRS; i++)
        if (FLYT_BCALL(s, func_get_attr, e->bh, func_attrs[i], &rec.attrs[i]) == CUDA_SUCCESS)
            rec.attr_valid |= 1u << i;
    size_t params = f->param_count * sizeof(flyt_param);
    return w_record(w, FLYT_SS_FUNC, &rec, sizeof rec, params + rec.name_len) ||
                   w_put(w, f->params, params) || w_put(w, f->name, rec.name_len)
               ? CUDA_ERROR_OPERATING_SYSTEM : CUDA_SUCCESS;
}

/* A pool: what made it and the attributes a program sets (reuse flags, release threshold). */
static CUresult write_pool(flyt_session *s, struct writer *w, const struct flyt_hentry *e)
{
    struct flyt_state_mempool rec = {.id = e->id, .is_default = e->id == s->default_pool_id};
    if (!rec.is_default)
        rec.max_size = e->u.pool.max_size;
    for (int i = 0; i < FLYT_STATE_POOL_ATTRS; i++)
        if (FLYT_BCALL(s, pool_get_attr, e->bh, i + 1, &rec.attrs[i]) == CUDA_SUCCESS)
            rec.attr_valid |= 1u << i;
    return w_record(w, FLYT_SS_MEMPOOL, &rec, sizeof rec, 0) ? CUDA_ERROR_OPERATING_SYSTEM
                                                              : CUDA_SUCCESS;
}

struct async_ctx {
    flyt_session      *s;
    struct writer     *w;
    const struct scan *sc; /* its pools, by backend handle */
};

/* The id the client holds for a backend pool; 0 for none (the current pool, or destroyed). */
static uint64_t pool_id_of(const struct scan *sc, flyt_bhandle pool)
{
    for (size_t i = 0; pool && i < sc->n; i++)
        if (sc->list[i]->type == FLYT_H_POOL && sc->list[i]->bh == pool)
            return sc->list[i]->id;
    return 0;
}

/* A stream-ordered allocation and its contents. */
static CUresult write_async(void *arg, uint64_t addr, uint64_t size, flyt_bhandle pool)
{
    struct async_ctx *a = arg;
    struct flyt_state_async rec = {addr, size, pool_id_of(a->sc, pool)};
    if (w_record(a->w, FLYT_SS_ASYNC, &rec, sizeof rec, size) != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    return write_device_bytes(a->s, a->w, addr, size);
}

static CUresult write_entry(flyt_session *s, struct writer *w, const struct flyt_hentry *e)
{
    switch (e->type) {
    case FLYT_H_GRAPH:
    case FLYT_H_GRAPH_EXEC:
    case FLYT_H_GRAPH_NODE: return CUDA_SUCCESS; /* after every other object: flyt_state_graph_write */
    case FLYT_H_ARRAY:
    case FLYT_H_MIPMAP:
    case FLYT_H_TEXOBJ:
    case FLYT_H_SURFOBJ: return flyt_state_array_write(s, w->sw, e);
    case FLYT_H_MODULE: return write_module(s, w, e);
    case FLYT_H_FUNC: return write_func(s, w, e);
    case FLYT_H_REGION: { /* the memory is the client's: only what names it */
        const struct flyt_region_info *g = &e->u.region;
        struct flyt_state_hostmap rec = {.id = e->id, .size = g->size, .addr = g->addr,
                                         .mapped = g->mapped,
                                         .flags = g->read_only ? FLYT_STATE_HOSTMAP_READ_ONLY : 0};
        return w_record(w, FLYT_SS_HOSTMAP, &rec, sizeof rec, 0) ? CUDA_ERROR_OPERATING_SYSTEM
                                                                 : CUDA_SUCCESS;
    }
    case FLYT_H_STREAM: {
        struct flyt_state_stream rec = {.id = e->id};
        CUresult r = FLYT_BCALL(s, stream_get_flags, e->bh, &rec.flags);
        if (r == CUDA_SUCCESS)
            r = FLYT_BCALL(s, stream_get_priority, e->bh, &rec.priority);
        if (r == CUDA_SUCCESS && w_record(w, FLYT_SS_STREAM, &rec, sizeof rec, 0) != 0)
            r = CUDA_ERROR_OPERATING_SYSTEM;
        return r;
    }
    case FLYT_H_EVENT: {
        struct flyt_state_event rec = {.id = e->id, .flags = e->u.event_flags};
        return w_record(w, FLYT_SS_EVENT, &rec, sizeof rec, 0) ? CUDA_ERROR_OPERATING_SYSTEM
                                                                : CUDA_SUCCESS;
    }
    default: return write_pool(s, w, e); /* check_capturable let nothing else through */
    }
}

static CUresult write_all(flyt_session *s, struct writer *w, const struct scan *sc)
{
    struct flyt_state_header h = {.magic = FLYT_STATE_MAGIC, .version = FLYT_STATE_VERSION,
                                  .header_size = sizeof h, .created_ns = flyt_clock_ns(CLOCK_REALTIME)};
    snprintf(h.backend, sizeof h.backend, "%s", s->b->ops->name);
    struct flyt_state_session sess;
    const int *groups;
    session_record(s, &sess, &groups);
    int32_t g32[FLYT_STATUS_GROUPS];
    for (uint32_t i = 0; i < sess.sm_ngroups && i < FLYT_STATUS_GROUPS; i++)
        g32[i] = groups[i];
    if (sess.sm_ngroups > FLYT_STATUS_GROUPS)
        sess.sm_ngroups = FLYT_STATUS_GROUPS;
    size_t glen = sess.sm_ngroups * sizeof(int32_t);
    struct flyt_state_client client = {.consumed = flyt_session_consumed(s),
                                       .acks_ahead = flyt_session_acks_ahead(s)};
    memcpy(client.instance, s->instance, sizeof client.instance);
    if (w_put(w, &h, sizeof h) || w_record(w, FLYT_SS_SESSION, &sess, sizeof sess, glen) ||
        w_put(w, g32, glen) || w_record(w, FLYT_SS_CLIENT, &client, sizeof client, 0))
        return CUDA_ERROR_OPERATING_SYSTEM;
    struct alloc_ctx a = {s, w};
    const char *what = NULL;
    CUresult r = s->b->ops->state_arenas ? s->b->ops->state_arenas(s->b, write_arena, &a)
                                         : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        r = s->b->ops->state_allocs(s->b, write_alloc, &a, &what);
    if (r == CUDA_SUCCESS)
        r = write_vranges(w, &sc->vmm);
    for (size_t i = 0; r == CUDA_SUCCESS && i < sc->n; i++)
        r = sc->list[i]->type == FLYT_H_VMEM
                ? write_vmem(s, w, flyt_vmm_snap_by_id(&sc->vmm, sc->list[i]->id))
                : write_entry(s, w, sc->list[i]);
    if (r == CUDA_SUCCESS)
        r = write_released_vmems(s, w, &sc->vmm);
    struct async_ctx ac = {s, w, sc};
    if (r == CUDA_SUCCESS && s->b->ops->state_async) /* after the pools they name */
        r = s->b->ops->state_async(s->b, write_async, &ac);
    if (r == CUDA_SUCCESS)
        r = write_globals(s, w);
    if (r == CUDA_SUCCESS)
        r = flyt_state_graph_write(s, w->sw);
    if (r != CUDA_SUCCESS)
        return r;
    struct flyt_state_section end = {FLYT_SS_END, 0, 0};
    return w_put(w, &end, sizeof end) || flyt_sw_finish(w->sw) ? CUDA_ERROR_OPERATING_SYSTEM
                                                                : CUDA_SUCCESS;
}

/* One line per checkpoint: where its time went (docs/state-format.md, "Phase timings"). */
static void log_capture_phases(const struct flyt_state_times *t, uint64_t bytes, uint64_t total_ns)
{
    double ms = 1e-6;
    flyt_info("state phases (checkpoint): %llu bytes, drain %.3f ms, device reads %.3f ms, "
              "hashing %.3f ms (summed over %d threads), file writes %.3f ms, socket sends "
              "%.3f ms, waits for the pipeline %.3f ms, fsync %.3f ms, total %.3f ms (%.2f GB/s)",
              (unsigned long long)bytes, t->drain * ms, t->d2h * ms, t->hash * ms, t->threads,
              t->write * ms, t->send * ms, t->stall * ms, t->fsync * ms, total_ns * ms,
              total_ns ? (double)bytes / (double)total_ns : 0.0);
    if (t->streamed)
        flyt_info("state phases (checkpoint): %llu bytes streamed; %llu bytes of kernel images "
                  "left out of the stream (the receiver holds them); the file completed %.3f ms "
                  "after the stream's last byte", (unsigned long long)(bytes - t->unsent),
                  (unsigned long long)t->unsent, t->file_tail * ms);
}

/* fsync: fd is a file the state ends in (not streamed) and must be on disk. */
static CUresult capture(flyt_session *s, int fd, int sock, int sync, uint64_t *bytes, char *err,
                        size_t errlen)
{
    uint64_t t0 = flyt_mono_ns();
    *bytes = 0;
    if (s->b == NULL) {
        say(err, errlen, "the session has not opened its device yet");
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    struct scan sc = {.s = s};
    CUresult r = check_capturable(s, &sc, err, errlen);
    /* the drain: every stream's work done, host functions included */
    uint64_t t_drain = flyt_mono_ns();
    if (r == CUDA_SUCCESS && (r = FLYT_BCALL0(s, device_sync)) != CUDA_SUCCESS)
        say(err, errlen, "draining the session's work failed: CUDA error %d", (int)r);
    struct flyt_server_status *page = flyt_status_page();
    if (page)
        STORE(&page->ckpt_estimate, sc.alloc_bytes);
    struct writer w = {.t.drain = flyt_mono_ns() - t_drain};
    if (r == CUDA_SUCCESS &&
        (w.sw = flyt_sw_open(s->b, fd, sock, page ? &page->ckpt_sent : NULL)) == NULL) {
        say(err, errlen, "out of memory (or threads) for the state's writer");
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    int on_sock, werr;
    if (r == CUDA_SUCCESS && (r = write_all(s, &w, &sc)) != CUDA_SUCCESS) {
        if ((werr = flyt_sw_error(w.sw, &on_sock)) != 0)
            say(err, errlen, "%s the state failed: %s", on_sock ? "streaming" : "writing",
                strerror(werr));
        else
            say(err, errlen, "reading the session's objects failed: CUDA error %d", (int)r);
    }
    *bytes = w.sw ? flyt_sw_total(w.sw) : 0;
    flyt_sw_close(w.sw, &w.t);
    w.t.streamed = sock >= 0;
    uint64_t t_sync = flyt_mono_ns();
    if (r == CUDA_SUCCESS && sync && fsync(fd) != 0) {
        say(err, errlen, "cannot complete the state file: %s", strerror(errno));
        r = CUDA_ERROR_OPERATING_SYSTEM;
    }
    w.t.fsync = flyt_mono_ns() - t_sync;
    if (r == CUDA_SUCCESS)
        log_capture_phases(&w.t, *bytes, flyt_mono_ns() - t0);
    free(sc.list);
    flyt_vmm_snap_free(&sc.vmm);
    return r;
}

CUresult flyt_state_capture(flyt_session *s, int fd, uint64_t *bytes, char *err, size_t errlen)
{
    return capture(s, fd, -1, 0, bytes, err, errlen);
}

CUresult flyt_state_capture_file(flyt_session *s, const char *path, int sock, uint64_t *bytes,
                                 char *err, size_t errlen)
{
    char tmp[PATH_MAX];
    if (path[0] == '\0' || snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        say(err, errlen, "bad checkpoint path '%s'", path);
        return CUDA_ERROR_INVALID_VALUE;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        say(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    /* streamed: the receiver verifies its own copy; this one is the fallback, and
     * an fsync would only add to the downtime */
    CUresult r = capture(s, fd, sock, sock < 0, bytes, err, errlen);
    if (r == CUDA_SUCCESS && rename(tmp, path) != 0) {
        say(err, errlen, "cannot complete %s: %s", path, strerror(errno));
        r = CUDA_ERROR_OPERATING_SYSTEM;
    }
    close(fd);
    if (r != CUDA_SUCCESS)
        unlink(tmp);
    return r;
}

/* ---- reading and verifying ---- */

struct flyt_state {
    const unsigned char *data;
    size_t               size;
    struct flyt_state_session sess;   /* copies: a section may start at any byte */
    struct flyt_state_client  client;
    int                       has_client; /* 0 in version 1 */
    uint64_t                  map_ns, verify_ns, hash_ns, sections_ns; /* opening it, logged */
    int                       hash_threads; /* the chunked trailer was checked on threads */
    int                       prehashed;    /* ... as it arrived (flyt_state_open_hashed) */
};

/* A section's fixed record, copied out: sections follow each other without
 * padding (an allocation's contents have its size), so a record in the file
 * may be misaligned for its type. */
union state_rec {
    struct flyt_state_session session;
    struct flyt_state_alloc   alloc;
    struct flyt_state_module  module;
    struct flyt_state_func    func;
    struct flyt_state_stream  stream;
    struct flyt_state_event   event;
    struct flyt_state_pool    pool;
    struct flyt_state_client  client;
    struct flyt_state_arena   arena;
    struct flyt_state_hostmap hostmap;
    struct flyt_state_global  global;
    struct flyt_state_vrange  vrange;
    struct flyt_state_vmem    vmem;
    struct flyt_state_mempool mempool;
    struct flyt_state_async   async;
};

static size_t rec_size(uint32_t type)
{
    switch (type) {
    case FLYT_SS_SESSION: return sizeof(struct flyt_state_session);
    case FLYT_SS_ALLOC: return sizeof(struct flyt_state_alloc);
    case FLYT_SS_MODULE: return sizeof(struct flyt_state_module);
    case FLYT_SS_FUNC: return sizeof(struct flyt_state_func);
    case FLYT_SS_STREAM: return sizeof(struct flyt_state_stream);
    case FLYT_SS_EVENT: return sizeof(struct flyt_state_event);
    case FLYT_SS_POOL: return sizeof(struct flyt_state_pool);
    case FLYT_SS_CLIENT: return sizeof(struct flyt_state_client);
    case FLYT_SS_ARENA: return sizeof(struct flyt_state_arena);
    case FLYT_SS_HOSTMAP: return sizeof(struct flyt_state_hostmap);
    case FLYT_SS_GLOBAL: return sizeof(struct flyt_state_global);
    case FLYT_SS_VRANGE: return sizeof(struct flyt_state_vrange);
    case FLYT_SS_VMEM: return sizeof(struct flyt_state_vmem);
    case FLYT_SS_MEMPOOL: return sizeof(struct flyt_state_mempool);
    case FLYT_SS_ASYNC: return sizeof(struct flyt_state_async);
    }
    return 0;
}

/* Copies the fixed record of a section of len bytes at p into rec (zeroed
 * past len); what follows it is at p + rec_size(type). */
static void rec_load(union state_rec *rec, uint32_t type, const unsigned char *p, uint64_t len)
{
    size_t n = rec_size(type);
    memset(rec, 0, sizeof *rec);
    memcpy(rec, p, len < n ? (size_t)len : n);
}

/* A region of some bytes: device-mapped ones at whole user-space pages. */
static int hostmap_ok(const struct flyt_state_hostmap *r)
{
    if (r->size == 0 || r->size > (1ull << 47) || r->mapped > 1 ||
        (r->flags & ~FLYT_STATE_HOSTMAP_READ_ONLY) || (r->flags && !r->mapped))
        return 0;
    if (!r->mapped)
        return r->addr == 0;
    return r->addr != 0 && !(r->addr & 4095) && !(r->size & 4095) && r->addr < (1ull << 47) &&
           r->size <= (1ull << 47) - r->addr;
}

/* The fixed record of a section and the bytes that must follow it. */
static int record_ok(uint32_t type, const unsigned char *p, uint64_t len)
{
    uint64_t need;
    union state_rec rec;
    if (flyt_state_array_section(type))
        return flyt_state_array_record_ok(type, p, len);
    if (flyt_state_graph_section(type)) /* the rest is checked as it is restored */
        return len >= (type == FLYT_SS_GRAPH ? sizeof(struct flyt_state_graph)
                                              : sizeof(struct flyt_state_gexec));
    rec_load(&rec, type, p, len);
    switch (type) {
    case FLYT_SS_SESSION: {
        const struct flyt_state_session *r = &rec.session;
        return len >= sizeof *r && r->sm_ngroups <= FLYT_STATUS_GROUPS &&
               len == sizeof *r + r->sm_ngroups * sizeof(int32_t) &&
               memchr(r->session_id, '\0', sizeof r->session_id) != NULL;
    }
    case FLYT_SS_ALLOC: {
        const struct flyt_state_alloc *r = &rec.alloc;
        return len >= sizeof *r && r->size > 0 && len - sizeof *r == r->size;
    }
    case FLYT_SS_MODULE: {
        const struct flyt_state_module *r = &rec.module;
        return len >= sizeof *r && r->image_size > 0 && len - sizeof *r == r->image_size;
    }
    case FLYT_SS_FUNC: {
        const struct flyt_state_func *r = &rec.func;
        if (len < sizeof *r || r->param_count > FLYT_MAX_PARAMS || r->name_len == 0 ||
            r->name_len > FLYT_MAX_NAME)
            return 0;
        need = sizeof *r + r->param_count * sizeof(flyt_param) + r->name_len;
        return len == need && p[need - 1] == '\0' &&
               memchr(p + need - r->name_len, '\0', r->name_len - 1) == NULL;
    }
    case FLYT_SS_STREAM: return len == sizeof(struct flyt_state_stream);
    case FLYT_SS_EVENT: return len == sizeof(struct flyt_state_event);
    case FLYT_SS_POOL: return len == sizeof(struct flyt_state_pool);
    case FLYT_SS_MEMPOOL:
        return len == sizeof(struct flyt_state_mempool) && rec.mempool.is_default <= 1 &&
               rec.mempool.attr_valid < (1u << FLYT_STATE_POOL_ATTRS) &&
               !(rec.mempool.is_default && rec.mempool.max_size);
    case FLYT_SS_ASYNC:
        return len >= sizeof(struct flyt_state_async) && rec.async.size > 0 &&
               rec.async.addr + rec.async.size > rec.async.addr &&
               len - sizeof(struct flyt_state_async) == rec.async.size;
    case FLYT_SS_CLIENT: return len == sizeof(struct flyt_state_client);
    case FLYT_SS_ARENA:
        return len == sizeof(struct flyt_state_arena) && rec.arena.size > 0 &&
               rec.arena.base + rec.arena.size > rec.arena.base;
    case FLYT_SS_HOSTMAP: return len == sizeof(struct flyt_state_hostmap) && hostmap_ok(&rec.hostmap);
    case FLYT_SS_GLOBAL: {
        const struct flyt_state_global *r = &rec.global;
        if (len < sizeof *r || r->name_len == 0 || r->name_len > FLYT_MAX_NAME || r->size == 0 ||
            len - sizeof *r - r->name_len != r->size)
            return 0;
        const unsigned char *name = p + sizeof *r;
        return name[r->name_len - 1] == '\0' && memchr(name, '\0', r->name_len - 1) == NULL;
    }
    case FLYT_SS_VRANGE:
        return len == sizeof(struct flyt_state_vrange) && rec.vrange.size > 0 &&
               rec.vrange.addr + rec.vrange.size > rec.vrange.addr;
    case FLYT_SS_VMEM: {
        const struct flyt_state_vmem *r = &rec.vmem;
        if (len < sizeof *r || r->size == 0 || r->nmaps > FLYT_STATE_MAX_VMAPS ||
            (r->id == 0) != (r->refs == 0) || (r->id == 0 && r->nmaps == 0))
            return 0;
        uint64_t maps = (uint64_t)r->nmaps * sizeof(struct flyt_state_vmap);
        return len - sizeof *r >= maps && len - sizeof *r - maps == r->size;
    }
    }
    return 0;
}

/* Walks the sections after the header; 0 when they are well-formed: SESSION
 * first, records whole, END last and exactly at body_end. */
static int sections_ok(struct flyt_state *st, size_t body_end, char *err, size_t errlen)
{
    size_t pos = sizeof(struct flyt_state_header);
    int allocs_seen = 0;
    for (int n = 0;; n++) {
        struct flyt_state_section sec;
        if (body_end - pos < sizeof sec) {
            say(err, errlen, "section %d at byte %zu is cut short", n, pos);
            return -1;
        }
        memcpy(&sec, st->data + pos, sizeof sec);
        pos += sizeof sec;
        if (sec.type == FLYT_SS_END) {
            if (pos != body_end || sec.length != 0 || n == 0)
                break;
            return 0;
        }
        if (sec.length > body_end - pos || (sec.type == FLYT_SS_SESSION) != (n == 0) ||
            (sec.type == FLYT_SS_CLIENT && n != 1) || (sec.type == FLYT_SS_ARENA && allocs_seen) ||
            sec.flags != 0 || !record_ok(sec.type, st->data + pos, sec.length)) {
            say(err, errlen, "section %d (type %u, %llu bytes) at byte %zu is malformed", n,
                sec.type, (unsigned long long)sec.length, pos - sizeof sec);
            return -1;
        }
        allocs_seen |= sec.type == FLYT_SS_ALLOC;
        if (n == 0)
            memcpy(&st->sess, st->data + pos, sizeof st->sess);
        if (sec.type == FLYT_SS_CLIENT) {
            memcpy(&st->client, st->data + pos, sizeof st->client);
            st->has_client = 1;
        }
        pos += sec.length;
    }
    say(err, errlen, "the END section is misplaced");
    return -1;
}

static int verify(struct flyt_state *st, char *err, size_t errlen)
{
    struct flyt_state_header h;
    if (st->size < sizeof h + sizeof(struct flyt_state_section) + FLYT_STATE_HASH) {
        say(err, errlen, "too short (%zu bytes) for a Flyt state file", st->size);
        return -1;
    }
    memcpy(&h, st->data, sizeof h);
    if (h.magic != FLYT_STATE_MAGIC) {
        say(err, errlen, "not a Flyt state file (bad magic)");
        return -1;
    }
    if (h.version > FLYT_STATE_VERSION) {
        say(err, errlen, "written in state format version %u by a newer Flyt; this server reads "
            "versions up to %u", h.version, FLYT_STATE_VERSION);
        return -1;
    }
    size_t body_end = st->size - FLYT_STATE_HASH;
    unsigned char sha[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    uint64_t t0 = flyt_mono_ns();
    int bad;
    if (h.version >= FLYT_STATE_CHUNKED && st->prehashed) { /* the trailer matched already */
        bad = 0;
        memcpy(sha, st->data + body_end, FLYT_STATE_HASH);
        st->hash_threads = 1;
    } else if (h.version >= FLYT_STATE_CHUNKED) { /* the chunks' digests, on threads */
        bad = flyt_state_root(st->data, body_end, sha, &st->hash_ns) != 0;
        st->hash_threads = 1;
    } else {
        bad = EVP_Digest(st->data, body_end, sha, &n, EVP_sha256(), NULL) != 1 ||
              n != FLYT_STATE_HASH;
        st->hash_ns = flyt_mono_ns() - t0;
    }
    st->verify_ns = flyt_mono_ns() - t0;
    bad = bad || memcmp(sha, st->data + body_end, FLYT_STATE_HASH) != 0;
    if (bad) {
        say(err, errlen, "its SHA-256 does not match its contents: the file is corrupted or cut "
            "short");
        return -1;
    }
    if (h.version < 1 || h.header_size != sizeof h || memchr(h.backend, '\0', sizeof h.backend) == NULL) {
        say(err, errlen, "malformed header (version %u, header size %u)", h.version, h.header_size);
        return -1;
    }
    t0 = flyt_mono_ns();
    int rc = sections_ok(st, body_end, err, errlen);
    st->sections_ns = flyt_mono_ns() - t0;
    return rc;
}

static void reserve_hostmaps(const struct flyt_state *st);

/* The next section of a verified state from *pos on: its body, with its
 * header in *sec and *pos past it; NULL at the END section. */
static const unsigned char *next_section(const struct flyt_state *st, size_t *pos,
                                         struct flyt_state_section *sec)
{
    memcpy(sec, st->data + *pos, sizeof *sec);
    *pos += sizeof *sec;
    if (sec->type == FLYT_SS_END)
        return NULL;
    const unsigned char *body = st->data + *pos;
    *pos += sec->length;
    return body;
}

static struct flyt_state *checked(struct flyt_state *st, const char *path, char *why,
                                  size_t whylen, char *err, size_t errlen);

static struct flyt_state *open_state(const char *path, int prehashed, uint64_t hash_ns,
                                     char *err, size_t errlen)
{
    char why[320] = "";
    uint64_t t0 = flyt_mono_ns();
    struct flyt_state *st = calloc(1, sizeof *st);
    if (st) {
        st->prehashed = prehashed;
        st->hash_ns = hash_ns;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (st == NULL || fd < 0 || fstat(fd, &sb) != 0) {
        say(why, sizeof why, "%s", st ? strerror(errno) : "out of memory");
    } else if (sb.st_size < 1 || (uint64_t)sb.st_size > SIZE_MAX) {
        say(why, sizeof why, "empty or not a regular file");
    } else {
        st->size = (size_t)sb.st_size;
        void *m = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED)
            say(why, sizeof why, "cannot map it: %s", strerror(errno));
        else
            st->data = m;
    }
    if (fd >= 0)
        close(fd);
    if (st)
        st->map_ns = flyt_mono_ns() - t0;
    return checked(st, path, why, sizeof why, err, errlen);
}

struct flyt_state *flyt_state_open_memory(const unsigned char *data, size_t size, int prehashed,
                                          uint64_t hash_ns, const char *what, char *err,
                                          size_t errlen)
{
    char why[320] = "";
    struct flyt_state *st = calloc(1, sizeof *st);
    if (st == NULL) {
        munmap((void *)data, size);
        say(why, sizeof why, "out of memory");
    } else {
        *st = (struct flyt_state){.data = data, .size = size, .prehashed = prehashed,
                                  .hash_ns = hash_ns};
    }
    return checked(st, what, why, sizeof why, err, errlen);
}

/* Verifies an opened state (st->data: NULL when it could not be mapped, why saying why);
 * st, or NULL with err and st closed. */
static struct flyt_state *checked(struct flyt_state *st, const char *path, char *why,
                                  size_t whylen, char *err, size_t errlen)
{
    if (st && st->data && verify(st, why, whylen) == 0) {
        flyt_info("state phases (open): %zu bytes, mapping %.3f ms, hash verification %.3f ms "
                  "(%s, hashing %.3f ms summed), sections %.3f ms", st->size, st->map_ns * 1e-6,
                  st->verify_ns * 1e-6,
                  st->prehashed && st->hash_threads ? "chunked, on threads as it arrived"
                  : st->hash_threads                ? "chunked, on threads"
                                                    : "sequential",
                  st->hash_ns * 1e-6, st->sections_ns * 1e-6);
        reserve_hostmaps(st);
        return st;
    }
    say(err, errlen, "state file %s refused: %s", path, why);
    flyt_state_close(st);
    return NULL;
}

struct flyt_state *flyt_state_open(const char *path, char *err, size_t errlen)
{
    return open_state(path, 0, 0, err, errlen);
}

struct flyt_state *flyt_state_open_hashed(const char *path, uint64_t hash_ns, char *err,
                                          size_t errlen)
{
    return open_state(path, 1, hash_ns, err, errlen);
}

const char *flyt_state_session_id(const struct flyt_state *st)
{
    return st->sess.session_id;
}

int flyt_state_client(const struct flyt_state *st, uint8_t instance[16], uint64_t *consumed)
{
    if (!st->has_client)
        return 0;
    memcpy(instance, st->client.instance, 16);
    *consumed = st->client.consumed;
    return 1;
}

void flyt_state_close(struct flyt_state *st)
{
    if (st && st->data)
        munmap((void *)st->data, st->size);
    free(st);
}

/* ---- restore ---- */

/* Adds an entry under exactly id: client ids directly; server ids by
 * setting the counter, which the file's ascending order only moves up. */
static struct flyt_hentry *add_exact(flyt_session *s, uint64_t id, enum flyt_htype type,
                                     flyt_bhandle bh, uint64_t *last_server_id)
{
    if (id >= FLYT_CLIENT_IDS)
        return flyt_handles_add_id(&s->handles, id, type, bh);
    if (id <= *last_server_id)
        return NULL;
    *last_server_id = id;
    s->handles.next_id = id;
    return flyt_handles_add(&s->handles, type, bh);
}

struct flyt_hentry *flyt_state_add_exact(flyt_session *s, uint64_t id, enum flyt_htype type,
                                         flyt_bhandle bh, uint64_t *last_server_id)
{
    return add_exact(s, id, type, bh, last_server_id);
}

static CUresult restore_context(flyt_session *s, const struct flyt_state_session *r,
                                const unsigned char *tail, char *err, size_t errlen)
{
    /* the client shipped kernel images cut to the GPU it started on: another
     * architecture would fail its launches later, after the move */
    uint32_t here = device_arch(s);
    if (r->arch != 0 && here != 0 && r->arch != here) {
        say(err, errlen, "the session's kernels were shipped for a GPU of compute capability %u.%u; "
            "this one is %u.%u: a session moves to a GPU of its own architecture",
            r->arch / 10, r->arch % 10, here / 10, here % 10);
        return CUDA_ERROR_INVALID_DEVICE;
    }
    if (s->sm_count == 0 && r->sm_ngroups > 0) { /* the server was given no share of its own */
        int groups[FLYT_STATUS_GROUPS], sms = 0;
        for (uint32_t i = 0; i < r->sm_ngroups; i++) {
            int32_t g;
            memcpy(&g, tail + i * sizeof g, sizeof g);
            groups[i] = g;
        }
        CUresult e = FLYT_BCALL(s, set_sm_share, r->sm_granularity, groups, (int)r->sm_ngroups, &sms);
        if (e != CUDA_SUCCESS) {
            say(err, errlen, "the state's share of %u SM group(s) of %u cannot be had here: CUDA "
                "error %d", r->sm_ngroups, r->sm_granularity, (int)e);
            return e;
        }
        s->sm_count = sms;
    }
    if (r->memory_quota && !flyt_quota_limit())
        flyt_warn("the checkpointed session had a memory quota of %llu bytes; this server has "
                  "none (--memory-quota)", (unsigned long long)r->memory_quota);
    for (int i = 0; i < FLYT_STATE_LIMITS; i++) {
        uint64_t now;
        if ((r->valid & (1u << i)) && FLYT_BCALL(s, get_limit, i, &now) == CUDA_SUCCESS &&
            now != r->limits[i] && FLYT_BCALL(s, set_limit, i, r->limits[i]) != CUDA_SUCCESS)
            flyt_warn("restore: limit %d stays %llu (was %llu)", i, (unsigned long long)now,
                      (unsigned long long)r->limits[i]);
    }
    if (r->valid & FLYT_STATE_CACHE_VALID)
        FLYT_BCALL(s, set_cache_config, r->cache_config);
    if (r->valid & FLYT_STATE_FLAGS_VALID)
        FLYT_BCALL(s, set_ctx_flags, r->ctx_flags);
    s->deferred = r->deferred;
    return CUDA_SUCCESS;
}

static CUresult restore_arena(flyt_session *s, const struct flyt_state_arena *r, char *err,
                              size_t errlen)
{
    CUresult e = s->b->ops->arena_at ? s->b->ops->arena_at(s->b, r->base, r->size)
                                     : CUDA_ERROR_NOT_SUPPORTED;
    if (e != CUDA_SUCCESS)
        say(err, errlen, "cannot reserve the session's address arena 0x%llx (%llu bytes) here: "
            "CUDA error %d", (unsigned long long)r->base, (unsigned long long)r->size, (int)e);
    return e;
}

static uint64_t restore_h2d_ns; /* one restore per process; logged by it */

/* size bytes of data into device memory at addr, through staging buffers. */
static CUresult restore_device_bytes(flyt_session *s, uint64_t addr, uint64_t size,
                                     const unsigned char *data, char *err, size_t errlen)
{
    flyt_backend *b = s->b;
    for (uint64_t off = 0; off < size;) {
        size_t want = size - off < FLYT_STAGING_CHUNK ? (size_t)(size - off) : FLYT_STAGING_CHUNK;
        size_t got;
        void *buf = b->ops->staging_get(b, want, &got);
        if (buf == NULL) {
            say(err, errlen, "out of memory");
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        uint64_t t0 = flyt_mono_ns();
        memcpy(buf, data + off, got);
        CUresult e = b->ops->htod_2d(b, addr + off, got, buf, got, 1, FLYT_BSTREAM_DEFAULT);
        restore_h2d_ns += flyt_mono_ns() - t0;
        if (e != CUDA_SUCCESS) {
            say(err, errlen, "writing the contents at 0x%llx failed: CUDA error %d",
                (unsigned long long)(addr + off), (int)e);
            return e;
        }
        off += got;
    }
    return CUDA_SUCCESS;
}

/* A module global: the driver placed it when its module was loaded again,
 * and it must be where the client's copy of its address says. */
static CUresult restore_global(flyt_session *s, const struct flyt_state_global *r,
                               const unsigned char *tail, char *err, size_t errlen)
{
    const char *name = (const char *)tail;
    flyt_bhandle mod;
    uint64_t addr = 0, size = 0;
    CUresult e = flyt_lookup(s, r->module, FLYT_H_MODULE, &mod);
    if (e == CUDA_SUCCESS)
        e = FLYT_BCALL(s, global_get, mod, name, &addr, &size);
    if (e != CUDA_SUCCESS) {
        say(err, errlen, "module global %s of module %llu cannot be found again: CUDA error %d",
            name, (unsigned long long)r->module, (int)e);
        return e;
    }
    if (size != r->size) {
        say(err, errlen, "module global %s has %llu bytes here, not %llu", name,
            (unsigned long long)size, (unsigned long long)r->size);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (addr != r->addr) { /* the driver placed it elsewhere: the client holds the old one */
        e = s->b->ops->global_alias ? s->b->ops->global_alias(s->b, r->addr, addr, size)
                                    : CUDA_ERROR_NOT_SUPPORTED;
        if (e != CUDA_SUCCESS) {
            say(err, errlen, "module global %s is at 0x%llx here, not at 0x%llx where the "
                "program holds it, and cannot be translated: CUDA error %d", name,
                (unsigned long long)addr, (unsigned long long)r->addr, (int)e);
            return e;
        }
    }
    /* kept at the client's address: a later checkpoint names the same one */
    if (flyt_state_global_seen(s, r->module, name, r->addr, size) != 0) {
        say(err, errlen, "out of memory");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return restore_device_bytes(s, addr, size, tail + r->name_len, err, errlen);
}

static CUresult restore_alloc(flyt_session *s, const struct flyt_state_alloc *r,
                              const unsigned char *tail, char *err,
                              size_t errlen)
{
    flyt_backend *b = s->b;
    if (flyt_quota_charge(&s->mem, r->size) != 0) {
        say(err, errlen, "allocation 0x%llx of %llu bytes is past this server's memory quota",
            (unsigned long long)r->addr, (unsigned long long)r->size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult e = b->ops->mem_alloc_at(b, r->addr, r->size);
    if (e != CUDA_SUCCESS) {
        flyt_quota_uncharge(&s->mem, r->size);
        say(err, errlen, "cannot allocate %llu bytes at 0x%llx here: CUDA error %d",
            (unsigned long long)r->size, (unsigned long long)r->addr, (int)e);
        return e;
    }
    if (flyt_quota_active() && flyt_memtab_add(&s->mem, r->addr, r->size) != 0) {
        flyt_quota_uncharge(&s->mem, r->size);
        say(err, errlen, "out of memory");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return restore_device_bytes(s, r->addr, r->size, tail, err, errlen);
}

/* The module loaded before the stop (a streamed migration's pre-copy: the same id and
 * image), else its image from the state loaded now. */
static CUresult module_again(flyt_session *s, const struct flyt_state_module *r,
                             const void *image, flyt_bhandle *mod)
{
    if ((*mod = flyt_precopy_take(r->id, r->sha256, r->image_size)) != NULL)
        return CUDA_SUCCESS; /* its image was hashed as it arrived */
    uint8_t sha[32];
    flyt_sha256(image, r->image_size, sha);
    return memcmp(sha, r->sha256, 32) ? CUDA_ERROR_INVALID_IMAGE
                                      : FLYT_BCALL(s, module_load, image, r->image_size, NULL, mod);
}

static CUresult restore_module(flyt_session *s, const struct flyt_state_module *r,
                               const unsigned char *tail, uint64_t *last,
                               char *err, size_t errlen)
{
    flyt_bhandle mod = NULL;
    CUresult e = module_again(s, r, tail, &mod);
    struct flyt_hentry *h = e == CUDA_SUCCESS ? add_exact(s, r->id, FLYT_H_MODULE, mod, last) : NULL;
    if (h == NULL) {
        if (mod)
            FLYT_BCALL(s, module_unload, mod);
        say(err, errlen, "module %llu cannot be loaded again: CUDA error %d",
            (unsigned long long)r->id, (int)(e ? e : CUDA_ERROR_INVALID_VALUE));
        return e ? e : CUDA_ERROR_INVALID_VALUE;
    }
    memcpy(h->u.module.sha256, r->sha256, 32);
    h->u.module.refs = r->refs;
    h->u.module.image_size = r->image_size;
    s->image_bytes_live += r->image_size;
    return CUDA_SUCCESS;
}

static CUresult restore_func(flyt_session *s, const struct flyt_state_func *r,
                             const unsigned char *tail, uint64_t *last,
                             char *err, size_t errlen)
{
    size_t params = r->param_count * sizeof(flyt_param);
    const char *name = (const char *)tail + params;
    flyt_bhandle mod, func = NULL;
    CUresult e = flyt_lookup(s, r->module, FLYT_H_MODULE, &mod);
    if (e == CUDA_SUCCESS)
        e = FLYT_BCALL(s, func_get, mod, name, &func);
    char *block = e == CUDA_SUCCESS ? malloc(params + r->name_len) : NULL;
    struct flyt_hentry *h = block ? add_exact(s, r->id, FLYT_H_FUNC, func, last) : NULL;
    if (h == NULL) {
        free(block);
        say(err, errlen, "function %s (id %llu) cannot be found again: CUDA error %d", name,
            (unsigned long long)r->id, (int)(e ? e : CUDA_ERROR_INVALID_VALUE));
        return e ? e : CUDA_ERROR_INVALID_VALUE;
    }
    memcpy(block, tail, params + r->name_len);
    h->u.func = (struct flyt_func_info){.module = r->module, .param_count = r->param_count,
                                        .param_bytes = r->param_bytes,
                                        .params = (flyt_param *)(void *)block, .name = block + params};
    for (int i = 0; i < FLYT_STATE_FUNC_ATTRS; i++) {
        int now;
        if ((r->attr_valid & (1u << i)) &&
            FLYT_BCALL(s, func_get_attr, func, func_attrs[i], &now) == CUDA_SUCCESS &&
            now != r->attrs[i] &&
            (e = FLYT_BCALL(s, func_set_attr, func, func_attrs[i], r->attrs[i])) != CUDA_SUCCESS) {
            say(err, errlen, "function %s: attribute %d cannot be set to %d again: CUDA error %d",
                name, func_attrs[i], r->attrs[i], (int)e);
            return e;
        }
    }
    return CUDA_SUCCESS;
}

/* Streams, events and the default pool: made afresh under their ids. */
static CUresult restore_object(flyt_session *s, uint32_t type, const void *rec, uint64_t *last,
                               char *err, size_t errlen)
{
    flyt_bhandle bh = NULL;
    uint64_t id;
    enum flyt_htype ht;
    CUresult e;
    if (type == FLYT_SS_STREAM) {
        const struct flyt_state_stream *r = rec;
        id = r->id, ht = FLYT_H_STREAM;
        e = FLYT_BCALL(s, stream_create, r->flags, r->priority, &bh);
    } else if (type == FLYT_SS_EVENT) {
        const struct flyt_state_event *r = rec;
        id = r->id, ht = FLYT_H_EVENT;
        e = FLYT_BCALL(s, event_create, r->flags, &bh);
    } else {
        id = ((const struct flyt_state_pool *)rec)->id, ht = FLYT_H_POOL;
        e = FLYT_BCALL(s, pool_default, &bh);
    }
    struct flyt_hentry *h = e == CUDA_SUCCESS ? add_exact(s, id, ht, bh, last) : NULL;
    if (h == NULL) {
        if (ht == FLYT_H_STREAM && bh)
            FLYT_BCALL(s, stream_destroy, bh);
        if (ht == FLYT_H_EVENT && bh)
            FLYT_BCALL(s, event_destroy, bh);
        say(err, errlen, "object %llu (section type %u) cannot be made again: CUDA error %d",
            (unsigned long long)id, type, (int)(e ? e : CUDA_ERROR_INVALID_VALUE));
        return e ? e : CUDA_ERROR_INVALID_VALUE;
    }
    if (ht == FLYT_H_EVENT)
        h->u.event_flags = ((const struct flyt_state_event *)rec)->flags;
    if (ht == FLYT_H_POOL)
        s->default_pool_id = id;
    return CUDA_SUCCESS;
}

/* The device-mapped regions' addresses reserved as the state was opened
 * (one state per process: --restore), before the device or anything else
 * could take them; a restore finds them held for it. */
static struct flyt_state_hostmap *reserved;
static size_t nreserved;

static void reserve_hostmaps(const struct flyt_state *st)
{
    size_t pos = sizeof(struct flyt_state_header);
    struct flyt_state_section sec;
    for (const unsigned char *body; (body = next_section(st, &pos, &sec)) != NULL;) {
        union state_rec rec;
        rec_load(&rec, sec.type, body, sec.length);
        if (sec.type != FLYT_SS_HOSTMAP || !rec.hostmap.mapped)
            continue;
        struct flyt_state_hostmap *more = realloc(reserved, (nreserved + 1) * sizeof *more);
        if (more == NULL)
            return;
        reserved = more;
        if (flyt_region_reserve(rec.hostmap.addr, rec.hostmap.size) == 0)
            reserved[nreserved++] = rec.hostmap;
        else
            flyt_warn("host memory region %llu: its address 0x%llx is taken in this server; "
                      "its client cannot share it again", (unsigned long long)rec.hostmap.id,
                      (unsigned long long)rec.hostmap.addr);
    }
}

/* Whether the region's address was reserved for it (the reservation then passes to it). */
static int take_reserved(const struct flyt_state_hostmap *r)
{
    for (size_t i = 0; i < nreserved; i++)
        if (reserved[i].addr == r->addr && reserved[i].size == r->size) {
            reserved[i] = reserved[--nreserved];
            return 1;
        }
    return 0;
}

/* A region detached: its id, what it was; the client shares its memory
 * again (HOST_REMAP) as it resumes. */
static CUresult restore_hostmap(flyt_session *s, const struct flyt_state_hostmap *r,
                                uint64_t *last, char *err, size_t errlen)
{
    struct flyt_hentry *h = add_exact(s, r->id, FLYT_H_REGION, NULL, last);
    if (h == NULL) {
        say(err, errlen, "host memory region %llu cannot be made again",
            (unsigned long long)r->id);
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->u.region = (struct flyt_region_info){.size = r->size, .addr = r->addr, .mapped = r->mapped,
                                            .read_only = (r->flags & FLYT_STATE_HOSTMAP_READ_ONLY) != 0};
    h->u.region.placeholder = r->mapped && (take_reserved(r) || flyt_region_reserve(r->addr, r->size) == 0);
    s->detached_mapped += r->mapped;
    return CUDA_SUCCESS;
}

/* The client's side of the session: its request stream resumes at consumed,
 * and host-function tickets continue past the acknowledgements it replays. */
static void restore_client(flyt_session *s, const struct flyt_state_client *r)
{
    memcpy(s->instance, r->instance, sizeof s->instance);
    s->resume_at = r->consumed;
    s->cb_posted = r->acks_ahead;
}

/* A physical allocation, under the client's handle id when it has one. */
static CUresult restore_vmem(flyt_session *s, const struct flyt_state_vmem *r,
                             const unsigned char *tail, uint64_t *last, char *err, size_t errlen)
{
    flyt_bhandle mem = NULL;
    CUresult e = flyt_vmm_restore_mem(s, r, tail, restore_device_bytes, &mem, err, errlen);
    if (e != CUDA_SUCCESS || r->id == 0)
        return e;
    struct flyt_hentry *h = add_exact(s, r->id, FLYT_H_VMEM, mem, last);
    if (h == NULL) {
        say(err, errlen, "physical allocation %llu cannot be named again",
            (unsigned long long)r->id);
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->u.vmem = (struct flyt_vmem_info){.size = r->size, .refs = r->refs};
    return CUDA_SUCCESS;
}

/* A pool under its id: the default one looked up, a created one made again
 * with its maximum size; then the attributes that differ from a fresh one's. */
static CUresult restore_pool(flyt_session *s, const struct flyt_state_mempool *r, uint64_t *last,
                             char *err, size_t errlen)
{
    flyt_bhandle bh = NULL;
    CUresult e = r->is_default ? FLYT_BCALL(s, pool_default, &bh)
                               : FLYT_BCALL(s, pool_create, r->max_size, 0, &bh);
    struct flyt_hentry *h = e == CUDA_SUCCESS ? add_exact(s, r->id, FLYT_H_POOL, bh, last) : NULL;
    if (h == NULL) {
        if (bh && !r->is_default)
            FLYT_BCALL(s, pool_destroy, bh);
        say(err, errlen, "memory pool %llu cannot be made again: CUDA error %d",
            (unsigned long long)r->id, (int)(e ? e : CUDA_ERROR_INVALID_VALUE));
        return e ? e : CUDA_ERROR_INVALID_VALUE;
    }
    if (r->is_default)
        s->default_pool_id = r->id;
    else
        h->u.pool.max_size = r->max_size;
    for (int i = 0; i < FLYT_STATE_POOL_ATTRS; i++) {
        uint64_t now;
        if ((r->attr_valid & (1u << i)) &&
            FLYT_BCALL(s, pool_get_attr, bh, i + 1, &now) == CUDA_SUCCESS && now != r->attrs[i] &&
            (e = FLYT_BCALL(s, pool_set_attr, bh, i + 1, r->attrs[i])) != CUDA_SUCCESS) {
            say(err, errlen, "memory pool %llu: attribute %d cannot be set to %llu again: CUDA "
                "error %d", (unsigned long long)r->id, i + 1, (unsigned long long)r->attrs[i], (int)e);
            return e;
        }
    }
    return CUDA_SUCCESS;
}

/* A stream-ordered allocation at its address, as the backend's own memory (its
 * pool chose the address; no pool can be asked for one): charged to the quota. */
static CUresult restore_async(flyt_session *s, const struct flyt_state_async *r,
                              const unsigned char *tail, char *err, size_t errlen)
{
    flyt_bhandle pool = NULL;
    if (!s->b->ops->async_alloc_at) {
        say(err, errlen, "the %s backend cannot restore stream-ordered allocations", s->b->ops->name);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (r->pool && flyt_lookup(s, r->pool, FLYT_H_POOL, &pool) != CUDA_SUCCESS) {
        say(err, errlen, "stream-ordered allocation 0x%llx names pool %llu, which the state lacks",
            (unsigned long long)r->addr, (unsigned long long)r->pool);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (flyt_quota_charge(&s->mem, r->size) != 0) {
        say(err, errlen, "stream-ordered allocation 0x%llx of %llu bytes is past this server's "
            "memory quota", (unsigned long long)r->addr, (unsigned long long)r->size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult e = s->b->ops->async_alloc_at(s->b, r->addr, r->size, pool);
    if (e == CUDA_SUCCESS && flyt_memtab_add(&s->mem, r->addr, r->size) != 0)
        e = CUDA_ERROR_OUT_OF_MEMORY; /* the backend's memory goes with the failed restore */
    if (e != CUDA_SUCCESS) {
        flyt_quota_uncharge(&s->mem, r->size);
        say(err, errlen, "cannot put the stream-ordered allocation of %llu bytes back at 0x%llx "
            "here: CUDA error %d", (unsigned long long)r->size, (unsigned long long)r->addr, (int)e);
        return e;
    }
    return restore_device_bytes(s, r->addr, r->size, tail, err, errlen);
}

/* Every stream-ordered allocation's range, kept free for it by the backend
 * before the restore goes further: before anything could make the receiving
 * process's own pools lay out over them. */
static CUresult reserve_async(flyt_session *s, const struct flyt_state *st, char *err, size_t errlen)
{
    uint64_t (*ranges)[2] = NULL;
    size_t n = 0, cap = 0, pos = sizeof(struct flyt_state_header);
    struct flyt_state_section sec;
    CUresult e = CUDA_SUCCESS;
    for (const unsigned char *body; e == CUDA_SUCCESS && (body = next_section(st, &pos, &sec)) != NULL;) {
        if (sec.type != FLYT_SS_ASYNC)
            continue;
        if (n == cap) {
            void *more = realloc(ranges, (cap = cap ? 2 * cap : 16) * sizeof *ranges);
            if (more == NULL) {
                e = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            ranges = more;
        }
        struct flyt_state_async rec;
        memcpy(&rec, body, sizeof rec);
        ranges[n][0] = rec.addr;
        ranges[n++][1] = rec.size;
    }
    if (e == CUDA_SUCCESS && n > 0 && s->b->ops->async_spans)
        e = s->b->ops->async_spans(s->b, (const uint64_t (*)[2])ranges, n);
    free(ranges);
    if (e != CUDA_SUCCESS)
        say(err, errlen, "cannot keep the addresses of the %zu stream-ordered allocations free "
            "here: CUDA error %d", n, (int)e);
    return e;
}

static CUresult restore_section(flyt_session *s, uint32_t type, const unsigned char *p,
                                uint64_t len, uint64_t *last, char *err, size_t errlen)
{
    union state_rec rec;
    if (flyt_state_array_section(type))
        return flyt_state_array_restore(s, type, p, len, last, err, errlen);
    if (flyt_state_graph_section(type))
        return flyt_state_graph_restore(s, type, p, len, err, errlen);
    rec_load(&rec, type, p, len);
    const unsigned char *tail = p + rec_size(type);
    switch (type) {
    case FLYT_SS_CLIENT: restore_client(s, &rec.client); return CUDA_SUCCESS;
    case FLYT_SS_SESSION: return restore_context(s, &rec.session, tail, err, errlen);
    case FLYT_SS_ALLOC: return restore_alloc(s, &rec.alloc, tail, err, errlen);
    case FLYT_SS_ARENA: return restore_arena(s, &rec.arena, err, errlen);
    case FLYT_SS_MODULE: return restore_module(s, &rec.module, tail, last, err, errlen);
    case FLYT_SS_FUNC: return restore_func(s, &rec.func, tail, last, err, errlen);
    case FLYT_SS_HOSTMAP: return restore_hostmap(s, &rec.hostmap, last, err, errlen);
    case FLYT_SS_GLOBAL: return restore_global(s, &rec.global, tail, err, errlen);
    case FLYT_SS_VRANGE: return flyt_vmm_restore_range(s, &rec.vrange, err, errlen);
    case FLYT_SS_VMEM: return restore_vmem(s, &rec.vmem, tail, last, err, errlen);
    case FLYT_SS_MEMPOOL: return restore_pool(s, &rec.mempool, last, err, errlen);
    case FLYT_SS_ASYNC: return restore_async(s, &rec.async, tail, err, errlen);
    default: return restore_object(s, type, &rec, last, err, errlen);
    }
}

CUresult flyt_state_restore(flyt_session *s, const struct flyt_state *st, char *err, size_t errlen)
{
    const struct flyt_state_header *h = (const void *)st->data;
    if (strcmp(h->backend, s->b->ops->name) != 0 || !s->b->ops->mem_alloc_at) {
        say(err, errlen, "a state of the %s backend cannot be restored on the %s backend%s",
            h->backend, s->b->ops->name, s->b->ops->mem_alloc_at ? "" : " (it cannot restore yet)");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    uint64_t t0 = flyt_mono_ns(), last = 0, allocs = 0, regions = 0;
    size_t pos = sizeof *h;
    CUresult e = CUDA_SUCCESS;
    struct flyt_state_section sec;
    int async_kept = 0; /* once the context and the arenas exist, before the rest */
    for (const unsigned char *body; (body = next_section(st, &pos, &sec)) != NULL;) {
        if (!async_kept && sec.type != FLYT_SS_SESSION && sec.type != FLYT_SS_CLIENT &&
            sec.type != FLYT_SS_ARENA) {
            if ((e = reserve_async(s, st, err, errlen)) != CUDA_SUCCESS)
                return e;
            async_kept = 1;
        }
        e = restore_section(s, sec.type, body, sec.length, &last, err, errlen);
        if (e != CUDA_SUCCESS)
            return e;
        allocs += sec.type == FLYT_SS_ALLOC || sec.type == FLYT_SS_ASYNC;
        regions += sec.type == FLYT_SS_HOSTMAP;
    }
    if (st->sess.next_id <= last) {
        say(err, errlen, "the state's id counter %llu is behind its ids",
            (unsigned long long)st->sess.next_id);
        return CUDA_ERROR_INVALID_VALUE;
    }
    s->handles.next_id = st->sess.next_id;
    uint64_t t_sync = flyt_mono_ns();
    e = FLYT_BCALL0(s, device_sync); /* the contents are in place before the first request */
    uint64_t now = flyt_mono_ns();
    flyt_info("state phases (restore): %zu bytes, host-to-device copies %.3f ms, device sync "
              "%.3f ms, total %.3f ms", st->size, restore_h2d_ns * 1e-6, (now - t_sync) * 1e-6,
              (now - t0) * 1e-6);
    if (e != CUDA_SUCCESS) {
        say(err, errlen, "writing the allocations' contents failed: CUDA error %d", (int)e);
        return e;
    }
    flyt_precopy_settle(s->b, now - t0);
    flyt_info("session for %s restored: %llu allocation(s), %zu object id(s), %zu bytes of state, "
              "in %.3f ms", s->peer, (unsigned long long)allocs, flyt_hash_count(&s->handles.map), st->size,
              (double)(flyt_mono_ns() - t0) / 1e6);
    if (regions)
        flyt_info("%llu host memory region(s) shared with the client wait for it to share them "
                  "again (HOST_REMAP)", (unsigned long long)regions);
    return CUDA_SUCCESS;
}

/* ---- the status page's checkpoint request ---- */

static uint64_t ckpt_seen; /* the last request looked at (one session per process) */

static void answer(struct flyt_server_status *p, uint64_t gen, CUresult r, uint64_t bytes,
                   uint64_t ns, const char *err)
{
    char line[sizeof p->ckpt_error];
    snprintf(line, sizeof line, "%s", r == CUDA_SUCCESS ? "" : err);
    memcpy(p->ckpt_error, line, sizeof line);
    STORE(&p->ckpt_result, (int32_t)r);
    STORE(&p->ckpt_bytes, bytes);
    STORE(&p->ckpt_ns, ns);
    STORE(&p->ckpt_done_gen, gen); /* last: the node manager waits for it */
}

/* The request's file, and its receiving server when it names one: a stream that
 * fails fails the checkpoint, so the session carries on here. */
static CUresult capture_to(flyt_session *s, struct flyt_server_status *p, const char *path,
                           int precopied, uint64_t *bytes, char *err, size_t errlen)
{
    char dest[sizeof p->ckpt_dest], secret[sizeof p->ckpt_secret], why[240] = "";
    memcpy(dest, p->ckpt_dest, sizeof dest);
    memcpy(secret, p->ckpt_secret, sizeof secret);
    dest[sizeof dest - 1] = secret[sizeof secret - 1] = '\0';
    int sock = !dest[0]   ? -1
               : precopied ? flyt_precopy_collect(why, sizeof why) /* connected ahead */
                           : flyt_stream_connect(dest, secret, why, sizeof why);
    OPENSSL_cleanse(secret, sizeof secret);
    if (dest[0] && sock < 0) {
        say(err, errlen, "streaming the state to %s: %s", dest, why);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    CUresult r = flyt_state_capture_file(s, path, sock, bytes, err, errlen);
    flyt_precopy_forget();
    if (sock >= 0 && r != CUDA_SUCCESS && strncmp(err, "streaming", 9) != 0) {
        close(sock); /* cut short: the receiver refuses what it got */
        return r;
    }
    /* done, or the receiver stopped taking it: its verdict says why */
    if (sock >= 0 && flyt_stream_finish(sock, why, sizeof why) != 0) {
        say(err, errlen, "streaming the state to %s: %s", dest, why);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    return r;
}

/* A request that streams: its kernel images go to the receiver first, from a thread,
 * while the session serves on (state_precopy.h). 1 when that started. */
static int precopy_begin(flyt_session *s, struct flyt_server_status *p)
{
    char dest[sizeof p->ckpt_dest], secret[sizeof p->ckpt_secret];
    memcpy(dest, p->ckpt_dest, sizeof dest);
    memcpy(secret, p->ckpt_secret, sizeof secret);
    dest[sizeof dest - 1] = secret[sizeof secret - 1] = '\0';
    struct scan sc = {.s = s};
    char why[256];
    /* a session the capture refuses is refused at once, without images sent for nothing */
    int started = dest[0] && s->b && check_capturable(s, &sc, why, sizeof why) == CUDA_SUCCESS &&
                  flyt_precopy_start(s, dest, secret);
    free(sc.list);
    flyt_vmm_snap_free(&sc.vmm);
    OPENSSL_cleanse(secret, sizeof secret);
    return started;
}

static uint64_t precopy_gen; /* the request whose pre-copy runs (0: none) */
static uint64_t precopy_t0;  /* when it started */
#define CAPTURE_WAIT_MS 10000 /* FLYT_CKPT_CAPTURE_WAIT_MS: how long a request waits for one */

/* How long a request waits for an open stream capture to end (a capture lasts as long
 * as the program takes to record its work; PyTorch and Inductor's CUDA graphs record
 * at warm-up); then the capture refuses it. */
static long capture_wait_ms(void)
{
    const char *env = getenv("FLYT_CKPT_CAPTURE_WAIT_MS");
    char *end;
    long ms = env ? strtol(env, &end, 10) : -1;
    return env && *end == '\0' && ms >= 0 ? ms : CAPTURE_WAIT_MS;
}

int flyt_state_poll(flyt_session *s)
{
    struct flyt_server_status *p = flyt_status_page();
    if (!p || (!precopy_gen && !s->ckpt_hold.gen && LOAD(&p->ckpt_gen) == ckpt_seen))
        return FLYT_CONT; /* the common case: one load */
    uint64_t gen = precopy_gen;
    int precopied = gen != 0; /* its images went ahead: the capture's turn */
    if (precopied && !flyt_precopy_ready())
        return FLYT_CONT;
    precopy_gen = 0;
    if (!precopied) {
        uint64_t latest = LOAD(&p->ckpt_gen);
        if (latest != ckpt_seen) { /* a new request (one held before is given up) */
            ckpt_seen = latest;
            s->ckpt_hold.gen = 0;
            if (LOAD(&p->ckpt_pid) != (int32_t)getpid())
                return FLYT_CONT;
        }
        gen = ckpt_seen;
        if (flyt_capture_holds(s, &s->ckpt_hold, gen, capture_wait_ms(), "checkpoint"))
            return FLYT_CONT;
        precopy_t0 = flyt_mono_ns();
        if (precopy_begin(s, p)) {
            precopy_gen = gen;
            return FLYT_CONT;
        }
    }
    uint64_t ahead_ms = precopied ? (flyt_mono_ns() - precopy_t0) / 1000000 : 0;
    STORE(&p->ckpt_precopy_ms, (uint32_t)ahead_ms); /* read with the answer below */
    char path[sizeof p->ckpt_path], err[256] = "";
    memcpy(path, p->ckpt_path, sizeof path);
    path[sizeof path - 1] = '\0';
    uint32_t flags = LOAD(&p->ckpt_flags);
    uint64_t t0 = flyt_mono_ns(), bytes = 0;
    CUresult r = capture_to(s, p, path, precopied, &bytes, err, sizeof err);
    uint64_t ns = flyt_mono_ns() - t0;
    if (r == CUDA_SUCCESS)
        flyt_info("session for %s checkpointed to %s%s%s: %llu bytes in %.3f ms%s", s->peer, path,
                  p->ckpt_dest[0] ? " and streamed to " : "", p->ckpt_dest,
                  (unsigned long long)bytes, (double)ns / 1e6,
                  (flags & FLYT_CKPT_STOP) ? "; ending the session" : "");
    else
        flyt_error("session for %s: checkpoint to %s refused: %s; the session carries on", s->peer,
                   path, err);
    if (r == CUDA_SUCCESS && (flags & FLYT_CKPT_STOP)) /* told before the answer stops us */
        flyt_session_tell_moved(s, (flags & FLYT_CKPT_SUSPEND) ? FLYT_MOVED_SUSPENDED
                                                               : FLYT_MOVED_CHECKPOINT);
    answer(p, gen, r, bytes, ns, err);
    if (r != CUDA_SUCCESS || !(flags & FLYT_CKPT_STOP))
        return FLYT_CONT;
    return FLYT_END_BYE;
}

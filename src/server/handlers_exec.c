/*
 * Modules, functions, globals, launches and occupancy. Fatbinaries are known
 * by their SHA-256: shipped once per session (or never, if the cache dir
 * has them); a shipped one is kept only when it matches its claimed hash.
 */
#include <stdlib.h>
#include <string.h>

#include "flyt_clock.h"
#include "flyt_log.h"
#include "module_cache.h"
#include "session.h"
#include "state.h"
#include "state_graph.h"

/* ---- modules ---- */

struct find_hash {
    const uint8_t      *sha;
    struct flyt_hentry *found;
};

static int match_hash(struct flyt_hentry *e, void *arg)
{
    struct find_hash *f = arg;
    if (e->type != FLYT_H_MODULE || memcmp(e->u.module.sha256, f->sha, 32) != 0)
        return 0;
    f->found = e;
    return 1;
}

/* A module this session already loaded from the same image is shared: the
 * same id comes back and MODULE_UNLOAD counts the loads down. */
static int reuse_loaded(flyt_session *s, const uint8_t sha[32], flyt_rep_module_load *rep)
{
    struct find_hash f = {sha, NULL};
    if (!flyt_handles_foreach(&s->handles, match_hash, &f))
        return 0;
    f.found->u.module.refs++;
    rep->module = f.found->id;
    return 1;
}

/* The driver's load, within the session's bound on kept image bytes. image is
 * malloc'd: on success the backend keeps it (module_load's owned). */
static CUresult driver_load(flyt_session *s, void *image, uint64_t size, flyt_bhandle *mod)
{
    /* the server keeps each loaded image (a checkpoint writes it): memory outside the
     * device quota, so bounded per session */
    uint64_t max = s->cfg->max_image_bytes;
    if (max && (size > max || s->image_bytes_live > max - size)) {
        flyt_warn("MODULE_LOAD from %s: %llu bytes of images would be loaded, over the "
                  "session's limit of %llu (--max-image-bytes)", s->peer,
                  (unsigned long long)(s->image_bytes_live + size), (unsigned long long)max);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t t0 = flyt_mono_ns();
    CUresult e = FLYT_BCALL(s, module_load, image, (size_t)size, image, mod);
    s->image_load_ns += flyt_mono_ns() - t0;
    return e;
}

/* A loaded module becomes the session's, known by its image's hash. */
static CUresult keep_loaded(flyt_session *s, flyt_bhandle mod, uint64_t size, const uint8_t sha[32],
                            flyt_rep_module_load *rep)
{
    struct flyt_hentry *h = flyt_handles_add(&s->handles, FLYT_H_MODULE, mod);
    if (h == NULL) {
        FLYT_BCALL(s, module_unload, mod);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(h->u.module.sha256, sha, 32);
    h->u.module.refs = 1;
    h->u.module.image_size = size;
    s->image_bytes_live += size;
    rep->module = h->id;
    return CUDA_SUCCESS;
}

/* The driver loads image while another thread hashes it into sha: a cuBLAS
 * start's ~100 MB would otherwise add ~100 ms of hashing to the loads. On
 * success the module (*mod) holds image; else *mod is NULL. */
static CUresult load_hashing(flyt_session *s, void *image, uint64_t size, uint8_t sha[32],
                             flyt_bhandle *mod)
{
    struct flyt_sha256_job job;
    uint64_t t0 = flyt_mono_ns();
    flyt_sha256_begin(&job, image, size);
    s->image_verify_ns += flyt_mono_ns() - t0; /* what hashing adds to the critical path */
    CUresult loaded = driver_load(s, image, size, mod);
    if (loaded != CUDA_SUCCESS)
        *mod = NULL;
    t0 = flyt_mono_ns();
    flyt_sha256_end(&job, sha);
    s->image_verify_ns += flyt_mono_ns() - t0;
    return loaded;
}

static int refused_image(CUresult r)
{
    return r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_NO_BINARY_FOR_GPU ||
           r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
}

/* has_data = 0: load from what the session or the cache dir holds, or ask
 * the client for the image. A cache file is checked against its name while
 * the driver loads it; one that does not match is undone and dropped. */
static void load_known(flyt_session *s, flyt_call *c, const flyt_req_module_load *r,
                       flyt_rep_module_load *rep)
{
    if (reuse_loaded(s, r->sha256, rep))
        return;
    const char *dir = s->cfg->cache_dir;
    uint64_t t0 = flyt_mono_ns();
    void *image = flyt_cache_read(dir, r->sha256, r->size);
    s->image_verify_ns += flyt_mono_ns() - t0;
    if (image == NULL) {
        rep->need_data = 1;
        return;
    }
    uint8_t sha[32];
    flyt_bhandle mod;
    CUresult loaded = load_hashing(s, image, r->size, sha, &mod);
    if (mod == NULL)
        free(image); /* else the module's */
    if (flyt_cache_check(dir, r->sha256, sha) != 0) {
        if (mod != NULL)
            FLYT_BCALL(s, module_unload, mod);
        flyt_cache_drop(dir, r->sha256);
        rep->need_data = 1;
        return;
    }
    s->images_from_cache++;
    c->result = mod != NULL ? keep_loaded(s, mod, r->size, r->sha256, rep) : loaded;
    if (refused_image(c->result))
        flyt_cache_drop(dir, r->sha256);
}

/* A sent image's hash against the request's (has_data = 1; has_data = 2 names
 * none: the server's own is the image's). 0 when they agree. */
static int claim_differs(flyt_session *s, const flyt_req_module_load *r, const uint8_t sha[32])
{
    if (r->has_data != 1 || memcmp(sha, r->sha256, 32) == 0)
        return 0;
    char want[65], got[65];
    flyt_sha256_format(r->sha256, want);
    flyt_sha256_format(sha, got);
    flyt_error("MODULE_LOAD from %s: image of %llu bytes hashes to %s, request says %s; refused",
               s->peer, (unsigned long long)r->size, got, want);
    return 1;
}

/* has_data = 1 or 2: the image follows. The driver loads it while another
 * thread hashes it; only an image that matches its claim, and that the driver
 * took, is kept and goes to the cache dir (junk must not fill the disk). */
static int load_sent(flyt_session *s, flyt_call *c, const flyt_req_module_load *r,
                     flyt_rep_module_load *rep)
{
    if (r->size == 0) {
        c->result = CUDA_ERROR_INVALID_IMAGE;
        return FLYT_CONT;
    }
    void *image = malloc(r->size);
    if (image == NULL) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return flyt_skip_data(s, c) == 0 ? FLYT_CONT : FLYT_END_IO;
    }
    if (flyt_recv_data(s, c, image, r->size) != 0) {
        free(image);
        return FLYT_END_IO;
    }
    s->images_received++;
    s->image_bytes_received += r->size;
    uint8_t sha[32];
    flyt_bhandle mod;
    CUresult loaded = load_hashing(s, image, r->size, sha, &mod);
    int taken = mod != NULL; /* image is mod's until mod is unloaded */
    if (claim_differs(s, r, sha)) {
        c->result = CUDA_ERROR_INVALID_VALUE;
    } else if (loaded != CUDA_SUCCESS) {
        c->result = loaded;
    } else if (reuse_loaded(s, sha, rep)) { /* a race of two threads, or has_data = 2 */
        c->result = CUDA_SUCCESS;
    } else {
        c->result = keep_loaded(s, mod, r->size, sha, rep); /* failing, it unloaded mod */
        mod = NULL;
        uint64_t t0 = flyt_mono_ns();
        if (c->result == CUDA_SUCCESS)
            flyt_cache_store(s->cfg->cache_dir, sha, image, r->size, s->cfg->cache_max_bytes);
        s->image_store_ns += flyt_mono_ns() - t0;
    }
    if (mod != NULL)
        FLYT_BCALL(s, module_unload, mod);
    if (!taken)
        free(image);
    return FLYT_CONT;
}

int handle_MODULE_LOAD(flyt_session *s, flyt_call *c)
{
    const flyt_req_module_load *r = c->req;
    if (r->has_data > 2)
        return flyt_violation(s, c, "has_data is %u", r->has_data);
    if (r->size > FLYT_MAX_FATBIN)
        return flyt_violation(s, c, "fatbinary of %llu bytes is over the %u-byte limit",
                              (unsigned long long)r->size, FLYT_MAX_FATBIN);
    int rc = flyt_expect_data(s, c, r->has_data ? r->size : 0);
    if (rc != FLYT_CONT)
        return rc;
    if (r->has_data)
        return load_sent(s, c, r, c->rep);
    load_known(s, c, r, c->rep);
    return FLYT_CONT;
}

static int func_of_module(const struct flyt_hentry *e, void *arg)
{
    return e->type == FLYT_H_FUNC && e->u.func.module == *(const uint64_t *)arg;
}

int handle_MODULE_UNLOAD(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    struct flyt_hentry *e = flyt_handles_get(&s->handles, r->handle, FLYT_H_MODULE);
    if (e == NULL) {
        c->result = CUDA_ERROR_INVALID_HANDLE;
        return FLYT_CONT;
    }
    if (e->u.module.refs > 1) {
        e->u.module.refs--;
        return FLYT_CONT;
    }
    c->result = FLYT_BCALL(s, module_unload, e->bh);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    s->image_bytes_live -= e->u.module.image_size;
    /* its functions die with it: their ids must not reach the backend again */
    uint64_t id = r->handle;
    flyt_handles_remove_if(&s->handles, func_of_module, &id);
    flyt_handles_remove(&s->handles, id);
    flyt_state_globals_drop(s, id);
    return FLYT_CONT;
}

/* ---- functions and globals ---- */

/* Reads FUNC_GET's / GLOBAL_GET's trailing name. FLYT_CONT with c->result
 * set when the name itself is malformed (it was still read in full). */
static int read_name(flyt_session *s, flyt_call *c, char name[FLYT_MAX_NAME])
{
    const flyt_req_named *r = c->req;
    if (r->name_len == 0 || r->name_len > FLYT_MAX_NAME)
        return flyt_violation(s, c, "name_len %u not in 1..%u", r->name_len, FLYT_MAX_NAME);
    int rc = flyt_expect_data(s, c, r->name_len);
    if (rc != FLYT_CONT)
        return rc;
    if (flyt_recv_data(s, c, name, r->name_len) != 0)
        return FLYT_END_IO;
    /* exactly one NUL, at the end */
    if (name[r->name_len - 1] != '\0' || memchr(name, '\0', r->name_len - 1) != NULL)
        c->result = CUDA_ERROR_INVALID_VALUE;
    return FLYT_CONT;
}

/* Asks the backend for each parameter until it says there are no more. */
static CUresult param_layout(flyt_session *s, flyt_bhandle func, struct flyt_func_info *fi)
{
    uint32_t cap = 0;
    for (uint32_t i = 0;; i++) {
        uint32_t off = 0, size = 0;
        CUresult e = FLYT_BCALL(s, func_param_info, func, i, &off, &size);
        if (e == CUDA_ERROR_INVALID_VALUE)
            return CUDA_SUCCESS;
        if (e != CUDA_SUCCESS)
            return e;
        uint32_t end;
        if (i >= FLYT_MAX_PARAMS || __builtin_add_overflow(off, size, &end) ||
            end > FLYT_MAX_PARAM_BYTES) {
            flyt_warn("kernel parameter %u (offset %u, size %u) is past Flyt's limits", i, off,
                      size);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        if (i == cap) {
            cap = cap ? cap * 2 : 8;
            flyt_param *p = realloc(fi->params, cap * sizeof *p);
            if (p == NULL)
                return CUDA_ERROR_OUT_OF_MEMORY;
            fi->params = p;
        }
        fi->params[i] = (flyt_param){off, size};
        fi->param_count = i + 1;
        if (end > fi->param_bytes)
            fi->param_bytes = end;
    }
}

/* Appends the name to the params block, which the entry owns. */
static CUresult keep_name(struct flyt_func_info *fi, const char *name)
{
    size_t head = fi->param_count * sizeof(flyt_param), len = strlen(name) + 1;
    char *block = realloc(fi->params, head + len);
    if (block == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(block + head, name, len);
    fi->params = (flyt_param *)(void *)block;
    fi->name = block + head;
    return CUDA_SUCCESS;
}

int handle_FUNC_GET(flyt_session *s, flyt_call *c)
{
    const flyt_req_named *r = c->req;
    flyt_rep_func *rep = c->rep;
    char name[FLYT_MAX_NAME];
    int rc = read_name(s, c, name);
    if (rc != FLYT_CONT || c->result != CUDA_SUCCESS)
        return rc;
    flyt_bhandle mod, func = NULL;
    c->result = flyt_lookup(s, r->module, FLYT_H_MODULE, &mod);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, func_get, mod, name, &func);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    struct flyt_func_info fi = {.module = r->module};
    c->result = param_layout(s, func, &fi);
    if (c->result == CUDA_SUCCESS)
        c->result = keep_name(&fi, name);
    struct flyt_hentry *e = NULL;
    if (c->result == CUDA_SUCCESS) {
        e = flyt_handles_add(&s->handles, FLYT_H_FUNC, func);
        if (e == NULL)
            c->result = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (e == NULL) {
        free(fi.params);
        return FLYT_CONT;
    }
    e->u.func = fi; /* the entry owns the layout now */
    for (int attr = 0; attr < CU_FUNC_ATTRIBUTE_MAX && attr < (int)FLYT_FUNC_ATTRS; attr++) {
        int v = 0;
        if (FLYT_BCALL(s, func_get_attr, func, attr, &v) == CUDA_SUCCESS)
            rep->attrs[attr] = v;
    }
    rep->func = e->id;
    rep->param_count = fi.param_count;
    rep->param_bytes = fi.param_bytes;
    if (flyt_reply(s, c, CUDA_SUCCESS, fi.params, fi.param_count * sizeof(flyt_param)) != 0)
        return FLYT_END_IO;
    return FLYT_CONT;
}

/* Reads LINK's inputs into one buffer, checking each header against the
 * request's totals; FLYT_CONT with c->result set when they do not add up. */
static int read_link_inputs(flyt_session *s, flyt_call *c, char *buf, uint32_t count,
                            uint32_t *types, const void **images, size_t *sizes,
                            const char **names)
{
    const flyt_req_link *r = c->req;
    if (flyt_recv_data(s, c, buf, r->total_bytes) != 0)
        return FLYT_END_IO;
    uint64_t at = 0;
    for (uint32_t i = 0; i < count; i++) {
        flyt_link_input in;
        if (r->total_bytes - at < sizeof in)
            break;
        memcpy(&in, buf + at, sizeof in);
        at += sizeof in;
        if (in.name_len == 0 || in.name_len > FLYT_MAX_NAME || in.size > r->total_bytes - at ||
            in.name_len > r->total_bytes - at - in.size || buf[at + in.name_len - 1] != '\0')
            break;
        types[i] = in.type;
        names[i] = buf + at;
        images[i] = buf + at + in.name_len;
        sizes[i] = (size_t)in.size;
        at += in.name_len + in.size;
        if (i + 1 == count && at == r->total_bytes)
            return FLYT_CONT;
    }
    c->result = CUDA_ERROR_INVALID_VALUE;
    return FLYT_CONT;
}

/* LINK's reply: the cubin (none on failure), then both logs with their NULs. */
static int reply_link(flyt_session *s, flyt_call *c, const void *cubin, size_t cubin_size,
                      char *const logs[2])
{
    flyt_rep_u64 *rep = c->rep;
    if (c->result != CUDA_SUCCESS)
        cubin_size = 0;
    rep->value = cubin_size;
    size_t lens[2];
    for (int i = 0; i < 2; i++) {
        logs[i][FLYT_LINK_LOG - 1] = '\0';
        lens[i] = strlen(logs[i]) + 1;
    }
    int io = flyt_reply_begin(s, c, c->result, cubin_size + lens[0] + lens[1]);
    if (io == 0 && cubin_size)
        io = flyt_reply_data(s, cubin, cubin_size);
    for (int i = 0; i < 2 && io == 0; i++)
        io = flyt_reply_data(s, logs[i], lens[i]);
    flyt_reply_end(s);
    return io == 0 ? FLYT_CONT : FLYT_END_IO;
}

int handle_LINK(flyt_session *s, flyt_call *c)
{
    const flyt_req_link *r = c->req;
    if (r->input_count == 0 || r->input_count > FLYT_MAX_LINK_INPUTS ||
        r->total_bytes > FLYT_MAX_FATBIN)
        return flyt_violation(s, c, "link of %u inputs, %llu bytes", r->input_count,
                              (unsigned long long)r->total_bytes);
    int rc = flyt_expect_data(s, c, r->total_bytes);
    if (rc != FLYT_CONT)
        return rc;
    char *buf = malloc(r->total_bytes ? r->total_bytes : 1);
    uint32_t types[FLYT_MAX_LINK_INPUTS];
    const void *images[FLYT_MAX_LINK_INPUTS];
    size_t sizes[FLYT_MAX_LINK_INPUTS];
    const char *names[FLYT_MAX_LINK_INPUTS];
    if (buf == NULL)
        return flyt_violation(s, c, "no memory for a link of %llu bytes",
                              (unsigned long long)r->total_bytes);
    rc = read_link_inputs(s, c, buf, r->input_count, types, images, sizes, names);
    void *cubin = NULL;
    size_t cubin_size = 0;
    static _Thread_local char info[FLYT_LINK_LOG], error[FLYT_LINK_LOG];
    char *const logs[2] = {info, error};
    info[0] = error[0] = '\0';
    if (rc == FLYT_CONT && c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, link, r->input_count, types, images, sizes, names, r->flags, logs,
                               &cubin, &cubin_size);
    free(buf);
    if (rc == FLYT_CONT)
        rc = reply_link(s, c, cubin, cubin_size, logs);
    free(cubin);
    return rc;
}

/* The driver checks the description itself; the server checks only what
 * would make it read past the request. */
int handle_TENSOR_MAP(flyt_session *s, flyt_call *c)
{
    const flyt_req_tensor_map *r = c->req;
    if (r->kind > FLYT_TMAP_REPLACE || r->rank > FLYT_TMAP_RANK ||
        (r->kind != FLYT_TMAP_REPLACE && r->rank == 0))
        return flyt_violation(s, c, "tensor map of kind %u, rank %u", r->kind, r->rank);
    flyt_rep_tensor_map *rep = c->rep;
    c->result = FLYT_BCALL(s, tensor_map, r, rep->map);
    return FLYT_CONT;
}

/* The names of a module's functions: the tools table's function iterator
 * (cuFFT walks each module it loads) and cuModuleEnumerateFunctions. */
int handle_MODULE_FUNCS(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    flyt_bhandle mod;
    c->result = flyt_lookup(s, r->handle, FLYT_H_MODULE, &mod);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    char *names = malloc(FLYT_MAX_MODULE_FUNCS_BYTES);
    if (names == NULL) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return FLYT_CONT;
    }
    size_t len = 0;
    uint32_t count = 0;
    c->result = FLYT_BCALL(s, module_func_names, mod, names, FLYT_MAX_MODULE_FUNCS_BYTES, &len,
                           &count);
    rep->value = count;
    int rc = FLYT_CONT;
    if (c->result == CUDA_SUCCESS && flyt_reply(s, c, CUDA_SUCCESS, names, len) != 0)
        rc = FLYT_END_IO;
    free(names);
    return rc;
}

/* GLOBAL_GET and MANAGED_GET */
static int variable_get(flyt_session *s, flyt_call *c, int managed)
{
    const flyt_req_named *r = c->req;
    flyt_rep_u64_pair *rep = c->rep;
    char name[FLYT_MAX_NAME];
    int rc = read_name(s, c, name);
    if (rc != FLYT_CONT || c->result != CUDA_SUCCESS)
        return rc;
    flyt_bhandle mod;
    uint64_t dptr = 0, size = 0;
    c->result = flyt_lookup(s, r->module, FLYT_H_MODULE, &mod);
    if (c->result == CUDA_SUCCESS && managed)
        c->result = FLYT_BCALL(s, managed_get, mod, name, &dptr, &size);
    else if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, global_get, mod, name, &dptr, &size);
    /* a checkpoint writes its contents and a restore checks its address */
    if (c->result == CUDA_SUCCESS && flyt_state_global_seen(s, r->module, name, dptr, size) != 0)
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
    rep->a = dptr;
    rep->b = size;
    return FLYT_CONT;
}

int handle_GLOBAL_GET(flyt_session *s, flyt_call *c) { return variable_get(s, c, 0); }
int handle_MANAGED_GET(flyt_session *s, flyt_call *c) { return variable_get(s, c, 1); }

int handle_FUNC_GET_ATTR(flyt_session *s, flyt_call *c)
{
    const flyt_req_func_attr *r = c->req;
    flyt_rep_i32 *rep = c->rep;
    flyt_bhandle f;
    int v = 0;
    c->result = flyt_lookup(s, r->func, FLYT_H_FUNC, &f);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, func_get_attr, f, r->attr, &v);
    rep->value = v;
    return FLYT_CONT;
}

int handle_FUNC_SET_ATTR(flyt_session *s, flyt_call *c)
{
    const flyt_req_func_attr *r = c->req;
    flyt_bhandle f;
    c->result = flyt_lookup(s, r->func, FLYT_H_FUNC, &f);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, func_set_attr, f, r->attr, r->value);
    return FLYT_CONT;
}

int handle_FUNC_SET_CACHE(flyt_session *s, flyt_call *c)
{
    const flyt_req_func_attr *r = c->req;
    flyt_bhandle f;
    c->result = flyt_lookup(s, r->func, FLYT_H_FUNC, &f);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, func_set_cache, f, r->value);
    return FLYT_CONT;
}

/* ---- launch ---- */

/* Launch attributes reach the driver, so only known ones pass, and those
 * that name an event carry a session event id, swapped for the backend's
 * event here (never a raw client value). */
static CUresult translate_attrs(flyt_session *s, flyt_launch_attr *attrs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        switch (attrs[i].id) {
        case CU_LAUNCH_ATTRIBUTE_IGNORE:
        case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
            break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
        case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT: {
            uint64_t id;
            flyt_bhandle ev;
            memcpy(&id, attrs[i].value, sizeof id); /* the event comes first in both */
            CUresult e = flyt_lookup(s, id, FLYT_H_EVENT, &ev);
            if (e != CUDA_SUCCESS)
                return e;
            memcpy(attrs[i].value, &ev, sizeof ev);
            break;
        }
        case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
            return CUDA_ERROR_NOT_SUPPORTED; /* graphs only */
        default:
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return CUDA_SUCCESS;
}

int handle_LAUNCH(flyt_session *s, flyt_call *c)
{
    const flyt_req_launch *r = c->req;
    if (r->attr_count > FLYT_MAX_LAUNCH_ATTRS)
        return flyt_violation(s, c, "%u launch attributes, limit %u", r->attr_count,
                              FLYT_MAX_LAUNCH_ATTRS);
    if (r->param_bytes > FLYT_MAX_PARAM_BYTES)
        return flyt_violation(s, c, "%u parameter bytes, limit %u", r->param_bytes,
                              FLYT_MAX_PARAM_BYTES);
    int rc = flyt_expect_data(s, c, (uint64_t)r->attr_count * sizeof(flyt_launch_attr) +
                                        r->param_bytes);
    if (rc != FLYT_CONT)
        return rc;
    flyt_launch_attr attrs[FLYT_MAX_LAUNCH_ATTRS];
    uint64_t params[(FLYT_MAX_PARAM_BYTES + 7) / 8]; /* 8-byte aligned */
    if (flyt_recv_data(s, c, attrs, r->attr_count * sizeof(flyt_launch_attr)) != 0 ||
        flyt_recv_data(s, c, params, r->param_bytes) != 0)
        return FLYT_END_IO;

    struct flyt_hentry *f = flyt_handles_get(&s->handles, r->func, FLYT_H_FUNC);
    flyt_bhandle stream;
    c->result = f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    if (c->result == CUDA_SUCCESS && r->param_bytes != f->u.func.param_bytes)
        c->result = CUDA_ERROR_INVALID_VALUE; /* the kernel would read past the buffer */
    if (c->result == CUDA_SUCCESS)
        c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS)
        c->result = translate_attrs(s, attrs, r->attr_count);
    if (c->result == CUDA_SUCCESS)
        c->result = flyt_regions_check_params(s, params, r->param_bytes);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, launch, f->bh, r->grid, r->block, r->shared_mem, stream,
                               params, r->param_bytes, attrs, r->attr_count);
    if (c->result == CUDA_SUCCESS && r->attr_count && s->captures > 0)
        flyt_state_graph_attrs_seen(); /* maybe captured with them: a checkpoint cannot carry them */
    return FLYT_CONT;
}

/* ---- occupancy ---- */

int handle_OCCUPANCY_CLUSTER(flyt_session *s, flyt_call *c)
{
    const flyt_req_launch *r = c->req;
    if (r->attr_count > FLYT_MAX_LAUNCH_ATTRS || r->param_bytes != 0 || r->pad > FLYT_CLUSTER_MAX_SIZE)
        return flyt_violation(s, c, "cluster occupancy query: %u attributes, %u parameter bytes, "
                              "question %u", r->attr_count, r->param_bytes, r->pad);
    int rc = flyt_expect_data(s, c, (uint64_t)r->attr_count * sizeof(flyt_launch_attr));
    if (rc != FLYT_CONT)
        return rc;
    flyt_launch_attr attrs[FLYT_MAX_LAUNCH_ATTRS];
    if (flyt_recv_data(s, c, attrs, r->attr_count * sizeof(flyt_launch_attr)) != 0)
        return FLYT_END_IO;
    flyt_rep_i32 *rep = c->rep;
    flyt_bhandle f;
    int n = 0;
    c->result = flyt_lookup(s, r->func, FLYT_H_FUNC, &f);
    if (c->result == CUDA_SUCCESS)
        c->result = translate_attrs(s, attrs, r->attr_count);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, occupancy_cluster, f, r->pad, r->grid, r->block, r->shared_mem,
                               attrs, r->attr_count, &n);
    rep->value = n;
    return FLYT_CONT;
}

int handle_OCCUPANCY(flyt_session *s, flyt_call *c)
{
    const flyt_req_occupancy *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    flyt_bhandle f;
    int n = 0;
    c->result = flyt_lookup(s, r->func, FLYT_H_FUNC, &f);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, occupancy, f, r->block_size, r->dyn_smem, r->flags, &n);
    rep->value = n > 0 ? (uint64_t)n : 0;
    return FLYT_CONT;
}

int handle_OCCUPANCY_SMEM(flyt_session *s, flyt_call *c)
{
    const flyt_req_occupancy *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    flyt_bhandle f;
    uint64_t smem = 0;
    c->result = flyt_lookup(s, r->func, FLYT_H_FUNC, &f);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, occupancy_smem, f, r->num_blocks, r->block_size, &smem);
    rep->value = smem;
    return FLYT_CONT;
}

/*
 * HOST_MAP / HOST_UNMAP and the *_MAPPED copies: the client's pinned host
 * memory, shared with this process through a memfd passed over the Unix
 * socket, so bulk copies go between the GPU and the application's buffer by
 * DMA with no byte crossing the socket (the same-machine fast path).
 * HOST_MAP_AT maps it at the client's own address and device-mapped, so a
 * kernel dereferences the very pointer the application holds (mapped pinned
 * and managed memory, docs/host-memory.md).
 */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flyt_log.h"
#include "session.h"

/* A detached region: only our reservation of its address, if any. */
static void detached_drop(const struct flyt_region_info *g)
{
    if (g->placeholder)
        munmap((void *)(uintptr_t)g->addr, (size_t)g->size);
}

static void region_drop(flyt_session *s, struct flyt_hentry *e)
{
    if (e->u.region.base == NULL) {
        s->detached_mapped -= e->u.region.mapped;
        detached_drop(&e->u.region);
        return;
    }
    FLYT_BCALL(s, host_unregister, e->u.region.base);
    munmap(e->u.region.base, (size_t)e->u.region.size);
}

/* Only a memory file at least as large as claimed: never a device or a
 * short file, and sealed against shrinking: a client that cut the file
 * under our mapping would have this process die of SIGBUS on its next copy. */
static CUresult memfd_ok(int fd, uint64_t size)
{
    struct stat st;
    if (fd < 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < size)
        return CUDA_ERROR_INVALID_VALUE;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        flyt_debug("refusing a shared-memory file not sealed against shrinking");
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* Records a registered mapping as a region (addr: HOST_MAP_AT's, device-
 * mapped; 0: HOST_MAP); undoes both when it cannot. */
static CUresult region_add(flyt_session *s, void *base, uint64_t size, uint64_t addr,
                           unsigned flags, uint64_t *id)
{
    struct flyt_hentry *e = flyt_handles_add(&s->handles, FLYT_H_REGION, NULL);
    if (e == NULL) {
        s->b->ops->host_unregister(s->b, base);
        munmap(base, (size_t)size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->u.region.base = base;
    e->u.region.size = size;
    e->u.region.addr = addr;
    e->u.region.mapped = addr != 0;
    e->u.region.read_only = (flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0;
    *id = e->id;
    return CUDA_SUCCESS;
}

int handle_HOST_MAP(flyt_session *s, flyt_call *c)
{
    const flyt_req_host_map *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    int fd = flyt_take_passed_fd(s);
    c->result = memfd_ok(fd, r->size);
    if (c->result == CUDA_SUCCESS && !s->b->ops->host_register)
        c->result = CUDA_ERROR_NOT_SUPPORTED;
    if (c->result == CUDA_SUCCESS) {
        void *base = mmap(NULL, (size_t)r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) {
            c->result = CUDA_ERROR_OUT_OF_MEMORY;
        } else if ((c->result = s->b->ops->host_register(s->b, base, r->size)) != CUDA_SUCCESS) {
            munmap(base, (size_t)r->size);
        } else {
            c->result = region_add(s, base, r->size, 0, 0, &rep->value);
        }
    }
    if (fd >= 0)
        close(fd);
    return FLYT_CONT;
}

/* Maps fd at exactly addr, never over a mapping of ours: MAP_FAILED when the
 * address is taken (a kernel without MAP_FIXED_NOREPLACE may place it
 * elsewhere; that counts as taken too). */
static void *map_exactly(int fd, uint64_t addr, uint64_t size)
{
    void *want = (void *)(uintptr_t)addr;
    void *got = mmap(want, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE,
                     fd, 0);
    if (got != MAP_FAILED && got != want) {
        munmap(got, (size_t)size);
        return MAP_FAILED;
    }
    return got;
}

/* A user-space range of whole pages. */
static int user_pages(uint64_t addr, uint64_t size)
{
    return addr != 0 && !(addr & 4095) && !(size & 4095) && addr < (1ull << 47) &&
           size <= (1ull << 47) - addr;
}

int handle_HOST_MAP_AT(flyt_session *s, flyt_call *c)
{
    const flyt_req_host_map_at *r = c->req;
    flyt_rep_u64_pair *rep = c->rep;
    int fd = flyt_take_passed_fd(s);
    c->result = memfd_ok(fd, r->size);
    if (c->result == CUDA_SUCCESS && !user_pages(r->addr, r->size))
        c->result = CUDA_ERROR_INVALID_VALUE;
    if (c->result == CUDA_SUCCESS && !s->b->ops->host_register_mapped)
        c->result = CUDA_ERROR_NOT_SUPPORTED;
    if (c->result == CUDA_SUCCESS) {
        void *base = map_exactly(fd, r->addr, r->size);
        uint64_t dptr = 0;
        if (base == MAP_FAILED) {
            c->result = CUDA_ERROR_ALREADY_MAPPED;
        } else if ((c->result = s->b->ops->host_register_mapped(s->b, base, r->size, r->flags, &dptr)) !=
                   CUDA_SUCCESS) {
            munmap(base, (size_t)r->size);
        } else if ((c->result = region_add(s, base, r->size, r->addr, r->flags, &rep->a)) ==
                   CUDA_SUCCESS) {
            rep->b = dptr;
        }
    }
    if (fd >= 0)
        close(fd);
    return FLYT_CONT;
}

int handle_HOST_UNMAP(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    struct flyt_hentry *e = flyt_handles_get(&s->handles, r->handle, FLYT_H_REGION);
    if (e == NULL) {
        c->result = CUDA_ERROR_INVALID_HANDLE;
        return FLYT_CONT;
    }
    /* copies still queued may read or write it: let them finish first */
    c->result = FLYT_BCALL0(s, device_sync);
    region_drop(s, e);
    flyt_handles_remove(&s->handles, r->handle);
    return FLYT_CONT;
}

/* ---- regions of a restored session (docs/host-memory.md) ---- */

int flyt_region_reserve(uint64_t addr, uint64_t size)
{
    void *want = (void *)(uintptr_t)addr;
    void *got = mmap(want, (size_t)size, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (got != MAP_FAILED && got != want)
        munmap(got, (size_t)size);
    return got == want ? 0 : -1;
}

/* The memfd at a detached region's address: over our reservation there
 * (ours to replace), else only where nothing is. */
static void *map_at_old_address(const struct flyt_region_info *g, int fd)
{
    if (!g->placeholder)
        return map_exactly(fd, g->addr, g->size);
    return mmap((void *)(uintptr_t)g->addr, (size_t)g->size, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_FIXED, fd, 0);
}

/* Undoes map_at_old_address, keeping the reservation where there was one. */
static void unmap_at_old_address(const struct flyt_region_info *g)
{
    void *at = (void *)(uintptr_t)g->addr;
    if (!g->placeholder || mmap(at, (size_t)g->size, PROT_NONE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
                                0) == MAP_FAILED)
        munmap(at, (size_t)g->size);
}

/* Maps and registers a detached region's memfd as HOST_MAP or HOST_MAP_AT
 * did: at its old address when device-mapped, where the device pointer
 * must come out as that address again (the client and its kernels hold it). */
static CUresult region_attach(flyt_session *s, struct flyt_hentry *e, int fd)
{
    struct flyt_region_info *g = &e->u.region;
    CUresult r;
    void *base = g->mapped ? map_at_old_address(g, fd)
                           : mmap(NULL, (size_t)g->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return g->mapped ? CUDA_ERROR_ALREADY_MAPPED : CUDA_ERROR_OUT_OF_MEMORY;
    if (g->mapped) {
        uint64_t dptr = 0;
        unsigned flags = g->read_only ? CU_MEMHOSTREGISTER_READ_ONLY : 0;
        r = s->b->ops->host_register_mapped ? s->b->ops->host_register_mapped(s->b, base, g->size, flags, &dptr)
                                            : CUDA_ERROR_NOT_SUPPORTED;
        if (r == CUDA_SUCCESS && dptr != g->addr) {
            flyt_warn("host memory region %llu: the device gives it 0x%llx, not 0x%llx as before",
                      (unsigned long long)e->id, (unsigned long long)dptr,
                      (unsigned long long)g->addr);
            s->b->ops->host_unregister(s->b, base);
            r = CUDA_ERROR_NOT_SUPPORTED;
        }
    } else {
        r = s->b->ops->host_register ? s->b->ops->host_register(s->b, base, g->size)
                                     : CUDA_ERROR_NOT_SUPPORTED;
    }
    if (r != CUDA_SUCCESS) {
        if (g->mapped)
            unmap_at_old_address(g);
        else
            munmap(base, (size_t)g->size);
        return r;
    }
    g->base = base;
    g->placeholder = 0;
    s->detached_mapped -= g->mapped;
    return CUDA_SUCCESS;
}

int handle_HOST_REMAP(flyt_session *s, flyt_call *c)
{
    const flyt_req_host_remap *r = c->req;
    int fd = flyt_take_passed_fd(s);
    /* sent outside the request stream (during the resume): not counted in it */
    s->stream_base += s->frame_end - s->frame_start;
    struct flyt_hentry *e = flyt_handles_get(&s->handles, r->id, FLYT_H_REGION);
    const struct flyt_region_info *g = e ? &e->u.region : NULL;
    if (e == NULL)
        c->result = CUDA_ERROR_INVALID_HANDLE;
    else if (g->base != NULL)
        c->result = CUDA_ERROR_ALREADY_MAPPED;
    else if (r->size != g->size || r->addr != g->addr || r->mapped != g->mapped)
        c->result = CUDA_ERROR_INVALID_VALUE;
    else
        c->result = memfd_ok(fd, r->size);
    if (c->result == CUDA_SUCCESS && (c->result = region_attach(s, e, fd)) == CUDA_SUCCESS)
        flyt_info("host memory region %llu of %llu bytes shared again%s", (unsigned long long)r->id,
                  (unsigned long long)r->size, g->mapped ? ", device-mapped at its address" : "");
    else if (e != NULL)
        flyt_warn("host memory region %llu cannot be shared again: CUDA error %d",
                  (unsigned long long)r->id, (int)c->result);
    if (fd >= 0)
        close(fd);
    return FLYT_CONT;
}

CUresult flyt_region_attached(struct flyt_hentry *e)
{
    if (e->u.region.base != NULL)
        return CUDA_SUCCESS;
    if (!e->u.region.warned)
        flyt_warn("host memory region %llu is not shared with this server (the session was "
                  "restored and its client did not share it again): refusing its use",
                  (unsigned long long)e->id);
    e->u.region.warned = 1;
    return CUDA_ERROR_NOT_MAPPED;
}

CUresult flyt_region_span(flyt_session *s, uint64_t region, uint64_t offset, uint64_t size,
                          char **host)
{
    struct flyt_hentry *e = flyt_handles_get(&s->handles, region, FLYT_H_REGION);
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = flyt_region_attached(e);
    if (r != CUDA_SUCCESS)
        return r;
    if (offset > e->u.region.size || size > e->u.region.size - offset)
        return CUDA_ERROR_INVALID_VALUE;
    *host = (char *)e->u.region.base + offset;
    return CUDA_SUCCESS;
}

static int mapped_copy(flyt_session *s, flyt_call *c, int to_device)
{
    const flyt_req_memcpy_mapped *r = c->req;
    flyt_bhandle stream;
    char *host = NULL;
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS)
        c->result = flyt_region_span(s, r->region, r->offset, r->size, &host);
    if (c->result == CUDA_SUCCESS && r->size > 0)
        c->result = to_device ? FLYT_BCALL(s, htod_host, r->device, host, r->size, stream)
                              : FLYT_BCALL(s, dtoh_host, host, r->device, r->size, stream);
    /* a copy the client waits for is complete when answered */
    if (c->result == CUDA_SUCCESS && !(c->hdr->flags & FLYT_F_NOREPLY))
        c->result = FLYT_BCALL(s, stream_sync, stream);
    return FLYT_CONT;
}

int handle_MEMCPY_HTOD_MAPPED(flyt_session *s, flyt_call *c) { return mapped_copy(s, c, 1); }
int handle_MEMCPY_DTOH_MAPPED(flyt_session *s, flyt_call *c) { return mapped_copy(s, c, 0); }

static int unmap_region(const struct flyt_hentry *e, void *arg)
{
    (void)arg;
    if (e->type != FLYT_H_REGION)
        return 0;
    if (e->u.region.base != NULL)
        munmap(e->u.region.base, (size_t)e->u.region.size);
    else
        detached_drop(&e->u.region);
    return 1;
}

struct param_scan {
    const unsigned char *params;
    uint32_t             bytes;
    uint64_t             hit; /* the region a parameter points into */
};

static int points_into_detached(struct flyt_hentry *e, void *arg)
{
    struct param_scan *p = arg;
    const struct flyt_region_info *g = &e->u.region;
    if (e->type != FLYT_H_REGION || g->base != NULL || !g->mapped)
        return 0;
    for (uint32_t off = 0; off + 8 <= p->bytes; off += 8) {
        uint64_t word;
        memcpy(&word, p->params + off, sizeof word);
        if (word - g->addr < g->size) {
            p->hit = e->id;
            return 1;
        }
    }
    return 0;
}

CUresult flyt_regions_check_params(flyt_session *s, const void *params, uint32_t bytes)
{
    if (s->detached_mapped == 0) /* the common case */
        return CUDA_SUCCESS;
    struct param_scan p = {params, bytes, 0};
    if (!flyt_handles_foreach(&s->handles, points_into_detached, &p))
        return CUDA_SUCCESS;
    return flyt_region_attached(flyt_handles_get(&s->handles, p.hit, FLYT_H_REGION));
}

void flyt_regions_forget(flyt_session *s)
{
    s->detached_mapped = 0;
    /* after a device reset the pinning is gone with the context; the
     * client falls back to copying through the socket */
    flyt_handles_remove_if(&s->handles, unmap_region, NULL);
}

/*
 * VMM_*: the driver's virtual memory management, as PyTorch's expandable
 * segments use it. A physical allocation is a session id (FLYT_H_VMEM)
 * whose size counts against the memory quota from cuMemCreate to its last
 * cuMemRelease (the driver keeps mapped memory alive past a release, so
 * this charges a little early and frees a little early, never twice).
 * Locations name the session's one device as 0; anything else is another
 * device, which a session does not have.
 */
#include <stdlib.h>
#include <string.h>

#include "flyt_array.h"
#include "ipc.h"
#include "flyt_log.h"
#include "quota.h"
#include "session.h"
#include "vmm_state.h"

#define VMM_HANDLE_TYPES_OK 0x9u /* POSIX file descriptor, fabric: exported only on request */

static CUresult check_prop(const flyt_vmm_prop *p)
{
    if (p->location_type != CU_MEM_LOCATION_TYPE_DEVICE || p->location_id != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (p->type != CU_MEM_ALLOCATION_TYPE_PINNED || (p->handle_types & ~VMM_HANDLE_TYPES_OK))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static int vmm_supported(flyt_session *s, flyt_call *c)
{
    if (s->b->ops->vmm_map != NULL)
        return 1;
    c->result = CUDA_ERROR_NOT_SUPPORTED;
    return 0;
}

int handle_VMM_GRANULARITY(flyt_session *s, flyt_call *c)
{
    const flyt_vmm_prop *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    if (vmm_supported(s, c) && (c->result = check_prop(r)) == CUDA_SUCCESS)
        c->result = s->b->ops->vmm_granularity(s->b, r, &rep->value);
    return FLYT_CONT;
}

int handle_VMM_RESERVE(flyt_session *s, flyt_call *c)
{
    const flyt_req_vmm_reserve *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    if (vmm_supported(s, c))
        c->result = r->flags != 0 ? CUDA_ERROR_INVALID_VALUE
                                  : s->b->ops->vmm_reserve(s->b, r->size, r->alignment, r->addr,
                                                           &rep->value);
    return FLYT_CONT;
}

int handle_VMM_FREE(flyt_session *s, flyt_call *c)
{
    const flyt_req_vmm_range *r = c->req;
    if (vmm_supported(s, c))
        c->result = s->b->ops->vmm_free(s->b, r->ptr, r->size);
    return FLYT_CONT;
}

int handle_VMM_CREATE(flyt_session *s, flyt_call *c)
{
    const flyt_req_vmm_create *r = c->req;
    flyt_rep_u64_pair *rep = c->rep;
    if (!vmm_supported(s, c))
        return FLYT_CONT;
    c->result = r->flags != 0 || r->size == 0 ? CUDA_ERROR_INVALID_VALUE : check_prop(&r->prop);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    if (flyt_quota_charge(&s->mem, r->size) != 0) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return FLYT_CONT;
    }
    flyt_bhandle mem = NULL;
    uint8_t compression = r->prop.compression;
    c->result = s->b->ops->vmm_create(s->b, r->size, &r->prop, &mem, &compression);
    struct flyt_hentry *e = c->result == CUDA_SUCCESS
                                ? flyt_handles_add(&s->handles, FLYT_H_VMEM, mem) : NULL;
    if (e == NULL) {
        if (c->result == CUDA_SUCCESS) {
            s->b->ops->vmm_release(s->b, mem);
            c->result = CUDA_ERROR_OUT_OF_MEMORY;
        }
        flyt_quota_uncharge(&s->mem, r->size);
        return FLYT_CONT;
    }
    e->u.vmem = (struct flyt_vmem_info){.size = r->size, .refs = 1};
    rep->a = e->id;
    rep->b = compression;
    return FLYT_CONT;
}

int handle_VMM_RELEASE(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    struct flyt_hentry *e = flyt_handles_get(&s->handles, r->handle, FLYT_H_VMEM);
    if (e == NULL) {
        c->result = CUDA_ERROR_INVALID_VALUE; /* as the driver answers an unknown handle */
        return FLYT_CONT;
    }
    c->result = s->b->ops->vmm_release(s->b, e->bh);
    if (c->result == CUDA_SUCCESS && --e->u.vmem.refs == 0) {
        if (!e->u.vmem.imported)
            flyt_quota_uncharge(&s->mem, e->u.vmem.size);
        flyt_ipc_vmem_gone(s, r->handle);
        flyt_handles_remove(&s->handles, r->handle);
    }
    return FLYT_CONT;
}

int handle_VMM_MAP(flyt_session *s, flyt_call *c)
{
    const flyt_req_vmm_map *r = c->req;
    struct flyt_hentry *e = flyt_handles_get(&s->handles, r->handle, FLYT_H_VMEM);
    if (!vmm_supported(s, c))
        return FLYT_CONT;
    if (e == NULL || r->flags != 0)
        c->result = CUDA_ERROR_INVALID_VALUE;
    else
        c->result = s->b->ops->vmm_map(s->b, r->ptr, r->size, r->offset, e->bh);
    return FLYT_CONT;
}

int handle_VMM_UNMAP(flyt_session *s, flyt_call *c)
{
    const flyt_req_vmm_range *r = c->req;
    if (vmm_supported(s, c))
        c->result = s->b->ops->vmm_unmap(s->b, r->ptr, r->size);
    return FLYT_CONT;
}

int handle_VMM_SET_ACCESS(flyt_session *s, flyt_call *c)
{
    const flyt_req_vmm_access *r = c->req;
    flyt_vmm_access desc[FLYT_VMM_MAX_ACCESS];
    if (r->count == 0 || r->count > FLYT_VMM_MAX_ACCESS ||
        c->data_len != (uint64_t)r->count * sizeof desc[0])
        return flyt_violation(s, c, "%u access entries in %u bytes", r->count, c->data_len);
    if (flyt_recv_data(s, c, desc, c->data_len) != 0)
        return FLYT_END_IO;
    if (!vmm_supported(s, c))
        return FLYT_CONT;
    c->result = CUDA_SUCCESS;
    for (uint32_t i = 0; i < r->count && c->result == CUDA_SUCCESS; i++) {
        if (desc[i].location_type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location_id != 0)
            c->result = CUDA_ERROR_INVALID_DEVICE;
        else if (desc[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            c->result = CUDA_ERROR_INVALID_VALUE;
        else
            c->result = s->b->ops->vmm_set_access(s->b, r->ptr, r->size, desc[i].flags);
    }
    return FLYT_CONT;
}

struct vmem_find {
    flyt_bhandle bh;
    struct flyt_hentry *found;
};

static int same_vmem(struct flyt_hentry *e, void *arg)
{
    struct vmem_find *f = arg;
    if (e->type != FLYT_H_VMEM || e->bh != f->bh)
        return 0;
    f->found = e;
    return 1;
}

int handle_VMM_RETAIN(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    if (!vmm_supported(s, c))
        return FLYT_CONT;
    struct vmem_find f = {0};
    c->result = s->b->ops->vmm_retain(s->b, r->handle, &f.bh);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    if (flyt_handles_foreach(&s->handles, same_vmem, &f) && f.found->u.vmem.refs < UINT32_MAX) {
        f.found->u.vmem.refs++;
        rep->value = f.found->id;
    } else { /* every mapping is of a session allocation: cannot happen */
        s->b->ops->vmm_release(s->b, f.bh);
        c->result = CUDA_ERROR_INVALID_VALUE;
    }
    return FLYT_CONT;
}

/* ---- checkpoint and restore (vmm_state.h) ---- */

static struct flyt_vmm_smem *snap_mem(struct flyt_vmm_snap *snap, flyt_bhandle bh)
{
    for (size_t i = 0; i < snap->nmems; i++)
        if (snap->mems[i].bh == bh)
            return &snap->mems[i];
    return NULL;
}

static CUresult seen_range(void *arg, uint64_t addr, uint64_t size)
{
    struct flyt_vmm_snap *snap = arg;
    if (flyt_array_room((void **)&snap->ranges, &snap->cap_ranges, snap->nranges, sizeof *snap->ranges))
        return CUDA_ERROR_OUT_OF_MEMORY;
    snap->ranges[snap->nranges++] = (struct flyt_state_vrange){addr, size};
    return CUDA_SUCCESS;
}

static CUresult seen_mem(void *arg, flyt_bhandle mem, uint64_t size, const flyt_vmm_prop *prop)
{
    struct flyt_vmm_snap *snap = arg;
    if (flyt_array_room((void **)&snap->mems, &snap->cap_mems, snap->nmems, sizeof *snap->mems))
        return CUDA_ERROR_OUT_OF_MEMORY;
    snap->mems[snap->nmems++] = (struct flyt_vmm_smem){
        .bh = mem, .rec = {.size = size, .prop = *prop}};
    return CUDA_SUCCESS;
}

static CUresult seen_map(void *arg, uint64_t addr, uint64_t size, uint64_t offset,
                         flyt_bhandle mem, unsigned access)
{
    struct flyt_vmm_smem *m = snap_mem(arg, mem);
    if (m == NULL)
        return CUDA_ERROR_INVALID_VALUE; /* the backend names its allocations first */
    if (flyt_array_room((void **)&m->maps, &m->cap_maps, m->rec.nmaps, sizeof *m->maps))
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->maps[m->rec.nmaps++] = (struct flyt_state_vmap){addr, size, offset, access, 0};
    return CUDA_SUCCESS;
}

struct snap_ids {
    struct flyt_vmm_snap *snap;
    const char           *what;
};

/* The client's handle and its references, on the allocation it names. */
static int name_mem(struct flyt_hentry *e, void *arg)
{
    struct snap_ids *si = arg;
    if (e->type != FLYT_H_VMEM)
        return 0;
    struct flyt_vmm_smem *m = snap_mem(si->snap, e->bh);
    if (m == NULL) {
        si->what = "physical allocation the backend does not hold";
        return 1;
    }
    m->rec.id = e->id;
    m->rec.refs = e->u.vmem.refs;
    /* more references are taken again through a mapping (cuMemRetainAllocationHandle) */
    if (m->rec.refs > 1 && m->rec.nmaps == 0) {
        si->what = "physical allocation retained (cuMemRetainAllocationHandle) and since unmapped";
        return 1;
    }
    return 0;
}

CUresult flyt_vmm_snap_take(flyt_session *s, struct flyt_vmm_snap *snap, const char **what)
{
    memset(snap, 0, sizeof *snap);
    *what = NULL;
    if (s->b->ops->state_vmm == NULL)
        return CUDA_SUCCESS; /* no VMM: the handle scan refuses any VMEM */
    static const struct flyt_vmm_visit seen = {seen_range, seen_mem, seen_map};
    CUresult r = s->b->ops->state_vmm(s->b, &seen, snap, what);
    if (r != CUDA_SUCCESS)
        return r;
    struct snap_ids si = {snap, NULL};
    if (flyt_handles_foreach(&s->handles, name_mem, &si)) {
        *what = si.what;
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_SUCCESS;
}

void flyt_vmm_snap_free(struct flyt_vmm_snap *snap)
{
    for (size_t i = 0; i < snap->nmems; i++)
        free(snap->mems[i].maps);
    free(snap->mems);
    free(snap->ranges);
    memset(snap, 0, sizeof *snap);
}

const struct flyt_vmm_smem *flyt_vmm_snap_by_id(const struct flyt_vmm_snap *snap, uint64_t id)
{
    for (size_t i = 0; i < snap->nmems; i++)
        if (snap->mems[i].rec.id == id)
            return &snap->mems[i];
    return NULL;
}

CUresult flyt_vmm_window_open(flyt_session *s, flyt_bhandle mem, uint64_t size, uint64_t *va)
{
    flyt_backend *b = s->b;
    CUresult r = b->ops->vmm_reserve(b, size, 0, 0, va);
    if (r != CUDA_SUCCESS)
        return r;
    r = b->ops->vmm_map(b, *va, size, 0, mem);
    if (r == CUDA_SUCCESS &&
        (r = b->ops->vmm_set_access(b, *va, size, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) != CUDA_SUCCESS)
        b->ops->vmm_unmap(b, *va, size);
    if (r != CUDA_SUCCESS)
        b->ops->vmm_free(b, *va, size);
    return r;
}

CUresult flyt_vmm_window_close(flyt_session *s, uint64_t va, uint64_t size)
{
    flyt_backend *b = s->b;
    CUresult r = FLYT_BCALL0(s, device_sync); /* copies through it are done */
    CUresult u = b->ops->vmm_unmap(b, va, size);
    CUresult f = u == CUDA_SUCCESS ? b->ops->vmm_free(b, va, size) : u;
    return r != CUDA_SUCCESS ? r : f;
}

CUresult flyt_vmm_capture_open(flyt_session *s, const struct flyt_vmm_smem *m, uint64_t *va)
{
    flyt_backend *b = s->b;
    flyt_bhandle again = NULL;
    /* a released allocation maps only under a handle taken again through its mapping */
    CUresult r = m->rec.id ? CUDA_SUCCESS : b->ops->vmm_retain(b, m->maps[0].addr, &again);
    if (r == CUDA_SUCCESS && again && again != m->bh)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = flyt_vmm_window_open(s, m->bh, m->rec.size, va);
    if (r != CUDA_SUCCESS && again)
        b->ops->vmm_release(b, again);
    return r;
}

CUresult flyt_vmm_capture_close(flyt_session *s, const struct flyt_vmm_smem *m, uint64_t va)
{
    CUresult r = flyt_vmm_window_close(s, va, m->rec.size);
    CUresult e = m->rec.id ? CUDA_SUCCESS : s->b->ops->vmm_release(s->b, m->bh);
    return r != CUDA_SUCCESS ? r : e;
}

CUresult flyt_vmm_restore_range(flyt_session *s, const struct flyt_state_vrange *r, char *err,
                                size_t errlen)
{
    flyt_backend *b = s->b;
    uint64_t got = 0;
    CUresult e = b->ops->vmm_reserve ? b->ops->vmm_reserve(b, r->size, 0, r->addr, &got)
                                     : CUDA_ERROR_NOT_SUPPORTED;
    if (e == CUDA_SUCCESS && got != r->addr) {
        b->ops->vmm_free(b, got, r->size);
        e = CUDA_ERROR_ALREADY_MAPPED;
    }
    if (e != CUDA_SUCCESS)
        snprintf(err, errlen, "cannot reserve the program's address range 0x%llx (%llu bytes) "
                 "again here (got 0x%llx): CUDA error %d", (unsigned long long)r->addr,
                 (unsigned long long)r->size, (unsigned long long)got, (int)e);
    return e;
}

/* Its mappings (records at tail, at any byte) and the access granted on them. */
static CUresult restore_maps(flyt_session *s, const struct flyt_state_vmem *r,
                             const unsigned char *tail, flyt_bhandle mem, char *err, size_t errlen)
{
    flyt_backend *b = s->b;
    for (uint32_t i = 0; i < r->nmaps; i++) {
        struct flyt_state_vmap m;
        memcpy(&m, tail + i * sizeof m, sizeof m);
        CUresult e = b->ops->vmm_map(b, m.addr, m.size, m.offset, mem);
        if (e == CUDA_SUCCESS && m.access != CU_MEM_ACCESS_FLAGS_PROT_NONE)
            e = b->ops->vmm_set_access(b, m.addr, m.size, m.access);
        if (e != CUDA_SUCCESS) {
            snprintf(err, errlen, "cannot map %llu bytes of a physical allocation at 0x%llx "
                     "again: CUDA error %d", (unsigned long long)m.size,
                     (unsigned long long)m.addr, (int)e);
            return e;
        }
    }
    return CUDA_SUCCESS;
}

/* The handle's references past the first, taken through its first mapping. */
static CUresult restore_refs(flyt_session *s, const struct flyt_state_vmem *r,
                             const unsigned char *tail, flyt_bhandle mem)
{
    struct flyt_state_vmap m;
    memcpy(&m, tail, sizeof m);
    for (uint32_t i = 1; i < r->refs; i++) {
        flyt_bhandle again = NULL;
        CUresult e = s->b->ops->vmm_retain(s->b, m.addr, &again);
        if (e != CUDA_SUCCESS)
            return e;
        if (again != mem)
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult flyt_vmm_restore_mem(flyt_session *s, const struct flyt_state_vmem *r,
                              const unsigned char *tail, flyt_vmm_bytes_fn bytes,
                              flyt_bhandle *mem, char *err, size_t errlen)
{
    flyt_backend *b = s->b;
    CUresult e = b->ops->vmm_create ? check_prop(&r->prop) : CUDA_ERROR_NOT_SUPPORTED;
    if (e == CUDA_SUCCESS && r->id && flyt_quota_charge(&s->mem, r->size) != 0)
        e = CUDA_ERROR_OUT_OF_MEMORY;
    if (e == CUDA_SUCCESS && (e = b->ops->vmm_create(b, r->size, &r->prop, mem, NULL)) != CUDA_SUCCESS &&
        r->id)
        flyt_quota_uncharge(&s->mem, r->size);
    if (e != CUDA_SUCCESS) {
        snprintf(err, errlen, "cannot create a physical allocation of %llu bytes (handle types "
                 "0x%x) again: CUDA error %d", (unsigned long long)r->size, r->prop.handle_types,
                 (int)e);
        return e;
    }
    e = restore_maps(s, r, tail, *mem, err, errlen);
    if (e != CUDA_SUCCESS)
        return e;
    uint64_t va = 0;
    e = flyt_vmm_window_open(s, *mem, r->size, &va);
    if (e == CUDA_SUCCESS) {
        e = bytes(s, va, r->size, tail + r->nmaps * sizeof(struct flyt_state_vmap), err, errlen);
        CUresult c = flyt_vmm_window_close(s, va, r->size);
        if (e != CUDA_SUCCESS)
            return e; /* err says why */
        e = c;
    }
    if (e == CUDA_SUCCESS && r->refs > 1)
        e = restore_refs(s, r, tail, *mem);
    if (e == CUDA_SUCCESS && r->id == 0) /* released before: its mappings keep it */
        e = b->ops->vmm_release(b, *mem);
    if (e != CUDA_SUCCESS)
        snprintf(err, errlen, "cannot restore a physical allocation of %llu bytes: CUDA error %d",
                 (unsigned long long)r->size, (int)e);
    return e;
}

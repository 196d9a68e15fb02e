/*
 * VMM_*: the driver's virtual memory management, as PyTorch's expandable
 * segments use it. A physical allocation is a session id (FLYT_H_VMEM)
 * whose size counts against the memory quota from cuMemCreate to its last
 * cuMemRelease (the driver keeps mapped memory alive past a release, so
 * this charges a little early and frees a little early, never twice).
 * Locations name the session's one device as 0; anything else is another
 * device, which a session does not have.
 */
#include "flyt_log.h"
#include "quota.h"
#include "session.h"

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
    flyt_rep_u64 *rep = c->rep;
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
    c->result = s->b->ops->vmm_create(s->b, r->size, &r->prop, &mem);
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
    rep->value = e->id;
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
        flyt_quota_uncharge(&s->mem, e->u.vmem.size);
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

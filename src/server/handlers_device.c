/* DEVICE_* and DRIVER_VERSION: the session's one device (the server's GPU).
 * With a memory quota the tenant sees a virtual GPU of that size: the
 * properties' totalGlobalMem and DEVICE_MEM_INFO's total are the quota, and
 * the free memory is what the quota leaves (never more than the GPU really
 * has free). The SM share's SM count comes from the backend. */
#include <assert.h>
#include <string.h>

#include "ipc.h"
#include "session.h"
#include "state.h"
#include "stream_attrs.h"

static_assert(sizeof(struct cudaDeviceProp) == FLYT_DEVICE_PROP_SIZE,
              "struct cudaDeviceProp does not match the wire size");

/* A session sees exactly one device, index 0. */
static int bad_device(flyt_call *c, int32_t device)
{
    if (device == 0)
        return 0;
    c->result = CUDA_ERROR_INVALID_DEVICE;
    return 1;
}

int handle_DEVICE_COUNT(flyt_session *s, flyt_call *c)
{
    flyt_rep_i32 *rep = c->rep;
    int n = 0;
    c->result = FLYT_BCALL(s, device_count, &n);
    rep->value = n;
    return FLYT_CONT;
}

int handle_DEVICE_PROPS(flyt_session *s, flyt_call *c)
{
    const flyt_req_device *r = c->req;
    if (bad_device(c, r->device))
        return FLYT_CONT;
    struct cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    c->result = FLYT_BCALL(s, device_props, &p);
    flyt_rep_props *rep = c->rep;
    if (c->result == CUDA_SUCCESS && flyt_quota_limit())
        p.totalGlobalMem = (size_t)flyt_quota_limit();
    if (c->result == CUDA_SUCCESS)
        memcpy(rep->bytes, &p, sizeof p);
    return FLYT_CONT;
}

int handle_DEVICE_ATTR(flyt_session *s, flyt_call *c)
{
    const flyt_req_device_attr *r = c->req;
    if (bad_device(c, r->device))
        return FLYT_CONT;
    flyt_rep_i32 *rep = c->rep;
    int v = 0;
    c->result = FLYT_BCALL(s, device_attr, r->attr, &v);
    rep->value = v;
    return FLYT_CONT;
}

int handle_DEVICE_SYNC(flyt_session *s, flyt_call *c)
{
    c->result = FLYT_BCALL0(s, device_sync);
    return FLYT_CONT;
}

int handle_DEVICE_RESET(flyt_session *s, flyt_call *c)
{
    flyt_ipc_reset(s);
    c->result = FLYT_BCALL0(s, device_reset);
    /* Even a failed reset may have dropped objects: forget every id rather
     * than risk handing the backend a dangling handle. */
    flyt_regions_forget(s);
    flyt_handles_clear(&s->handles);
    flyt_state_globals_drop(s, 0);
    flyt_stream_attrs_clear(s);
    flyt_memtab_clear(&s->mem); /* the reset freed every allocation */
    s->default_pool_id = 0;
    return FLYT_CONT;
}

int handle_DEVICE_GET_LIMIT(flyt_session *s, flyt_call *c)
{
    const flyt_req_limit *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    uint64_t v = 0;
    c->result = FLYT_BCALL(s, get_limit, r->limit, &v);
    rep->value = v;
    return FLYT_CONT;
}

int handle_DEVICE_SET_LIMIT(flyt_session *s, flyt_call *c)
{
    const flyt_req_limit *r = c->req;
    c->result = FLYT_BCALL(s, set_limit, r->limit, r->value);
    return FLYT_CONT;
}

int handle_DEVICE_MEM_INFO(flyt_session *s, flyt_call *c)
{
    flyt_rep_mem_info *rep = c->rep;
    uint64_t free_bytes = 0, total = 0;
    c->result = FLYT_BCALL(s, mem_info, &free_bytes, &total);
    uint64_t quota = flyt_quota_limit();
    if (c->result == CUDA_SUCCESS && quota) {
        uint64_t used = flyt_quota_used_total();
        uint64_t left = used < quota ? quota - used : 0;
        free_bytes = left < free_bytes ? left : free_bytes;
        total = quota;
    }
    rep->free_bytes = free_bytes;
    rep->total_bytes = total;
    return FLYT_CONT;
}

int handle_DEVICE_PCI_BUS_ID(flyt_session *s, flyt_call *c)
{
    const flyt_req_device *r = c->req;
    if (bad_device(c, r->device))
        return FLYT_CONT;
    flyt_rep_pci_bus_id *rep = c->rep;
    c->result = FLYT_BCALL(s, pci_bus_id, rep->bus_id, (int)sizeof rep->bus_id);
    rep->bus_id[sizeof rep->bus_id - 1] = '\0';
    return FLYT_CONT;
}

int handle_DEVICE_PRIO_RANGE(flyt_session *s, flyt_call *c)
{
    flyt_rep_i32_pair *rep = c->rep;
    int least = 0, greatest = 0;
    c->result = FLYT_BCALL(s, prio_range, &least, &greatest);
    rep->a = least;
    rep->b = greatest;
    return FLYT_CONT;
}

int handle_DEVICE_GET_CACHE(flyt_session *s, flyt_call *c)
{
    flyt_rep_i32 *rep = c->rep;
    int v = 0;
    c->result = FLYT_BCALL(s, get_cache_config, &v);
    rep->value = v;
    return FLYT_CONT;
}

int handle_DEVICE_SET_CACHE(flyt_session *s, flyt_call *c)
{
    const flyt_req_i32 *r = c->req;
    c->result = FLYT_BCALL(s, set_cache_config, r->value);
    return FLYT_CONT;
}

int handle_DEVICE_GET_FLAGS(flyt_session *s, flyt_call *c)
{
    flyt_rep_i32 *rep = c->rep;
    unsigned v = 0;
    c->result = FLYT_BCALL(s, get_ctx_flags, &v);
    rep->value = (int32_t)v;
    return FLYT_CONT;
}

int handle_DEVICE_SET_FLAGS(flyt_session *s, flyt_call *c)
{
    const flyt_req_i32 *r = c->req;
    c->result = FLYT_BCALL(s, set_ctx_flags, (unsigned)r->value);
    return FLYT_CONT;
}

int handle_DRIVER_VERSION(flyt_session *s, flyt_call *c)
{
    flyt_rep_i32 *rep = c->rep;
    int v = 0;
    c->result = FLYT_BCALL(s, driver_version, &v);
    rep->value = v;
    return FLYT_CONT;
}

uint64_t flyt_device_total_mem(flyt_session *s)
{
    uint64_t quota = flyt_quota_limit();
    if (quota)
        return quota;
    struct cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    return FLYT_BCALL(s, device_props, &p) == CUDA_SUCCESS ? (uint64_t)p.totalGlobalMem : 0;
}

/* Everything the client answers locally, in one reply: the properties (with
 * the quota as total memory) and every attribute the driver knows. */
int handle_DEVICE_SNAPSHOT(flyt_session *s, flyt_call *c)
{
    const flyt_req_device *r = c->req;
    if (bad_device(c, r->device))
        return FLYT_CONT;
    flyt_rep_device_snapshot *rep = c->rep;
    struct cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    c->result = FLYT_BCALL(s, device_props, &p);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    static_assert(sizeof rep->name == sizeof p.name, "device name size");
    memcpy(rep->name, p.name, sizeof rep->name);
    rep->name[sizeof rep->name - 1] = '\0';
    memcpy(rep->uuid, &p.uuid, sizeof rep->uuid);
    memcpy(rep->luid, p.luid, sizeof rep->luid);
    rep->total_mem = flyt_quota_limit() ? flyt_quota_limit() : p.totalGlobalMem;
    if (FLYT_BCALL(s, pci_bus_id, rep->pci_bus_id, (int)sizeof rep->pci_bus_id) != CUDA_SUCCESS)
        rep->pci_bus_id[0] = '\0';
    rep->pci_bus_id[sizeof rep->pci_bus_id - 1] = '\0';
    int version = 0;
    if (FLYT_BCALL(s, driver_version, &version) == CUDA_SUCCESS)
        rep->driver_version = version;
    int n = CU_DEVICE_ATTRIBUTE_MAX < (int)FLYT_DEVICE_ATTRS ? CU_DEVICE_ATTRIBUTE_MAX
                                                              : (int)FLYT_DEVICE_ATTRS;
    for (int attr = 1; attr < n; attr++) {
        int v = 0;
        if (FLYT_BCALL(s, device_attr, attr, &v) == CUDA_SUCCESS)
            rep->attrs[attr] = v;
    }
    rep->attr_count = n;
    return FLYT_CONT;
}

/*
 * Managed memory on one machine: host memory shared with the server at the
 * same address in both processes (HOST_MAP_AT) and registered device-mapped
 * there, so host code and kernels use one pointer and see the same bytes.
 * Nothing migrates: the GPU reads and writes it over PCIe, coherently.
 * Prefetches, advice and stream attachment are checked and remembered as
 * hints (range attributes answer them back); they move no byte.
 *
 * Between machines the GPU cannot map this host's memory: an allocation is
 * device memory with a copy here, exchanged where CUDA hands it between host
 * and device (managed_remote.c); the device reports no concurrent access.
 * docs/host-memory.md has the semantics.
 */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

/* What the application advised or prefetched for one allocation. */
struct hints {
    uint64_t base;
    int read_mostly;
    CUmemLocation preferred; /* type CU_MEM_LOCATION_TYPE_INVALID: none */
    CUmemLocation prefetched;
    unsigned accessed_by;    /* bit 0: device 0, bit 1: the host */
    struct hints *next;
};

static pthread_mutex_t hints_mu = FLYT_MUTEX_INITIALIZER;
static struct hints *hints_list;

static struct hints **hints_slot(uint64_t base)
{
    struct hints **h = &hints_list;
    while (*h && (*h)->base != base)
        h = &(*h)->next;
    return h;
}

FLYT_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (dptr == NULL || size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = 0;
    struct hints *h = calloc(1, sizeof *h);
    if (h == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t len = (size + 4095) & ~(uint64_t)4095, region = 0, base = 0;
    if (!flyt_conn_shares_memory()) {
        r = flyt_mremote_alloc(size, &base); /* managed_remote.c */
        if (r != CUDA_SUCCESS) {
            free(h);
            return r;
        }
    } else {
        void *p = flyt_same_address_mapping("flyt-managed", len, &region);
        if (p == MAP_FAILED) {
            free(h);
            return flyt_trace("cuMemAllocManaged (no address free in both processes)",
                              CUDA_ERROR_OUT_OF_MEMORY);
        }
        base = (uint64_t)(uintptr_t)p;
    }
    flyt_range_add(FLYT_RANGE_MANAGED, base, size, flags);
    if (region)
        flyt_range_set_region(base, region);
    h->base = base;
    pthread_mutex_lock(&hints_mu);
    h->next = hints_list;
    hints_list = h;
    pthread_mutex_unlock(&hints_mu);
    *dptr = flyt_dptr(base);
    return CUDA_SUCCESS;
}

CUresult flyt_managed_free(uint64_t base)
{
    uint64_t size = 0, offset = 0;
    if (flyt_range_find(base, NULL, &size, NULL) != FLYT_RANGE_MANAGED)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t region = flyt_range_region(base, 1, &offset);
    flyt_range_remove(FLYT_RANGE_MANAGED, base);
    pthread_mutex_lock(&hints_mu);
    struct hints **slot = hints_slot(base), *h = *slot;
    if (h)
        *slot = h->next;
    pthread_mutex_unlock(&hints_mu);
    free(h);
    CUresult r = CUDA_SUCCESS;
    if (flyt_mremote_free(base, &r))
        return r;
    /* the server waits for the device before it lets go (as cuMemFree does) */
    r = flyt_region_release(region);
    munmap((void *)(uintptr_t)base, (size + 4095) & ~(uint64_t)4095);
    return r;
}

/* The base of the managed allocation holding all of [p, p + count). */
static CUresult managed_range(uint64_t p, size_t count, uint64_t *base)
{
    uint64_t size = 0;
    if (count == 0 || flyt_range_find(p, base, &size, NULL) != FLYT_RANGE_MANAGED ||
        count > size - (p - *base))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* A processor a hint may name: the session's one device or the host. */
static CUresult location_ok(CUmemLocation loc)
{
    switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        return loc.id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static int is_host(CUmemLocation loc) { return loc.type != CU_MEM_LOCATION_TYPE_DEVICE; }

static CUmemLocation device_location(CUdevice dev)
{
    if (dev == CU_DEVICE_CPU)
        return (CUmemLocation){.type = CU_MEM_LOCATION_TYPE_HOST};
    return (CUmemLocation){.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
}

static void apply_advice(struct hints *h, CUmem_advise advice, CUmemLocation loc)
{
    unsigned who = is_host(loc) ? 2u : 1u;
    switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY: h->read_mostly = 1; break;
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY: h->read_mostly = 0; break;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: h->preferred = loc; break;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
        h->preferred = (CUmemLocation){.type = CU_MEM_LOCATION_TYPE_INVALID};
        break;
    case CU_MEM_ADVISE_SET_ACCESSED_BY: h->accessed_by |= who; break;
    default: h->accessed_by &= ~who; break;
    }
}

FLYT_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t count, CUmem_advise advice,
                                    CUmemLocation location)
{
    CUresult r = flyt_ctx_require();
    uint64_t base = 0;
    if (r == CUDA_SUCCESS)
        r = managed_range((uint64_t)p, count, &base);
    if (r == CUDA_SUCCESS && (advice < CU_MEM_ADVISE_SET_READ_MOSTLY ||
                              advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY))
        r = CUDA_ERROR_INVALID_VALUE;
    /* read-mostly and unsetting the preferred location name no processor */
    int names_location = advice != CU_MEM_ADVISE_SET_READ_MOSTLY &&
                         advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY &&
                         advice != CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION;
    if (r == CUDA_SUCCESS && names_location)
        r = location_ok(location);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&hints_mu);
    struct hints *h = *hints_slot(base);
    if (h)
        apply_advice(h, advice, location);
    pthread_mutex_unlock(&hints_mu);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemAdvise(CUdeviceptr p, size_t count, CUmem_advise advice, CUdevice dev)
{
    return cuMemAdvise_v2(p, count, advice, device_location(dev));
}

/* A prefetch moves nothing (the bytes stay in this host's memory, which the
 * GPU reaches in place); it is remembered as the last prefetch location. */
static CUresult prefetch(CUdeviceptr p, size_t count, CUmemLocation loc, unsigned flags)
{
    CUresult r = flyt_ctx_require();
    uint64_t base = 0;
    if (r == CUDA_SUCCESS)
        r = flags != 0 ? CUDA_ERROR_INVALID_VALUE : managed_range((uint64_t)p, count, &base);
    if (r == CUDA_SUCCESS)
        r = location_ok(loc);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&hints_mu);
    struct hints *h = *hints_slot(base);
    if (h)
        h->prefetched = loc;
    pthread_mutex_unlock(&hints_mu);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t count, CUmemLocation loc,
                                           unsigned int flags, CUstream stream)
{
    (void)stream;
    return prefetch(p, count, loc, flags);
}
FLYT_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t count, CUmemLocation loc,
                                                unsigned int flags, CUstream stream)
{
    (void)stream;
    return prefetch(p, count, loc, flags);
}
FLYT_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t count, CUdevice dev, CUstream stream)
{
    (void)stream;
    return prefetch(p, count, device_location(dev), 0);
}
FLYT_EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t count, CUdevice dev,
                                             CUstream stream)
{
    (void)stream;
    return prefetch(p, count, device_location(dev), 0);
}

/* ---- the batch forms (CUDA 13) ----
 * Each range is prefetched as above; a discard keeps the bytes (the
 * indeterminate value a discarded range reads may be its old one). As the
 * driver's, they need concurrent managed access (the virtual GPU has it on
 * one machine) and a stream other than the legacy one. */
static CUresult batch_ready(const CUdeviceptr *dptrs, const size_t *sizes, size_t count,
                            unsigned long long flags, CUstream stream, int per_thread)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (dptrs == NULL || sizes == NULL || count == 0 || flags != 0 ||
        (stream == NULL && !per_thread) || stream == CU_STREAM_LEGACY)
        return CUDA_ERROR_INVALID_VALUE;
    if (!flyt_device_attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS))
        return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t base = 0;
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++)
        r = managed_range((uint64_t)dptrs[i], sizes[i], &base);
    return r;
}

/* locs[k] applies from operation first[k] on: first[0] is 0, then increasing, below count. */
static CUresult batch_locations(size_t count, const CUmemLocation *locs, const size_t *first, size_t n)
{
    if (locs == NULL || !flyt_batch_firsts_ok(first, n, count))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    for (size_t k = 0; k < n && r == CUDA_SUCCESS; k++)
        r = location_ok(locs[k]);
    return r;
}

static CUresult prefetch_batch(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
                               size_t *first, size_t n, unsigned long long flags, CUstream stream,
                               int per_thread)
{
    CUresult r = batch_ready(dptrs, sizes, count, flags, stream, per_thread);
    if (r == CUDA_SUCCESS)
        r = batch_locations(count, locs, first, n);
    for (size_t i = 0, k = 0; i < count && r == CUDA_SUCCESS; i++) {
        while (k + 1 < n && first[k + 1] <= i)
            k++;
        r = prefetch(dptrs[i], sizes[i], locs[k], 0);
    }
    return r;
}

FLYT_EXPORT CUresult cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                             CUmemLocation *locs, size_t *first, size_t n,
                                             unsigned long long flags, CUstream stream)
{
    return prefetch_batch(dptrs, sizes, count, locs, first, n, flags, stream, 0);
}
FLYT_EXPORT CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                                  CUmemLocation *locs, size_t *first, size_t n,
                                                  unsigned long long flags, CUstream stream)
{
    return prefetch_batch(dptrs, sizes, count, locs, first, n, flags, stream, 1);
}
FLYT_EXPORT CUresult cuMemDiscardBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                            unsigned long long flags, CUstream stream)
{
    return batch_ready(dptrs, sizes, count, flags, stream, 0);
}
FLYT_EXPORT CUresult cuMemDiscardBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                                 unsigned long long flags, CUstream stream)
{
    return batch_ready(dptrs, sizes, count, flags, stream, 1);
}
FLYT_EXPORT CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                                       CUmemLocation *locs, size_t *first, size_t n,
                                                       unsigned long long flags, CUstream stream)
{
    return prefetch_batch(dptrs, sizes, count, locs, first, n, flags, stream, 0);
}
FLYT_EXPORT CUresult cuMemDiscardAndPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes,
                                                            size_t count, CUmemLocation *locs,
                                                            size_t *first, size_t n,
                                                            unsigned long long flags, CUstream stream)
{
    return prefetch_batch(dptrs, sizes, count, locs, first, n, flags, stream, 1);
}

/* Attaching to a stream limits which work may touch the memory; with the
 * GPU reaching it in place there is nothing to change. */
static CUresult attach(CUdeviceptr p, size_t length, unsigned flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t base = 0, size = 0;
    if (flyt_range_find((uint64_t)p, &base, &size, NULL) != FLYT_RANGE_MANAGED ||
        (length != 0 && (base != (uint64_t)p || length != size)) ||
        (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
         flags != CU_MEM_ATTACH_SINGLE))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
FLYT_EXPORT CUresult cuStreamAttachMemAsync(CUstream stream, CUdeviceptr p, size_t length,
                                            unsigned int flags)
{
    (void)stream;
    return attach(p, length, flags);
}
FLYT_EXPORT CUresult cuStreamAttachMemAsync_ptsz(CUstream stream, CUdeviceptr p, size_t length,
                                                 unsigned int flags)
{
    (void)stream;
    return attach(p, length, flags);
}

/* A location as the int range attributes give it: a device ordinal,
 * CU_DEVICE_CPU for the host, CU_DEVICE_INVALID for none. */
static int location_ordinal(CUmemLocation loc)
{
    if (loc.type == CU_MEM_LOCATION_TYPE_INVALID)
        return CU_DEVICE_INVALID;
    return is_host(loc) ? CU_DEVICE_CPU : loc.id;
}

static CUresult range_attr(const struct hints *h, void *data, size_t size,
                           CUmem_range_attribute attr)
{
    int *out = data;
    if (attr == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY) {
        if (size == 0 || size % sizeof(int))
            return CUDA_ERROR_INVALID_VALUE;
        size_t n = size / sizeof(int), at = 0;
        if (h->accessed_by & 1u)
            out[at++] = 0;
        if ((h->accessed_by & 2u) && at < n)
            out[at++] = CU_DEVICE_CPU;
        while (at < n)
            out[at++] = CU_DEVICE_INVALID;
        return CUDA_SUCCESS;
    }
    if (size != sizeof(int))
        return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: *out = h->read_mostly; break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: *out = location_ordinal(h->preferred); break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: *out = location_ordinal(h->prefetched); break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE: *out = (int)h->preferred.type; break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID: *out = h->preferred.id; break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE: *out = (int)h->prefetched.type; break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID: *out = h->prefetched.id; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemRangeGetAttributes(void **data, size_t *sizes,
                                             CUmem_range_attribute *attrs, size_t n,
                                             CUdeviceptr p, size_t count)
{
    CUresult r = flyt_ctx_require();
    uint64_t base = 0;
    if (r == CUDA_SUCCESS)
        r = data == NULL || sizes == NULL || attrs == NULL || n == 0
                ? CUDA_ERROR_INVALID_VALUE
                : managed_range((uint64_t)p, count, &base);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&hints_mu);
    struct hints none = {0}, *h = *hints_slot(base);
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = data[i] ? range_attr(h ? h : &none, data[i], sizes[i], attrs[i])
                    : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&hints_mu);
    return r;
}

FLYT_EXPORT CUresult cuMemRangeGetAttribute(void *data, size_t size, CUmem_range_attribute attr,
                                            CUdeviceptr p, size_t count)
{
    return cuMemRangeGetAttributes(&data, &size, &attr, 1, p, count);
}

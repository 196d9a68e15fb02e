/*
 * Pinned memory between machines (TCP, or FLYT_SHM=0). Under unified
 * addressing CUDA maps every page-locked allocation for the GPU at its own
 * address, and programs pass such pointers to kernels (MAGMA's batched
 * routines through PyTorch read their pointer arrays from pinned memory).
 * The GPU cannot map a page of this machine, so each allocation is made at
 * an address the server reserved (a VMM reservation, no memory behind it);
 * when the program asks for its device pointer, or passes a pointer into
 * it to a kernel (unified addressing: no asking needed), the server backs
 * the reservation with device memory and managed_remote.c keeps the two
 * copies equal as it does managed memory. Until then copies through the
 * socket serve it, as before, and it costs the GPU nothing: PyTorch's
 * caching host allocator hands its blocks to copies only, which keep their
 * speed.
 */
#include "client.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "flyt_array.h"

enum { RESERVE_TRIES = 8 };

struct pinned {
    uint64_t base, len; /* the mapping here: whole pages */
    uint64_t reserved;  /* the server's reservation at base: whole granules */
    uint64_t handle;    /* the device memory behind it (VMM_CREATE), 0 until asked */
};

static pthread_mutex_t mu = FLYT_MUTEX_INITIALIZER;
static struct pinned *allocs;
static size_t nallocs, cap_allocs;
/* How many lack device memory, and the bounds of their addresses: read
 * without mu by every launch (a launch naming an allocation follows the
 * allocation in the program's order, so it sees it counted). */
static atomic_size_t unbacked;
static _Atomic uint64_t unbacked_lo = UINT64_MAX, unbacked_hi;

static const flyt_vmm_prop device_prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                          .location_type = CU_MEM_LOCATION_TYPE_DEVICE};

/* The server's VMM granularity; 0 when it has no VMM (then no address can
 * be reserved and pinned memory stays plain memory here). */
static uint64_t granularity(void)
{
    static uint64_t gran;
    static int asked;
    pthread_mutex_lock(&mu);
    if (!asked) {
        asked = 1;
        flyt_vmm_prop req = device_prop;
        if (!flyt_device_attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) ||
            flyt_call_u64(FLYT_OP_VMM_GRANULARITY, &req, sizeof req, &gran) != CUDA_SUCCESS)
            gran = 0;
    }
    pthread_mutex_unlock(&mu);
    return gran;
}

/* VMM_UNMAP or VMM_FREE of [at, at + size) */
static CUresult vmm_range(uint16_t op, uint64_t at, uint64_t size)
{
    flyt_req_vmm_range req = {.ptr = at, .size = size};
    return flyt_call(op, &req, sizeof req, NULL, 0, NULL);
}

/* A reservation of size bytes in the server whose address is free here
 * too, mapped here with len bytes of zeroed pages; 0 when none was had. A
 * reservation whose address is taken here stays held while trying again,
 * so that the server hands out another. */
static uint64_t reserve_and_map(uint64_t size, uint64_t len, uint64_t gran)
{
    uint64_t tried[RESERVE_TRIES], got = 0;
    int ntried = 0;
    while (got == 0 && ntried < RESERVE_TRIES) {
        flyt_req_vmm_reserve req = {.size = size, .alignment = gran};
        uint64_t at = 0;
        if (flyt_call_u64(FLYT_OP_VMM_RESERVE, &req, sizeof req, &at) != CUDA_SUCCESS)
            break;
        void *p = mmap((void *)(uintptr_t)at, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == (void *)(uintptr_t)at) {
            got = at;
            break;
        }
        if (p != MAP_FAILED)
            munmap(p, len); /* a kernel without MAP_FIXED_NOREPLACE placed it elsewhere */
        tried[ntried++] = at;
    }
    while (ntried > 0)
        vmm_range(FLYT_OP_VMM_FREE, tried[--ntried], size);
    return got;
}

void *flyt_pinned_remote_alloc(size_t size)
{
    uint64_t gran = granularity();
    if (gran == 0)
        return NULL;
    uint64_t len = flyt_page_up(size), reserved = (len + gran - 1) / gran * gran;
    uint64_t base = reserve_and_map(reserved, len, gran);
    if (base == 0)
        return NULL;
    pthread_mutex_lock(&mu);
    int room = flyt_array_room((void **)&allocs, &cap_allocs, nallocs, sizeof *allocs) == 0;
    if (room) {
        allocs[nallocs++] = (struct pinned){base, len, reserved, 0};
        atomic_fetch_add(&unbacked, 1);
        if (base < atomic_load(&unbacked_lo))
            atomic_store(&unbacked_lo, base);
        if (base + len > atomic_load(&unbacked_hi))
            atomic_store(&unbacked_hi, base + len);
    }
    pthread_mutex_unlock(&mu);
    if (!room) {
        munmap((void *)(uintptr_t)base, len);
        vmm_range(FLYT_OP_VMM_FREE, base, reserved);
        return NULL;
    }
    /* pinned memory is not inherited by a forked child, natively either */
    madvise((void *)(uintptr_t)base, len, MADV_DONTFORK);
    return (void *)(uintptr_t)base;
}

/* The entry of base; nallocs if none. Under mu. */
static size_t find(uint64_t base)
{
    size_t i = 0;
    while (i < nallocs && allocs[i].base != base)
        i++;
    return i;
}

/* Device memory behind [at, at + size), readable and writable by the GPU:
 * its handle, or 0 on failure (nothing left behind). */
static uint64_t back(uint64_t at, uint64_t size, CUresult *r)
{
    flyt_req_vmm_create create = {.size = size, .prop = device_prop};
    flyt_rep_u64_pair made = {0};
    struct flyt_reply_sink sink = {.rep = &made, .rep_size = sizeof made};
    *r = flyt_call(FLYT_OP_VMM_CREATE, &create, sizeof create, NULL, 0, &sink);
    if (*r != CUDA_SUCCESS)
        return 0;
    flyt_req_vmm_map map = {.ptr = at, .size = size, .handle = made.a};
    *r = flyt_call(FLYT_OP_VMM_MAP, &map, sizeof map, NULL, 0, NULL);
    if (*r == CUDA_SUCCESS) {
        flyt_vmm_access rw = {.location_type = CU_MEM_LOCATION_TYPE_DEVICE,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        flyt_req_vmm_access access = {.ptr = at, .size = size, .count = 1};
        struct iovec data = {.iov_base = &rw, .iov_len = sizeof rw};
        *r = flyt_call(FLYT_OP_VMM_SET_ACCESS, &access, sizeof access, &data, 1, NULL);
        if (*r != CUDA_SUCCESS)
            vmm_range(FLYT_OP_VMM_UNMAP, at, size);
    }
    if (*r != CUDA_SUCCESS) {
        flyt_call_handle(FLYT_OP_VMM_RELEASE, made.a);
        return 0;
    }
    return made.a;
}

CUresult flyt_pinned_remote_map(uint64_t base)
{
    pthread_mutex_lock(&mu);
    size_t i = find(base);
    CUresult r = i == nallocs ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && allocs[i].handle == 0) {
        allocs[i].handle = back(base, allocs[i].reserved, &r);
        if (r == CUDA_SUCCESS) {
            r = flyt_mremote_track(base, allocs[i].len, base);
            if (r != CUDA_SUCCESS) {
                vmm_range(FLYT_OP_VMM_UNMAP, base, allocs[i].reserved);
                flyt_call_handle(FLYT_OP_VMM_RELEASE, allocs[i].handle);
                allocs[i].handle = 0;
            }
        }
        if (allocs[i].handle)
            atomic_fetch_sub(&unbacked, 1);
    }
    pthread_mutex_unlock(&mu);
    return r;
}

int flyt_pinned_remote_free(uint64_t base, CUresult *r)
{
    pthread_mutex_lock(&mu);
    size_t i = find(base);
    if (i == nallocs) {
        pthread_mutex_unlock(&mu);
        return 0;
    }
    struct pinned gone = allocs[i];
    allocs[i] = allocs[--nallocs];
    if (gone.handle == 0)
        atomic_fetch_sub(&unbacked, 1);
    pthread_mutex_unlock(&mu);
    *r = CUDA_SUCCESS;
    if (gone.handle) {
        flyt_mremote_untrack(gone.base);
        /* the driver waits for the device before unmapping, as cuMemFreeHost does */
        *r = vmm_range(FLYT_OP_VMM_UNMAP, gone.base, gone.reserved);
        CUresult released = flyt_call_handle(FLYT_OP_VMM_RELEASE, gone.handle);
        if (*r == CUDA_SUCCESS)
            *r = released;
    }
    vmm_range(FLYT_OP_VMM_FREE, gone.base, gone.reserved);
    munmap((void *)(uintptr_t)gone.base, gone.len);
    return 1;
}

/* The allocation holding p that lacks device memory; 0 if none. */
static uint64_t unbacked_holding(uint64_t p)
{
    pthread_mutex_lock(&mu);
    uint64_t base = 0;
    for (size_t i = 0; i < nallocs && base == 0; i++)
        if (allocs[i].handle == 0 && p - allocs[i].base < allocs[i].len)
            base = allocs[i].base;
    pthread_mutex_unlock(&mu);
    return base;
}

CUresult flyt_pinned_remote_scan(const void *params, size_t bytes)
{
    if (atomic_load_explicit(&unbacked, memory_order_relaxed) == 0)
        return CUDA_SUCCESS;
    uint64_t lo = atomic_load(&unbacked_lo), hi = atomic_load(&unbacked_hi);
    CUresult r = CUDA_SUCCESS;
    /* pointers sit 8-aligned in a parameter block, in structs too; a value
     * that only looks like one costs device memory, never correctness */
    for (size_t at = 0; at + 8 <= bytes && r == CUDA_SUCCESS; at += 8) {
        uint64_t word;
        memcpy(&word, (const char *)params + at, sizeof word);
        if (word < lo || word >= hi)
            continue;
        uint64_t base = unbacked_holding(word);
        if (base)
            r = flyt_pinned_remote_map(base);
    }
    return r;
}

void flyt_pinned_remote_forget_backing(void)
{
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nallocs; i++)
        allocs[i].handle = 0;
    atomic_store(&unbacked, nallocs);
    pthread_mutex_unlock(&mu);
}

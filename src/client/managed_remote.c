/*
 * Managed memory between machines (TCP, or FLYT_SHM=0): the GPU cannot reach
 * this process's pages, so a managed allocation is device memory in the
 * server plus a private copy here at the same address. The virtual GPU then
 * reports managed memory without concurrent access, the model in which
 * host code and the device take turns: the device's bytes are the truth
 * while device work may run, the host's in between. So the two copies are
 * made equal where the turns change:
 * - before a request that runs device work (a launch, a copy, a memset),
 *   the pages host code wrote since the last exchange go to the device,
 *   from each allocation in the host's turn (a new one, or one brought back
 *   since device work last ran: others hold stale bytes here);
 *   they are found by the kernel's soft-dirty bits (/proc/self/pagemap),
 *   which also see writes made by system calls (a read() into the buffer),
 *   unlike write protection; without them every page goes; in host memory
 *   mapped for the GPU (pinned, registered) by comparison with a copy;
 * - after a call that waited for the device (a synchronisation, a query
 *   that found the work done, a synchronous copy or memset), if device work
 *   that may write memory ran since, every managed allocation comes back
 *   whole (which bytes a kernel wrote is not known).
 * Costs: docs/host-memory.md. The exchanges are plain copies on the legacy
 * stream, made with the hooks off (in_exchange).
 */
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "flyt_array.h"
#include "flyt_calls.h"

#define SOFT_DIRTY_BIT ((uint64_t)1 << 55)

/* An allocation's region is whole pages inside its device allocation; a
 * module's managed variable (attached) is its exact bytes, which may share a
 * page with another variable or with bytes of the module's that only the
 * device holds: only the variable's own bytes are ever exchanged. Host
 * memory mapped for the GPU (tracked: pinned_remote.c's pinned pages, at
 * their own address there; registered memory's exact bytes, elsewhere there)
 * belongs to its owner, here and on the device. */
enum mregion_kind { MR_ALLOCATION, MR_VARIABLE, MR_TRACKED };

struct mregion {
    uint64_t base, len; /* the bytes kept equal here; page-aligned for an allocation */
    uint64_t dev;       /* where base is on the device: base but for registered memory */
    uint64_t device;    /* an allocation's own device address (freed by it) */
    /* tracked memory: its bytes as last exchanged. Written pages are found
     * by comparing with it, not by soft-dirty bits: clearing those write-
     * protects every page of the process, a cost a large program (PyTorch,
     * whose cuDNN maps a pinned page at start) must not pay at every turn. */
    unsigned char *shadow;
    enum mregion_kind kind;
    int device_turn;    /* device work that may write it ran since the last exchange:
                         * the device's bytes are the truth, the host's stale */
};

static pthread_mutex_t mu = FLYT_MUTEX_INITIALIZER;
static struct mregion *regions;
static int nregions;
static size_t cap_regions;
static atomic_int live; /* nregions, read without mu: every copy asks flyt_mremote_device */
static atomic_int device_turns; /* some region's device_turn is set (read without mu) */
static int pagemap_fd = -1, clear_fd = -1; /* soft-dirty tracking; -1: every page is sent */
static _Thread_local int in_exchange;

/* ---- soft-dirty bits ---- */

static void clear_soft_dirty(void)
{
    if (clear_fd >= 0 && pwrite(clear_fd, "4", 1, 0) != 1) {
        fprintf(stderr, "flyt: managed memory: clearing soft-dirty bits failed (%s): every page "
                        "is sent from now on\n", strerror(errno));
        close(clear_fd);
        clear_fd = -1;
    }
}

/* Whether the kernel tracks soft-dirty pages for this process: a page
 * written after a clear shows the bit. Under mu, once. */
static void tracking_open(void)
{
    static int tried;
    if (tried)
        return;
    tried = 1;
    pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    clear_fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    volatile unsigned char *probe = mmap(NULL, FLYT_PAGE, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint64_t entry = 0;
    int ok = pagemap_fd >= 0 && clear_fd >= 0 && probe != MAP_FAILED;
    if (ok) {
        probe[0] = 1;
        clear_soft_dirty();
        probe[0] = 2;
        ok = clear_fd >= 0 &&
             pread(pagemap_fd, &entry, sizeof entry, (off_t)((uintptr_t)probe / FLYT_PAGE * 8)) ==
                 (ssize_t)sizeof entry &&
             (entry & SOFT_DIRTY_BIT);
    }
    if (probe != MAP_FAILED)
        munmap((void *)probe, FLYT_PAGE);
    if (!ok) {
        fprintf(stderr, "flyt: managed memory: this kernel shows no soft-dirty pages; every "
                        "managed page is sent to the GPU before each launch, copy or memset\n");
        if (pagemap_fd >= 0)
            close(pagemap_fd);
        if (clear_fd >= 0)
            close(clear_fd);
        pagemap_fd = clear_fd = -1;
    }
}

/* ---- the exchanges ---- */

/* [at, at + n) of the pages written, cut to the region's own bytes */
static CUresult send_pages(const struct mregion *r, uint64_t at, uint64_t n)
{
    uint64_t from = at > r->base ? at : r->base;
    uint64_t to = at + n < r->base + r->len ? at + n : r->base + r->len;
    return from < to ? flyt_copy_plain(1, r->dev + (from - r->base), (void *)(uintptr_t)from, to - from)
                     : CUDA_SUCCESS;
}


/* The written pages of r to the device, in runs. Under mu. */
static CUresult push_region(const struct mregion *r)
{
    if (pagemap_fd < 0)
        return send_pages(r, r->base, r->len);
    enum { BATCH = 512 };
    uint64_t entries[BATCH], run = 0, run_len = 0;
    uint64_t first = flyt_page_down(r->base), span = flyt_page_up(r->base + r->len) - first;
    CUresult e = CUDA_SUCCESS;
    for (uint64_t off = 0; off < span && e == CUDA_SUCCESS; off += BATCH * FLYT_PAGE) {
        uint64_t pages = (span - off) / FLYT_PAGE < BATCH ? (span - off) / FLYT_PAGE : BATCH;
        off_t at = (off_t)((first + off) / FLYT_PAGE * 8);
        if (pread(pagemap_fd, entries, pages * 8, at) != (ssize_t)(pages * 8))
            return send_pages(r, r->base, r->len); /* unreadable: all of it, to be safe */
        for (uint64_t i = 0; i < pages && e == CUDA_SUCCESS; i++) {
            uint64_t page = first + off + i * FLYT_PAGE;
            if (entries[i] & SOFT_DIRTY_BIT) {
                if (run_len == 0)
                    run = page;
                run_len += FLYT_PAGE;
            } else if (run_len) {
                e = send_pages(r, run, run_len);
                run_len = 0;
            }
        }
    }
    return e == CUDA_SUCCESS && run_len ? send_pages(r, run, run_len) : e;
}

/* Host memory mapped for the GPU has no turns: natively host code may write
 * it while kernels run (a pointer array for the next launch), and both
 * sides' writes land. So a tracked region's exchanges are byte-exact: before
 * device work the bytes host code changed since the last exchange (host !=
 * shadow) go, whatever ran; after a wait the device's bytes come back only
 * where host code changed nothing since (a byte both wrote is a race
 * natively too: the host's stays and goes next). */

/* The runs of changed bytes of a push: each goes without waiting for the
 * one before, the last with a wait (the device work that follows may be on
 * a stream the legacy stream does not order). */
struct runs {
    uint64_t dev, host, n; /* the run held back; n 0: none */
};

static CUresult runs_add(struct runs *q, uint64_t dev, uint64_t host, uint64_t n)
{
    CUresult e = q->n ? flyt_copy_plain_queued(q->dev, (const void *)(uintptr_t)q->host, q->n)
                      : CUDA_SUCCESS;
    *q = (struct runs){dev, host, n};
    return e;
}

static CUresult runs_end(struct runs *q)
{
    return q->n ? flyt_copy_plain(1, q->dev, (void *)(uintptr_t)q->host, q->n) : CUDA_SUCCESS;
}

/* Runs of bytes in [from, to) of r where host and shadow differ; the shadow
 * then holds them. Under mu. */
static CUresult push_bytes(const struct mregion *r, uint64_t from, uint64_t to, struct runs *q)
{
    const unsigned char *host = (const unsigned char *)(uintptr_t)r->base;
    CUresult e = CUDA_SUCCESS;
    uint64_t i = from;
    while (i < to && e == CUDA_SUCCESS) {
        while (i < to && host[i] == r->shadow[i])
            i++;
        uint64_t run = i;
        while (i < to && host[i] != r->shadow[i])
            i++;
        if (i > run) {
            memcpy(r->shadow + run, host + run, i - run);
            e = runs_add(q, r->dev + run, r->base + run, i - run);
        }
    }
    return e;
}

static CUresult push_tracked(const struct mregion *r, struct runs *q)
{
    CUresult e = CUDA_SUCCESS;
    for (uint64_t off = 0; off < r->len && e == CUDA_SUCCESS; off += FLYT_PAGE) {
        uint64_t n = r->len - off < FLYT_PAGE ? r->len - off : FLYT_PAGE;
        if (memcmp((const unsigned char *)(uintptr_t)r->base + off, r->shadow + off, n) != 0)
            e = push_bytes(r, off, off + n, q);
    }
    return e;
}

/* The device's bytes into r where host code changed nothing. Under mu. */
static CUresult pull_tracked(struct mregion *r)
{
    unsigned char *got = malloc(r->len), *host = (unsigned char *)(uintptr_t)r->base;
    if (got == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult e = flyt_copy_plain(0, r->dev, got, r->len);
    for (uint64_t off = 0; off < r->len && e == CUDA_SUCCESS; off += FLYT_PAGE) {
        uint64_t n = r->len - off < FLYT_PAGE ? r->len - off : FLYT_PAGE;
        if (memcmp(host + off, r->shadow + off, n) == 0) { /* host code wrote nothing here */
            memcpy(host + off, got + off, n);
        } else {
            for (uint64_t i = off; i < off + n; i++)
                if (host[i] == r->shadow[i])
                    host[i] = got[i];
        }
        memcpy(r->shadow + off, got + off, n);
    }
    free(got);
    return e;
}

/* Host writes to the device: every tracked region's changed bytes, and the
 * written pages of the other regions whose turn is the host's (one in the
 * device's turn holds stale bytes here: sending them would undo the
 * device's writes). Which pages were written is read for every region
 * before the bits are cleared, and the bytes are sent after. Under mu. */
static CUresult push(int device_writes)
{
    CUresult e = CUDA_SUCCESS;
    int read_bits = 0;
    struct runs q = {0};
    for (int i = 0; i < nregions && e == CUDA_SUCCESS; i++) {
        if (regions[i].shadow) {
            e = push_tracked(&regions[i], &q);
        } else if (!regions[i].device_turn) {
            e = push_region(&regions[i]);
            read_bits = 1;
        }
    }
    CUresult last = runs_end(&q);
    if (e == CUDA_SUCCESS)
        e = last;
    if (pagemap_fd >= 0 && read_bits)
        clear_soft_dirty();
    for (int i = 0; i < nregions && device_writes; i++)
        regions[i].device_turn = 1; /* a kernel may write any of them */
    if (device_writes && nregions)
        atomic_store(&device_turns, 1);
    return e;
}

/* The device's bytes back into the regions in its turn. Under mu. */
static CUresult pull(void)
{
    CUresult e = CUDA_SUCCESS;
    int read_bits = 0; /* regions whose written pages soft-dirty bits tell */
    for (int i = 0; i < nregions && e == CUDA_SUCCESS; i++)
        if (regions[i].device_turn) {
            struct mregion *r = &regions[i];
            if (r->shadow) {
                e = pull_tracked(r);
            } else {
                e = flyt_copy_plain(0, r->dev, (void *)(uintptr_t)r->base, r->len);
                read_bits = 1;
            }
            r->device_turn = e != CUDA_SUCCESS;
        }
    if (read_bits)
        clear_soft_dirty(); /* what was received is what the device holds */
    if (e != CUDA_SUCCESS)
        atomic_store(&device_turns, 1); /* the next synchronisation tries again */
    return e;
}

/* ---- the hooks on requests ---- */

/* Requests that run device work which may write device memory. */
static int writes_device(uint16_t op, const void *req)
{
    switch (op) {
    case FLYT_OP_LAUNCH:
    case FLYT_OP_MEMCPY_HTOD:
    case FLYT_OP_MEMCPY_DTOD:
    case FLYT_OP_MEMCPY_3D:
    case FLYT_OP_MEMSET:
    case FLYT_OP_MEMCPY_HTOD_MAPPED:
    case FLYT_OP_MEMCPY_HTOD_PEER:
    case FLYT_OP_ARRAY_COPY:
        return 1;
    case FLYT_OP_CALL: {
        uint32_t id;
        memcpy(&id, req, sizeof id); /* flyt_req_call starts with it */
        return id == FLYT_CALL_cuGraphLaunch || id == FLYT_CALL_cuStreamWriteValue32 ||
               id == FLYT_CALL_cuStreamWriteValue64 || id == FLYT_CALL_cuStreamWriteValue32_v2 ||
               id == FLYT_CALL_cuStreamWriteValue64_v2;
    }
    default:
        return 0;
    }
}

/* Requests that run device work reading device memory, besides those above. */
static int reads_device(uint16_t op)
{
    return op == FLYT_OP_MEMCPY_DTOH || op == FLYT_OP_MEMCPY_DTOH_MAPPED ||
           op == FLYT_OP_MEMCPY_DTOH_PEER;
}

/* Calls whose success means the device work before them is done. */
static int waited(uint16_t op, CUresult r)
{
    if (r != CUDA_SUCCESS)
        return 0;
    switch (op) {
    case FLYT_OP_DEVICE_SYNC:
    case FLYT_OP_STREAM_SYNC:
    case FLYT_OP_STREAM_QUERY:
    case FLYT_OP_EVENT_SYNC:
    case FLYT_OP_EVENT_QUERY:
    case FLYT_OP_MEMCPY_HTOD:
    case FLYT_OP_MEMCPY_DTOH:
    case FLYT_OP_MEMCPY_DTOD:
    case FLYT_OP_MEMCPY_3D:
    case FLYT_OP_MEMSET:
        return 1;
    default:
        return 0;
    }
}

static CUresult before(uint16_t op, const void *req)
{
    int writes = writes_device(op, req);
    if (in_exchange || (!writes && !reads_device(op)))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&mu);
    in_exchange = 1;
    CUresult e = push(writes);
    in_exchange = 0;
    pthread_mutex_unlock(&mu);
    return e;
}

static void after(uint16_t op, CUresult r)
{
    if (in_exchange || !waited(op, r) || !atomic_exchange(&device_turns, 0))
        return;
    pthread_mutex_lock(&mu);
    in_exchange = 1;
    CUresult e = pull();
    in_exchange = 0;
    pthread_mutex_unlock(&mu);
    if (e != CUDA_SUCCESS)
        fprintf(stderr, "flyt: managed memory: bringing the device's bytes back failed: CUDA "
                        "error %d\n", (int)e);
}

/* ---- the list ---- */

/* Room for one more region. Under mu. */
static int room(void)
{
    return flyt_array_room((void **)&regions, &cap_regions, (size_t)nregions, sizeof *regions) == 0;
}

/* Takes the region of kind at base out of the list into *gone: 1, or 0 if
 * there is none. Under mu. */
static int take(enum mregion_kind kind, uint64_t base, struct mregion *gone)
{
    for (int i = 0; i < nregions; i++)
        if (regions[i].kind == kind && regions[i].base == base) {
            *gone = regions[i];
            regions[i] = regions[--nregions];
            atomic_store(&live, nregions);
            return 1;
        }
    return 0;
}

/* ---- allocations ---- */

CUresult flyt_mremote_alloc(size_t size, uint64_t *base)
{
    uint64_t len = flyt_page_up(size), device = 0;
    /* a page more: the server aligns small allocations to 512 bytes only */
    flyt_req_mem_alloc req = {.size = len + FLYT_PAGE};
    CUresult r = flyt_call_u64(FLYT_OP_MEM_ALLOC, &req, sizeof req, &device);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t at = flyt_page_up(device);
    void *p = mmap((void *)(uintptr_t)at, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    pthread_mutex_lock(&mu);
    if (p != (void *)(uintptr_t)at || !room()) {
        pthread_mutex_unlock(&mu);
        if (p != MAP_FAILED)
            munmap(p, len);
        flyt_call_handle(FLYT_OP_MEM_FREE, device);
        return flyt_trace("cuMemAllocManaged (the device's address is taken in this process)",
                          CUDA_ERROR_OUT_OF_MEMORY);
    }
    tracking_open();
    in_exchange = 1;
    r = cuMemsetD8_v2(at, 0, len); /* both copies start as zeros */
    in_exchange = 0;
    regions[nregions++] = (struct mregion){at, len, at, device, NULL, MR_ALLOCATION, 0};
    atomic_store(&live, nregions);
    pthread_mutex_unlock(&mu);
    flyt_conn_set_hooks(before, after);
    *base = at;
    return r;
}

/* 1 when base is such an allocation (freed with *r), 0 when it is not. */
int flyt_mremote_free(uint64_t base, CUresult *r)
{
    struct mregion gone;
    pthread_mutex_lock(&mu);
    int found = take(MR_ALLOCATION, base, &gone);
    pthread_mutex_unlock(&mu);
    if (!found)
        return 0;
    munmap((void *)(uintptr_t)gone.base, gone.len);
    *r = flyt_call_handle(FLYT_OP_MEM_FREE, gone.device); /* waits for the device first */
    return 1;
}

int flyt_mremote_device(uint64_t p, uint64_t n, uint64_t *dev)
{
    if (atomic_load_explicit(&live, memory_order_relaxed) == 0)
        return 0; /* no lock on the copy path of programs without any */
    pthread_mutex_lock(&mu);
    int found = 0;
    for (int i = 0; i < nregions && !found; i++)
        if (p >= regions[i].base && n <= regions[i].len && p - regions[i].base <= regions[i].len - n) {
            *dev = regions[i].dev + (p - regions[i].base);
            found = 1;
        }
    pthread_mutex_unlock(&mu);
    return found;
}

/* ---- a module's managed variables ---- */

/* Whether the page at p holds an attached variable's bytes. Under mu. */
static int page_attached(uint64_t p)
{
    for (int i = 0; i < nregions; i++)
        if (regions[i].kind == MR_VARIABLE && p >= flyt_page_down(regions[i].base) &&
            p < flyt_page_up(regions[i].base + regions[i].len))
            return 1;
    return 0;
}

/* Unmaps the pages of [from, to) no attached variable holds. Under mu. */
static void unmap_unattached(uint64_t from, uint64_t to)
{
    for (uint64_t p = from; p < to; p += FLYT_PAGE)
        if (!page_attached(p))
            munmap((void *)(uintptr_t)p, FLYT_PAGE);
}

CUresult flyt_mremote_attach(uint64_t base, uint64_t len)
{
    if (len == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nregions; i++)
        if (regions[i].kind == MR_VARIABLE && regions[i].base == base) {
            pthread_mutex_unlock(&mu);
            return CUDA_SUCCESS;
        }
    if (!room()) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t first = flyt_page_down(base), end = flyt_page_up(base + len), p = first;
    for (; p < end; p += FLYT_PAGE) { /* pages another variable holds are mapped already */
        if (page_attached(p))
            continue;
        void *m = mmap((void *)(uintptr_t)p, FLYT_PAGE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (m == (void *)(uintptr_t)p)
            continue;
        if (m != MAP_FAILED)
            munmap(m, FLYT_PAGE);
        unmap_unattached(first, p);
        pthread_mutex_unlock(&mu);
        return flyt_trace("cuLibraryGetManaged (the variable's address is taken in this process)",
                          CUDA_ERROR_OUT_OF_MEMORY);
    }
    tracking_open();
    in_exchange = 1;
    /* what host code wrote to the others goes first (the bits are cleared
     * next); then the variable's bytes as the device holds them */
    CUresult r = push(0);
    if (r == CUDA_SUCCESS)
        r = flyt_copy_plain(0, base, (void *)(uintptr_t)base, len);
    clear_soft_dirty();
    in_exchange = 0;
    if (r != CUDA_SUCCESS) {
        unmap_unattached(first, end);
        pthread_mutex_unlock(&mu);
        return r;
    }
    regions[nregions++] = (struct mregion){base, len, base, 0, NULL, MR_VARIABLE, 0};
    atomic_store(&live, nregions);
    pthread_mutex_unlock(&mu);
    flyt_conn_set_hooks(before, after);
    return CUDA_SUCCESS;
}

void flyt_mremote_detach(uint64_t base)
{
    struct mregion gone;
    pthread_mutex_lock(&mu);
    if (take(MR_VARIABLE, base, &gone)) /* then its pages no longer count as attached */
        unmap_unattached(flyt_page_down(gone.base), flyt_page_up(gone.base + gone.len));
    pthread_mutex_unlock(&mu);
}

void flyt_mremote_forget_all(void)
{
    pthread_mutex_lock(&mu);
    int n = nregions;
    nregions = 0; /* first, so that no page counts as attached below */
    atomic_store(&live, 0);
    atomic_store(&device_turns, 0);
    for (int i = 0; i < n; i++) {
        if (regions[i].kind == MR_TRACKED) {
            free(regions[i].shadow); /* the program's host memory stays, now unmapped */
            continue;
        }
        if (regions[i].kind == MR_ALLOCATION)
            munmap((void *)(uintptr_t)regions[i].base, regions[i].len);
        else
            unmap_unattached(flyt_page_down(regions[i].base), flyt_page_up(regions[i].base + regions[i].len));
        flyt_range_remove(FLYT_RANGE_MANAGED, regions[i].base);
    }
    pthread_mutex_unlock(&mu);
}

/* ---- host memory mapped for the GPU ---- */

CUresult flyt_mremote_track(uint64_t base, uint64_t len, uint64_t dev)
{
    pthread_mutex_lock(&mu);
    struct mregion r = {base, len, dev, 0, room() ? malloc(len) : NULL, MR_TRACKED, 0};
    if (r.shadow == NULL) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* host code wrote it before anyone kept track: all of it goes */
    memcpy(r.shadow, (void *)(uintptr_t)base, len);
    in_exchange = 1;
    CUresult e = send_pages(&r, base, len);
    in_exchange = 0;
    if (e == CUDA_SUCCESS) {
        regions[nregions++] = r;
        atomic_store(&live, nregions);
    } else {
        free(r.shadow);
    }
    pthread_mutex_unlock(&mu);
    if (e == CUDA_SUCCESS)
        flyt_conn_set_hooks(before, after);
    return e;
}

void flyt_mremote_untrack(uint64_t base)
{
    /* the device's writes since the last wait are not brought back: the
     * memory is being freed or unregistered, after which CUDA promises none */
    struct mregion gone;
    pthread_mutex_lock(&mu);
    if (take(MR_TRACKED, base, &gone))
        free(gone.shadow);
    pthread_mutex_unlock(&mu);
}

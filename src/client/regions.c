/*
 * The memfds of host memory shared with the server (HOST_MAP, HOST_MAP_AT),
 * kept open while their regions live: a session restored from a checkpoint
 * holds its regions detached, and the client shares each again (HOST_REMAP)
 * when it resumes the session, before it replays (docs/host-memory.md).
 */
#include "client.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>

#include "flyt_hash.h"

struct kept {
    int      fd;
    uint64_t size;
    uint64_t addr;   /* HOST_MAP_AT's address; 0: HOST_MAP */
    uint32_t mapped;
};

static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static flyt_hash kept_map; /* region id -> struct kept * */
/* HOST_MAP(_AT) replies delivered whose caller has not kept the region yet:
 * a move right after such a reply waits for them, or the restored server
 * would hold the region detached with nobody to share it again. */
static atomic_int unkept;

void flyt_region_reply_delivered(void) { atomic_fetch_add(&unkept, 1); }
void flyt_region_not_kept(void) { atomic_fetch_sub(&unkept, 1); }

/* Waits (at most a second: a caller that is never scheduled keeps its
 * region detached, which fails its uses cleanly) until every delivered
 * region is kept. */
static void wait_for_keeps(void)
{
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 1000 && atomic_load(&unkept) > 0; i++)
        nanosleep(&ms, NULL);
}

void flyt_region_keep(uint64_t region, int fd, uint64_t size, uint64_t addr)
{
    struct kept *k = malloc(sizeof *k);
    if (k == NULL) { /* such a region is not shared again after a move: its uses fail then */
        flyt_region_not_kept();
        return;
    }
    *k = (struct kept){.size = size, .addr = addr, .mapped = addr != 0};
    k->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    pthread_mutex_lock(&kept_lock);
    flyt_region_not_kept(); /* now kept, or never will be */
    flyt_hash_slot *s = k->fd >= 0 && flyt_hash_find(&kept_map, region) == NULL
                            ? flyt_hash_insert(&kept_map, region)
                            : NULL;
    if (s)
        s->value.ptr = k;
    pthread_mutex_unlock(&kept_lock);
    if (s == NULL) {
        if (k->fd >= 0)
            close(k->fd);
        free(k);
    }
}

/* Closes a region's memfd; 1 when it was kept. Under kept_lock. */
static int forget_locked(uint64_t region)
{
    flyt_hash_slot *s = flyt_hash_find(&kept_map, region);
    if (s == NULL)
        return 0;
    struct kept *k = s->value.ptr;
    flyt_hash_remove_slot(&kept_map, s);
    close(k->fd);
    free(k);
    return 1;
}

CUresult flyt_region_release(uint64_t region)
{
    if (region == 0)
        return CUDA_SUCCESS;
    /* the memfd stays kept until the server let go: a move meanwhile still
     * finds the region to share again, and the replayed HOST_UNMAP drops it */
    CUresult r = flyt_call_handle(FLYT_OP_HOST_UNMAP, region);
    pthread_mutex_lock(&kept_lock);
    forget_locked(region);
    pthread_mutex_unlock(&kept_lock);
    return r;
}

void flyt_regions_forget_all(void)
{
    pthread_mutex_lock(&kept_lock);
    flyt_hash_iter it;
    flyt_hash_iter_init(&kept_map, &it);
    for (flyt_hash_slot *s; (s = flyt_hash_iter_next(&kept_map, &it)) != NULL;) {
        struct kept *k = s->value.ptr;
        close(k->fd);
        free(k);
        flyt_hash_iter_remove(&kept_map, &it);
    }
    pthread_mutex_unlock(&kept_lock);
}

int flyt_regions_each(int (*fn)(const flyt_req_host_remap *req, int fd, void *arg), void *arg,
                      size_t *count)
{
    wait_for_keeps();
    pthread_mutex_lock(&kept_lock);
    *count = flyt_hash_count(&kept_map);
    int rc = 0;
    flyt_hash_iter it;
    flyt_hash_iter_init(&kept_map, &it);
    for (flyt_hash_slot *s; fn && rc == 0 && (s = flyt_hash_iter_next(&kept_map, &it)) != NULL;) {
        const struct kept *k = s->value.ptr;
        flyt_req_host_remap req = {.id = s->key, .size = k->size, .addr = k->addr,
                                   .mapped = k->mapped};
        rc = fn(&req, k->fd, arg);
    }
    pthread_mutex_unlock(&kept_lock);
    return rc;
}

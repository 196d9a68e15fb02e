/*
 * POST /v1/servers/{session_id}/resize: a live resize of a running server's
 * share (docs/api.md). The node manager maps the server's status page
 * (src/common/flyt_server_status.h) and
 *   - stores the new memory quota, in force for the next allocation;
 *   - posts the new SM groups under the page's sequence lock and sends
 *     SIGURG to each session child, which applies them at its next request
 *     boundary (an idle one at once) after draining its work;
 * then waits up to "timeout_ms" (default 2000) for every session to
 * acknowledge, and answers with each one's result and times. A session still
 * busy (a long kernel) answers "pending": it applies the share once its work
 * drains, and sessions that connect later start on it.
 */
#include "nm.h"

#include "flyt_clock.h"
#include "flyt_log.h"
#include "flyt_server_status.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define LOAD(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* one resize at a time on this node: the page's sequence lock has one writer */
static pthread_mutex_t resize_lock = FLYT_MUTEX_INITIALIZER;

static struct flyt_server_status *map_page(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open the server's status page %s: %s", path, strerror(errno));
        return NULL;
    }
    void *m = mmap(NULL, sizeof(struct flyt_server_status), PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "cannot map the server's status page %s: %s", path, strerror(errno));
        return NULL;
    }
    struct flyt_server_status *p = m;
    if (LOAD(&p->magic) != FLYT_STATUS_MAGIC || p->version != FLYT_STATUS_VERSION) {
        snprintf(err, errlen, "the server's status page %s is not one this node manager knows "
                 "(version %u, want %u)", path, p->version, FLYT_STATUS_VERSION);
        munmap(m, sizeof *p);
        return NULL;
    }
    return p;
}

/* Posts the share; returns its generation. */
static uint64_t post_share(struct flyt_server_status *p, const struct nm_start_req *r,
                           int granularity)
{
    STORE(&p->memory_quota, (uint64_t)r->memory_quota);
    uint64_t gen = LOAD(&p->share_gen);
    gen += (gen & 1) ? 1 : 2; /* even, past the current one */
    STORE(&p->share_gen, gen - 1); /* odd: being written */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    for (int i = 0; i < r->ngroups; i++)
        __atomic_store_n(&p->share_groups[i], (uint16_t)r->groups[i], __ATOMIC_RELAXED);
    STORE(&p->share_ngroups, (uint32_t)r->ngroups);
    STORE(&p->share_granularity, (uint32_t)granularity);
    STORE(&p->share_posted_ns, flyt_mono_ns());
    STORE(&p->share_gen, gen);
    return gen;
}

/* The sessions of the page that must apply it: their slots; SIGURG sent. */
static int signal_sessions(struct flyt_server_status *p, int *slots)
{
    int n = 0;
    for (int i = 0; i < FLYT_STATUS_SLOTS; i++) {
        int32_t pid = LOAD(&p->slots[i].pid);
        if (pid <= 0)
            continue;
        if (kill(pid, SIGURG) == 0)
            slots[n++] = i;
    }
    return n;
}

static json_t *wait_acks(struct flyt_server_status *p, const int *slots, int n, uint64_t gen,
                         uint64_t posted, long long timeout_ms, int *applied, int *failed,
                         double *max_apply_ms, double *max_drain_ms, double *in_force_ms)
{
    uint64_t deadline = posted + (uint64_t)timeout_ms * 1000000ull;
    json_t *arr = json_array();
    *applied = *failed = 0;
    *max_apply_ms = *max_drain_ms = *in_force_ms = 0;
    for (int k = 0; k < n; k++) {
        struct flyt_status_slot *sl = &p->slots[slots[k]];
        struct timespec pause = {0, 50000};
        while (LOAD(&sl->share_gen) < gen && LOAD(&sl->pid) > 0 && flyt_mono_ns() < deadline)
            nanosleep(&pause, NULL);
        int32_t pid = LOAD(&sl->pid);
        if (LOAD(&sl->share_gen) < gen) {
            if (pid > 0)
                json_array_append_new(arr, json_pack("{s:i,s:s}", "pid", pid, "state", "pending"));
            continue;
        }
        int32_t result = LOAD(&sl->share_result);
        double drain = (double)LOAD(&sl->share_drain_ns) / 1e6;
        double apply = (double)LOAD(&sl->share_apply_ns) / 1e6;
        double done = (double)(LOAD(&sl->share_done_ns) - posted) / 1e6;
        if (result == 0) {
            (*applied)++;
            *max_apply_ms = apply > *max_apply_ms ? apply : *max_apply_ms;
            *max_drain_ms = drain > *max_drain_ms ? drain : *max_drain_ms;
            *in_force_ms = done > *in_force_ms ? done : *in_force_ms;
        } else {
            (*failed)++;
        }
        json_array_append_new(arr, json_pack("{s:i,s:s,s:i,s:i,s:f,s:f,s:f}", "pid", pid, "state",
                                             result == 0 ? "applied" : "failed", "result",
                                             result, "sm_count", (int)LOAD(&sl->share_sms),
                                             "drain_ms", drain, "apply_ms", apply, "in_force_ms",
                                             done));
    }
    return arr;
}

void nm_h_resize(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    if (!nm_authorized(nm, req, res))
        return;
    json_t *b = req->body;
    json_t *to = json_object_get(b, "timeout_ms");
    if (!json_is_object(b) || (to && (!json_is_integer(to) || json_integer_value(to) < 0 ||
                                      json_integer_value(to) > 600000))) {
        flyt_http_reply_error(res, 400, "bad_request", "body: expected {\"sm_groups\", "
                              "\"sm_count\", \"memory_quota\", \"timeout_ms\"?: 0..600000}");
        return;
    }
    long long timeout_ms = to ? json_integer_value(to) : 2000;
    struct nm_start_req *r = calloc(1, sizeof *r);
    if (!r) {
        flyt_http_reply_error(res, 500, "internal", "out of memory");
        return;
    }
    char path[sizeof ((struct nm_server *)0)->status_path], err[600];
    int granularity = 0, found = 0, running = 0;
    pthread_mutex_lock(&nm->lock);
    struct nm_server *s = nm_server_find(nm, req->params[0]);
    if (s) {
        found = 1;
        running = s->state == NM_RUNNING;
        snprintf(path, sizeof path, "%s", s->status_path);
        const struct nm_gpu *gpu = nm_gpu_by_index(nm, s->gpu_index);
        granularity = gpu ? gpu->sm_granularity : 0;
        if (gpu && nm_parse_share(gpu, json_object_get(b, "sm_groups"),
                                  json_object_get(b, "sm_count"),
                                  json_object_get(b, "memory_quota"), r, res) != 0)
            found = -1; /* answered */
    }
    pthread_mutex_unlock(&nm->lock);
    if (found == 0 || (found == 1 && !running)) {
        flyt_http_reply_error(res, 404, "not_found", "no running server for session %s",
                              req->params[0]);
        goto out;
    }
    if (found < 0)
        goto out;
    if (r->ngroups > FLYT_STATUS_GROUPS) {
        flyt_http_reply_error(res, 400, "bad_request", "sm_groups: at most %d groups",
                              FLYT_STATUS_GROUPS);
        goto out;
    }
    pthread_mutex_lock(&resize_lock);
    struct flyt_server_status *p = map_page(path, err, sizeof err);
    if (!p) {
        pthread_mutex_unlock(&resize_lock);
        flyt_http_reply_error(res, 500, "internal", "%s", err);
        goto out;
    }
    uint64_t gen = post_share(p, r, granularity);
    uint64_t posted = LOAD(&p->share_posted_ns);
    int slots[FLYT_STATUS_SLOTS];
    int n = signal_sessions(p, slots);
    int applied, failed;
    double apply_ms, drain_ms, in_force_ms;
    json_t *sessions = wait_acks(p, slots, n, gen, posted, timeout_ms, &applied, &failed,
                                 &apply_ms, &drain_ms, &in_force_ms);
    munmap(p, sizeof *p);
    pthread_mutex_unlock(&resize_lock);

    pthread_mutex_lock(&nm->lock);
    s = nm_server_find(nm, req->params[0]);
    if (s) { /* what the node reports from now on */
        nm_vmq_set_quota(s, r->memory_quota); /* the VM's, for all its servers here */
        s->ngroups = r->ngroups;
        memcpy(s->groups, r->groups, sizeof r->groups[0] * (size_t)r->ngroups);
        s->sm_count = r->sm_count;
        s->memory_quota = r->memory_quota;
        nm_server_record(nm, s); /* a later run adopts it with this share */
    }
    pthread_mutex_unlock(&nm->lock);
    int pending = (int)json_array_size(sessions) - applied - failed;
    flyt_info("session %s resized to %d SMs and %lld bytes: %d session(s) applied, %d pending, "
              "%d failed; apply %.3f ms after a drain of %.3f ms, in force %.3f ms after posting",
              req->params[0], r->sm_count, r->memory_quota, applied, pending, failed, apply_ms,
              drain_ms, in_force_ms);
    flyt_http_reply_json(res, 200,
                         json_pack("{s:i,s:I,s:i,s:i,s:i,s:f,s:f,s:f,s:o}", "sm_count", r->sm_count,
                                   "memory_quota", (json_int_t)r->memory_quota, "applied", applied,
                                   "pending", pending, "failed", failed, "apply_ms", apply_ms,
                                   "drain_ms", drain_ms, "in_force_ms", in_force_ms, "sessions",
                                   sessions));
out:
    free(r);
}

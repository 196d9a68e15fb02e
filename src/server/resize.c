/* Live resize, the session's side: see resize.h. */
#include "resize.h"
#include "stream_attrs.h"

#include "flyt_clock.h"
#include "flyt_log.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#define LOAD(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static int share_groups[FLYT_STATUS_GROUPS]; /* the page's share, read once whole */

void flyt_resize_init(flyt_session *s)
{
    s->share_sigfd = -1;
    if (!flyt_status_page())
        return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGURG);
    /* threads the driver makes later inherit the mask: none takes the signal */
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
        return;
    s->share_sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (s->share_sigfd < 0)
        flyt_warn("no signalfd (%s): an idle session applies a resize at its next request",
                  strerror(errno));
}

/* A consistent copy of the page's share (sequence lock): its generation, 0
 * when there is none. */
static uint64_t read_share(int *ngroups, unsigned *granularity)
{
    struct flyt_server_status *p = flyt_status_page();
    if (!p)
        return 0;
    for (;;) {
        uint64_t g1 = LOAD(&p->share_gen);
        if (g1 == 0)
            return 0;
        if (g1 & 1) { /* being written */
            sched_yield();
            continue;
        }
        uint32_t n = LOAD(&p->share_ngroups);
        unsigned gran = LOAD(&p->share_granularity);
        if (n > FLYT_STATUS_GROUPS)
            n = FLYT_STATUS_GROUPS;
        for (uint32_t i = 0; i < n; i++)
            share_groups[i] = __atomic_load_n(&p->share_groups[i], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (LOAD(&p->share_gen) == g1) {
            *ngroups = (int)n;
            *granularity = gran;
            return g1;
        }
    }
}

void flyt_resize_initial(flyt_session *s, const int **groups, int *ngroups, unsigned *granularity)
{
    int n = 0;
    unsigned gran = 0;
    uint64_t gen = read_share(&n, &gran);
    if (gen == 0 || n <= 0 || gran == 0)
        return;
    s->share_gen = gen;
    *groups = share_groups;
    *ngroups = n;
    *granularity = gran;
}

struct remap_ctx {
    flyt_bhandle old, now;
};

static int remap_one(struct flyt_hentry *e, void *arg)
{
    const struct remap_ctx *m = arg;
    if (e->type == FLYT_H_STREAM && e->bh == m->old)
        e->bh = m->now;
    return 0;
}

/* The backend moved a stream: the client's id now names the new one. */
static void remap_stream(void *arg, flyt_bhandle old, flyt_bhandle now)
{
    flyt_session *s = arg;
    struct remap_ctx m = {old, now};
    flyt_handles_foreach(&s->handles, remap_one, &m);
}

static void acknowledge(uint64_t gen, int32_t result, int sms, uint64_t drain_ns, uint64_t apply_ns)
{
    struct flyt_server_status *p = flyt_status_page();
    if (!p || flyt_quota_my_slot() < 0)
        return;
    struct flyt_status_slot *sl = &p->slots[flyt_quota_my_slot()];
    STORE(&sl->share_result, result);
    STORE(&sl->share_sms, (uint32_t)sms);
    STORE(&sl->share_drain_ns, drain_ns);
    STORE(&sl->share_apply_ns, apply_ns);
    STORE(&sl->share_done_ns, flyt_mono_ns());
    STORE(&sl->share_gen, gen); /* last: the node manager waits for it */
}

/* What the device reports now goes to the client before any reply on the
 * new share, also after a failed SM change (the memory quota changed). */
static void tell_client(flyt_session *s)
{
    int sms = 0;
    if (FLYT_BCALL(s, device_attr, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &sms) != CUDA_SUCCESS)
        sms = s->sm_count;
    flyt_send_share_changed(s, sms, flyt_device_total_mem(s));
}

static void apply(flyt_session *s, uint64_t gen, int ngroups, unsigned gran)
{
    s->share_gen = gen;
    if (!s->b) { /* not admitted yet: it starts on the page's share (flyt_resize_initial) */
        acknowledge(gen, CUDA_SUCCESS, 0, 0, 0);
        return;
    }
    uint64_t t0 = flyt_mono_ns();
    /* the drain: nothing of the old share runs once the new one is in force */
    flyt_watch_enter(&s->watch, FLYT_WATCH_RESIZE, 0); /* a kernel that never ends blocks it */
    CUresult r = s->b->ops->device_sync ? s->b->ops->device_sync(s->b) : CUDA_SUCCESS;
    uint64_t t1 = flyt_mono_ns();
    int sms = s->sm_count;
    if (r == CUDA_SUCCESS)
        r = FLYT_BCALL(s, resize_sm_share, gran, share_groups, ngroups, &sms, remap_stream, s);
    flyt_watch_leave(&s->watch);
    uint64_t t2 = flyt_mono_ns();
    if (r == CUDA_SUCCESS) {
        s->sm_count = sms;
        flyt_stream_attrs_reapply(s);
        struct flyt_server_status *p = flyt_status_page();
        STORE(&p->sm_count, (uint32_t)sms);
        flyt_info("session for %s resized to %d SMs (%d group(s) of %u): drain %.3f ms, apply "
                  "%.3f ms", s->peer, sms, ngroups, gran, (double)(t1 - t0) / 1e6,
                  (double)(t2 - t1) / 1e6);
    } else {
        flyt_error("session for %s: resize to %d SM group(s) of %u failed (CUDA error %d); the "
                   "share stays %d SMs", s->peer, ngroups, gran, (int)r, s->sm_count);
    }
    tell_client(s);
    acknowledge(gen, (int32_t)r, s->sm_count, t1 - t0, t2 - t1);
}

/* A share posted while a stream capture is open waits for its end (moving the streams
 * would cut the capture's graph off them), at most this long, within the node
 * manager's 2 s wait for the acknowledgement; then apply refuses it as before. */
#define CAPTURE_WAIT_MS 1000

void flyt_resize_poll(flyt_session *s)
{
    struct flyt_server_status *p = flyt_status_page();
    if (!p || LOAD(&p->share_gen) == s->share_gen)
        return; /* the common case: one load */
    int n = 0;
    unsigned gran = 0;
    uint64_t gen = read_share(&n, &gran);
    if (gen != 0 && gen != s->share_gen &&
        !flyt_capture_holds(s, &s->share_hold, gen, CAPTURE_WAIT_MS, "new share"))
        apply(s, gen, n, gran);
}

static void drain_signals(int fd)
{
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof si) == (ssize_t)sizeof si)
        ;
}

int flyt_resize_wait(flyt_session *s)
{
    if (s->share_sigfd < 0)
        return 0;
    struct pollfd pf[2] = {{.fd = s->link.fd, .events = POLLIN}, {.fd = s->share_sigfd, .events = POLLIN}};
    /* a request held for an open capture is looked at again at its deadline */
    const struct flyt_capture_hold *held[2] = {&s->ckpt_hold, &s->share_hold};
    long long wake = 0;
    for (int i = 0; i < 2; i++)
        if (held[i]->gen && (!wake || held[i]->until_ms < wake))
            wake = held[i]->until_ms;
    int timeout = -1;
    if (wake) {
        long long left = wake + 1 - flyt_mono_ms();
        timeout = left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
    }
    int n = poll(pf, 2, timeout);
    if (n == 0)
        return 1; /* the deadline: serve() looks again */
    if (n > 0 && (pf[1].revents & POLLIN)) {
        drain_signals(s->share_sigfd);
        return !(pf[0].revents & (POLLIN | POLLHUP | POLLERR));
    }
    return 0; /* data, an end, or an error: the read that follows tells */
}

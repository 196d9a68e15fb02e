/* The hang-up watch: see session_watch.h. */
#include "session_watch.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "calls.h"
#include "flyt_log.h"
#include "flyt_proto.h"
#include "flyt_transport.h"
#include "session.h"

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* The call a busy word names, in words. */
static const char *call_name(uint64_t busy)
{
    unsigned op = (unsigned)(busy & 0xffff), what = (unsigned)(busy >> 16 & 0xffff);
    if (op == FLYT_WATCH_RESIZE)
        return "a live resize's device synchronise";
    const struct flyt_call_desc *d = op == FLYT_OP_CALL ? flyt_call_desc(what) : NULL;
    return d ? d->symbol : flyt_op_name(op);
}

/* The session thread cannot be unwound from inside the driver: the process
 * ends as a session whose client left does (exit status 0), without the
 * exit handlers (the driver's would wait on the blocked context). The parent
 * reaps it and frees its slots as for any session. */
static void end_session(struct flyt_watch *w, uint64_t busy, uint64_t waited_ms)
{
    double s = (double)waited_ms / 1000.0;
    const char *left = flyt_peer_vanished(flyt_socket_error(w->fd))
                           ? "stopped answering (its machine or network is gone: no answer to "
                             "TCP keepalive)"
                           : "hung up";
    if ((busy & 0xffff) == FLYT_WATCH_CLOSE) /* the session was over already */
        flyt_info("%s is gone and closing its session's context has taken %.1f s (a kernel "
                  "still running?); ending the process so that the driver frees the context",
                  w->peer, s);
    else
        flyt_info("%s %s while its session waited (%.1f s so far) in %s; ending the "
                  "session so that the driver frees its context", w->peer, left, s,
                  call_name(busy));
    _exit(FLYT_EXIT_OK);
}

static void *watch_main(void *arg)
{
    struct flyt_watch *w = arg;
    uint64_t seen = 0, seen_at = 0; /* the call last seen, and since when */
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += FLYT_WATCH_TICK_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&w->cv, &w->mu, &until);
        uint64_t busy = __atomic_load_n(&w->busy, __ATOMIC_RELAXED), now = now_ms();
        if (busy == 0 || busy != seen) {
            seen = busy; /* a new call (or none): its time starts now */
            seen_at = now;
        } else if (now - seen_at >= FLYT_WATCH_AFTER_MS && flyt_peer_hung_up(w->fd)) {
            end_session(w, busy, now - seen_at); /* it began up to a tick earlier */
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int flyt_watch_start(struct flyt_watch *w, int fd, const char *peer)
{
    w->fd = fd;
    w->peer = peer;
    w->stop = 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w->mu, NULL);
    /* no signal for the watcher: the session takes SIGURG through a signalfd,
     * which sees only signals blocked in every thread */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, watch_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        flyt_warn("no hang-up watch for %s: %s; a call blocked in the driver outlives its client",
                  peer, strerror(rc));
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        return -1;
    }
    w->started = 1;
    return 0;
}

void flyt_watch_stop(struct flyt_watch *w)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->started = 0;
}

/*
 * The hang-up watch (issue 8): a session thread blocked inside one backend
 * call (a synchronisation waiting for a kernel that never ends) reads no
 * socket, so it never learns that its client is gone, and the session would
 * hold its context, SMs and memory for ever. A watcher thread of the session
 * process looks at the call in progress every FLYT_WATCH_TICK_MS; once the
 * same call has lasted FLYT_WATCH_AFTER_MS and the client has hung up, it logs
 * one line and ends the process, and the driver reclaims the context. A TCP
 * client whose machine vanished (no FIN, no reset) looks hung up once TCP
 * keepalive gave up on it (flyt-server --keepalive, flyt_keepalive_set).
 *
 * The session thread's cost: one relaxed store as a call begins, one as it
 * ends. Only requests (dispatch), a live resize and closing the backend are
 * marked; a checkpoint and the session move after it run unmarked, so the
 * watch never ends a session whose connection is closed on purpose then.
 */
#ifndef FLYT_SESSION_WATCH_H
#define FLYT_SESSION_WATCH_H

#include <pthread.h>
#include <stdint.h>

#define FLYT_WATCH_AFTER_MS 1000 /* a call this long looks at its client */
#define FLYT_WATCH_TICK_MS  250  /* how often the watcher looks */

/* Calls that are no request: op numbers no request has. */
#define FLYT_WATCH_RESIZE 0xfffe /* a live resize draining the device */
#define FLYT_WATCH_CLOSE  0xffff /* closing the backend at the session's end */

struct flyt_watch {
    uint64_t        busy; /* the call in progress (atomic): gen << 32 | what << 16 | op, 0: none */
    uint32_t        gen;  /* calls begun (the session thread's own) */
    int             fd;   /* the client's socket */
    const char     *peer;
    int             started, stop;
    pthread_t       thread;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
};

/* Starts the watcher thread on the client's socket fd. 0, or -1 (logged:
 * the session then runs unwatched). */
int flyt_watch_start(struct flyt_watch *w, int fd, const char *peer);
/* Stops and joins the watcher (none started: nothing to do). */
void flyt_watch_stop(struct flyt_watch *w);

/* A call begins: op (a request's, or FLYT_WATCH_*) and what narrows it down
 * (a CALL's call id, else 0). The session thread. */
static inline void flyt_watch_enter(struct flyt_watch *w, unsigned op, uint32_t what)
{
    uint64_t word = (uint64_t)++w->gen << 32 | (uint64_t)(what & 0xffff) << 16 | (op & 0xffff);
    __atomic_store_n(&w->busy, word, __ATOMIC_RELAXED);
}

static inline void flyt_watch_leave(struct flyt_watch *w)
{
    __atomic_store_n(&w->busy, 0, __ATOMIC_RELAXED);
}

#endif

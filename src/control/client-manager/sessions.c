/*
 * The pid -> session table and the two threads that keep it true.
 *
 * An entry is ACQUIRING while its process's request is at the cluster manager, LIVE
 * once it has a session, ENDED when its process ended (or asked to release) and the
 * release is pending, GONE when the cluster manager ended the session on its side (the
 * process still runs; a new request from it gets a new session).
 *
 * The watcher thread notices ended processes: it polls a pidfd per process (readable
 * when the process exits, including by SIGKILL, zombie or not), or, without pidfd
 * support, rereads /proc/PID/stat twice a second (gone, a zombie, or a different start
 * time all mean "ended"). Only the watcher closes pidfds, and only while it is not
 * polling, so a descriptor number is never reused under its poll.
 *
 * The worker thread talks to the cluster manager for everything but creation: DELETE
 * for ENDED entries (retried with exponential backoff up to retry_max_backoff while
 * the cluster manager does not answer) and `alive` for LIVE ones every alive_interval.
 * Creation runs on the requesting connection's thread (sessions_acquire), retried
 * with backoff within acquire_timeout.
 */
#include "cmgr.h"

#include "flyt_log.h"
#include "flyt_proc.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

enum ent_state { ENT_ACQUIRING, ENT_LIVE, ENT_ENDED, ENT_GONE };
static const char *const state_names[] = {"acquiring", "live", "ended", "gone"};

struct ent {
    pid_t pid;
    unsigned long long start; /* /proc start time: tells a reused pid apart */
    int pidfd;                /* -1: watched through /proc, or no longer watched */
    int dead;                 /* the process ended while ACQUIRING */
    enum ent_state state;
    struct cluster_session s;
    const char *why;          /* why it ended, for the log */
    uint64_t next_alive, next_retry, backoff;
    struct ent *next;
};

static struct {
    const struct cmgr_config *c;
    pthread_mutex_t lock;
    pthread_cond_t changed; /* CLOCK_MONOTONIC: entries changed, or stopping */
    struct ent *list;
    int stopping;
    int wake_fd;            /* eventfd: the watcher rebuilds its poll set */
    int use_pidfd;
    int *to_close;          /* pidfds the watcher closes at its next turn */
    int n_close, cap_close;
    pthread_t watcher, worker;
    int threads;
    int cluster_down;            /* the last call to the cluster manager got no answer */
    unsigned long long acquired, acquire_failed, reused, released, release_failed,
        release_retries, alive_sent, alive_failed, ended_by_cluster;
} sessions = {.lock = FLYT_MUTEX_INITIALIZER, .wake_fd = -1};

uint64_t cmgr_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static void process_name(pid_t pid, char *out, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    if (fgets(out, (int)cap, f) == NULL)
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

static void wake_watcher(void)
{
    uint64_t one = 1;
    if (sessions.wake_fd >= 0)
        (void)!write(sessions.wake_fd, &one, sizeof one);
}

/* lock held. The watcher closes it when it is not polling. */
static void drop_pidfd(struct ent *e)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    if (e->pidfd < 0)
        return;
    if (sessions.n_close == sessions.cap_close) {
        int cap = sessions.cap_close ? sessions.cap_close * 2 : 16;
        int *p = realloc(sessions.to_close, (size_t)cap * sizeof *p);
        if (p == NULL) {
            flyt_error("out of memory: pidfd %d of pid %d stays open", e->pidfd, (int)e->pid);
            e->pidfd = -1;
            return;
        }
        sessions.to_close = p;
        sessions.cap_close = cap;
    }
    sessions.to_close[sessions.n_close++] = e->pidfd;
    e->pidfd = -1;
    wake_watcher();
}

/* lock held */
static void unlink_ent(struct ent *e)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    for (struct ent **pp = &sessions.list; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    drop_pidfd(e);
    explicit_bzero(e->s.token, sizeof e->s.token);
    free(e);
    pthread_cond_broadcast(&sessions.changed); /* an acquire may wait for this release */
}

/* lock held: the state file names the live sessions (reconcile.c). */
static void held_save_locked(void)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    int n = 0, k = 0;
    for (struct ent *e = sessions.list; e; e = e->next)
        n += e->state == ENT_LIVE;
    struct cmgr_held *h = calloc((size_t)n + 1, sizeof *h);
    if (h == NULL)
        return;
    for (struct ent *e = sessions.list; e; e = e->next)
        if (e->state == ENT_LIVE) {
            snprintf(h[k].id, sizeof h[k].id, "%s", e->s.id);
            h[k].pid = e->pid;
            h[k++].start = e->start;
        }
    held_save(sessions.c->state_path, h, k);
    free(h);
}

/* lock held: the release of e's session is due now. */
static void end_ent(struct ent *e, const char *why)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    e->state = ENT_ENDED;
    e->why = why;
    e->next_retry = 0;
    e->backoff = 0;
    drop_pidfd(e);
    held_save_locked();
    pthread_cond_broadcast(&sessions.changed);
}

/* lock held: e's process is gone. */
static void process_ended(struct ent *e)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    switch (e->state) {
    case ENT_ACQUIRING:
        e->dead = 1;
        drop_pidfd(e);
        break;
    case ENT_LIVE:
        flyt_info("process %d ended: releasing session %s", (int)e->pid, e->s.id);
        end_ent(e, "process ended");
        break;
    case ENT_GONE:
        unlink_ent(e);
        break;
    case ENT_ENDED:
        break;
    }
}

/* lock held: the answer (or not) of a call, for the "unreachable"/"back" log lines. */
static void note_cluster(enum cluster_outcome o, const char *err)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    if (o == CLUSTER_RETRY && !sessions.cluster_down) {
        sessions.cluster_down = 1;
        flyt_warn("cluster manager %s unreachable: %s; retrying with backoff", sessions.c->cluster_url,
                  err);
    } else if (o != CLUSTER_RETRY && sessions.cluster_down) {
        sessions.cluster_down = 0;
        flyt_info("cluster manager %s answers again", sessions.c->cluster_url);
    }
}

/* lock held: waits on sessions.changed until ms (monotonic) or a signal */
static void wait_until(uint64_t ms)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    pthread_cond_timedwait(&sessions.changed, &sessions.lock, &ts);
}

/* ---- the watcher ---- */

static void *watcher_main(void *arg)
{
    (void)arg;
    struct pollfd *pfds = NULL;
    int cap = 0;
    pthread_mutex_lock(&sessions.lock);
    while (!sessions.stopping) {
        for (int i = 0; i < sessions.n_close; i++)
            close(sessions.to_close[i]);
        sessions.n_close = 0;
        int n = 1, proc_scan = 0;
        for (struct ent *e = sessions.list; e; e = e->next)
            n++;
        if (n > cap) {
            struct pollfd *p = realloc(pfds, (size_t)n * sizeof *p);
            if (p == NULL) {
                flyt_error("out of memory in the process watcher");
                pthread_mutex_unlock(&sessions.lock);
                sleep(1);
                pthread_mutex_lock(&sessions.lock);
                continue;
            }
            pfds = p;
            cap = n;
        }
        n = 0;
        pfds[n++] = (struct pollfd){.fd = sessions.wake_fd, .events = POLLIN};
        for (struct ent *e = sessions.list; e; e = e->next) {
            if (e->state == ENT_ENDED || e->dead)
                continue;
            if (e->pidfd >= 0)
                pfds[n++] = (struct pollfd){.fd = e->pidfd, .events = POLLIN};
            else
                proc_scan = 1;
        }
        pthread_mutex_unlock(&sessions.lock);
        int rc = poll(pfds, (nfds_t)n, proc_scan ? 500 : -1);
        if (rc < 0 && errno != EINTR)
            flyt_error("process watcher: poll: %s", strerror(errno));
        if (pfds[0].revents & POLLIN) {
            uint64_t v;
            (void)!read(sessions.wake_fd, &v, sizeof v);
        }
        pthread_mutex_lock(&sessions.lock);
        for (int i = 1; i < n && rc > 0; i++) {
            if (!pfds[i].revents)
                continue;
            for (struct ent *e = sessions.list; e; e = e->next)
                if (e->pidfd == pfds[i].fd) {
                    process_ended(e);
                    break;
                }
        }
        if (proc_scan) {
            for (struct ent *e = sessions.list, *next; e; e = next) {
                next = e->next;
                if (e->pidfd >= 0 || e->state == ENT_ENDED || e->dead)
                    continue;
                unsigned long long start;
                int ended;
                if (flyt_proc_start_time(e->pid, &start, &ended) < 0 || ended || start != e->start)
                    process_ended(e);
            }
        }
    }
    for (int i = 0; i < sessions.n_close; i++)
        close(sessions.to_close[i]);
    sessions.n_close = 0;
    pthread_mutex_unlock(&sessions.lock);
    free(pfds);
    return NULL;
}

/* ---- the worker ---- */

static long call_timeout(void) { return (long)sessions.c->request_timeout_ms; }

/* lock held; returns with it held. One release attempt for e; 1 when e is gone (freed). */
static int release_one(struct ent *e, long timeout_ms)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    char id[sizeof e->s.id], err[512] = "";
    snprintf(id, sizeof id, "%s", e->s.id);
    pthread_mutex_unlock(&sessions.lock);
    enum cluster_outcome o = cluster_session_release(sessions.c, id, timeout_ms, err, sizeof err);
    pthread_mutex_lock(&sessions.lock);
    note_cluster(o, err);
    if (o == CLUSTER_OK || o == CLUSTER_GONE) {
        flyt_info("released session %s of process %d (%s)%s", id, (int)e->pid, e->why,
                  o == CLUSTER_GONE ? "; the cluster manager had already ended it" : "");
        sessions.released++;
        unlink_ent(e);
        return 1;
    }
    if (o == CLUSTER_REFUSED) {
        flyt_error("the cluster manager refused to release session %s of process %d: %s; "
                   "giving up on it", id, (int)e->pid, err);
        sessions.release_failed++;
        unlink_ent(e);
        return 1;
    }
    {
        uint64_t max = (uint64_t)sessions.c->retry_max_ms;
        e->backoff = e->backoff ? e->backoff * 2 : 1000;
        if (e->backoff > max)
            e->backoff = max;
        e->next_retry = cmgr_now_ms() + e->backoff;
        sessions.release_retries++;
        if (!sessions.stopping)
            flyt_info("release of session %s (process %d) deferred: %s; next try in %.1f s", id,
                      (int)e->pid, err, (double)e->backoff / 1000.0);
    }
    return 0;
}

/* lock held; returns with it held. */
static void alive_one(struct ent *e)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    char id[sizeof e->s.id], err[512] = "";
    snprintf(id, sizeof id, "%s", e->s.id);
    pthread_mutex_unlock(&sessions.lock);
    enum cluster_outcome o = cluster_session_alive(sessions.c, id, call_timeout(), err, sizeof err);
    pthread_mutex_lock(&sessions.lock);
    note_cluster(o, err);
    e->next_alive = cmgr_now_ms() + (uint64_t)sessions.c->alive_interval_ms;
    if (o == CLUSTER_OK) {
        sessions.alive_sent++;
        return;
    }
    sessions.alive_failed++;
    if (e->state != ENT_LIVE)
        return; /* it ended meanwhile */
    if (o == CLUSTER_GONE) {
        flyt_warn("the cluster manager ended session %s of process %d (%s); the process "
                  "keeps no GPU, a new request from it gets a new session", id, (int)e->pid, err);
        sessions.ended_by_cluster++;
        e->state = ENT_GONE;
        held_save_locked();
        pthread_cond_broadcast(&sessions.changed);
    } else if (o == CLUSTER_REFUSED) {
        flyt_error("alive for session %s of process %d refused: %s", id, (int)e->pid, err);
    }
}

/* lock held: reconciles with what an earlier run left (reconcile.c) until the cluster
 * manager answers or the client manager stops. */
static void reconcile_locked(void)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    uint64_t backoff = 1000;
    while (!sessions.stopping) {
        pthread_mutex_unlock(&sessions.lock);
        enum cluster_outcome o = reconcile_once(sessions.c);
        pthread_mutex_lock(&sessions.lock);
        if (o != CLUSTER_RETRY)
            return;
        wait_until(cmgr_now_ms() + backoff);
        backoff = backoff * 2 > (uint64_t)sessions.c->retry_max_ms ? (uint64_t)sessions.c->retry_max_ms
                                                                  : backoff * 2;
    }
}

static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&sessions.lock);
    reconcile_locked();
    while (!sessions.stopping) {
        uint64_t now = cmgr_now_ms(), next = now + 60000;
        struct ent *due = NULL;
        int release = 0;
        for (struct ent *e = sessions.list; e; e = e->next) {
            if (e->state == ENT_ENDED) {
                if (e->next_retry <= now) {
                    due = e;
                    release = 1;
                    break;
                }
                if (e->next_retry < next)
                    next = e->next_retry;
            } else if (e->state == ENT_LIVE) {
                if (e->next_alive <= now && due == NULL)
                    due = e; /* releases first: keep looking */
                else if (e->next_alive < next)
                    next = e->next_alive;
            }
        }
        if (due && release)
            release_one(due, call_timeout());
        else if (due)
            alive_one(due);
        else
            wait_until(next);
    }
    pthread_mutex_unlock(&sessions.lock);
    return NULL;
}

/* ---- the API of this module ---- */

int sessions_start(const struct cmgr_config *c, char *err, size_t errlen)
{
    sessions.c = c;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sessions.changed, &ca);
    pthread_condattr_destroy(&ca);

    int fd = flyt_pidfd_open(getpid());
    int have_pidfd = fd >= 0;
    if (fd >= 0)
        close(fd);
    if (c->watch == WATCH_PIDFD && !have_pidfd) {
        snprintf(err, errlen, "process_watch = pidfd, but this kernel has no pidfd_open (%s); "
                 "use auto or proc", strerror(errno));
        return -1;
    }
    sessions.use_pidfd = c->watch != WATCH_PROC && have_pidfd;
    flyt_info("watching processes through %s", sessions.use_pidfd ? "pidfd" : "/proc (polled twice a second)");

    sessions.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sessions.wake_fd < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        return -1;
    }
    if (pthread_create(&sessions.watcher, NULL, watcher_main, NULL) != 0) {
        snprintf(err, errlen, "cannot start the process watcher");
        return -1;
    }
    sessions.threads = 1;
    if (pthread_create(&sessions.worker, NULL, worker_main, NULL) != 0) {
        snprintf(err, errlen, "cannot start the worker");
        return -1;
    }
    sessions.threads = 2;
    return 0;
}

/* lock held: the entry a new request from pid concerns (not ended ones). */
static struct ent *find_pid(pid_t pid)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    for (struct ent *e = sessions.list; e; e = e->next)
        if (e->pid == pid && e->state != ENT_ENDED && !e->dead)
            return e;
    return NULL;
}

/* Lock held: a session pid's process released (op=release) that the cluster manager has
 * not yet been told of; it would hand that very session back to a new request. */
static int release_pending(pid_t pid, unsigned long long start)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    for (struct ent *e = sessions.list; e; e = e->next)
        if (e->pid == pid && e->start == start && e->state == ENT_ENDED && !e->dead)
            return 1;
    return 0;
}

static void answer_from(const struct ent *e, struct acquire_answer *ans)
{
    snprintf(ans->session_id, sizeof ans->session_id, "%s", e->s.id);
    snprintf(ans->endpoint, sizeof ans->endpoint, "%s", e->s.endpoint);
    snprintf(ans->token, sizeof ans->token, "%s", e->s.token);
}

/* Lock held: what pid's earlier requests left. 0 when a new session is to be made (with the
 * process's start time); 1 when its live session answers; -1 with why it cannot be served. */
static int acquire_existing_locked(pid_t pid, unsigned long long want_start, uint64_t deadline,
                                   struct acquire_answer *ans, unsigned long long *start,
                                   char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    for (;;) {
        int ended;
        if (sessions.stopping) {
            snprintf(err, errlen, "the client manager is stopping");
            return -1;
        }
        if (flyt_proc_start_time(pid, start, &ended) < 0 || ended ||
            (want_start && *start != want_start)) {
            snprintf(err, errlen, "process %d has ended", (int)pid);
            return -1;
        }
        struct ent *e = find_pid(pid);
        if (e && e->start != *start) { /* the pid was reused: that process ended */
            process_ended(e);
        } else if (e && e->state == ENT_ACQUIRING) { /* the same process asks twice at once */
            if (cmgr_now_ms() >= deadline) {
                snprintf(err, errlen, "an earlier request of process %d is still pending",
                         (int)pid);
                return -1;
            }
            wait_until(deadline);
        } else if (e && e->state == ENT_LIVE) {
            answer_from(e, ans);
            sessions.reused++;
            return 1;
        } else if (e && e->state == ENT_GONE) {
            unlink_ent(e);
        } else if (e == NULL && release_pending(pid, *start)) {
            if (cmgr_now_ms() >= deadline) {
                snprintf(err, errlen, "the previous session of process %d is still being "
                         "released; ask again", (int)pid);
                return -1;
            }
            wait_until(deadline);
        } else {
            return 0;
        }
    }
}

/* Lock held: the entry of a session being made for pid, watched; NULL with why. */
static struct ent *ent_new_locked(pid_t pid, unsigned long long start, char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    struct ent *e = calloc(1, sizeof *e);
    if (e == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    e->pid = pid;
    e->start = start;
    e->pidfd = -1;
    e->state = ENT_ACQUIRING;
    if (sessions.use_pidfd) {
        e->pidfd = flyt_pidfd_open(pid);
        if (e->pidfd < 0) {
            int saved = errno;
            free(e);
            snprintf(err, errlen, "cannot watch process %d: %s", (int)pid, strerror(saved));
            return NULL;
        }
        /* pidfd_open after reading the start time: make sure it is still that process */
        unsigned long long again;
        int ended;
        if (flyt_proc_start_time(pid, &again, &ended) < 0 || again != start)
            e->dead = 1;
    }
    e->next = sessions.list;
    sessions.list = e;
    wake_watcher();
    return e;
}

/* Lock NOT held: asks the cluster manager for e's session until it answers, the deadline
 * passes, the process ends or the client manager stops (backing off between tries). */
static enum cluster_outcome ask_cluster(struct ent *e, const char *comm, uint64_t deadline,
                                        struct cluster_session *s, char *cerr, size_t cerrlen,
                                        int *tries)
{
    enum cluster_outcome o = CLUSTER_RETRY;
    uint64_t backoff = 250;
    for (;;) {
        long left = (long)(deadline - cmgr_now_ms());
        if (left <= 0)
            return o;
        long per_call = (long)sessions.c->request_timeout_ms;
        per_call = per_call < left ? per_call : left;
        if (per_call < 1000)
            per_call = 1000;
        ++*tries;
        o = cluster_session_create(sessions.c, e->pid, comm, per_call, s, cerr, cerrlen);
        pthread_mutex_lock(&sessions.lock);
        note_cluster(o, cerr);
        int stop = o != CLUSTER_RETRY || sessions.stopping || e->dead;
        if (!stop) {
            flyt_info("session for process %d (%s) not obtained yet: %s; retrying in %.2f s",
                      (int)e->pid, comm, cerr, (double)backoff / 1000.0);
            wait_until(cmgr_now_ms() + backoff);
            stop = sessions.stopping || e->dead;
        }
        pthread_mutex_unlock(&sessions.lock);
        if (stop)
            return o;
        backoff = backoff * 2 > 4000 ? 4000 : backoff * 2;
    }
}

/* Lock held: e's session made (it goes live unless its process ended or the client
 * manager stops meanwhile). 0 with ans, or -1 with why. */
static int acquired_locked(struct ent *e, struct cluster_session *s, struct acquire_answer *ans,
                           char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&sessions.lock);
    e->s = *s;
    explicit_bzero(s->token, sizeof s->token);
    if (s->vm_id[0] && strcmp(s->vm_id, sessions.c->vm_id) != 0)
        flyt_warn("session %s belongs to VM %s, but vm_id is %s: check the config", s->id,
                  s->vm_id, sessions.c->vm_id);
    if (e->dead || sessions.stopping) {
        end_ent(e, e->dead ? "process ended while the session was being made"
                           : "the client manager is stopping");
        snprintf(err, errlen, "%s", e->dead ? "the process ended" : "the client manager is stopping");
        return -1;
    }
    e->state = ENT_LIVE;
    held_save_locked(); /* before the process hears of it: a restart finds it */
    e->next_alive = cmgr_now_ms() + (uint64_t)sessions.c->alive_interval_ms;
    answer_from(e, ans);
    sessions.acquired++;
    return 0;
}

/* A process that asks again already holds a live session, which may have moved since
 * (migration, restore on another node): the cluster answers the same process with its
 * session's endpoint now and a fresh token, and the entry follows. The answer kept
 * stands when the cluster cannot say now (unreachable, or the session between nodes:
 * the client tries again). */
static void refresh_live(pid_t pid, struct acquire_answer *ans)
{
    char comm[64], cerr[512] = "";
    process_name(pid, comm, sizeof comm);
    struct cluster_session s;
    enum cluster_outcome o = cluster_session_create(sessions.c, pid, comm,
                                                    (long)sessions.c->request_timeout_ms, &s,
                                                    cerr, sizeof cerr);
    if (o != CLUSTER_OK) {
        flyt_debug("process %d asked again; its session's endpoint stays as it was (%s)",
                   (int)pid, cerr);
        return;
    }
    pthread_mutex_lock(&sessions.lock);
    note_cluster(o, cerr);
    struct ent *e = find_pid(pid);
    if (e && e->state == ENT_LIVE) {
        if (strcmp(e->s.id, s.id) != 0)
            flyt_warn("process %d: session %s ended; the cluster gave it %s", (int)pid, e->s.id,
                      s.id);
        else if (strcmp(e->s.endpoint, s.endpoint) != 0)
            flyt_info("process %d: session %s moved to %s", (int)pid, s.id, s.endpoint);
        e->s = s;
        held_save_locked();
        answer_from(e, ans);
    }
    pthread_mutex_unlock(&sessions.lock);
    explicit_bzero(s.token, sizeof s.token);
}

/* sessions_acquire, for the process of start time want_start only (0: any). */
static int acquire_pid(pid_t pid, unsigned long long want_start, struct acquire_answer *ans,
                       char *err, size_t errlen)
{
    uint64_t t0 = cmgr_now_ms(), deadline = t0 + (uint64_t)sessions.c->acquire_timeout_ms;
    unsigned long long start;
    pthread_mutex_lock(&sessions.lock);
    int existing = acquire_existing_locked(pid, want_start, deadline, ans, &start, err, errlen);
    struct ent *e = existing == 0 ? ent_new_locked(pid, start, err, errlen) : NULL;
    pthread_mutex_unlock(&sessions.lock);
    if (existing > 0) {
        flyt_debug("process %d asked again: session %s", (int)pid, ans->session_id);
        refresh_live(pid, ans);
    }
    if (e == NULL)
        return existing > 0 ? 0 : -1;

    char comm[64], cerr[512] = "";
    process_name(pid, comm, sizeof comm);
    struct cluster_session s;
    int tries = 0;
    enum cluster_outcome o = ask_cluster(e, comm, deadline, &s, cerr, sizeof cerr, &tries);

    pthread_mutex_lock(&sessions.lock);
    int rc = -1;
    if (o == CLUSTER_OK) {
        rc = acquired_locked(e, &s, ans, err, errlen);
        if (rc == 0)
            flyt_info("process %d (%s): session %s at %s (%.1f s, %d %s)", (int)pid, comm, s.id,
                      s.endpoint, (double)(cmgr_now_ms() - t0) / 1000.0, tries,
                      tries == 1 ? "try" : "tries");
    } else {
        sessions.acquire_failed++;
        if (o == CLUSTER_RETRY)
            snprintf(err, errlen, "the cluster manager did not give a session within %.0f s: %s",
                     (double)sessions.c->acquire_timeout_ms / 1000.0, cerr[0] ? cerr : "stopped");
        else
            snprintf(err, errlen, "%s", cerr);
        flyt_warn("no session for process %d (%s): %s", (int)pid, comm, err);
        unlink_ent(e);
    }
    pthread_cond_broadcast(&sessions.changed);
    pthread_mutex_unlock(&sessions.lock);
    return rc;
}

int sessions_acquire(pid_t pid, struct acquire_answer *ans, char *err, size_t errlen)
{
    return acquire_pid(pid, 0, ans, err, errlen);
}

int sessions_adopt(pid_t pid, unsigned long long start, char *err, size_t errlen)
{
    struct acquire_answer ans; /* the cluster manager answers the pid's existing session */
    int rc = acquire_pid(pid, start, &ans, err, errlen);
    explicit_bzero(ans.token, sizeof ans.token);
    if (rc == 0)
        flyt_info("process %d: took over its session %s from the earlier run", (int)pid,
                  ans.session_id);
    return rc;
}

int sessions_knows(const char *id, pid_t pid)
{
    pthread_mutex_lock(&sessions.lock);
    int known = 0;
    for (struct ent *e = sessions.list; e && !known; e = e->next)
        known = strcmp(e->s.id, id) == 0 || (e->pid == pid && e->state == ENT_ACQUIRING);
    pthread_mutex_unlock(&sessions.lock);
    return known;
}

void sessions_release_orphan(const char *id, pid_t pid)
{
    struct ent *e = calloc(1, sizeof *e);
    if (e == NULL)
        return; /* the cluster manager ends it after its idle grace */
    e->pid = pid;
    e->pidfd = -1;
    e->dead = 1;
    snprintf(e->s.id, sizeof e->s.id, "%s", id);
    pthread_mutex_lock(&sessions.lock);
    e->next = sessions.list;
    sessions.list = e;
    end_ent(e, "its process ended while the client manager was not running");
    pthread_mutex_unlock(&sessions.lock);
}

int sessions_release_pid(pid_t pid, char *err, size_t errlen)
{
    pthread_mutex_lock(&sessions.lock);
    struct ent *e = find_pid(pid);
    int rc = 0;
    if (e == NULL || e->state == ENT_GONE) {
        snprintf(err, errlen, "process %d holds no session", (int)pid);
        rc = -1;
    } else if (e->state == ENT_ACQUIRING) {
        snprintf(err, errlen, "the session of process %d is still being made", (int)pid);
        rc = -1;
    } else {
        flyt_info("process %d asked to release session %s", (int)pid, e->s.id);
        end_ent(e, "released on request");
    }
    pthread_mutex_unlock(&sessions.lock);
    return rc;
}

void sessions_stopping(void)
{
    pthread_mutex_lock(&sessions.lock);
    sessions.stopping = 1;
    pthread_cond_broadcast(&sessions.changed);
    pthread_mutex_unlock(&sessions.lock);
    wake_watcher();
}

void sessions_stop(void)
{
    sessions_stopping();
    if (sessions.threads >= 1)
        pthread_join(sessions.watcher, NULL);
    if (sessions.threads >= 2)
        pthread_join(sessions.worker, NULL);
    sessions.threads = 0;

    /* release what is still held, within shutdown_timeout */
    uint64_t deadline = cmgr_now_ms() + (uint64_t)sessions.c->shutdown_timeout_ms;
    pthread_mutex_lock(&sessions.lock);
    int held = 0;
    for (struct ent *e = sessions.list; e; e = e->next)
        held += e->state == ENT_LIVE || e->state == ENT_ENDED;
    if (held)
        flyt_info("stopping: releasing %d session%s", held, held == 1 ? "" : "s");
    for (;;) {
        struct ent *e = sessions.list;
        while (e && e->state != ENT_LIVE && e->state != ENT_ENDED)
            e = e->next;
        if (e == NULL)
            break;
        long left = (long)(deadline - cmgr_now_ms());
        if (left <= 0) {
            for (; e; e = e->next)
                if (e->state == ENT_LIVE || e->state == ENT_ENDED)
                    flyt_warn("session %s of process %d not released (shutdown_timeout); the "
                              "cluster manager ends it once it stops hearing alive pings",
                              e->s.id, (int)e->pid);
            break;
        }
        if (e->state == ENT_LIVE)
            e->why = "the client manager stopped";
        e->state = ENT_ENDED;
        if (!release_one(e, left < 5000 ? (left < 1000 ? 1000 : left) : 5000)) {
            flyt_warn("session %s of process %d not released (the cluster manager did not "
                      "answer); it ends it once it stops hearing alive pings", e->s.id,
                      (int)e->pid);
            unlink_ent(e);
        }
    }
    while (sessions.list)
        unlink_ent(sessions.list);
    unlink(sessions.c->state_path); /* what was not released, a restart releases */
    for (int i = 0; i < sessions.n_close; i++)
        close(sessions.to_close[i]);
    sessions.n_close = 0;
    free(sessions.to_close);
    sessions.to_close = NULL;
    pthread_mutex_unlock(&sessions.lock);
    if (sessions.wake_fd >= 0)
        close(sessions.wake_fd);
    sessions.wake_fd = -1;
}

void sessions_metrics(struct flyt_buf *out)
{
    int counts[4] = {0};
    pthread_mutex_lock(&sessions.lock);
    for (struct ent *e = sessions.list; e; e = e->next)
        counts[e->state]++;
    flyt_buf_printf(out, "# HELP flyt_client_manager_sessions Sessions this VM holds, by state.\n"
                         "# TYPE flyt_client_manager_sessions gauge\n");
    for (int i = 0; i < 4; i++)
        flyt_buf_printf(out, "flyt_client_manager_sessions{state=\"%s\"} %d\n", state_names[i],
                        counts[i]);
    struct {
        const char *name, *help;
        unsigned long long v;
    } ctr[] = {
        {"acquired_total", "Sessions obtained from the cluster manager.", sessions.acquired},
        {"acquire_failures_total", "Requests answered without a session.", sessions.acquire_failed},
        {"reused_total", "Requests answered with the process's existing session.", sessions.reused},
        {"released_total", "Sessions released.", sessions.released},
        {"release_failures_total", "Releases the cluster manager refused.", sessions.release_failed},
        {"release_retries_total", "Release attempts that got no answer.", sessions.release_retries},
        {"alive_total", "Alive pings answered.", sessions.alive_sent},
        {"alive_failures_total", "Alive pings not answered with success.", sessions.alive_failed},
        {"ended_by_cluster_total", "Sessions the cluster manager ended while their process ran.",
         sessions.ended_by_cluster},
    };
    for (size_t i = 0; i < sizeof ctr / sizeof ctr[0]; i++)
        flyt_buf_printf(out, "# HELP flyt_client_manager_%s %s\n# TYPE flyt_client_manager_%s "
                             "counter\nflyt_client_manager_%s %llu\n",
                        ctr[i].name, ctr[i].help, ctr[i].name, ctr[i].name, ctr[i].v);
    flyt_buf_printf(out, "# HELP flyt_client_manager_cluster_up Whether the last call to the "
                         "cluster manager got an answer.\n# TYPE flyt_client_manager_cluster_up "
                         "gauge\nflyt_client_manager_cluster_up %d\n", !sessions.cluster_down);
    pthread_mutex_unlock(&sessions.lock);
}

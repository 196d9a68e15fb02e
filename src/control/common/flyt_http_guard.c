/* See flyt_http_guard.h. One lock guards the list of open connections; the daemon
 * reports a connection closed before it closes its socket, so the reaper never shuts
 * down a descriptor that was reused meanwhile. */
#include "flyt_http_guard.h"

#include "flyt_log.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define REAP_PERIOD_MS 200
#define REFUSAL_LOG_EVERY_MS 10000   /* under attack: one line per this, not one per refusal */

struct tracked {
    struct tracked *prev, *next;
    int fd;
    unsigned char peer[16];   /* IPv4 (4 bytes) or IPv6 address; family in peer_family */
    int peer_family;
    long long deadline;       /* monotonic ms; 0: a handler runs, no deadline */
};

struct flyt_http_guard {
    struct flyt_http_limits lim;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t reaper;
    int stopping;
    struct tracked *head;
    unsigned open;
    unsigned long long refused, timed_out;
    long long refused_at;     /* wall-clock ms */
    long long refusal_logged; /* monotonic ms */
    unsigned long long refused_unlogged;
};

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* The address bytes of addr (0 when it is neither IPv4 nor IPv6). */
static int peer_key(const struct sockaddr *addr, unsigned char key[16], int *family)
{
    memset(key, 0, 16);
    *family = addr ? addr->sa_family : 0;
    if (*family == AF_INET) {
        memcpy(key, &((const struct sockaddr_in *)addr)->sin_addr, 4);
        return 4;
    }
    if (*family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)addr)->sin6_addr, 16);
        return 16;
    }
    return 0;
}

static void *reaper_main(void *arg)
{
    struct flyt_http_guard *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += REAP_PERIOD_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->wake, &g->lock, &ts);
        long long now = mono_ms();
        for (struct tracked *t = g->head; t; t = t->next)
            if (t->deadline && now > t->deadline) {
                /* the connection's thread sees end of file and closes it */
                shutdown(t->fd, SHUT_RDWR);
                t->deadline = 0;
                g->timed_out++;
            }
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

struct flyt_http_guard *flyt_http_guard_new(const struct flyt_http_limits *limits)
{
    struct flyt_http_guard *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->lim = *limits;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->wake, NULL);
    if (pthread_create(&g->reaper, NULL, reaper_main, g) != 0) {
        pthread_cond_destroy(&g->wake);
        pthread_mutex_destroy(&g->lock);
        free(g);
        return NULL;
    }
    return g;
}

void flyt_http_guard_free(struct flyt_http_guard *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    g->stopping = 1;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->reaper, NULL);
    while (g->head) {
        struct tracked *t = g->head;
        g->head = t->next;
        free(t);
    }
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

static unsigned open_from(struct flyt_http_guard *g, const unsigned char key[16], int family)
{
    unsigned n = 0;
    for (struct tracked *t = g->head; t; t = t->next)
        n += t->peer_family == family && memcmp(t->peer, key, 16) == 0;
    return n;
}

/* Lock held. */
static void note_refusal(struct flyt_http_guard *g, const char *why)
{
    g->refused++;
    g->refused_at = wall_ms();
    long long now = mono_ms();
    if (g->refusal_logged && now - g->refusal_logged < REFUSAL_LOG_EVERY_MS) {
        g->refused_unlogged++;
        return;
    }
    flyt_warn("http: refusing connections: %s (%llu more refused since the last such line)", why,
              g->refused_unlogged);
    g->refusal_logged = now;
    g->refused_unlogged = 0;
}

int flyt_http_guard_admit(struct flyt_http_guard *g, const struct sockaddr *addr)
{
    unsigned char key[16];
    int family;
    peer_key(addr, key, &family);
    pthread_mutex_lock(&g->lock);
    int ok = 1;
    char why[160];
    if (g->open >= g->lim.max_connections) {
        snprintf(why, sizeof why, "%u connections open, the limit", g->open);
        ok = 0;
    } else if (open_from(g, key, family) >= g->lim.max_per_peer) {
        snprintf(why, sizeof why, "one peer address holds %u connections, the limit per peer",
                 g->lim.max_per_peer);
        ok = 0;
    }
    if (!ok)
        note_refusal(g, why);
    pthread_mutex_unlock(&g->lock);
    return ok;
}

void flyt_http_guard_opened(struct flyt_http_guard *g, int fd, const struct sockaddr *addr,
                            void **ctx)
{
    struct tracked *t = calloc(1, sizeof *t);
    *ctx = t;
    if (!t)
        return;   /* untracked: the daemon's own limits and idle timeout still hold */
    t->fd = fd;
    peer_key(addr, t->peer, &t->peer_family);
    t->deadline = mono_ms() + g->lim.request_timeout_ms;
    pthread_mutex_lock(&g->lock);
    t->next = g->head;
    if (g->head)
        g->head->prev = t;
    g->head = t;
    g->open++;
    pthread_mutex_unlock(&g->lock);
}

void flyt_http_guard_closed(struct flyt_http_guard *g, void *ctx)
{
    struct tracked *t = ctx;
    if (!t)
        return;
    pthread_mutex_lock(&g->lock);
    if (t->prev)
        t->prev->next = t->next;
    else
        g->head = t->next;
    if (t->next)
        t->next->prev = t->prev;
    g->open--;
    pthread_mutex_unlock(&g->lock);
    free(t);
}

static void set_deadline(struct flyt_http_guard *g, void *ctx, long long deadline)
{
    struct tracked *t = ctx;
    if (!t)
        return;
    pthread_mutex_lock(&g->lock);
    t->deadline = deadline;
    pthread_mutex_unlock(&g->lock);
}

void flyt_http_guard_handling(struct flyt_http_guard *g, void *ctx) { set_deadline(g, ctx, 0); }

void flyt_http_guard_rearm(struct flyt_http_guard *g, void *ctx)
{
    set_deadline(g, ctx, mono_ms() + g->lim.request_timeout_ms);
}

long long flyt_http_guard_refused_at(struct flyt_http_guard *g)
{
    pthread_mutex_lock(&g->lock);
    long long at = g->refused_at;
    pthread_mutex_unlock(&g->lock);
    return at;
}

void flyt_http_guard_metrics(struct flyt_http_guard *g, struct flyt_buf *out)
{
    pthread_mutex_lock(&g->lock);
    flyt_buf_printf(out,
                    "# HELP flyt_http_connections_open API connections open now.\n"
                    "# TYPE flyt_http_connections_open gauge\n"
                    "flyt_http_connections_open %u\n"
                    "# HELP flyt_http_connections_refused_total API connections refused at "
                    "accept by the connection limits.\n"
                    "# TYPE flyt_http_connections_refused_total counter\n"
                    "flyt_http_connections_refused_total %llu\n"
                    "# HELP flyt_http_requests_timed_out_total API connections cut because a "
                    "request or its answer missed the deadline.\n"
                    "# TYPE flyt_http_requests_timed_out_total counter\n"
                    "flyt_http_requests_timed_out_total %llu\n",
                    g->open, g->refused, g->timed_out);
    pthread_mutex_unlock(&g->lock);
}

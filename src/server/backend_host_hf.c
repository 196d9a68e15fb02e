/* Host functions of the host test backend on a thread of their own
 * (backend_host_hf.h). */
#include "backend_host_hf.h"

#include <pthread.h>
#include <stdlib.h>

#include "flyt_assert.h"

struct hf_item {
    flyt_bhandle       stream;
    enum hf_kind       kind;
    flyt_host_func_cb  fn;
    void              *arg;
    struct hf_item    *next;
};

struct hf_runner {
    pthread_mutex_t mu;
    pthread_cond_t  queued; /* the thread: something to run, or stop */
    pthread_cond_t  ran;    /* hf_drain: one has returned */
    struct hf_item *head, *tail; /* the head runs until it is removed */
    int             stopping;
    pthread_t       thread;
};

static void *hf_thread(void *arg)
{
    struct hf_runner *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->head == NULL && !r->stopping)
            pthread_cond_wait(&r->queued, &r->mu);
        struct hf_item *it = r->head;
        if (it == NULL)
            break;
        pthread_mutex_unlock(&r->mu);
        it->fn(it->arg);
        pthread_mutex_lock(&r->mu);
        r->head = it->next;
        if (r->head == NULL)
            r->tail = NULL;
        free(it);
        pthread_cond_broadcast(&r->ran);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

struct hf_runner *hf_runner_start(void)
{
    struct hf_runner *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    flyt_mutex_init(&r->mu);
    pthread_cond_init(&r->queued, NULL);
    pthread_cond_init(&r->ran, NULL);
    if (pthread_create(&r->thread, NULL, hf_thread, r) != 0) {
        free(r);
        return NULL;
    }
    return r;
}

void hf_runner_stop(struct hf_runner *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    pthread_cond_signal(&r->queued);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->queued);
    pthread_cond_destroy(&r->ran);
    free(r);
}

CUresult hf_enqueue(struct hf_runner *r, flyt_bhandle stream, enum hf_kind kind,
                    flyt_host_func_cb fn, void *arg)
{
    struct hf_item *it = malloc(sizeof *it);
    if (it == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *it = (struct hf_item){stream, kind, fn, arg, NULL};
    pthread_mutex_lock(&r->mu);
    if (r->tail)
        r->tail->next = it;
    else
        r->head = it;
    r->tail = it;
    pthread_cond_signal(&r->queued);
    pthread_mutex_unlock(&r->mu);
    return CUDA_SUCCESS;
}

/* Whether work on (stream, kind) follows the queued host function it:
 * its own stream's, and across the legacy stream and the blocking ones. */
static int follows(const struct hf_item *it, flyt_bhandle stream, enum hf_kind kind)
{
    if (kind == HF_EVERY || it->stream == stream)
        return 1;
    if (kind == HF_LEGACY)
        return it->kind != HF_NON_BLOCKING;
    return kind == HF_BLOCKING && it->kind == HF_LEGACY;
}

static int pending_locked(struct hf_runner *r, flyt_bhandle stream, enum hf_kind kind)
{
    FLYT_ASSERT_HELD(&r->mu);
    for (const struct hf_item *it = r->head; it; it = it->next)
        if (follows(it, stream, kind))
            return 1;
    return 0;
}

void hf_drain(struct hf_runner *r, flyt_bhandle stream, enum hf_kind kind)
{
    pthread_mutex_lock(&r->mu);
    while (pending_locked(r, stream, kind))
        pthread_cond_wait(&r->ran, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

int hf_pending(struct hf_runner *r, flyt_bhandle stream, enum hf_kind kind)
{
    pthread_mutex_lock(&r->mu);
    int pending = pending_locked(r, stream, kind);
    pthread_mutex_unlock(&r->mu);
    return pending;
}

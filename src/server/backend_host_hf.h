/*
 * Host functions of the host test backend, run the way the driver runs
 * them: on a thread of their own, one at a time in the order they were
 * enqueued, while later work of their stream (and of the streams that
 * synchronise with it: the legacy stream and the blocking streams) waits
 * until they have returned. Everything else of the backend is synchronous,
 * so "waits" means: the call that would run that work blocks first.
 */
#ifndef FLYT_BACKEND_HOST_HF_H
#define FLYT_BACKEND_HOST_HF_H

#include "backend.h"

/* How a stream synchronises with others (CUDA's implicit synchronisation). */
enum hf_kind { HF_LEGACY, HF_BLOCKING, HF_NON_BLOCKING, HF_EVERY };

struct hf_runner;

/* NULL when no thread could be started. */
struct hf_runner *hf_runner_start(void);
/* Runs what is still queued, then ends the thread. */
void hf_runner_stop(struct hf_runner *r);
/* Queues fn(arg) behind the host functions queued so far. */
CUresult hf_enqueue(struct hf_runner *r, flyt_bhandle stream, enum hf_kind kind,
                    flyt_host_func_cb fn, void *arg);
/* Waits until no host function that work on stream (of kind) must follow
 * is queued or running; HF_EVERY: until none at all. */
void hf_drain(struct hf_runner *r, flyt_bhandle stream, enum hf_kind kind);
/* Whether hf_drain would wait. */
int hf_pending(struct hf_runner *r, flyt_bhandle stream, enum hf_kind kind);

#endif

/*
 * Host functions in stream order, many of them, against the host backend
 * (whose host functions run on a thread of their own, as the driver's do):
 * the pattern of tests/gpu/programs/host_callbacks.cu, in a loop. Per round
 * and stream (the legacy stream, a non-blocking one, two blocking ones): a
 * memset standing in for the kernel, a device-to-host copy into pinned
 * memory (synchronous for the client over TCP: a streamed reply), then a
 * host function or a stream callback that checks the copy's bytes. The
 * server holds each stream until the client acknowledged its host function,
 * so copies and synchronisations wait for acknowledgements that the server
 * has to read while its session thread is blocked on them. A deadlock ends
 * the program through alarm() instead of hanging the run.
 * Run by run_with_server.sh (Unix socket, TCP, Unix socket without shared
 * memory); argument: rounds (default 200).
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define NSTREAMS 4
#define NBYTES   4096
#define DEADLINE_S 60

struct lane {
    cudaStream_t stream;
    unsigned char *dev, *pinned;
    unsigned char expect;   /* what the copy before the next host function brought */
    int ran, wrong, out_of_order;
};

/* Called in the lane's stream order: the copy before it has landed. */
static void check_lane(struct lane *l, int round)
{
    for (int i = 0; i < NBYTES; i++)
        if (l->pinned[i] != (unsigned char)(round * 7 + 1)) {
            l->wrong++;
            break;
        }
    if (l->ran != round)
        l->out_of_order++;
    l->ran++;
}

struct call {
    struct lane *lane;
    int round;
};

static void CUDART_CB host_fn(void *arg)
{
    struct call *c = arg;
    check_lane(c->lane, c->round);
}

static void CUDART_CB stream_cb(cudaStream_t s, cudaError_t status, void *arg)
{
    (void)s;
    struct call *c = arg;
    if (status != cudaSuccess)
        c->lane->wrong++;
    check_lane(c->lane, c->round);
}

static int make_lanes(struct lane *lanes, int first_legacy)
{
    for (int s = 0; s < NSTREAMS; s++) {
        struct lane *l = &lanes[s];
        memset(l, 0, sizeof *l);
        if (s == 0 && first_legacy)
            l->stream = 0;
        else if (s == 1)
            CHECK_EQ(cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking), cudaSuccess,
                     "non-blocking stream");
        else
            CHECK_EQ(cudaStreamCreate(&l->stream), cudaSuccess, "blocking stream");
        if (cudaMalloc((void **)&l->dev, NBYTES) != cudaSuccess ||
            cudaMallocHost((void **)&l->pinned, NBYTES) != cudaSuccess)
            return -1;
    }
    return 0;
}

static void free_lanes(struct lane *lanes)
{
    for (int s = 0; s < NSTREAMS; s++) {
        if (lanes[s].stream)
            cudaStreamDestroy(lanes[s].stream);
        cudaFree(lanes[s].dev);
        cudaFreeHost(lanes[s].pinned);
    }
}

/* rounds of memset, copy, host function on every lane, then synchronise
 * one stream alone and the device; 0 when all of it returned success. */
static int run_rounds(struct lane *lanes, struct call *calls, int rounds)
{
    int bad = 0;
    for (int k = 0; k < rounds; k++) {
        for (int s = 0; s < NSTREAMS; s++) {
            struct lane *l = &lanes[s];
            struct call *c = &calls[k * NSTREAMS + s];
            *c = (struct call){l, k};
            bad |= cudaMemsetAsync(l->dev, k * 7 + 1, NBYTES, l->stream) != cudaSuccess;
            bad |= cudaMemcpyAsync(l->pinned, l->dev, NBYTES, cudaMemcpyDeviceToHost,
                                   l->stream) != cudaSuccess;
            if (k % 2)
                bad |= cudaStreamAddCallback(l->stream, stream_cb, c, 0) != cudaSuccess;
            else
                bad |= cudaLaunchHostFunc(l->stream, host_fn, c) != cudaSuccess;
        }
        if (k % 16 == 15)
            bad |= cudaStreamSynchronize(lanes[1].stream) != cudaSuccess;
    }
    bad |= cudaDeviceSynchronize() != cudaSuccess;
    return bad;
}

static int check_lanes(const struct lane *lanes, int rounds, const char *who)
{
    int ok = 1;
    for (int s = 0; s < NSTREAMS; s++) {
        ok &= lanes[s].ran == rounds && lanes[s].wrong == 0 && lanes[s].out_of_order == 0;
        if (lanes[s].ran != rounds || lanes[s].wrong || lanes[s].out_of_order)
            printf("%s lane %d: ran %d of %d, %d saw wrong bytes, %d out of order\n", who, s,
                   lanes[s].ran, rounds, lanes[s].wrong, lanes[s].out_of_order);
    }
    return ok;
}

struct worker {
    int rounds;
    int result;
};

/* A second application thread with streams of its own (no legacy one:
 * that is the main thread's, and would order the two threads' work). */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct lane lanes[NSTREAMS];
    struct call *calls = calloc((size_t)w->rounds * NSTREAMS, sizeof *calls);
    w->result = calls == NULL || make_lanes(lanes, 0) != 0;
    if (w->result == 0) {
        w->result = run_rounds(lanes, calls, w->rounds);
        w->result |= !check_lanes(lanes, w->rounds, "thread");
        free_lanes(lanes);
    }
    free(calls);
    return NULL;
}

static void deadline(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL: host functions deadlocked (no progress in "
                              "60 s)\n";
    ssize_t n = write(STDOUT_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(2);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    signal(SIGALRM, deadline);
    alarm(DEADLINE_S);
    setvbuf(stdout, NULL, _IONBF, 0);

    struct lane lanes[NSTREAMS];
    struct call *calls = calloc((size_t)rounds * NSTREAMS, sizeof *calls);
    CHECK(calls, "4 streams (legacy, non-blocking, 2 blocking)");
    CHECK_EQ(make_lanes(lanes, 1), 0, "4 streams (legacy, non-blocking, 2 blocking)");
    CHECK_EQ(run_rounds(lanes, calls, rounds), 0, "%d rounds of memset, copy, host function", rounds);
    CHECK(check_lanes(lanes, rounds, "main"),
          "every host function ran once, in stream order, after the copy before it");

    /* two application threads at once, the main one on the legacy stream */
    for (int s = 0; s < NSTREAMS; s++)
        lanes[s].ran = lanes[s].wrong = lanes[s].out_of_order = 0;
    struct worker w = {rounds / 2, 1};
    pthread_t t;
    int started = pthread_create(&t, NULL, worker_main, &w) == 0;
    CHECK_EQ(run_rounds(lanes, calls, rounds / 2), 0, "main thread's rounds beside a second thread");
    CHECK(check_lanes(lanes, rounds / 2, "main"), "main thread's rounds beside a second thread");
    if (started)
        pthread_join(t, NULL);
    CHECK(started, "a second thread's rounds on streams of its own");
    CHECK_EQ(w.result, 0, "a second thread's rounds on streams of its own");
    free_lanes(lanes);
    free(calls);
    alarm(0);
    return check_done();
}

// events_timing_flags: what programs read from events and streams to time
// and order their work (only booleans and error names are printed):
//   - cudaEventElapsedTime: a ~20 ms kernel measures more than 5 ms, the
//     intervals a->b and b->c add up to a->c, reversed order is negative,
//     an event not yet complete gives cudaErrorNotReady, a never recorded one
//     and a timing-disabled one give errors;
//   - events with cudaEventBlockingSync (cudaEventSynchronize waits),
//     cudaEventBlockingSync | cudaEventDisableTiming, cudaEventRecordWithFlags,
//     cudaEventQuery on a never recorded event;
//   - streams of the lowest and highest priority (cudaDeviceGetStreamPriorityRange)
//     and a non-blocking one: cudaStreamGetFlags / GetPriority / GetId /
//     GetDevice read back, ids distinct;
//   - cudaStreamQuery polled while a kernel runs, then cudaSuccess;
//   - host functions on three streams ordered only by events between them
//     (cudaStreamWaitEvent), their order recorded and compared.
#include <string.h>
#include "test_util.h"

// Spins for about `cycles` clock cycles, then adds one to *counter.
__global__ void spin(long long cycles, int *counter)
{
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    if (counter)
        atomicAdd(counter, 1);
}

static long long cycles_for_ms(double ms)
{
    int khz = 0;
    CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    return (long long)(khz * ms);
}

static void elapsed_times(void)
{
    cudaEvent_t a, b, c, never, notiming;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventCreate(&c));
    CHECK(cudaEventCreate(&never));
    CHECK(cudaEventCreateWithFlags(&notiming, cudaEventDisableTiming));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    long long cyc = cycles_for_ms(20);
    CHECK(cudaEventRecord(a, s));
    spin<<<1, 1, 0, s>>>(cyc, NULL);
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventRecord(notiming, s));
    spin<<<1, 1, 0, s>>>(cyc, NULL);
    CHECK(cudaEventRecord(c, s));
    float ms = 0;
    cudaError_t busy = cudaEventElapsedTime(&ms, a, c);
    printf("elapsed time before the end event completes -> %s\n",
           busy == cudaErrorNotReady ? "cudaErrorNotReady" : "ready already (slow host)");
    CHECK(cudaEventSynchronize(c));
    float ab = 0, bc = 0, ac = 0, ba = 0;
    CHECK(cudaEventElapsedTime(&ab, a, b));
    CHECK(cudaEventElapsedTime(&bc, b, c));
    CHECK(cudaEventElapsedTime(&ac, a, c));
    CHECK(cudaEventElapsedTime(&ba, b, a));
    fprintf(stderr, "events_timing_flags: a->b %.3f ms, b->c %.3f ms, a->c %.3f ms\n", ab, bc, ac);
    expect(ab > 5.0f && bc > 5.0f, "a 20 ms kernel measures more than 5 ms");
    expect(ac >= ab && ac >= bc && (ab + bc - ac) < 0.01f * ac + 0.01f && (ac - ab - bc) < 0.01f * ac + 0.01f,
           "a->b + b->c == a->c");
    expect(ba < 0 && ba > -ab - 0.01f, "b->a is negative");
    printf("elapsed time with a never recorded event -> %s\n",
           cudaGetErrorName(cudaEventElapsedTime(&ms, a, never)));
    printf("elapsed time with a timing-disabled event -> %s\n",
           cudaGetErrorName(cudaEventElapsedTime(&ms, a, notiming)));
    printf("query of a never recorded event -> %s\n", cudaGetErrorName(cudaEventQuery(never)));
    cudaGetLastError();
    cudaEvent_t evs[] = {a, b, c, never, notiming};
    for (cudaEvent_t e : evs)
        CHECK(cudaEventDestroy(e));
    CHECK(cudaStreamDestroy(s));
}

static void event_flags(void)
{
    cudaEvent_t blocking, blocking_notiming;
    CHECK(cudaEventCreateWithFlags(&blocking, cudaEventBlockingSync));
    CHECK(cudaEventCreateWithFlags(&blocking_notiming, cudaEventBlockingSync | cudaEventDisableTiming));
    int *dcount, hcount = 0;
    CHECK(cudaMalloc(&dcount, sizeof(int)));
    CHECK(cudaMemset(dcount, 0, sizeof(int)));
    spin<<<1, 1>>>(cycles_for_ms(10), dcount);
    CHECK(cudaEventRecordWithFlags(blocking, 0, cudaEventRecordDefault));
    spin<<<1, 1>>>(cycles_for_ms(10), dcount);
    CHECK(cudaEventRecord(blocking_notiming, 0));
    CHECK(cudaEventSynchronize(blocking));
    printf("blocking-sync event: synchronised\n");
    CHECK(cudaEventSynchronize(blocking_notiming));
    CHECK(cudaMemcpy(&hcount, dcount, sizeof(int), cudaMemcpyDeviceToHost));
    expect(hcount == 2, "both kernels done after the blocking-sync events");
    expect(cudaEventQuery(blocking) == cudaSuccess && cudaEventQuery(blocking_notiming) == cudaSuccess,
           "both events complete");
    CHECK(cudaEventDestroy(blocking));
    CHECK(cudaEventDestroy(blocking_notiming));
    CHECK(cudaFree(dcount));
}

static void stream_properties(void)
{
    int least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    printf("priority range: least %d, greatest %d\n", least, greatest);
    cudaStream_t lo, hi, nb;
    CHECK(cudaStreamCreateWithPriority(&lo, cudaStreamDefault, least));
    CHECK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, greatest));
    CHECK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    cudaStream_t all[3] = {lo, hi, nb};
    const char *names[3] = {"low priority", "high priority non-blocking", "non-blocking"};
    unsigned long long ids[3];
    for (int i = 0; i < 3; i++) {
        unsigned flags = 99;
        int prio = 99, dev = -1;
        CHECK(cudaStreamGetFlags(all[i], &flags));
        CHECK(cudaStreamGetPriority(all[i], &prio));
        CHECK(cudaStreamGetId(all[i], &ids[i]));
        CHECK(cudaStreamGetDevice(all[i], &dev));
        printf("%s stream: flags %u, priority %d, device %d\n", names[i], flags, prio, dev);
    }
    expect(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2], "stream ids are distinct");

    // polling a busy stream
    spin<<<1, 1, 0, hi>>>(cycles_for_ms(30), NULL);
    cudaError_t first = cudaStreamQuery(hi);
    long polls = 0;
    double t0 = now_s();
    cudaError_t q;
    while ((q = cudaStreamQuery(hi)) == cudaErrorNotReady && now_s() - t0 < 10)
        polls++;
    fprintf(stderr, "events_timing_flags: %ld polls\n", polls);
    printf("cudaStreamQuery while busy -> %s, at the end -> %s\n",
           first == cudaErrorNotReady ? "cudaErrorNotReady" : "done already (slow host)",
           cudaGetErrorName(q));
    for (int i = 0; i < 3; i++)
        CHECK(cudaStreamDestroy(all[i]));
}

// Host functions on three streams; events between them fix one order.
static int order[16];
static int order_len;

static void CUDART_CB note(void *arg)
{
    if (order_len < 16)
        order[order_len++] = (int)(size_t)arg;
}

static void host_function_order(void)
{
    int least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t st[3];
    CHECK(cudaStreamCreateWithPriority(&st[0], cudaStreamNonBlocking, least));
    CHECK(cudaStreamCreateWithPriority(&st[1], cudaStreamNonBlocking, greatest));
    CHECK(cudaStreamCreateWithFlags(&st[2], cudaStreamNonBlocking));
    cudaEvent_t ev[8];
    for (int i = 0; i < 8; i++)
        CHECK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    // 1 on st0 (after a kernel) -> 2 on st1 -> 3 on st2 -> 4 on st0 -> 5 on st1 ...
    spin<<<1, 1, 0, st[0]>>>(cycles_for_ms(5), NULL);
    for (int k = 0; k < 8; k++) {
        cudaStream_t cur = st[k % 3];
        if (k > 0)
            CHECK(cudaStreamWaitEvent(cur, ev[k - 1], 0));
        CHECK(cudaLaunchHostFunc(cur, note, (void *)(size_t)(k + 1)));
        spin<<<1, 1, 0, cur>>>(cycles_for_ms(1), NULL);
        CHECK(cudaEventRecord(ev[k], cur));
    }
    for (int i = 0; i < 3; i++)
        CHECK(cudaStreamSynchronize(st[i]));
    printf("host functions ran in order:");
    bool ok = order_len == 8;
    for (int i = 0; i < order_len; i++) {
        printf(" %d", order[i]);
        ok = ok && order[i] == i + 1;
    }
    printf("\n");
    expect(ok, "host functions ordered by events across prioritised streams");
    for (int i = 0; i < 8; i++)
        CHECK(cudaEventDestroy(ev[i]));
    for (int i = 0; i < 3; i++)
        CHECK(cudaStreamDestroy(st[i]));
}

int main(void)
{
    double t0 = now_s();
    elapsed_times();
    event_flags();
    stream_properties();
    host_function_order();
    CHECK(cudaDeviceSynchronize());
    fprintf(stderr, "events_timing_flags: %.3f s\n", now_s() - t0);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "ALL PASSED", failures);
    return failures ? 1 : 0;
}

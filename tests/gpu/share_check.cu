// share_check: what a tenant's share of a GPU looks like from inside.
//
// Runs a compute-bound kernel whose blocks record the SM they ran on
// (%smid), on every kind of stream (NULL, cudaStreamLegacy,
// cudaStreamPerThread, a blocking and a non-blocking created stream), and
// times it. Through a flyt-server started with --sm-groups, every block must
// run on the share's SMs and the time must scale with their number; with
// --memory-quota the device must report the quota and refuse more.
//
// Environment (optional): SHARE_EXPECT_SMS=N (multiProcessorCount must be N),
// SHARE_EXPECT_QUOTA=BYTES (totalGlobalMem and cudaMemGetInfo's total must be
// BYTES, an allocation past it must fail with cudaErrorMemoryAllocation),
// SHARE_ITERS (kernel length, default 20000), SHARE_REPEATS (default 5),
// SHARE_INTERVALS=N (a live resize check: after the checks, N timed
// intervals, each a kernel on the created blocking stream, one on the
// non-blocking one and one on the NULL stream, printed as
// "interval I ms=... distinct=... stream_distinct=...,... sees=..." a line
// each on stderr, sees being the SM count cudaDeviceGetAttribute answers after
// the interval's work, with SHARE_INTERVAL_MS (default 250) between them; the
// share may change while they run and the times, SM counts and the count the
// program sees follow it; the created streams' priority and synchronization
// policy must be the same after the intervals as before).
// Prints one "share_check:" line per fact and "RESULT ms=... sms=...
// distinct=..." last; exits 0 when every check passed, 1 otherwise.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#define BLOCKS 2048 /* 8 resident blocks per SM: 16 full waves on 16 SMs, 8 on 32, 4 on 64 */
#define THREADS 256

static int failures = 0;

#define CK(call)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            printf("share_check: FAIL %s: %s (%s)\n", #call, cudaGetErrorName(e_),        \
                   cudaGetErrorString(e_));                                               \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static void expect(bool ok, const char *what)
{
    printf("share_check: %s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok)
        failures++;
}

__global__ void spin(float *out, unsigned *smids, int iters)
{
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (threadIdx.x == 0)
        smids[blockIdx.x] = smid;
    float x = threadIdx.x * 0.001f, y = 1.0f;
    for (int i = 0; i < iters; i++) {
        x = fmaf(x, 1.000001f, y);
        y = fmaf(y, 0.999999f, -x);
    }
    if (x == 1234.5f) // never true; keeps the loop
        out[blockIdx.x] = y;
}

static int distinct(const std::vector<unsigned> &ids)
{
    std::vector<unsigned> s(ids);
    std::sort(s.begin(), s.end());
    return (int)(std::unique(s.begin(), s.end()) - s.begin());
}

static long long env_ll(const char *name, long long def)
{
    const char *v = getenv(name);
    return v && *v ? atoll(v) : def;
}

/* The SM ids of a kernel on stream s: distinct count. */
static int run_on(cudaStream_t s, float *out, unsigned *smids, int iters)
{
    std::vector<unsigned> host(BLOCKS);
    CK(cudaMemsetAsync(smids, 0xff, BLOCKS * sizeof(unsigned), s));
    spin<<<BLOCKS, THREADS, 0, s>>>(out, smids, iters);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(host.data(), smids, BLOCKS * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    return distinct(host);
}

/* SHARE_INTERVALS: the same streams and memory across a live resize. */
static void live_intervals(float *out, unsigned *smids, int iters, cudaStream_t blocking,
                           cudaStream_t nonblocking, cudaEvent_t a, cudaEvent_t b)
{
    long long n = env_ll("SHARE_INTERVALS", 0), pause_ms = env_ll("SHARE_INTERVAL_MS", 250);
    if (n == 0)
        return;
    int sees_before = 0, sees = 0, least = 0, greatest = 0, prio = 1;
    CK(cudaDeviceGetAttribute(&sees_before, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStreamAttrValue spin_policy = {};
    spin_policy.syncPolicy = cudaSyncPolicySpin;
    CK(cudaStreamSetAttribute(nonblocking, cudaStreamAttributeSynchronizationPolicy, &spin_policy));
    for (long long i = 0; i < n; i++) {
        CK(cudaEventRecord(a, blocking));
        int d = run_on(blocking, out, smids, iters);
        CK(cudaEventRecord(b, blocking));
        CK(cudaEventSynchronize(b));
        float t = 0;
        CK(cudaEventElapsedTime(&t, a, b));
        int dn = run_on(nonblocking, out, smids, iters / 10 + 1);
        int d0 = run_on(0, out, smids, iters / 10 + 1);
        CK(cudaDeviceGetAttribute(&sees, cudaDevAttrMultiProcessorCount, 0));
        fprintf(stderr, "interval %lld ms=%.3f distinct=%d stream_distinct=%d,%d sees=%d\n", i, t, d,
                dn, d0, sees);
        struct timespec ts = {(time_t)(pause_ms / 1000), (long)(pause_ms % 1000) * 1000000L};
        nanosleep(&ts, nullptr);
    }
    // on stderr: the counts depend on the resizes the caller made
    fprintf(stderr, "share_check: the program saw %d SMs before the intervals and %d after\n",
            sees_before, sees);
    cudaStreamAttrValue policy = {};
    CK(cudaStreamGetPriority(blocking, &prio));
    CK(cudaStreamGetAttribute(nonblocking, cudaStreamAttributeSynchronizationPolicy, &policy));
    expect(prio == greatest, "the blocking stream kept its priority across the intervals");
    expect(policy.syncPolicy == cudaSyncPolicySpin,
           "the non-blocking stream kept its synchronization policy across the intervals");
}

int main()
{
    int iters = (int)env_ll("SHARE_ITERS", 20000);
    int repeats = (int)env_ll("SHARE_REPEATS", 5);
    long long want_sms = env_ll("SHARE_EXPECT_SMS", 0);
    long long want_quota = env_ll("SHARE_EXPECT_QUOTA", 0);

    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    int attr_sms = 0;
    CK(cudaDeviceGetAttribute(&attr_sms, cudaDevAttrMultiProcessorCount, 0));
    size_t fr = 0, tot = 0;
    CK(cudaMemGetInfo(&fr, &tot));
    printf("share_check: device \"%s\": multiProcessorCount %d (attribute %d), totalGlobalMem %zu MiB, "
           "mem info free %zu MiB total %zu MiB\n",
           p.name, p.multiProcessorCount, attr_sms, p.totalGlobalMem >> 20, fr >> 20, tot >> 20);
    expect(attr_sms == p.multiProcessorCount, "attribute and properties agree on the SM count");
    if (want_sms) {
        char what[128];
        snprintf(what, sizeof what, "the device reports the share's %lld SMs", want_sms);
        expect(p.multiProcessorCount == want_sms, what);
    }
    if (want_quota) {
        expect(p.totalGlobalMem == (size_t)want_quota, "totalGlobalMem is the memory quota");
        expect(tot == (size_t)want_quota && fr <= tot, "cudaMemGetInfo: total is the quota");
        void *big = nullptr;
        cudaError_t e = cudaMalloc(&big, (size_t)want_quota + (1u << 20));
        expect(e == cudaErrorMemoryAllocation, "an allocation past the quota fails (cudaErrorMemoryAllocation)");
        cudaGetLastError();
        void *half = nullptr;
        e = cudaMalloc(&half, (size_t)want_quota / 2);
        expect(e == cudaSuccess, "half the quota can be allocated");
        size_t fr2 = 0, tot2 = 0;
        CK(cudaMemGetInfo(&fr2, &tot2));
        expect(fr2 <= (size_t)want_quota - (size_t)want_quota / 2, "and free memory went down by it");
        if (half)
            CK(cudaFree(half));
    }

    float *out;
    unsigned *smids;
    CK(cudaMalloc(&out, BLOCKS * sizeof(float)));
    CK(cudaMalloc(&smids, BLOCKS * sizeof(unsigned)));
    std::vector<unsigned> host(BLOCKS);

    cudaStream_t blocking, nonblocking;
    int least_prio = 0, greatest_prio = 0;
    CK(cudaDeviceGetStreamPriorityRange(&least_prio, &greatest_prio));
    CK(cudaStreamCreateWithPriority(&blocking, cudaStreamDefault, greatest_prio));
    CK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
    struct {
        const char *name;
        cudaStream_t s;
    } streams[] = {{"NULL stream", 0},
                   {"cudaStreamLegacy", cudaStreamLegacy},
                   {"cudaStreamPerThread", cudaStreamPerThread},
                   {"created blocking stream", blocking},
                   {"created non-blocking stream", nonblocking}};
    int most = 0;
    for (auto &st : streams) {
        CK(cudaMemsetAsync(smids, 0xff, BLOCKS * sizeof(unsigned), st.s));
        spin<<<BLOCKS, THREADS, 0, st.s>>>(out, smids, iters / 10 + 1);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(st.s));
        CK(cudaMemcpy(host.data(), smids, BLOCKS * sizeof(unsigned), cudaMemcpyDeviceToHost));
        int d = distinct(host);
        unsigned maxid = *std::max_element(host.begin(), host.end());
        most = std::max(most, d);
        char what[200];
        snprintf(what, sizeof what, "%s: blocks ran on %d distinct SMs (highest SM id %u), at most %d",
                 st.name, d, maxid, p.multiProcessorCount);
        expect(d <= p.multiProcessorCount && maxid != 0xffffffffu, what);
    }

    // the timing: NULL stream, events around each launch, after a warm-up
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    spin<<<BLOCKS, THREADS>>>(out, smids, iters);
    CK(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int i = 0; i < repeats; i++) {
        CK(cudaEventRecord(a, 0));
        spin<<<BLOCKS, THREADS>>>(out, smids, iters);
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        float t = 0;
        CK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    float median = ms[ms.size() / 2];
    printf("share_check: kernel %d blocks x %d threads, %d iterations: median %.3f ms of %d (min %.3f, max %.3f)\n",
           BLOCKS, THREADS, iters, median, repeats, ms.front(), ms.back());

    live_intervals(out, smids, iters, blocking, nonblocking, a, b);
    CK(cudaStreamDestroy(blocking));
    CK(cudaStreamDestroy(nonblocking));
    CK(cudaFree(out));
    CK(cudaFree(smids));
    printf("RESULT ms=%.3f sms=%d distinct=%d failures=%d\n", median, p.multiProcessorCount, most, failures);
    return failures ? 1 : 0;
}

/*
 * A live resize reaches a connected program (docs/server.md, "Live
 * resize"): the server's status page gets a new share as the node manager
 * posts one (SM groups under the sequence lock, memory quota, SIGURG to the
 * session), and without reconnecting the program's cuDeviceGetAttribute
 * (MULTIPROCESSOR_COUNT) and cuDeviceTotalMem answer the new share; its
 * streams keep their priority, flags and the attributes set on them, the
 * NULL stream's too, although the resize gave each a new backend stream.
 * NVIDIA's runtime in the same process: cudaDeviceGetAttribute asks the
 * driver each time and follows; cudaGetDeviceProperties is the copy the
 * runtime took as it started and keeps the old share (printed, not checked:
 * NVIDIA's behaviour, documented in docs/server.md). A resize posted while a
 * stream capture is open waits for its end, or is refused after 1 s.
 * Run by run_share_push.sh against a host-backend server started with
 * --status-file, --memory-quota and --sm-groups of 8-SM groups.
 * usage: test_share_push STATUS-FILE
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "flyt_server_status.h"

#define MiB (1ull << 20)
#define GRANULARITY 8

static struct flyt_server_status *map_page(const char *path)
{
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0, "the status page %s opens", path);
    void *m = mmap(NULL, sizeof(struct flyt_server_status), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(m != MAP_FAILED, "the status page maps");
    return m;
}

/* What the node manager does for one resize: posts the share and signals the
 * sessions; its generation. */
static uint64_t post(struct flyt_server_status *p, int ngroups, uint64_t quota)
{
    __atomic_store_n(&p->memory_quota, quota, __ATOMIC_RELEASE);
    uint64_t gen = __atomic_load_n(&p->share_gen, __ATOMIC_ACQUIRE) + 2;
    __atomic_store_n(&p->share_gen, gen - 1, __ATOMIC_RELEASE);
    for (int i = 0; i < ngroups; i++)
        __atomic_store_n(&p->share_groups[i], (uint16_t)i, __ATOMIC_RELAXED);
    __atomic_store_n(&p->share_ngroups, (uint32_t)ngroups, __ATOMIC_RELEASE);
    __atomic_store_n(&p->share_granularity, (uint32_t)GRANULARITY, __ATOMIC_RELEASE);
    __atomic_store_n(&p->share_gen, gen, __ATOMIC_RELEASE);
    for (int i = 0; i < FLYT_STATUS_SLOTS; i++) {
        int32_t pid = __atomic_load_n(&p->slots[i].pid, __ATOMIC_ACQUIRE);
        if (pid > 0)
            CHECK_EQ(kill(pid, SIGURG), 0, "SIGURG to session %d", (int)pid);
    }
    return gen;
}

/* Whether every session acknowledged share gen within ms milliseconds; the
 * result of the last one (a CUresult). */
static int acknowledged(struct flyt_server_status *p, uint64_t gen, int ms, int32_t *result)
{
    for (int i = 0; i < FLYT_STATUS_SLOTS; i++) {
        if (__atomic_load_n(&p->slots[i].pid, __ATOMIC_ACQUIRE) <= 0)
            continue;
        int done = 0;
        for (int k = 0; k < ms / 5 && !done; k++) {
            done = __atomic_load_n(&p->slots[i].share_gen, __ATOMIC_ACQUIRE) >= gen;
            struct timespec ts = {0, 5 * 1000 * 1000};
            if (!done)
                nanosleep(&ts, NULL);
        }
        if (!done)
            return 0;
        *result = __atomic_load_n(&p->slots[i].share_result, __ATOMIC_ACQUIRE);
    }
    return 1;
}

/* One resize, returning once every session applied it. */
static void resize(struct flyt_server_status *p, int ngroups, uint64_t quota)
{
    int32_t result = -1;
    CHECK(acknowledged(p, post(p, ngroups, quota), 5000, &result), "the sessions applied the resize");
    CHECK_EQ(result, CUDA_SUCCESS, "its result");
    for (int i = 0; i < FLYT_STATUS_SLOTS; i++)
        if (__atomic_load_n(&p->slots[i].pid, __ATOMIC_ACQUIRE) > 0)
            CHECK_EQ(p->slots[i].share_sms, (uint32_t)(ngroups * GRANULARITY), "its SM count");
}

static int sm_count(CUdevice dev)
{
    int v = 0;
    CHECK_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), CUDA_SUCCESS,
             "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
    return v;
}

static uint64_t total_mem(CUdevice dev)
{
    size_t v = 0;
    CHECK_EQ(cuDeviceTotalMem(&v, dev), CUDA_SUCCESS, "cuDeviceTotalMem");
    return v;
}

static CUstreamAttrValue get_attr(CUstream s, CUstreamAttrID id)
{
    CUstreamAttrValue v;
    memset(&v, 0xa5, sizeof v);
    CHECK_EQ(cuStreamGetAttribute(s, id, &v), CUDA_SUCCESS, "cuStreamGetAttribute(%d)", (int)id);
    return v;
}

static void check_streams(CUstream prio, CUstream nonblocking, const char *when)
{
    int p = 0;
    unsigned flags = 99;
    CHECK_EQ(cuStreamGetPriority(prio, &p), CUDA_SUCCESS, "cuStreamGetPriority %s", when);
    CHECK_EQ(p, -3, "the stream's priority %s", when);
    CHECK_EQ(cuStreamGetFlags(nonblocking, &flags), CUDA_SUCCESS, "cuStreamGetFlags %s", when);
    CHECK_EQ(flags, CU_STREAM_NON_BLOCKING, "the non-blocking stream's flags %s", when);
    CHECK_EQ(get_attr(prio, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY).syncPolicy,
             CU_SYNC_POLICY_SPIN, "its synchronization policy %s", when);
    CUaccessPolicyWindow w = get_attr(prio, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW).accessPolicyWindow;
    CHECK_EQ(w.num_bytes, 1 * MiB, "its access policy window's size %s", when);
    CHECK_EQ(w.hitProp, CU_ACCESS_PROPERTY_PERSISTING, "its access policy window's hit property %s",
             when);
    CHECK_EQ(get_attr(nonblocking, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN).memSyncDomain,
             CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE, "the copied stream's memory sync domain %s", when);
    CHECK_EQ(get_attr(NULL, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY).syncPolicy,
             CU_SYNC_POLICY_BLOCKING_SYNC, "the NULL stream's synchronization policy %s", when);
}

/* A stream capture open in the session holds a resize until it ends (its graph is
 * tied to the streams a resize moves), then the share applies; one still open after
 * the server's 1 s wait refuses it, the share unchanged. */
static void resize_during_capture(struct flyt_server_status *p, CUdevice dev, CUstream s)
{
    int sms = sm_count(dev), other = sms == 2 * GRANULARITY ? 3 : 2;
    uint64_t quota = total_mem(dev);
    CUgraph graph;
    CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS, "a capture begins");
    int32_t result = -1;
    uint64_t gen = post(p, other, quota);
    CHECK(!acknowledged(p, gen, 200, &result), "a resize posted during the capture waits");
    CHECK_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS, "the capture ends");
    CHECK(acknowledged(p, gen, 2000, &result), "the resize applies after it");
    CHECK_EQ(result, CUDA_SUCCESS, "with success");
    /* the acknowledgement can come before the client read the server's frame:
     * a call that waits for the server has seen it (as after the first resize) */
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS, "cuCtxSynchronize");
    CHECK_EQ(sm_count(dev), other * GRANULARITY, "the new SM count");
    CHECK_EQ(cuGraphDestroy(graph), CUDA_SUCCESS, "cuGraphDestroy");

    CHECK_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS, "a capture begins");
    gen = post(p, sms / GRANULARITY, quota);
    CHECK(acknowledged(p, gen, 3000, &result), "a capture still open at the deadline: answered");
    CHECK_EQ(result, CUDA_ERROR_NOT_PERMITTED, "refused");
    CHECK_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS, "the capture ends");
    CHECK_EQ(sm_count(dev), other * GRANULARITY, "the share is unchanged");
    CHECK_EQ(cuGraphDestroy(graph), CUDA_SUCCESS, "cuGraphDestroy");
    resize(p, sms / GRANULARITY, quota);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s STATUS-FILE\n", argv[0]);
        return 2;
    }
    struct flyt_server_status *page = map_page(argv[1]);
    CUdevice dev;
    CUcontext ctx;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS, "cuInit");
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS, "cuDeviceGet");
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS, "cuDevicePrimaryCtxRetain");
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS, "cuCtxSetCurrent");

    /* the server may have been resized by an earlier run: go to the other share */
    int sms0 = sm_count(dev);
    uint64_t total0 = total_mem(dev);
    printf("before: %d SMs, %llu MiB\n", sms0, (unsigned long long)(total0 / MiB));
    int groups = sms0 == 2 * GRANULARITY ? 6 : 2;
    uint64_t quota = total0 == 64 * MiB ? 128 * MiB : 64 * MiB;

    CUstream prio, nonblocking;
    CHECK_EQ(cuStreamCreateWithPriority(&prio, CU_STREAM_DEFAULT, -3), CUDA_SUCCESS,
             "a stream of priority -3");
    CHECK_EQ(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS,
             "a non-blocking stream");
    CUstreamAttrValue v;
    memset(&v, 0, sizeof v);
    v.syncPolicy = CU_SYNC_POLICY_SPIN;
    CHECK_EQ(cuStreamSetAttribute(prio, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v), CUDA_SUCCESS,
             "cuStreamSetAttribute(SYNCHRONIZATION_POLICY)");
    memset(&v, 0, sizeof v);
    v.accessPolicyWindow.num_bytes = 1 * MiB;
    v.accessPolicyWindow.hitRatio = 0.5f;
    v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
    v.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
    CHECK_EQ(cuStreamSetAttribute(prio, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v), CUDA_SUCCESS,
             "cuStreamSetAttribute(ACCESS_POLICY_WINDOW)");
    memset(&v, 0, sizeof v);
    v.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
    CHECK_EQ(cuStreamSetAttribute(prio, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, &v), CUDA_SUCCESS,
             "cuStreamSetAttribute(MEM_SYNC_DOMAIN)");
    CHECK_EQ(cuStreamCopyAttributes(nonblocking, prio), CUDA_SUCCESS, "cuStreamCopyAttributes");
    memset(&v, 0, sizeof v);
    v.syncPolicy = CU_SYNC_POLICY_BLOCKING_SYNC;
    CHECK_EQ(cuStreamSetAttribute(NULL, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v),
             CUDA_SUCCESS, "cuStreamSetAttribute on the NULL stream");
    check_streams(prio, nonblocking, "before the resize");
    struct cudaDeviceProp props;
    CHECK_EQ(cudaGetDeviceProperties(&props, 0), cudaSuccess, "cudaGetDeviceProperties");
    CHECK_EQ(props.multiProcessorCount, sms0, "the runtime's properties: the SM count");

    resize(page, groups, quota);
    /* the server told the client before it answers anything on the new
     * share: any call that waits for the server has seen the change */
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS, "cuCtxSynchronize");
    printf("after: %d SMs, %llu MiB\n", sm_count(dev), (unsigned long long)(total_mem(dev) / MiB));
    CHECK_EQ(sm_count(dev), groups * GRANULARITY, "cuDeviceGetAttribute answers the new SM count");
    CHECK_EQ(total_mem(dev), quota, "cuDeviceTotalMem answers the new quota");
    size_t fr = 0, tot = 0;
    CHECK_EQ(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS, "cuMemGetInfo");
    CHECK_EQ(tot, quota, "cuMemGetInfo's total is the new quota");
    check_streams(prio, nonblocking, "after the resize");
    int rt_sms = 0;
    CHECK_EQ(cudaDeviceGetAttribute(&rt_sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess,
             "cudaDeviceGetAttribute");
    CHECK_EQ(rt_sms, groups * GRANULARITY, "cudaDeviceGetAttribute answers the new SM count");
    CHECK_EQ(cudaGetDeviceProperties(&props, 0), cudaSuccess, "cudaGetDeviceProperties");
    printf("cudaGetDeviceProperties after the resize (the runtime's copy): %d SMs, %llu MiB\n",
           props.multiProcessorCount, (unsigned long long)(props.totalGlobalMem / MiB));

    resize_during_capture(page, dev, nonblocking);
    CHECK_EQ(cuStreamDestroy(prio), CUDA_SUCCESS, "cuStreamDestroy");
    CHECK_EQ(cuStreamDestroy(nonblocking), CUDA_SUCCESS, "cuStreamDestroy");
    CHECK_EQ(cuDevicePrimaryCtxRelease(dev), CUDA_SUCCESS, "cuDevicePrimaryCtxRelease");
    munmap(page, sizeof *page);
    printf("test_share_push: PASSED\n");
    return 0;
}

/*
 * The node's GPUs: index, UUID, name, SMs, SM granularity, memory.
 *
 * backend = cuda: read through the CUDA driver API (libcuda.so.1, opened with
 * dlopen as the server does, never linked) in a forked child that sends the
 * table back through a pipe and exits, so the node manager never holds driver
 * state or driver threads (it forks servers all the time). The SM granularity
 * comes from the driver's SM resource (the larger of its minimum partition
 * and co-scheduling alignment) unless the config sets one; the SM count
 * reported is what splits into whole groups (cuDevSmResourceSplitByCount),
 * so that every group index the cluster manager hands out exists.
 *
 * backend = host: the fake GPUs the config declares (test mode).
 */
#include "nm.h"

#include "flyt_gpu_uuid.h"
#include "flyt_log.h"

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* the driver functions used, by their cuda.h names (macros give the ABI version) */
#define NM_CU_FUNCS(X)        \
    X(cuInit)                 \
    X(cuDeviceGetCount)       \
    X(cuDeviceGet)            \
    X(cuDeviceGetName)        \
    X(cuDeviceGetUuid)        \
    X(cuDeviceTotalMem)       \
    X(cuDeviceGetAttribute)   \
    X(cuDeviceGetDevResource) \
    X(cuDevSmResourceSplitByCount)

#define NM_STR2(x) #x
#define NM_STRX(x) NM_STR2(x) /* after macro expansion: "cuDeviceTotalMem_v2" */
#define NM_MEMBER(fn) __typeof__(&fn) fn;
struct cu_api {
    NM_CU_FUNCS(NM_MEMBER)
};

struct probe_result {
    int  status;        /* 0, or -1 with msg */
    char msg[400];
    int  n;
    struct nm_gpu gpus[NM_MAX_GPUS];
};


/* In the child: fills r. */
static void probe(int granularity, struct probe_result *r)
{
    memset(r, 0, sizeof *r);
    r->status = -1;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(r->msg, sizeof r->msg,
                 "libcuda.so.1 not found: no NVIDIA driver on this machine (%s); backend = host "
                 "is the test mode",
                 why ? why : "dlopen failed");
        return;
    }
    struct cu_api cu;
#define NM_RESOLVE(fn)                                                                   \
    if (!(*(void **)&cu.fn = dlsym(lib, NM_STRX(fn)))) {                                 \
        snprintf(r->msg, sizeof r->msg, "libcuda.so.1 lacks %s (driver too old)", NM_STRX(fn)); \
        return;                                                                          \
    }
    NM_CU_FUNCS(NM_RESOLVE)
    CUresult e = cu.cuInit(0);
    int count = 0;
    if (e == CUDA_SUCCESS)
        e = cu.cuDeviceGetCount(&count);
    if (e != CUDA_SUCCESS) {
        snprintf(r->msg, sizeof r->msg, "the CUDA driver does not start (cuInit: error %d)", (int)e);
        return;
    }
    if (count > NM_MAX_GPUS)
        count = NM_MAX_GPUS;
    for (int i = 0; i < count; i++) {
        struct nm_gpu *g = &r->gpus[r->n];
        CUdevice dev;
        CUuuid uuid;
        size_t mem = 0;
        int sms = 0, cc_major = 0, cc_minor = 0;
        CUdevResource res;
        memset(&res, 0, sizeof res);
        memset(g, 0, sizeof *g);
        if ((e = cu.cuDeviceGet(&dev, i)) != CUDA_SUCCESS ||
            (e = cu.cuDeviceGetName(g->name, (int)sizeof g->name, dev)) != CUDA_SUCCESS ||
            (e = cu.cuDeviceGetUuid(&uuid, dev)) != CUDA_SUCCESS ||
            (e = cu.cuDeviceTotalMem(&mem, dev)) != CUDA_SUCCESS ||
            (e = cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) !=
                CUDA_SUCCESS ||
            (e = cu.cuDeviceGetAttribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                         dev)) != CUDA_SUCCESS ||
            (e = cu.cuDeviceGetAttribute(&cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                         dev)) != CUDA_SUCCESS ||
            (e = cu.cuDeviceGetDevResource(dev, &res, CU_DEV_RESOURCE_TYPE_SM)) != CUDA_SUCCESS) {
            snprintf(r->msg, sizeof r->msg, "GPU %d: the driver answers error %d", i, (int)e);
            return;
        }
        g->index = i;
        flyt_gpu_uuid_text(uuid.bytes, g->uuid, sizeof g->uuid);
        g->memory_total = (long long)mem;
        g->compute_capability = cc_major * 10 + cc_minor;
        int gran = granularity;
        if (gran <= 0) {
            unsigned a = res.sm.smCoscheduledAlignment ? res.sm.smCoscheduledAlignment : 1;
            unsigned m = res.sm.minSmPartitionSize > a ? res.sm.minSmPartitionSize : a;
            gran = (int)((m + a - 1) / a * a);
        }
        unsigned groups = 0;
        e = cu.cuDevSmResourceSplitByCount(NULL, &groups, &res, NULL, 0, (unsigned)gran);
        if (e != CUDA_SUCCESS || groups == 0) {
            snprintf(r->msg, sizeof r->msg,
                     "GPU %d (%s): its %d SMs do not split into groups of %d (error %d): set "
                     "sm_granularity",
                     i, g->name, sms, gran, (int)e);
            return;
        }
        g->sm_granularity = gran;
        g->sm_count = (int)groups * gran;
        if (g->sm_count > sms)
            g->sm_count = sms / gran * gran;
        r->n++;
    }
    r->status = 0;
}

int nm_gpus_discover(const struct nm_config *c, struct nm_gpu *out, int *n, char *err,
                     size_t errlen)
{
    *n = 0;
    if (c->host_backend) {
        /* deterministic fake UUIDs: the node id's hash and the index */
        unsigned h = 2166136261u;
        for (const char *p = c->node_id; *p; p++)
            h = (h ^ (unsigned char)*p) * 16777619u;
        for (int i = 0; i < c->test_gpus; i++) {
            struct nm_gpu *g = &out[i];
            memset(g, 0, sizeof *g);
            g->index = i;
            snprintf(g->uuid, sizeof g->uuid, "GPU-fa4e0000-0000-4000-8000-%08x%04x", h, i);
            snprintf(g->name, sizeof g->name, "%s", c->test_gpu_name);
            g->sm_granularity = c->test_gpu_sm_granularity;
            g->sm_count = c->test_gpu_sm_count / g->sm_granularity * g->sm_granularity;
            g->memory_total = c->test_gpu_memory;
            g->compute_capability = c->test_gpu_cc_value;
        }
        *n = c->test_gpus;
        return 0;
    }

    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        static struct probe_result r;
        probe(c->sm_granularity, &r);
        const char *p = (const char *)&r;
        size_t left = sizeof r;
        while (left) {
            ssize_t w = write(fds[1], p, left);
            if (w <= 0)
                _exit(1);
            p += w;
            left -= (size_t)w;
        }
        _exit(0);
    }
    close(fds[1]);
    static struct probe_result r;
    memset(&r, 0, sizeof r);
    char *p = (char *)&r;
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t rd = read(fds[0], p + got, sizeof r - got);
        if (rd < 0 && errno == EINTR)
            continue;
        if (rd <= 0)
            break;
        got += (size_t)rd;
    }
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (got != sizeof r) {
        snprintf(err, errlen, "the GPU probe died (%s %d) before it answered",
                 WIFSIGNALED(st) ? "signal" : "status",
                 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        return -1;
    }
    if (r.status != 0) {
        snprintf(err, errlen, "%s", r.msg);
        return -1;
    }
    if (r.n == 0) {
        snprintf(err, errlen, "the CUDA driver sees no GPU");
        return -1;
    }
    memcpy(out, r.gpus, sizeof r.gpus[0] * (size_t)r.n);
    *n = r.n;
    return 0;
}

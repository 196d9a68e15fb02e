/*
 * Flyt's NVML and Flyt's libcuda.so.1 in one program that forks, against a
 * flyt-server on the host-memory backend (run_with_server.sh). Natively NVML
 * does not initialise CUDA: a program may ask NVML, fork workers, and use
 * CUDA in them (vLLM does), while a child forked after the program's own
 * cuInit gets CUDA_ERROR_NOT_INITIALIZED and may still ask NVML. Each child
 * reports its failed checks as its exit status. Also CUDA_VISIBLE_DEVICES, in fresh
 * processes (this program again).
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "flyt_nvml.h"

#define CU_OK(call) CHECK_EQ((call), CUDA_SUCCESS, "%s", #call)

/* A round trip through the session: 4 KiB set on the device and read back. */
static int device_round_trip(unsigned char value)
{
    CUdeviceptr d = 0;
    unsigned char host[4096];
    memset(host, 0, sizeof host);
    if (cuMemAlloc(&d, sizeof host) != CUDA_SUCCESS)
        return 1;
    int bad = cuMemsetD8(d, value, sizeof host) != CUDA_SUCCESS;
    bad += cuMemcpyDtoH(host, d, sizeof host) != CUDA_SUCCESS;
    bad += host[0] != value || host[sizeof host - 1] != value;
    bad += cuMemFree(d) != CUDA_SUCCESS;
    return bad;
}

/* NVML's memory answer, asked in whichever process calls it. */
static int nvml_memory_ok(void)
{
    nvmlDevice_t dev;
    nvmlMemory_t mem = {0};
    if (nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS ||
        nvmlDeviceGetMemoryInfo(dev, &mem) != NVML_SUCCESS)
        return 0;
    return mem.total > 0 && mem.free <= mem.total;
}

static int child_status(pid_t pid)
{
    int st = -1;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* The child of a process that asked only NVML: CUDA starts afresh in it. */
static int child_after_nvml_only(void)
{
    CUdevice dev = -1;
    CUcontext ctx = NULL;
    int bad = cuInit(0) != CUDA_SUCCESS;
    bad += cuDeviceGet(&dev, 0) != CUDA_SUCCESS;
    bad += cuCtxCreate(&ctx, NULL, 0, dev) != CUDA_SUCCESS;
    bad += device_round_trip(0x5a);
    bad += !nvml_memory_ok();
    bad += cuCtxDestroy(ctx) != CUDA_SUCCESS;
    return bad;
}

/* The child of a process that called cuInit: refused, NVML still answers
 * (through a session of its own), and NVML's start is not the child's cuInit. */
static int child_after_cuinit(void)
{
    int n = -1;
    int bad = cuInit(0) != CUDA_ERROR_NOT_INITIALIZED;
    bad += cuDeviceGetCount(&n) != CUDA_ERROR_NOT_INITIALIZED;
    bad += !nvml_memory_ok();
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    nvmlDevice_t dev;
    bad += nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS ||
           nvmlDeviceGetName(dev, name, sizeof name) != NVML_SUCCESS;
    bad += cuInit(0) != CUDA_ERROR_NOT_INITIALIZED;
    bad += cuMemAlloc(&(CUdeviceptr){0}, 4096) != CUDA_ERROR_NOT_INITIALIZED;
    return bad;
}

/* A fresh process (this program again, argv[1] "visible") with CUDA_VISIBLE_DEVICES set
 * to value: its exit status is 10 * (cuInit's result == want_init) + the device count it
 * got, NVML's count adding 100 when NVML sees the GPU anyway. */
static int visible_child(const char *self, const char *value)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (value)
            setenv("CUDA_VISIBLE_DEVICES", value, 1);
        else
            unsetenv("CUDA_VISIBLE_DEVICES");
        execl(self, self, "visible", (char *)NULL);
        _exit(99);
    }
    return child_status(pid);
}

static int visible_main(void)
{
    int n = -1;
    unsigned int nvml_count = 0;
    CUresult init = cuInit(0);
    CUresult count = cuDeviceGetCount(&n);
    int code = init == CUDA_SUCCESS ? 1 : init == CUDA_ERROR_NO_DEVICE ? 2 : 3;
    code = code * 10 + (count == CUDA_SUCCESS ? n : count == CUDA_ERROR_NO_DEVICE ? 7 : 8);
    if (nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetCount_v2(&nvml_count) == NVML_SUCCESS &&
        nvml_count == 1)
        code += 100;
    return code;
}

/* CUDA_VISIBLE_DEVICES against the session's one GPU (index 0, its UUID): the program
 * sees it only when the first entry names it; NVML sees it whatever the variable says. */
static void test_visible_devices(const char *self, CUdevice dev)
{
    CUuuid u;
    CU_OK(cuDeviceGetUuid(&u, dev));
    const unsigned char *b = (const unsigned char *)u.bytes;
    char ours[32], other[32], upper[32];
    snprintf(ours, sizeof ours, "GPU-%02x%02x%02x%02x-%02x", b[0], b[1], b[2], b[3], b[4]);
    snprintf(other, sizeof other, "GPU-%02x%02x", b[0] ^ 0xff, b[1]);
    snprintf(upper, sizeof upper, "GPU-%02X%02X%02X", b[0], b[1], b[2]);
    const struct {
        const char *value;
        int want;
    } cases[] = {
        {NULL, 111}, {"0", 111}, {"0,1", 111}, {ours, 111}, {upper, 111},
        {"", 127}, {"1", 127}, {"-1", 127}, {"1,0", 127}, {other, 127}, {"MIG-0", 127},
        {"GPU-", 127}, {" 0", 111}, {"0 ,1", 111}, {" 1", 127},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = visible_child(self, cases[i].value);
        CHECK_EQ(got, cases[i].want, "CUDA_VISIBLE_DEVICES=%s%s%s: cuInit, device count and "
                 "NVML's count as the driver's (%d)", cases[i].value ? "'" : "(unset)",
                 cases[i].value ? cases[i].value : "", cases[i].value ? "'" : "", got);
    }
}

static pid_t fork_child(int (*body)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(body());
    return pid;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "visible") == 0)
        return visible_main();
    unsigned int count = 0;
    CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS, "nvmlInit");
    CHECK(nvmlDeviceGetCount_v2(&count) == NVML_SUCCESS && count == 1, "NVML sees one device");
    CHECK(nvml_memory_ok(), "NVML's memory answer, with no context of the program's");
    int n = -1;
    CHECK_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED,
             "NVML's start is not the program's cuInit");

    pid_t pid = fork_child(child_after_nvml_only);
    CHECK(pid > 0, "fork");
    CHECK_EQ(child_status(pid), 0,
             "a child forked after NVML only: cuInit, a context, memory set and read back, NVML");
    CHECK(nvml_memory_ok(), "the parent's NVML answers after the child ended");

    CUdevice dev = -1;
    CUcontext ctx = NULL;
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGet(&dev, 0));
    CU_OK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK_EQ(device_round_trip(0x21), 0, "the parent uses CUDA after NVML");

    pid = fork_child(child_after_cuinit);
    CHECK(pid > 0, "fork");
    CHECK_EQ(child_status(pid), 0,
             "a child forked after cuInit: CUDA_ERROR_NOT_INITIALIZED, yet NVML answers");
    CHECK_EQ(device_round_trip(0x33), 0, "the parent's session carries on after the children");
    CHECK(nvml_memory_ok(), "and its NVML");
    test_visible_devices(argv[0], dev);
    CU_OK(cuCtxDestroy(ctx));
    CHECK_EQ(nvmlShutdown(), NVML_SUCCESS, "nvmlShutdown");
    return check_done();
}

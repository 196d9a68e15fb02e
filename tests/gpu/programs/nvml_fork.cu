// nvml_fork: a program asks NVML only (as vLLM does before it forks its
// workers), forks, and its child uses CUDA; then the parent uses CUDA and a
// child forked after that is refused CUDA (initialization error) yet still
// asks NVML. Then CUDA_VISIBLE_DEVICES in fresh processes (this program
// again): what the runtime and NVML count. NVML is opened with dlopen (libnvidia-ml.so.1: NVIDIA's natively,
// Flyt's through flyt-run), declared here by hand (nvml.h is not in the
// toolkit). Prints only what native and Flyt share (no sizes or names).
//
// stdout: deterministic results only.  stderr: timings.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test_util.h"

typedef struct nvml_device *nvml_device_t;
struct nvml_memory {
    unsigned long long total, free, used;
};

static struct {
    int (*init)(void);
    int (*count)(unsigned int *);
    int (*handle)(unsigned int, nvml_device_t *);
    int (*memory)(nvml_device_t, struct nvml_memory *);
} nvml;

static void load_nvml(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (lib == NULL) {
        printf("FAIL: no libnvidia-ml.so.1 (%s)\n", dlerror());
        exit(1);
    }
    *(void **)&nvml.init = dlsym(lib, "nvmlInit_v2");
    *(void **)&nvml.count = dlsym(lib, "nvmlDeviceGetCount_v2");
    *(void **)&nvml.handle = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&nvml.memory = dlsym(lib, "nvmlDeviceGetMemoryInfo");
    if (!nvml.init || !nvml.count || !nvml.handle || !nvml.memory) {
        printf("FAIL: libnvidia-ml.so.1 lacks an entry point\n");
        exit(1);
    }
}

// NVML's device count and whether its memory answer is consistent
static void ask_nvml(const char *who)
{
    unsigned int n = 0;
    nvml_device_t dev;
    struct nvml_memory mem = {0, 0, 0};
    int init = nvml.init();
    int count = nvml.count(&n);
    int memory = nvml.handle(0, &dev) == 0 ? nvml.memory(dev, &mem) : -1;
    printf("%s: nvmlInit %d, count %d (%s), memory %d (%s)\n", who, init, count,
           n >= 1 ? "some" : "none", memory,
           mem.total > 0 && mem.free <= mem.total ? "consistent" : "inconsistent");
}

__global__ void iota(double *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = i;
}

// the sum of 0..n-1 made on the GPU, or the error of the first failed call
static void use_cuda(const char *who)
{
    const int n = 1 << 20;
    double *d = NULL;
    cudaError_t e = cudaMalloc(&d, n * sizeof(double));
    if (e != cudaSuccess) {
        printf("%s: cudaMalloc -> %d (%s)\n", who, (int)e, cudaGetErrorName(e));
        return;
    }
    iota<<<(n + 255) / 256, 256>>>(d, n);
    double *h = (double *)malloc(n * sizeof(double));
    e = cudaMemcpy(h, d, n * sizeof(double), cudaMemcpyDeviceToHost);
    double sum = 0;
    for (int i = 0; e == cudaSuccess && i < n; i++)
        sum += h[i];
    printf("%s: kernel and copy -> %d, sum %.0f\n", who, (int)e, sum);
    free(h);
    cudaFree(d);
}

// CUDA_VISIBLE_DEVICES: this program again in a fresh process with the variable set,
// printing what the runtime and NVML count there
static int visible_main(void)
{
    int n = -1;
    cudaError_t e = cudaGetDeviceCount(&n);
    unsigned int nv = 0;
    int ok = nvml.init() == 0 && nvml.count(&nv) == 0;
    printf("cudaGetDeviceCount -> %d (%s), count %d; NVML %s %u\n", (int)e, cudaGetErrorName(e),
           e == cudaSuccess ? n : 0, ok ? "count" : "failed", nv);
    return 0;
}

static void visible_cases(const char *self)
{
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    const unsigned char *b = (const unsigned char *)p.uuid.bytes;
    char ours[32], upper[32], other[32];
    snprintf(ours, sizeof ours, "GPU-%02x%02x%02x%02x-%02x", b[0], b[1], b[2], b[3], b[4]);
    snprintf(upper, sizeof upper, "GPU-%02X%02X%02X", b[0], b[1], b[2]);
    snprintf(other, sizeof other, "GPU-%02x%02x", b[0] ^ 0xff, b[1]);
    const char *names[] = {"unset", "0", "0,1", "GPU-(its UUID's start)", "GPU-(upper case)",
                           "empty", "1", "-1", "1,0", "GPU-(another UUID)", "MIG-0", "GPU-",
                           "' 0'", "'0 '"};
    const char *values[] = {NULL, "0", "0,1", ours, upper, "", "1", "-1", "1,0", other,
                            "MIG-0", "GPU-", " 0", "0 "};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        printf("CUDA_VISIBLE_DEVICES=%s: ", names[i]);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            if (values[i])
                setenv("CUDA_VISIBLE_DEVICES", values[i], 1);
            else
                unsetenv("CUDA_VISIBLE_DEVICES");
            execl(self, self, "visible", (char *)NULL);
            _exit(99);
        }
        int st = -1;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            printf("child status %d\n", st);
    }
}

static void in_child(void (*body)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        body();
        fflush(NULL);
        _exit(0);
    }
    int st = -1;
    waitpid(pid, &st, 0);
    printf("child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static void child_after_nvml(void) { use_cuda("child after NVML only"); }

static void child_after_cuda(void)
{
    use_cuda("child after the parent's CUDA");
    ask_nvml("child after the parent's CUDA");
}

int main(int argc, char **argv)
{
    double t0 = now_s();
    load_nvml();
    if (argc == 2 && strcmp(argv[1], "visible") == 0)
        return visible_main();
    ask_nvml("parent, NVML only");
    in_child(child_after_nvml);
    use_cuda("parent");
    in_child(child_after_cuda);
    use_cuda("parent again");
    visible_cases(argv[0]);
    fprintf(stderr, "nvml_fork: %.3f s\n", now_s() - t0);
    printf("PASS nvml_fork\n");
    return 0;
}

/* Link-time optimisation at run time, as libraries that ship LTO-IR do:
 * NVRTC compiles two translation units to LTO-IR (-dlto), nvJitLink links
 * them for the device's own architecture, and the linked cubin is loaded
 * with cuModuleLoadData and with cuLibraryLoadData (kernel, function,
 * global, enumeration). Then the driver's own linker: cuLinkCreate /
 * cuLinkAddData with NVRTC's PTX of one unit and its relocatable cubin of
 * the other, with info and error log buffers; a link with a missing symbol
 * fails in both linkers with a non-empty error log. Memory and streams come
 * from the runtime. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvJitLink.h>
#include <nvrtc.h>

#include <string.h>
#include <string>
#include <vector>

#include "test_util.h"

#define JIT(call)                                                            \
    do {                                                                     \
        nvJitLinkResult r_ = (call);                                         \
        if (r_ != NVJITLINK_SUCCESS) {                                       \
            printf("FAIL line %d: %s -> %d\n", __LINE__, #call, (int)r_);    \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

#define N 3000

static const char *lib_source = R"(
extern "C" __device__ int lto_counter;
__device__ int lto_counter;
extern "C" __device__ float lto_combine(float a, float b)
{
    atomicAdd(&lto_counter, 1);
    return a * 2.0f + b;
}
)";

static const char *main_source = R"(
extern "C" __device__ float lto_combine(float a, float b);
extern "C" __global__ void lto_kernel(const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = lto_combine(x[i], (float)i);
}
extern "C" __global__ void lto_negate(float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = -y[i];
}
)";

enum Output { LTO_IR, PTX, CUBIN };

static std::vector<char> compile(const char *source, const char *name, Output what, int cc)
{
    nvrtcProgram prog;
    RTC(nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL));
    std::string arch = std::string(what == PTX ? "-arch=compute_" : "-arch=sm_") + std::to_string(cc);
    std::vector<const char *> opts = {arch.c_str(), "-rdc=true"};
    if (what == LTO_IR)
        opts.push_back("-dlto");
    nvrtcResult r = nvrtcCompileProgram(prog, (int)opts.size(), opts.data());
    if (r != NVRTC_SUCCESS) {
        size_t log_size = 0;
        nvrtcGetProgramLogSize(prog, &log_size);
        std::vector<char> log(log_size + 1);
        nvrtcGetProgramLog(prog, log.data());
        printf("FAIL nvrtcCompileProgram(%s) -> %s\n", name, nvrtcGetErrorString(r));
        fprintf(stderr, "%s\n", log.data());
        exit(1);
    }
    size_t size = 0;
    std::vector<char> out;
    if (what == LTO_IR) {
        RTC(nvrtcGetLTOIRSize(prog, &size));
        out.resize(size);
        RTC(nvrtcGetLTOIR(prog, out.data()));
    } else if (what == PTX) {
        RTC(nvrtcGetPTXSize(prog, &size));
        out.resize(size);
        RTC(nvrtcGetPTX(prog, out.data()));
    } else {
        RTC(nvrtcGetCUBINSize(prog, &size));
        out.resize(size);
        RTC(nvrtcGetCUBIN(prog, out.data()));
    }
    RTC(nvrtcDestroyProgram(&prog));
    return out;
}

/* nvJitLink of the given LTO-IR units; NVJITLINK_SUCCESS fills cubin. */
static nvJitLinkResult jit_link(const std::vector<std::vector<char>> &units, int cc,
                                std::vector<char> &cubin, size_t *error_log_size)
{
    std::string arch = "-arch=sm_" + std::to_string(cc);
    const char *opts[] = {arch.c_str(), "-lto", "-O3"};
    nvJitLinkHandle h;
    JIT(nvJitLinkCreate(&h, 3, opts));
    for (size_t i = 0; i < units.size(); i++) {
        std::string name = "unit" + std::to_string(i);
        JIT(nvJitLinkAddData(h, NVJITLINK_INPUT_LTOIR, units[i].data(), units[i].size(), name.c_str()));
    }
    nvJitLinkResult r = nvJitLinkComplete(h);
    *error_log_size = 0;
    JIT(nvJitLinkGetErrorLogSize(h, error_log_size));
    if (r == NVJITLINK_SUCCESS) {
        size_t size = 0;
        JIT(nvJitLinkGetLinkedCubinSize(h, &size));
        cubin.resize(size);
        JIT(nvJitLinkGetLinkedCubin(h, cubin.data()));
    }
    JIT(nvJitLinkDestroy(&h));
    return r;
}

static float *d_x, *d_y;
static float h_x[N], h_y[N];

static void setup_data(void)
{
    for (int i = 0; i < N; i++)
        h_x[i] = (float)(i % 50);
    CHECK(cudaMalloc(&d_x, sizeof h_x));
    CHECK(cudaMalloc(&d_y, sizeof h_y));
    CHECK(cudaMemcpy(d_x, h_x, sizeof h_x, cudaMemcpyHostToDevice));
}

/* Runs fn (lto_kernel) on a runtime stream and checks y and the counter. */
static void run_and_check(CUfunction fn, CUdeviceptr counter, const char *what)
{
    int zero = 0;
    CHECK(cudaMemcpy((void *)counter, &zero, sizeof zero, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d_y, 0, sizeof h_y));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int n = N;
    void *params[] = {&d_x, &d_y, &n};
    DRV(cuLaunchKernel(fn, (N + 127) / 128, 1, 1, 128, 1, 1, 0, (CUstream)s, params, NULL));
    CHECK(cudaMemcpyAsync(h_y, d_y, sizeof h_y, cudaMemcpyDeviceToHost, s));
    int count = 0;
    CHECK(cudaMemcpyAsync(&count, (void *)counter, sizeof count, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += h_y[i] != 2.0f * h_x[i] + (float)i;
    char line[160];
    snprintf(line, sizeof line, "%s: results exact, device counter %d", what, count);
    expect(bad == 0 && count == N, line);
}

static void nvjitlink_part(int cc)
{
    std::vector<std::vector<char>> units = {compile(main_source, "lto_main.cu", LTO_IR, cc),
                                            compile(lib_source, "lto_lib.cu", LTO_IR, cc)};
    std::vector<char> cubin;
    size_t log_size = 0;
    nvJitLinkResult r = jit_link(units, cc, cubin, &log_size);
    expect(r == NVJITLINK_SUCCESS && !cubin.empty(), "nvJitLink links two LTO-IR units");

    CUmodule mod;
    DRV(cuModuleLoadData(&mod, cubin.data()));
    CUfunction fn;
    DRV(cuModuleGetFunction(&fn, mod, "lto_kernel"));
    CUdeviceptr counter;
    size_t counter_size = 0;
    DRV(cuModuleGetGlobal(&counter, &counter_size, mod, "lto_counter"));
    expect(counter_size == sizeof(int), "lto_counter is 4 bytes");
    run_and_check(fn, counter, "nvJitLink cubin through cuModuleLoadData");
    DRV(cuModuleUnload(mod));

    CUlibrary lib;
    DRV(cuLibraryLoadData(&lib, cubin.data(), NULL, NULL, 0, NULL, NULL, 0));
    unsigned int count = 0;
    DRV(cuLibraryGetKernelCount(&count, lib));
    printf("cuLibraryGetKernelCount = %u\n", count);
    CUkernel kernels[8];
    DRV(cuLibraryEnumerateKernels(kernels, count < 8 ? count : 8, lib));
    int found = 0;
    for (unsigned int i = 0; i < count && i < 8; i++) {
        const char *name = NULL;
        DRV(cuKernelGetName(&name, kernels[i]));
        found += name && (!strcmp(name, "lto_kernel") || !strcmp(name, "lto_negate"));
    }
    expect(found == 2, "cuLibraryEnumerateKernels + cuKernelGetName find both kernels");
    CUkernel kernel;
    DRV(cuLibraryGetKernel(&kernel, lib, "lto_kernel"));
    CUdeviceptr lib_counter;
    size_t lib_counter_size = 0;
    DRV(cuLibraryGetGlobal(&lib_counter, &lib_counter_size, lib, "lto_counter"));
    CUfunction lib_fn;
    DRV(cuKernelGetFunction(&lib_fn, kernel));
    run_and_check(lib_fn, lib_counter, "cuLibraryLoadData + cuKernelGetFunction");
    run_and_check((CUfunction)kernel, lib_counter, "CUkernel passed to cuLaunchKernel");
    int regs = 0;
    CUdevice dev;
    DRV(cuDeviceGet(&dev, 0));
    DRV(cuKernelGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel, dev));
    expect(regs > 0, "cuKernelGetAttribute(NUM_REGS) > 0");
    DRV(cuLibraryUnload(lib));

    /* only the unit that calls lto_combine: an undefined symbol */
    std::vector<std::vector<char>> alone = {units[0]};
    std::vector<char> none;
    r = jit_link(alone, cc, none, &log_size);
    printf("nvJitLink with an undefined function: %s, error log %s\n",
           r == NVJITLINK_SUCCESS ? "linked" : "failed", log_size > 1 ? "non-empty" : "empty");
}

static CUresult driver_link(const std::vector<char> &ptx, const std::vector<char> *cubin,
                            void **image, CUlinkState *state, char *error_log, char *info_log)
{
    CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_LOG_VERBOSE};
    void *values[] = {info_log, (void *)(uintptr_t)4096, error_log, (void *)(uintptr_t)4096,
                      (void *)(uintptr_t)1};
    DRV(cuLinkCreate(5, opts, values, state));
    DRV(cuLinkAddData(*state, CU_JIT_INPUT_PTX, (void *)ptx.data(), ptx.size(), "main.ptx", 0, NULL,
                      NULL));
    if (cubin)
        DRV(cuLinkAddData(*state, CU_JIT_INPUT_CUBIN, (void *)cubin->data(), cubin->size(),
                          "lib.cubin", 0, NULL, NULL));
    size_t size = 0;
    return cuLinkComplete(*state, image, &size);
}

static void driver_linker_part(int cc)
{
    std::vector<char> ptx = compile(main_source, "lto_main.cu", PTX, cc);
    std::vector<char> cubin = compile(lib_source, "lto_lib.cu", CUBIN, cc);
    static char error_log[4096], info_log[4096];
    CUlinkState state;
    void *image = NULL;
    DRV(driver_link(ptx, &cubin, &image, &state, error_log, info_log));
    expect(error_log[0] == '\0', "cuLinkComplete PTX + cubin: empty error log");
    printf("cuLinkComplete PTX + cubin: verbose info log %s\n", info_log[0] ? "non-empty" : "empty");
    CUmodule mod;
    DRV(cuModuleLoadData(&mod, image));
    DRV(cuLinkDestroy(state));
    CUfunction fn, negate;
    DRV(cuModuleGetFunction(&fn, mod, "lto_kernel"));
    DRV(cuModuleGetFunction(&negate, mod, "lto_negate"));
    CUdeviceptr counter;
    DRV(cuModuleGetGlobal(&counter, NULL, mod, "lto_counter"));
    run_and_check(fn, counter, "cuLinkAddData PTX + cubin");
    int n = N;
    void *params[] = {&d_y, &n};
    DRV(cuLaunchKernel(negate, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CHECK(cudaMemcpy(h_y, d_y, sizeof h_y, cudaMemcpyDeviceToHost));
    expect(h_y[N - 1] == -(2.0f * h_x[N - 1] + (float)(N - 1)), "second kernel of the linked module");
    DRV(cuModuleUnload(mod));

    memset(error_log, 0, sizeof error_log);
    CUresult r = driver_link(ptx, NULL, &image, &state, error_log, info_log);
    const char *name = NULL;
    cuGetErrorName(r, &name);
    printf("cuLinkComplete with an undefined function -> %s, error log %s\n", name ? name : "?",
           error_log[0] ? "non-empty" : "empty");
    DRV(cuLinkDestroy(state));
}

int main(void)
{
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    int major = 0, minor = 0;
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    int cc = major * 10 + minor;
    int nvrtc_major = 0, nvrtc_minor = 0, jit_version = 0;
    RTC(nvrtcVersion(&nvrtc_major, &nvrtc_minor));
    JIT(nvJitLinkVersion((unsigned int *)&jit_version, (unsigned int *)&nvrtc_minor));
    fprintf(stderr, "nvrtc %d, nvJitLink %d, device sm_%d\n", nvrtc_major, jit_version, cc);
    setup_data();
    nvjitlink_part(cc);
    driver_linker_part(cc);
    CHECK(cudaFree(d_x));
    CHECK(cudaFree(d_y));
    printf("%s\n", failures ? "nvjitlink_lto: FAILED" : "nvjitlink_lto: all checks passed");
    return failures ? 1 : 0;
}

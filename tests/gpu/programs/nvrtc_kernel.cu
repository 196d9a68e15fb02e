/* NVRTC: compiles CUDA C++ source at run time, once to PTX (compute_XY,
 * JIT-compiled by the driver at load) and once to a CUBIN (sm_XY) for the
 * device's own architecture, loads both with the driver API, resolves a
 * template instantiation through its lowered name, launches and checks
 * against the host.  No CUDA runtime (-cudart none). */
#include <cuda.h>
#include <nvrtc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <string>
#include <vector>

#define FLYT_TEST_NO_RUNTIME
#include "test_util.h"

static const char *source = R"(
extern "C" __global__ void poly(const float *x, float *y, int n, float a, float b, float c)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = (a * x[i] + b) * x[i] + c;
}

namespace rt {
template <typename T>
__global__ void scale(T *v, int n, T s)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v[i] = v[i] * s + (T)i;
}
}
)";

struct Compiled {
    std::vector<char> image;
    std::string lowered; /* lowered name of rt::scale<int> */
};

static Compiled compile(const char *arch_option, int cubin)
{
    nvrtcProgram prog;
    RTC(nvrtcCreateProgram(&prog, source, "nvrtc_kernel_src.cu", 0, NULL, NULL));
    RTC(nvrtcAddNameExpression(prog, "rt::scale<int>"));
    const char *opts[] = {arch_option, "--std=c++17", "-lineinfo"};
    nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
    size_t log_size = 0;
    RTC(nvrtcGetProgramLogSize(prog, &log_size));
    std::vector<char> log(log_size + 1);
    RTC(nvrtcGetProgramLog(prog, log.data()));
    if (r != NVRTC_SUCCESS) {
        printf("FAIL nvrtcCompileProgram(%s) -> %s\n", arch_option, nvrtcGetErrorString(r));
        fprintf(stderr, "%s\n", log.data());
        exit(1);
    }
    Compiled out;
    const char *lowered = NULL;
    RTC(nvrtcGetLoweredName(prog, "rt::scale<int>", &lowered));
    out.lowered = lowered;
    size_t size = 0;
    if (cubin) {
        RTC(nvrtcGetCUBINSize(prog, &size));
        out.image.resize(size);
        RTC(nvrtcGetCUBIN(prog, out.image.data()));
    } else {
        RTC(nvrtcGetPTXSize(prog, &size)); /* includes the terminating NUL */
        out.image.resize(size);
        RTC(nvrtcGetPTX(prog, out.image.data()));
    }
    RTC(nvrtcDestroyProgram(&prog));
    return out;
}

static int run(const char *what, const Compiled &c)
{
    CUmodule mod;
    DRV(cuModuleLoadData(&mod, c.image.data()));
    CUfunction poly, scale;
    DRV(cuModuleGetFunction(&poly, mod, "poly"));
    DRV(cuModuleGetFunction(&scale, mod, c.lowered.c_str()));

    const int n = 5000;
    std::vector<float> hx(n), hy(n);
    std::vector<int> hv(n);
    for (int i = 0; i < n; i++) {
        hx[i] = (float)(i % 17 - 8);
        hv[i] = i % 100 - 50;
    }
    CUdeviceptr dx, dy, dv;
    DRV(cuMemAlloc(&dx, n * sizeof(float)));
    DRV(cuMemAlloc(&dy, n * sizeof(float)));
    DRV(cuMemAlloc(&dv, n * sizeof(int)));
    DRV(cuMemcpyHtoD(dx, hx.data(), n * sizeof(float)));
    DRV(cuMemcpyHtoD(dv, hv.data(), n * sizeof(int)));
    int nn = n, s = -3;
    float a = 0.5f, b = -2.0f, cc = 3.0f;
    void *pargs[] = {&dx, &dy, &nn, &a, &b, &cc};
    void *sargs[] = {&dv, &nn, &s};
    DRV(cuLaunchKernel(poly, (n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, pargs, NULL));
    DRV(cuLaunchKernel(scale, 8, 1, 1, 128, 1, 1, 0, NULL, sargs, NULL));
    DRV(cuCtxSynchronize());
    DRV(cuMemcpyDtoH(hy.data(), dy, n * sizeof(float)));
    std::vector<int> gv(n);
    DRV(cuMemcpyDtoH(gv.data(), dv, n * sizeof(int)));
    int bad = 0;
    double sum = 0;
    long long isum = 0;
    for (int i = 0; i < n; i++) {
        float x = hx[i];
        bad += hy[i] != (a * x + b) * x + cc; /* exact: small halves and integers */
        bad += gv[i] != hv[i] * s + i;
        sum += hy[i];
        isum += gv[i];
    }
    printf("%s: poly checksum %.1f, scale<int> checksum %lld, mismatches %d\n", what, sum, isum, bad);
    DRV(cuMemFree(dx));
    DRV(cuMemFree(dy));
    DRV(cuMemFree(dv));
    DRV(cuModuleUnload(mod));
    return bad == 0;
}

int main(void)
{
    const double t0 = now_s();
    DRV(cuInit(0));
    CUdevice dev;
    DRV(cuDeviceGet(&dev, 0));
    int major = 0, minor = 0;
    DRV(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    DRV(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CUcontext ctx;
    DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
    DRV(cuCtxSetCurrent(ctx));
    int rmaj = 0, rmin = 0;
    RTC(nvrtcVersion(&rmaj, &rmin));
    fprintf(stderr, "nvrtc %d.%d, device sm_%d%d\n", rmaj, rmin, major, minor);

    char virt[64], real[64];
    snprintf(virt, sizeof virt, "--gpu-architecture=compute_%d%d", major, minor);
    snprintf(real, sizeof real, "--gpu-architecture=sm_%d%d", major, minor);
    Compiled ptx = compile(virt, 0);
    Compiled cubin = compile(real, 1);
    printf("compiled for the device's architecture: ptx %s, cubin %s, lowered name %s\n",
           ptx.image.size() > 1 && strstr(ptx.image.data(), ".entry poly") ? "yes" : "no",
           cubin.image.size() > 4 && memcmp(cubin.image.data(), "\177ELF", 4) == 0 ? "yes" : "no",
           ptx.lowered.c_str());
    expect(ptx.lowered == cubin.lowered && !ptx.lowered.empty(), "nvrtc compiled PTX and CUBIN");
    expect(run("ptx (JIT)", ptx), "NVRTC PTX loaded with cuModuleLoadData and run");
    expect(run("cubin", cubin), "NVRTC CUBIN loaded with cuModuleLoadData and run");

    DRV(cuDevicePrimaryCtxRelease(dev));
    fprintf(stderr, "nvrtc_kernel: %.3f s\n", now_s() - t0);
    printf("%s nvrtc_kernel\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}

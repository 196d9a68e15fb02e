/*
 * The client side of test_server_vanish: a program on Flyt's libcuda.so.1
 * (FLYT_SERVER, FLYT_KEEPALIVE from its environment) that makes a context
 * and an allocation, prints "ready", then synchronises; the server's fake
 * device never finishes (FLYT_HOST_BACKEND_SYNC_MS=forever) and the test
 * makes the server's machine vanish meanwhile. The call must fail as for a
 * lost server (CUDA_ERROR_DEVICE_UNAVAILABLE) once the keepalive gives up;
 * it prints how long that took and exits 0.
 */
#include <cuda.h>
#include <stdio.h>
#include <time.h>

#include "check.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr ptr;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS, "cuInit");
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS, "cuDeviceGet");
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS, "cuDevicePrimaryCtxRetain");
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS, "cuCtxSetCurrent");
    CHECK_EQ(cuMemAlloc(&ptr, 1 << 20), CUDA_SUCCESS, "cuMemAlloc");
    printf("ready\n");
    double t0 = now_s();
    CUresult r = cuCtxSynchronize();
    CHECK_EQ(r, CUDA_ERROR_DEVICE_UNAVAILABLE,
             "cuCtxSynchronize, its server gone, fails as for a lost server after %.1f s",
             now_s() - t0);
    return 0;
}

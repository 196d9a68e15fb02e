/*
 * Which device addresses can a fresh process reserve again? (issue 10:
 * restoring allocations at their addresses). Native driver API, no Flyt.
 *   va_probe alloc SIZE         cuMemAlloc, prints the address
 *   va_probe vmm SIZE           cuMemAddressReserve without a hint, prints it
 *   va_probe reserve ADDR SIZE  cuMemAddressReserve with ADDR as the hint (after the
 *                               context exists), prints what the driver gave
 *   va_probe early ADDR SIZE    the same before any cuMemAlloc and before the
 *                               primary context is made current
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        printf("%s: CUDA error %d\n", what, (int)r);
        exit(1);
    }
    return 0;
}

static void context(CUdevice *dev)
{
    CUcontext ctx;
    check(cuDeviceGet(dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, *dev), "retain");
    check(cuCtxSetCurrent(ctx), "set current");
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    check(cuInit(0), "cuInit");
    CUdevice dev;
    unsigned long long size = strtoull(argv[argc - 1], NULL, 0);
    if (strcmp(argv[1], "early") == 0) {
        check(cuDeviceGet(&dev, 0), "cuDeviceGet");
        CUcontext ctx;
        check(cuDevicePrimaryCtxRetain(&ctx, dev), "retain");
        check(cuCtxSetCurrent(ctx), "set current");
    } else {
        context(&dev);
    }
    if (strcmp(argv[1], "alloc") == 0) {
        CUdeviceptr p;
        check(cuMemAlloc(&p, size), "cuMemAlloc");
        printf("alloc 0x%llx\n", (unsigned long long)p);
    } else if (strcmp(argv[1], "vmm") == 0) {
        CUdeviceptr p;
        check(cuMemAddressReserve(&p, size, 0, 0, 0), "reserve");
        printf("vmm 0x%llx\n", (unsigned long long)p);
    } else if (argc == 4) {
        CUdeviceptr want = (CUdeviceptr)strtoull(argv[2], NULL, 0), got;
        check(cuMemAddressReserve(&got, size, 0, want, 0), "reserve");
        printf("%s want 0x%llx got 0x%llx %s\n", argv[1], (unsigned long long)want,
               (unsigned long long)got, got == want ? "GRANTED" : "OTHER");
    }
    return 0;
}

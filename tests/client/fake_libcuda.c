/*
 * A stand-in libcuda.so.1 for test_nvml: the few driver API calls Flyt's
 * NVML makes, answering for two fixed virtual GPUs. It keeps the driver's
 * rules NVML must follow (cuInit first; cuMemGetInfo only with a current
 * context) so that the test catches NVML breaking them.
 *   FLYT_FAKE_CUDA_INIT_ERROR=<CUresult>  makes cuInit fail with that code.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#define FAKE_GIB (1024ULL * 1024 * 1024)
#define FAKE_DEVICES 2

struct fake_ctx {
    int dev;
    int refs; /* primary context retains not yet released */
};

static int fake_ready;
static struct fake_ctx fake_primary[FAKE_DEVICES] = {{0, 0}, {1, 0}};
static _Thread_local struct fake_ctx *fake_stack[8];
static _Thread_local int fake_depth;

/* Seen by the test through dlsym, to check NVML's context handling. */
int flyt_fake_cuda_primary_refs(int dev);
int flyt_fake_cuda_ctx_depth(void);
int flyt_fake_cuda_primary_refs(int dev) { return fake_primary[dev].refs; }
int flyt_fake_cuda_ctx_depth(void) { return fake_depth; }

static CUresult fake_check(CUdevice dev)
{
    if (!fake_ready)
        return CUDA_ERROR_NOT_INITIALIZED;
    return dev >= 0 && dev < FAKE_DEVICES ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuInit(unsigned int flags)
{
    const char *fail = getenv("FLYT_FAKE_CUDA_INIT_ERROR");
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (fail != NULL && *fail != '\0')
        return (CUresult)atoi(fail);
    fake_ready = 1;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version)
{
    *version = 13000;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (!fake_ready)
        return CUDA_ERROR_NOT_INITIALIZED;
    *count = FAKE_DEVICES;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    CUresult r = fake_check(ordinal);
    if (r == CUDA_SUCCESS)
        *dev = ordinal;
    return r;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult r = fake_check(dev);
    if (r == CUDA_SUCCESS) {
        strncpy(name, "Flyt virtual GPU", (size_t)len - 1);
        name[len - 1] = '\0';
    }
    return r;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult r = fake_check(dev);
    if (r == CUDA_SUCCESS)
        *bytes = 16 * FAKE_GIB;
    return r;
}

/* GPU-12345678-9abc-def0-0123-456789abcdef, and ...abce for device 1. */
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    static const unsigned char bytes[16] = {0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0,
                                            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
    CUresult r = fake_check(dev);
    if (r == CUDA_SUCCESS) {
        memcpy(uuid->bytes, bytes, sizeof bytes);
        uuid->bytes[15] = (char)(0xef - dev);
    }
    return r;
}

static int fake_attribute(CUdevice_attribute attr, CUdevice dev)
{
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 56;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return dev == 0 ? 0x3b : 0x5e;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1755000;        /* kHz */
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000; /* kHz */
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    default: return -1;
    }
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
    CUresult r = fake_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    int v = fake_attribute(attr, dev);
    if (v < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *value = v;
    return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    CUresult r = fake_check(dev);
    if (r == CUDA_SUCCESS)
        r = fake_check(peer);
    if (r == CUDA_SUCCESS)
        *can = dev != peer;
    return r;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    CUresult r = fake_check(dev);
    if (r == CUDA_SUCCESS) {
        fake_primary[dev].refs++;
        *ctx = (CUcontext)(void *)&fake_primary[dev];
    }
    return r;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult r = fake_check(dev);
    if (r == CUDA_SUCCESS && fake_primary[dev].refs == 0)
        r = CUDA_ERROR_INVALID_CONTEXT;
    if (r == CUDA_SUCCESS)
        fake_primary[dev].refs--;
    return r;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    struct fake_ctx *c = (struct fake_ctx *)(void *)ctx;
    if (c == NULL || c->refs == 0 || fake_depth == 8)
        return CUDA_ERROR_INVALID_CONTEXT;
    fake_stack[fake_depth++] = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
    if (fake_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct fake_ctx *c = fake_stack[--fake_depth];
    if (ctx != NULL)
        *ctx = (CUcontext)(void *)c;
    return CUDA_SUCCESS;
}

/* 16 GiB each; 4 GiB in use on device 0, 6 GiB on device 1. */
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    if (fake_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    int dev = fake_stack[fake_depth - 1]->dev;
    *total = 16 * FAKE_GIB;
    *free_bytes = (dev == 0 ? 12 : 10) * FAKE_GIB;
    return CUDA_SUCCESS;
}

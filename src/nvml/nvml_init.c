/*
 * NVML's life cycle (reference-counted init and shutdown, as NVIDIA's), its
 * error strings, and the system-wide queries.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flyt_assert.h"
#include "nvml_internal.h"

struct nvmlDevice_st flyt_nvml_devices[FLYT_NVML_MAX_DEVICES];
unsigned int flyt_nvml_device_count;

static pthread_mutex_t flyt_nvml_mutex = FLYT_MUTEX_INITIALIZER;
static int flyt_nvml_refs; /* nvmlInit calls not yet matched by nvmlShutdown */

void flyt_nvml_lock(void) { pthread_mutex_lock(&flyt_nvml_mutex); }
void flyt_nvml_unlock(void) { pthread_mutex_unlock(&flyt_nvml_mutex); }
void flyt_nvml_assert_locked(void) { FLYT_ASSERT_HELD(&flyt_nvml_mutex); }

int flyt_nvml_is_ready(void) { return __atomic_load_n(&flyt_nvml_refs, __ATOMIC_ACQUIRE) > 0; }

/* One line on stderr, written at once so that lines of threads don't mix. */
void flyt_nvml_say(const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof line, "flyt: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

nvmlReturn_t flyt_nvml_copy_string(char *dst, unsigned int length, const char *src)
{
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t need = strlen(src) + 1;
    if (length < need)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, need);
    return NVML_SUCCESS;
}

/* The first nvmlInit: load the driver, start it, describe every device. */
static nvmlReturn_t flyt_nvml_start(unsigned int flags)
{
    unsigned int count = 0;
    nvmlReturn_t r = flyt_nvml_cuda_load();
    if (r != NVML_SUCCESS)
        return r;
    (void)flyt_nvml_cuda_enter(); /* the start below says what failed */
    r = flyt_nvml_cuda_start(flags, &count);
    for (unsigned int i = 0; r == NVML_SUCCESS && i < count; i++)
        r = flyt_nvml_snapshot(&flyt_nvml_devices[i], i);
    flyt_nvml_cuda_leave();
    flyt_nvml_device_count = r == NVML_SUCCESS ? count : 0;
    return r;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t r = NVML_SUCCESS;
    flyt_nvml_lock();
    /* A failed start is not remembered: the next nvmlInit tries again,
     * since the GPU server may have come up meanwhile. */
    if (flyt_nvml_refs == 0)
        r = flyt_nvml_start(flags);
    if (r == NVML_SUCCESS)
        __atomic_store_n(&flyt_nvml_refs, flyt_nvml_refs + 1, __ATOMIC_RELEASE);
    flyt_nvml_unlock();
    return r;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

/* The pre-v2 entry point; NVIDIA's attached every GPU up front, Flyt's
 * answers are the same either way. */
FLYT_NVML_EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

FLYT_NVML_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t r = NVML_SUCCESS;
    flyt_nvml_lock();
    if (flyt_nvml_refs == 0) {
        r = NVML_ERROR_UNINITIALIZED;
    } else if (flyt_nvml_refs == 1) {
        for (unsigned int i = 0; i < flyt_nvml_device_count; i++)
            flyt_nvml_release_context(&flyt_nvml_devices[i]);
    }
    if (r == NVML_SUCCESS)
        __atomic_store_n(&flyt_nvml_refs, flyt_nvml_refs - 1, __ATOMIC_RELEASE);
    flyt_nvml_unlock();
    return r;
}

FLYT_NVML_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "ECC is not supported in vGPU";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    }
    return "Unknown Error";
}

/* The host's kernel driver version is not visible through the CUDA driver
 * API; Flyt's client manager may pass it in the environment. Inventing one
 * would mislead tools that compare versions, so without it: not supported. */
static const char *flyt_nvml_driver_version(void)
{
    const char *v = getenv(FLYT_NVML_DRIVER_VERSION_ENV);
    return v != NULL && *v != '\0' ? v : NULL;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!flyt_nvml_is_ready())
        return NVML_ERROR_UNINITIALIZED;
    const char *v = flyt_nvml_driver_version();
    if (v == NULL)
        return version == NULL ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    return flyt_nvml_copy_string(version, length, v);
}

/* NVIDIA's reads "<CUDA major>.<driver version>" ("13.580.159.04" beside
 * CUDA 13.0) and answers before nvmlInit; Flyt's takes the major from the
 * CUDA driver, and adds the driver version where it is known. */
FLYT_NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    int cuda = 0;
    flyt_nvml_lock();
    nvmlReturn_t r = flyt_nvml_cuda_load();
    flyt_nvml_unlock();
    if (r == NVML_SUCCESS)
        r = flyt_nvml_from_cuda(flyt_nvml_cu.driver_get_version(&cuda));
    if (r != NVML_SUCCESS)
        return r;
    char text[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
    const char *v = flyt_nvml_driver_version();
    snprintf(text, sizeof text, "%d%s%s", cuda / 1000, v ? "." : "", v ? v : "");
    return flyt_nvml_copy_string(version, length, text);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    if (!flyt_nvml_is_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (cudaDriverVersion == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return flyt_nvml_from_cuda(flyt_nvml_cu.driver_get_version(cudaDriverVersion));
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion_v2(cudaDriverVersion);
}

/* Counts that are truthfully zero for a virtual GPU: no S-class units, no
 * devices hidden from NVML. */
static nvmlReturn_t flyt_nvml_zero_count(unsigned int *count)
{
    if (!flyt_nvml_is_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount)
{
    return flyt_nvml_zero_count(unitCount);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount)
{
    return flyt_nvml_zero_count(deviceCount);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlGetBlacklistDeviceCount(unsigned int *deviceCount)
{
    return flyt_nvml_zero_count(deviceCount);
}

/*
 * CUDA's error model on the client: a per-thread last error that
 * cudaGetLastError reads and clears, and a process-wide sticky error (a
 * kernel fault breaks the context) that no call clears.
 */
#include "client.h"

#include <stdatomic.h>
#include <stdio.h>

static _Thread_local cudaError_t last_error = cudaSuccess;
static atomic_int sticky_error = cudaSuccess;

/* Errors after which the context is unusable: CUDA returns them from every
 * later call. */
static int is_sticky(cudaError_t err)
{
    switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
        return 1;
    default:
        return 0;
    }
}

cudaError_t flyt_set_error(cudaError_t err)
{
    if (err != cudaSuccess) {
        last_error = err;
        if (is_sticky(err)) {
            int expected = cudaSuccess;
            atomic_compare_exchange_strong(&sticky_error, &expected, (int)err);
        }
    }
    return err;
}

/* Driver and runtime codes share their numbers for every error the server
 * can return (NVIDIA aligned them); codes only the runtime has come from the
 * client's own checks. */
cudaError_t flyt_map_result(int cu_result)
{
    return (cudaError_t)cu_result;
}

cudaError_t flyt_sticky_error(void) { return (cudaError_t)atomic_load(&sticky_error); }

void flyt_reset_errors(void)
{
    atomic_store(&sticky_error, cudaSuccess);
    last_error = cudaSuccess;
}

static void say_unsupported(const char *name, int *warned)
{
    if (__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED) == 0)
        fprintf(stderr, "flyt: %s is not supported by Flyt yet; returning cudaErrorNotSupported\n",
                name);
}

/* Partial support inside carried-out functions: said once per message (the
 * callers pass string literals, so the pointer names the message). */
cudaError_t flyt_unsupported(const char *name)
{
    static const char *said[32];
    static int warned[32];
    for (int i = 0; i < 32; i++) {
        const char *cur = __atomic_load_n(&said[i], __ATOMIC_ACQUIRE);
        if (cur == NULL) {
            const char *expected = NULL;
            if (!__atomic_compare_exchange_n(&said[i], &expected, name, 0, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE))
                cur = expected;
            else
                cur = name;
        }
        if (cur == name) {
            say_unsupported(name, &warned[i]);
            return flyt_set_error(cudaErrorNotSupported);
        }
    }
    int always = 0; /* more messages than slots: say it every time */
    say_unsupported(name, &always);
    return flyt_set_error(cudaErrorNotSupported);
}

/* Even a sticky error is cleared from the last error: CUDA keeps it only in
 * the broken context, whose later calls keep failing (measured on CUDA 13). */
FLYT_EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t err = last_error;
    last_error = cudaSuccess;
    return err;
}

FLYT_EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

struct error_name {
    int code;
    const char *name;
};

static const struct error_name error_names[] = {
#define FLYT_ERR(name, value) {value, #name},
#include "flyt_error_names.inc"
#undef FLYT_ERR
};

/* Descriptions for the errors applications meet most; others fall back to
 * their name. */
static const struct error_name error_texts[] = {
    {cudaSuccess, "no error"},
    {cudaErrorInvalidValue, "invalid argument"},
    {cudaErrorMemoryAllocation, "out of memory"},
    {cudaErrorInitializationError, "initialization error"},
    {cudaErrorCudartUnloading, "driver shutting down"},
    {cudaErrorInvalidConfiguration, "invalid configuration argument"},
    {cudaErrorInvalidPitchValue, "invalid pitch argument"},
    {cudaErrorInvalidSymbol, "invalid device symbol"},
    {cudaErrorInvalidDevicePointer, "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable"},
    {cudaErrorInvalidDeviceFunction, "invalid device function"},
    {cudaErrorNoDevice, "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "invalid device ordinal"},
    {cudaErrorInvalidKernelImage, "device kernel image is invalid"},
    {cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device"},
    {cudaErrorInvalidResourceHandle, "invalid resource handle"},
    {cudaErrorSymbolNotFound, "named symbol not found"},
    {cudaErrorNotReady, "device not ready"},
    {cudaErrorIllegalAddress, "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "too many resources requested for launch"},
    {cudaErrorLaunchFailure, "unspecified launch failure"},
    {cudaErrorNotSupported, "operation not supported"},
    {cudaErrorUnknown, "unknown error"},
};

static const char *lookup(const struct error_name *table, size_t n, int code)
{
    for (size_t i = 0; i < n; i++)
        if (table[i].code == code)
            return table[i].name;
    return NULL;
}

FLYT_EXPORT const char *cudaGetErrorName(cudaError_t error)
{
    const char *name = lookup(error_names, sizeof error_names / sizeof *error_names, error);
    return name ? name : "unrecognized error code";
}

FLYT_EXPORT const char *cudaGetErrorString(cudaError_t error)
{
    const char *text = lookup(error_texts, sizeof error_texts / sizeof *error_texts, error);
    if (text)
        return text;
    const char *name = lookup(error_names, sizeof error_names / sizeof *error_names, error);
    return name ? name : "unrecognized error code";
}

int flyt_unsupported_once(const char *name, int *warned);
int flyt_unsupported_once(const char *name, int *warned)
{
    say_unsupported(name, warned);
    return flyt_set_error(cudaErrorNotSupported);
}

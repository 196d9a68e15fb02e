// hangup_check: a program blocked on a kernel that never ends, to be killed
// (tests/gpu/hangup_check.sh runs it through flyt-server and kills it; the
// server must end the session and free the GPU, docs/server.md).
//
// usage: hangup_check MODE
//   ctx     a never-ending kernel, then cudaDeviceSynchronize
//   stream  the kernel on a created stream, then cudaStreamSynchronize
//   event   the kernel, an event recorded after it, then cudaEventSynchronize
//   copy    the kernel, then a blocking cudaMemcpy device to host
//   free    the kernel, then cudaFree of another buffer (says whether it
//           returned), then cudaDeviceSynchronize
//   idle    the kernel, then no CUDA call at all: the process just waits
//   long    a kernel of about 3 s, then cudaDeviceSynchronize: must return
// Prints "hangup_check: blocking in MODE" (flushed) before the blocking call;
// only `long` (and a failed CUDA call) ever ends by itself: exit 0, 1 on
// an error.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <unistd.h>

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        printf("hangup_check: %s failed: %s\n", what, cudaGetErrorName(e));
        fflush(stdout);
        _exit(1);
    }
}

// Nobody ever sets *flag.
__global__ void spin_forever(volatile int *flag)
{
    while (*flag == 0)
        __nanosleep(1000);
}

__global__ void spin_for(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static void blocking(const char *mode)
{
    printf("hangup_check: blocking in %s\n", mode);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s ctx|stream|event|copy|free|idle|long\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    int *flag = nullptr, *other = nullptr;
    check(cudaMalloc(&flag, sizeof *flag), "cudaMalloc");
    check(cudaMalloc(&other, 1 << 20), "cudaMalloc");
    check(cudaMemset(flag, 0, sizeof *flag), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before the kernel");

    if (strcmp(mode, "long") == 0) {
        int khz = 0;
        check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0), "cudaDeviceGetAttribute");
        spin_for<<<1, 1>>>(3000LL * khz);
        check(cudaGetLastError(), "launch");
        blocking(mode);
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        printf("hangup_check: the 3 s kernel ended\n");
        return 0;
    }
    cudaStream_t stream = 0;
    if (strcmp(mode, "stream") == 0)
        check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    spin_forever<<<1, 1, 0, stream>>>(flag);
    check(cudaGetLastError(), "launch");
    blocking(mode);
    if (strcmp(mode, "ctx") == 0) {
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    } else if (strcmp(mode, "stream") == 0) {
        check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    } else if (strcmp(mode, "event") == 0) {
        cudaEvent_t ev;
        check(cudaEventCreate(&ev), "cudaEventCreate");
        check(cudaEventRecord(ev, 0), "cudaEventRecord");
        check(cudaEventSynchronize(ev), "cudaEventSynchronize");
    } else if (strcmp(mode, "copy") == 0) {
        int host = 0;
        check(cudaMemcpy(&host, flag, sizeof host, cudaMemcpyDeviceToHost), "cudaMemcpy");
    } else if (strcmp(mode, "free") == 0) {
        check(cudaFree(other), "cudaFree");
        printf("hangup_check: cudaFree returned while the kernel runs\n");
        fflush(stdout);
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    } else if (strcmp(mode, "idle") == 0) {
        for (;;)
            pause();
    } else {
        fprintf(stderr, "hangup_check: unknown mode %s\n", mode);
        return 2;
    }
    printf("hangup_check: the never-ending kernel ended?\n");
    return 1;
}

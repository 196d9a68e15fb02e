/*
 * The client of run_ckpt.sh, on the driver API through Flyt's libcuda.so.1
 * (FLYT_SERVER, FLYT_SESSION_TOKEN):
 *   ckpt_client hold FILE   allocates 1 MiB, fills it with a pattern, writes the
 *                           pointer to FILE and stays connected until killed
 *   ckpt_client check PTR   reads 1 MiB at PTR (an allocation of the session it
 *                           resumes) and checks the pattern; exit 0 when it holds
 */
#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BYTES (1u << 20)

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + 3); }

#define TRY(call)                                                                  \
    do {                                                                           \
        CUresult r_ = (call);                                                      \
        if (r_ != CUDA_SUCCESS) {                                                  \
            fprintf(stderr, "ckpt_client: %s: CUDA error %d\n", #call, (int)r_);   \
            return 1;                                                              \
        }                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    CUdevice dev;
    CUcontext ctx;
    static unsigned char buf[BYTES];
    TRY(cuInit(0));
    TRY(cuDeviceGet(&dev, 0));
    TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
    TRY(cuCtxSetCurrent(ctx));
    if (strcmp(argv[1], "hold") == 0) {
        CUdeviceptr p;
        TRY(cuMemAlloc(&p, BYTES));
        for (size_t i = 0; i < BYTES; i++)
            buf[i] = pattern(i);
        TRY(cuMemcpyHtoD(p, buf, BYTES));
        TRY(cuCtxSynchronize());
        FILE *f = fopen(argv[2], "w");
        if (!f)
            return 1;
        fprintf(f, "%llu\n", (unsigned long long)p);
        fclose(f);
        for (;;)
            pause();
    }
    CUdeviceptr p = (CUdeviceptr)strtoull(argv[2], NULL, 10);
    TRY(cuMemcpyDtoH(buf, p, BYTES));
    for (size_t i = 0; i < BYTES; i++)
        if (buf[i] != pattern(i)) {
            fprintf(stderr, "ckpt_client: byte %zu is %u, not %u\n", i, buf[i], pattern(i));
            return 1;
        }
    printf("ckpt_client: 1 MiB at %llu holds its pattern\n", (unsigned long long)p);
    return 0;
}

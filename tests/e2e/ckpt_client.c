/*
 * The client of run_ckpt.sh, on the driver API through Flyt's libcuda.so.1
 * (FLYT_SERVER, FLYT_SESSION_TOKEN):
 *   ckpt_client hold FILE   allocates 1 MiB (CKPT_CLIENT_MIB), fills it with a pattern, writes the
 *                           pointer to FILE and stays connected until killed
 *   ckpt_client live FILE   as hold, and loads a kernel image first, but carries on
 *                           itself: once FILE.go exists (its session moved meanwhile)
 *                           it reads its allocation back, checks the pattern, allocates
 *                           and copies anew, unloads its module, and exits 0 when every
 *                           call succeeded and every byte held
 *   ckpt_client loop FILE   as hold, but copies 4 KiB back in a loop until FILE.go exists (its
 *                           session moved meanwhile), checks the pattern and prints the
 *                           longest time between two replies: the downtime the program saw
 *   ckpt_client check PTR   reads 1 MiB at PTR (an allocation of the session it
 *                           resumes) and checks the pattern; exit 0 when it holds
 */
#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_fatbin.h"

/* CKPT_CLIENT_MIB (default 1): how much hold and live allocate, and check reads */
static size_t bytes = 1u << 20;

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + 3); }

#define TRY(call)                                                                  \
    do {                                                                           \
        CUresult r_ = (call);                                                      \
        if (r_ != CUDA_SUCCESS) {                                                  \
            fprintf(stderr, "ckpt_client: %s: CUDA error %d\n", #call, (int)r_);   \
            return 1;                                                              \
        }                                                                          \
    } while (0)

static int holds_pattern(const unsigned char *buf)
{
    for (size_t i = 0; i < bytes; i++)
        if (buf[i] != pattern(i)) {
            fprintf(stderr, "ckpt_client: byte %zu is %u, not %u\n", i, buf[i], pattern(i));
            return 0;
        }
    return 1;
}

/* A minimal fatbinary (the host backend takes it; no kernel runs from it). */
static int module_in(CUmodule *mod)
{
    unsigned char img[FLYT_FAKE_FATBIN_HEADER + 64];
    flyt_fake_fatbin(img, 64, 1);
    TRY(cuModuleLoadData(mod, img));
    return 0;
}

/* CKPT_CLIENT_IMAGES=N:KIB: N more modules of KIB KiB each (a program's kernel images,
 * which a streamed move pre-copies); 0, or 1 on failure. */
static int images_in(void)
{
    const char *spec = getenv("CKPT_CLIENT_IMAGES");
    unsigned n = 0, kib = 0;
    if (!spec || sscanf(spec, "%u:%u", &n, &kib) != 2 || n == 0 || kib == 0)
        return 0;
    size_t body = (size_t)kib << 10;
    unsigned char *img = malloc(FLYT_FAKE_FATBIN_HEADER + body);
    for (unsigned i = 0; img && i < n; i++) {
        CUmodule mod;
        flyt_fake_fatbin(img, body, (unsigned char)(i + 2));
        TRY(cuModuleLoadData(&mod, img));
    }
    free(img);
    return img ? 0 : 1;
}

/* The session moves while the program idles; its next calls must simply work. */
static int live(const char *file, unsigned char *buf, CUmodule mod)
{
    char go[4096];
    snprintf(go, sizeof go, "%s.go", file);
    FILE *f = fopen(file, "r");
    unsigned long long ptr = 0;
    if (!f || fscanf(f, "%llu", &ptr) != 1)
        return 1;
    fclose(f);
    while (access(go, F_OK) != 0)
        usleep(20000);
    memset(buf, 0, bytes);
    TRY(cuMemcpyDtoH(buf, (CUdeviceptr)ptr, bytes));
    if (!holds_pattern(buf))
        return 1;
    CUdeviceptr q;
    TRY(cuMemAlloc(&q, bytes));
    TRY(cuMemcpyDtoD(q, (CUdeviceptr)ptr, bytes));
    memset(buf, 0, bytes);
    TRY(cuMemcpyDtoH(buf, q, bytes));
    if (!holds_pattern(buf))
        return 1;
    TRY(cuMemFree(q));
    TRY(cuModuleUnload(mod)); /* the module moved with its session, under its handle */
    printf("ckpt_client: carried on after the move: %zu MiB at %llu holds its pattern\n",
           bytes >> 20, ptr);
    return 0;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* Calls without pause while the session moves: the longest gap is its downtime. */
static int loop(const char *file, CUdeviceptr ptr, unsigned char *buf)
{
    char go[4096];
    snprintf(go, sizeof go, "%s.go", file);
    double last = now_ms(), longest = 0;
    unsigned long calls = 0;
    while (access(go, F_OK) != 0) {
        TRY(cuMemcpyDtoH(buf, ptr, 4096));
        double t = now_ms();
        longest = t - last > longest ? t - last : longest;
        last = t;
        calls++;
    }
    TRY(cuMemcpyDtoH(buf, ptr, bytes));
    if (!holds_pattern(buf))
        return 1;
    printf("ckpt_client: %lu calls, longest gap between two %.3f ms\n", calls, longest);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    CUdevice dev;
    CUcontext ctx;
    const char *mib = getenv("CKPT_CLIENT_MIB");
    if (mib && atoi(mib) > 0)
        bytes = (size_t)atoi(mib) << 20;
    unsigned char *buf = malloc(bytes);
    if (!buf)
        return 1;
    TRY(cuInit(0));
    TRY(cuDeviceGet(&dev, 0));
    TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
    TRY(cuCtxSetCurrent(ctx));
    int looping = strcmp(argv[1], "loop") == 0;
    int living = strcmp(argv[1], "live") == 0;
    CUmodule mod = NULL;
    if (living && module_in(&mod) != 0)
        return 1;
    if (looping && images_in() != 0)
        return 1;
    if (strcmp(argv[1], "hold") == 0 || living || looping) {
        CUdeviceptr p;
        TRY(cuMemAlloc(&p, bytes));
        for (size_t i = 0; i < bytes; i++)
            buf[i] = pattern(i);
        TRY(cuMemcpyHtoD(p, buf, bytes));
        TRY(cuCtxSynchronize());
        FILE *f = fopen(argv[2], "w");
        if (!f)
            return 1;
        fprintf(f, "%llu\n", (unsigned long long)p);
        fclose(f);
        if (living) {
            int rc = live(argv[2], buf, mod);
            free(buf);
            return rc;
        }
        if (looping)
            return loop(argv[2], p, buf);
        for (;;)
            pause();
    }
    CUdeviceptr p = (CUdeviceptr)strtoull(argv[2], NULL, 10);
    TRY(cuMemcpyDtoH(buf, p, bytes));
    int holds = holds_pattern(buf);
    free(buf);
    if (!holds)
        return 1;
    printf("ckpt_client: %zu MiB at %llu holds its pattern\n", bytes >> 20, (unsigned long long)p);
    return 0;
}

/* Can a receiving process get a stream-ordered allocation's address back?
 * "first": where a fresh process's first cuMemAllocAsync lands (print it).
 * "plain ADDR": a fresh process creates its context, then asks
 * cuMemAddressReserve for ADDR (what a restore does today).
 * "early ADDR": the range is held with mmap(PROT_NONE) before cuInit, let go
 * after the context exists, then reserved; and where the process's own first
 * cuMemAllocAsync lands then. Run natively. */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SPAN (64ull << 20)

static CUcontext context(void)
{
    CUdevice d;
    CUcontext c;
    cuInit(0);
    cuDeviceGet(&d, 0);
    cuDevicePrimaryCtxRetain(&c, d);
    cuCtxSetCurrent(c);
    return c;
}

static CUdeviceptr first_async(void)
{
    CUdeviceptr p = 0;
    CUresult r = cuMemAllocAsync(&p, 3 << 20, NULL);
    cuStreamSynchronize(NULL);
    printf("cuMemAllocAsync 3 MiB: %d at 0x%llx\n", (int)r, (unsigned long long)p);
    return p;
}

static void reserve(unsigned long long want)
{
    CUdeviceptr got = 0;
    CUresult r = cuMemAddressReserve(&got, 2 << 20, 2 << 20, (CUdeviceptr)want, 0);
    printf("cuMemAddressReserve at 0x%llx: %d, got 0x%llx (%s)\n", want, (int)r,
           (unsigned long long)got, got == want ? "granted" : "not granted");
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "first") == 0) {
        context();
        first_async();
        return 0;
    }
    if (argc < 3)
        return 2;
    unsigned long long want = strtoull(argv[2], NULL, 0);
    void *held = NULL;
    if (strcmp(argv[1], "early") == 0) {
        held = mmap((void *)want, SPAN, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        printf("held 0x%llx before cuInit: %s\n", want, held == (void *)want ? "yes" : "no");
    }
    context();
    if (held == (void *)want)
        munmap(held, SPAN);
    reserve(want);
    first_async();
    return 0;
}

/* Can a receiving process keep its pools off a source's stream-ordered
 * allocations by reserving one span over them before it allocates?
 * "source": as a Flyt server, reserve the arena (twice the GPU's memory),
 * then allocate from the default pool and a created one; print the range.
 * "receiver BASE LO SPAN [pool-first]": reserve the arena at BASE, (with
 * pool-first: create a pool and allocate from it first) then SPAN bytes
 * hinted at LO; map a granule at LO, write and read it; print where the
 * process's own pools then allocate. "adjacent": no arena; hinted spans of
 * 34 MiB side by side from a free 32 MiB-aligned address (the second starts
 * unaligned), then aligned ones with gaps: which does the driver grant?
 * "nopool": where a fresh process's first pool allocation lands with no
 * arena (PyTorch on cudaMallocAsync never asks for plain device memory).
 * Run natively, each a fresh process. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAN (2ull << 20)

static CUdevice dev;

static void context(void)
{
    CUcontext c;
    cuInit(0);
    cuDeviceGet(&dev, 0);
    cuDevicePrimaryCtxRetain(&c, dev);
    cuCtxSetCurrent(c);
}

static unsigned long long arena_size(void)
{
    size_t total = 0;
    cuDeviceTotalMem(&total, dev);
    return ((unsigned long long)total * 2 + GRAN - 1) & ~(GRAN - 1);
}

static CUdeviceptr reserve(unsigned long long size, unsigned long long hint, const char *what)
{
    CUdeviceptr got = 0;
    CUresult r = cuMemAddressReserve(&got, size, GRAN, hint, 0);
    printf("%s: reserve %llu MiB at 0x%llx: %d, got 0x%llx%s\n", what, size >> 20, hint, (int)r,
           (unsigned long long)got, hint == 0 ? "" : got == hint ? " GRANTED" : " OTHER");
    return got;
}

static CUmemoryPool make_pool(void)
{
    CUmemPoolProps p;
    memset(&p, 0, sizeof p);
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    CUmemoryPool pool = NULL;
    CUresult r = cuMemPoolCreate(&pool, &p);
    if (r != CUDA_SUCCESS)
        printf("cuMemPoolCreate: %d\n", (int)r);
    return pool;
}

static CUdeviceptr async(size_t size, CUmemoryPool pool, const char *what)
{
    CUdeviceptr p = 0;
    CUresult r = pool ? cuMemAllocFromPoolAsync(&p, size, pool, NULL) : cuMemAllocAsync(&p, size, NULL);
    cuStreamSynchronize(NULL);
    printf("%s %zu: %d at 0x%llx\n", what, size, (int)r, (unsigned long long)p);
    return p;
}

static int map_and_touch(unsigned long long at)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h;
    CUresult r = cuMemCreate(&h, GRAN, &prop, 0);
    if (r == CUDA_SUCCESS)
        r = cuMemMap(at, GRAN, 0, h, 0);
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (r == CUDA_SUCCESS)
        r = cuMemSetAccess(at, GRAN, &acc, 1);
    unsigned v = 0;
    if (r == CUDA_SUCCESS)
        r = cuMemsetD32(at, 0x5a5a5a5a, GRAN / 4);
    if (r == CUDA_SUCCESS)
        r = cuMemcpyDtoH(&v, at + GRAN - 4, 4);
    printf("map at 0x%llx: %d, read 0x%x\n", at, (int)r, v);
    return r == CUDA_SUCCESS && v == 0x5a5a5a5au;
}

static void adjacent(void)
{
    const unsigned long long mib = 1ull << 20;
    CUdeviceptr free_at = reserve(1024 * mib, 0, "probe");
    cuMemAddressFree(free_at, 1024 * mib);
    unsigned long long at = (free_at + 32 * mib - 1) & ~(32 * mib - 1);
    reserve(34 * mib, at, "first, aligned");
    reserve(34 * mib, at + 34 * mib, "touching it, unaligned");
    reserve(32 * mib, at + 128 * mib, "gap, aligned");
    reserve(34 * mib, at + 162 * mib, "gap of 2 MiB, unaligned");
    reserve(64 * mib, at + 256 * mib, "gap, aligned 64");
    reserve(64 * mib, at + 320 * mib, "touching it, aligned");
}

int main(int argc, char **argv)
{
    context();
    if (argc >= 2 && strcmp(argv[1], "adjacent") == 0) {
        adjacent();
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "nopool") == 0) {
        async(3u << 20, NULL, "default");
        async(100u << 20, NULL, "default");
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "source") == 0) {
        reserve(arena_size(), 0, "arena");
        async(3u << 20, NULL, "default");
        async(100u << 20, NULL, "default");
        async(1024, NULL, "default");
        CUmemoryPool pool = make_pool();
        async(5u << 20, pool, "created");
        async(700u << 20, pool, "created");
        return 0;
    }
    if (argc < 5 || strcmp(argv[1], "receiver") != 0)
        return 2;
    unsigned long long base = strtoull(argv[2], NULL, 0);
    unsigned long long lo = strtoull(argv[3], NULL, 0) & ~(GRAN - 1);
    unsigned long long span = strtoull(argv[4], NULL, 0);
    reserve(arena_size(), base, "arena");
    if (argc > 5 && strcmp(argv[5], "pool-first") == 0)
        async(5u << 20, make_pool(), "created-first");
    if (reserve(span, lo, "span") != lo)
        return 1;
    int ok = map_and_touch(lo) && map_and_touch(lo + span - GRAN);
    async(3u << 20, NULL, "own default");
    async(5u << 20, make_pool(), "own created");
    printf("result: %s\n", ok ? "ok" : "FAILED");
    return 0;
}

/* What NVIDIA's driver answers cuGetProcAddress for a missing symbol and for
 * a version older than a symbol's first one (run natively; the answers fix
 * src/client/procs.c's FLYT_PROC_MISS). Prints one line per case. */
#include <cuda.h>
#include <stdio.h>

#undef cuGetProcAddress /* the unversioned ABI, without the status */
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);

static void ask(const char *symbol, int version)
{
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult status = (CUdriverProcAddressQueryResult)-1;
    CUresult r2 = cuGetProcAddress_v2(symbol, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    void *fn1 = (void *)1;
    CUresult r1 = cuGetProcAddress(symbol, &fn1, version, CU_GET_PROC_ADDRESS_DEFAULT);
    printf("%s at %d: v2 %d status %d pfn %s; v1 %d pfn %s\n", symbol, version, (int)r2,
           (int)status, fn ? "set" : "NULL", (int)r1, fn1 ? "set" : "NULL");
}

int main(void)
{
    printf("cuInit %d\n", (int)cuInit(0));
    ask("cuNoSuchFunction", 12000);
    ask("cuMemAllocAsync", 11000);
    ask("cuMemAllocAsync", 11020);
    ask("", 12000);
    return 0;
}

// Managed memory: cudaMallocManaged, host initialisation, kernels reading and
// writing it, cudaDeviceSynchronize, host checks; prefetch and advice (hints),
// range attributes, a linked list of managed nodes walked on the device,
// cudaMemcpy into managed memory, pointer attributes.
#include <stdint.h>
#include <string.h>

#include "test_util.h"

struct node {
    int value;
    node *next;
};

__global__ void scale(int *a, int n, int k)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        a[i] = a[i] * k + 1;
}

__global__ void walk(const node *head, long long *sum, int *count)
{
    long long s = 0;
    int c = 0;
    for (const node *p = head; p; p = p->next) {
        s += p->value;
        c++;
    }
    *sum = s;
    *count = c;
}

static int range_int(cudaMemRangeAttribute attr, const void *p, size_t n)
{
    int v = -99;
    CHECK(cudaMemRangeGetAttribute(&v, sizeof v, attr, p, n));
    return v;
}

int main(void)
{
    int managed = 0;
    CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
    if (!managed) {
        printf("host memory cannot be mapped by this device: skipped\n");
        return 0;
    }
    int concurrent = 0;
    CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
    printf("managedMemory: %d concurrentManagedAccess: %d\n", managed, concurrent);

    const int n = 1 << 20;
    int *a = NULL;
    CHECK(cudaMallocManaged(&a, n * sizeof(int)));
    for (int i = 0; i < n; i++)
        a[i] = i;
    scale<<<256, 256>>>(a, n, 3);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    int ok = 1;
    for (int i = 0; i < n; i++)
        ok &= a[i] == i * 3 + 1;
    expect(ok, "kernel sees host writes and host sees kernel writes");

    // hints: accepted, and answered back by the range attributes
    cudaMemLocation gpu = {cudaMemLocationTypeDevice, 0};
    cudaMemLocation cpu = {cudaMemLocationTypeHost, 0};
    CHECK(cudaMemPrefetchAsync(a, n * sizeof(int), gpu, 0, 0));
    CHECK(cudaMemAdvise(a, n * sizeof(int), cudaMemAdviseSetReadMostly, gpu));
    CHECK(cudaMemAdvise(a, n * sizeof(int), cudaMemAdviseSetPreferredLocation, cpu));
    CHECK(cudaMemAdvise(a, n * sizeof(int), cudaMemAdviseSetAccessedBy, gpu));
    CHECK(cudaDeviceSynchronize());
    printf("read mostly: %d\n", range_int(cudaMemRangeAttributeReadMostly, a, n * sizeof(int)));
    printf("preferred location: %d\n", range_int(cudaMemRangeAttributePreferredLocation, a, n * sizeof(int)));
    printf("last prefetch location: %d\n", range_int(cudaMemRangeAttributeLastPrefetchLocation, a, n * sizeof(int)));
    CHECK(cudaMemAdvise(a, n * sizeof(int), cudaMemAdviseUnsetReadMostly, gpu));
    CHECK(cudaMemAdvise(a, n * sizeof(int), cudaMemAdviseUnsetPreferredLocation, gpu));
    scale<<<256, 256>>>(a, n, 2);
    CHECK(cudaDeviceSynchronize());
    ok = 1;
    for (int i = 0; i < n; i++)
        ok &= a[i] == (i * 3 + 1) * 2 + 1;
    expect(ok, "hints change no byte");

    // a linked list built on the host, walked on the device
    const int nodes = 1000;
    node *list = NULL;
    long long want = 0;
    for (int i = 0; i < nodes; i++) {
        node *p = NULL;
        CHECK(cudaMallocManaged(&p, sizeof *p));
        p->value = i * i;
        p->next = list;
        list = p;
        want += i * i;
    }
    long long *sum = NULL;
    int *count = NULL;
    CHECK(cudaMallocManaged(&sum, sizeof *sum));
    CHECK(cudaMallocManaged(&count, sizeof *count));
    walk<<<1, 1>>>(list, sum, count);
    CHECK(cudaDeviceSynchronize());
    printf("list: %d nodes, sum %lld\n", *count, *sum);
    expect(*count == nodes && *sum == want, "device walks managed nodes");

    // copies into and out of managed memory
    int *dev = NULL, *host = (int *)malloc(n * sizeof(int));
    CHECK(cudaMalloc(&dev, n * sizeof(int)));
    for (int i = 0; i < n; i++)
        host[i] = n - i;
    CHECK(cudaMemcpy(a, host, n * sizeof(int), cudaMemcpyHostToDevice));
    expect(a[0] == n && a[n - 1] == 1, "cudaMemcpy host to managed");
    CHECK(cudaMemcpy(dev, a, n * sizeof(int), cudaMemcpyDefault));
    CHECK(cudaMemset(a, 0, n * sizeof(int)));
    CHECK(cudaDeviceSynchronize());
    expect(a[5] == 0, "cudaMemset on managed memory");
    CHECK(cudaMemcpy(a, dev, n * sizeof(int), cudaMemcpyDeviceToDevice));
    expect(memcmp(a, host, n * sizeof(int)) == 0, "cudaMemcpy device to managed");

    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, a + 10));
    printf("pointer: type %d device %d devicePointer==ptr %d hostPointer==ptr %d\n", (int)pa.type,
           pa.device, pa.devicePointer == (void *)(a + 10), pa.hostPointer == (void *)(a + 10));

    for (node *p = list; p;) {
        node *next = p->next;
        CHECK(cudaFree(p));
        p = next;
    }
    CHECK(cudaFree(sum));
    CHECK(cudaFree(count));
    CHECK(cudaFree(a));
    CHECK(cudaFree(dev));
    free(host);
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}

/*
 * A CUDA program that knows nothing of Flyt (NVIDIA's runtime, which loads Flyt's
 * libcuda.so.1 as its driver): it sees one GPU with the VM's share, copies data through
 * it, and optionally keeps running (to be killed), or until its share changes.
 * usage: cmgr_cuda_user EXPECTED_SMS [SECONDS_TO_HOLD [SMS_TO_WAIT_FOR]]
 *   SMS_TO_WAIT_FOR: exit 0 once cudaDeviceGetAttribute (asked each time, so it follows a
 *   live resize) says the device has that many SMs, 1 if it does not within the hold
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "held", then polls the SM count until it is want (0) or seconds pass (1). */
static int wait_for_sms(int want, int seconds)
{
    printf("held\n");
    fflush(stdout);
    int v = 0;
    for (int i = 0; i < seconds * 10; i++) {
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess &&
            v == want) {
            printf("share now %d SMs\n", v);
            return 0;
        }
        usleep(100000);
    }
    printf("FAIL: still %d SMs, not %d\n", v, want);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int want_sms = atoi(argv[1]), count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count != 1) {
        printf("FAIL: cudaGetDeviceCount: %s, %d devices\n", cudaGetErrorName(err), count);
        return 1;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        printf("FAIL: cudaGetDeviceProperties\n");
        return 1;
    }
    size_t n = 1 << 20;
    char *h = malloc(n), *back = malloc(n);
    void *d = NULL;
    for (size_t i = 0; i < n; i++)
        h[i] = (char)(i * 7);
    if (cudaMalloc(&d, n) != cudaSuccess || cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost) != cudaSuccess || memcmp(h, back, n) != 0) {
        printf("FAIL: 1 MiB round trip through the device\n");
        return 1;
    }
    printf("device '%s' with %d SMs; 1 MiB round trip ok\n", p.name, p.multiProcessorCount);
    if (p.multiProcessorCount != want_sms) {
        printf("FAIL: expected %d SMs (the VM's share)\n", want_sms);
        return 1;
    }
    if (argc > 3)
        return wait_for_sms(atoi(argv[3]), atoi(argv[2]));
    if (argc > 2) {
        printf("held\n");
        fflush(stdout);
        sleep((unsigned)atoi(argv[2]));
    }
    cudaFree(d);
    free(h);
    free(back);
    return 0;
}

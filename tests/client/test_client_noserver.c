/*
 * Without a reachable server, CUDA calls fail the way CUDA fails without a
 * usable device, at once; and when the server dies mid-run, calls fail
 * instead of hanging. usage: test_client_noserver [--server-dies]
 * (with --server-dies the caller kills the session within a second of start)
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--server-dies") == 0) {
        void *d = NULL;
        CHECK_EQ(cudaMalloc(&d, 4096), cudaSuccess, "allocation while the server lives");
        sleep(2); /* the session is killed meanwhile */
        double t0 = now();
        char h[64];
        cudaError_t err = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        CHECK_EQ(err, cudaErrorDevicesUnavailable, "a call after the server died fails");
        CHECK_EQ(cudaMalloc(&d, 64), cudaErrorDevicesUnavailable, "and so do later calls");
        CHECK(now() - t0 < 5, "without hanging");
    } else {
        double t0 = now();
        int count = -1;
        CHECK_EQ(cudaGetDeviceCount(&count), cudaErrorNoDevice, "cudaGetDeviceCount is cudaErrorNoDevice");
        CHECK_LE(count, 0, "and reports no device");
        void *d = NULL;
        CHECK_EQ(cudaMalloc(&d, 16), cudaErrorNoDevice, "cudaMalloc is cudaErrorNoDevice");
        CHECK(now() - t0 < 5, "at once, without hanging");
    }
    return check_done();
}

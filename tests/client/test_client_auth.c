/*
 * Connecting to a server that asks for a session token.
 * usage: test_client_auth ok|refused
 *   ok: the device shows up (the fake server names it "fake-auth");
 *   refused: cudaErrorNoDevice, at once.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "ok") != 0 && strcmp(argv[1], "refused") != 0)) {
        fprintf(stderr, "usage: test_client_auth ok|refused\n");
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int count = -1;
    cudaError_t err = cudaGetDeviceCount(&count);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (strcmp(argv[1], "ok") == 0) {
        CHECK_EQ(err, cudaSuccess, "admitted: one device");
        CHECK_EQ(count, 1, "admitted: one device");
        struct cudaDeviceProp p;
        memset(&p, 0, sizeof p);
        CHECK_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess,
                 "its properties come from the server that asked for the token");
        CHECK_STR_EQ(p.name, "fake-auth", "its properties come from the server that asked for the token");
    } else {
        CHECK_EQ(err, cudaErrorNoDevice, "not admitted: cudaErrorNoDevice");
        CHECK_LE(count, 0, "not admitted: cudaErrorNoDevice");
        CHECK(t1.tv_sec - t0.tv_sec < 5, "at once, without hanging");
    }
    return check_done();
}

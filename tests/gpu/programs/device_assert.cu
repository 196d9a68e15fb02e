// device_assert: a kernel's failed assert() makes cudaDeviceSynchronize
// return cudaErrorAssert (sticky), and the driver's assert message reaches
// the program's stderr before that call returns. The program captures its
// own stderr around the synchronisation (a temporary file on fd 2) and
// prints what arrived on stdout, so the runner's stdout comparison covers
// the message; the message names this file, line, function, block and
// thread, all deterministic (one thread fails). Exits 0 at its end.
#include <assert.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "test_util.h"

__global__ void print_then_check(int value)
{
    printf("device: checking %d\n", value);
    if (blockIdx.x == 1 && threadIdx.x == 3)
        assert(value == 42);
}

// Prints each line of f on stdout, marked as what arrived on stderr.
static void show_captured(FILE *f)
{
    char line[1024];
    int lines = 0;
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        printf("stderr: %s%s", line, n && line[n - 1] == '\n' ? "" : "\n");
        lines++;
    }
    printf("stderr: %d line(s)\n", lines);
}

int main(void)
{
    printf("host: start\n");
    CHECK(cudaFree(NULL));
    print_then_check<<<1, 1>>>(42);
    CHECK(cudaDeviceSynchronize());
    printf("host: the assert held\n");

    FILE *captured = tmpfile();
    if (captured == NULL) {
        printf("FAIL: tmpfile\n");
        return 1;
    }
    fflush(stderr);
    int saved_stderr = dup(STDERR_FILENO);
    dup2(fileno(captured), STDERR_FILENO);
    print_then_check<<<2, 4>>>(41);
    cudaError_t e = cudaDeviceSynchronize();
    fflush(stderr);
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    printf("host: cudaDeviceSynchronize: %s\n", cudaGetErrorName(e));
    show_captured(captured);
    fclose(captured);

    printf("host: cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("host: cudaDeviceSynchronize again: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    void *p = NULL;
    printf("host: cudaMalloc after the assert: %s\n", cudaGetErrorName(cudaMalloc(&p, 64)));
    return 0;
}

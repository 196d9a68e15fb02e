// bench_launch: asynchronous kernel launch throughput. Each batch launches
// an empty kernel N times back to back, then synchronizes once; the result is
// the batch time divided by N, in microseconds per launch (median over K
// batches, after one warm-up batch). The single synchronization is inside the
// timed part, so the figure is what a launch-bound loop actually sustains.
//
// Measurements:
//   launch_async_empty          empty kernel <<<1,1>>>, legacy default stream
//   launch_async_ptr8           empty kernel with 8 device-pointer arguments
//   launch_async_empty_stream   empty kernel on a created stream
//   launch_async_arg1KiB        empty kernel with one 1 KiB by-value argument
#include "bench_common.h"

using namespace bench;

struct Arg1KiB {
    unsigned char bytes[1024];
};

__global__ void empty_kernel() {}

__global__ void ptr8_kernel(float *a0, float *a1, float *a2, float *a3, float *a4, float *a5,
                            float *a6, float *a7)
{
    (void)a0, (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7;
}

__global__ void arg1k_kernel(Arg1KiB arg)
{
    (void)arg;
}

int main(int argc, char **argv)
{
    Options opts = parse_options(argc, argv, "");
    if (!opts.extra.empty())
        die("unknown argument: %s (try --help)", opts.extra[0].c_str());
    init_device(opts, "bench_launch");

    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    float *p[8];
    for (int i = 0; i < 8; i++)
        CHECK(cudaMalloc(&p[i], 256));
    Arg1KiB big;
    for (int i = 0; i < (int)sizeof big.bytes; i++)
        big.bytes[i] = (unsigned char)(i * 7 + 1);
    CHECK(cudaDeviceSynchronize());

    const int n = reps(opts, 10000, 1000);
    const int k = batches(opts, 11, 5);

    // `launch` issues one launch; `sync` waits for all of them.
    auto measure = [&](const char *name, auto &&launch, auto &&sync) {
        if (!enabled(opts, name))
            return;
        double us = median_of_batches(k, [&] {
            int64_t t0 = now_ns();
            for (int i = 0; i < n; i++)
                launch();
            sync();
            int64_t t1 = now_ns();
            CHECK(cudaGetLastError());
            return (double)(t1 - t0) / 1e3 / n;
        });
        report(name, us, "us");
    };
    auto device_sync = [] { CHECK(cudaDeviceSynchronize()); };

    measure("launch_async_empty", [] { empty_kernel<<<1, 1>>>(); }, device_sync);
    measure("launch_async_ptr8",
            [&] { ptr8_kernel<<<1, 1>>>(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]); },
            device_sync);
    measure("launch_async_empty_stream", [&] { empty_kernel<<<1, 1, 0, stream>>>(); },
            [&] { CHECK(cudaStreamSynchronize(stream)); });
    measure("launch_async_arg1KiB", [&] { arg1k_kernel<<<1, 1>>>(big); }, device_sync);

    for (int i = 0; i < 8; i++)
        CHECK(cudaFree(p[i]));
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaDeviceSynchronize());
    return 0;
}

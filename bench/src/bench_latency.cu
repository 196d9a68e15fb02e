// bench_latency: how long one synchronous CUDA runtime call takes, in
// microseconds per call. Each measurement times a batch of N calls with the
// host clock and reports the median over K batches (after one warm-up batch).
//
// Measurements (all on an otherwise idle device):
//   sync_latency_get_device           cudaGetDevice (may be answered locally)
//   sync_latency_device_sync_idle     cudaDeviceSynchronize
//   sync_latency_stream_query         cudaStreamQuery on an idle created stream
//   sync_latency_event_query          cudaEventQuery on a completed event
//   sync_latency_memcpy4B_h2d         cudaMemcpy 4 B, pageable host -> device
//   sync_latency_memcpy4B_d2h         cudaMemcpy 4 B, device -> pageable host
//   sync_latency_memcpy4B_h2d_pinned  same from cudaMallocHost memory
//   sync_latency_memcpy4B_d2h_pinned  same into cudaMallocHost memory
//   sync_latency_malloc_free_1MiB     cudaMalloc(1 MiB) + cudaFree, per pair, with
//                                     no other allocation live: each pair maps
//                                     and unmaps device memory (measured first)
//   sync_latency_malloc_free_1MiB_suballoc  the same while a 256 B allocation
//                                     is live: the driver then serves 1 MiB
//                                     from its already mapped chunk
//   sync_latency_launch_sync          empty kernel <<<1,1>>> + cudaDeviceSynchronize
#include "bench_common.h"

using namespace bench;

__global__ void empty_kernel() {}

namespace {

// Times `n` calls of `call` and returns microseconds per call.
template <class F>
double per_call_us(int n, F &&call)
{
    int64_t t0 = now_ns();
    for (int i = 0; i < n; i++)
        call(i);
    int64_t t1 = now_ns();
    return (double)(t1 - t0) / 1e3 / n;
}

struct Runner {
    const Options &opts;
    int k;

    // One result: N calls per batch (full / quick), median over k batches.
    template <class F>
    void run(const char *name, int n_full, int n_quick, F &&call)
    {
        if (!enabled(opts, name))
            return;
        int n = reps(opts, n_full, n_quick);
        double us = median_of_batches(k, [&] { return per_call_us(n, call); });
        report(name, us, "us");
    }
};

}  // namespace

int main(int argc, char **argv)
{
    Options opts = parse_options(argc, argv, "");
    if (!opts.extra.empty())
        die("unknown argument: %s (try --help)", opts.extra[0].c_str());
    init_device(opts, "bench_latency");

    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    cudaEvent_t event;
    CHECK(cudaEventCreate(&event));
    CHECK(cudaEventRecord(event, stream));
    CHECK(cudaDeviceSynchronize());

    Runner r{opts, batches(opts, 15, 5)};
    auto malloc_free_1MiB = [&](int) {
        void *p = nullptr;
        CHECK(cudaMalloc(&p, 1 << 20));
        CHECK(cudaFree(p));
    };
    // Before any other device allocation exists (see the header comment).
    r.run("sync_latency_malloc_free_1MiB", 200, 20, malloc_free_1MiB);

    uint32_t *dev = nullptr;
    CHECK(cudaMalloc(&dev, 256));
    uint32_t *pinned = nullptr;
    CHECK(cudaMallocHost(&pinned, 256));
    uint32_t *pageable = (uint32_t *)malloc(256);
    if (!pageable)
        die("out of host memory");
    memset(pageable, 0x5a, 256);
    memset(pinned, 0x5a, 256);
    {
        uint32_t init = 0xfeedbeefu;
        CHECK(cudaMemcpy(dev, &init, sizeof init, cudaMemcpyHostToDevice));
    }

    r.run("sync_latency_malloc_free_1MiB_suballoc", 1000, 100, malloc_free_1MiB);

    r.run("sync_latency_get_device", 2000, 200, [&](int) {
        int d = -1;
        CHECK(cudaGetDevice(&d));
        if (d != opts.device)
            die("cudaGetDevice returned the wrong device");
    });

    r.run("sync_latency_device_sync_idle", 2000, 200,
          [&](int) { CHECK(cudaDeviceSynchronize()); });

    r.run("sync_latency_stream_query", 2000, 200,
          [&](int) { CHECK_IS(cudaStreamQuery(stream), cudaSuccess); });

    r.run("sync_latency_event_query", 2000, 200,
          [&](int) { CHECK_IS(cudaEventQuery(event), cudaSuccess); });

    // 4-byte copies: every H2D carries a new non-zero value, checked after.
    uint32_t last_sent = 0, counter = 0;
    auto h2d = [&](uint32_t *host) {
        return [&, host](int) {
            host[0] = 0x80000000u | ++counter;
            last_sent = host[0];
            CHECK(cudaMemcpy(dev, host, 4, cudaMemcpyHostToDevice));
        };
    };
    auto check_device_value = [&](const char *what) {
        uint32_t back = 0;
        CHECK(cudaMemcpy(&back, dev, 4, cudaMemcpyDeviceToHost));
        if (last_sent != 0 && back != last_sent)
            die("%s: device holds a different value than was copied", what);
    };
    auto d2h = [&](uint32_t *host) {
        return [&, host](int) {
            host[0] = 0;
            CHECK(cudaMemcpy(host, dev, 4, cudaMemcpyDeviceToHost));
            if (last_sent != 0 && host[0] != last_sent)
                die("d2h copy returned a wrong value");
        };
    };

    r.run("sync_latency_memcpy4B_h2d", 2000, 200, h2d(pageable));
    check_device_value("sync_latency_memcpy4B_h2d");
    r.run("sync_latency_memcpy4B_d2h", 2000, 200, d2h(pageable));
    r.run("sync_latency_memcpy4B_h2d_pinned", 2000, 200, h2d(pinned));
    check_device_value("sync_latency_memcpy4B_h2d_pinned");
    r.run("sync_latency_memcpy4B_d2h_pinned", 2000, 200, d2h(pinned));

    r.run("sync_latency_launch_sync", 1000, 100, [&](int) {
        empty_kernel<<<1, 1>>>();
        CHECK(cudaDeviceSynchronize());
    });
    CHECK(cudaGetLastError());

    CHECK(cudaEventDestroy(event));
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(dev));
    CHECK(cudaFreeHost(pinned));
    free(pageable);
    CHECK(cudaDeviceSynchronize());
    return 0;
}

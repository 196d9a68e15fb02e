// bench_memcpy: synchronous cudaMemcpy bandwidth, host <-> device.
//
// For each direction (h2d, d2h), host memory kind (pinned: cudaMallocHost;
// pageable: malloc, written before use; registered: page-aligned malloc'd
// memory given to cudaHostRegister, copied with cudaMemcpyAsync on a stream,
// as programs that register their buffers do) and size (4 B ... 1 GiB), a batch
// makes N copies of `size` bytes, each from/to its own slice of a buffer of
// N * size bytes, then calls cudaDeviceSynchronize; N is chosen so that a
// batch moves about 32 MiB (at most 1000 copies, at least 1; with --quick
// 8 MiB and 200 copies; both times --scale). Before every
// batch the source holds new non-zero data, and after it the destination is
// checked (outside the timed part).
//
// Results, from the median batch time over K batches (after one warm-up):
//   memcpy_<dir>_<mem>_<size>_bw     GB/s (1 GB = 1e9 bytes)
//   memcpy_<dir>_<mem>_<size>_time   us per copy (sizes up to 1 MiB only)
//
// Extra options:
//   --max-size SIZE   largest size to run (e.g. 256M, 1G); default 1G,
//                     256M with --quick             FLYT_BENCH_MAX_SIZE=SIZE
//   --no-1gib         same as --max-size 256M
#include "bench_common.h"

using namespace bench;

namespace {

__host__ __device__ inline uint32_t pattern(uint64_t word, uint32_t seed)
{
    uint32_t x = (uint32_t)word * 2654435761u + seed * 0x9e3779b9u;
    x ^= x >> 15;
    return x | 1u;  // never zero
}

__global__ void fill_kernel(uint32_t *p, uint64_t words, uint32_t seed)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words;
         i += (uint64_t)gridDim.x * blockDim.x)
        p[i] = pattern(i, seed);
}

__global__ void verify_kernel(const uint32_t *p, uint64_t words, uint32_t seed,
                              unsigned int *mismatches)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words;
         i += (uint64_t)gridDim.x * blockDim.x)
        if (p[i] != pattern(i, seed))
            atomicAdd(mismatches, 1u);
}

void fill_host(uint32_t *p, uint64_t words, uint32_t seed)
{
    for (uint64_t i = 0; i < words; i++)
        p[i] = pattern(i, seed);
}

uint64_t verify_host(const uint32_t *p, uint64_t words, uint32_t seed)
{
    uint64_t bad = 0;
    for (uint64_t i = 0; i < words; i++)
        bad += p[i] != pattern(i, seed);
    return bad;
}

unsigned grid_for(uint64_t words)
{
    uint64_t blocks = (words + 255) / 256;
    return (unsigned)std::min<uint64_t>(blocks ? blocks : 1, 8192);
}

uint64_t parse_size(const char *what, const char *s)
{
    char *end = nullptr;
    double v = strtod(s, &end);
    uint64_t mult = 1;
    if (*end == 'k' || *end == 'K')
        mult = 1ull << 10, end++;
    else if (*end == 'm' || *end == 'M')
        mult = 1ull << 20, end++;
    else if (*end == 'g' || *end == 'G')
        mult = 1ull << 30, end++;
    if (*end == 'i')
        end++;
    if (*end == 'B')
        end++;
    if (!s[0] || *end || !(v >= 4))
        die("bad size for %s (expected e.g. 256M or 1G)", what);
    return (uint64_t)(v * mult);
}

std::string size_label(uint64_t size)
{
    char buf[32];
    if (size >= (1ull << 30) && size % (1ull << 30) == 0)
        snprintf(buf, sizeof buf, "%lluGiB", (unsigned long long)(size >> 30));
    else if (size >= (1ull << 20) && size % (1ull << 20) == 0)
        snprintf(buf, sizeof buf, "%lluMiB", (unsigned long long)(size >> 20));
    else if (size >= (1ull << 10) && size % (1ull << 10) == 0)
        snprintf(buf, sizeof buf, "%lluKiB", (unsigned long long)(size >> 10));
    else
        snprintf(buf, sizeof buf, "%lluB", (unsigned long long)size);
    return buf;
}

}  // namespace

int main(int argc, char **argv)
{
    Options opts = parse_options(argc, argv, "[--max-size SIZE] [--no-1gib]");
    uint64_t max_size = opts.quick ? (256ull << 20) : (1ull << 30);
    if (const char *v = getenv("FLYT_BENCH_MAX_SIZE"); v && *v)
        max_size = parse_size("FLYT_BENCH_MAX_SIZE", v);
    for (size_t i = 0; i < opts.extra.size(); i++) {
        const std::string &a = opts.extra[i];
        if (a == "--no-1gib")
            max_size = 256ull << 20;
        else if (a.rfind("--max-size=", 0) == 0)
            max_size = parse_size("--max-size", a.c_str() + 11);
        else if (a == "--max-size" && i + 1 < opts.extra.size())
            max_size = parse_size("--max-size", opts.extra[++i].c_str());
        else
            die("unknown argument: %s (try --help)", a.c_str());
    }
    init_device(opts, "bench_memcpy");

    const uint64_t all_sizes[] = {4,         64,        1ull << 10, 16ull << 10,
                                  256ull << 10, 1ull << 20, 4ull << 20, 16ull << 20,
                                  64ull << 20, 256ull << 20, 1ull << 30};
    const uint64_t target_bytes = (uint64_t)((opts.quick ? 8.0 : 32.0) * (1 << 20) * opts.scale);
    const int max_copies = reps(opts, 1000, 200);
    struct Case {
        uint64_t size;
        int copies;  // per batch
        int k;       // timed batches
    };
    std::vector<Case> cases;
    uint64_t region_max = 0;
    for (uint64_t size : all_sizes) {
        if (size > max_size)
            continue;
        uint64_t c = std::max<uint64_t>(1, std::min<uint64_t>(target_bytes / size, max_copies));
        int k = size >= (1ull << 30)   ? batches(opts, 5, 3)
                : size >= (256ull << 20) ? batches(opts, 7, 3)
                                         : batches(opts, 11, 5);
        cases.push_back({size, (int)c, k});
        region_max = std::max(region_max, c * size);
    }
    printf("# bench_memcpy: max-size=%s, buffers of %llu bytes\n", size_label(max_size).c_str(),
           (unsigned long long)region_max);
    fflush(stdout);

    uint8_t *dev = nullptr;
    CHECK(cudaMalloc(&dev, region_max));
    unsigned int *d_mismatches = nullptr;
    CHECK(cudaMalloc(&d_mismatches, sizeof(unsigned int)));
    uint8_t *pinned = nullptr;
    CHECK(cudaMallocHost(&pinned, region_max));
    uint8_t *pageable = (uint8_t *)malloc(region_max);
    if (!pageable)
        die("out of host memory");
    // Touch every page once so that first-touch faults stay out of the timing.
    memset(pageable, 0xa5, region_max);
    uint8_t *registered = (uint8_t *)aligned_alloc(4096, (region_max + 4095) & ~(uint64_t)4095);
    if (!registered)
        die("out of host memory");
    memset(registered, 0x5a, region_max);
    CHECK(cudaHostRegister(registered, region_max, cudaHostRegisterDefault));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    static const char *const kinds[] = {"pinned_", "pageable_", "registered_"};

    uint32_t seed = 1;
    for (int h2d = 1; h2d >= 0; h2d--) {
        for (int kind = 0; kind < 3; kind++) {
            uint8_t *host = kind == 0 ? pinned : kind == 1 ? pageable : registered;
            const bool async = kind == 2;
            for (const Case &c : cases) {
                std::string name = std::string("memcpy_") + (h2d ? "h2d_" : "d2h_") + kinds[kind] +
                                   size_label(c.size);
                if (!enabled(opts, name))
                    continue;
                const uint64_t bytes = (uint64_t)c.copies * c.size;
                const uint64_t words = bytes / 4;

                auto batch = [&]() -> double {
                    uint32_t s = seed++;
                    if (h2d) {
                        fill_host((uint32_t *)host, words, s);
                    } else {
                        fill_kernel<<<grid_for(words), 256>>>((uint32_t *)dev, words, s);
                        CHECK(cudaGetLastError());
                        memset(host, 0, bytes);
                    }
                    CHECK(cudaDeviceSynchronize());

                    int64_t t0 = now_ns();
                    const cudaMemcpyKind dir = h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
                    for (int i = 0; i < c.copies; i++) {
                        uint8_t *d = dev + i * c.size, *hp = host + i * c.size;
                        void *to = h2d ? (void *)d : (void *)hp;
                        const void *from = h2d ? (const void *)hp : (const void *)d;
                        if (async)
                            CHECK(cudaMemcpyAsync(to, from, c.size, dir, stream));
                        else
                            CHECK(cudaMemcpy(to, from, c.size, dir));
                    }
                    CHECK(cudaDeviceSynchronize());
                    int64_t t1 = now_ns();

                    uint64_t bad;
                    if (h2d) {
                        const unsigned int zero = 0;
                        unsigned int count = 0;
                        CHECK(cudaMemcpy(d_mismatches, &zero, sizeof zero,
                                         cudaMemcpyHostToDevice));
                        verify_kernel<<<grid_for(words), 256>>>((const uint32_t *)dev, words, s,
                                                                d_mismatches);
                        CHECK(cudaGetLastError());
                        CHECK(cudaMemcpy(&count, d_mismatches, sizeof count,
                                         cudaMemcpyDeviceToHost));
                        bad = count;
                    } else {
                        bad = verify_host((const uint32_t *)host, words, s);
                    }
                    if (bad) {
                        fprintf(stderr, "error: %s: %llu of %llu words wrong after the copies\n",
                                name.c_str(), (unsigned long long)bad,
                                (unsigned long long)words);
                        exit(2);
                    }
                    return (double)(t1 - t0) / 1e9;  // seconds per batch
                };

                double sec = median_of_batches(c.k, batch);
                report(name + "_bw", (double)bytes / sec / 1e9, "GB/s");
                if (c.size <= (1ull << 20))
                    report(name + "_time", sec * 1e6 / c.copies, "us");
            }
        }
    }

    CHECK(cudaFree(dev));
    CHECK(cudaFree(d_mismatches));
    CHECK(cudaFreeHost(pinned));
    free(pageable);
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaHostUnregister(registered));
    free(registered);
    CHECK(cudaDeviceSynchronize());
    return 0;
}

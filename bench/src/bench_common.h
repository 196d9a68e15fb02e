// Shared helpers for the Flyt benchmark programs: error checking, a host
// clock, median-of-batches timing, option parsing and RESULT line output.
//
// Every program prints one line per measurement on stdout:
//     RESULT <name> <value> <unit>
// Other stdout lines start with '#'. Errors go to stderr and end the program
// with a non-zero exit status.
//
// Common options (environment variables give the defaults, flags win):
//   --quick            fewer repetitions          FLYT_BENCH_QUICK=1
//   --scale X          multiply calls per batch   FLYT_BENCH_SCALE=X
//   --batches K        timed batches per result   FLYT_BENCH_BATCHES=K
//   --filter A,B       only names containing A or B  FLYT_BENCH_FILTER=A,B
//   --device N         CUDA device (default 0)    FLYT_BENCH_DEVICE=N
#ifndef FLYT_BENCH_COMMON_H
#define FLYT_BENCH_COMMON_H

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace bench {

[[noreturn]] inline void die_cuda(const char *what, cudaError_t err, const char *file, int line)
{
    // Numeric code first: the name lookups below are CUDA calls too.
    fprintf(stderr, "error: %s failed with CUDA error %d at %s:%d\n", what, (int)err, file, line);
    fflush(stderr);
    const char *name = cudaGetErrorName(err);
    const char *text = cudaGetErrorString(err);
    fprintf(stderr, "error: %s: %s\n", name ? name : "?", text ? text : "?");
    fflush(stdout);
    fflush(stderr);
    exit(1);
}

[[noreturn]] inline void die(const char *fmt, const char *arg = "")
{
    fprintf(stderr, "error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    fflush(stdout);
    fflush(stderr);
    exit(1);
}

#define CHECK(call)                                                   \
    do {                                                              \
        cudaError_t check_err_ = (call);                              \
        if (check_err_ != cudaSuccess)                                \
            ::bench::die_cuda(#call, check_err_, __FILE__, __LINE__); \
    } while (0)

// Expects a specific return code (cudaStreamQuery/cudaEventQuery on idle work).
#define CHECK_IS(call, expected)                                      \
    do {                                                              \
        cudaError_t check_err_ = (call);                              \
        if (check_err_ != (expected))                                 \
            ::bench::die_cuda(#call, check_err_, __FILE__, __LINE__); \
    } while (0)

inline int64_t now_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct Options {
    bool quick = false;
    double scale = 1.0;
    int batches = 0;                  // 0: the program's default
    int device = 0;
    std::vector<std::string> filter;  // empty: everything
    std::vector<std::string> extra;   // program-specific arguments, in order
};

inline bool env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

inline double parse_double(const char *what, const char *s)
{
    char *end = nullptr;
    double v = strtod(s, &end);
    if (!s[0] || *end || !(v > 0))
        die("bad value for %s", what);
    return v;
}

inline int parse_int(const char *what, const char *s, int min)
{
    char *end = nullptr;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || v < min || v > 1000000000L)
        die("bad value for %s", what);
    return (int)v;
}

inline std::vector<std::string> split_commas(const std::string &s)
{
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
        size_t comma = s.find(',', start);
        if (comma == std::string::npos)
            comma = s.size();
        if (comma > start)
            out.push_back(s.substr(start, comma - start));
        start = comma + 1;
    }
    return out;
}

// Matches "--name VALUE" and "--name=VALUE"; advances i past the value.
inline bool take_value(int argc, char **argv, int &i, const char *name, const char **value)
{
    size_t n = strlen(name);
    if (strncmp(argv[i], name, n) != 0)
        return false;
    if (argv[i][n] == '=') {
        *value = argv[i] + n + 1;
        return true;
    }
    if (argv[i][n] != '\0')
        return false;
    if (i + 1 >= argc)
        die("%s needs a value", name);
    *value = argv[++i];
    return true;
}

// Fills opts from the environment and argv. Arguments the common parser does
// not know land in opts.extra (with "--x=v" kept whole) for the program.
inline Options parse_options(int argc, char **argv, const char *usage_extra)
{
    Options o;
    o.quick = env_flag("FLYT_BENCH_QUICK");
    if (const char *v = getenv("FLYT_BENCH_SCALE"); v && *v)
        o.scale = parse_double("FLYT_BENCH_SCALE", v);
    if (const char *v = getenv("FLYT_BENCH_BATCHES"); v && *v)
        o.batches = parse_int("FLYT_BENCH_BATCHES", v, 1);
    if (const char *v = getenv("FLYT_BENCH_DEVICE"); v && *v)
        o.device = parse_int("FLYT_BENCH_DEVICE", v, 0);
    if (const char *v = getenv("FLYT_BENCH_FILTER"); v && *v)
        o.filter = split_commas(v);

    for (int i = 1; i < argc; i++) {
        const char *v = nullptr;
        if (!strcmp(argv[i], "--quick")) {
            o.quick = true;
        } else if (!strcmp(argv[i], "--full")) {
            o.quick = false;
        } else if (take_value(argc, argv, i, "--scale", &v)) {
            o.scale = parse_double("--scale", v);
        } else if (take_value(argc, argv, i, "--batches", &v)) {
            o.batches = parse_int("--batches", v, 1);
        } else if (take_value(argc, argv, i, "--device", &v)) {
            o.device = parse_int("--device", v, 0);
        } else if (take_value(argc, argv, i, "--filter", &v)) {
            o.filter = split_commas(v);
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: %s [--quick|--full] [--scale X] [--batches K] [--filter A,B] "
                   "[--device N]%s%s\n",
                   argv[0], usage_extra[0] ? " " : "", usage_extra);
            exit(0);
        } else {
            o.extra.push_back(argv[i]);
        }
    }
    return o;
}

// Calls per timed batch: `full` normally, `quick` with --quick, times --scale.
inline int reps(const Options &o, int full, int quick)
{
    double n = (o.quick ? quick : full) * o.scale;
    return n < 1 ? 1 : (int)std::lround(n);
}

// Timed batches per measurement (odd defaults, so the median is one sample).
inline int batches(const Options &o, int full, int quick)
{
    if (o.batches > 0)
        return o.batches;
    return o.quick ? quick : full;
}

inline bool enabled(const Options &o, const std::string &name)
{
    if (o.filter.empty())
        return true;
    for (const std::string &f : o.filter)
        if (name.find(f) != std::string::npos)
            return true;
    return false;
}

inline double median(std::vector<double> v)
{
    if (v.empty())
        return NAN;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs `batch` once as a warm-up (result dropped), then k more times and
// returns the median of what it returned. `batch` times itself, so it can do
// untimed preparation and checks around the timed part.
template <class F>
double median_of_batches(int k, F &&batch)
{
    (void)batch();
    std::vector<double> samples;
    samples.reserve(k);
    for (int i = 0; i < k; i++)
        samples.push_back(batch());
    return median(samples);
}

// At least four significant digits, never in exponent form.
inline void report(const std::string &name, double value, const char *unit)
{
    int decimals = 3;
    if (value >= 100)
        decimals = 1;
    else if (value > 0 && value < 1)
        decimals = std::min(12, 3 - (int)std::floor(std::log10(value)));
    printf("RESULT %s %.*f %s\n", name.c_str(), decimals, value, unit);
    fflush(stdout);
}

__global__ void warm_up_spin_kernel(long long cycles)
{
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// Keeps the GPU busy for about `ms` milliseconds (short spinning kernels, each
// followed by a synchronization) so that its clocks have ramped up before the
// first measurement. Allocates nothing.
inline void warm_up_gpu(int ms)
{
    int64_t end = now_ns() + (int64_t)ms * 1000000;
    do {
        warm_up_spin_kernel<<<1, 1>>>(500000);  // about 0.3 ms
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
    } while (now_ns() < end);
}

// Selects the device, creates its context, warms the GPU up (FLYT_BENCH_WARMUP_MS,
// default 300, 100 with --quick) and prints what it is. The property query is
// informational only: a failure there is not fatal.
inline void init_device(const Options &o, const char *program)
{
    CHECK(cudaSetDevice(o.device));
    CHECK(cudaFree(nullptr));
    int warm_ms = o.quick ? 100 : 300;
    if (const char *v = getenv("FLYT_BENCH_WARMUP_MS"); v && *v)
        warm_ms = parse_int("FLYT_BENCH_WARMUP_MS", v, 0);
    if (warm_ms > 0)
        warm_up_gpu(warm_ms);
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, o.device) == cudaSuccess)
        printf("# %s: device %d: %s (cc %d.%d)\n", program, o.device, prop.name, prop.major,
               prop.minor);
    else
        printf("# %s: device %d: properties unavailable\n", program, o.device);
    (void)cudaGetLastError();
    printf("# %s: quick=%d scale=%g batches=%d\n", program, (int)o.quick, o.scale, o.batches);
    fflush(stdout);
}

}  // namespace bench

#endif

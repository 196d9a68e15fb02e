/* cuRAND, host API and device API.
 *  - host API: Philox and Sobol generators on the device, compared with the
 *    same generators run on the CPU (curandCreateGeneratorHost), which cuRAND
 *    defines to give the same sequences; normals with a tolerance.
 *  - device API: curand_init + curand_uniform (Philox4x32-10) in a kernel,
 *    compared bit for bit with a host Philox implementation written here, and
 *    curand_normal (XORWOW) checked statistically. */
#include <curand.h>
#include <curand_kernel.h>

#include <math.h>
#include <stdint.h>
#include <vector>

#include "test_util.h"

#define RAND(call)                                                           \
    do {                                                                     \
        curandStatus_t s_ = (call);                                          \
        if (s_ != CURAND_STATUS_SUCCESS) {                                   \
            printf("FAIL line %d: %s -> curandStatus %d\n", __LINE__, #call, \
                   (int)s_);                                                 \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

/* ---- host Philox4x32-10 (Salmon et al., SC'11), in curand's device layout:
 * key = seed, counter = (0, 0, subsequence), four outputs per counter value. */
struct Philox {
    uint32_t ctr[4], key[2], out[4];
    int idx;
};

static void philox_block(const uint32_t in[4], const uint32_t k_in[2], uint32_t out[4])
{
    uint32_t c[4] = {in[0], in[1], in[2], in[3]}, k[2] = {k_in[0], k_in[1]};
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k[0] += 0x9E3779B9u;
            k[1] += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k[0];
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k[1];
        uint32_t n3 = (uint32_t)p0;
        c[0] = n0, c[1] = n1, c[2] = n2, c[3] = n3;
    }
    for (int i = 0; i < 4; i++)
        out[i] = c[i];
}

static void philox_init(Philox *s, uint64_t seed, uint64_t subsequence)
{
    s->key[0] = (uint32_t)seed;
    s->key[1] = (uint32_t)(seed >> 32);
    s->ctr[0] = s->ctr[1] = 0;
    s->ctr[2] = (uint32_t)subsequence;
    s->ctr[3] = (uint32_t)(subsequence >> 32);
    s->idx = 0;
    philox_block(s->ctr, s->key, s->out);
}

static uint32_t philox_next(Philox *s)
{
    uint32_t v = s->out[s->idx++];
    if (s->idx == 4) {
        for (int i = 0; i < 4 && ++s->ctr[i] == 0; i++)
            ;
        philox_block(s->ctr, s->key, s->out);
        s->idx = 0;
    }
    return v;
}

/* curand_uniform's mapping of 32 random bits into (0, 1] */
static float to_uniform(uint32_t x)
{
    const float inv = 2.3283064e-10f; /* 2^-32 */
    return (float)x * inv + inv / 2.0f;
}

/* ---- device API kernels */
__global__ void k_philox_uniform(unsigned long long seed, float *out, int per_thread, int n_threads)
{
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= n_threads)
        return;
    curandStatePhilox4_32_10_t st;
    curand_init(seed, tid, 0, &st);
    for (int i = 0; i < per_thread; i++)
        out[tid * per_thread + i] = curand_uniform(&st);
}

__global__ void k_xorwow_normal(unsigned long long seed, float *out, int per_thread, int n_threads)
{
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= n_threads)
        return;
    curandState st;
    curand_init(seed, tid, 0, &st);
    for (int i = 0; i < per_thread; i++)
        out[tid * per_thread + i] = curand_normal(&st);
}

static void stats(const float *v, size_t n, double *mean, double *var, float *lo, float *hi)
{
    double s = 0, s2 = 0;
    *lo = v[0];
    *hi = v[0];
    for (size_t i = 0; i < n; i++) {
        s += v[i];
        s2 += (double)v[i] * v[i];
        *lo = fminf(*lo, v[i]);
        *hi = fmaxf(*hi, v[i]);
    }
    *mean = s / n;
    *var = s2 / n - *mean * *mean;
}

/* Runs one generator type on the device and on the host; returns 1 when
 * the uniform sequences are identical. */
static int host_vs_device(curandRngType_t type, const char *name, size_t n, int quasi)
{
    curandGenerator_t gd, gh;
    RAND(curandCreateGenerator(&gd, type));
    RAND(curandCreateGeneratorHost(&gh, type));
    if (quasi) {
        RAND(curandSetQuasiRandomGeneratorDimensions(gd, 4));
        RAND(curandSetQuasiRandomGeneratorDimensions(gh, 4));
    } else {
        RAND(curandSetPseudoRandomGeneratorSeed(gd, 20261124ULL));
        RAND(curandSetPseudoRandomGeneratorSeed(gh, 20261124ULL));
        RAND(curandSetGeneratorOffset(gd, 64));
        RAND(curandSetGeneratorOffset(gh, 64));
    }
    float *d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    std::vector<float> fromdev(n), fromhost(n);
    RAND(curandGenerateUniform(gd, d, n));
    CHECK(cudaMemcpy(fromdev.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    RAND(curandGenerateUniform(gh, fromhost.data(), n));
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff += fromdev[i] != fromhost[i];
    double mean, var;
    float lo, hi;
    stats(fromdev.data(), n, &mean, &var, &lo, &hi);
    printf("%s uniform: first %.6f %.6f %.6f %.6f mean %.3f in (0,1]: %s, device/host differ at %zu\n",
           name, fromdev[0], fromdev[1], fromdev[2], fromdev[3], mean,
           lo > 0 && hi <= 1 ? "yes" : "no", diff);
    int ok = diff == 0 && lo > 0 && hi <= 1 && fabs(mean - 0.5) < 0.01;
    CHECK(cudaFree(d));
    RAND(curandDestroyGenerator(gd));
    RAND(curandDestroyGenerator(gh));
    return ok;
}

int main(void)
{
    const double t0 = now_s();

    /* ---- host API */
    expect(host_vs_device(CURAND_RNG_PSEUDO_PHILOX4_32_10, "philox", 1 << 18, 0),
           "host API philox: device == host generator, uniform in (0,1]");
    expect(host_vs_device(CURAND_RNG_QUASI_SOBOL32, "sobol32", 1 << 16, 1),
           "host API sobol32: device == host generator");

    {   /* normals and raw bits on a stream, device vs host within tolerance */
        const size_t n = 1 << 18;
        curandGenerator_t gd, gh;
        RAND(curandCreateGenerator(&gd, CURAND_RNG_PSEUDO_PHILOX4_32_10));
        RAND(curandCreateGeneratorHost(&gh, CURAND_RNG_PSEUDO_PHILOX4_32_10));
        cudaStream_t stream;
        CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        RAND(curandSetStream(gd, stream));
        RAND(curandSetPseudoRandomGeneratorSeed(gd, 7));
        RAND(curandSetPseudoRandomGeneratorSeed(gh, 7));
        float *d;
        unsigned int *du;
        CHECK(cudaMalloc(&d, n * sizeof(float)));
        CHECK(cudaMalloc(&du, n * sizeof(unsigned int)));
        std::vector<float> dev(n), host(n);
        std::vector<unsigned int> devu(n), hostu(n);
        RAND(curandGenerateNormal(gd, d, n, 1.0f, 2.0f));
        RAND(curandGenerate(gd, du, n));
        CHECK(cudaMemcpyAsync(dev.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaMemcpyAsync(devu.data(), du, n * sizeof(unsigned int), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        RAND(curandGenerateNormal(gh, host.data(), n, 1.0f, 2.0f));
        RAND(curandGenerate(gh, hostu.data(), n));
        double maxdiff = 0;
        size_t udiff = 0;
        for (size_t i = 0; i < n; i++) {
            maxdiff = fmax(maxdiff, fabs((double)dev[i] - host[i]));
            udiff += devu[i] != hostu[i];
        }
        double mean, var;
        float lo, hi;
        stats(dev.data(), n, &mean, &var, &lo, &hi);
        printf("philox normal(1,2): first %.4f %.4f mean %.2f stddev %.2f; bits first %u %u, device/host bits differ at %zu\n",
               dev[0], dev[1], mean, sqrt(var), devu[0], devu[1], udiff);
        expect(maxdiff < 1e-4 && udiff == 0 && fabs(mean - 1) < 0.02 && fabs(sqrt(var) - 2) < 0.02,
               "host API normal and bits on a stream: device == host, mean 1 stddev 2");
        CHECK(cudaFree(d));
        CHECK(cudaFree(du));
        RAND(curandDestroyGenerator(gd));
        RAND(curandDestroyGenerator(gh));
        CHECK(cudaStreamDestroy(stream));
    }

    /* ---- device API */
    const int threads = 1000, per = 37; /* 37: not a multiple of 4 outputs per counter */
    const size_t n = (size_t)threads * per;
    float *d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    std::vector<float> got(n);
    k_philox_uniform<<<(threads + 127) / 128, 128>>>(0x123456789abcdefULL, d, per, threads);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (int t = 0; t < threads; t++) {
        Philox s;
        philox_init(&s, 0x123456789abcdefULL, (uint64_t)t);
        for (int i = 0; i < per; i++)
            bad += got[(size_t)t * per + i] != to_uniform(philox_next(&s));
    }
    double mean, var;
    float lo, hi;
    stats(got.data(), n, &mean, &var, &lo, &hi);
    printf("device philox curand_uniform: first %.6f %.6f, thread 999 last %.6f, mean %.3f, mismatches vs host %zu\n",
           got[0], got[1], got[n - 1], mean, bad);
    expect(bad == 0, "device API philox curand_uniform == host philox");

    k_xorwow_normal<<<(threads + 127) / 128, 128>>>(99, d, per, threads);
    CHECK(cudaGetLastError());
    std::vector<float> got2(n);
    CHECK(cudaMemcpy(got2.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    k_xorwow_normal<<<(threads + 127) / 128, 128>>>(99, d, per, threads);
    CHECK(cudaMemcpy(got.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    size_t repeat_diff = 0;
    for (size_t i = 0; i < n; i++)
        repeat_diff += got[i] != got2[i];
    stats(got.data(), n, &mean, &var, &lo, &hi);
    printf("device xorwow curand_normal: first %.4f %.4f mean %.2f stddev %.2f, same seed twice differs at %zu\n",
           got[0], got[1], fabs(mean) < 0.005 ? 0.0 : mean, sqrt(var), repeat_diff);
    expect(repeat_diff == 0 && fabs(mean) < 0.02 && fabs(sqrt(var) - 1) < 0.02,
           "device API xorwow curand_normal: repeatable, mean 0 stddev 1");
    CHECK(cudaFree(d));

    fprintf(stderr, "curand_host_device: %.3f s\n", now_s() - t0);
    printf("%s curand_host_device\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}

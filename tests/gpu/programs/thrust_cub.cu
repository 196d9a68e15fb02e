// thrust_cub: the CUDA C++ core libraries as programs use them, each result
// checked against the host:
//   - Thrust on device_vectors: sort, reduce, inclusive/exclusive scan,
//     transform, sort_by_key, unique, count_if, a custom execution policy on
//     a stream (thrust::cuda::par.on);
//   - CUB device-wide algorithms with the two-phase temporary-storage idiom
//     (size queried with a NULL pointer, then allocated): DeviceRadixSort
//     (keys and pairs), DeviceReduce (Sum, Max, ArgMin), DeviceScan
//     (InclusiveSum, ExclusiveSum), DeviceSelect::If, DeviceHistogram;
//   - CUB block-level primitives in a kernel: BlockReduce, BlockScan,
//     BlockRadixSort with BlockLoad/BlockStore.
// Data come from a fixed LCG, so every run prints the same text.
#include <cub/cub.cuh>
#include <thrust/count.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform.h>
#include <thrust/unique.h>
#include <algorithm>
#include <vector>
#include "test_util.h"

static unsigned int lcg_state = 12345u;
static unsigned int lcg(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return lcg_state >> 8;
}

static std::vector<int> random_ints(size_t n, unsigned int modulo)
{
    std::vector<int> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = (int)(lcg() % modulo) - (int)(modulo / 2);
    return v;
}

struct square_plus_one {
    __host__ __device__ long long operator()(int x) const { return (long long)x * x + 1; }
};

struct is_odd {
    __host__ __device__ bool operator()(int x) const { return (x & 1) != 0; }
};

static void thrust_part(void)
{
    const size_t n = 1 << 20;
    std::vector<int> h = random_ints(n, 1u << 20);
    thrust::device_vector<int> d(h.begin(), h.end());

    // sort
    thrust::device_vector<int> sorted = d;
    thrust::sort(sorted.begin(), sorted.end());
    std::vector<int> ref = h;
    std::sort(ref.begin(), ref.end());
    thrust::host_vector<int> back = sorted;
    expect(std::equal(ref.begin(), ref.end(), back.begin()), "thrust::sort 1M ints");

    // reduce, in 64-bit so that it cannot overflow
    long long sum = thrust::reduce(d.begin(), d.end(), 0LL, thrust::plus<long long>());
    long long hsum = 0;
    for (int x : h)
        hsum += x;
    printf("thrust::reduce sum %lld\n", sum);
    expect(sum == hsum, "thrust::reduce matches the host");
    int mx = thrust::reduce(d.begin(), d.end(), INT_MIN, thrust::maximum<int>());
    expect(mx == ref.back(), "thrust::reduce maximum");

    // scans
    thrust::device_vector<long long> wide(d.begin(), d.end());
    thrust::device_vector<long long> scan(n);
    thrust::inclusive_scan(wide.begin(), wide.end(), scan.begin());
    thrust::host_vector<long long> hscan = scan;
    long long run = 0;
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        run += h[i];
        ok = ok && hscan[i] == run;
    }
    expect(ok, "thrust::inclusive_scan");
    thrust::exclusive_scan(wide.begin(), wide.end(), scan.begin(), 7LL);
    hscan = scan;
    run = 7;
    ok = true;
    for (size_t i = 0; i < n; i++) {
        ok = ok && hscan[i] == run;
        run += h[i];
    }
    expect(ok, "thrust::exclusive_scan with an initial value");

    // transform with a functor
    thrust::device_vector<long long> sq(n);
    thrust::transform(d.begin(), d.end(), sq.begin(), square_plus_one());
    thrust::host_vector<long long> hsq = sq;
    ok = true;
    for (size_t i = 0; i < n; i++)
        ok = ok && hsq[i] == (long long)h[i] * h[i] + 1;
    expect(ok, "thrust::transform");

    // count_if
    long long odd = thrust::count_if(d.begin(), d.end(), is_odd());
    long long hodd = std::count_if(h.begin(), h.end(), [](int x) { return (x & 1) != 0; });
    printf("thrust::count_if odd %lld\n", odd);
    expect(odd == hodd, "thrust::count_if");

    // sort_by_key: few distinct keys, values are the original positions;
    // stable_sort_by_key keeps equal keys in their order
    std::vector<int> hk = random_ints(n, 1000);
    std::vector<int> hv(n);
    for (size_t i = 0; i < n; i++)
        hv[i] = (int)i;
    thrust::device_vector<int> dk(hk.begin(), hk.end()), dv(hv.begin(), hv.end());
    thrust::stable_sort_by_key(dk.begin(), dk.end(), dv.begin());
    std::vector<std::pair<int, int>> pairs(n);
    for (size_t i = 0; i < n; i++)
        pairs[i] = std::make_pair(hk[i], hv[i]);
    std::stable_sort(pairs.begin(), pairs.end(),
                     [](const std::pair<int, int> &a, const std::pair<int, int> &b) {
                         return a.first < b.first;
                     });
    thrust::host_vector<int> bk = dk, bv = dv;
    ok = true;
    for (size_t i = 0; i < n; i++)
        ok = ok && bk[i] == pairs[i].first && bv[i] == pairs[i].second;
    expect(ok, "thrust::stable_sort_by_key");

    // unique on the sorted keys
    auto end = thrust::unique(dk.begin(), dk.end());
    long long nuniq = end - dk.begin();
    std::vector<int> hkeys = hk;
    std::sort(hkeys.begin(), hkeys.end());
    long long hnuniq = std::unique(hkeys.begin(), hkeys.end()) - hkeys.begin();
    printf("thrust::unique %lld distinct keys\n", nuniq);
    thrust::host_vector<int> bu(dk.begin(), end);
    expect(nuniq == hnuniq && std::equal(bu.begin(), bu.end(), hkeys.begin()), "thrust::unique");

    // an explicit stream through the execution policy
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    thrust::device_vector<int> onstream = d;
    thrust::sort(thrust::cuda::par.on(s), onstream.begin(), onstream.end(), thrust::greater<int>());
    CHECK(cudaStreamSynchronize(s));
    back = onstream;
    expect(std::equal(ref.rbegin(), ref.rend(), back.begin()), "thrust::sort descending on a stream");
    CHECK(cudaStreamDestroy(s));
}

// Temporary storage for one CUB call: query the size, then (re)allocate.
struct temp_storage {
    void *ptr = nullptr;
    size_t bytes = 0;
    void *get(size_t need)
    {
        if (need > bytes) {
            if (ptr)
                CHECK(cudaFree(ptr));
            CHECK(cudaMalloc(&ptr, need));
            bytes = need;
        }
        return ptr;
    }
    ~temp_storage()
    {
        if (ptr)
            cudaFree(ptr);
    }
};

static void cub_device_part(void)
{
    const int n = 1 << 20;
    std::vector<unsigned int> hkeys(n);
    std::vector<int> hvals(n);
    for (int i = 0; i < n; i++) {
        hkeys[i] = lcg();
        hvals[i] = i;
    }
    unsigned int *dkeys = to_device(hkeys), *dkeys_out;
    int *dvals = to_device(hvals), *dvals_out;
    CHECK(cudaMalloc(&dkeys_out, n * sizeof(unsigned int)));
    CHECK(cudaMalloc(&dvals_out, n * sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    temp_storage tmp;
    size_t need = 0;

    // radix sort of keys, then of pairs
    CHECK(cub::DeviceRadixSort::SortKeys(nullptr, need, dkeys, dkeys_out, n, 0, 32, s));
    expect(need > 0, "cub::DeviceRadixSort::SortKeys asks for temporary storage");
    CHECK(cub::DeviceRadixSort::SortKeys(tmp.get(need), need, dkeys, dkeys_out, n, 0, 32, s));
    std::vector<unsigned int> ksorted = hkeys;
    std::sort(ksorted.begin(), ksorted.end());
    expect(from_device(dkeys_out, n) == ksorted, "cub::DeviceRadixSort::SortKeys");

    CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, need, dkeys, dkeys_out, dvals, dvals_out,
                                                    n, 0, 32, s));
    CHECK(cub::DeviceRadixSort::SortPairsDescending(tmp.get(need), need, dkeys, dkeys_out, dvals,
                                                    dvals_out, n, 0, 32, s));
    std::vector<unsigned int> kdesc = from_device(dkeys_out, n);
    std::vector<int> vdesc = from_device(dvals_out, n);
    bool ok = true;
    for (int i = 0; i < n; i++)
        ok = ok && kdesc[i] == ksorted[n - 1 - i] && hkeys[vdesc[i]] == kdesc[i];
    expect(ok, "cub::DeviceRadixSort::SortPairsDescending keeps key/value pairs");

    // reductions over ints
    std::vector<int> hin(n);
    for (int i = 0; i < n; i++)
        hin[i] = (int)(lcg() % 2001) - 1000;
    int *din = to_device(hin), *dout;
    CHECK(cudaMalloc(&dout, sizeof(int)));
    CHECK(cub::DeviceReduce::Sum(nullptr, need, din, dout, n, s));
    CHECK(cub::DeviceReduce::Sum(tmp.get(need), need, din, dout, n, s));
    int hsum = 0;
    for (int x : hin)
        hsum += x;
    int got = from_device(dout, 1)[0];
    printf("cub::DeviceReduce::Sum %d\n", got);
    expect(got == hsum, "cub::DeviceReduce::Sum");
    CHECK(cub::DeviceReduce::Max(nullptr, need, din, dout, n, s));
    CHECK(cub::DeviceReduce::Max(tmp.get(need), need, din, dout, n, s));
    got = from_device(dout, 1)[0];
    expect(got == *std::max_element(hin.begin(), hin.end()), "cub::DeviceReduce::Max");

    int *dminval, *dminidx;
    CHECK(cudaMalloc(&dminval, sizeof(int)));
    CHECK(cudaMalloc(&dminidx, sizeof(int)));
    CHECK(cub::DeviceReduce::ArgMin(nullptr, need, din, dminval, dminidx, n, s));
    CHECK(cub::DeviceReduce::ArgMin(tmp.get(need), need, din, dminval, dminidx, n, s));
    int minval, minidx;
    CHECK(cudaMemcpyAsync(&minval, dminval, sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(&minidx, dminidx, sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    int hmin_at = (int)(std::min_element(hin.begin(), hin.end()) - hin.begin());
    printf("cub::DeviceReduce::ArgMin index %d value %d\n", minidx, minval);
    expect(minidx == hmin_at && minval == hin[hmin_at], "cub::DeviceReduce::ArgMin");

    // scans
    int *dscan;
    CHECK(cudaMalloc(&dscan, n * sizeof(int)));
    CHECK(cub::DeviceScan::InclusiveSum(nullptr, need, din, dscan, n, s));
    CHECK(cub::DeviceScan::InclusiveSum(tmp.get(need), need, din, dscan, n, s));
    std::vector<int> hscan = from_device(dscan, n);
    int run = 0;
    ok = true;
    for (int i = 0; i < n; i++) {
        run += hin[i];
        ok = ok && hscan[i] == run;
    }
    expect(ok, "cub::DeviceScan::InclusiveSum");
    CHECK(cub::DeviceScan::ExclusiveSum(nullptr, need, din, dscan, n, s));
    CHECK(cub::DeviceScan::ExclusiveSum(tmp.get(need), need, din, dscan, n, s));
    hscan = from_device(dscan, n);
    run = 0;
    ok = true;
    for (int i = 0; i < n; i++) {
        ok = ok && hscan[i] == run;
        run += hin[i];
    }
    expect(ok, "cub::DeviceScan::ExclusiveSum");

    // select the odd values, count written to device memory
    int *dnum;
    CHECK(cudaMalloc(&dnum, sizeof(int)));
    CHECK(cub::DeviceSelect::If(nullptr, need, din, dscan, dnum, n, is_odd(), s));
    CHECK(cub::DeviceSelect::If(tmp.get(need), need, din, dscan, dnum, n, is_odd(), s));
    int nsel = from_device(dnum, 1)[0];
    std::vector<int> hsel;
    for (int x : hin)
        if (x & 1)
            hsel.push_back(x);
    std::vector<int> dsel = from_device(dscan, nsel);
    printf("cub::DeviceSelect::If selected %d\n", nsel);
    expect(nsel == (int)hsel.size() && dsel == hsel, "cub::DeviceSelect::If keeps the order");

    // histogram of the values in 20 even bins over [-1000, 1000]
    const int bins = 20;
    int *dhist;
    CHECK(cudaMalloc(&dhist, bins * sizeof(int)));
    CHECK(cub::DeviceHistogram::HistogramEven(nullptr, need, din, dhist, bins + 1, -1000, 1000, n, s));
    CHECK(cub::DeviceHistogram::HistogramEven(tmp.get(need), need, din, dhist, bins + 1, -1000, 1000,
                                              n, s));
    std::vector<int> hh(bins, 0);
    for (int x : hin)
        if (x >= -1000 && x < 1000)
            hh[(x + 1000) / 100]++;
    expect(from_device(dhist, bins) == hh, "cub::DeviceHistogram::HistogramEven");

    CHECK(cudaStreamDestroy(s));
    int *frees[] = {dvals, dvals_out, din, dout, dscan, dnum, dhist, dminval, dminidx};
    for (int *p : frees)
        CHECK(cudaFree(p));
    CHECK(cudaFree(dkeys));
    CHECK(cudaFree(dkeys_out));
}

// One block of 128 threads x 4 items: a reduction, a scan and a sort of 512
// keys through shared memory, loaded and stored blocked-to-striped.
constexpr int BLOCK_THREADS = 128;
constexpr int ITEMS = 4;
constexpr int TILE = BLOCK_THREADS * ITEMS;

__global__ void block_primitives(const int *in, int *sorted, int *scanned, int *sums)
{
    using Load = cub::BlockLoad<int, BLOCK_THREADS, ITEMS, cub::BLOCK_LOAD_TRANSPOSE>;
    using Store = cub::BlockStore<int, BLOCK_THREADS, ITEMS, cub::BLOCK_STORE_TRANSPOSE>;
    using Sort = cub::BlockRadixSort<int, BLOCK_THREADS, ITEMS>;
    using Scan = cub::BlockScan<int, BLOCK_THREADS>;
    using Reduce = cub::BlockReduce<int, BLOCK_THREADS>;
    __shared__ union {
        typename Load::TempStorage load;
        typename Store::TempStorage store;
        typename Sort::TempStorage sort;
        typename Scan::TempStorage scan;
        typename Reduce::TempStorage reduce;
    } smem;

    const int *tile_in = in + blockIdx.x * TILE;
    int items[ITEMS];
    Load(smem.load).Load(tile_in, items);
    __syncthreads();
    int total = Reduce(smem.reduce).Sum(items);
    if (threadIdx.x == 0)
        sums[blockIdx.x] = total;
    __syncthreads();
    int prefix[ITEMS];
    Scan(smem.scan).InclusiveSum(items, prefix);
    __syncthreads();
    Store(smem.store).Store(scanned + blockIdx.x * TILE, prefix);
    __syncthreads();
    Sort(smem.sort).Sort(items);
    __syncthreads();
    // after Sort each thread holds a blocked arrangement: items[i] is rank threadIdx*ITEMS+i
    for (int i = 0; i < ITEMS; i++)
        sorted[blockIdx.x * TILE + threadIdx.x * ITEMS + i] = items[i];
}

static void cub_block_part(void)
{
    const int tiles = 64;
    const int n = tiles * TILE;
    std::vector<int> h = random_ints(n, 100000);
    int *din = to_device(h), *dsorted, *dscanned, *dsums;
    CHECK(cudaMalloc(&dsorted, n * sizeof(int)));
    CHECK(cudaMalloc(&dscanned, n * sizeof(int)));
    CHECK(cudaMalloc(&dsums, tiles * sizeof(int)));
    block_primitives<<<tiles, BLOCK_THREADS>>>(din, dsorted, dscanned, dsums);
    CHECK(cudaGetLastError());
    std::vector<int> sorted = from_device(dsorted, n), scanned = from_device(dscanned, n),
                     sums = from_device(dsums, tiles);
    bool sort_ok = true, scan_ok = true, sum_ok = true;
    for (int t = 0; t < tiles; t++) {
        std::vector<int> tile(h.begin() + t * TILE, h.begin() + (t + 1) * TILE);
        int run = 0;
        for (int i = 0; i < TILE; i++) {
            run += tile[i];
            scan_ok = scan_ok && scanned[t * TILE + i] == run;
        }
        sum_ok = sum_ok && sums[t] == run;
        std::sort(tile.begin(), tile.end());
        sort_ok = sort_ok && std::equal(tile.begin(), tile.end(), sorted.begin() + t * TILE);
    }
    expect(sum_ok, "cub::BlockReduce::Sum per tile");
    expect(scan_ok, "cub::BlockScan::InclusiveSum with BlockLoad/BlockStore transpose");
    expect(sort_ok, "cub::BlockRadixSort per tile");
    CHECK(cudaFree(din));
    CHECK(cudaFree(dsorted));
    CHECK(cudaFree(dscanned));
    CHECK(cudaFree(dsums));
}

int main(void)
{
    double t0 = now_s();
    thrust_part();
    cub_device_part();
    cub_block_part();
    CHECK(cudaDeviceSynchronize());
    fprintf(stderr, "thrust_cub: %.3f s\n", now_s() - t0);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "ALL PASSED", failures);
    return failures ? 1 : 0;
}

// coop_groups: cooperative groups as programs use them, each result checked
// against the host:
//   - a multi-phase kernel with grid.sync() between phases, launched with
//     cudaLaunchCooperativeKernel on as many blocks as can be co-resident
//     (cudaOccupancyMaxActiveBlocksPerMultiprocessor x the SM count, whatever
//     the device reports), and again through cudaLaunchKernelEx with
//     cudaLaunchAttributeCooperative; one block more than fits must fail with
//     cudaErrorCooperativeLaunchTooLarge;
//   - thread_block_tile<32/16/4> and a dynamic tiled_partition: cg::reduce,
//     shfl_down/shfl_xor, ballot/any/all, cg::inclusive_scan/exclusive_scan,
//     coalesced_threads() in divergent code, labeled_partition;
//   - cg::memcpy_async of a tile into shared memory, cg::wait.
// Sizes that depend on the device (SM count, blocks per SM) go to stderr.
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include <string.h>
#include "test_util.h"

namespace cg = cooperative_groups;

// Phase 1: every element squared in place; phase 2: each block sums a slice
// of the squares; phase 3: thread 0 of the grid adds the block sums; phase 4:
// every element has the total subtracted. A missing grid barrier gives wrong
// sums, so the host's comparison checks the synchronisation.
__global__ void grid_phases(long long *data, long long *block_sums, long long *total, int n,
                            int *valid)
{
    cg::grid_group grid = cg::this_grid();
    cg::thread_block block = cg::this_thread_block();
    if (grid.thread_rank() == 0)
        *valid = grid.is_valid() ? 1 : 0;
    for (unsigned long long i = grid.thread_rank(); i < (unsigned long long)n; i += grid.size())
        data[i] = data[i] * data[i];
    grid.sync();
    __shared__ long long acc;
    if (block.thread_rank() == 0)
        acc = 0;
    block.sync();
    long long mine = 0;
    for (unsigned long long i = grid.thread_rank(); i < (unsigned long long)n; i += grid.size())
        mine += data[(i * 7919ull) % n]; // a different element than phase 1 wrote
    atomicAdd((unsigned long long *)&acc, (unsigned long long)mine);
    block.sync();
    if (block.thread_rank() == 0)
        block_sums[blockIdx.x] = acc;
    grid.sync();
    if (grid.thread_rank() == 0) {
        long long s = 0;
        for (unsigned b = 0; b < gridDim.x; b++)
            s += block_sums[b];
        *total = s;
    }
    grid.sync();
    long long t = *total;
    for (unsigned long long i = grid.thread_rank(); i < (unsigned long long)n; i += grid.size())
        data[i] -= t;
}

static int run_grid(bool through_ex, int blocks, int threads, const char *what)
{
    const int n = 1 << 20;
    long long *h = (long long *)malloc(n * sizeof(long long));
    long long want_total = 0;
    for (int i = 0; i < n; i++) {
        h[i] = (i % 1000) - 500;
        want_total += h[i] * h[i];
    }
    long long *d_data, *d_sums, *d_total;
    int *d_valid;
    CHECK(cudaMalloc(&d_data, n * sizeof(long long)));
    CHECK(cudaMalloc(&d_sums, blocks * sizeof(long long)));
    CHECK(cudaMalloc(&d_total, sizeof(long long)));
    CHECK(cudaMalloc(&d_valid, sizeof(int)));
    CHECK(cudaMemcpy(d_data, h, n * sizeof(long long), cudaMemcpyHostToDevice));
    int nn = n;
    void *args[] = {&d_data, &d_sums, &d_total, &nn, &d_valid};
    cudaError_t err;
    if (through_ex) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(blocks);
        cfg.blockDim = dim3(threads);
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeCooperative;
        attr[0].val.cooperative = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        err = cudaLaunchKernelExC(&cfg, (const void *)grid_phases, args);
    } else {
        err = cudaLaunchCooperativeKernel((const void *)grid_phases, dim3(blocks), dim3(threads),
                                          args, 0, 0);
    }
    int ok = 0;
    if (err != cudaSuccess) {
        printf("%s: launch -> %s\n", what, cudaGetErrorName(err));
        expect(0, what);
    } else {
        CHECK(cudaDeviceSynchronize());
        long long total;
        int valid;
        CHECK(cudaMemcpy(&total, d_total, sizeof(total), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(&valid, d_valid, sizeof(valid), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(h, d_data, n * sizeof(long long), cudaMemcpyDeviceToHost));
        bool elems = true;
        for (int i = 0; i < n; i++) {
            long long v = (i % 1000) - 500;
            elems = elems && h[i] == v * v - want_total;
        }
        printf("%s: total %lld, grid valid %d\n", what, total, valid);
        ok = total == want_total && elems && valid == 1;
        expect(ok, what);
    }
    CHECK(cudaFree(d_data));
    CHECK(cudaFree(d_sums));
    CHECK(cudaFree(d_total));
    CHECK(cudaFree(d_valid));
    free(h);
    return ok;
}

static void grid_sync_part(void)
{
    int dev, coop, sms, per_sm;
    const int threads = 256;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_phases, threads, 0));
    printf("cooperative launch supported %d, blocks per SM > 0: %s\n", coop,
           per_sm > 0 ? "yes" : "no");
    fprintf(stderr, "coop_groups: %d SMs x %d blocks per SM\n", sms, per_sm);
    int full = sms * per_sm;
    run_grid(false, full, threads, "cudaLaunchCooperativeKernel, full co-resident grid");
    run_grid(false, sms, threads, "cudaLaunchCooperativeKernel, one block per SM");
    run_grid(true, full, threads, "cudaLaunchKernelEx cooperative attribute, full grid");
    // one block more than can be co-resident
    long long *d;
    CHECK(cudaMalloc(&d, sizeof(long long) * 4));
    int n = 1;
    void *args[] = {&d, &d, &d, &n, &d};
    cudaError_t err = cudaLaunchCooperativeKernel((const void *)grid_phases, dim3(full + 1),
                                                  dim3(threads), args, 0, 0);
    printf("cooperative launch of one block too many -> %s\n", cudaGetErrorName(err));
    printf("cudaGetLastError after it -> %s\n", cudaGetErrorName(cudaGetLastError()));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(d));
}

// Tiles: each thread contributes v = f(global index); tiles of 32, 16 and 4
// and a dynamic partition of 8 reduce and scan; results per thread.
struct tile_out {
    int sum32, max16, sum4_shfl, xor8, ballot_bits, any_all, incl, excl, coalesced, labeled;
};

__device__ int value_of(int g) { return (g * 37 + 11) % 101 - 50; }

__global__ void tiles_kernel(tile_out *out)
{
    cg::thread_block block = cg::this_thread_block();
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int v = value_of(g);
    tile_out r;

    cg::thread_block_tile<32> t32 = cg::tiled_partition<32>(block);
    r.sum32 = cg::reduce(t32, v, cg::plus<int>());
    cg::thread_block_tile<16> t16 = cg::tiled_partition<16>(block);
    r.max16 = cg::reduce(t16, v, cg::greater<int>());

    cg::thread_block_tile<4> t4 = cg::tiled_partition<4>(t32);
    int s = v;
    for (int off = t4.size() / 2; off > 0; off /= 2)
        s += t4.shfl_down(s, off);
    r.sum4_shfl = t4.shfl(s, 0);

    cg::thread_group t8 = cg::tiled_partition(block, 8); // size known only at run time
    int x = v;
    for (int m = 1; m < 8; m <<= 1)
        x = max(x, __shfl_xor_sync(0xffffffffu, x, m, 8));
    r.xor8 = (int)t8.size() * 1000 + x;

    r.ballot_bits = (int)t32.ballot(v > 0);
    r.any_all = (t32.any(v == 0) ? 2 : 0) + (t32.all(v >= -50) ? 1 : 0);
    r.incl = cg::inclusive_scan(t32, v);
    r.excl = cg::exclusive_scan(t32, v);

    r.coalesced = -1;
    r.labeled = -1;
    if (v & 1) { // odd values only: a divergent branch
        cg::coalesced_group active = cg::coalesced_threads();
        r.coalesced = (int)active.size() * 100 + (int)active.thread_rank();
    }
    int label = ((v % 3) + 3) % 3;
    cg::coalesced_group same = cg::labeled_partition(t32, label);
    r.labeled = cg::reduce(same, v, cg::plus<int>());
    out[g] = r;
}

static void tiles_part(void)
{
    const int blocks = 8, threads = 128, n = blocks * threads;
    tile_out *d;
    CHECK(cudaMalloc(&d, n * sizeof(tile_out)));
    tiles_kernel<<<blocks, threads>>>(d);
    CHECK(cudaGetLastError());
    tile_out *h = (tile_out *)malloc(n * sizeof(tile_out));
    CHECK(cudaMemcpy(h, d, n * sizeof(tile_out), cudaMemcpyDeviceToHost));
    int v[n];
    for (int g = 0; g < n; g++)
        v[g] = (g * 37 + 11) % 101 - 50;
    bool ok[10] = {true, true, true, true, true, true, true, true, true, true};
    for (int g = 0; g < n; g++) {
        int w32 = g / 32 * 32, w16 = g / 16 * 16, w4 = g / 4 * 4, w8 = g / 8 * 8;
        int sum32 = 0, max16 = -1000, sum4 = 0, max8 = -1000, bits = 0, any0 = 0, allge = 1;
        int incl = 0, excl = 0;
        for (int i = 0; i < 32; i++) {
            sum32 += v[w32 + i];
            bits |= (v[w32 + i] > 0) << i;
            any0 |= v[w32 + i] == 0;
            allge &= v[w32 + i] >= -50;
            if (w32 + i <= g)
                incl += v[w32 + i];
            if (w32 + i < g)
                excl += v[w32 + i];
        }
        for (int i = 0; i < 16; i++)
            max16 = v[w16 + i] > max16 ? v[w16 + i] : max16;
        for (int i = 0; i < 4; i++)
            sum4 += v[w4 + i];
        for (int i = 0; i < 8; i++)
            max8 = v[w8 + i] > max8 ? v[w8 + i] : max8;
        int odd_n = 0, odd_rank = 0, lab = 0, mylab = ((v[g] % 3) + 3) % 3;
        for (int i = 0; i < 32; i++) {
            int u = v[w32 + i];
            if (u & 1) {
                odd_n++;
                if (w32 + i < g)
                    odd_rank++;
            }
            if (((u % 3) + 3) % 3 == mylab)
                lab += u;
        }
        ok[0] = ok[0] && h[g].sum32 == sum32;
        ok[1] = ok[1] && h[g].max16 == max16;
        ok[2] = ok[2] && h[g].sum4_shfl == sum4;
        ok[3] = ok[3] && h[g].xor8 == 8000 + max8;
        ok[4] = ok[4] && h[g].ballot_bits == bits;
        ok[5] = ok[5] && h[g].any_all == (any0 ? 2 : 0) + allge;
        ok[6] = ok[6] && h[g].incl == incl;
        ok[7] = ok[7] && h[g].excl == excl;
        ok[8] = ok[8] && h[g].coalesced == ((v[g] & 1) ? odd_n * 100 + odd_rank : -1);
        ok[9] = ok[9] && h[g].labeled == lab;
    }
    const char *names[10] = {"cg::reduce plus over thread_block_tile<32>",
                             "cg::reduce greater over thread_block_tile<16>",
                             "shfl_down sum over thread_block_tile<4>",
                             "dynamic tiled_partition(8) + shfl_xor max",
                             "tile ballot",
                             "tile any/all",
                             "cg::inclusive_scan",
                             "cg::exclusive_scan",
                             "coalesced_threads() in a divergent branch",
                             "labeled_partition reduce"};
    for (int i = 0; i < 10; i++)
        expect(ok[i], names[i]);
    printf("thread 0: sum32 %d max16 %d ballot 0x%08x\n", h[0].sum32, h[0].max16,
           (unsigned)h[0].ballot_bits);
    free(h);
    CHECK(cudaFree(d));
}

// Each block copies its 1024-int tile to shared memory with cg::memcpy_async
// (cp.async on sm_80+) and writes it back reversed.
__global__ void async_copy_kernel(const int *in, int *out)
{
    __shared__ int tile[1024];
    cg::thread_block block = cg::this_thread_block();
    cg::memcpy_async(block, tile, in + blockIdx.x * 1024, sizeof(int) * 1024);
    cg::wait(block);
    for (int i = threadIdx.x; i < 1024; i += blockDim.x)
        out[blockIdx.x * 1024 + i] = tile[1023 - i];
}

static void memcpy_async_part(void)
{
    const int blocks = 32, n = blocks * 1024;
    int *h = (int *)malloc(n * sizeof(int)), *back = (int *)malloc(n * sizeof(int));
    for (int i = 0; i < n; i++)
        h[i] = i * 3 + 1;
    int *din, *dout;
    CHECK(cudaMalloc(&din, n * sizeof(int)));
    CHECK(cudaMalloc(&dout, n * sizeof(int)));
    CHECK(cudaMemcpy(din, h, n * sizeof(int), cudaMemcpyHostToDevice));
    async_copy_kernel<<<blocks, 256>>>(din, dout);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(back, dout, n * sizeof(int), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int b = 0; b < blocks; b++)
        for (int i = 0; i < 1024; i++)
            ok = ok && back[b * 1024 + i] == h[b * 1024 + 1023 - i];
    expect(ok, "cg::memcpy_async + cg::wait into shared memory");
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    free(h);
    free(back);
}

int main(void)
{
    double t0 = now_s();
    grid_sync_part();
    tiles_part();
    memcpy_async_part();
    CHECK(cudaDeviceSynchronize());
    fprintf(stderr, "coop_groups: %.3f s\n", now_s() - t0);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "ALL PASSED", failures);
    return failures ? 1 : 0;
}

// clusters_dsmem: thread block clusters (sm_90) beyond a pair of blocks,
// each result checked against the host:
//   - a __cluster_dims__(4,1,1) kernel: every block adds its values into the
//     shared memory of rank 0 with atomics through map_shared_rank (a
//     cluster-wide reduction in distributed shared memory);
//   - cudaLaunchKernelEx with cudaLaunchAttributeClusterDimension of 2, 4
//     and 8 (the portable maximum), and 2x2x1 on a 2D grid: a ring exchange
//     where each block reads its neighbour's shared memory between
//     cluster.sync() and the split barrier_arrive()/barrier_wait();
//     block_rank, num_blocks, block_index, dim_blocks read back;
//   - cudaFuncSetAttribute(NonPortableClusterSizeAllowed) then a cluster of
//     16 blocks, when the device can hold one;
//   - cudaOccupancyMaxPotentialClusterSize and cudaOccupancyMaxActiveClusters
//     printed only as "> 0" (their values depend on the SMs of the share);
//   - a grid that is not a multiple of the cluster size is refused.
#include <cooperative_groups.h>
#include <string.h>
#include "test_util.h"

namespace cg = cooperative_groups;

// Each block of 4 sums 256 values into rank 0's shared accumulator.
__global__ void __cluster_dims__(4, 1, 1) cluster_reduce(const int *in, long long *out)
{
    __shared__ unsigned long long acc;
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0)
        acc = 0;
    cluster.sync(); // rank 0's acc is zero before anyone adds to it
    unsigned long long *root = cluster.map_shared_rank(&acc, 0);
    int v = in[blockIdx.x * blockDim.x + threadIdx.x];
    atomicAdd(root, (unsigned long long)(long long)v);
    cluster.sync(); // every add landed before rank 0 reads, and before it exits
    if (cluster.block_rank() == 0 && threadIdx.x == 0)
        out[blockIdx.x / cluster.num_blocks()] = (long long)acc;
}

// Ring exchange: each block fills its shared array with rank-tagged values
// and reads the array of the next rank; the split barrier lets every block
// finish reading before any leaves (its shared memory must stay alive).
struct ring_out {
    int rank, nblocks, idx_x, idx_y, dim_x, dim_y, neighbour_sum;
};

__global__ void ring_kernel(ring_out *out)
{
    __shared__ int vals[128];
    cg::cluster_group cluster = cg::this_cluster();
    unsigned rank = cluster.block_rank();
    vals[threadIdx.x] = (int)(rank * 1000 + threadIdx.x);
    cluster.sync();
    unsigned next = (rank + 1) % cluster.num_blocks();
    int *theirs = cluster.map_shared_rank(vals, next);
    __shared__ int sum;
    if (threadIdx.x == 0)
        sum = 0;
    __syncthreads();
    atomicAdd(&sum, theirs[(threadIdx.x + 1) % 128]);
    cluster.barrier_arrive();
    __syncthreads();
    cluster.barrier_wait();
    if (threadIdx.x == 0) {
        int b = blockIdx.y * gridDim.x + blockIdx.x;
        dim3 bi = cluster.block_index();
        dim3 db = cluster.dim_blocks();
        ring_out r = {(int)rank, (int)cluster.num_blocks(), (int)bi.x, (int)bi.y,
                      (int)db.x, (int)db.y, sum};
        out[b] = r;
    }
}

// A launch configuration of 128-thread blocks in clusters of `cluster`;
// `attr` holds the cluster attribute it points to.
static cudaLaunchConfig_t cluster_config(dim3 grid, dim3 cluster, cudaLaunchAttribute *attr)
{
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = dim3(128);
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = cluster.x;
    attr->val.clusterDim.y = cluster.y;
    attr->val.clusterDim.z = cluster.z;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

static cudaError_t launch_ring(dim3 grid, dim3 cluster, ring_out *d_out)
{
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = cluster_config(grid, cluster, &attr);
    return cudaLaunchKernelEx(&cfg, ring_kernel, d_out);
}

// What ring_kernel must have written for a grid and cluster shape.
static int check_ring(const ring_out *h, dim3 grid, dim3 cl)
{
    int nb = (int)(cl.x * cl.y);
    int want_sum_base = 0;
    for (int t = 0; t < 128; t++)
        want_sum_base += (t + 1) % 128;
    for (unsigned y = 0; y < grid.y; y++)
        for (unsigned x = 0; x < grid.x; x++) {
            const ring_out &r = h[y * grid.x + x];
            int ix = (int)(x % cl.x), iy = (int)(y % cl.y);
            int rank = iy * (int)cl.x + ix;
            int next = (rank + 1) % nb;
            if (r.rank != rank || r.nblocks != nb || r.idx_x != ix || r.idx_y != iy ||
                r.dim_x != (int)cl.x || r.dim_y != (int)cl.y ||
                r.neighbour_sum != next * 1000 * 128 + want_sum_base)
                return 0;
        }
    return 1;
}

static void ring_case(dim3 grid, dim3 cl, ring_out *d_out, ring_out *h)
{
    char what[96];
    snprintf(what, sizeof what, "cluster %ux%u on a %ux%u grid: ranks, indices, neighbour's smem",
             cl.x, cl.y, grid.x, grid.y);
    cudaError_t err = launch_ring(grid, cl, d_out);
    if (err != cudaSuccess) {
        printf("%s: launch -> %s\n", what, cudaGetErrorName(err));
        expect(0, what);
        return;
    }
    CHECK(cudaMemcpy(h, d_out, grid.x * grid.y * sizeof(ring_out), cudaMemcpyDeviceToHost));
    expect(check_ring(h, grid, cl), what);
}

static void cluster_16(ring_out *d_out, ring_out *h)
{
    CHECK(cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, ring_kernel));
    printf("non-portable cluster size allowed: %d\n", fa.nonPortableClusterSizeAllowed);
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = cluster_config(dim3(32), dim3(16), &attr);
    int active = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&active, ring_kernel, &cfg));
    fprintf(stderr, "clusters_dsmem: %d active clusters of 16\n", active);
    if (active == 0) { // a device or share whose GPCs hold fewer than 16 SMs
        printf("cluster of 16: the device holds none, not launched\n");
        return;
    }
    ring_case(dim3(32), dim3(16), d_out, h);
}

static void occupancy(void)
{
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = cluster_config(dim3(64), dim3(1), &attr);
    cfg.numAttrs = 0; // the potential size is asked without a cluster dimension
    int size = 0;
    CHECK(cudaOccupancyMaxPotentialClusterSize(&size, ring_kernel, &cfg));
    printf("cudaOccupancyMaxPotentialClusterSize > 0: %s\n", size > 0 ? "yes" : "no");
    fprintf(stderr, "clusters_dsmem: max potential cluster size %d\n", size);
    for (unsigned c = 2; c <= 8; c *= 2) {
        cfg = cluster_config(dim3(64), dim3(c), &attr);
        int active = 0;
        CHECK(cudaOccupancyMaxActiveClusters(&active, ring_kernel, &cfg));
        printf("cudaOccupancyMaxActiveClusters(cluster %u) > 0: %s\n", c, active > 0 ? "yes" : "no");
    }
}

int main(void)
{
    double t0 = now_s();
    int cc_major = 0;
    CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0));
    int cluster_launch = 0;
    CHECK(cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, 0));
    printf("cluster launch supported: %d\n", cluster_launch);
    if (cc_major < 9 || !cluster_launch) {
        printf("FAILED: thread block clusters need compute capability 9.0\n");
        return 1;
    }

    // cluster-wide reduction in rank 0's shared memory
    const int blocks = 64, threads = 256, n = blocks * threads;
    int *h_in = (int *)malloc(n * sizeof(int));
    for (int i = 0; i < n; i++)
        h_in[i] = (i * 7919) % 2001 - 1000;
    int *d_in;
    long long *d_sums, h_sums[blocks / 4];
    CHECK(cudaMalloc(&d_in, n * sizeof(int)));
    CHECK(cudaMalloc(&d_sums, sizeof h_sums));
    CHECK(cudaMemcpy(d_in, h_in, n * sizeof(int), cudaMemcpyHostToDevice));
    cluster_reduce<<<blocks, threads>>>(d_in, d_sums);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h_sums, d_sums, sizeof h_sums, cudaMemcpyDeviceToHost));
    bool ok = true;
    long long total = 0;
    for (int c = 0; c < blocks / 4; c++) {
        long long want = 0;
        for (int i = c * 4 * threads; i < (c + 1) * 4 * threads; i++)
            want += h_in[i];
        ok = ok && h_sums[c] == want;
        total += h_sums[c];
    }
    printf("__cluster_dims__(4,1,1) reduction: total %lld\n", total);
    expect(ok, "cluster-wide reduction through map_shared_rank atomics");

    ring_out *d_out, *h_out = (ring_out *)malloc(64 * sizeof(ring_out));
    CHECK(cudaMalloc(&d_out, 64 * sizeof(ring_out)));
    ring_case(dim3(16), dim3(2), d_out, h_out);
    ring_case(dim3(32), dim3(4), d_out, h_out);
    ring_case(dim3(64), dim3(8), d_out, h_out);
    ring_case(dim3(8, 8), dim3(2, 2), d_out, h_out);
    cudaError_t err = launch_ring(dim3(10), dim3(4), d_out);
    printf("grid of 10 with clusters of 4 -> %s\n", cudaGetErrorName(err));
    printf("cudaGetLastError -> %s\n", cudaGetErrorName(cudaGetLastError()));
    occupancy();
    cluster_16(d_out, h_out);

    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_sums));
    CHECK(cudaFree(d_out));
    free(h_in);
    free(h_out);
    fprintf(stderr, "clusters_dsmem: %.3f s\n", now_s() - t0);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "ALL PASSED", failures);
    return failures ? 1 : 0;
}

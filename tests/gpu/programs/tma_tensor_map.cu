// tma_tensor_map: Hopper's tensor memory accelerator as CUTLASS-style code
// uses it (built for sm_90a), each result checked against the host:
//   - cuTensorMapEncodeTiled, reached through cudaGetDriverEntryPointByVersion
//     (the program does not link libcuda), describes a 1000 x 500 float matrix
//     in 32 x 16 tiles;
//   - a kernel loads each tile into shared memory with
//     cp.async.bulk.tensor.2d (inline PTX) completing on an mbarrier
//     (init, arrive.expect_tx, try_wait.parity); the edge tiles are filled
//     with zeros past the matrix;
//   - a second kernel scales the tile in shared memory and writes it to
//     another matrix with the bulk tensor store (clipped at the edges), a
//     bulk group committed and waited for;
//   - an encode with a misaligned stride is refused (error name printed).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>
#include <string.h>
#include "test_util.h"

#define W 1000
#define H 500
#define TW 32
#define TH 16
#define TILES_X ((W + TW - 1) / TW)
#define TILES_Y ((H + TH - 1) / TH)
#define PW (TILES_X * TW)
#define PH (TILES_Y * TH)
#define THREADS 128

__device__ static inline uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ static inline void barrier_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
                 : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Thread 0 starts the tile's load; everyone waits for its bytes to land.
__device__ static void load_tile(float *tile, const CUtensorMap *map, int x, int y, uint64_t *bar)
{
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     ::"r"(smem_addr(bar)), "r"((unsigned)(TW * TH * sizeof(float)))
                     : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_addr(tile)),
                     "l"((uint64_t)map), "r"(x), "r"(y), "r"(smem_addr(bar))
                     : "memory");
    }
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n"
                     " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(smem_addr(bar))
                     : "memory");
}

// The block's tile (blockIdx.x, blockIdx.y) into shared memory.
__device__ static void load_block_tile(float *tile, const CUtensorMap *map, uint64_t *bar)
{
    if (threadIdx.x == 0)
        barrier_init(bar, 1);
    __syncthreads();
    load_tile(tile, map, blockIdx.x * TW, blockIdx.y * TH, bar);
}

// out is PW x PH: the whole tile, zeros past the matrix included, as 2v + 1.
__global__ void tma_load_kernel(const __grid_constant__ CUtensorMap map, float *out)
{
    __shared__ alignas(128) float tile[TH][TW];
    __shared__ alignas(8) uint64_t bar;
    load_block_tile(&tile[0][0], &map, &bar);
    int x0 = blockIdx.x * TW, y0 = blockIdx.y * TH;
    for (int i = threadIdx.x; i < TW * TH; i += blockDim.x) {
        int r = i / TW, c = i % TW;
        out[(size_t)(y0 + r) * PW + x0 + c] = tile[r][c] * 2.0f + 1.0f;
    }
}

// dst = 3 * src through shared memory, both ways by TMA.
__global__ void tma_store_kernel(const __grid_constant__ CUtensorMap src,
                                 const __grid_constant__ CUtensorMap dst)
{
    __shared__ alignas(128) float tile[TH][TW];
    __shared__ alignas(8) uint64_t bar;
    load_block_tile(&tile[0][0], &src, &bar);
    int x0 = blockIdx.x * TW, y0 = blockIdx.y * TH;
    for (int i = threadIdx.x; i < TW * TH; i += blockDim.x)
        tile[i / TW][i % TW] *= 3.0f;
    // the threads' writes must be visible to the async proxy before the store
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
                     ::"l"((uint64_t)&dst), "r"(x0), "r"(y0), "r"(smem_addr(&tile[0][0]))
                     : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); // smem stays until read
    }
}

static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;

static CUresult encode(CUtensorMap *map, void *base, uint64_t row_bytes)
{
    cuuint64_t dims[2] = {W, H};
    cuuint64_t strides[1] = {row_bytes};
    cuuint32_t box[2] = {TW, TH};
    cuuint32_t elem_strides[2] = {1, 1};
    return encode_tiled(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, dims, strides, box,
                        elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

int main(void)
{
    double t0 = now_s();
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode_tiled, 12000,
                                           cudaEnableDefault, &q));
    printf("cuTensorMapEncodeTiled found: %s\n",
           q == cudaDriverEntryPointSuccess && encode_tiled ? "yes" : "no");
    if (encode_tiled == NULL)
        return 1;

    float *h = (float *)malloc(W * H * sizeof(float));
    float *back = (float *)malloc(PW * PH * sizeof(float));
    for (int i = 0; i < W * H; i++)
        h[i] = (float)((i * 37) % 1999) - 999.0f;
    float *da, *db, *dpad;
    CHECK(cudaMalloc(&da, W * H * sizeof(float)));
    CHECK(cudaMalloc(&db, W * H * sizeof(float)));
    CHECK(cudaMalloc(&dpad, PW * PH * sizeof(float)));
    CHECK(cudaMemcpy(da, h, W * H * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(db, 0, W * H * sizeof(float)));

    CUtensorMap map_a, map_b, bad;
    CUresult r = encode(&map_a, da, W * sizeof(float));
    CUresult r2 = encode(&map_b, db, W * sizeof(float));
    printf("encode: %d %d\n", (int)r, (int)r2);
    if (r != CUDA_SUCCESS || r2 != CUDA_SUCCESS)
        return 1;
    CUresult rbad = encode(&bad, da, W * sizeof(float) + 4); // strides must be multiples of 16
    printf("encode with a stride of %d bytes -> %s\n", (int)(W * sizeof(float) + 4),
           rbad == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : "other");

    dim3 grid(TILES_X, TILES_Y);
    tma_load_kernel<<<grid, THREADS>>>(map_a, dpad);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(back, dpad, PW * PH * sizeof(float), cudaMemcpyDeviceToHost));
    bool inside = true, outside = true;
    for (int y = 0; y < PH; y++)
        for (int x = 0; x < PW; x++) {
            float v = back[y * PW + x];
            if (x < W && y < H)
                inside = inside && v == h[y * W + x] * 2.0f + 1.0f;
            else
                outside = outside && v == 1.0f;
        }
    expect(inside, "TMA tile loads match the matrix");
    expect(outside, "TMA fills past the matrix with zeros");

    tma_store_kernel<<<grid, THREADS>>>(map_a, map_b);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(back, db, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    bool stored = true;
    double sum = 0;
    for (int i = 0; i < W * H; i++) {
        stored = stored && back[i] == h[i] * 3.0f;
        sum += back[i];
    }
    printf("stored matrix sum %.1f\n", sum);
    expect(stored, "TMA tile stores write 3x the matrix, clipped at its edges");

    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dpad));
    free(h);
    free(back);
    fprintf(stderr, "tma_tensor_map: %.3f s\n", now_s() - t0);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "ALL PASSED", failures);
    return failures ? 1 : 0;
}

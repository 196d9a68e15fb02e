// A long-running CUDA program for tests/gpu/migrate_check.sh: it keeps
// buffers of many sizes (small ones sharing a chunk, large ones, a pitched
// one) and updates them with kernels step after step, printing a checksum
// of every buffer every 10 steps. Run natively and through Flyt with its
// session moved mid-run, the printed lines must be identical.
// With "pinned", pinned host memory takes part too (docs/host-memory.md): a
// cudaHostAlloc buffer (default flags) the host writes each step and copies
// in, and a cudaHostAllocMapped one a kernel reads and writes through its
// pointer (zero-copy); their checksums are printed with the rest.
// With "global", a __device__ variable takes part too: a kernel folds each
// step into it and the host reads it with cudaMemcpyFromSymbol (a module
// global: the restore must find it at the same address).
// With "vmm", memory of the driver's virtual memory management takes part
// too, as PyTorch's expandable segments use it: one reservation, physical
// allocations created, mapped into it one after another and made
// read-write (one handle kept, one released at once: its mapping keeps
// it), grown by one more at step 120; kernels update it like the others
// and its checksum is printed with theirs; at the end it is unmapped,
// released and freed through the handles held from before the move.
// With "graph", each step is one launch of a CUDA graph captured once, as
// PyTorch's CUDA graphs and torch.compile(mode="reduce-overhead") replay
// theirs: a kernel bumps a step counter in device memory, the step kernels
// read it (so every launch of the same graph does the next step), a memset
// and a device-to-device copy of the counter; the graph is destroyed after
// instantiation (as PyTorch does), so only the executable graph crosses the
// move. The copied counter is printed with the checksums.
// With "async", stream-ordered memory takes part too (cudaMallocAsync, as
// PyTorch's cudaMallocAsync backend and CUB use it): two buffers from the
// default pool and two from a pool the program created, on two streams, the
// pools' release thresholds set; they live across the move, and at step 120
// two of them are copied to new stream-ordered buffers and freed in stream
// order; at the end the pools' thresholds are printed and all are freed.
// usage: migrate_loop [STEPS] [SLEEP_MS] [pinned|global|vmm|graph|async]
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <unistd.h>
#include <cuda.h>
#include <cuda_runtime.h>

#define CK(x)                                                                           \
    do {                                                                                \
        cudaError_t e_ = (x);                                                           \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

__global__ void step_kernel(uint32_t *p, size_t n, uint32_t salt)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = p[i] * 1664525u + 1013904223u + salt + (uint32_t)i;
}

// Graph mode: the step's salt comes from device memory, bumped by the graph.
__global__ void bump_kernel(uint32_t *step) { *step += 1; }

__global__ void step_dev_kernel(uint32_t *p, size_t n, const uint32_t *step)
{
    uint32_t salt = *step;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = p[i] * 1664525u + 1013904223u + salt + (uint32_t)i;
}

__global__ void sum_kernel(const uint32_t *p, size_t n, unsigned long long *out)
{
    unsigned long long s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += p[i] ^ (uint32_t)(i * 2654435761u);
    atomicAdd(out, s);
}

// Zero-copy: a kernel updates mapped host memory in place.
__global__ void mapped_kernel(uint32_t *host, size_t n, uint32_t salt)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        host[i] = host[i] * 22695477u + salt;
}

#define PINNED_WORDS (1u << 18) /* 1 MiB each */

struct pinned_bufs {
    uint32_t *staged; // cudaHostAlloc default: written here, copied into dev
    uint32_t *mapped; // cudaHostAllocMapped: a kernel works on it in place
    uint32_t *dev;
};

static void pinned_setup(pinned_bufs *p)
{
    CK(cudaHostAlloc(&p->staged, PINNED_WORDS * 4, cudaHostAllocDefault));
    CK(cudaHostAlloc(&p->mapped, PINNED_WORDS * 4, cudaHostAllocMapped));
    CK(cudaMalloc(&p->dev, PINNED_WORDS * 4));
    for (size_t i = 0; i < PINNED_WORDS; i++)
        p->mapped[i] = (uint32_t)i;
}

// One step: the host writes the staged buffer and copies it in; a kernel
// updates the mapped buffer through its device pointer.
static void pinned_step(pinned_bufs *p, int t, cudaStream_t s)
{
    for (size_t i = 0; i < PINNED_WORDS; i++)
        p->staged[i] = (uint32_t)(i * 40503u + (uint32_t)t);
    CK(cudaMemcpyAsync(p->dev, p->staged, PINNED_WORDS * 4, cudaMemcpyHostToDevice, s));
    uint32_t *dptr;
    CK(cudaHostGetDevicePointer((void **)&dptr, p->mapped, 0));
    mapped_kernel<<<64, 256, 0, s>>>(dptr, PINNED_WORDS, (uint32_t)t);
    CK(cudaGetLastError());
}

// The host's own checksum of the mapped buffer (after a synchronisation).
static unsigned long long mapped_sum(const pinned_bufs *p)
{
    unsigned long long h = 0;
    for (size_t i = 0; i < PINNED_WORDS; i++)
        h += p->mapped[i] ^ (uint32_t)(i * 2654435761u);
    return h;
}

#define CU(x)                                                                           \
    do {                                                                                \
        CUresult r_ = (x);                                                              \
        if (r_ != CUDA_SUCCESS) {                                                       \
            fprintf(stderr, "%s:%d: %s: CUDA error %d\n", __FILE__, __LINE__, #x, (int)r_); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

// The driver's VMM calls, through the runtime (no link to libcuda needed).
struct vmm_api {
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*free)(CUdeviceptr, size_t);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
};

template <typename F> static void entry(F *fn, const char *name)
{
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q));
    if (p == nullptr || q != cudaDriverEntryPointSuccess) {
        fprintf(stderr, "no driver entry point %s\n", name);
        exit(1);
    }
    *fn = (F)p;
}

struct vmm_region {
    vmm_api api;
    CUmemAllocationProp prop;
    CUdeviceptr va;
    size_t gran, reserved, mapped;
    CUmemGenericAllocationHandle held[4];
    int nheld;
};

// One more physical allocation of bytes mapped at the end of what is mapped.
static void vmm_grow(vmm_region *v, size_t bytes, bool keep_handle)
{
    CUmemGenericAllocationHandle h;
    CU(v->api.create(&h, bytes, &v->prop, 0));
    CU(v->api.map(v->va + v->mapped, bytes, 0, h, 0));
    CUmemAccessDesc d = {};
    d.location = v->prop.location;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(v->api.set_access(v->va + v->mapped, bytes, &d, 1));
    CK(cudaMemset((void *)(v->va + v->mapped), 0x5a + v->nheld, bytes));
    v->mapped += bytes;
    if (keep_handle)
        v->held[v->nheld++] = h;
    else
        CU(v->api.release(h)); // the mapping keeps the memory
}

static void vmm_setup(vmm_region *v)
{
    memset(v, 0, sizeof *v);
    entry(&v->api.granularity, "cuMemGetAllocationGranularity");
    entry(&v->api.reserve, "cuMemAddressReserve");
    entry(&v->api.free, "cuMemAddressFree");
    entry(&v->api.create, "cuMemCreate");
    entry(&v->api.release, "cuMemRelease");
    entry(&v->api.map, "cuMemMap");
    entry(&v->api.unmap, "cuMemUnmap");
    entry(&v->api.set_access, "cuMemSetAccess");
    v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    v->prop.location.id = 0;
    CU(v->api.granularity(&v->gran, &v->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    v->reserved = 16 * v->gran;
    CU(v->api.reserve(&v->va, v->reserved, 0, 0, 0));
    vmm_grow(v, 2 * v->gran, true);
    vmm_grow(v, v->gran, false);
}

static void vmm_teardown(vmm_region *v)
{
    CK(cudaDeviceSynchronize());
    CU(v->api.unmap(v->va, v->mapped));
    for (int i = 0; i < v->nheld; i++)
        CU(v->api.release(v->held[i]));
    CU(v->api.free(v->va, v->reserved));
}

#define NASYNC 4

struct async_bufs {
    cudaMemPool_t pool;  // created by the program
    cudaStream_t  other; // the second stream
    uint32_t     *p[NASYNC];
    size_t        size[NASYNC];
};

static cudaStream_t async_stream(async_bufs *a, int i, cudaStream_t s) { return i % 2 ? a->other : s; }

// Buffer i: from the default pool (0, 1) or the created one (2, 3), on stream s or the other.
static void async_alloc(async_bufs *a, int i, cudaStream_t s)
{
    if (i < 2)
        CK(cudaMallocAsync(&a->p[i], a->size[i], async_stream(a, i, s)));
    else
        CK(cudaMallocFromPoolAsync(&a->p[i], a->size[i], a->pool, async_stream(a, i, s)));
}

static void async_setup(async_bufs *a, cudaStream_t s)
{
    const size_t sizes[NASYNC] = {(1u << 20) + 40, 5000, (3u << 20) + 8, 300};
    CK(cudaStreamCreateWithFlags(&a->other, cudaStreamNonBlocking));
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    props.maxSize = 256u << 20;
    CK(cudaMemPoolCreate(&a->pool, &props));
    uint64_t keep = 64u << 20;
    CK(cudaMemPoolSetAttribute(a->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    cudaMemPool_t def;
    CK(cudaDeviceGetDefaultMemPool(&def, 0));
    uint64_t def_keep = 32u << 20;
    CK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &def_keep));
    for (int i = 0; i < NASYNC; i++) {
        a->size[i] = sizes[i];
        async_alloc(a, i, s);
        CK(cudaMemsetAsync(a->p[i], 0x30 + i, a->size[i], async_stream(a, i, s)));
    }
    CK(cudaStreamSynchronize(a->other));
}

// Buffers 1 and 2 move to new stream-ordered memory: copied, then freed in stream order.
static void async_renew(async_bufs *a, cudaStream_t s)
{
    CK(cudaStreamSynchronize(s));
    for (int i = 1; i <= 2; i++) {
        uint32_t *old = a->p[i];
        async_alloc(a, i, s);
        cudaStream_t st = async_stream(a, i, s);
        CK(cudaMemcpyAsync(a->p[i], old, a->size[i], cudaMemcpyDeviceToDevice, st));
        CK(cudaFreeAsync(old, st));
    }
    CK(cudaStreamSynchronize(a->other));
}

static void async_teardown(async_bufs *a, cudaStream_t s)
{
    cudaMemPool_t def;
    CK(cudaDeviceGetDefaultMemPool(&def, 0));
    uint64_t keep = 0, def_keep = 0;
    CK(cudaMemPoolGetAttribute(a->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    CK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrReleaseThreshold, &def_keep));
    cudaPointerAttributes pa;
    CK(cudaPointerGetAttributes(&pa, a->p[0] + 5));
    printf("pools: thresholds %llu %llu, buffer 0 is device memory %d\n", (unsigned long long)keep,
           (unsigned long long)def_keep, pa.type == cudaMemoryTypeDevice && pa.device == 0);
    for (int i = 0; i < NASYNC; i++)
        CK(cudaFreeAsync(a->p[i], async_stream(a, i, s)));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamSynchronize(a->other));
    CK(cudaMemPoolDestroy(a->pool));
    CK(cudaStreamDestroy(a->other));
}

__device__ unsigned long long g_tally;

__global__ void tally_kernel(int t) { g_tally = g_tally * 31u + (unsigned long long)t; }

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 200, sleep_ms = argc > 2 ? atoi(argv[2]) : 20;
    bool pinned = argc > 3 && strcmp(argv[3], "pinned") == 0;
    bool global = argc > 3 && strcmp(argv[3], "global") == 0;
    bool vmm = argc > 3 && strcmp(argv[3], "vmm") == 0;
    bool graph = argc > 3 && strcmp(argv[3], "graph") == 0;
    bool async = argc > 3 && strcmp(argv[3], "async") == 0;
    pinned_bufs pb;
    vmm_region vr;
    async_bufs ab;
    const size_t sizes[] = {256, 1000, 4096, 100000, (1u << 20) + 4, (3u << 20) + 100, 64u << 20};
    const int nbuf = sizeof sizes / sizeof sizes[0];
    uint32_t *buf[nbuf + 1 + NASYNC]; // after them: pinned, vmm or async mode's buffers
    size_t words[nbuf + 1 + NASYNC];
    for (int b = 0; b < nbuf; b++) {
        CK(cudaMalloc(&buf[b], sizes[b]));
        words[b] = sizes[b] / 4;
        CK(cudaMemset(buf[b], b + 1, sizes[b]));
    }
    size_t pitch;
    CK(cudaMallocPitch(&buf[nbuf], &pitch, 3000, 50));
    words[nbuf] = pitch * 50 / 4;
    CK(cudaMemset(buf[nbuf], 7, pitch * 50));
    unsigned long long *sum;
    CK(cudaMalloc(&sum, sizeof *sum));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (pinned) {
        pinned_setup(&pb);
        buf[nbuf + 1] = pb.dev; // summed with the others
        words[nbuf + 1] = PINNED_WORDS;
    }
    if (vmm) {
        vmm_setup(&vr);
        buf[nbuf + 1] = (uint32_t *)vr.va; // summed with the others
        words[nbuf + 1] = vr.mapped / 4;
    }
    if (async) {
        async_setup(&ab, s);
        for (int i = 0; i < NASYNC; i++) {
            buf[nbuf + 1 + i] = ab.p[i];
            words[nbuf + 1 + i] = ab.size[i] / 4;
        }
    }
    int last = pinned || vmm ? nbuf + 1 : async ? nbuf + NASYNC : nbuf;
    uint32_t *counter = NULL; // graph mode: [0] the step, [1] its copy, [2] memset each step
    cudaGraphExec_t exec = NULL;
    if (graph) {
        CK(cudaMalloc(&counter, 3 * sizeof *counter));
        CK(cudaMemsetAsync(counter, 0, 3 * sizeof *counter, s));
        CK(cudaStreamSynchronize(s));
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        bump_kernel<<<1, 1, 0, s>>>(counter);
        for (int b = 0; b <= nbuf; b++)
            step_dev_kernel<<<64, 256, 0, s>>>(buf[b], words[b], counter);
        CK(cudaMemsetAsync(counter + 2, 0x5a, sizeof *counter, s));
        CK(cudaMemcpyAsync(counter + 1, counter, sizeof *counter, cudaMemcpyDeviceToDevice, s));
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&exec, g, 0));
        CK(cudaGraphDestroy(g));
    }
    if (global) {
        unsigned long long zero = 0;
        CK(cudaMemcpyToSymbol(g_tally, &zero, sizeof zero));
    }
    for (int t = 1; t <= steps; t++) {
        if (vmm && t == 120) { // grown after the move, as an expandable segment grows
            vmm_grow(&vr, vr.gran, true);
            words[nbuf + 1] = vr.mapped / 4;
        }
        if (graph)
            CK(cudaGraphLaunch(exec, s));
        if (async && t == 120) { // freed in stream order after the move, allocated again
            async_renew(&ab, s);
            for (int i = 1; i <= 2; i++)
                buf[nbuf + 1 + i] = ab.p[i];
        }
        for (int b = 0; !graph && b <= (vmm ? nbuf + 1 : async ? last : nbuf); b++)
            step_kernel<<<64, 256, 0, s>>>(buf[b], words[b], (uint32_t)t);
        CK(cudaGetLastError());
        if (pinned)
            pinned_step(&pb, t, s);
        if (global)
            tally_kernel<<<1, 1, 0, s>>>(t);
        CK(cudaStreamSynchronize(s));
        if (t % 10 == 0) {
            printf("step %d:", t);
            for (int b = 0; b <= last; b++) {
                unsigned long long h = 0;
                CK(cudaMemsetAsync(sum, 0, sizeof *sum, s));
                sum_kernel<<<64, 256, 0, s>>>(buf[b], words[b], sum);
                CK(cudaMemcpyAsync(&h, sum, sizeof h, cudaMemcpyDeviceToHost, s));
                CK(cudaStreamSynchronize(s));
                printf(" %llx", h);
            }
            if (pinned)
                printf(" mapped %llx", mapped_sum(&pb));
            if (graph) {
                uint32_t c[3];
                CK(cudaMemcpy(c, counter, sizeof c, cudaMemcpyDeviceToHost));
                printf(" graph %u %u %x", c[0], c[1], c[2]);
            }
            if (global) {
                unsigned long long v = 0;
                CK(cudaMemcpyFromSymbol(&v, g_tally, sizeof v));
                printf(" global %llx", v);
            }
            printf("\n");
            fflush(stdout);
        }
        usleep(sleep_ms * 1000);
    }
    for (int b = 0; b <= nbuf; b++)
        CK(cudaFree(buf[b]));
    if (pinned)
        CK(cudaFree(pb.dev));
    if (vmm)
        vmm_teardown(&vr);
    if (async)
        async_teardown(&ab, s);
    if (pinned) {
        CK(cudaFreeHost(pb.staged));
        CK(cudaFreeHost(pb.mapped));
    }
    if (graph) {
        CK(cudaGraphExecDestroy(exec));
        CK(cudaFree(counter));
    }
    CK(cudaFree(sum));
    CK(cudaStreamDestroy(s));
    printf("PASS\n");
    return 0;
}

/* Page-locked host memory of every kind the runtime makes, as copy sources
 * and destinations (no kernel touches host memory: runs over TCP too):
 * cudaHostAlloc with Portable, WriteCombined and both, cudaMallocHost, and
 * cudaHostRegister of aligned and unaligned malloc'd memory, private and
 * shared anonymous mmap'd memory. A MAP_SHARED mapping of a file in the
 * working directory cannot be registered (the driver pins for writing, which
 * Linux 6.5+ refuses for a file system that writes pages back: the error is
 * printed); a copy through it still reaches the file. Three
 * streams copy in, run a kernel and copy out, then each hands its result to
 * the next stream through an event for a second round; all checked exactly.
 * Then the errors of double registration and of unregistering memory never
 * registered. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_util.h"

#define N (1 << 18)
#define BYTES (N * sizeof(int))
#define STREAMS 3

__global__ void scale3_add(int *v, int n, int k)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v[i] = 3 * v[i] + k;
}

struct Buffers {
    int *src[STREAMS];  /* round 1 inputs: cudaHostAlloc flavours */
    int *mid[STREAMS];  /* round 1 outputs, round 2 inputs: registered memory */
    int *last[STREAMS]; /* round 2 outputs */
};

/* the working directory: a disk file system, whose shared file pages the
 * kernel will not pin for writing (tmpfs ones it would) */
static char file_path[] = "flyt-host-alloc-XXXXXX";
static int file_fd = -1;
static void *malloc_block, *unaligned_block;

static int *map_file(void)
{
    file_fd = mkstemp(file_path);
    if (file_fd < 0 || ftruncate(file_fd, BYTES) != 0) {
        printf("FAIL cannot create a temporary file\n");
        exit(1);
    }
    void *p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, file_fd, 0);
    if (p == MAP_FAILED) {
        printf("FAIL mmap of the file\n");
        exit(1);
    }
    return (int *)p;
}

static void allocate(Buffers *b)
{
    CHECK(cudaHostAlloc(&b->src[0], BYTES, cudaHostAllocWriteCombined));
    CHECK(cudaHostAlloc(&b->src[1], BYTES, cudaHostAllocPortable));
    CHECK(cudaHostAlloc(&b->src[2], BYTES, cudaHostAllocPortable | cudaHostAllocWriteCombined));

    malloc_block = aligned_alloc(4096, BYTES);
    b->mid[0] = (int *)malloc_block;
    b->mid[1] = map_anonymous(BYTES);
    b->mid[2] = (int *)mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b->mid[2] == MAP_FAILED) {
        printf("FAIL shared anonymous mmap\n");
        exit(1);
    }
    CHECK(cudaHostRegister(b->mid[0], BYTES, cudaHostRegisterPortable));
    CHECK(cudaHostRegister(b->mid[1], BYTES, cudaHostRegisterDefault));
    CHECK(cudaHostRegister(b->mid[2], BYTES, cudaHostRegisterPortable));

    CHECK(cudaHostAlloc(&b->last[0], BYTES, cudaHostAllocDefault));
    unaligned_block = malloc(BYTES + 64);
    b->last[1] = (int *)((char *)unaligned_block + 20); /* not page aligned */
    CHECK(cudaHostRegister(b->last[1], BYTES, cudaHostRegisterDefault));
    CHECK(cudaMallocHost(&b->last[2], BYTES));
}

static int round1(int s, int j) { return 3 * (j + 1000 * s) + s; }
static int round2(int s, int j) { return 3 * round1((s + STREAMS - 1) % STREAMS, j) + 10 + s; }

static void run_streams(Buffers *b)
{
    cudaStream_t streams[STREAMS];
    cudaEvent_t round1_done[STREAMS];
    int *dev[STREAMS];
    for (int s = 0; s < STREAMS; s++) {
        CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&round1_done[s], cudaEventDisableTiming));
        CHECK(cudaMalloc(&dev[s], BYTES));
        for (int j = 0; j < N; j++)
            b->src[s][j] = j + 1000 * s; /* write-combined memory: written, never read */
    }
    for (int s = 0; s < STREAMS; s++) {
        CHECK(cudaMemcpyAsync(dev[s], b->src[s], BYTES, cudaMemcpyHostToDevice, streams[s]));
        scale3_add<<<128, 256, 0, streams[s]>>>(dev[s], N, s);
        CHECK(cudaMemcpyAsync(b->mid[s], dev[s], BYTES, cudaMemcpyDeviceToHost, streams[s]));
        CHECK(cudaEventRecord(round1_done[s], streams[s]));
    }
    /* stream s takes the round-1 result of stream s-1 */
    for (int s = 0; s < STREAMS; s++) {
        int from = (s + STREAMS - 1) % STREAMS;
        CHECK(cudaStreamWaitEvent(streams[s], round1_done[from], 0));
        CHECK(cudaMemcpyAsync(dev[s], b->mid[from], BYTES, cudaMemcpyHostToDevice, streams[s]));
        scale3_add<<<128, 256, 0, streams[s]>>>(dev[s], N, 10 + s);
        CHECK(cudaMemcpyAsync(b->last[s], dev[s], BYTES, cudaMemcpyDeviceToHost, streams[s]));
    }
    for (int s = 0; s < STREAMS; s++)
        CHECK(cudaStreamSynchronize(streams[s]));
    int ready = 1;
    for (int s = 0; s < STREAMS; s++)
        ready &= cudaStreamQuery(streams[s]) == cudaSuccess && cudaEventQuery(round1_done[s]) == cudaSuccess;
    expect(ready, "streams and events complete after synchronising");
    static const char *mid_names[STREAMS] = {"registered aligned malloc", "registered anonymous mmap",
                                             "registered MAP_SHARED anonymous mmap"};
    static const char *last_names[STREAMS] = {"cudaHostAllocDefault", "registered unaligned malloc",
                                              "cudaMallocHost"};
    for (int s = 0; s < STREAMS; s++) {
        int bad1 = 0, bad2 = 0;
        for (int j = 0; j < N; j++) {
            bad1 += b->mid[s][j] != round1(s, j);
            bad2 += b->last[s][j] != round2(s, j);
        }
        char line[160];
        snprintf(line, sizeof line, "stream %d: round 1 into %s", s, mid_names[s]);
        expect(bad1 == 0, line);
        snprintf(line, sizeof line, "stream %d: round 2 from stream %d into %s", s, (s + 2) % 3, last_names[s]);
        expect(bad2 == 0, line);
    }
    for (int s = 0; s < STREAMS; s++) {
        CHECK(cudaFree(dev[s]));
        CHECK(cudaEventDestroy(round1_done[s]));
        CHECK(cudaStreamDestroy(streams[s]));
    }
}

static void check_errors(Buffers *b)
{
    cudaError_t e = cudaHostRegister(b->mid[0], BYTES, cudaHostRegisterDefault);
    printf("registering registered memory again -> %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    static int never[1024];
    e = cudaHostUnregister(never);
    printf("unregistering memory never registered -> %s\n", cudaGetErrorName(e));
    cudaGetLastError();
}

/* Where the kernel keeps shared memory files (stderr only: it depends on
 * the machine's mounts, and says which file systems the driver pins). */
static void note_dev_shm(void)
{
    char path[] = "/dev/shm/flyt-host-alloc-XXXXXX";
    int fd = mkstemp(path);
    void *p = fd >= 0 && ftruncate(fd, 4096) == 0
                  ? mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    if (p != MAP_FAILED) {
        cudaError_t e = cudaHostRegister(p, 4096, cudaHostRegisterDefault);
        fprintf(stderr, "note: cudaHostRegister of a MAP_SHARED /dev/shm file -> %s\n", cudaGetErrorName(e));
        if (e == cudaSuccess)
            cudaHostUnregister(p);
        cudaGetLastError();
        munmap(p, 4096);
    }
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
}

/* A MAP_SHARED file mapping: its registration is refused (printed); a copy
 * into it through CUDA reaches the file. */
static void check_file(const int *from)
{
    int *mapping = map_file();
    cudaError_t e = cudaHostRegister(mapping, BYTES, cudaHostRegisterPortable);
    printf("registering a MAP_SHARED mapping of a file in the working directory -> %s\n",
           cudaGetErrorName(e));
    cudaGetLastError();
    if (e == cudaSuccess)
        CHECK(cudaHostUnregister(mapping));
    int *dev;
    CHECK(cudaMalloc(&dev, BYTES));
    CHECK(cudaMemcpy(dev, from, BYTES, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(mapping, dev, BYTES, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(dev));
    munmap(mapping, BYTES);
    int *back = (int *)malloc(BYTES);
    ssize_t got = pread(file_fd, back, BYTES, 0);
    int bad = got != (ssize_t)BYTES;
    for (int j = 0; !bad && j < N; j++)
        bad += back[j] != round1(2, j);
    expect(bad == 0, "the file behind the MAP_SHARED mapping holds the copied data");
    free(back);
    close(file_fd);
    unlink(file_path);
}

static void release(Buffers *b)
{
    for (int s = 0; s < STREAMS; s++)
        CHECK(cudaFreeHost(b->src[s]));
    CHECK(cudaHostUnregister(b->mid[0]));
    CHECK(cudaHostUnregister(b->mid[1]));
    munmap(b->mid[1], BYTES);
    CHECK(cudaHostUnregister(b->mid[2]));
    munmap(b->mid[2], BYTES);
    free(malloc_block);
    CHECK(cudaFreeHost(b->last[0]));
    CHECK(cudaHostUnregister(b->last[1]));
    free(unaligned_block);
    CHECK(cudaFreeHost(b->last[2]));
}

int main(void)
{
    CHECK(cudaSetDevice(0));
    Buffers b;
    allocate(&b);
    run_streams(&b);
    check_errors(&b);
    check_file(b.mid[2]);
    note_dev_shm();
    release(&b);
    printf("%s\n", failures ? "host_alloc_flags: FAILED" : "host_alloc_flags: all checks passed");
    return failures ? 1 : 0;
}

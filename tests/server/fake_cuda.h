/*
 * A fake CUDA driver over host memory, for running the cuda backend without
 * a GPU (tests/server/test_cuda_faults.c, test_cuda_state.c): the backend is
 * pointed at a table of these functions with flyt_cuda_driver_use.
 *
 * Device addresses come from a fake device address space, a region of host
 * memory of this process that only the fake hands out: cuMemAlloc packs
 * allocations into it as the driver does (512-byte aligned, several in a
 * 2 MiB granule), cuMemAddressReserve honours a fixed address when the range
 * is free there, and freed memory is scribbled over, so a test can tell
 * contents that were written again from contents that were left behind.
 * Every driver object is a malloc'd token, so a leaked one is an ASan leak;
 * `fake_live` counts what is live for the tests' own checks.
 */
#ifndef FLYT_TEST_FAKE_CUDA_H
#define FLYT_TEST_FAKE_CUDA_H

#include "backend_cuda_int.h"

#define FAKE_GRANULE ((uint64_t)2 << 20) /* the fake's VMM granularity */
#define FAKE_HINT_ALIGN ((uint64_t)32 << 20) /* where a reservation's hint is granted */
#define FAKE_FREED   0xddu                /* the byte freed device memory holds */

extern struct fake_live {
    int ctx_refs, streams, events, modules, pools, registered, graphs;
    int allocs;       /* cuMemAlloc / cuMemAllocPitch / cuMemAllocAsync ranges live */
    int reservations; /* cuMemAddressReserve ranges live */
    int handles;      /* cuMemCreate handles not released */
    int mappings;     /* cuMemMap ranges not unmapped */
    int launches;     /* cuLaunchKernelEx calls */
    int globals;      /* cuModuleGetGlobal calls */
    int sticky;       /* what cuStreamQuery answers: a context's sticky error (0: none) */
    int global_shift; /* added to the address cuModuleGetGlobal answers (a global moved) */
    int arrays;       /* cuArray3DCreate arrays live */
    int objs;         /* texture and surface objects live */
    uint64_t obj_base;   /* added to the values cuTexObjectCreate/cuSurfObjectCreate count */
    uint64_t last_param; /* the kernel's parameter at its last launch */
} fake_live;

/* Fills table with the fake driver (every other entry NULL). */
void fake_cuda_table(struct flyt_cu_api *table);
/* The fake kernel "kernel" adds 1 to the first FAKE_KERNEL_BYTES bytes at
 * its one pointer parameter; given a live texture or surface value instead,
 * it does nothing (fake_live.last_param says what it got). */
#define FAKE_KERNEL_BYTES 16
/* Takes [addr, addr + size) of the fake device address space as an
 * allocation the backend does not know (1), so that a reservation there is
 * refused; 0 gives it back. */
void fake_cuda_occupy(uint64_t addr, uint64_t size, int occupy);

/* An in-process session on table: flyt_session_run(cfg) in a thread over a
 * socketpair, then HELLO; returns HELLO's result (rep filled), the client's
 * end of the socket in *fd. fake_session_end closes it and joins the thread. */
struct flyt_server_config;
int  fake_session_begin(const struct flyt_cu_api *table, const struct flyt_server_config *cfg,
                        int *fd, flyt_rep_hello *rep);
void fake_session_end(void);

/* The fake entries the fault injection of test_cuda_faults.c wraps. */
CUresult fake_cuInit(unsigned flags);
CUresult fake_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
CUresult fake_cuCtxSynchronize(void);
CUresult fake_cuMemAlloc(CUdeviceptr *p, size_t n);
CUresult fake_cuMemAllocPitch(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e);
CUresult fake_cuMemFree(CUdeviceptr p);
CUresult fake_cuMemHostRegister(void *p, size_t n, unsigned flags);
CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult fake_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult fake_cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio);
CUresult fake_cuEventCreate(CUevent *e, unsigned flags);
CUresult fake_cuModuleLoadData(CUmodule *m, const void *image);
CUresult fake_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult fake_cuMemPoolCreate(CUmemoryPool *p, const CUmemPoolProps *props);
CUresult fake_cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                                  unsigned long long flags);
CUresult fake_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                          const CUmemAllocationProp *prop, unsigned long long flags);
CUresult fake_cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                       unsigned long long flags);
CUresult fake_cuMemUnmap(CUdeviceptr p, size_t size);
CUresult fake_cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n);

#endif

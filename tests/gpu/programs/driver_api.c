/* Pure driver API, no CUDA runtime (-cudart none): cuInit, device queries,
 * the primary context and a created one, cuModuleLoad of a cubin file that
 * the build put next to this program, cuModuleLoadData of PTX text (JIT),
 * run-time linking (cuLink*: PTX + PTX, PTX + cubin file), the library API,
 * launches with kernelParams and with a packed argument buffer, globals and
 * constants by name, streams, events, async copies and pointer queries. */
#define _GNU_SOURCE /* readlink, clock_gettime, PATH_MAX under -std=c11 */
#include <cuda.h>

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FLYT_TEST_NO_RUNTIME
#include "test_util.h"

static char prog_dir[PATH_MAX];

/* dir of this program + "/" + name */
static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", prog_dir, name);
}

/* Whole file, NUL-terminated (PTX must be a C string). */
static char *read_file(const char *name, size_t *len)
{
    char path[PATH_MAX + 64];
    path_of(path, sizeof path, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("FAIL cannot open %s next to the program\n", name);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        printf("FAIL cannot read %s\n", name);
        exit(1);
    }
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

/* Written by hand: out[i] = i * mul + add for i < n. */
static const char fill_affine_ptx[] =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry fill_affine(\n"
    "    .param .u64 p_out,\n"
    "    .param .u32 p_n,\n"
    "    .param .u32 p_mul,\n"
    "    .param .u32 p_add\n"
    ")\n"
    "{\n"
    "    .reg .pred %p<2>;\n"
    "    .reg .b32 %r<8>;\n"
    "    .reg .b64 %rd<4>;\n"
    "    ld.param.u64 %rd1, [p_out];\n"
    "    ld.param.u32 %r1, [p_n];\n"
    "    ld.param.u32 %r2, [p_mul];\n"
    "    ld.param.u32 %r3, [p_add];\n"
    "    mov.u32 %r4, %ctaid.x;\n"
    "    mov.u32 %r5, %ntid.x;\n"
    "    mov.u32 %r6, %tid.x;\n"
    "    mad.lo.u32 %r4, %r4, %r5, %r6;\n"
    "    setp.ge.u32 %p1, %r4, %r1;\n"
    "    @%p1 bra DONE;\n"
    "    mad.lo.u32 %r7, %r4, %r2, %r3;\n"
    "    cvta.to.global.u64 %rd2, %rd1;\n"
    "    mul.wide.u32 %rd3, %r4, 4;\n"
    "    add.u64 %rd2, %rd2, %rd3;\n"
    "    st.global.u32 [%rd2], %r7;\n"
    "DONE:\n"
    "    ret;\n"
    "}\n";

enum { N = 10000, THREADS = 256 };
static float hx[N], hy[N], hout[N];

static void reset_y(CUdeviceptr dy)
{
    for (int i = 0; i < N; i++)
        hy[i] = (float)(i % 11);
    DRV(cuMemcpyHtoD(dy, hy, sizeof hy));
}

/* Launches scale_add(x, y, N, sel) from fn and checks y == mult * x + y0. */
static int run_scale_add(CUfunction fn, CUdeviceptr dx, CUdeviceptr dy, int sel, float mult,
                         CUstream stream)
{
    int n = N;
    void *args[] = {&dx, &dy, &n, &sel};
    reset_y(dy);
    DRV(cuLaunchKernel(fn, (N + THREADS - 1) / THREADS, 1, 1, THREADS, 1, 1, 0, stream, args, NULL));
    DRV(cuStreamSynchronize(stream));
    DRV(cuMemcpyDtoH(hout, dy, sizeof hout));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += hout[i] != mult * hx[i] + (float)(i % 11);
    return bad == 0;
}

/* Links PTX of driver_api_link_main.cu with driver_api_link_lib as PTX
 * (from memory) or as a cubin (from its file), runs linked_kernel. */
static int run_link(int lib_as_cubin_file, CUdeviceptr dv)
{
    char info[4096] = "", error[4096] = "";
    CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {info, (void *)(size_t)sizeof info, error, (void *)(size_t)sizeof error};
    CUlinkState link;
    DRV(cuLinkCreate(4, opts, vals, &link));
    size_t main_len;
    char *main_ptx = read_file("driver_api_link_main.ptx", &main_len);
    DRV(cuLinkAddData(link, CU_JIT_INPUT_PTX, main_ptx, main_len + 1, "driver_api_link_main.ptx", 0,
                      NULL, NULL));
    char *lib_ptx = NULL;
    CUresult r;
    if (lib_as_cubin_file) {
        char path[PATH_MAX + 64];
        path_of(path, sizeof path, "driver_api_link_lib.cubin");
        r = cuLinkAddFile(link, CU_JIT_INPUT_CUBIN, path, 0, NULL, NULL);
    } else {
        size_t lib_len;
        lib_ptx = read_file("driver_api_link_lib.ptx", &lib_len);
        r = cuLinkAddData(link, CU_JIT_INPUT_PTX, lib_ptx, lib_len + 1, "driver_api_link_lib.ptx", 0,
                          NULL, NULL);
    }
    void *image = NULL;
    size_t image_size = 0;
    if (r == CUDA_SUCCESS)
        r = cuLinkComplete(link, &image, &image_size);
    if (r != CUDA_SUCCESS) {
        const char *name = NULL;
        cuGetErrorName(r, &name);
        printf("link failed: %s\n", name ? name : "?");
        fprintf(stderr, "link error log: %s\n", error);
        DRV(cuLinkDestroy(link));
        return 0;
    }
    /* The image belongs to the link state: load it before destroying that. */
    CUmodule mod;
    DRV(cuModuleLoadData(&mod, image));
    DRV(cuLinkDestroy(link));
    free(main_ptx);
    free(lib_ptx);
    CUfunction fn;
    DRV(cuModuleGetFunction(&fn, mod, "linked_kernel"));
    CUdeviceptr off_addr;
    size_t off_size;
    DRV(cuModuleGetGlobal(&off_addr, &off_size, mod, "link_offset"));
    float off = 0;
    DRV(cuMemcpyDtoH(&off, off_addr, sizeof off));
    for (int i = 0; i < N; i++)
        hy[i] = (float)(i % 13);
    DRV(cuMemcpyHtoD(dv, hy, sizeof hy));
    int n = N;
    void *args[] = {&dv, &n};
    DRV(cuLaunchKernel(fn, (N + THREADS - 1) / THREADS, 1, 1, THREADS, 1, 1, 0, NULL, args, NULL));
    DRV(cuCtxSynchronize());
    DRV(cuMemcpyDtoH(hout, dv, sizeof hout));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += hout[i] != 3.0f * (float)(i % 13) - 1.0f + 0.5f;
    printf("linked (%s): image non-empty: %s, link_offset %.2f (%zu bytes), mismatches %d\n",
           lib_as_cubin_file ? "ptx + cubin file" : "ptx + ptx", image_size > 0 ? "yes" : "no",
           off, off_size, bad);
    DRV(cuModuleUnload(mod));
    return bad == 0 && off == 0.5f && off_size == sizeof(float);
}

int main(void)
{
    const double t0 = now_s();
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        printf("FAIL cannot read /proc/self/exe\n");
        return 1;
    }
    exe[len] = '\0';
    snprintf(prog_dir, sizeof prog_dir, "%s", dirname(exe));

    /* ---- init, device */
    DRV(cuInit(0));
    int version = 0, count = 0, major = 0, minor = 0, sms = 0;
    DRV(cuDriverGetVersion(&version));
    DRV(cuDeviceGetCount(&count));
    CUdevice dev;
    DRV(cuDeviceGet(&dev, 0));
    char name[256];
    DRV(cuDeviceGetName(name, sizeof name, dev));
    DRV(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    DRV(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    DRV(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    size_t total = 0;
    DRV(cuDeviceTotalMem(&total, dev));
    fprintf(stderr, "device 0: %s, %d SMs, %zu MiB, driver %d\n", name, sms, total >> 20, version);
    printf("driver >= 13.0: %s, devices >= 1: %s, compute capability %d.%d\n",
           version >= 13000 ? "yes" : "no", count >= 1 ? "yes" : "no", major, minor);
    expect(version >= 13000 && count >= 1 && sms > 0 && total > 0 && name[0] != '\0',
           "cuInit and device queries");

    /* ---- primary context */
    CUcontext primary, cur = NULL;
    DRV(cuDevicePrimaryCtxRetain(&primary, dev));
    DRV(cuCtxSetCurrent(primary));
    DRV(cuCtxGetCurrent(&cur));
    CUdevice cdev = -1;
    DRV(cuCtxGetDevice(&cdev));
    unsigned int pflags = 0;
    int active = 0;
    DRV(cuDevicePrimaryCtxGetState(dev, &pflags, &active));
    expect(cur == primary && cdev == dev && active == 1, "primary context retained and current");

    /* ---- module from the cubin file */
    char cubin_path[PATH_MAX + 64];
    path_of(cubin_path, sizeof cubin_path, "driver_api_kernels.cubin");
    CUmodule mod;
    DRV(cuModuleLoad(&mod, cubin_path));
    CUfunction scale_add, mixed_args;
    DRV(cuModuleGetFunction(&scale_add, mod, "scale_add"));
    DRV(cuModuleGetFunction(&mixed_args, mod, "mixed_args"));
    CUresult missing = cuModuleGetFunction(&mixed_args, mod, "no_such_kernel");
    const char *missing_name = NULL;
    cuGetErrorName(missing, &missing_name);
    printf("cuModuleGetFunction(no_such_kernel): %s\n", missing_name ? missing_name : "?");
    DRV(cuModuleGetFunction(&mixed_args, mod, "mixed_args"));
    int regs = 0, max_threads = 0;
    DRV(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, scale_add));
    DRV(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, scale_add));
    expect(missing == CUDA_ERROR_NOT_FOUND && regs > 0 && max_threads >= THREADS,
           "cuModuleLoad (cubin file), cuModuleGetFunction, cuFuncGetAttribute");

    CUdeviceptr counter, table;
    size_t counter_size, table_size;
    DRV(cuModuleGetGlobal(&counter, &counter_size, mod, "dev_counter"));
    DRV(cuModuleGetGlobal(&table, &table_size, mod, "scale_table"));
    printf("globals: dev_counter %zu bytes, scale_table %zu bytes\n", counter_size, table_size);

    CUdeviceptr dx, dy;
    DRV(cuMemAlloc(&dx, sizeof hx));
    DRV(cuMemAlloc(&dy, sizeof hy));
    for (int i = 0; i < N; i++)
        hx[i] = (float)(i % 101);
    DRV(cuMemcpyHtoD(dx, hx, sizeof hx));
    DRV(cuMemsetD32(counter, 0, 1));
    int ok = run_scale_add(scale_add, dx, dy, 2, 4.0f, NULL);
    unsigned int threads_counted = 0;
    DRV(cuMemcpyDtoH(&threads_counted, counter, sizeof threads_counted));
    printf("scale_add (cubin): threads counted %u\n", threads_counted);
    expect(ok && threads_counted == N, "cuLaunchKernel with kernelParams, cuMemcpyHtoD/DtoH");

    const float sixteen = 16.0f;
    DRV(cuMemcpyHtoD(table + 3 * sizeof(float), &sixteen, sizeof sixteen));
    expect(run_scale_add(scale_add, dx, dy, 3, 16.0f, NULL), "constant memory written by name");

    /* ---- packed argument buffer (CU_LAUNCH_PARAM_BUFFER_POINTER) */
    struct Packed {
        int a;
        double b;
        char c;
    };
    struct Packed pk = {-123456, 9876543.0, 42};
    CUdeviceptr dout;
    DRV(cuMemAlloc(&dout, 6 * sizeof(long long)));
    /* Laid out by hand with the kernel's parameter alignment: out at 0, c at 8,
     * p at 16 (24 bytes), s at 40, d at 48. */
    unsigned char raw[64];
    memset(raw, 0, sizeof raw);
    size_t off = 0;
    memcpy(raw + off, &dout, sizeof dout);
    off += 8;
    raw[off] = (unsigned char)-5; /* char c at 8 */
    off = 16;                      /* Packed aligned to 8 */
    memcpy(raw + off, &pk, sizeof pk);
    off += sizeof pk;              /* 40 */
    short s = -321;
    memcpy(raw + off, &s, sizeof s);
    off = (off + sizeof s + 7) & ~(size_t)7; /* double aligned to 8: 48 */
    double d = 1e12;
    memcpy(raw + off, &d, sizeof d);
    off += sizeof d;
    size_t raw_size = off;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, raw, CU_LAUNCH_PARAM_BUFFER_SIZE, &raw_size,
                     CU_LAUNCH_PARAM_END};
    DRV(cuLaunchKernel(mixed_args, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
    long long got[6];
    DRV(cuCtxSynchronize());
    DRV(cuMemcpyDtoH(got, dout, sizeof got));
    printf("mixed_args via buffer: %lld %lld %lld %lld %lld %lld\n", got[0], got[1], got[2], got[3],
           got[4], got[5]);
    int extra_ok = got[0] == -5 && got[1] == -123456 && got[2] == 9876543 && got[3] == 42 &&
                   got[4] == -321 && got[5] == 1000000000000LL;
    char c = 7;
    struct Packed p2 = {11, 22.0, 33};
    short s2 = 44;
    double d2 = 55.0;
    void *args2[] = {&dout, &c, &p2, &s2, &d2};
    DRV(cuLaunchKernel(mixed_args, 1, 1, 1, 32, 1, 1, 0, NULL, args2, NULL));
    DRV(cuCtxSynchronize());
    DRV(cuMemcpyDtoH(got, dout, sizeof got));
    printf("mixed_args via kernelParams: %lld %lld %lld %lld %lld %lld\n", got[0], got[1], got[2],
           got[3], got[4], got[5]);
    expect(extra_ok && got[0] == 7 && got[1] == 11 && got[2] == 22 && got[3] == 33 && got[4] == 44 &&
               got[5] == 55,
           "launch with a packed argument buffer and with kernelParams");

    /* ---- PTX text, JIT-compiled by the driver */
    CUmodule jit_mod;
    DRV(cuModuleLoadData(&jit_mod, fill_affine_ptx));
    CUfunction fill;
    DRV(cuModuleGetFunction(&fill, jit_mod, "fill_affine"));
    unsigned int n_u = N, mul = 3, add = 7;
    void *fargs[] = {&dy, &n_u, &mul, &add};
    DRV(cuLaunchKernel(fill, (N + THREADS - 1) / THREADS, 1, 1, THREADS, 1, 1, 0, NULL, fargs, NULL));
    DRV(cuCtxSynchronize());
    unsigned int *uout = (unsigned int *)hout;
    DRV(cuMemcpyDtoH(uout, dy, N * sizeof(unsigned int)));
    int bad = 0;
    for (unsigned int i = 0; i < N; i++)
        bad += uout[i] != i * 3 + 7;
    printf("hand-written PTX fill_affine: mismatches %d\n", bad);
    expect(bad == 0, "cuModuleLoadData of PTX text (JIT)");

    char info[8192] = "", error[8192] = "";
    CUjit_option jopts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_OPTIMIZATION_LEVEL};
    void *jvals[] = {info, (void *)(size_t)sizeof info, error, (void *)(size_t)sizeof error,
                     (void *)(size_t)3};
    char *ptx = read_file("driver_api_kernels.ptx", NULL);
    CUmodule ptx_mod;
    DRV(cuModuleLoadDataEx(&ptx_mod, ptx, 5, jopts, jvals));
    free(ptx);
    CUfunction scale_add_jit;
    DRV(cuModuleGetFunction(&scale_add_jit, ptx_mod, "scale_add"));
    CUdeviceptr counter_jit;
    size_t counter_jit_size;
    DRV(cuModuleGetGlobal(&counter_jit, &counter_jit_size, ptx_mod, "dev_counter"));
    DRV(cuMemsetD32(counter_jit, 0, 1));
    DRV(cuMemsetD32(counter, 0, 1));
    ok = run_scale_add(scale_add_jit, dx, dy, 1, 2.0f, NULL);
    unsigned int c_jit = 0, c_cubin = 0;
    DRV(cuMemcpyDtoH(&c_jit, counter_jit, sizeof c_jit));
    DRV(cuMemcpyDtoH(&c_cubin, counter, sizeof c_cubin));
    printf("scale_add (nvcc PTX, JIT with log buffers): counters jit %u cubin %u, error log empty: %s\n",
           c_jit, c_cubin, error[0] == '\0' ? "yes" : "no");
    expect(ok && c_jit == N && c_cubin == 0 && counter_jit != counter,
           "cuModuleLoadDataEx of PTX: own globals, same results");
    DRV(cuModuleUnload(ptx_mod));
    DRV(cuModuleUnload(jit_mod));

    /* ---- run-time linking */
    expect(run_link(0, dy), "cuLinkCreate/AddData/Complete: PTX + PTX");
    expect(run_link(1, dy), "cuLinkCreate/AddData/AddFile/Complete: PTX + cubin file");

    /* ---- library API, as the CUDA runtime uses it */
    CUlibrary lib;
    DRV(cuLibraryLoadFromFile(&lib, cubin_path, NULL, NULL, 0, NULL, NULL, 0));
    CUkernel kern;
    DRV(cuLibraryGetKernel(&kern, lib, "scale_add"));
    ok = run_scale_add((CUfunction)kern, dx, dy, 0, 1.0f, NULL);
    CUfunction kfn;
    DRV(cuKernelGetFunction(&kfn, kern));
    ok &= run_scale_add(kfn, dx, dy, 2, 4.0f, NULL);
    expect(ok, "cuLibraryLoadFromFile, cuLibraryGetKernel (launched as CUkernel and as CUfunction)");
    DRV(cuLibraryUnload(lib));

    /* ---- stream, events, pinned async copies, memset */
    CUstream stream;
    CUevent e0, e1;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    DRV(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    DRV(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    float *pinned;
    DRV(cuMemAllocHost((void **)&pinned, sizeof hx));
    for (int i = 0; i < N; i++)
        pinned[i] = (float)(i % 29);
    DRV(cuEventRecord(e0, stream));
    DRV(cuMemcpyHtoDAsync(dx, pinned, sizeof hx, stream));
    DRV(cuMemsetD32Async(dy, 0, N, stream)); /* 0.0f */
    int n = N, sel = 2;
    void *sargs[] = {&dx, &dy, &n, &sel};
    DRV(cuLaunchKernel(scale_add, (N + THREADS - 1) / THREADS, 1, 1, THREADS, 1, 1, 0, stream, sargs, NULL));
    DRV(cuMemcpyDtoHAsync(pinned, dy, sizeof hy, stream));
    DRV(cuEventRecord(e1, stream));
    DRV(cuEventSynchronize(e1));
    float ms = -1;
    DRV(cuEventElapsedTime(&ms, e0, e1));
    CUresult q = cuStreamQuery(stream);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += pinned[i] != 4.0f * (float)(i % 29);
    printf("stream: mismatches %d, elapsed >= 0: %s, query after sync: %d\n", bad, ms >= 0 ? "yes" : "no",
           (int)q);
    expect(bad == 0 && ms >= 0 && q == CUDA_SUCCESS, "stream with pinned async copies, memset, events");
    DRV(cuMemcpyDtoD(dx, dy, sizeof hy));
    DRV(cuMemcpyDtoH(hout, dx, sizeof hout));
    expect(memcmp(hout, pinned, sizeof hout) == 0, "cuMemcpyDtoD");
    DRV(cuMemFreeHost(pinned));

    /* ---- stream memory operations, stream attributes, context events */
    DRV(cuMemsetD32(dx, 0, 4));
    DRV(cuStreamWriteValue32(stream, dx, 0x1234u, 0));
    DRV(cuStreamWaitValue32(stream, dx, 0x1234u, CU_STREAM_WAIT_VALUE_EQ));
    DRV(cuStreamWriteValue64(stream, dx + 8, 0x1122334455667788ull, 0));
    CUstreamAttrValue prio_in, prio_out;
    memset(&prio_in, 0, sizeof prio_in);
    memset(&prio_out, 0, sizeof prio_out);
    prio_in.syncPolicy = CU_SYNC_POLICY_YIELD;
    DRV(cuStreamSetAttribute(stream, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &prio_in));
    DRV(cuStreamGetAttribute(stream, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &prio_out));
    DRV(cuCtxRecordEvent(primary, e0));
    DRV(cuCtxWaitEvent(primary, e0));
    DRV(cuStreamSynchronize(stream));
    uint64_t words[2] = {0, 0};
    DRV(cuMemcpyDtoH(words, dx, sizeof words));
    printf("stream memops: %#llx %#llx, sync policy %d\n", (unsigned long long)words[0],
           (unsigned long long)words[1], (int)prio_out.syncPolicy);
    expect((words[0] & 0xffffffffu) == 0x1234u && words[1] == 0x1122334455667788ull &&
               prio_out.syncPolicy == CU_SYNC_POLICY_YIELD,
           "cuStreamWrite/WaitValue, stream attributes, cuCtxRecordEvent/WaitEvent");
    /* what the driver says here is compared with native, whatever it is */
    CUexecAffinityParam aff;
    memset(&aff, 0, sizeof aff);
    CUresult ar = cuCtxGetExecAffinity(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    printf("cuCtxGetExecAffinity: %d, %s\n", (int)ar,
           ar != CUDA_SUCCESS ? "-" : (int)aff.param.smCount.val == sms ? "all SMs" : "fewer SMs");
    DRV(cuEventDestroy(e0));
    DRV(cuEventDestroy(e1));
    DRV(cuStreamDestroy(stream));

    /* ---- memory and pointer queries */
    size_t free_b = 0, total_b = 0, range = 0;
    CUdeviceptr base = 0;
    unsigned int memtype = 0;
    DRV(cuMemGetInfo(&free_b, &total_b));
    DRV(cuMemGetAddressRange(&base, &range, dy + 100));
    DRV(cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dy));
    expect(free_b <= total_b && total_b > 0 && base == dy && range >= sizeof hy &&
               memtype == CU_MEMORYTYPE_DEVICE,
           "cuMemGetInfo, cuMemGetAddressRange, cuPointerGetAttribute");

    /* ---- a created context, pushed and popped around the primary one */
    CUctxCreateParams params;
    memset(&params, 0, sizeof params);
    CUcontext created, popped = NULL;
    DRV(cuCtxCreate(&created, &params, 0, dev));
    DRV(cuCtxGetCurrent(&cur));
    int created_current = cur == created;
    CUdeviceptr cbuf;
    DRV(cuMemAlloc(&cbuf, 4096));
    DRV(cuMemsetD8(cbuf, 0x5a, 4096));
    unsigned char probe[4096];
    DRV(cuMemcpyDtoH(probe, cbuf, sizeof probe));
    int set_ok = probe[0] == 0x5a && probe[4095] == 0x5a;
    DRV(cuCtxPopCurrent(&popped));
    DRV(cuCtxGetCurrent(&cur));
    int back_to_primary = popped == created && cur == primary;
    DRV(cuCtxPushCurrent(created));
    DRV(cuMemFree(cbuf));
    DRV(cuCtxDestroy(created));
    DRV(cuCtxGetCurrent(&cur));
    printf("created context: current after create %s, memset ok %s, pop returns to primary %s, "
           "primary current after destroy %s\n",
           created_current ? "yes" : "no", set_ok ? "yes" : "no", back_to_primary ? "yes" : "no",
           cur == primary ? "yes" : "no");
    expect(created_current && set_ok && back_to_primary && cur == primary,
           "cuCtxCreate / Pop / Push / Destroy");

    DRV(cuMemFree(dx));
    DRV(cuMemFree(dy));
    DRV(cuMemFree(dout));
    DRV(cuModuleUnload(mod));
    DRV(cuDevicePrimaryCtxRelease(dev));

    fprintf(stderr, "driver_api: %.3f s\n", now_s() - t0);
    printf("%s driver_api\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}

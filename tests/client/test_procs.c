/*
 * cuGetProcAddress lookup (src/client/procs.c) over the generated table,
 * linked against the generated weak stubs (test_procs_stubs.c): known
 * answers of NVIDIA's driver, the documented failure cases, and a check of
 * every table entry against libcuda.exports and against the function its
 * address really is.
 * usage: test_procs LIBCUDA_EXPORTS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "procs.h"

#define PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
#define LEGACY CU_GET_PROC_ADDRESS_LEGACY_STREAM

extern const char *flyt_test_last_stub;

/* The stub behind pfn says which exported symbol it is. */
static const char *symbol_behind(void *pfn)
{
    unsigned (*fn)(void);

    flyt_test_last_stub = NULL;
    memcpy(&fn, &pfn, sizeof(fn));
    fn();
    return flyt_test_last_stub;
}

/* name at version with flags must resolve to want. */
static void expect_found(const char *name, int version, unsigned flags, const char *want)
{
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    void *pfn = NULL;
    CUresult rc = flyt_proc_lookup(name, version, flags, &pfn, &st);

    CHECK_EQ(rc, CUDA_SUCCESS, "%s at %d, flags %u: found", name, version, flags);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS, "%s at %d, flags %u: status", name, version, flags);
    CHECK(pfn, "%s at %d, flags %u: an address", name, version, flags);
    CHECK_STR_EQ(symbol_behind(pfn), want, "%s at %d, flags %u: the function", name, version, flags);
}

/* name at version must miss with rc and status, leaving pfn NULL. */
static void expect_miss(const char *name, int version, CUresult want_rc,
                        CUdriverProcAddressQueryResult want_st)
{
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    void *pfn = &st;
    CUresult rc = flyt_proc_lookup(name, version, 0, &pfn, &st);

    const char *shown = name ? name : "(null)";
    CHECK_EQ(rc, want_rc, "%s at %d: missed", shown, version);
    CHECK_EQ(st, want_st, "%s at %d: status", shown, version);
    CHECK_EQ(pfn, NULL, "%s at %d: no address", shown, version);
}

static void known_answers(void)
{
    expect_found("cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
    expect_found("cuMemAlloc", 13000, 0, "cuMemAlloc_v2");
    expect_found("cuMemAlloc", 2000, 0, "cuMemAlloc");
    expect_found("cuMemAlloc", 3010, 0, "cuMemAlloc");
    expect_found("cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2");
    expect_found("cuCtxSynchronize", 12000, 0, "cuCtxSynchronize");
    expect_found("cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2");
    expect_found("cuCtxGetDevice", 12090, 0, "cuCtxGetDevice");
    expect_found("cuCtxCreate", 11040, 0, "cuCtxCreate_v3");
    expect_found("cuCtxCreate", 13000, 0, "cuCtxCreate_v4");
    expect_found("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
    expect_found("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
    expect_found("cuProfilerStart", 13000, 0, "cuProfilerStart");
    expect_found("cuGetExportTable", 13000, 0, "cuGetExportTable");
}

static void stream_flavours(void)
{
    expect_found("cuMemcpy", 13000, PTDS, "cuMemcpy_ptds");
    expect_found("cuMemcpy", 13000, 0, "cuMemcpy");
    expect_found("cuMemcpy", 13000, LEGACY, "cuMemcpy");
    expect_found("cuMemcpy", 13000, LEGACY | PTDS, "cuMemcpy");
    expect_found("cuMemcpy", 6050, PTDS, "cuMemcpy"); /* no per-thread yet */
    expect_found("cuStreamQuery", 13000, PTDS, "cuStreamQuery_ptsz");
    expect_found("cuStreamQuery", 13000, 0, "cuStreamQuery");
    expect_found("cuMemcpyHtoD", 13000, PTDS, "cuMemcpyHtoD_v2_ptds");
    expect_found("cuMemcpyHtoD", 13000, 0, "cuMemcpyHtoD_v2");
    expect_found("cuStreamBeginCapture", 10000, PTDS, "cuStreamBeginCapture_ptsz");
    expect_found("cuStreamBeginCapture", 13000, PTDS, "cuStreamBeginCapture_v2_ptsz");
    expect_found("cuStreamBeginCapture", 13000, 0, "cuStreamBeginCapture_v2");
    expect_found("cuCtxSynchronize", 13000, PTDS, "cuCtxSynchronize_v2"); /* none */
}

static void failures_as_documented(void)
{
    void *pfn = &pfn;

    /* as the H100's driver 580 answers (tests/gpu/probes/procaddr_probe.c) */
    expect_miss("cuNoSuchFunction", 13000, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    expect_miss("", 13000, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    expect_miss("cuMemAlloc_v2", 13000, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    expect_miss("cuMemAlloc", 1000, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    expect_miss("cuCtxGetId", 11080, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    expect_miss(NULL, 13000, CUDA_ERROR_INVALID_VALUE, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CHECK_EQ(flyt_proc_lookup("cuMemAlloc", 13000, 0, NULL, NULL), CUDA_ERROR_INVALID_VALUE,
             "a NULL pfn is refused");
    CHECK_EQ(flyt_proc_lookup("cuMemAlloc", 13000, 0, &pfn, NULL), CUDA_SUCCESS,
             "a NULL status is accepted");
    CHECK(pfn, "a NULL status is accepted");
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = calloc(1, (size_t)n + 3);
        if (buf && fread(buf + 1, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    if (buf)
        buf[0] = '\n'; /* every name is then "\nNAME\n" */
    if (buf && buf[strlen(buf) - 1] != '\n')
        buf[strlen(buf)] = '\n';
    return buf;
}

static int listed(const char *exports, const char *sym)
{
    char key[256];

    snprintf(key, sizeof(key), "\n%s\n", sym);
    return strstr(exports, key) != NULL;
}

static int in_order(const struct flyt_proc *a, const struct flyt_proc *b)
{
    int c = strcmp(a->name, b->name);

    if (c != 0)
        return c < 0;
    if (a->version != b->version)
        return a->version < b->version;
    return a->per_thread < b->per_thread;
}

/* Every entry: sorted, listed in libcuda.exports, and its address is the
 * function its symbol names. */
static void whole_table(const char *exports_path)
{
    char *exports = read_file(exports_path);
    size_t n, i, unordered = 0, unlisted = 0, elsewhere = 0;
    const struct flyt_proc *t = flyt_proc_table(&n);

    CHECK(exports, "read %s", exports_path);
    CHECK_GE(n, 600, "the table has %zu entries", n);
    for (i = 0; i < n; i++) {
        const char *behind = symbol_behind(t[i].fn);
        if (i > 0 && !in_order(&t[i - 1], &t[i]) && ++unordered)
            printf("  out of order: %s (%d)\n", t[i].name, t[i].version);
        if (!listed(exports, t[i].symbol) && ++unlisted)
            printf("  not in libcuda.exports: %s\n", t[i].symbol);
        if ((!behind || strcmp(behind, t[i].symbol) != 0) && ++elsewhere)
            printf("  address is another function: %s (%d)\n", t[i].symbol, t[i].version);
    }
    free(exports);
    CHECK_EQ(unordered, 0, "the table is sorted");
    CHECK_EQ(unlisted, 0, "every entry's symbol is in libcuda.exports");
    CHECK_EQ(elsewhere, 0, "every entry's address is the function its symbol names");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s LIBCUDA_EXPORTS\n", argv[0]);
        return 2;
    }
    known_answers();
    stream_flavours();
    failures_as_documented();
    whole_table(argv[1]);
    return check_done();
}

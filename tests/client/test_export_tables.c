/*
 * The hidden export tables and context-local storage, linked alone with a
 * fake of the public driver functions they use (below): table shapes,
 * unknown UUIDs, context-local storage, the tools slots, MD2 (RFC 1319) and
 * the integrity answer against answers NVIDIA's driver gave.
 */
#include "ctx_storage.h"
#include "export_tables.h"
#include "check.h"
#include "flyt_client_table.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the fake driver ---- */

#define PRIMARY ((CUcontext)(uintptr_t)0x1000)
#define OTHER ((CUcontext)(uintptr_t)0x2000)
#define FAKE_MODULE ((CUmodule)(uintptr_t)0x3000)

static _Thread_local CUcontext fake_current;
static int fake_devices = 1;
static int primary_refs;
static const char *const fake_names[] = {"kone", "ktwo", "kthree"};

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    *pctx = fake_current;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    primary_refs++;
    *pctx = PRIMARY;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    if (dev != 0 || primary_refs == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    primary_refs--;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    *id = (uintptr_t)ctx >> 12;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
    if (mod != FAKE_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    *count = 3;
    return CUDA_SUCCESS;
}

CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int n, CUmodule mod)
{
    if (mod != FAKE_MODULE || n < 3)
        return CUDA_ERROR_INVALID_VALUE;
    for (uintptr_t i = 0; i < 3; i++)
        functions[i] = (CUfunction)(0x4000 + i);
    return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char **name, CUfunction f)
{
    *name = fake_names[(uintptr_t)f - 0x4000];
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version)
{
    *version = 13000;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    *count = fake_devices;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    *dev = ordinal;
    return CUDA_SUCCESS;
}

/* The UUID NVIDIA's driver reported for the H100 the known answers came from. */
static const uint8_t h100_uuid[16] = {0x21, 0x29, 0x06, 0xca, 0x9d, 0xdd, 0x4d, 0xf0,
                                      0x99, 0x87, 0x1a, 0x09, 0xc6, 0xdb, 0x7f, 0xca};

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    memcpy(uuid->bytes, h100_uuid, 16);
    uuid->bytes[15] = (char)(uuid->bytes[15] + dev);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0x40 * dev; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 6; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

/* Streams: the unique id of a stream is its value, the legacy one's 1,
 * the calling thread's default stream 77. */
CUresult cuStreamGetId(CUstream s, unsigned long long *id)
{
    *id = s == NULL ? 0 : s == CU_STREAM_PER_THREAD ? 77 : (unsigned long long)(uintptr_t)s;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetId_ptsz(CUstream s, unsigned long long *id);
CUresult cuStreamGetId_ptsz(CUstream s, unsigned long long *id)
{
    return cuStreamGetId(s == NULL ? CU_STREAM_PER_THREAD : s, id);
}

CUresult cuStreamGetFlags(CUstream s, unsigned int *flags)
{
    *flags = (uintptr_t)s == 0x500 ? CU_STREAM_NON_BLOCKING : 0;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice_v2(CUdevice *dev, CUcontext ctx)
{
    *dev = ctx == OTHER ? 1 : 0;
    return CUDA_SUCCESS;
}

/* Functions: cluster attributes read back what was set. */
static int fake_func_attrs[CU_FUNC_ATTRIBUTE_MAX];

CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int value)
{
    (void)f;
    fake_func_attrs[attr] = value;
    return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attr, CUfunction f)
{
    (void)f;
    *value = fake_func_attrs[attr];
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialClusterSize(int *size, CUfunction f, const CUlaunchConfig *cfg)
{
    (void)f;
    *size = cfg->blockDimX <= 256 ? 16 : 8;
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveClusters(int *count, CUfunction f, const CUlaunchConfig *cfg)
{
    (void)f;
    *count = cfg->numAttrs == 1 ? 120 / (int)cfg->attrs[0].value.clusterDim.x : -1;
    return CUDA_SUCCESS;
}

/* Flyt's own table's entry points (the client's, in the library) */
void flyt_tool_scope(int entering) { (void)entering; }

CUresult flyt_tool_mem_info(CUdevice dev, size_t *free_bytes, size_t *total_bytes)
{
    (void)dev, (void)free_bytes, (void)total_bytes;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- helpers ---- */

static CUuuid uuid_of(const char *hex)
{
    CUuuid u;
    for (int i = 0; i < 16; i++) {
        unsigned v = 0;
        sscanf(hex + 2 * i, "%2x", &v);
        u.bytes[i] = (char)v;
    }
    return u;
}

static void *const *table_of(const char *hex)
{
    CUuuid u = uuid_of(hex);
    const void *t = NULL;
    CHECK_EQ(flyt_export_table(&t, &u), CUDA_SUCCESS, "flyt_export_table(&t, &u) == CUDA_SUCCESS");
    CHECK_NE(t, NULL, "t != NULL");
    return (void *const *)t;
}

#define CUDART "6bd5fb6c5bf4e74a8987d93912fd9df9"
#define HOOKS "a094798c2e742e7493f20800200c0a66"
#define TLS "42d85a8123f6cb478298f6e78a3aecdc"
#define CLS "c693336e1121df11a8c368f355d89593"
#define CHECKS "263e88607cd2614392f6bbd5006dfa7e"
#define INTEGRITY "d4082055bde6704b8d34ba123c66e1f2"
#define TOOLS_CTX "21318c60971432488ca641ff7324c8f2"
#define TOOLS_MODULE "6e163fbeb958444d835ce182aff1991e"

/* Runs fn with stderr going to a file; returns what it wrote (static). */
static const char *stderr_of(void (*fn)(void))
{
    static char text[4096];
    FILE *f = tmpfile();
    int saved = dup(STDERR_FILENO);
    fflush(stderr);
    dup2(fileno(f), STDERR_FILENO);
    fn();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* ---- table shapes, as NVIDIA's driver 580 serves them ---- */

/* slots: total entries, slot 0 included; nulls: the slots left NULL. */
static void check_shape(const char *hex, unsigned slots, const int *nulls, int null_count)
{
    void *const *t = table_of(hex);
    CHECK_EQ((uintptr_t)t[0], slots * sizeof(void *), "(uintptr_t)t[0] == slots * sizeof(void *)");
    for (unsigned i = 1; i < slots; i++) {
        int null = 0;
        for (int k = 0; k < null_count; k++)
            null |= nulls[k] == (int)i;
        CHECK_EQ((t[i] == NULL), null, "(t[i] == NULL) == null");
    }
}

static void test_shapes(void)
{
    check_shape(CUDART, 13, (const int[]){10}, 1);
    check_shape(HOOKS, 7, NULL, 0);
    check_shape(TLS, 3, NULL, 0);
    check_shape(CHECKS, 15, NULL, 0);
    check_shape(INTEGRITY, 3, NULL, 0);
    check_shape(TOOLS_CTX, 95, (const int[]){91}, 1);
    check_shape(TOOLS_MODULE, 99, (const int[]){93}, 1);
    /* context-local storage: three functions, then NULL, no size */
    void *const *cls = table_of(CLS);
    CHECK_EQ(cls[0], (void *)flyt_ctx_storage_put, "cls[0] == (void *)flyt_ctx_storage_put");
    CHECK_EQ(cls[1], (void *)flyt_ctx_storage_delete, "cls[1] == (void *)flyt_ctx_storage_delete");
    CHECK_EQ(cls[2], (void *)flyt_ctx_storage_get, "cls[2] == (void *)flyt_ctx_storage_get");
    CHECK_EQ(cls[3], NULL, "cls[3] == NULL");
    /* Flyt's own: its size, "flyt", then what Flyt's NVML calls */
    const CUuuid flyt_id = {FLYT_CLIENT_MARKER_UUID};
    const void *const *own = NULL;
    CHECK_EQ(flyt_export_table((const void **)&own, &flyt_id), CUDA_SUCCESS, "Flyt's own table");
    CHECK(own && (uintptr_t)own[FLYT_CLIENT_TABLE_SIZE] == FLYT_CLIENT_TABLE_SLOTS * sizeof(void *) &&
              strcmp(own[FLYT_CLIENT_TABLE_NAME], "flyt") == 0 &&
              own[FLYT_CLIENT_TABLE_SCOPE] == (const void *)flyt_tool_scope &&
              own[FLYT_CLIENT_TABLE_MEM_INFO] == (const void *)flyt_tool_mem_info,
          "Flyt's own table: size, name, tool scope, memory without a context");
}

/* ---- unknown UUIDs ---- */

static void ask_unknown_twice(void)
{
    CUuuid u = uuid_of("00112233445566778899aabbccddeeff");
    const void *t = (const void *)&u;
    CHECK_EQ(flyt_export_table(&t, &u), CUDA_ERROR_INVALID_VALUE,
             "flyt_export_table(&t, &u) == CUDA_ERROR_INVALID_VALUE");
    CHECK_EQ(t, NULL, "t == NULL");
    CHECK_EQ(flyt_export_table(&t, &u), CUDA_ERROR_INVALID_VALUE,
             "flyt_export_table(&t, &u) == CUDA_ERROR_INVALID_VALUE");
    CUuuid f8 = uuid_of("f8cff95121468b4eb9e2fb469e7c0dd9");
    CHECK_EQ(flyt_export_table(&t, &f8), CUDA_ERROR_INVALID_VALUE,
             "flyt_export_table(&t, &f8) == CUDA_ERROR_INVALID_VALUE");
    CHECK_EQ(flyt_export_table(NULL, &u), CUDA_ERROR_INVALID_VALUE,
             "flyt_export_table(NULL, &u) == CUDA_ERROR_INVALID_VALUE");
}

static void test_unknown(void)
{
    const char *said = stderr_of(ask_unknown_twice);
    CHECK_EQ(count_lines(said), 1, "count_lines(said) == 1"); /* once per UUID; f8cff951 quietly */
    CHECK_NE(strstr(said, "00112233-4455-6677-8899-aabbccddeeff"), NULL,
             "strstr(said, \"00112233-4455-6677-8899-aabbccddeeff\") != NULL");
}

/* ---- context-local storage ---- */

struct dtor_call {
    CUcontext ctx;
    void *key, *value;
};
static struct dtor_call dtor_calls[8];
static int dtor_count;

static void record_dtor(CUcontext ctx, void *key, void *value)
{
    dtor_calls[dtor_count++] = (struct dtor_call){ctx, key, value};
    /* the store is usable from a dtor, and the entry is already gone */
    void *v;
    CHECK_EQ(flyt_ctx_storage_get(&v, ctx, key), CUDA_ERROR_INVALID_HANDLE,
             "flyt_ctx_storage_get(&v, ctx, key) == CUDA_ERROR_INVALID_HANDLE");
}

#define K(n) ((void *)(uintptr_t)(n))

static void test_cls(void)
{
    void *v = NULL;
    fake_current = NULL;
    CHECK_EQ(flyt_ctx_storage_get(&v, NULL, K(1)), CUDA_ERROR_INVALID_CONTEXT,
             "flyt_ctx_storage_get(&v, NULL, K(1)) == CUDA_ERROR_INVALID_CONTEXT");
    CHECK_EQ(flyt_ctx_storage_put(NULL, K(1), K(2), NULL), CUDA_ERROR_INVALID_CONTEXT,
             "flyt_ctx_storage_put(NULL, K(1), K(2), NULL) == CUDA_ERROR_INVALID_CONTEXT");
    CHECK_EQ(flyt_ctx_storage_put(OTHER, K(1), K(11), record_dtor), CUDA_SUCCESS,
             "flyt_ctx_storage_put(OTHER, K(1), K(11), record_dtor) == CUDA_SUCCESS");

    fake_current = PRIMARY;
    CHECK_EQ(flyt_ctx_storage_get(&v, NULL, K(1)), CUDA_ERROR_INVALID_HANDLE,
             "flyt_ctx_storage_get(&v, NULL, K(1)) == CUDA_ERROR_INVALID_HANDLE");
    CHECK_EQ(flyt_ctx_storage_put(NULL, K(1), K(21), record_dtor), CUDA_SUCCESS,
             "flyt_ctx_storage_put(NULL, K(1), K(21), record_dtor) == CUDA_SUCCESS");
    CHECK_EQ(flyt_ctx_storage_put(PRIMARY, K(1), K(22), record_dtor), CUDA_ERROR_INVALID_HANDLE,
             "flyt_ctx_storage_put(PRIMARY, K(1), K(22), record_dtor) == CUDA_ERROR_INVALID_HANDLE");
    CHECK_EQ(flyt_ctx_storage_get(&v, NULL, K(1)), CUDA_SUCCESS,
             "flyt_ctx_storage_get(&v, NULL, K(1)) == CUDA_SUCCESS");
    CHECK_EQ(v, K(21), "v == K(21)");
    CHECK_EQ(flyt_ctx_storage_get(&v, (CUcontext)(uintptr_t)-1, K(1)), CUDA_SUCCESS,
             "flyt_ctx_storage_get(&v, (CUcontext)(uintptr_t)-1, K(1)) == CUDA_SUCCESS");
    CHECK_EQ(v, K(21), "v == K(21)");
    CHECK_EQ(flyt_ctx_storage_get(&v, PRIMARY, K(1)), CUDA_SUCCESS,
             "flyt_ctx_storage_get(&v, PRIMARY, K(1)) == CUDA_SUCCESS");
    CHECK_EQ(v, K(21), "v == K(21)");
    CHECK_EQ(flyt_ctx_storage_get(&v, OTHER, K(1)), CUDA_SUCCESS,
             "flyt_ctx_storage_get(&v, OTHER, K(1)) == CUDA_SUCCESS");
    CHECK_EQ(v, K(11), "v == K(11)");
    CHECK_EQ(flyt_ctx_storage_get(NULL, PRIMARY, K(1)), CUDA_ERROR_INVALID_VALUE,
             "flyt_ctx_storage_get(NULL, PRIMARY, K(1)) == CUDA_ERROR_INVALID_VALUE");

    CHECK_EQ(flyt_ctx_storage_put(PRIMARY, K(2), K(23), record_dtor), CUDA_SUCCESS,
             "flyt_ctx_storage_put(PRIMARY, K(2), K(23), record_dtor) == CUDA_SUCCESS");
    CHECK_EQ(flyt_ctx_storage_put(PRIMARY, K(3), K(24), NULL), CUDA_SUCCESS,
             "flyt_ctx_storage_put(PRIMARY, K(3), K(24), NULL) == CUDA_SUCCESS");
    CHECK_EQ(flyt_ctx_storage_delete(NULL, K(2)), CUDA_SUCCESS,
             "flyt_ctx_storage_delete(NULL, K(2)) == CUDA_SUCCESS");
    CHECK_EQ(flyt_ctx_storage_get(&v, PRIMARY, K(2)), CUDA_ERROR_INVALID_HANDLE,
             "flyt_ctx_storage_get(&v, PRIMARY, K(2)) == CUDA_ERROR_INVALID_HANDLE");
    CHECK_EQ(flyt_ctx_storage_delete(PRIMARY, K(2)), CUDA_ERROR_INVALID_HANDLE,
             "flyt_ctx_storage_delete(PRIMARY, K(2)) == CUDA_ERROR_INVALID_HANDLE");

    /* only entries still there and with a dtor are destroyed, once */
    dtor_count = 0;
    flyt_ctx_storage_drop(PRIMARY);
    CHECK_EQ(dtor_count, 1, "dtor_count == 1");
    CHECK_EQ(dtor_calls[0].ctx, PRIMARY, "dtor_calls[0].ctx == PRIMARY");
    CHECK_EQ(dtor_calls[0].key, K(1), "dtor_calls[0].key == K(1)");
    CHECK_EQ(dtor_calls[0].value, K(21), "dtor_calls[0].value == K(21)");
    CHECK_EQ(flyt_ctx_storage_get(&v, PRIMARY, K(3)), CUDA_ERROR_INVALID_HANDLE,
             "flyt_ctx_storage_get(&v, PRIMARY, K(3)) == CUDA_ERROR_INVALID_HANDLE");
    flyt_ctx_storage_drop(PRIMARY);
    CHECK_EQ(dtor_count, 1, "dtor_count == 1");
    CHECK_EQ(flyt_ctx_storage_get(&v, OTHER, K(1)), CUDA_SUCCESS,
             "flyt_ctx_storage_get(&v, OTHER, K(1)) == CUDA_SUCCESS");
    CHECK_EQ(v, K(11), "v == K(11)");
    flyt_ctx_storage_drop(OTHER);
    CHECK_EQ(dtor_count, 2, "dtor_count == 2");
    CHECK_EQ(dtor_calls[1].ctx, OTHER, "dtor_calls[1].ctx == OTHER");
    CHECK_EQ(dtor_calls[1].value, K(11), "dtor_calls[1].value == K(11)");
    fake_current = NULL;
}

/* Each thread sees its own current context's values. */
static void *cls_thread(void *arg)
{
    CUcontext mine = arg;
    fake_current = mine;
    /* keys of its own: two threads share each context, and a key is put once */
    static atomic_int threads;
    uintptr_t base = 100000u * (uintptr_t)(1 + atomic_fetch_add(&threads, 1));
    for (uintptr_t i = 0; i < 2000; i++) {
        void *v = NULL;
        if (flyt_ctx_storage_get(&v, NULL, K(7)) != CUDA_SUCCESS || v != (void *)mine)
            return K(1);
        if (i % 100 == 0) { /* writers alongside the readers */
            if (flyt_ctx_storage_put(NULL, K(base + i), K(i), NULL) != CUDA_SUCCESS ||
                flyt_ctx_storage_delete(NULL, K(base + i)) != CUDA_SUCCESS)
                return K(1);
        }
    }
    return NULL;
}

static void test_cls_threads(void)
{
    CHECK_EQ(flyt_ctx_storage_put(PRIMARY, K(7), (void *)PRIMARY, NULL), CUDA_SUCCESS,
             "flyt_ctx_storage_put(PRIMARY, K(7), (void *)PRIMARY, NULL) == CUDA_SUCCESS");
    CHECK_EQ(flyt_ctx_storage_put(OTHER, K(7), (void *)OTHER, NULL), CUDA_SUCCESS,
             "flyt_ctx_storage_put(OTHER, K(7), (void *)OTHER, NULL) == CUDA_SUCCESS");
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, cls_thread, i % 2 ? OTHER : PRIMARY);
    for (int i = 0; i < 4; i++) {
        void *bad = NULL;
        pthread_join(t[i], &bad);
        CHECK_EQ(bad, NULL, "bad == NULL");
    }
    flyt_ctx_storage_drop(PRIMARY);
    flyt_ctx_storage_drop(OTHER);
}

/* ---- the other known slots ---- */

static struct {
    void *opaque;
    CUfunction fn[4];
    const char *name[4];
    int n;
} seen;

static void seen_function(void *opaque, CUfunction fn, const char *name)
{
    seen.opaque = opaque;
    if (seen.n < 4) {
        seen.fn[seen.n] = fn;
        seen.name[seen.n] = name;
    }
    seen.n++;
}

static void test_slots(void)
{
    void *const *cudart = table_of(CUDART);
    CUcontext ctx = NULL;
    /* the handle, without a reference: as NVIDIA's driver */
    primary_refs = 0;
    CHECK_EQ(((CUresult(*)(CUcontext *, CUdevice))cudart[2])(&ctx, 0), CUDA_SUCCESS,
             "((CUresult(*)(CUcontext *, CUdevice))cudart[2])(&ctx, 0) == CUDA_SUCCESS");
    CHECK_EQ(ctx, PRIMARY, "ctx == PRIMARY");
    CHECK_EQ(primary_refs, 0, "primary_refs == 0");
    CHECK_EQ(((CUresult(*)(CUcontext *, CUdevice))cudart[2])(&ctx, 1), CUDA_ERROR_INVALID_DEVICE,
             "((CUresult(*)(CUcontext *, CUdevice))cudart[2])(&ctx, 1) == CUDA_ERROR_INVALID_DEVICE");
    CHECK_EQ(((CUresult(*)(void))cudart[12])(), CUDA_SUCCESS,
             "((CUresult(*)(void))cudart[12])() == CUDA_SUCCESS");

    void *const *hooks = table_of(HOOKS);
    void *area = NULL;
    size_t size = 0;
    ((void (*)(void **, size_t *))hooks[2])(&area, &size);
    CHECK_NE(area, NULL, "area != NULL");
    CHECK_EQ(size, 1024, "size == 1024");
    ((void (*)(void **, size_t *))hooks[6])(&area, &size);
    CHECK_NE(area, NULL, "area != NULL");
    CHECK_EQ(size, 14, "size == 14");

    void *const *tls = table_of(TLS);
    fake_current = OTHER;
    ctx = NULL;
    CHECK_EQ(((CUresult(*)(CUcontext *))tls[2])(&ctx), CUDA_SUCCESS,
             "((CUresult(*)(CUcontext *))tls[2])(&ctx) == CUDA_SUCCESS");
    CHECK_EQ(ctx, OTHER, "ctx == OTHER");
    fake_current = NULL;
    CHECK_EQ(((CUresult(*)(CUcontext *))tls[2])(&ctx), CUDA_SUCCESS,
             "((CUresult(*)(CUcontext *))tls[2])(&ctx) == CUDA_SUCCESS");
    CHECK_EQ(ctx, NULL, "ctx == NULL");

    void *const *checks = table_of(CHECKS);
    uint32_t flags = 5;
    void *extra = K(9);
    CHECK_EQ(((CUresult(*)(CUcontext, uint32_t *, void **))checks[2])(PRIMARY, &flags, &extra), CUDA_SUCCESS,
             "((CUresult(*)(CUcontext, uint32_t *, void **))checks[2])(PRIMARY, &flags, &extra) == CUDA_SUCCESS");
    CHECK_EQ(flags, 0, "flags == 0");
    CHECK_EQ(extra, K(9), "extra == K(9)");

    void *const *tctx = table_of(TOOLS_CTX);
    uint64_t id = 99;
    CHECK_EQ(((CUresult(*)(CUcontext, uint64_t *))tctx[4])(OTHER, &id), CUDA_SUCCESS,
             "((CUresult(*)(CUcontext, uint64_t *))tctx[4])(OTHER, &id) == CUDA_SUCCESS");
    CHECK_EQ(id, 2, "id == 2");
    CHECK_EQ(((CUresult(*)(CUcontext, uint64_t *))tctx[4])(NULL, &id), CUDA_SUCCESS,
             "((CUresult(*)(CUcontext, uint64_t *))tctx[4])(NULL, &id) == CUDA_SUCCESS");
    CHECK_EQ(id, 0, "id == 0");

    /* stream handles: one per stream, found again by their unique ids */
    typedef CUresult (*handle_fn)(CUcontext, CUstream, void **, uint8_t);
    typedef CUresult (*id_fn)(CUcontext, void *, uint64_t *);
    void *h_null = NULL, *h_legacy = NULL, *h_ptds = NULL, *h_ptds2 = NULL, *h_s = NULL, *h_s2 = NULL;
    CHECK_EQ(((handle_fn)tctx[51])(PRIMARY, NULL, &h_null, 0), CUDA_SUCCESS,
             "((handle_fn)tctx[51])(PRIMARY, NULL, &h_null, 0) == CUDA_SUCCESS");
    CHECK_NE(h_null, NULL, "h_null != NULL");
    CHECK_EQ(((handle_fn)tctx[51])(PRIMARY, CU_STREAM_LEGACY, &h_legacy, 0), CUDA_SUCCESS,
             "((handle_fn)tctx[51])(PRIMARY, CU_STREAM_LEGACY, &h_legacy, 0) == CUDA_SUCCESS");
    CHECK_EQ(h_legacy, h_null, "h_legacy == h_null"); /* two names of the legacy stream */
    CHECK_EQ(((handle_fn)tctx[51])(PRIMARY, NULL, &h_ptds, 1), CUDA_SUCCESS,
             "((handle_fn)tctx[51])(PRIMARY, NULL, &h_ptds, 1) == CUDA_SUCCESS");
    CHECK_EQ(((handle_fn)tctx[51])(PRIMARY, CU_STREAM_PER_THREAD, &h_ptds2, 0), CUDA_SUCCESS,
             "((handle_fn)tctx[51])(PRIMARY, CU_STREAM_PER_THREAD, &h_ptds2, 0) == CUDA_SUCCESS");
    CHECK_EQ(h_ptds, h_ptds2, "h_ptds == h_ptds2");
    CHECK_NE(h_ptds, h_null, "h_ptds != h_null");
    CHECK_EQ(((handle_fn)tctx[51])(PRIMARY, (CUstream)0x500, &h_s, 0), CUDA_SUCCESS,
             "((handle_fn)tctx[51])(PRIMARY, (CUstream)0x500, &h_s, 0) == CUDA_SUCCESS");
    CHECK_EQ(((handle_fn)tctx[51])(PRIMARY, (CUstream)0x500, &h_s2, 1), CUDA_SUCCESS,
             "((handle_fn)tctx[51])(PRIMARY, (CUstream)0x500, &h_s2, 1) == CUDA_SUCCESS");
    CHECK_EQ(h_s2, h_s, "h_s2 == h_s");
    CHECK_EQ(((handle_fn)tctx[51])(PRIMARY, NULL, NULL, 0), CUDA_ERROR_INVALID_VALUE,
             "((handle_fn)tctx[51])(PRIMARY, NULL, NULL, 0) == CUDA_ERROR_INVALID_VALUE");
    id = 0;
    CHECK_EQ(((id_fn)tctx[39])(PRIMARY, h_s, &id), CUDA_SUCCESS,
             "((id_fn)tctx[39])(PRIMARY, h_s, &id) == CUDA_SUCCESS");
    CHECK_EQ(id, 0x500, "id == 0x500");
    CHECK_EQ(((id_fn)tctx[39])(PRIMARY, h_null, &id), CUDA_SUCCESS,
             "((id_fn)tctx[39])(PRIMARY, h_null, &id) == CUDA_SUCCESS");
    CHECK_EQ(id, 1, "id == 1");
    CHECK_EQ(((id_fn)tctx[39])(PRIMARY, h_ptds, &id), CUDA_SUCCESS,
             "((id_fn)tctx[39])(PRIMARY, h_ptds, &id) == CUDA_SUCCESS");
    CHECK_EQ(id, 77, "id == 77");
    CHECK_EQ(((id_fn)tctx[39])(PRIMARY, K(1), &id), CUDA_ERROR_INVALID_HANDLE,
             "((id_fn)tctx[39])(PRIMARY, K(1), &id) == CUDA_ERROR_INVALID_HANDLE");
    CUstream pub = NULL;
    CHECK_EQ(((CUresult(*)(void *, CUstream *))tctx[16])(h_s, &pub), CUDA_SUCCESS,
             "((CUresult(*)(void *, CUstream *))tctx[16])(h_s, &pub) == CUDA_SUCCESS");
    CHECK_EQ(pub, (CUstream)0x500, "pub == (CUstream)0x500");
    uint8_t yes = 9;
    CHECK_EQ(((CUresult(*)(void *, uint8_t *))tctx[32])(h_s, &yes), CUDA_SUCCESS,
             "((CUresult(*)(void *, uint8_t *))tctx[32])(h_s, &yes) == CUDA_SUCCESS");
    CHECK_EQ(yes, 1, "yes == 1");
    CHECK_EQ(((CUresult(*)(CUcontext, void *, uint8_t *))tctx[12])(PRIMARY, h_null, &yes), CUDA_SUCCESS,
             "((CUresult(*)(CUcontext, void *, uint8_t *))tctx[12])(PRIMARY, h_null, &yes) == CUDA_SUCCESS");
    CHECK_EQ(yes, 1, "yes == 1");
    uint32_t device = 9;
    CHECK_EQ(((CUresult(*)(CUcontext, uint32_t *))tctx[3])(OTHER, &device), CUDA_SUCCESS,
             "((CUresult(*)(CUcontext, uint32_t *))tctx[3])(OTHER, &device) == CUDA_SUCCESS");
    CHECK_EQ(device, 1, "device == 1");

    /* the cluster prototype table: its controls are the public attributes */
    void *const *cl = table_of("1734dc26800d47458726c0f1e7dd8bca");
    CHECK_NE(cl, NULL, "cl != NULL");
    CHECK_EQ((uintptr_t)cl[0], 17 * sizeof(void *), "(uintptr_t)cl[0] == 17 * sizeof(void *)");
    CUfunction fn = (CUfunction)0x4000;
    int x = 0, y = 0, z = 0, n = 0;
    CHECK_EQ(((CUresult(*)(CUfunction, int, int, int))cl[1])(fn, 2, 1, 1), CUDA_SUCCESS,
             "((CUresult(*)(CUfunction, int, int, int))cl[1])(fn, 2, 1, 1) == CUDA_SUCCESS");
    CHECK_EQ(((CUresult(*)(CUfunction, int *, int *, int *))cl[5])(fn, &x, &y, &z), CUDA_SUCCESS,
             "((CUresult(*)(CUfunction, int *, int *, int *))cl[5])(fn, &x, &y, &z) == CUDA_SUCCESS");
    CHECK_EQ(x, 2, "x == 2");
    CHECK_EQ(y, 1, "y == 1");
    CHECK_EQ(z, 1, "z == 1");
    CHECK_EQ(((CUresult(*)(CUfunction, int, size_t, int *))cl[9])(fn, 128, 0, &n), CUDA_SUCCESS,
             "((CUresult(*)(CUfunction, int, size_t, int *))cl[9])(fn, 128, 0, &n) == CUDA_SUCCESS");
    CHECK_EQ(n, 16, "n == 16");
    CHECK_EQ(((CUresult(*)(CUfunction, int, size_t, int, int *))cl[10])(fn, 128, 0, 4, &n), CUDA_SUCCESS,
             "((CUresult(*)(CUfunction, int, size_t, int, int *))cl[10])(fn, 128, 0, 4, &n) == CUDA_SUCCESS");
    CHECK_EQ(n, 30, "n == 30");
    n = 5;
    CHECK_EQ(((CUresult(*)(CUdevice, int *))cl[16])(0, &n), CUDA_SUCCESS,
             "((CUresult(*)(CUdevice, int *))cl[16])(0, &n) == CUDA_SUCCESS");
    CHECK_EQ(n, 0, "n == 0");

    void *const *tmod = table_of(TOOLS_MODULE);
    typedef uint64_t (*iterate_fn)(CUcontext, CUmodule, void *, void *);
    memset(&seen, 0, sizeof seen);
    CHECK_EQ(((iterate_fn)tmod[7])(PRIMARY, FAKE_MODULE, (void *)seen_function, K(0x77)), 3,
             "((iterate_fn)tmod[7])(PRIMARY, FAKE_MODULE, (void *)seen_function, K(0x77)) == 3");
    CHECK_EQ(seen.n, 3, "seen.n == 3");
    CHECK_EQ(seen.opaque, K(0x77), "seen.opaque == K(0x77)");
    CHECK_EQ(seen.fn[0], (CUfunction)0x4000, "seen.fn[0] == (CUfunction)0x4000");
    CHECK_EQ(seen.fn[2], (CUfunction)0x4002, "seen.fn[2] == (CUfunction)0x4002");
    CHECK_NE(seen.name[1], NULL, "seen.name[1] != NULL");
    CHECK_STR_EQ(seen.name[1], "ktwo", "strcmp(seen.name[1], \"ktwo\") == 0");
}

static CUresult refused_result;
static void call_refused_twice(void)
{
    void *const *tctx = table_of(TOOLS_CTX);
    refused_result = ((CUresult(*)(void))tctx[50])();
    ((CUresult(*)(void))tctx[50])();
}

static void test_refused_slot(void)
{
    const char *said = stderr_of(call_refused_twice);
    CHECK_EQ(refused_result, CUDA_ERROR_NOT_SUPPORTED, "refused_result == CUDA_ERROR_NOT_SUPPORTED");
    CHECK_EQ(count_lines(said), 1, "count_lines(said) == 1");
    CHECK_NE(strstr(said, "TOOLS_CONTEXT, slot 50"), NULL,
             "strstr(said, \"TOOLS_CONTEXT, slot 50\") != NULL");
}

/* ---- MD2: RFC 1319's test suite ---- */

static void check_md2(const char *text, const char *hex)
{
    struct flyt_md2 m;
    uint8_t digest[16];
    char got[33];
    flyt_md2_init(&m);
    flyt_md2_update(&m, text, strlen(text));
    flyt_md2_final(&m, digest);
    for (int i = 0; i < 16; i++)
        snprintf(got + 2 * i, 3, "%02x", digest[i]);
    if (strcmp(got, hex) != 0)
        fprintf(stderr, "MD2(\"%s\") = %s, expected %s\n", text, got, hex);
    CHECK_STR_EQ(got, hex, "strcmp(got, hex) == 0");
}

static void test_md2(void)
{
    check_md2("", "8350e5a3e24c153df2275c9f80692773");
    check_md2("a", "32ec01ec4a6dac72c0ab96fb34c0b5d1");
    check_md2("abc", "da853b0d3f88d99b30283a69e6ded6bb");
    check_md2("message digest", "ab4f496bfb2a530b219ff33031fe06b0");
    check_md2("abcdefghijklmnopqrstuvwxyz", "4e8ddff3650292ab5a4108c3aa47940b");
    check_md2("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
              "da33def2a42df13975352846c30338cd");
    check_md2("1234567890123456789012345678901234567890"
              "1234567890123456789012345678901234567890",
              "d5976f79d83d3a0dc9806c3c66f3efd8");
}

/* ---- MD2 states published in ZLUDA's integrity-check tests ----
 * A 66-byte state there is state | block | state^block | checksum | used | L. */

static void load_state(struct flyt_md2 *m, const uint8_t s[66])
{
    memcpy(m->state, s, 16);
    memcpy(m->block, s + 16, 16);
    memcpy(m->sum, s + 48, 16);
    m->used = s[64];
    m->last = s[65];
}

static int same_state(const struct flyt_md2 *m, const uint8_t s[66])
{
    return memcmp(m->state, s, 16) == 0 && memcmp(m->block, s + 16, m->used) == 0 &&
           memcmp(m->sum, s + 48, 16) == 0 && m->used == s[64] && m->last == s[65];
}

static const uint8_t after_key[66] = {
    0x8b, 0x21, 0x9a, 0x49, 0xe8, 0x6d, 0x1a, 0xee, 0xf2, 0x37, 0xf9, 0xb5, 0x4a, 0x8c, 0x3c,
    0x75, 0xc7, 0x1e, 0xee, 0x21, 0xcf, 0x29, 0x8a, 0xe5, 0x13, 0x83, 0xf4, 0xec, 0x33, 0x04,
    0xe2, 0xfd, 0xb0, 0x2f, 0x09, 0x01, 0x4f, 0xf7, 0x68, 0x6d, 0x69, 0x46, 0x43, 0x7e, 0xb6,
    0x2b, 0x21, 0xed, 0x57, 0xa1, 0x10, 0x86, 0x0e, 0x60, 0x44, 0x1e, 0x70, 0x5f, 0x67, 0xd1,
    0xeb, 0x67, 0xa1, 0x3d, 0x00, 0x3d};
static const uint8_t after_input[66] = {
    0x0a, 0xfd, 0xab, 0xc9, 0xff, 0x9b, 0xa0, 0xbe, 0x4d, 0x30, 0x32, 0x82, 0x74, 0x4f, 0xa7,
    0x48, 0x9d, 0x23, 0x82, 0xa3, 0x87, 0xfa, 0x6c, 0xdb, 0x92, 0x49, 0xd9, 0xb5, 0x4b, 0x2b,
    0x5e, 0x51, 0x6e, 0xf7, 0xf9, 0x4d, 0x28, 0x8a, 0x64, 0x06, 0x19, 0xb3, 0xe6, 0xbe, 0xa4,
    0xec, 0x7e, 0x54, 0x64, 0x28, 0xd9, 0xe1, 0xd4, 0x34, 0xc0, 0xa9, 0x49, 0x88, 0xc9, 0x61,
    0x58, 0xdd, 0x66, 0x74, 0x00, 0x74};
static const uint8_t before_device[66] = {
    0x84, 0xfd, 0x93, 0x10, 0xc6, 0xdb, 0xb3, 0xbc, 0x49, 0xc2, 0x25, 0xe7, 0xda, 0x6e, 0x22,
    0x6f, 0x9b, 0xbd, 0x81, 0x59, 0xc3, 0x01, 0x9a, 0x7a, 0x26, 0x34, 0x39, 0x0f, 0x2a, 0x56,
    0x13, 0xb1, 0xf6, 0xbc, 0x7f, 0xa1, 0x8f, 0x04, 0xa5, 0x4d, 0x0d, 0x78, 0xab, 0x20, 0xf8,
    0x23, 0x20, 0xa5, 0x3f, 0x67, 0x36, 0xe2, 0xde, 0x8a, 0xe5, 0xdf, 0xe1, 0xf2, 0x03, 0x94,
    0xad, 0xdc, 0x9a, 0xda, 0x00, 0xda};
static const uint8_t after_device[66] = {
    0x1f, 0xd8, 0x25, 0xd2, 0xdf, 0xfa, 0x64, 0xc7, 0xb6, 0x1a, 0xaf, 0x22, 0xb8, 0x79, 0xfb,
    0x96, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7c, 0x9d,
    0x46, 0xd2, 0x1f, 0xd8, 0x25, 0xd2, 0xdd, 0xfa, 0x64, 0xc7, 0xb6, 0x1a, 0xaf, 0x22, 0xe6,
    0x17, 0xbd, 0x3a, 0xd7, 0xdd, 0x5f, 0x82, 0x8c, 0x87, 0xce, 0x86, 0x66, 0xaf, 0xa0, 0x50,
    0x7a, 0x7d, 0xbb, 0xbc, 0x0c, 0x50};
static const uint8_t before_final[66] = {
    0x3e, 0x4b, 0xf2, 0x95, 0x71, 0xf5, 0x6b, 0x51, 0x07, 0xbf, 0x4b, 0xf1, 0x04, 0x0e, 0x8e,
    0x0b, 0x5f, 0x4d, 0x30, 0x0c, 0x0f, 0x0c, 0xae, 0xfb, 0x48, 0xaf, 0x23, 0xb5, 0xea, 0x4c,
    0xc2, 0xdb, 0xd7, 0xdf, 0x88, 0x74, 0x39, 0x58, 0x16, 0x3a, 0x1f, 0x7c, 0x9b, 0x20, 0x7e,
    0x7e, 0x94, 0xc8, 0x8b, 0xc6, 0xb2, 0x38, 0x0d, 0x07, 0x7d, 0xbd, 0x90, 0xd5, 0x39, 0x63,
    0xeb, 0x1d, 0x4f, 0x40, 0x00, 0x40};
static const uint8_t final_digest[16] = {0x00, 0x23, 0x53, 0x06, 0x5e, 0x96, 0xf6, 0x9c,
                                         0x61, 0xaa, 0x96, 0x2d, 0x2e, 0xcd, 0xa8, 0x58};

static void put64(uint8_t *at, uint64_t v)
{
    memcpy(at, &v, 8);
}

static void test_md2_states(void)
{
    static const uint8_t key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                    0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};
    struct flyt_md2 m;
    uint8_t block[16];
    for (int i = 0; i < 16; i++)
        block[i] = key[i] ^ 0x36;
    flyt_md2_init(&m);
    flyt_md2_update(&m, block, 16);
    CHECK(same_state(&m, after_key), "same_state(&m, after_key)");

    uint8_t in[48];
    uint32_t head[4] = {0x2f30, 12082, 0x002fa423, 0xf79c1000};
    memcpy(in, head, 16);
    put64(in + 16, 0x00007ffff6958240); /* CUDART_INTERFACE */
    put64(in + 24, 0x00007ffff6958220); /* INTEGRITY_CHECK */
    put64(in + 32, 0x00007ffff2aaf4a0); /* its slot 1 */
    put64(in + 40, 0x682b9cee);
    flyt_md2_update(&m, in, sizeof in);
    CHECK(same_state(&m, after_input), "same_state(&m, after_input)");

    uint8_t dev[28] = {0};
    uint32_t uuid_words[4] = {0x8a2bfe9a, 0x382d25ac, 0xc5ae37ea, 0x5f32716d};
    int32_t pci[3] = {0, 2, 0};
    memcpy(dev, uuid_words, 16);
    memcpy(dev + 16, pci, 12);
    load_state(&m, before_device);
    flyt_md2_update(&m, dev, sizeof dev);
    CHECK(same_state(&m, after_device), "same_state(&m, after_device)");

    uint8_t digest[16];
    load_state(&m, before_final);
    flyt_md2_final(&m, digest);
    CHECK_MEM_EQ(digest, final_digest, 16, "memcmp(digest, final_digest, 16) == 0");
}

/* ---- the integrity answer: NVIDIA's driver 580.159.04 gave these ---- */

static void check_answer(uint32_t version, uint32_t tid, uint64_t time, uint64_t a0, uint64_t a1)
{
    struct flyt_integrity_input in = {
        .driver_version = 13000,
        .asked_version = version,
        .pid = 430,
        .tid = tid,
        .cudart_table = (const void *)(uintptr_t)0x7f938667f680,
        .integrity_table = (const void *)(uintptr_t)0x7f938667f660,
        .slot_fn = (const void *)(uintptr_t)0x7f9380fde350,
        .unix_seconds = time,
    };
    struct flyt_integrity_device dev = {.pci_domain = 0, .pci_bus = 0, .pci_device = 6};
    memcpy(dev.uuid.bytes, h100_uuid, 16);
    uint64_t out[2] = {0, 0};
    flyt_integrity_hash(out, &in, &dev, 1);
    if (out[0] != a0 || out[1] != a1)
        fprintf(stderr, "integrity v%u: %016llx %016llx, expected %016llx %016llx\n", version,
                (unsigned long long)out[0], (unsigned long long)out[1],
                (unsigned long long)a0, (unsigned long long)a1);
    CHECK_EQ(out[0], a0, "out[0] == a0");
    CHECK_EQ(out[1], a1, "out[1] == a1");
}

static void test_integrity_answers(void)
{
    check_answer(13002, 0x80ae1740, 0x6b0510cf, 0xeafff57fb963a606, 0xed44ae705cedc1ab);
    check_answer(12082, 0x80ae1740, 0x6b050ce7, 0x9c782bb276b4eea7, 0xda20a41d3e8f60ac);
    check_answer(13002, 0x7cab46c0, 0x6b0510cf, 0xdbe65ed6d8abba75, 0xe579b3187061377e);
    /* versions ending in 0 or 1 get constants */
    check_answer(13000, 1, 2, 0x3341181c03cb675c, 0x8ed383aa1f4cd1e8);
    check_answer(13001, 1, 2, 0x1841181c03cb675c, 0x8ed383aa1f4cd1e8);
}

/* The slot gathers its inputs from this process and the public API. */
static void test_integrity_slot(void)
{
    void *const *cudart = table_of(CUDART);
    void *const *integrity = table_of(INTEGRITY);
    typedef CUresult (*check_fn)(uint32_t, uint64_t, uint64_t *);
    fake_devices = 2;
    uint64_t got[2] = {0, 0}, want[2] = {1, 1};
    CHECK_EQ(((check_fn)integrity[1])(13002, 1234567, got), CUDA_SUCCESS,
             "((check_fn)integrity[1])(13002, 1234567, got) == CUDA_SUCCESS");
    struct flyt_integrity_input in = {
        .driver_version = 13000,
        .asked_version = 13002,
        .pid = (uint32_t)getpid(),
        .tid = (uint32_t)(uintptr_t)pthread_self(),
        .cudart_table = cudart,
        .integrity_table = integrity,
        .slot_fn = integrity[1],
        .unix_seconds = 1234567,
    };
    struct flyt_integrity_device devs[2];
    for (int i = 0; i < 2; i++) {
        cuDeviceGetUuid(&devs[i].uuid, i);
        devs[i].pci_domain = 0;
        devs[i].pci_bus = 0x40 * i;
        devs[i].pci_device = 6;
    }
    flyt_integrity_hash(want, &in, devs, 2);
    CHECK_EQ(got[0], want[0], "got[0] == want[0]");
    CHECK_EQ(got[1], want[1], "got[1] == want[1]");
    CHECK_EQ(((check_fn)integrity[1])(13002, 1234567, NULL), CUDA_ERROR_INVALID_VALUE,
             "((check_fn)integrity[1])(13002, 1234567, NULL) == CUDA_ERROR_INVALID_VALUE");
    fake_devices = 1;
}

int main(void)
{
    test_shapes();
    test_unknown();
    test_cls();
    test_cls_threads();
    test_slots();
    test_refused_slot();
    test_md2();
    test_md2_states();
    test_integrity_answers();
    test_integrity_slot();
    return check_done();
}

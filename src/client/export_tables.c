/*
 * The driver's hidden export tables (see export_tables.h).
 *
 * Each table is an array of pointers; where the driver puts the table's byte
 * size in slot 0, so do we (the runtime checks it). Slots nobody has described
 * point at stubs that say once which table and slot was called, and fail.
 * Table sizes, NULL slots and slot behaviour follow NVIDIA's driver
 * 580.159 (CUDA 13.0) as observed calling it; signatures also come from the
 * project's DRIVER-API-FACTS.md and ZLUDA's dark_api write-up.
 */
#include "export_tables.h"
#include "flyt_assert.h"
#include "flyt_client_table.h"

#include "ctx_storage.h"
#include "flyt_proto.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- saying things once ---- */

/* One write, so the line does not interleave with the program's output. */
static void say(const char *line)
{
    size_t len = strlen(line);
    if (write(STDERR_FILENO, line, len) < 0) {
        /* nowhere left to say it */
    }
}

static void report_slot(atomic_int *said, const char *table, int slot)
{
    if (atomic_exchange(said, 1) == 0) {
        char line[160];
        snprintf(line, sizeof line,
                 "flyt: hidden driver table %s, slot %d, was called: not supported\n", table,
                 slot);
        say(line);
    }
}

/* A slot nobody has described. Callers pass arguments we ignore. */
#define REFUSED(table, n)                                                                      \
    static CUresult refused_##table##_##n(void)                                               \
    {                                                                                          \
        static atomic_int said;                                                                \
        report_slot(&said, #table, n);                                                         \
        return CUDA_ERROR_NOT_SUPPORTED;                                                       \
    }
/* Ten of them, slots d0..d9 (d > 0). */
#define REFUSED10(table, d)                                                                    \
    REFUSED(table, d##0) REFUSED(table, d##1) REFUSED(table, d##2) REFUSED(table, d##3)        \
    REFUSED(table, d##4) REFUSED(table, d##5) REFUSED(table, d##6) REFUSED(table, d##7)        \
    REFUSED(table, d##8) REFUSED(table, d##9)
#define R(table, n) ((const void *)refused_##table##_##n)
#define R10(table, d)                                                                          \
    R(table, d##0), R(table, d##1), R(table, d##2), R(table, d##3), R(table, d##4),            \
        R(table, d##5), R(table, d##6), R(table, d##7), R(table, d##8), R(table, d##9)

#define SIZE_SLOT(slots) ((const void *)(uintptr_t)((slots) * sizeof(void *)))
#define FN(f) ((const void *)(f))

/* Slots the driver answers with 0 and nothing else. */
static CUresult returns_zero(void)
{
    return CUDA_SUCCESS;
}

/* ---- CUDART_INTERFACE ---- */

/* Slot 2: the device's primary context. NVIDIA's driver hands out the handle
 * without retaining or activating it (the runtime retains it itself later),
 * so the reference taken to learn the handle is given back at once. */
static CUresult cudart_primary_ctx(CUcontext *out, CUdevice dev)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult err = cuDevicePrimaryCtxRetain(out, dev);
    if (err == CUDA_SUCCESS)
        cuDevicePrimaryCtxRelease(dev);
    return err;
}

/* Slots 1, 6 and 8 load a module from a fatbinary wrapper: runtime 13 never
 * calls them, so they stay refused rather than guessed. */
REFUSED(CUDART_INTERFACE, 1)
REFUSED(CUDART_INTERFACE, 3)
REFUSED(CUDART_INTERFACE, 4)
REFUSED(CUDART_INTERFACE, 5)
REFUSED(CUDART_INTERFACE, 6)
REFUSED(CUDART_INTERFACE, 8)
REFUSED(CUDART_INTERFACE, 9)
REFUSED(CUDART_INTERFACE, 11)

/* NULL where the driver's table has NULL: a caller may test for it. */
#define CUDART_SLOTS 13
static const void *const cudart_interface[CUDART_SLOTS] = {
    SIZE_SLOT(CUDART_SLOTS),  R(CUDART_INTERFACE, 1), FN(cudart_primary_ctx),
    R(CUDART_INTERFACE, 3),   R(CUDART_INTERFACE, 4), R(CUDART_INTERFACE, 5),
    R(CUDART_INTERFACE, 6),   FN(returns_zero), /* 7: nothing to do */
    R(CUDART_INTERFACE, 8),   R(CUDART_INTERFACE, 9), NULL,
    R(CUDART_INTERFACE, 11),  FN(returns_zero),
};

/* ---- TOOLS_RUNTIME_CALLBACK_HOOKS ---- */

/* Slots 2 and 6 hand the runtime areas it fills in: the sizes are the ones
 * the driver reports; the areas are larger in case a caller counts in words. */
#define HOOKS_AREA1_SIZE 1024
#define HOOKS_AREA2_SIZE 14
static uint64_t hooks_area1[HOOKS_AREA1_SIZE] __attribute__((aligned(64)));
static uint64_t hooks_area2[HOOKS_AREA2_SIZE] __attribute__((aligned(64)));

static void hooks_area(void **area, size_t *size, uint64_t *words, size_t reported)
{
    if (area != NULL)
        *area = words;
    if (size != NULL)
        *size = reported;
}

static CUresult hooks_slot2(void **area, size_t *size)
{
    hooks_area(area, size, hooks_area1, HOOKS_AREA1_SIZE);
    return CUDA_SUCCESS;
}

static CUresult hooks_slot6(void **area, size_t *size)
{
    hooks_area(area, size, hooks_area2, HOOKS_AREA2_SIZE);
    return CUDA_SUCCESS;
}

#define HOOKS_SLOTS 7
static const void *const callback_hooks[HOOKS_SLOTS] = {
    SIZE_SLOT(HOOKS_SLOTS), FN(returns_zero), FN(hooks_slot2), FN(returns_zero),
    FN(returns_zero),       FN(returns_zero), FN(hooks_slot6),
};

/* ---- TOOLS_TLS ---- */

/* Slot 2: the calling thread's current context, NULL if none (cuBLASLt). */
static CUresult tls_current_ctx(CUcontext *out)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return cuCtxGetCurrent(out);
}

REFUSED(TOOLS_TLS, 1)

#define TLS_SLOTS 3
static const void *const tools_tls[TLS_SLOTS] = {
    SIZE_SLOT(TLS_SLOTS), R(TOOLS_TLS, 1), FN(tls_current_ctx),
};

/* ---- CONTEXT_LOCAL_STORAGE: no size in slot 0, NULL-terminated ---- */

static const void *const context_local_storage[4] = {
    FN(flyt_ctx_storage_put),
    FN(flyt_ctx_storage_delete),
    FN(flyt_ctx_storage_get),
    NULL,
};

/* ---- CONTEXT_CHECKS ---- */

/* Slot 2: check(ctx, &flags, &extra); the driver's answer is flags 0 and
 * extra untouched, whatever the context. */
static CUresult context_check(CUcontext ctx, uint32_t *flags, void **extra)
{
    (void)ctx;
    (void)extra;
    if (flags != NULL)
        *flags = 0;
    return CUDA_SUCCESS;
}

REFUSED(CONTEXT_CHECKS, 1)
REFUSED(CONTEXT_CHECKS, 4)
REFUSED(CONTEXT_CHECKS, 5)
REFUSED(CONTEXT_CHECKS, 6)
REFUSED(CONTEXT_CHECKS, 7)
REFUSED(CONTEXT_CHECKS, 8)
REFUSED(CONTEXT_CHECKS, 9)
REFUSED(CONTEXT_CHECKS, 10)
REFUSED(CONTEXT_CHECKS, 11)
REFUSED(CONTEXT_CHECKS, 12)
REFUSED(CONTEXT_CHECKS, 13)
REFUSED(CONTEXT_CHECKS, 14)

#define CHECKS_SLOTS 15
static const void *const context_checks[CHECKS_SLOTS] = {
    SIZE_SLOT(CHECKS_SLOTS), R(CONTEXT_CHECKS, 1),  FN(context_check),      FN(returns_zero),
    R(CONTEXT_CHECKS, 4),    R(CONTEXT_CHECKS, 5),  R(CONTEXT_CHECKS, 6),   R(CONTEXT_CHECKS, 7),
    R(CONTEXT_CHECKS, 8),    R(CONTEXT_CHECKS, 9),  R(CONTEXT_CHECKS, 10),  R(CONTEXT_CHECKS, 11),
    R(CONTEXT_CHECKS, 12),   R(CONTEXT_CHECKS, 13), R(CONTEXT_CHECKS, 14),
};

/* ---- INTEGRITY_CHECK ---- */

static CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t out[2]);

REFUSED(INTEGRITY_CHECK, 2)

#define INTEGRITY_SLOTS 3
static const void *const integrity_table[INTEGRITY_SLOTS] = {
    SIZE_SLOT(INTEGRITY_SLOTS), FN(integrity_check), R(INTEGRITY_CHECK, 2),
};

/* ---- tools context (21318c60-…), CUetblToolsContext: the slots libraries call ---- */

/* Slot 4: the context's unique number, as cuCtxGetId; the driver answers 0
 * for a NULL context rather than looking up the current one. */
static CUresult tools_ctx_id(CUcontext ctx, uint64_t *id)
{
    if (id == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long value = 0;
    CUresult err = ctx != NULL ? cuCtxGetId(ctx, &value) : CUDA_SUCCESS;
    if (err == CUDA_SUCCESS)
        *id = value;
    return err;
}

/* Slot 3: the context's device. */
static CUresult tools_ctx_device(CUcontext ctx, uint32_t *device)
{
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUdevice d = 0;
    CUresult err = cuCtxGetDevice_v2(&d, ctx);
    if (err == CUDA_SUCCESS)
        *device = (uint32_t)d;
    return err;
}

/* ---- the tools' stream handles (slots 11, 12, 16, 20, 32, 39, 51) ----
 * cuBLASLt turns each public stream into the driver's own handle (slot 51)
 * and asks that handle's unique id (slot 39), as a cache key. Our handle is
 * a record per stream, never freed, opaque to the caller (zero-filled room
 * in front, in case a library reads through it) and found again by the
 * stream's unique id, which is what cuStreamGetId reports. */
struct tools_stream {
    unsigned char opaque[512];
    uint64_t id;         /* the stream's unique id */
    CUstream stream;     /* the public handle naming it */
    struct tools_stream *next;
};

static struct {
    pthread_mutex_t lock;
    struct tools_stream *list;
} tools_streams = {.lock = FLYT_MUTEX_INITIALIZER};

/* Exported by this library; cuda.h declares it only for per-thread builds. */
CUresult cuStreamGetId_ptsz(CUstream stream, unsigned long long *id);

/* 1 is the legacy default stream's id, whether it was named NULL or
 * CU_STREAM_LEGACY. */
static uint64_t stream_unique_id(CUstream stream, int per_thread, CUresult *err)
{
    unsigned long long id = 0;
    *err = per_thread ? cuStreamGetId_ptsz(stream, &id) : cuStreamGetId(stream, &id);
    return id == 0 ? 1 : id;
}

static struct tools_stream *tools_stream_for(uint64_t id, CUstream stream)
{
    pthread_mutex_lock(&tools_streams.lock);
    struct tools_stream *t = tools_streams.list;
    while (t != NULL && t->id != id)
        t = t->next;
    if (t == NULL && (t = calloc(1, sizeof *t)) != NULL) {
        t->id = id;
        t->stream = stream;
        t->next = tools_streams.list;
        tools_streams.list = t;
    }
    pthread_mutex_unlock(&tools_streams.lock);
    return t;
}

/* Slot 51: StreamGetToolsHandleEx(ctx, stream, &handle, per_thread). */
static CUresult tools_stream_handle(CUcontext ctx, CUstream stream, void **out, uint8_t per_thread)
{
    (void)ctx;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult err;
    uint64_t id = stream_unique_id(stream, per_thread, &err);
    if (err != CUDA_SUCCESS)
        return err;
    CUstream named = stream == NULL ? (per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY) : stream;
    struct tools_stream *t = tools_stream_for(id, named);
    if (t == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = t;
    return CUDA_SUCCESS;
}

/* Slot 17, the same without the per-thread flag (deprecated). */
static CUresult tools_stream_handle_old(CUcontext ctx, CUstream stream, void **out)
{
    return tools_stream_handle(ctx, stream, out, 0);
}

static struct tools_stream *tools_stream_from(const void *handle)
{
    pthread_mutex_lock(&tools_streams.lock);
    struct tools_stream *t = tools_streams.list;
    while (t != NULL && (const void *)t != handle)
        t = t->next;
    pthread_mutex_unlock(&tools_streams.lock);
    return t;
}

/* Slot 39: StreamGetIdEx(ctx, handle, &id). */
static CUresult tools_stream_id(CUcontext ctx, const void *handle, uint64_t *id)
{
    (void)ctx;
    struct tools_stream *t = tools_stream_from(handle);
    if (id == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (t == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *id = t->id;
    return CUDA_SUCCESS;
}

/* Slot 5: StreamGetId(ctx, public stream, &id) (deprecated). */
static CUresult tools_public_stream_id(CUcontext ctx, CUstream stream, uint64_t *id)
{
    (void)ctx;
    if (id == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult err;
    *id = stream_unique_id(stream, 0, &err);
    return err;
}

/* Slot 16: StreamGetPublicHandle(handle, &stream). */
static CUresult tools_stream_public(const void *handle, CUstream *stream)
{
    struct tools_stream *t = tools_stream_from(handle);
    if (stream == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (t == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *stream = t->stream;
    return CUDA_SUCCESS;
}

/* Slot 20: StreamGetCtx(handle, &ctx): every stream is in the current one. */
static CUresult tools_stream_ctx(const void *handle, CUcontext *ctx)
{
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (tools_stream_from(handle) == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return cuCtxGetCurrent(ctx);
}

/* Slot 11: CtxGetNullStream(ctx, &handle). */
static CUresult tools_null_stream(CUcontext ctx, void **out)
{
    return tools_stream_handle(ctx, CU_STREAM_LEGACY, out, 0);
}

/* Slot 12: StreamIsNullStream(ctx, handle, &answer). */
static CUresult tools_is_null_stream(CUcontext ctx, const void *handle, uint8_t *answer)
{
    (void)ctx;
    struct tools_stream *t = tools_stream_from(handle);
    if (answer == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (t == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *answer = t->id == 1;
    return CUDA_SUCCESS;
}

/* Slot 32: StreamIsNonBlocking(handle, &answer). */
static CUresult tools_stream_nonblocking(const void *handle, uint8_t *answer)
{
    struct tools_stream *t = tools_stream_from(handle);
    if (answer == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (t == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    unsigned flags = 0;
    CUresult err = t->id == 1 ? CUDA_SUCCESS : cuStreamGetFlags(t->stream, &flags);
    if (err == CUDA_SUCCESS)
        *answer = (flags & CU_STREAM_NON_BLOCKING) != 0;
    return err;
}

REFUSED(TOOLS_CONTEXT, 1)
REFUSED(TOOLS_CONTEXT, 2)
REFUSED(TOOLS_CONTEXT, 6)
REFUSED(TOOLS_CONTEXT, 7)
REFUSED(TOOLS_CONTEXT, 8)
REFUSED(TOOLS_CONTEXT, 9)
REFUSED(TOOLS_CONTEXT, 10)
REFUSED(TOOLS_CONTEXT, 13)
REFUSED(TOOLS_CONTEXT, 14)
REFUSED(TOOLS_CONTEXT, 15)
REFUSED(TOOLS_CONTEXT, 18)
REFUSED(TOOLS_CONTEXT, 19)
REFUSED(TOOLS_CONTEXT, 21)
REFUSED(TOOLS_CONTEXT, 22)
REFUSED(TOOLS_CONTEXT, 23)
REFUSED(TOOLS_CONTEXT, 24)
REFUSED(TOOLS_CONTEXT, 25)
REFUSED(TOOLS_CONTEXT, 26)
REFUSED(TOOLS_CONTEXT, 27)
REFUSED(TOOLS_CONTEXT, 28)
REFUSED(TOOLS_CONTEXT, 29)
REFUSED(TOOLS_CONTEXT, 30)
REFUSED(TOOLS_CONTEXT, 31)
REFUSED(TOOLS_CONTEXT, 33)
REFUSED(TOOLS_CONTEXT, 34)
REFUSED(TOOLS_CONTEXT, 35)
REFUSED(TOOLS_CONTEXT, 36)
REFUSED(TOOLS_CONTEXT, 37)
REFUSED(TOOLS_CONTEXT, 38)
REFUSED10(TOOLS_CONTEXT, 4)
REFUSED(TOOLS_CONTEXT, 50)
REFUSED(TOOLS_CONTEXT, 52)
REFUSED(TOOLS_CONTEXT, 53)
REFUSED(TOOLS_CONTEXT, 54)
REFUSED(TOOLS_CONTEXT, 55)
REFUSED(TOOLS_CONTEXT, 56)
REFUSED(TOOLS_CONTEXT, 57)
REFUSED(TOOLS_CONTEXT, 58)
REFUSED(TOOLS_CONTEXT, 59)
REFUSED10(TOOLS_CONTEXT, 6)
REFUSED10(TOOLS_CONTEXT, 7)
REFUSED10(TOOLS_CONTEXT, 8)
REFUSED(TOOLS_CONTEXT, 90)
REFUSED(TOOLS_CONTEXT, 92)
REFUSED(TOOLS_CONTEXT, 93)
REFUSED(TOOLS_CONTEXT, 94)

/* Driver 580 (CUDA 13.0) serves 93 slots with 91 NULL, driver 595 95. */
#define TOOLS_CTX_SLOTS 95
static const void *const tools_context[TOOLS_CTX_SLOTS] = {
    SIZE_SLOT(TOOLS_CTX_SLOTS),
    R(TOOLS_CONTEXT, 1), R(TOOLS_CONTEXT, 2), FN(tools_ctx_device), FN(tools_ctx_id),
    FN(tools_public_stream_id), R(TOOLS_CONTEXT, 6), R(TOOLS_CONTEXT, 7), R(TOOLS_CONTEXT, 8),
    R(TOOLS_CONTEXT, 9),
    /* 10 */ R(TOOLS_CONTEXT, 10), FN(tools_null_stream), FN(tools_is_null_stream),
    R(TOOLS_CONTEXT, 13), R(TOOLS_CONTEXT, 14), R(TOOLS_CONTEXT, 15), FN(tools_stream_public),
    FN(tools_stream_handle_old), R(TOOLS_CONTEXT, 18), R(TOOLS_CONTEXT, 19),
    /* 20 */ FN(tools_stream_ctx), R(TOOLS_CONTEXT, 21), R(TOOLS_CONTEXT, 22), R(TOOLS_CONTEXT, 23),
    R(TOOLS_CONTEXT, 24), R(TOOLS_CONTEXT, 25), R(TOOLS_CONTEXT, 26), R(TOOLS_CONTEXT, 27),
    R(TOOLS_CONTEXT, 28), R(TOOLS_CONTEXT, 29),
    /* 30 */ R(TOOLS_CONTEXT, 30), R(TOOLS_CONTEXT, 31), FN(tools_stream_nonblocking),
    R(TOOLS_CONTEXT, 33), R(TOOLS_CONTEXT, 34), R(TOOLS_CONTEXT, 35), R(TOOLS_CONTEXT, 36),
    R(TOOLS_CONTEXT, 37), R(TOOLS_CONTEXT, 38), FN(tools_stream_id),
    /* 40 */ R10(TOOLS_CONTEXT, 4),
    /* 50 */ R(TOOLS_CONTEXT, 50), FN(tools_stream_handle), R(TOOLS_CONTEXT, 52),
    R(TOOLS_CONTEXT, 53), R(TOOLS_CONTEXT, 54), R(TOOLS_CONTEXT, 55), R(TOOLS_CONTEXT, 56),
    R(TOOLS_CONTEXT, 57), R(TOOLS_CONTEXT, 58), R(TOOLS_CONTEXT, 59),
    /* 60 */ R10(TOOLS_CONTEXT, 6), R10(TOOLS_CONTEXT, 7), R10(TOOLS_CONTEXT, 8),
    R(TOOLS_CONTEXT, 90), NULL, R(TOOLS_CONTEXT, 92), R(TOOLS_CONTEXT, 93), R(TOOLS_CONTEXT, 94),
};

/* ---- tools module (6e163fbe-…): only slot 7 is known ---- */

typedef void (*function_cb)(void *opaque, CUfunction function, const char *name);

static void each_function(const CUfunction *functions, unsigned count, function_cb cb,
                          void *opaque)
{
    for (unsigned i = 0; i < count; i++) {
        const char *name = NULL;
        if (cuFuncGetName(&name, functions[i]) != CUDA_SUCCESS)
            name = NULL;
        cb(opaque, functions[i], name);
    }
}

/* Slot 7: cb(opaque, function, name) for each function of mod, in the
 * module's order; returns how many (cuFFT checks after each module load).
 * The context argument plays no part. */
static uint64_t tools_module_functions(CUcontext ctx, CUmodule mod, function_cb cb, void *opaque)
{
    (void)ctx;
    unsigned count = 0;
    if (mod == NULL || cuModuleGetFunctionCount(&count, mod) != CUDA_SUCCESS || count == 0)
        return 0;
    CUfunction *functions = calloc(count, sizeof *functions);
    if (functions == NULL || cuModuleEnumerateFunctions(functions, count, mod) != CUDA_SUCCESS) {
        free(functions);
        return 0;
    }
    if (cb != NULL)
        each_function(functions, count, cb, opaque);
    free(functions);
    return count;
}

REFUSED(TOOLS_MODULE, 1)
REFUSED(TOOLS_MODULE, 2)
REFUSED(TOOLS_MODULE, 3)
REFUSED(TOOLS_MODULE, 4)
REFUSED(TOOLS_MODULE, 5)
REFUSED(TOOLS_MODULE, 6)
REFUSED(TOOLS_MODULE, 8)
REFUSED(TOOLS_MODULE, 9)
REFUSED10(TOOLS_MODULE, 1)
REFUSED10(TOOLS_MODULE, 2)
REFUSED10(TOOLS_MODULE, 3)
REFUSED10(TOOLS_MODULE, 4)
REFUSED10(TOOLS_MODULE, 5)
REFUSED10(TOOLS_MODULE, 6)
REFUSED10(TOOLS_MODULE, 7)
REFUSED10(TOOLS_MODULE, 8)
REFUSED(TOOLS_MODULE, 90)
REFUSED(TOOLS_MODULE, 91)
REFUSED(TOOLS_MODULE, 92)
REFUSED(TOOLS_MODULE, 94)
REFUSED(TOOLS_MODULE, 95)
REFUSED(TOOLS_MODULE, 96)
REFUSED(TOOLS_MODULE, 97)
REFUSED(TOOLS_MODULE, 98)

/* Driver 580 serves 99 slots with 93 NULL. */
#define TOOLS_MODULE_SLOTS 99
static const void *const tools_module[TOOLS_MODULE_SLOTS] = {
    SIZE_SLOT(TOOLS_MODULE_SLOTS),
    R(TOOLS_MODULE, 1), R(TOOLS_MODULE, 2), R(TOOLS_MODULE, 3), R(TOOLS_MODULE, 4),
    R(TOOLS_MODULE, 5), R(TOOLS_MODULE, 6), FN(tools_module_functions), R(TOOLS_MODULE, 8),
    R(TOOLS_MODULE, 9),
    R10(TOOLS_MODULE, 1), R10(TOOLS_MODULE, 2), R10(TOOLS_MODULE, 3), R10(TOOLS_MODULE, 4),
    R10(TOOLS_MODULE, 5), R10(TOOLS_MODULE, 6), R10(TOOLS_MODULE, 7), R10(TOOLS_MODULE, 8),
    R(TOOLS_MODULE, 90), R(TOOLS_MODULE, 91), R(TOOLS_MODULE, 92), NULL,
    R(TOOLS_MODULE, 94), R(TOOLS_MODULE, 95), R(TOOLS_MODULE, 96), R(TOOLS_MODULE, 97),
    R(TOOLS_MODULE, 98),
};

/* ---- the integrity check ---- */

/* RFC 1319's substitution table, built from the digits of pi. */
static const uint8_t md2_s[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,
    98,  167, 5,   243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202,
    30,  155, 87,  60,  253, 212, 224, 22,  103, 66,  111, 24,  138, 23,  229, 18,
    190, 78,  196, 214, 218, 158, 222, 73,  160, 251, 245, 142, 187, 47,  238, 122,
    169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137, 11,  34,  95,  33,
    128, 127, 93,  154, 90,  144, 50,  39,  53,  62,  204, 231, 191, 247, 151, 3,
    255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,  170, 198,
    79,  184, 56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241,
    69,  157, 112, 89,  100, 113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,
    27,  96,  37,  173, 174, 176, 185, 246, 28,  70,  97,  105, 52,  64,  126, 15,
    85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249, 206, 186, 197, 234, 38,
    44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129, 77,  82,
    106, 220, 55,  200, 108, 193, 171, 250, 36,  225, 123, 8,   12,  189, 177, 74,
    120, 136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254, 59,  0,   29,  57,
    242, 239, 183, 14,  102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,
    49,  68,  80,  180, 143, 237, 31,  26,  219, 153, 141, 51,  159, 17,  131, 20,
};

void flyt_md2_init(struct flyt_md2 *m)
{
    memset(m, 0, sizeof *m);
}

/* RFC 1319 3.4: 18 rounds over the 48-byte buffer state | block | state^block. */
static void md2_transform(struct flyt_md2 *m)
{
    uint8_t x[48];
    for (int i = 0; i < 16; i++) {
        x[i] = m->state[i];
        x[16 + i] = m->block[i];
        x[32 + i] = m->state[i] ^ m->block[i];
    }
    uint8_t t = 0;
    for (int round = 0; round < 18; round++) {
        for (int k = 0; k < 48; k++)
            t = x[k] ^= md2_s[t];
        t = (uint8_t)(t + round);
    }
    memcpy(m->state, x, sizeof m->state);
}

/* One byte: into the block and the checksum (RFC 3.2, with its erratum:
 * the checksum byte is xored, not replaced). */
static void md2_byte(struct flyt_md2 *m, uint8_t b)
{
    m->block[m->used] = b;
    m->last = m->sum[m->used] ^= md2_s[b ^ m->last];
    if (++m->used == 16) {
        md2_transform(m);
        m->used = 0;
    }
}

void flyt_md2_update(struct flyt_md2 *m, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++)
        md2_byte(m, p[i]);
}

void flyt_md2_final(struct flyt_md2 *m, uint8_t digest[16])
{
    uint8_t pad = (uint8_t)(16 - m->used);
    for (uint8_t i = 0; i < pad; i++)
        md2_byte(m, pad);
    uint8_t sum[16];
    memcpy(sum, m->sum, sizeof sum); /* feeding it advances it */
    flyt_md2_update(m, sum, sizeof sum);
    memcpy(digest, m->state, 16);
}

/* The integrity check's HMAC key (one MD2 block, so used as it is). */
static const uint8_t integrity_key[16] = {
    0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
    0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f,
};

static void md2_keyed(struct flyt_md2 *m, uint8_t pad)
{
    uint8_t block[16];
    for (int i = 0; i < 16; i++)
        block[i] = integrity_key[i] ^ pad;
    flyt_md2_init(m);
    flyt_md2_update(m, block, sizeof block);
}

static size_t put_bytes(uint8_t *at, const void *value, size_t size)
{
    memcpy(at, value, size);
    return size;
}

/* The input as the driver lays it out in memory: 48 bytes, no padding. */
static void hash_input(struct flyt_md2 *m, const struct flyt_integrity_input *in)
{
    uint8_t b[48];
    size_t n = 0;
    n += put_bytes(b + n, &in->driver_version, 4);
    n += put_bytes(b + n, &in->asked_version, 4);
    n += put_bytes(b + n, &in->pid, 4);
    n += put_bytes(b + n, &in->tid, 4);
    n += put_bytes(b + n, &in->cudart_table, 8);
    n += put_bytes(b + n, &in->integrity_table, 8);
    n += put_bytes(b + n, &in->slot_fn, 8);
    n += put_bytes(b + n, &in->unix_seconds, 8);
    flyt_md2_update(m, b, n);
}

static void hash_device(struct flyt_md2 *m, const struct flyt_integrity_device *d)
{
    uint8_t b[28];
    size_t n = 0;
    n += put_bytes(b + n, d->uuid.bytes, 16);
    n += put_bytes(b + n, &d->pci_domain, 4);
    n += put_bytes(b + n, &d->pci_bus, 4);
    n += put_bytes(b + n, &d->pci_device, 4);
    flyt_md2_update(m, b, n);
}

void flyt_integrity_hash(uint64_t out[2], const struct flyt_integrity_input *in,
                         const struct flyt_integrity_device *devices, unsigned count)
{
    /* Older askers (version ending in 0 or 1) expect a constant. */
    switch (in->asked_version % 10) {
    case 0:
        out[0] = 0x3341181c03cb675cull;
        out[1] = 0x8ed383aa1f4cd1e8ull;
        return;
    case 1:
        out[0] = 0x1841181c03cb675cull;
        out[1] = 0x8ed383aa1f4cd1e8ull;
        return;
    }
    struct flyt_md2 m;
    uint8_t inner[16], outer[16];
    md2_keyed(&m, 0x36);
    hash_input(&m, in);
    for (unsigned i = 0; i < count; i++)
        hash_device(&m, &devices[i]);
    flyt_md2_final(&m, inner);
    md2_keyed(&m, 0x5c);
    flyt_md2_update(&m, inner, sizeof inner);
    flyt_md2_final(&m, outer);
    memcpy(out, outer, sizeof outer);
}

/* Through the public API, so the answer matches what the runtime is told. */
static CUresult device_part(struct flyt_integrity_device *d, int ordinal)
{
    CUdevice dev;
    CUresult err = cuDeviceGet(&dev, ordinal);
    if (err == CUDA_SUCCESS)
        err = cuDeviceGetUuid(&d->uuid, dev);
    if (err == CUDA_SUCCESS)
        err = cuDeviceGetAttribute(&d->pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
    if (err == CUDA_SUCCESS)
        err = cuDeviceGetAttribute(&d->pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
    if (err == CUDA_SUCCESS)
        err = cuDeviceGetAttribute(&d->pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
    return err;
}

static CUresult integrity_devices(struct flyt_integrity_device **devices, unsigned *count)
{
    int n = 0;
    CUresult err = cuDeviceGetCount(&n);
    if (err != CUDA_SUCCESS)
        return err;
    *devices = calloc(n > 0 ? (size_t)n : 1, sizeof **devices);
    if (*devices == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < n && err == CUDA_SUCCESS; i++)
        err = device_part(&(*devices)[i], i);
    *count = (unsigned)n;
    return err;
}

/* Slot 1: (asked version, unix time, out[2]). */
static CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t out[2])
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int driver = 0;
    CUresult err = cuDriverGetVersion(&driver);
    if (err != CUDA_SUCCESS)
        return err;
    struct flyt_integrity_input in = {
        .driver_version = (uint32_t)driver,
        .asked_version = version,
        .pid = (uint32_t)getpid(),
        .tid = (uint32_t)(uintptr_t)pthread_self(),
        .cudart_table = cudart_interface,
        .integrity_table = integrity_table,
        .slot_fn = integrity_table[1],
        .unix_seconds = unix_seconds,
    };
    struct flyt_integrity_device *devices = NULL;
    unsigned count = 0;
    if (version % 10 >= 2)
        err = integrity_devices(&devices, &count);
    if (err == CUDA_SUCCESS)
        flyt_integrity_hash(out, &in, devices, count);
    free(devices);
    return err;
}

/* ---- cluster prototype (1734dc26-…), asked by cuBLASLt: the cluster
 * controls of Hopper's early days, each the same as a public call now ---- */

static CUresult cluster_set_dim(CUfunction f, int x, int y, int z)
{
    CUresult err = cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, x);
    if (err == CUDA_SUCCESS)
        err = cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, y);
    return err == CUDA_SUCCESS ? cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, z)
                               : err;
}

static CUresult cluster_set_policy(CUfunction f, int policy)
{
    return cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, policy);
}

static CUresult cluster_set_non_portable(CUfunction f, int enable)
{
    return cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, enable);
}

static CUresult cluster_get_dim(CUfunction f, int *x, int *y, int *z)
{
    if (x == NULL || y == NULL || z == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult err = cuFuncGetAttribute(x, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, f);
    if (err == CUDA_SUCCESS)
        err = cuFuncGetAttribute(y, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, f);
    return err == CUDA_SUCCESS ? cuFuncGetAttribute(z, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, f)
                               : err;
}

static CUresult cluster_get_policy(CUfunction f, int *policy)
{
    return cuFuncGetAttribute(policy, CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, f);
}

static CUresult cluster_get_non_portable(CUfunction f, int *enable)
{
    return cuFuncGetAttribute(enable, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, f);
}

static CUresult cluster_launch_supported(CUdevice dev, int *supported)
{
    return cuDeviceGetAttribute(supported, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, dev);
}

static CUresult cluster_max_size(CUfunction f, int block, size_t smem, int *size)
{
    CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = (unsigned)block,
                          .blockDimY = 1, .blockDimZ = 1, .sharedMemBytes = (unsigned)smem};
    return cuOccupancyMaxPotentialClusterSize(size, f, &cfg);
}

static CUresult cluster_max_active(CUfunction f, int block, size_t smem, int cluster, int *count)
{
    CUlaunchAttribute dim;
    memset(&dim, 0, sizeof dim);
    dim.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    dim.value.clusterDim.x = (unsigned)cluster;
    dim.value.clusterDim.y = dim.value.clusterDim.z = 1;
    CUlaunchConfig cfg = {.gridDimX = (unsigned)cluster, .gridDimY = 1, .gridDimZ = 1,
                          .blockDimX = (unsigned)block, .blockDimY = 1, .blockDimZ = 1,
                          .sharedMemBytes = (unsigned)smem, .attrs = &dim, .numAttrs = 1};
    return cuOccupancyMaxActiveClusters(count, f, &cfg);
}

/* Slot 11 answers the old limit, not a CUresult: none is overridden here. */
static uint32_t cluster_override_max(int dev, uint32_t size)
{
    (void)dev, (void)size;
    return 0;
}

static CUresult cluster_dim_must_be_set(CUfunction f, int *must)
{
    return cuFuncGetAttribute(must, CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, f);
}

/* Slots 14 and 16: the features are not offered; slot 13 frees nothing,
 * since slot 4 hands nothing out. */
static CUresult cluster_not_offered(int *answer)
{
    if (answer != NULL)
        *answer = 0;
    return CUDA_SUCCESS;
}

static CUresult cluster_not_offered_dev(CUdevice dev, int *answer)
{
    (void)dev;
    return cluster_not_offered(answer);
}

REFUSED(CLUSTER_PROTOTYPE, 4)
REFUSED(CLUSTER_PROTOTYPE, 15)

#define CLUSTER_SLOTS 17
static const void *const cluster_prototype[CLUSTER_SLOTS] = {
    SIZE_SLOT(CLUSTER_SLOTS),     FN(cluster_set_dim),          FN(cluster_set_policy),
    FN(cluster_set_non_portable), R(CLUSTER_PROTOTYPE, 4),      FN(cluster_get_dim),
    FN(cluster_get_policy),       FN(cluster_get_non_portable), FN(cluster_launch_supported),
    FN(cluster_max_size),         FN(cluster_max_active),       FN(cluster_override_max),
    FN(cluster_dim_must_be_set),  FN(returns_zero),             FN(cluster_not_offered),
    R(CLUSTER_PROTOTYPE, 15),     FN(cluster_not_offered_dev),
};

/* ---- Flyt's own (flyt_client_table.h): says to a server that this is not
 * NVIDIA's driver, and lets Flyt's NVML ask without being the program ---- */

static const void *const flyt_marker[FLYT_CLIENT_TABLE_SLOTS] = {
    [FLYT_CLIENT_TABLE_SIZE] = SIZE_SLOT(FLYT_CLIENT_TABLE_SLOTS),
    [FLYT_CLIENT_TABLE_NAME] = "flyt",
    [FLYT_CLIENT_TABLE_SCOPE] = FN(flyt_tool_scope),
    [FLYT_CLIENT_TABLE_MEM_INFO] = FN(flyt_tool_mem_info),
};

/* ---- the UUIDs ---- */

struct known_table {
    uint8_t id[16]; /* as in memory */
    const void *const *table;
};

static const struct known_table known_tables[] = {
    {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
      0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}, cudart_interface},
    {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74,
      0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66}, callback_hooks},
    {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47,
      0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}, tools_tls},
    {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
      0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}, context_local_storage},
    {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43,
      0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e}, context_checks},
    {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
      0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}, integrity_table},
    {{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48,
      0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}, tools_context},
    {{0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d,
      0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e}, tools_module},
    {{0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45,
      0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca}, cluster_prototype},
    {FLYT_CLIENT_MARKER_UUID, flyt_marker},
};

/* Refused without a word: the first is asked by every runtime and refusing
 * it changes nothing; the second is NVRTC's compile cache in the driver,
 * which NVRTC turns off when refused. */
static const uint8_t quietly_refused[][16] = {
    {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e,
     0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9},
    {0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41,
     0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28},
};

static int quiet(const uint8_t *id)
{
    for (size_t i = 0; i < sizeof quietly_refused / sizeof quietly_refused[0]; i++)
        if (memcmp(id, quietly_refused[i], 16) == 0)
            return 1;
    return 0;
}

/* Names each unknown UUID once; past this many distinct ones, no more. */
#define MAX_REPORTED 32
static pthread_mutex_t reported_lock = FLYT_MUTEX_INITIALIZER;
static uint8_t reported[MAX_REPORTED][16];
static unsigned reported_count;

static int first_report(const uint8_t id[16])
{
    int first = 0;
    pthread_mutex_lock(&reported_lock);
    unsigned i = 0;
    while (i < reported_count && memcmp(reported[i], id, 16) != 0)
        i++;
    if (i == reported_count && reported_count < MAX_REPORTED) {
        memcpy(reported[reported_count++], id, 16);
        first = 1;
    }
    pthread_mutex_unlock(&reported_lock);
    return first;
}

static void report_unknown(const uint8_t id[16])
{
    if (!first_report(id))
        return;
    char hex[40];
    size_t n = 0;
    for (int i = 0; i < 16; i++) {
        n += (size_t)snprintf(hex + n, sizeof hex - n, "%02x", id[i]);
        if (i == 3 || i == 5 || i == 7 || i == 9)
            hex[n++] = '-';
    }
    hex[n] = '\0';
    char line[128];
    snprintf(line, sizeof line, "flyt: cuGetExportTable: unknown table %s refused\n", hex);
    say(line);
}

CUresult flyt_export_table(const void **table_out, const CUuuid *id)
{
    if (table_out == NULL || id == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const uint8_t *bytes = (const uint8_t *)id->bytes;
    for (size_t i = 0; i < sizeof known_tables / sizeof known_tables[0]; i++) {
        if (memcmp(bytes, known_tables[i].id, 16) == 0) {
            *table_out = known_tables[i].table;
            return CUDA_SUCCESS;
        }
    }
    *table_out = NULL;
    if (!quiet(bytes))
        report_unknown(bytes);
    return CUDA_ERROR_INVALID_VALUE;
}

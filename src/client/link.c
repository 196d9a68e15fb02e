/*
 * Run-time linking (cuLink*): the inputs are gathered here and linked by
 * the server, which has the JIT and the device; the linked cubin comes back
 * and belongs to the link state, as the driver's does, so the program can
 * load it with cuModuleLoadData as usual.
 */
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct input {
    uint32_t type;
    char *name;
    void *data;
    size_t size;
};

/* A log buffer the program gave cuLinkCreate: the server's JIT log is copied
 * into it at cuLinkComplete, and the bytes written into its size option. */
struct log_target {
    char *buf;
    size_t cap;
    void **size_value; /* the program's option value: IN capacity, OUT bytes written */
};

struct CUlinkState_st {
    struct input inputs[FLYT_MAX_LINK_INPUTS];
    uint32_t count;
    void *cubin; /* after cuLinkComplete */
    struct log_target logs[2]; /* info, error */
    uint32_t flags;            /* FLYT_LINK_VERBOSE */
};

/* Keeps the log options; the others are the server JIT's defaults. */
static void take_options(struct CUlinkState_st *st, unsigned int n, const CUjit_option *options,
                         void **values)
{
    for (unsigned int i = 0; options && values && i < n; i++) {
        switch (options[i]) {
        case CU_JIT_INFO_LOG_BUFFER: st->logs[0].buf = values[i]; break;
        case CU_JIT_ERROR_LOG_BUFFER: st->logs[1].buf = values[i]; break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: {
            struct log_target *t = &st->logs[options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
            t->cap = (size_t)(uintptr_t)values[i];
            t->size_value = &values[i];
            break;
        }
        case CU_JIT_LOG_VERBOSE:
            if (values[i])
                st->flags |= FLYT_LINK_VERBOSE;
            break;
        default: break;
        }
    }
}

/* Copies the two NUL-terminated logs of a LINK reply (at text, len bytes)
 * into the program's buffers, cut to their capacity. */
static void deliver_logs(struct CUlinkState_st *st, const char *text, size_t len)
{
    for (int i = 0; i < 2; i++) {
        size_t n = strnlen(text, len);
        struct log_target *t = &st->logs[i];
        if (t->buf && t->cap) {
            size_t copy = n < t->cap - 1 ? n : t->cap - 1;
            memcpy(t->buf, text, copy);
            t->buf[copy] = '\0';
            if (t->size_value)
                *t->size_value = (void *)(uintptr_t)(copy + 1);
        }
        size_t used = n < len ? n + 1 : len;
        text += used;
        len -= used;
    }
}

FLYT_EXPORT CUresult cuLinkCreate_v2(unsigned int n, CUjit_option *options, void **values,
                                     CUlinkState *out)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *out = calloc(1, sizeof **out);
    if (*out == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    take_options(*out, n, options, values);
    return CUDA_SUCCESS;
}

/* A PTX input need not count its NUL; the server's JIT wants it. */
static size_t input_size(CUjitInputType type, const void *data, size_t size)
{
    if (type == CU_JIT_INPUT_PTX && size > 0 && ((const char *)data)[size - 1] != '\0')
        return strnlen(data, size) == size ? size + 1 : size;
    return size;
}

FLYT_EXPORT CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
                                      const char *name, unsigned int n, CUjit_option *options,
                                      void **values)
{
    (void)n, (void)options, (void)values;
    if (state == NULL || data == NULL || size == 0 || (unsigned)type >= CU_JIT_NUM_INPUT_TYPES)
        return CUDA_ERROR_INVALID_VALUE;
    if (state->count == FLYT_MAX_LINK_INPUTS || state->cubin != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    size_t stored = input_size(type, data, size);
    struct input *in = &state->inputs[state->count];
    in->name = strdup(name && *name ? name : "input");
    in->data = calloc(1, stored);
    if (in->name == NULL || in->data == NULL) {
        free(in->name);
        free(in->data);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(in->data, data, size);
    in->size = stored;
    in->type = (uint32_t)type;
    state->count++;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
                                      unsigned int n, CUjit_option *options, void **values)
{
    if (path == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return CUDA_ERROR_FILE_NOT_FOUND;
    CUresult r = CUDA_ERROR_INVALID_IMAGE;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *data = size > 0 && (uint64_t)size <= FLYT_MAX_FATBIN ? malloc((size_t)size) : NULL;
    if (data && fseek(f, 0, SEEK_SET) == 0 && fread(data, 1, (size_t)size, f) == (size_t)size)
        r = cuLinkAddData_v2(state, type, data, (size_t)size, path, n, options, values);
    free(data);
    fclose(f);
    return r;
}

FLYT_EXPORT CUresult cuLinkComplete(CUlinkState state, void **cubin_out, size_t *size)
{
    if (state == NULL || cubin_out == NULL || size == NULL || state->count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t total = 0;
    struct iovec iov[3 * FLYT_MAX_LINK_INPUTS];
    flyt_link_input heads[FLYT_MAX_LINK_INPUTS];
    for (uint32_t i = 0; i < state->count; i++) {
        const struct input *in = &state->inputs[i];
        heads[i] = (flyt_link_input){.type = in->type, .name_len = (uint32_t)strlen(in->name) + 1,
                                     .size = in->size};
        iov[3 * i] = (struct iovec){&heads[i], sizeof heads[i]};
        iov[3 * i + 1] = (struct iovec){in->name, heads[i].name_len};
        iov[3 * i + 2] = (struct iovec){in->data, in->size};
        total += sizeof heads[i] + heads[i].name_len + in->size;
    }
    if (total > FLYT_MAX_FATBIN)
        return CUDA_ERROR_INVALID_VALUE;
    /* one buffer: the connection sends a handful of pieces per message */
    char *data = malloc(total);
    const size_t out_max = FLYT_MAX_FATBIN + 2 * FLYT_LINK_LOG;
    char *out = malloc(out_max);
    if (data == NULL || out == NULL) {
        free(data);
        free(out);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t at = 0;
    for (uint32_t i = 0; i < 3 * state->count; i++) {
        memcpy(data + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    flyt_req_link req = {.input_count = state->count, .flags = state->flags, .total_bytes = total};
    struct iovec piece = {data, total};
    flyt_rep_u64 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep, .data = out, .data_max = out_max};
    CUresult r = flyt_call(FLYT_OP_LINK, &req, sizeof req, &piece, 1, &sink);
    free(data);
    size_t cubin_size = rep.value <= sink.data_got ? (size_t)rep.value : 0;
    deliver_logs(state, out + cubin_size, sink.data_got - cubin_size); /* on failure too */
    if (r == CUDA_SUCCESS && (rep.value > sink.data_got || cubin_size == 0))
        r = CUDA_ERROR_UNKNOWN;
    void *cubin = r == CUDA_SUCCESS ? realloc(out, cubin_size) : NULL; /* the logs go */
    if (cubin == NULL) {
        free(out);
        return r == CUDA_SUCCESS ? CUDA_ERROR_OUT_OF_MEMORY : r;
    }
    state->cubin = cubin;
    *cubin_out = cubin;
    *size = cubin_size;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuLinkDestroy(CUlinkState state)
{
    if (state == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    for (uint32_t i = 0; i < state->count; i++) {
        free(state->inputs[i].name);
        free(state->inputs[i].data);
    }
    free(state->cubin);
    free(state);
    return CUDA_SUCCESS;
}

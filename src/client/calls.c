/*
 * The plain driver calls of calls.api: their exports are generated
 * (flyt_calls_client.c) and end here, in one message of the CALL op.
 */
#include "client.h"

#include <string.h>

CUresult flyt_call_func_arg(struct flyt_generic_call *call, int i, const void *handle)
{
    struct flyt_function *f;
    uint64_t id = 0;
    call->result = flyt_function_use(handle, &f, &id);
    call->args[i] = id;
    return call->result;
}

CUresult flyt_generic_call_send(struct flyt_generic_call *call)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if ((call->in_size && call->in == NULL) || (call->out_size && call->out == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_call req = {.id = call->id, .in_size = (uint32_t)call->in_size};
    _Static_assert(sizeof req.args == sizeof call->args, "call arguments");
    memcpy(req.args, call->args, sizeof req.args);
    struct iovec in = {(void *)call->in, call->in_size};
    if (call->async)
        return flyt_send_async(FLYT_OP_CALL, &req, sizeof req, &in, call->in_size ? 1 : 0);
    flyt_rep_call rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep, .data = call->out,
                                   .data_max = call->out_size};
    r = flyt_call(FLYT_OP_CALL, &req, sizeof req, &in, call->in_size ? 1 : 0, &sink);
    if (r == CUDA_SUCCESS && sink.data_got != call->out_size)
        r = CUDA_ERROR_UNKNOWN;
    return r;
}

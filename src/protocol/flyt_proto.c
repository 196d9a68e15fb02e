/* The op table, generated from flyt_ops.def, and request-header validation. */
#include "flyt_proto.h"

#include <assert.h>

static_assert(sizeof(struct flyt_frame_hdr) == 16, "frame header is 16 bytes");
static_assert(sizeof(struct flyt_reply) == 8, "reply header is 8 bytes");
static_assert(sizeof(flyt_req_launch) == 56, "launch request layout");
static_assert(sizeof(flyt_launch_attr) == 72, "launch attribute layout");
static_assert(sizeof(flyt_req_memcpy_3d) == 16 + 2 * 48 + 24, "3D copy layout");
static_assert(sizeof(flyt_req_array_create) == 40, "array create layout");
static_assert(sizeof(flyt_req_array_copy) == 8 + 2 * 64 + 24, "array copy layout");
static_assert(sizeof(flyt_req_tex_create) == 56 + 56 + 48, "texture create layout");

static const struct flyt_op_info op_table[FLYT_OP_MAX] = {
#define FLYT_OP(name, num, req, rep, fl) \
    [num] = {#name, (uint32_t)sizeof(req), (uint32_t)sizeof(rep), (fl)},
#include "flyt_ops.def"
#undef FLYT_OP
};

const struct flyt_op_info *flyt_op_info(unsigned op)
{
    if (op >= FLYT_OP_MAX || op_table[op].name == NULL)
        return NULL;
    return &op_table[op];
}

const char *flyt_op_name(unsigned op)
{
    if (op == FLYT_OP_CALLBACK)
        return "CALLBACK";
    if (op == FLYT_OP_OUTPUT)
        return "OUTPUT";
    if (op == FLYT_OP_SHARE_CHANGED)
        return "SHARE_CHANGED";
    const struct flyt_op_info *info = flyt_op_info(op);
    return info ? info->name : "UNKNOWN";
}

const char *flyt_check_request(const struct flyt_frame_hdr *h)
{
    const struct flyt_op_info *info = flyt_op_info(h->op);
    if (info == NULL)
        return "unknown op";
    if (h->flags & ~FLYT_F_NOREPLY)
        return "unknown frame flags";
    if ((h->flags & FLYT_F_NOREPLY) && !(info->flags & FLYT_OPF_ASYNC))
        return "op cannot be sent without reply";
    if (h->length < info->req_size)
        return "payload shorter than the op's request";
    if (!(info->flags & FLYT_OPF_DATA) && h->length != info->req_size)
        return "op takes no trailing data";
    if (h->length > FLYT_MAX_PAYLOAD)
        return "payload over limit";
    return NULL;
}

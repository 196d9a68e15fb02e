/*
 * The plain driver calls of calls.api as the server sees them: what each
 * parameter is, so that handle_CALL checks and translates it before any
 * backend runs the call (gen_calls.py writes the table).
 */
#ifndef FLYT_SERVER_CALLS_H
#define FLYT_SERVER_CALLS_H

#include <stdint.h>

#include "flyt_calls.h"
#include "flyt_proto.h"

enum flyt_arg_kind {
    FLYT_ARG_SCALAR = 1, /* a number, passed as it came */
    FLYT_ARG_DPTR,       /* a device address: the driver checks it */
    FLYT_ARG_STREAM,     /* a stream id of the session */
    FLYT_ARG_EVENT,      /* an event id of the session */
    FLYT_ARG_FUNC,       /* a function id of the session */
    FLYT_ARG_DEVICE,     /* the session's device, which is ordinal 0 */
    FLYT_ARG_CTX,        /* the session's context, whatever the client named */
    FLYT_ARG_IN,         /* the pointee that followed the request */
    FLYT_ARG_OUT,        /* the pointee the reply carries back */
    FLYT_ARG_GRAPH,      /* a graph id of the session */
    FLYT_ARG_GEXEC,      /* an executable graph id of the session */
    FLYT_ARG_GNODE,      /* a graph node id of the session */
    FLYT_ARG_USEROBJ,    /* a user object id of the session */
};

struct flyt_call_desc {
    const char *symbol; /* the driver symbol the backend calls */
    uint8_t     nargs;
    uint8_t     kinds[FLYT_CALL_MAX_ARGS];
    uint32_t    in_size, out_size;
    uint8_t     async;  /* may come without a reply */
};

/* NULL for an id no call has. */
const struct flyt_call_desc *flyt_call_desc(uint32_t id);

#endif

/*
 * AUTH: session-token admission. A standalone server (no session key) asks
 * for no token and accepts a client that sends one anyway.
 */
#include "session.h"

int handle_AUTH(flyt_session *s, flyt_call *c)
{
    const flyt_req_auth *r = c->req;
    char token[FLYT_MAX_TOKEN];
    if (r->token_len == 0 || r->token_len > FLYT_MAX_TOKEN)
        return flyt_violation(s, c, "token length %u out of range", r->token_len);
    int rc = flyt_expect_data(s, c, r->token_len);
    if (rc != FLYT_CONT)
        return rc;
    if (flyt_recv_data(s, c, token, r->token_len) != 0)
        return FLYT_END_IO;
    c->result = CUDA_SUCCESS;
    return FLYT_CONT;
}

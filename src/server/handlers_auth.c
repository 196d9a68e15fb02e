/*
 * AUTH: session-token admission (docs/api.md, "Session tokens").
 *
 * A server started with --session-id and --session-key-file answers HELLO
 * with FLYT_HELLO_AUTH_REQUIRED and opens the GPU only once a token verifies:
 * HMAC-SHA256 under the session key, for this session id, not expired
 * (flyt_session_token_verify compares in constant time). A token that does
 * not verify is answered CUDA_ERROR_NOT_PERMITTED, logged, and the session
 * ends. A standalone server (no session key) asks for no token and accepts a
 * client that sends one anyway.
 *
 * The key is read again from --session-key-file at each admission, so a
 * revocation (the node manager writing the key of the session's next token
 * epoch there) refuses every token issued before it from the next connection
 * on; connections already admitted carry on. A key file that cannot be read
 * refuses the client (never the key of before: it may be the revoked one).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "flyt_log.h"
#include "flyt_token.h"
#include "session.h"

/* The session key in force now: the key file's (read again), else the command line's. */
static int admission_key(const struct flyt_server_config *cfg, unsigned char *key, size_t cap,
                         size_t *len, char *why, size_t whylen)
{
    if (cfg->session_key_file)
        return flyt_session_key_file_read(cfg->session_key_file, key, cap, len, why, whylen);
    if (cfg->session_key_len > cap)
        return snprintf(why, whylen, "the session key is too long"), -1;
    memcpy(key, cfg->session_key, cfg->session_key_len);
    *len = cfg->session_key_len;
    return 0;
}

int handle_AUTH(flyt_session *s, flyt_call *c)
{
    const flyt_req_auth *r = c->req;
    char token[FLYT_MAX_TOKEN + 1];
    if (r->token_len == 0 || r->token_len > FLYT_MAX_TOKEN)
        return flyt_violation(s, c, "token length %u out of range", r->token_len);
    int rc = flyt_expect_data(s, c, r->token_len);
    if (rc != FLYT_CONT)
        return rc;
    if (flyt_recv_data(s, c, token, r->token_len) != 0)
        return FLYT_END_IO;
    token[r->token_len] = '\0';
    const struct flyt_server_config *cfg = s->cfg;
    if (!cfg->session_id || s->admitted) {
        c->result = CUDA_SUCCESS;
        return FLYT_CONT;
    }

    char why[1400] = "";
    unsigned char key[128];
    size_t keylen = 0;
    int no_key = admission_key(cfg, key, sizeof key, &keylen, why, sizeof why) != 0;
    if (!no_key && strlen(token) != r->token_len)
        snprintf(why, sizeof why, "the token holds a NUL byte");
    else if (!no_key)
        flyt_session_token_verify(key, keylen, token, cfg->session_id, (long long)time(NULL),
                                  why, sizeof why);
    explicit_bzero(key, sizeof key);
    if (why[0]) {
        flyt_error("admission refused for %s: %s (session %s); ending session", s->peer, why,
                   cfg->session_id);
        flyt_reply(s, c, CUDA_ERROR_NOT_PERMITTED, NULL, 0);
        return FLYT_END_AUTH;
    }

    if (flyt_session_admit(s) != 0) {
        flyt_reply(s, c, CUDA_ERROR_NOT_PERMITTED, NULL, 0);
        return FLYT_END_AUTH;
    }
    char err[512] = "";
    int32_t result = flyt_session_open_backend(s, err, sizeof err);
    if (result != CUDA_SUCCESS) {
        flyt_error("%s", err);
        if (flyt_reply(s, c, result, NULL, 0) != 0)
            return FLYT_END_IO;
        return FLYT_END_BACKEND;
    }
    flyt_info("session %s admitted for %s", cfg->session_id, s->peer);
    flyt_session_stream_starts(s);
    c->result = CUDA_SUCCESS;
    return FLYT_CONT;
}

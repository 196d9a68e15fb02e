/* A daemon's own API token (the node manager's node token, the client manager's VM
 * token), kept in its token file and read again without a restart: on SIGHUP and when
 * the cluster manager answers 401 (docs/api.md, "Rotating and revoking tokens"). So an
 * operator rotates a token by writing the new one into the file: calls made with the old
 * one keep working through the grace period, and the first call refused after it is made
 * again at once with the new one. Thread-safe. */
#ifndef FLYT_CRED_H
#define FLYT_CRED_H

#include "flyt_http.h"
#include "flyt_token.h"

#include <pthread.h>

struct flyt_cred {
    pthread_mutex_t lock;
    int lock_made;
    const char *what;            /* the config key, for messages: "node_token_file" */
    char path[4096];
    unsigned refused;            /* mode bits refused (flyt_secret_open) */
    size_t min_len;
    flyt_token_line token;
    long long reloads;           /* times the file gave a new token */
};

/* Reads the file the first time: 0, or -1 with why. */
int flyt_cred_init(struct flyt_cred *c, const char *what, const char *path, unsigned refused,
                   size_t min_len, char *why, size_t whylen);
/* Reads the file again: 1 when it holds another token now, 0 when the same, -1 when it
 * cannot be read or holds none (the token in use is kept; why says so). */
int flyt_cred_reload(struct flyt_cred *c, char *why, size_t whylen);
/* flyt_cred_reload, logged (SIGHUP). */
void flyt_cred_reload_logged(struct flyt_cred *c);
/* A copy of the token in use. */
void flyt_cred_get(struct flyt_cred *c, char *out, size_t cap);
/* flyt_http_call_timeout with the token in use; when the answer is 401, the file is read
 * again and, when it holds a new token, the call is made once more with it. */
int flyt_cred_call(struct flyt_cred *c, const char *method, const char *url, json_t *body,
                   long timeout_ms, long *status, json_t **answer, char *err, size_t errlen);

#endif

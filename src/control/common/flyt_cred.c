/* A daemon's own API token, read again on SIGHUP and on a 401: see flyt_cred.h. */
#include "flyt_cred.h"

#include "flyt_log.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

int flyt_cred_init(struct flyt_cred *c, const char *what, const char *path, unsigned refused,
                   size_t min_len, char *why, size_t whylen)
{
    if (!c->lock_made) {
        pthread_mutex_init(&c->lock, NULL);
        c->lock_made = 1;
    }
    c->what = what;
    snprintf(c->path, sizeof c->path, "%s", path);
    c->refused = refused;
    c->min_len = min_len;
    c->token[0] = '\0';
    c->reloads = 0;
    return flyt_cred_reload(c, why, whylen) < 0 ? -1 : 0;
}

int flyt_cred_reload(struct flyt_cred *c, char *why, size_t whylen)
{
    flyt_token_line tok[1];
    if (flyt_token_file_read(c->path, c->refused, c->min_len, tok, 1, why, whylen) < 0)
        return -1;
    pthread_mutex_lock(&c->lock);
    int changed = strcmp(tok[0], c->token) != 0;
    if (changed) {
        snprintf(c->token, sizeof c->token, "%s", tok[0]);
        c->reloads++;
    }
    pthread_mutex_unlock(&c->lock);
    OPENSSL_cleanse(tok, sizeof tok);
    return changed;
}

void flyt_cred_reload_logged(struct flyt_cred *c)
{
    char why[4400];
    int rc = flyt_cred_reload(c, why, sizeof why);
    if (rc < 0)
        flyt_error("%s: %s; keeping the token in use", c->what, why);
    else
        flyt_info("%s %s: %s", c->what, c->path,
                  rc ? "a new token, in use from now on" : "the token is unchanged");
}

void flyt_cred_get(struct flyt_cred *c, char *out, size_t cap)
{
    pthread_mutex_lock(&c->lock);
    snprintf(out, cap, "%s", c->token);
    pthread_mutex_unlock(&c->lock);
}

int flyt_cred_call(struct flyt_cred *c, const char *method, const char *url, json_t *body,
                   long timeout_ms, long *status, json_t **answer, char *err, size_t errlen)
{
    flyt_token_line tok;
    flyt_cred_get(c, tok, sizeof tok);
    int rc = flyt_http_call_timeout(method, url, tok, body, timeout_ms, status, answer, err,
                                    errlen);
    char why[4400];
    if (rc == 0 && *status == 401 && flyt_cred_reload(c, why, sizeof why) == 1) {
        flyt_info("%s: the cluster manager refused the token; the file holds a new one: "
                  "calling again with it", c->what);
        if (answer) {
            json_decref(*answer);
            *answer = NULL;
        }
        flyt_cred_get(c, tok, sizeof tok);
        rc = flyt_http_call_timeout(method, url, tok, body, timeout_ms, status, answer, err,
                                    errlen);
    }
    OPENSSL_cleanse(tok, sizeof tok);
    return rc;
}

/* The client manager's calls to the cluster manager (docs/api.md, "VM"), with the VM
 * token. Each call is one attempt; callers decide about retries from the outcome. */
#include "cmgr.h"

#include "flyt_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum cluster_outcome classify(int rc, long status)
{
    if (rc < 0 || status >= 500)
        return CLUSTER_RETRY;
    if (status >= 200 && status < 300)
        return CLUSTER_OK;
    if (status == 404 || status == 409)
        return CLUSTER_GONE;
    return CLUSTER_REFUSED;
}

/* A value relayed to the client library must fit its line protocol: printable, no spaces. */
static int plain(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return 0;
    return 1;
}

/* Session ids go into URL paths: only [A-Za-z0-9._-]. */
static int id_ok(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

static int take(char *dst, size_t cap, json_t *obj, const char *key)
{
    const char *v = json_string_value(json_object_get(obj, key));
    if (v == NULL || !plain(v, cap - 1))
        return -1;
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* POST body (taken) to url with the VM token: the outcome, the answer in *ans, the status
 * in *status (0: no answer). */
static enum cluster_outcome post(const struct cmgr_config *c, const char *url, json_t *body,
                                 long timeout_ms, json_t **ans, long *status, char *err,
                                 size_t errlen)
{
    *status = 0;
    *ans = NULL;
    int rc = flyt_cred_call(c->vm_cred, "POST", url, body, timeout_ms, status, ans, err, errlen);
    json_decref(body);
    return classify(rc, *status);
}

enum cluster_outcome cluster_session_create(const struct cmgr_config *c, pid_t pid, const char *process,
                                  long timeout_ms, struct cluster_session *out, char *err,
                                  size_t errlen)
{
    char url[640];
    snprintf(url, sizeof url, "%s/v1/sessions", c->cluster_url);
    json_t *body = json_pack("{s:I}", "pid", (json_int_t)pid);
    if (process && *process)
        json_object_set_new(body, "process", json_string(process));
    long status;
    json_t *ans;
    enum cluster_outcome o = post(c, url, body, timeout_ms, &ans, &status, err, errlen);
    if (o == CLUSTER_GONE) /* 409 no_capacity / conflict: not a vanished session here */
        o = CLUSTER_REFUSED;
    if (o == CLUSTER_OK) {
        json_t *s = json_object_get(ans, "session");
        memset(out, 0, sizeof *out);
        if (!json_is_object(s) || take(out->id, sizeof out->id, s, "id") < 0 ||
            take(out->endpoint, sizeof out->endpoint, s, "endpoint") < 0 ||
            take(out->token, sizeof out->token, ans, "token") < 0 || !id_ok(out->id)) {
            snprintf(err, errlen, "the cluster manager's answer lacks a well-formed session id, "
                     "endpoint or token");
            /* a session may exist now: the caller cannot know its id to release it; the
             * cluster manager ends it when no alive ping comes */
            o = CLUSTER_REFUSED;
        } else {
            const char *vm = json_string_value(json_object_get(s, "vm_id"));
            snprintf(out->vm_id, sizeof out->vm_id, "%s", vm ? vm : "");
        }
    }
    json_decref(ans);
    return o;
}

static enum cluster_outcome session_call(const struct cmgr_config *c, const char *method,
                                    const char *id, const char *suffix, long timeout_ms,
                                    char *err, size_t errlen)
{
    char url[768];
    snprintf(url, sizeof url, "%s/v1/sessions/%s%s", c->cluster_url, id, suffix);
    long status = 0;
    int rc = flyt_cred_call(c->vm_cred, method, url, NULL, timeout_ms, &status, NULL,
                                    err, errlen);
    return classify(rc, status);
}

enum cluster_outcome cluster_session_release(const struct cmgr_config *c, const char *id, long timeout_ms,
                                   char *err, size_t errlen)
{
    return session_call(c, "DELETE", id, "", timeout_ms, err, errlen);
}

enum cluster_outcome cluster_session_alive(const struct cmgr_config *c, const char *id, long timeout_ms,
                                 char *err, size_t errlen)
{
    return session_call(c, "POST", id, "/alive", timeout_ms, err, errlen);
}

enum cluster_outcome cluster_sessions_live(const struct cmgr_config *c, long timeout_ms,
                                           struct cluster_live **out, int *n, char *err,
                                           size_t errlen)
{
    char url[640];
    snprintf(url, sizeof url, "%s/v1/sessions?state=live", c->cluster_url);
    long status = 0;
    json_t *ans = NULL;
    int rc = flyt_cred_call(c->vm_cred, "GET", url, NULL, timeout_ms, &status, &ans, err,
                                    errlen);
    enum cluster_outcome o = classify(rc, status);
    json_t *arr = json_object_get(ans, "sessions");
    *out = NULL;
    *n = 0;
    if (o == CLUSTER_OK && !json_is_array(arr)) {
        snprintf(err, errlen, "the cluster manager's session list lacks \"sessions\"");
        o = CLUSTER_REFUSED;
    }
    if (o == CLUSTER_OK && (*out = calloc(json_array_size(arr) + 1, sizeof **out)) == NULL) {
        snprintf(err, errlen, "out of memory");
        o = CLUSTER_RETRY;
    }
    size_t i;
    json_t *s;
    if (o == CLUSTER_OK)
        json_array_foreach(arr, i, s) {
            struct cluster_live *l = &(*out)[*n];
            const char *state = json_string_value(json_object_get(s, "state"));
            if (take(l->id, sizeof l->id, s, "id") < 0 || !id_ok(l->id) || !state)
                continue;
            l->pid = json_integer_value(json_object_get(s, "pid"));
            l->active = strcmp(state, "active") == 0;
            ++*n;
        }
    json_decref(ans);
    return o == CLUSTER_GONE ? CLUSTER_REFUSED : o;
}

/* The cluster manager's error message (or the call's error) into err. */
static void api_message(json_t *ans, long status, char *err, size_t errlen)
{
    const char *m = json_string_value(json_object_get(json_object_get(ans, "error"), "message"));
    if (m)
        snprintf(err, errlen, "%s", m);
    else if (status)
        snprintf(err, errlen, "the cluster manager answered HTTP %ld", status);
}

enum cluster_outcome cluster_share_request(const struct cmgr_config *c, const char *sm,
                                           const char *memory, const char *reason,
                                           long timeout_ms, struct cluster_share *out,
                                           char *err, size_t errlen)
{
    char url[768];
    snprintf(url, sizeof url, "%s/v1/vms/%s/requests", c->cluster_url, c->vm_id);
    json_t *body = json_object();
    if (sm[0])
        json_object_set_new(body, "sm", json_string(sm));
    if (memory[0])
        json_object_set_new(body, "memory", json_string(memory));
    if (reason[0])
        json_object_set_new(body, "reason", json_string(reason));
    long status;
    json_t *ans;
    enum cluster_outcome o = post(c, url, body, timeout_ms, &ans, &status, err, errlen);
    json_t *q = json_object_get(ans, "request"), *share = json_object_get(ans, "share");
    memset(out, 0, sizeof *out);
    if (o == CLUSTER_OK && (take(out->state, sizeof out->state, q, "state") < 0 ||
                            take(out->request, sizeof out->request, q, "id") < 0)) {
        snprintf(err, errlen, "the cluster manager's answer lacks the request's state or id");
        o = CLUSTER_REFUSED;
    } else if (o == CLUSTER_OK) {
        out->sm = json_integer_value(json_object_get(share, "sm_count"));
        out->memory = json_integer_value(json_object_get(share, "memory_quota"));
    } else if (status) {
        api_message(ans, status, err, errlen);
    }
    json_decref(ans);
    return o == CLUSTER_GONE ? CLUSTER_REFUSED : o;
}

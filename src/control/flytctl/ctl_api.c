/* flytctl: calls to the cluster manager, their errors and exit codes. */
#include "ctl.h"

#include "flyt_http.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>

static void encode(const char *in, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 < outlen; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~') {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = 0;
}

void ctl_path(char *out, size_t outlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t o = 0;
    out[0] = 0;
    for (const char *f = fmt; *f && o + 1 < outlen; f++) {
        if (f[0] == '%' && f[1] == 's') {
            char enc[1024];
            encode(va_arg(ap, const char *), enc, sizeof enc);
            int n = snprintf(out + o, outlen - o, "%s", enc);
            o += (size_t)n < outlen - o ? (size_t)n : outlen - o - 1;
            f++;
        } else {
            out[o++] = *f;
            out[o] = 0;
        }
    }
    va_end(ap);
}

void ctl_path_query(char *path, size_t pathlen, const char *name, const char *value)
{
    char enc[1024];
    encode(value, enc, sizeof enc);
    size_t n = strlen(path);
    snprintf(path + n, pathlen - n, "%c%s=%s", strchr(path, '?') ? '&' : '?', name, enc);
}

static int load_token(struct ctl *c)
{
    if (c->token_loaded)
        return 0;
    if (!c->token_file[0]) {
        fprintf(stderr, "flytctl: no operator token: give --token-file FILE, set "
                        "FLYT_OPERATOR_TOKEN_FILE, or set token_file in %s\n",
                c->config_path[0] ? c->config_path : "~/.config/flyt/flytctl.conf");
        return CTL_ECONN;
    }
    FILE *f = fopen(c->token_file, "r");
    if (!f) {
        fprintf(stderr, "flytctl: cannot read the operator token file %s (%s): %s\n",
                c->token_file, c->token_from, strerror(errno));
        return CTL_ECONN;
    }
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *s = buf;
    while (isspace((unsigned char)*s))
        s++;
    size_t len = strlen(s);
    while (len && isspace((unsigned char)s[len - 1]))
        s[--len] = 0;
    const char *why = NULL;
    if (!len)
        why = "it is empty";
    else if (len >= sizeof c->token)
        why = "the token is too long";
    for (size_t i = 0; !why && i < len; i++)
        if (!isgraph((unsigned char)s[i]))
            why = "the token must be one word of printable characters";
    if (why) {
        fprintf(stderr, "flytctl: bad operator token file %s (%s): %s\n", c->token_file,
                c->token_from, why);
        return CTL_ECONN;
    }
    memcpy(c->token, s, len + 1);
    c->token_loaded = 1;
    return 0;
}

int ctl_call(struct ctl *c, const char *method, const char *path, json_t *body, int auth,
             json_t **answer)
{
    *answer = NULL;
    c->last_error[0] = 0;
    if (auth) {
        int rc = load_token(c);
        if (rc)
            return rc;
    }
    char url[4096], err[2048];
    snprintf(url, sizeof url, "%s%s", c->server, path);
    long status = 0;
    json_t *ans = NULL;
    if (flyt_http_call_timeout(method, url, auth ? c->token : NULL, body, c->timeout_ms, &status,
                               &ans, err, sizeof err) < 0) {
        if (status == 0)
            fprintf(stderr, "flytctl: cannot reach the cluster manager at %s (from %s): %s\n",
                    c->server, c->server_from, err);
        else
            fprintf(stderr, "flytctl: %s (from %s) did not answer like a Flyt cluster manager: "
                            "%s\n", c->server, c->server_from, err);
        snprintf(c->last_error, sizeof c->last_error, "unreachable");
        return CTL_ECONN;
    }
    if (status >= 200 && status < 300) {
        *answer = ans;
        return CTL_OK;
    }
    json_t *e = json_object_get(ans, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!code || !msg) {   /* not a Flyt error body: a proxy or another server */
        fprintf(stderr, "flytctl: %s (from %s) answered %s %s with HTTP %ld and no Flyt error "
                        "(is it a Flyt cluster manager?): %s\n",
                c->server, c->server_from, method, path, status, err);
        snprintf(c->last_error, sizeof c->last_error, "http_%ld", status);
        json_decref(ans);
        return status == 401 || status == 403 ? CTL_ECONN : CTL_EAPI;
    }
    snprintf(c->last_error, sizeof c->last_error, "%s", code);
    if (c->json) {
        ctl_print_json(ans);
        fflush(stdout);
    }
    int rc = CTL_EAPI;
    if (status == 401) {
        fprintf(stderr, "flytctl: authentication failed: %s: %s (HTTP 401)\n"
                        "  the cluster manager at %s refused the operator token from %s (%s)\n",
                code, msg, c->server, c->token_file, c->token_from);
        rc = CTL_ECONN;
    } else if (status == 403) {
        fprintf(stderr, "flytctl: not allowed: %s: %s (HTTP 403)\n"
                        "  the token in %s (%s) is not the operator token\n",
                code, msg, c->token_file, c->token_from);
        rc = CTL_ECONN;
    } else {
        fprintf(stderr, "flytctl: %s: %s (HTTP %ld)\n", code, msg, status);
    }
    json_decref(ans);
    return rc;
}

int ctl_call_bytes(struct ctl *c, const char *method, const char *path, const void *body,
                   size_t len, long timeout_ms, char **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    c->last_error[0] = 0;
    int rc = load_token(c);
    if (rc)
        return rc;
    char url[4096], err[2048];
    snprintf(url, sizeof url, "%s%s", c->server, path);
    long status = 0;
    if (flyt_http_call_bytes(method, url, c->token, body, len, timeout_ms, &status, out, outlen,
                             err, sizeof err) < 0) {
        fprintf(stderr, "flytctl: cannot reach the cluster manager at %s (from %s): %s\n",
                c->server, c->server_from, err);
        snprintf(c->last_error, sizeof c->last_error, "unreachable");
        return CTL_ECONN;
    }
    if (status >= 200 && status < 300)
        return CTL_OK;
    fprintf(stderr, "flytctl: %s\n", err);
    snprintf(c->last_error, sizeof c->last_error, "http_%ld", status);
    return status == 401 || status == 403 ? CTL_ECONN : CTL_EAPI;
}

int ctl_delete(struct ctl *c, const char *path, const char *done)
{
    json_t *ans;
    int rc = ctl_call(c, "DELETE", path, NULL, 1, &ans);
    if (rc)
        return rc;
    if (!c->json)
        printf("%s\n", done);
    else if (ans)
        ctl_print_json(ans);
    json_decref(ans);
    return CTL_OK;
}

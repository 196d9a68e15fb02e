/* The request format of fuzz_http.h: split, substituted, handled. */
#include "fuzz_http.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flyt_log.h"

#define MAX_QUERY 16
#define MAX_REMEMBERED 128

struct memory {
    char id[MAX_REMEMBERED], token[MAX_REMEMBERED];
};

/* text[0..len) with every "$ID" replaced by id; NUL-terminated, *out_len set. */
static char *substitute(const char *text, size_t len, const char *id, size_t *out_len)
{
    size_t idlen = strlen(id), cap = len + 1, n = 0;
    for (size_t i = 0; i + 3 <= len; i++)
        if (memcmp(text + i, "$ID", 3) == 0)
            cap += idlen;
    char *out = malloc(cap);
    if (!out)
        abort();
    for (size_t i = 0; i < len;) {
        if (i + 3 <= len && memcmp(text + i, "$ID", 3) == 0) {
            memcpy(out + n, id, idlen);
            n += idlen;
            i += 3;
        } else {
            out[n++] = text[i++];
        }
    }
    out[n] = '\0';
    *out_len = n;
    return out;
}

/* Splits "a=1&b" into name, value pairs (in place); NULL-terminated. */
static void split_query(char *q, const char **pairs)
{
    int n = 0;
    for (char *save = NULL, *one = strtok_r(q, "&", &save); one && n < 2 * MAX_QUERY;
         one = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(one, '=');
        if (eq)
            *eq++ = '\0';
        pairs[n++] = one;
        pairs[n++] = eq ? eq : "";
    }
    pairs[n] = NULL;
}

static const char *role_token(const char *const *roles, const char *auth, const struct memory *m)
{
    if (!auth || !*auth || strcmp(auth, "-") == 0)
        return NULL;
    if (strcmp(auth, "new") == 0)
        return m->token;
    for (size_t i = 0; roles && roles[i] && roles[i + 1]; i += 2)
        if (strcmp(roles[i], auth) == 0)
            return roles[i + 1];
    return auth;
}

static void remember_string(json_t *v, char *out)
{
    const char *s = json_string_value(v);
    if (s && strlen(s) < MAX_REMEMBERED)
        strcpy(out, s);
}

/* The answer's "token" and "id" (top level or one object down) for later requests. */
static void remember(const struct flyt_http_response *res, struct memory *m)
{
    if (!res->body || !res->len)
        return;
    json_t *j = json_loadb(res->body, res->len, 0, NULL);
    remember_string(json_object_get(j, "token"), m->token);
    remember_string(json_object_get(j, "id"), m->id);
    const char *key;
    json_t *v;
    json_object_foreach(json_is_object(j) ? j : NULL, key, v)
        remember_string(json_object_get(v, "id"), m->id);
    json_decref(j);
}

/* One block: request line, answer lines, body. */
static void handle_block(const struct fuzz_http_target *t, const char *b, size_t len,
                         struct memory *m)
{
    const char *nl = memchr(b, '\n', len);
    size_t line_len = nl ? (size_t)(nl - b) : len, sub_len;
    char *line = substitute(b, line_len, m->id, &sub_len);
    size_t pos = nl ? line_len + 1 : len;
    while (pos < len && b[pos] == '<') { /* what the called daemon answers */
        const char *end = memchr(b + pos, '\n', len - pos);
        size_t alen = end ? (size_t)(end - (b + pos)) : len - pos;
        char *answer = strndup(b + pos + 1, alen - 1);
        if (!answer)
            abort();
        if (t->answer_line)
            t->answer_line(answer);
        free(answer);
        pos += alen + (end != NULL);
    }
    size_t body_len;
    char *body = substitute(b + pos, len - pos, m->id, &body_len);

    char *save = NULL;
    char *method = strtok_r(line, " ", &save);
    char *target = strtok_r(NULL, " ", &save);
    char *auth = strtok_r(NULL, "", &save);
    if (method && target) {
        const char *query[2 * MAX_QUERY + 1] = {NULL};
        char *q = strchr(target, '?');
        if (q) {
            *q++ = '\0';
            split_query(q, query);
        }
        const char *token = role_token(t->roles, auth, m);
        char header[600];
        const char *headers[3] = {NULL};
        if (token) {
            /* a role's token as a bearer; anything else as the header itself */
            int literal = token == auth;
            snprintf(header, sizeof header, "%s%s", literal ? "" : "Bearer ", token);
            headers[0] = "Authorization";
            headers[1] = header;
        }
        struct flyt_http_response res = {0};
        flyt_http_handle(t->routes, t->ctx, method, target, query, headers, body, body_len, &res);
        if (getenv("FUZZ_HTTP_TRACE")) /* to see what a corpus entry does */
            fprintf(stderr, "%s %s -> %d %.*s\n", method, target, res.status, (int)res.len,
                    res.body ? res.body : "");
        remember(&res, m);
        free(res.body);
    }
    free(body);
    free(line);
}

void fuzz_http_run(const struct fuzz_http_target *t, const uint8_t *data, size_t size)
{
    struct memory m = {"", ""};
    const char *p = (const char *)data, *end = p + size;
    for (int n = 0; p < end && n < FUZZ_HTTP_MAX_REQUESTS; n++) {
        const char *sep = NULL;
        for (const char *s = p; s + 3 <= end && !sep; s++)
            if (s[0] == '\n' && s[1] == '%' && s[2] == '%' && (s + 3 == end || s[3] == '\n'))
                sep = s;
        const char *block_end = sep ? sep : end;
        handle_block(t, p, (size_t)(block_end - p), &m);
        p = sep ? (sep + 4 < end ? sep + 4 : end) : end;
    }
}

void fuzz_http_quiet_logs(const char *program)
{
    flyt_log_init(program, FLYT_LOG_ERROR);
    int quiet = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (quiet >= 0)
        flyt_log_set_fd(quiet);
}

/* The client-manager line protocol (flyt_cmgr_proto.h). */
#include "flyt_cmgr_proto.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[] = {"acquire", "release"};

const char *flyt_cmgr_op_name(enum flyt_cmgr_op op)
{
    return op_names[op];
}

int flyt_cmgr_field(const char *line, const char *key, char *out, size_t outlen)
{
    size_t kl = strlen(key);
    for (const char *p = line; *p;) {
        while (*p == ' ')
            p++;
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            const char *v = p + kl + 1;
            size_t n = strcmp(key, "message") == 0 ? strlen(v) : strcspn(v, " ");
            if (n >= outlen)
                return 0;
            memcpy(out, v, n);
            out[n] = '\0';
            return 1;
        }
        p += strcspn(p, " ");
    }
    return 0;
}

/* snprintf's length, or -1 when the text was cut */
static int fitted(int n, size_t outlen)
{
    return n >= 0 && (size_t)n < outlen ? n : -1;
}

int flyt_cmgr_format_request(char *out, size_t outlen, enum flyt_cmgr_op op, long pid)
{
    return fitted(snprintf(out, outlen, "op=%s pid=%ld\n", flyt_cmgr_op_name(op), pid), outlen);
}

int flyt_cmgr_parse_request(const char *line, enum flyt_cmgr_op *op, long *pid, char *err,
                            size_t errlen)
{
    char name[32], pidtext[32];
    if (!flyt_cmgr_field(line, "op", name, sizeof name)) {
        snprintf(err, errlen, "bad request: no op");
        return -1;
    }
    if (strcmp(name, "acquire") == 0) {
        *op = FLYT_CMGR_ACQUIRE;
    } else if (strcmp(name, "release") == 0) {
        *op = FLYT_CMGR_RELEASE;
    } else {
        snprintf(err, errlen, "bad request: unknown op \"%.31s\" (acquire, release)", name);
        return -1;
    }
    char *end = NULL;
    *pid = flyt_cmgr_field(line, "pid", pidtext, sizeof pidtext) ? strtol(pidtext, &end, 10) : -1;
    if (*pid <= 0 || *end != '\0' || *pid > INT_MAX) {
        snprintf(err, errlen, "bad request: pid missing or not a positive number");
        return -1;
    }
    return 0;
}

int flyt_cmgr_format_acquired(char *out, size_t outlen, const char *session,
                              const char *endpoint, const char *token)
{
    return fitted(snprintf(out, outlen, "status=ok session=%s endpoint=%s token=%s\n", session,
                           endpoint, token),
                  outlen);
}

int flyt_cmgr_format_error(char *out, size_t outlen, const char *message)
{
    int n = snprintf(out, outlen, "status=error message=%s", message);
    if (n < 0 || (size_t)n >= outlen - 1)
        n = (int)outlen - 2;
    for (int i = 0; i < n; i++) /* one line, printable */
        if ((unsigned char)out[i] < ' ' || (unsigned char)out[i] > '~')
            out[i] = ' ';
    out[n++] = '\n';
    out[n] = '\0';
    return n;
}

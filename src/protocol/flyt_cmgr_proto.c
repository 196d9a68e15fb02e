/* The client-manager line protocol (flyt_cmgr_proto.h). */
#include "flyt_cmgr_proto.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[] = {"acquire", "release", "request"};

const char *flyt_cmgr_op_name(enum flyt_cmgr_op op)
{
    return op_names[op];
}

/* Whether p starts a field whose value runs to the end of the line. */
static int to_end_field(const char *p)
{
    return strncmp(p, "message=", 8) == 0 || strncmp(p, "reason=", 7) == 0;
}

int flyt_cmgr_field(const char *line, const char *key, char *out, size_t outlen)
{
    size_t kl = strlen(key);
    for (const char *p = line; *p;) {
        while (*p == ' ')
            p++;
        if (to_end_field(p) && !(strncmp(p, key, kl) == 0 && p[kl] == '='))
            return 0; /* the rest of the line is that field's text */
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            const char *v = p + kl + 1;
            size_t n = to_end_field(p) ? strlen(v) : strcspn(v, " ");
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
    int found = 0;
    for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++)
        if (strcmp(name, op_names[i]) == 0)
            *op = (enum flyt_cmgr_op)i, found = 1;
    if (!found) {
        snprintf(err, errlen, "bad request: unknown op \"%.31s\" (acquire, release, request)",
                 name);
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

/* "+16", "-16", "48" (sm) or "+1GiB", "512MiB", "1.5GiB" (memory: digits first, a unit
 * after them): a sign, then what the cluster manager parses. */
static int amount_ok(const char *v, int memory)
{
    const char *p = v + (*v == '+' || *v == '-');
    size_t digits = strspn(p, "0123456789");
    if (digits == 0)
        return 0;
    if (!memory)
        return p[digits] == '\0' && digits <= 9;
    const char *unit = p + digits + strspn(p + digits, "0123456789.");
    return *unit && strspn(unit, "KMGTPEiBb") == strlen(unit);
}

/* Printable and one line (the reason runs to the end of the line). */
static int text_ok(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < ' ' || (unsigned char)*s > '~')
            return 0;
    return 1;
}

int flyt_cmgr_parse_share(const char *line, struct flyt_cmgr_share_ask *a, char *err,
                          size_t errlen)
{
    memset(a, 0, sizeof *a);
    char sm[64] = "", memory[64] = "";
    int has_sm = flyt_cmgr_field(line, "sm", sm, sizeof sm);
    int has_mem = flyt_cmgr_field(line, "memory", memory, sizeof memory);
    const char *why = !has_sm && !has_mem ? "give sm=+N|-N|N, memory=+SIZE|-SIZE|SIZE or both"
                      : has_sm && (strlen(sm) >= sizeof a->sm || !amount_ok(sm, 0))
                          ? "sm: expected +N, -N or N (SMs)"
                      : has_mem && (strlen(memory) >= sizeof a->memory || !amount_ok(memory, 1))
                          ? "memory: expected +SIZE, -SIZE or SIZE with a unit (e.g. +1GiB)"
                          : NULL;
    char reason[FLYT_CMGR_LINE_MAX] = "";
    if (!why && flyt_cmgr_field(line, "reason", reason, sizeof reason) &&
        (strlen(reason) >= sizeof a->reason || !text_ok(reason)))
        why = "reason: at most 255 printable characters";
    if (why) {
        snprintf(err, errlen, "bad request: %s", why);
        return -1;
    }
    memcpy(a->sm, sm, strlen(sm) + 1);
    memcpy(a->memory, memory, strlen(memory) + 1);
    memcpy(a->reason, reason, strlen(reason) + 1);
    return 0;
}

int flyt_cmgr_format_share_request(char *out, size_t outlen, long pid,
                                   const struct flyt_cmgr_share_ask *a)
{
    if ((!a->sm[0] && !a->memory[0]) || (a->sm[0] && !amount_ok(a->sm, 0)) ||
        (a->memory[0] && !amount_ok(a->memory, 1)) || !text_ok(a->reason))
        return -1;
    return fitted(snprintf(out, outlen, "op=request pid=%ld%s%s%s%s%s%s\n", pid,
                           a->sm[0] ? " sm=" : "", a->sm, a->memory[0] ? " memory=" : "",
                           a->memory, a->reason[0] ? " reason=" : "", a->reason),
                  outlen);
}

int flyt_cmgr_format_share_answer(char *out, size_t outlen, const char *state,
                                  const char *request, long long sm, long long memory)
{
    if (strchr(state, ' ') || strchr(request, ' ') || !text_ok(request))
        return -1;
    return fitted(snprintf(out, outlen, "status=ok state=%s request=%s sm=%lld memory=%lld\n",
                           state, request, sm, memory),
                  outlen);
}

/* flyt_share_request (flyt_share.h): one op=request exchange on the client manager's
 * socket, for this process. */
#include "flyt_share.h"

#include "flyt_cmgr_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_SOCKET "/run/flyt/client.sock"

static int timeout_seconds(void)
{
    const char *v = getenv("FLYT_CLIENT_MANAGER_TIMEOUT");
    long n = v ? strtol(v, NULL, 10) : 0;
    return n > 0 && n <= 86400 ? (int)n : 90;
}

/* "status=ok state=S request=ID sm=N memory=N" into ans; else its message. */
static int read_answer(const char *line, struct flyt_share_answer *ans)
{
    char status[16], sm[32], memory[32];
    if (!flyt_cmgr_field(line, "status", status, sizeof status)) {
        snprintf(ans->message, sizeof ans->message, "the client manager sent a malformed answer");
        return -1;
    }
    if (strcmp(status, "ok") != 0) {
        if (!flyt_cmgr_field(line, "message", ans->message, sizeof ans->message))
            snprintf(ans->message, sizeof ans->message, "refused, no reason given");
        return -1;
    }
    if (!flyt_cmgr_field(line, "state", ans->state, sizeof ans->state) ||
        !flyt_cmgr_field(line, "request", ans->request, sizeof ans->request) ||
        !flyt_cmgr_field(line, "sm", sm, sizeof sm) ||
        !flyt_cmgr_field(line, "memory", memory, sizeof memory)) {
        snprintf(ans->message, sizeof ans->message, "the client manager's answer lacks state, "
                 "request, sm or memory");
        return -1;
    }
    ans->sm = strtoll(sm, NULL, 10);
    ans->memory = strtoll(memory, NULL, 10);
    return 0;
}

int flyt_share_request(const char *socket, const char *sm, const char *memory,
                       const char *reason, struct flyt_share_answer *ans)
{
    struct flyt_cmgr_share_ask a;
    char line[FLYT_CMGR_LINE_MAX];
    memset(ans, 0, sizeof *ans);
    memset(&a, 0, sizeof a);
    if (!socket || !*socket)
        socket = getenv("FLYT_CLIENT_MANAGER");
    if (!socket || !*socket)
        socket = DEFAULT_SOCKET;
    if (strncmp(socket, "unix:", 5) == 0)
        socket += 5;
    snprintf(a.sm, sizeof a.sm, "%s", sm ? sm : "");
    snprintf(a.memory, sizeof a.memory, "%s", memory ? memory : "");
    snprintf(a.reason, sizeof a.reason, "%s", reason ? reason : "");
    if (flyt_cmgr_format_share_request(line, sizeof line, (long)getpid(), &a) < 0) {
        snprintf(ans->message, sizeof ans->message, "give sm as +N, -N or N and/or memory as "
                 "+SIZE, -SIZE or SIZE with a unit (e.g. +1GiB); a reason of one printable line");
        return -1;
    }
    if (flyt_cmgr_ask(socket, line, timeout_seconds(), line, sizeof line, ans->message,
                      sizeof ans->message) < 0)
        return -1;
    return read_answer(line, ans);
}

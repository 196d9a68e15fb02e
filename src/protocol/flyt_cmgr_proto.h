/* The line protocol between the client library and flyt-client-manager over its Unix
 * socket (docs/api.md, "flyt-client-manager <-> client library"), parsed and formatted
 * here only, for both sides:
 *   request  "op=acquire pid=N\n" | "op=release pid=N\n"
 *            | "op=request pid=N [sm=+16] [memory=+1GiB] [reason=TEXT]\n" (the VM's share;
 *            at least one of sm and memory; TEXT runs to the end of the line)
 *   answer   "status=ok session=ID endpoint=ADDR token=TOKEN\n" (acquire), "status=ok\n"
 *            (release), "status=ok state=granted|queued request=ID sm=N memory=N\n"
 *            (request: the share now), or "status=error message=TEXT\n" (TEXT runs to the
 *            end of the line)
 * Fields are space-separated key=value pairs; unknown keys are ignored. */
#ifndef FLYT_CMGR_PROTO_H
#define FLYT_CMGR_PROTO_H

#include <stddef.h>

#define FLYT_CMGR_LINE_MAX 4096   /* one line, its '\n' included */

enum flyt_cmgr_op { FLYT_CMGR_ACQUIRE, FLYT_CMGR_RELEASE, FLYT_CMGR_REQUEST };

/* "acquire" | "release" | "request" */
const char *flyt_cmgr_op_name(enum flyt_cmgr_op op);

/* Copies the value of key out of a line ("message" and "reason" run to the end of the
 * line, other values end at a space). 1 when present and it fits in outlen, else 0. */
int flyt_cmgr_field(const char *line, const char *key, char *out, size_t outlen);

/* A request line with its '\n'; its length, or -1 when it does not fit. */
int flyt_cmgr_format_request(char *out, size_t outlen, enum flyt_cmgr_op op, long pid);

/* A request line (without its '\n'): 0 with op and pid, or -1 with why it is refused. */
int flyt_cmgr_parse_request(const char *line, enum flyt_cmgr_op *op, long *pid, char *err,
                            size_t errlen);

/* The answer to an acquire, with its '\n'; its length, or -1 when it does not fit. */
int flyt_cmgr_format_acquired(char *out, size_t outlen, const char *session,
                              const char *endpoint, const char *token);

/* "status=error message=TEXT\n", cut to fit and made printable (it must stay one line);
 * its length. outlen is at least 2. */
int flyt_cmgr_format_error(char *out, size_t outlen, const char *message);

/* What op=request asks for the VM's share: SMs "+N", "-N" or "N"; memory "+SIZE", "-SIZE"
 * or "SIZE" with a unit ("+1GiB"); "" where not asked; reason: free text, may be "". */
struct flyt_cmgr_share_ask {
    char sm[16], memory[32], reason[256];
};

/* The share fields of an op=request line (without its '\n'): 0, or -1 with why. */
int flyt_cmgr_parse_share(const char *line, struct flyt_cmgr_share_ask *a, char *err,
                          size_t errlen);

/* An op=request line with its '\n'; its length, or -1 when it does not fit or a field is
 * malformed (what flyt_cmgr_parse_share would refuse). */
int flyt_cmgr_format_share_request(char *out, size_t outlen, long pid,
                                   const struct flyt_cmgr_share_ask *a);

/* The answer to op=request, with its '\n': state "granted" or "queued", the request's id,
 * the share now (SMs, bytes). Its length, or -1 when it does not fit or a word holds a
 * space. */
int flyt_cmgr_format_share_answer(char *out, size_t outlen, const char *state,
                                  const char *request, long long sm, long long memory);

/* One exchange with the client manager at socket path: sends request (one line with its
 * '\n'), reads one answer line into answer (without its '\n'; answer may be request's
 * buffer), within timeout_s seconds. 0, or -1 with why (naming path). */
int flyt_cmgr_ask(const char *path, const char *request, int timeout_s, char *answer,
                  size_t cap, char *why, size_t whylen);

#define FLYT_CMGR_RELEASED "status=ok\n"

#endif

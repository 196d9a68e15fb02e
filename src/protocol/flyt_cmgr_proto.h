/* The line protocol between the client library and flyt-client-manager over its Unix
 * socket (docs/api.md, "flyt-client-manager <-> client library"), parsed and formatted
 * here only, for both sides:
 *   request  "op=acquire pid=N\n" | "op=release pid=N\n"
 *   answer   "status=ok session=ID endpoint=ADDR token=TOKEN\n" (acquire), "status=ok\n"
 *            (release), or "status=error message=TEXT\n" (TEXT runs to the end of line)
 * Fields are space-separated key=value pairs; unknown keys are ignored. */
#ifndef FLYT_CMGR_PROTO_H
#define FLYT_CMGR_PROTO_H

#include <stddef.h>

#define FLYT_CMGR_LINE_MAX 4096   /* one line, its '\n' included */

enum flyt_cmgr_op { FLYT_CMGR_ACQUIRE, FLYT_CMGR_RELEASE };

/* "acquire" | "release" */
const char *flyt_cmgr_op_name(enum flyt_cmgr_op op);

/* Copies the value of key out of a line ("message" runs to the end of the line, other
 * values end at a space). 1 when present and it fits in outlen, else 0. */
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

#define FLYT_CMGR_RELEASED "status=ok\n"

#endif

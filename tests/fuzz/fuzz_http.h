/*
 * The input of the HTTP API fuzz targets: requests as text, handled in
 * process through flyt_http_handle (no socket). Requests are separated by a
 * line "%%"; each is
 *
 *   METHOD PATH[?NAME=VALUE&...] [AUTH]
 *   <STATUS BODY          (any number: what a called daemon answers next)
 *   BODY...               (the JSON body; the rest of the block)
 *
 * AUTH names a role whose token is sent ("op", "node", "vm", ...), "new"
 * for the last "token" an answer gave, "-" or nothing for none; anything
 * else is sent as the Authorization header's value. "$ID" in the path or
 * body stands for the last "id" an answer gave (ids are random), so that a
 * sequence can create a thing and then use it.
 */
#ifndef FLYT_FUZZ_HTTP_H
#define FLYT_FUZZ_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "flyt_http.h"

struct fuzz_http_target {
    const struct flyt_http_route *routes;
    void *ctx;
    const char *const *roles;              /* name, token pairs; NULL-terminated */
    void (*answer_line)(const char *line);  /* a "<STATUS BODY" line, '<' stripped */
};

/* Logs errors only, to /dev/null: the refusals every input causes are noise. */
void fuzz_http_quiet_logs(const char *program);

/* Handles every request of the input in order (at most FUZZ_HTTP_MAX_REQUESTS). */
#define FUZZ_HTTP_MAX_REQUESTS 64
void fuzz_http_run(const struct fuzz_http_target *t, const uint8_t *data, size_t size);

#endif

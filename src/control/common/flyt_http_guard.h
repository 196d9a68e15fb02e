/* Slow or many clients against the HTTP server (flyt_http_server.c): connection limits in
 * all and per peer address, checked at accept, and a deadline for each request to arrive
 * (headers and body) and for its answer to leave, enforced by a reaper thread that shuts
 * down the socket of a connection past it. libmicrohttpd's own idle timeout resets on
 * every byte, so a client trickling a header byte at a time would otherwise hold its
 * connection (and a thread) forever. Private to the HTTP server. */
#ifndef FLYT_HTTP_GUARD_H
#define FLYT_HTTP_GUARD_H

#include "flyt_buf.h"
#include "flyt_http.h"

#include <sys/socket.h>

struct flyt_http_guard;

/* NULL when out of memory or the reaper thread cannot start. */
struct flyt_http_guard *flyt_http_guard_new(const struct flyt_http_limits *limits);
/* After the HTTP daemon stopped (every connection closed): stops the reaper, frees. */
void flyt_http_guard_free(struct flyt_http_guard *g);

/* At accept: 1 to take the connection, 0 when a limit refuses it (noted as a refusal). */
int flyt_http_guard_admit(struct flyt_http_guard *g, const struct sockaddr *addr);
/* A connection opened / closed (before its socket is closed); *ctx is its slot. */
void flyt_http_guard_opened(struct flyt_http_guard *g, int fd, const struct sockaddr *addr,
                            void **ctx);
void flyt_http_guard_closed(struct flyt_http_guard *g, void *ctx);
/* The request is complete and its handler runs: no deadline while it does. */
void flyt_http_guard_handling(struct flyt_http_guard *g, void *ctx);
/* The answer is queued, or a request ended: the next bytes must move before the deadline. */
void flyt_http_guard_rearm(struct flyt_http_guard *g, void *ctx);

/* Wall-clock ms of the last refused connection, 0 when none was. */
long long flyt_http_guard_refused_at(struct flyt_http_guard *g);
/* Prometheus lines: connections open, refused, requests cut at the deadline. */
void flyt_http_guard_metrics(struct flyt_http_guard *g, struct flyt_buf *out);

#endif

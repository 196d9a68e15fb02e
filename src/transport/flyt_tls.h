/*
 * TLS on a TCP connection of the data plane (docs/tls.md). Opt-in: OpenSSL's
 * libssl.so.3 is loaded with dlopen the first time TLS is asked for, so the
 * client library (loaded into every CUDA program) links no libssl, and a
 * connection without TLS never reaches this file.
 *
 * A connection is a flyt_link: its socket, and its TLS session when it has
 * one. Reads and writes on a link take the plain fd paths unless tls is set:
 * one predictable check per call, chosen once per connection. Where the
 * kernel carries TLS in both directions (kTLS) the handshake hands back no
 * session at all, and the plain paths run on the socket.
 *
 * One session serves a reader and writers on different threads: calls into
 * OpenSSL (which forbids concurrent use of one SSL) are serialised by a
 * mutex, on a non-blocking socket, each caller waiting in poll with the
 * mutex released.
 */
#ifndef FLYT_TLS_H
#define FLYT_TLS_H

#include <stddef.h>
#include <sys/uio.h>

#include "flyt_transport.h"

typedef struct flyt_tls_ctx flyt_tls_ctx;
typedef struct flyt_tls flyt_tls;

/* A server's certificate chain (PEM) and key (PEM, refused unless the
 * owner's alone, as every secret file: flyt_secret_open); NULL with err. */
flyt_tls_ctx *flyt_tls_server_ctx(const char *cert_file, const char *key_file, char *err,
                                  size_t errlen);
/* A client verifying the server's certificate against ca_file (PEM), or
 * against the system's trust store when ca_file is NULL; NULL with err. */
flyt_tls_ctx *flyt_tls_client_ctx(const char *ca_file, char *err, size_t errlen);
void flyt_tls_ctx_free(flyt_tls_ctx *ctx);

/* The handshake on a connected socket, each wait bounded by timeout_ms (0:
 * none): 0 with *out the session, or *out NULL when the kernel carries TLS
 * both ways (the socket is then used plainly); -1 with err. The client checks
 * that the certificate names host (a DNS name or an IP address). */
int flyt_tls_accept(flyt_tls_ctx *ctx, int fd, int timeout_ms, flyt_tls **out, char *err,
                    size_t errlen);
int flyt_tls_connect(flyt_tls_ctx *ctx, int fd, const char *host, int timeout_ms,
                     flyt_tls **out, char *err, size_t errlen);
/* Frees the session (no close_notify: frames are length-prefixed, so a cut
 * stream shows anyway); the socket stays the caller's. NULL is fine. */
void flyt_tls_free(flyt_tls *t);

/* Waits for the peer longer than timeout_ms fail with errno EAGAIN (as
 * SO_RCVTIMEO does on a plain socket); 0: no limit. */
void flyt_tls_set_timeout(flyt_tls *t, int timeout_ms);
/* As flyt_recv_some, flyt_read_full and flyt_writev_full (iov consumed). */
long flyt_tls_recv_some(flyt_tls *t, void *buf, size_t cap);
int  flyt_tls_read_full(flyt_tls *t, void *buf, size_t len);
int  flyt_tls_writev_full(flyt_tls *t, struct iovec *iov, int iovcnt);
/* 1 when bytes wait inside the session, where poll on the socket cannot see them. */
int  flyt_tls_pending(flyt_tls *t);
/* "TLSv1.3 TLS_AES_256_GCM_SHA384" or "kernel TLS": for logs. */
void flyt_tls_describe(flyt_tls *t, char *out, size_t outlen);

typedef struct {
    int       fd;
    flyt_tls *tls; /* NULL: plain (or kernel TLS) */
} flyt_link;

static inline int flyt_link_writev(const flyt_link *l, struct iovec *iov, int iovcnt)
{
    if (__builtin_expect(l->tls != NULL, 0))
        return flyt_tls_writev_full(l->tls, iov, iovcnt);
    return flyt_writev_full(l->fd, iov, iovcnt);
}

static inline int flyt_link_read_full(const flyt_link *l, void *buf, size_t len)
{
    if (__builtin_expect(l->tls != NULL, 0))
        return flyt_tls_read_full(l->tls, buf, len);
    return flyt_read_full(l->fd, buf, len);
}

/* Whether a read would find bytes that poll on the socket does not show. */
static inline int flyt_link_pending(const flyt_link *l)
{
    return l->tls != NULL && flyt_tls_pending(l->tls);
}

#endif

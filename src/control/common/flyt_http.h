/* HTTP/JSON for the control-plane daemons: a server over libmicrohttpd with a route table,
 * and a client call over libcurl. Bodies are JSON (jansson); errors use the body of
 * docs/api.md: {"error": {"code": "<slug>", "message": "<text>"}}. */
#ifndef FLYT_HTTP_H
#define FLYT_HTTP_H

#include "flyt_buf.h"

#include <jansson.h>
#include <stddef.h>

#define FLYT_HTTP_BODY_LIMIT (1u << 20)   /* request bodies larger than this: 413 */
#define FLYT_HTTP_MAX_PARAMS 4            /* {name} captures per route */

/* ---- server ---- */

struct flyt_http_request {
    const char *method;                          /* "GET", "POST", ... */
    const char *path;                            /* decoded, without the query string */
    const char *params[FLYT_HTTP_MAX_PARAMS];    /* the {name} captures, in pattern order */
    int nparams;
    const char *token;     /* the token of "Authorization: Bearer <token>", or NULL */
    json_t *body;          /* the parsed body (borrowed), NULL when the body was empty */
    const char *raw;       /* the body's bytes when it is application/octet-stream (then
                            * body is NULL: such a body is not parsed); else NULL */
    size_t raw_len;
    const char *route;     /* the matched route, "METHOD /pattern" */
    void *conn_;           /* private */
    const char *const *query_, *const *headers_;  /* private: flyt_http_handle's */
};

struct flyt_http_response {
    int status;                /* 0: the handler answered nothing (-> 500) */
    char *body;                /* malloc'd; NULL: no body */
    size_t len;
    const char *content_type;
};

/* A handler fills res through the reply helpers below. It runs on one of the server's
 * threads (one per connection): handlers must be thread-safe. */
typedef void (*flyt_http_handler_fn)(void *ctx, const struct flyt_http_request *req,
                                     struct flyt_http_response *res);

struct flyt_http_route {
    const char *method;     /* "GET", "POST", "PATCH", "DELETE", "PUT" */
    const char *pattern;    /* "/v1/vms/{id}": literal segments, {name} captures one segment */
    flyt_http_handler_fn fn;
};
/* A route table ends with an entry whose method is NULL. Routes are tried in order, the
 * first match wins (put "/v1/vms/import" before "/v1/vms/{id}"). A path that matches no
 * route: 404 not_found; that matches only with other methods: 405 bad_request. A body
 * that is not JSON: 400 bad_request before the handler runs; over the limit: 413. */

struct flyt_http_server;

/* What one server accepts. A connection past max_connections, or past max_per_peer from
 * one IP address, is closed at accept; a request whose headers and body have not all
 * arrived within request_timeout_ms of its start (or whose answer has not left within it)
 * is cut; a connection silent for idle_timeout_s is closed. */
struct flyt_http_limits {
    unsigned max_connections;
    unsigned max_per_peer;
    unsigned request_timeout_ms;
    unsigned idle_timeout_s;
};
#define FLYT_HTTP_MAX_CONNECTIONS 512
#define FLYT_HTTP_MAX_PER_PEER 64
#define FLYT_HTTP_REQUEST_TIMEOUT_MS 10000
#define FLYT_HTTP_IDLE_TIMEOUT_S 30
#define FLYT_HTTP_HEADER_MEMORY (32u << 10)   /* request line and headers: 431 past this */

/* Starts serving on listen = "HOST:PORT" (IPv4 literal, [IPv6] literal or a host name;
 * PORT 0 takes a free port) with the default limits above, or limits. routes must
 * outlive the server. NULL with err on failure. */
struct flyt_http_server *flyt_http_start(const char *listen, const struct flyt_http_route *routes,
                                         void *ctx, char *err, size_t errlen);
struct flyt_http_server *flyt_http_start_limited(const char *listen,
                                                 const struct flyt_http_route *routes, void *ctx,
                                                 const struct flyt_http_limits *limits, char *err,
                                                 size_t errlen);
/* TLS (flyt_http_tls.c): a server's certificate (chain) and private key, PEM, loaded and
 * checked. Both NULL: plain HTTP. */
struct flyt_http_tls {
    char *cert_pem, *key_pem;
};
/* As flyt_http_start_limited (limits NULL: the defaults), serving HTTPS only when tls holds
 * a pair, else plain HTTP. */
struct flyt_http_server *flyt_http_start_tls(const char *listen,
                                             const struct flyt_http_route *routes, void *ctx,
                                             const struct flyt_http_limits *limits,
                                             const struct flyt_http_tls *tls, char *err,
                                             size_t errlen);
int flyt_http_port(const struct flyt_http_server *srv);
/* Wall-clock ms when a limit last refused a connection (0: never): requests may have been
 * lost then through no fault of their sender. */
long long flyt_http_refused_at(struct flyt_http_server *srv);
/* Stops accepting, finishes or closes connections, joins the threads, frees. */
void flyt_http_stop(struct flyt_http_server *srv);

/* Routes and answers one request as the server would, without a socket (tests, fuzzing):
 * query and headers are NULL-terminated arrays of name, value pairs (NULL: none), body
 * len bytes. The caller frees res->body. */
void flyt_http_handle(const struct flyt_http_route *routes, void *ctx, const char *method,
                      const char *path, const char *const *query, const char *const *headers,
                      const char *body, size_t len, struct flyt_http_response *res);

/* Query-string argument (decoded) or request header; NULL when absent. */
const char *flyt_http_query(const struct flyt_http_request *req, const char *name);
const char *flyt_http_header(const struct flyt_http_request *req, const char *name);

/* Reply helpers. json: takes the reference (NULL: no body). text: takes the string. */
void flyt_http_reply_json(struct flyt_http_response *res, int status, json_t *json);
void flyt_http_reply_text(struct flyt_http_response *res, int status, const char *content_type,
                          char *text);
/* Binary answer (application/octet-stream); takes data (malloc'd, may be NULL when len 0). */
void flyt_http_reply_bytes(struct flyt_http_response *res, int status, char *data, size_t len);
void flyt_http_reply_status(struct flyt_http_response *res, int status);  /* no body: 204 */
void flyt_http_reply_error(struct flyt_http_response *res, int status, const char *code,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Per-route counters (requests by status class, errors, latency histogram) in Prometheus
 * text format, metric names flyt_http_requests_total, flyt_http_request_errors_total,
 * flyt_http_request_duration_seconds; and flyt_http_connections_open,
 * flyt_http_connections_refused_total, flyt_http_requests_timed_out_total. Requests that matched no route count as route
 * "unmatched". */
void flyt_http_metrics(struct flyt_http_server *srv, struct flyt_buf *out);

/* ---- client ---- */

/* One call: method, url ("http://host:port/v1/..."), token (NULL: no Authorization),
 * body (NULL: none; not consumed). Timeouts: flyt_http_call 10 s overall, 3 s to connect;
 * flyt_http_call_timeout takes the overall limit in ms. Environment proxies are not used.
 * Returns 0 when an HTTP answer came back (any status): *status is set, *answer (if
 * answer is not NULL) gets the parsed JSON body or NULL when it was empty; for a non-2xx
 * status err gets "HTTP <status> <code>: <message>". Returns -1 with err when no answer
 * came (connection refused, timeout, ...) or a 2xx body is not JSON. */
int flyt_http_call(const char *method, const char *url, const char *token, json_t *body,
                   long *status, json_t **answer, char *err, size_t errlen);
int flyt_http_call_timeout(const char *method, const char *url, const char *token, json_t *body,
                           long timeout_ms, long *status, json_t **answer, char *err,
                           size_t errlen);

/* Bytes both ways: body (len bytes, NULL: none) is sent as application/octet-stream; a 2xx
 * answer's bytes come back in *out (malloc'd, free() it; NULL when empty) and *outlen. A
 * non-2xx answer: 0 with *status and err as flyt_http_call, *out NULL. For state files,
 * which move in chunks under FLYT_HTTP_BODY_LIMIT (docs/api.md, "Checkpoint"). */
int flyt_http_call_bytes(const char *method, const char *url, const char *token, const void *body,
                         size_t len, long timeout_ms, long *status, char **out, size_t *outlen,
                         char *err, size_t errlen);

/* ---- TLS (flyt_http_tls.c) ---- */

/* The config keys of a server's pair, for a daemon's key table (with flyt_config.h). */
#define FLYT_HTTP_TLS_CFG_KEYS                                                                   \
    {"tls_cert_file", FLYT_CFG_STRING, NULL,                                                     \
     "PEM certificate (chain) of the API; with tls_key_file the API is HTTPS only", false, 0,    \
     0},                                                                                         \
    {"tls_key_file", FLYT_CFG_STRING, NULL,                                                      \
     "PEM private key of tls_cert_file, unencrypted, readable by its owner alone (0600)", false, \
     0, 0}
struct flyt_config;
/* Loads the pair that the keys tls_cert_file and tls_key_file of cfg name (relative to
 * the config file cfgpath): 0 with tls filled, or zeroed when neither key is set; -1 with
 * err naming the file when only one is set, a file cannot be read, the key file is open
 * to group or others, a file holds no PEM certificate / unencrypted private key, the key
 * is not the certificate's, or this libmicrohttpd has no TLS. */
/* The certificate and key files named by the config keys cert_key and key_key
 * (relative to the config's folder): 1 with both set and good (the key
 * readable by its owner alone, the pair matching), 0 with neither, -1 with
 * the reason (one without the other, a bad file). */
int flyt_tls_paths_from_config(const struct flyt_config *cfg, const char *cfgpath,
                               const char *cert_key, const char *key_key, char *cert,
                               char *key, size_t cap, char *err, size_t errlen);
int flyt_http_tls_from_config(const struct flyt_config *cfg, const char *cfgpath,
                              struct flyt_http_tls *tls, char *err, size_t errlen);
int flyt_http_tls_load(const char *cert_file, const char *key_file, struct flyt_http_tls *tls,
                       char *err, size_t errlen);
void flyt_http_tls_free(struct flyt_http_tls *tls);

/* Calls to https:// URLs always verify the server's certificate and host name: against
 * the CA certificates (PEM) of ca_file alone, or against the system's store when ca_file
 * is NULL. Process-wide: set it before calls run. -1 with err when ca_file holds no
 * certificate. */
int flyt_http_client_ca(const char *ca_file, char *err, size_t errlen);
/* flyt_http_client_ca with the file that the string key name of cfg names (relative to
 * cfgpath; unset: the system's store); -1 with "FILE:LINE: name: reason". */
int flyt_http_client_ca_from_config(const struct flyt_config *cfg, const char *cfgpath,
                                    const char *name, char *err, size_t errlen);

#endif

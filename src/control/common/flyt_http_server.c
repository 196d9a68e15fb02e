/* The HTTP server side of flyt_http.h over libmicrohttpd: one thread per connection,
 * bodies collected up to FLYT_HTTP_BODY_LIMIT, routes with {name} captures, counters;
 * connection limits and request deadlines in flyt_http_guard.c. */
#include "flyt_http.h"
#include "flyt_http_guard.h"

#include "flyt_log.h"

#include <microhttpd.h>

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const double buckets[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define NBUCKETS (sizeof buckets / sizeof buckets[0])

struct route_stats {
    unsigned long long by_class[6];     /* index status/100 (1..5); 0 unused */
    unsigned long long errors;          /* status >= 400 */
    unsigned long long bucket[NBUCKETS];/* cumulative counts per upper bound */
    unsigned long long count;
    double sum;
};

struct flyt_http_server {
    struct MHD_Daemon *daemon;
    const struct flyt_http_route *routes;
    size_t nroutes;
    void *ctx;
    int port;
    pthread_mutex_t lock;
    struct route_stats *stats;          /* nroutes + 1 ("unmatched") */
    struct flyt_http_guard *guard;
    struct flyt_http_tls tls;   /* HTTPS: copies, libmicrohttpd is not documented to keep its own */
};

struct conn_state {
    char *body;
    size_t len, cap;
    int too_large;
    struct timespec start;
};

/* ---- reply helpers ---- */

static void reply_reset(struct flyt_http_response *res)
{
    free(res->body);
    res->body = NULL;
    res->len = 0;
    res->content_type = NULL;
}

void flyt_http_reply_json(struct flyt_http_response *res, int status, json_t *json)
{
    reply_reset(res);
    res->status = status;
    if (json) {
        res->body = json_dumps(json, JSON_COMPACT);
        json_decref(json);
        if (!res->body) {
            res->status = 500;
            return;
        }
        res->len = strlen(res->body);
        res->content_type = "application/json";
    }
}

void flyt_http_reply_text(struct flyt_http_response *res, int status, const char *content_type,
                          char *text)
{
    reply_reset(res);
    res->status = status;
    res->body = text;
    res->len = text ? strlen(text) : 0;
    res->content_type = content_type;
}

void flyt_http_reply_bytes(struct flyt_http_response *res, int status, char *data, size_t len)
{
    reply_reset(res);
    res->status = status;
    res->body = data;
    res->len = data ? len : 0;
    res->content_type = "application/octet-stream";
}

void flyt_http_reply_status(struct flyt_http_response *res, int status)
{
    reply_reset(res);
    res->status = status;
}

void flyt_http_reply_error(struct flyt_http_response *res, int status, const char *code,
                           const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    flyt_http_reply_json(res, status,
                         json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg));
}

/* ---- request accessors ---- */

/* A request handled without a socket (flyt_http_handle) carries its own lists. */
static const char *pair_value(const char *const *pairs, const char *name,
                              int (*cmp)(const char *, const char *))
{
    for (size_t i = 0; pairs && pairs[i] && pairs[i + 1]; i += 2)
        if (cmp(pairs[i], name) == 0)
            return pairs[i + 1];
    return NULL;
}

const char *flyt_http_query(const struct flyt_http_request *req, const char *name)
{
    if (!req->conn_)
        return pair_value(req->query_, name, strcmp);
    return MHD_lookup_connection_value(req->conn_, MHD_GET_ARGUMENT_KIND, name);
}

const char *flyt_http_header(const struct flyt_http_request *req, const char *name)
{
    if (!req->conn_)
        return pair_value(req->headers_, name, strcasecmp);
    return MHD_lookup_connection_value(req->conn_, MHD_HEADER_KIND, name);
}

/* ---- routing ---- */

/* Matches path against pattern segment by segment; the path is copied into buf, split
 * at '/', and the captures point into it. */
static int match(const char *pattern, const char *path, char *buf, size_t buflen,
                 struct flyt_http_request *req)
{
    if (strlen(path) >= buflen || path[0] != '/' || pattern[0] != '/')
        return 0;
    strcpy(buf, path);
    req->nparams = 0;
    const char *pp = pattern + 1;
    char *sp = buf + 1;
    for (;;) {
        size_t plen = strcspn(pp, "/"), slen = strcspn(sp, "/");
        char pend = pp[plen], send = sp[slen];
        if (plen > 2 && pp[0] == '{' && pp[plen - 1] == '}') {
            if (slen == 0 || req->nparams >= FLYT_HTTP_MAX_PARAMS)
                return 0;
            req->params[req->nparams++] = sp;
        } else if (plen != slen || strncmp(pp, sp, plen) != 0) {
            return 0;
        }
        if (pend == 0 && send == 0)
            return 1;
        if (pend == 0 || send == 0)
            return 0;
        sp[slen] = 0;
        pp += plen + 1;
        sp += slen + 1;
    }
}

static double elapsed_s(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

static void count(struct flyt_http_server *srv, size_t route, int status, double secs)
{
    pthread_mutex_lock(&srv->lock);
    struct route_stats *st = &srv->stats[route];
    int cls = status / 100;
    if (cls >= 1 && cls <= 5)
        st->by_class[cls]++;
    if (status >= 400)
        st->errors++;
    st->count++;
    st->sum += secs;
    for (size_t i = 0; i < NBUCKETS; i++)
        if (secs <= buckets[i])
            st->bucket[i]++;
    pthread_mutex_unlock(&srv->lock);
}

/* The token of an Authorization header value, or NULL. */
static const char *bearer(const char *h)
{
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    return *h ? h : NULL;
}

static enum MHD_Result send_response(struct MHD_Connection *c, struct flyt_http_response *res)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        res->len, res->body ? res->body : (void *)"", MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    if (res->content_type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, res->content_type);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)res->status, r);
    MHD_destroy_response(r);
    return rc;
}

/* Routes req (method, path, token and accessors set) to its handler and answers it; the
 * index of the route in *route_index (nroutes: none). */
static void dispatch(const struct flyt_http_route *routes, size_t nroutes, void *ctx,
                     struct flyt_http_request *req, const char *body, size_t len, int too_large,
                     struct flyt_http_response *res, size_t *route_index)
{
    const char *method = req->method, *url = req->path;
    *route_index = nroutes;
    char buf[2048];
    const struct flyt_http_route *found = NULL;
    int path_known = 0;
    for (size_t i = 0; i < nroutes; i++) {
        if (!match(routes[i].pattern, url, buf, sizeof buf, req))
            continue;
        path_known = 1;
        if (strcmp(routes[i].method, method) == 0) {
            found = &routes[i];
            *route_index = i;
            break;
        }
    }
    if (!found) {
        if (path_known)
            flyt_http_reply_error(res, 405, "bad_request", "method %s is not allowed on %s",
                                  method, url);
        else
            flyt_http_reply_error(res, 404, "not_found", "no such path: %s", url);
        return;
    }
    if (too_large) {
        flyt_http_reply_error(res, 413, "bad_request", "request body exceeds %u bytes",
                              FLYT_HTTP_BODY_LIMIT);
        return;
    }
    char route_name[256];
    snprintf(route_name, sizeof route_name, "%s %s", found->method, found->pattern);
    req->route = route_name;
    const char *ctype = flyt_http_header(req, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (len && ctype && strncasecmp(ctype, "application/octet-stream", 24) == 0) {
        req->raw = body;
        req->raw_len = len;
    } else if (len) {
        json_error_t jerr;
        req->body = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!req->body) {
            flyt_http_reply_error(res, 400, "bad_request",
                                  "malformed JSON body: %s (line %d, column %d)", jerr.text,
                                  jerr.line, jerr.column);
            return;
        }
    }
    found->fn(ctx, req, res);
    json_decref(req->body);
    req->body = NULL;
    req->route = NULL;
    if (res->status == 0) {
        flyt_error("http: %s %s: handler gave no answer", method, url);
        flyt_http_reply_error(res, 500, "internal", "the handler gave no answer");
    }
}

void flyt_http_handle(const struct flyt_http_route *routes, void *ctx, const char *method,
                      const char *path, const char *const *query, const char *const *headers,
                      const char *body, size_t len, struct flyt_http_response *res)
{
    struct flyt_http_request req;
    memset(&req, 0, sizeof req);
    req.method = method;
    req.path = path;
    req.query_ = query;
    req.headers_ = headers;
    req.token = bearer(pair_value(headers, MHD_HTTP_HEADER_AUTHORIZATION, strcasecmp));
    size_t nroutes = 0, route;
    while (routes[nroutes].method)
        nroutes++;
    dispatch(routes, nroutes, ctx, &req, body, len, len > FLYT_HTTP_BODY_LIMIT, res, &route);
}

static void *conn_track(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)version;
    struct flyt_http_server *srv = cls;
    struct conn_state *cs = *con_cls;
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (!cs)
            return MHD_NO;
        clock_gettime(CLOCK_MONOTONIC, &cs->start);
        *con_cls = cs;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > FLYT_HTTP_BODY_LIMIT)
            cs->too_large = 1;   /* answered at the end; the body is not kept */
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cs->too_large && cs->len + *upload_size > FLYT_HTTP_BODY_LIMIT)
            cs->too_large = 1;
        if (!cs->too_large) {
            if (cs->len + *upload_size > cs->cap) {
                size_t cap = cs->cap ? cs->cap : 4096;
                while (cap < cs->len + *upload_size)
                    cap *= 2;
                char *b = realloc(cs->body, cap);
                if (!b)
                    return MHD_NO;
                cs->body = b;
                cs->cap = cap;
            }
            memcpy(cs->body + cs->len, upload_data, *upload_size);
            cs->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    void *track = conn_track(c);
    flyt_http_guard_handling(srv->guard, track);
    struct flyt_http_response res = {0};
    size_t route = srv->nroutes;
    struct flyt_http_request req;
    memset(&req, 0, sizeof req);
    req.method = method;
    req.path = url;
    req.conn_ = c;
    req.token = bearer(
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
    dispatch(srv->routes, srv->nroutes, srv->ctx, &req, cs->body, cs->len, cs->too_large, &res,
             &route);
    double secs = elapsed_s(&cs->start);
    count(srv, route, res.status, secs);
    flyt_debug("http: %s %s -> %d (%.1f ms)", method, url, res.status, secs * 1e3);
    enum MHD_Result rc = send_response(c, &res);
    free(res.body);
    flyt_http_guard_rearm(srv->guard, track);   /* the answer must leave in time too */
    return rc;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct flyt_http_server *srv = cls;
    (void)toe;
    flyt_http_guard_rearm(srv->guard, conn_track(c));   /* the next request's deadline */
    struct conn_state *cs = *con_cls;
    if (cs) {
        free(cs->body);
        free(cs);
        *con_cls = NULL;
    }
}

static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    struct flyt_http_server *srv = cls;
    return flyt_http_guard_admit(srv->guard, addr) ? MHD_YES : MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct flyt_http_server *srv = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        flyt_http_guard_closed(srv->guard, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *peer =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!fd) {
        *socket_context = NULL;
        return;
    }
    flyt_http_guard_opened(srv->guard, fd->connect_fd, peer ? peer->client_addr : NULL,
                           socket_context);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = 0;
    /* a peer that fails the TLS handshake (plain HTTP, a CA it does not trust, a cut slow
     * client) is its own trouble: not a line per connection at warn, which a flood fills */
    if (strstr(msg, "andshake") || strstr(msg, "TLS"))
        flyt_debug("http: %s", msg);
    else
        flyt_warn("http: %s", msg);
}

/* Splits "HOST:PORT" / "[V6]:PORT" and binds a listening socket. -1 with err. */
static int bind_listen(const char *listen_addr, int *port_out, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(listen_addr, ':');
    if (!colon || colon == listen_addr || !colon[1]) {
        snprintf(err, errlen, "listen address \"%s\": expected HOST:PORT", listen_addr);
        return -1;
    }
    size_t hlen = (size_t)(colon - listen_addr);
    const char *h = listen_addr;
    if (h[0] == '[' && hlen >= 2 && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen >= sizeof host) {
        snprintf(err, errlen, "listen address \"%s\": host too long", listen_addr);
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = 0;
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host, colon + 1, &hints, &ai);
    if (gai) {
        snprintf(err, errlen, "listen address \"%s\": %s", listen_addr, gai_strerror(gai));
        return -1;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0
        || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0) {
        snprintf(err, errlen, "listen on %s: %s", listen_addr, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port_out = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

struct flyt_http_server *flyt_http_start(const char *listen_addr,
                                         const struct flyt_http_route *routes, void *ctx,
                                         char *err, size_t errlen)
{
    return flyt_http_start_tls(listen_addr, routes, ctx, NULL, NULL, err, errlen);
}

static void server_free(struct flyt_http_server *srv)
{
    flyt_http_tls_free(&srv->tls);
    flyt_http_guard_free(srv->guard);
    pthread_mutex_destroy(&srv->lock);
    free(srv->stats);
    free(srv);
}

struct flyt_http_server *flyt_http_start_limited(const char *listen_addr,
                                                 const struct flyt_http_route *routes, void *ctx,
                                                 const struct flyt_http_limits *limits, char *err,
                                                 size_t errlen)
{
    return flyt_http_start_tls(listen_addr, routes, ctx, limits, NULL, err, errlen);
}

/* TLS 1.2 and 1.3 only. */
#define TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

struct flyt_http_server *flyt_http_start_tls(const char *listen_addr,
                                             const struct flyt_http_route *routes, void *ctx,
                                             const struct flyt_http_limits *limits,
                                             const struct flyt_http_tls *tls, char *err,
                                             size_t errlen)
{
    const struct flyt_http_limits defaults = {FLYT_HTTP_MAX_CONNECTIONS, FLYT_HTTP_MAX_PER_PEER,
                                              FLYT_HTTP_REQUEST_TIMEOUT_MS,
                                              FLYT_HTTP_IDLE_TIMEOUT_S};
    if (!limits)
        limits = &defaults;
    int use_tls = tls && tls->cert_pem && tls->key_pem;
    if (use_tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(err, errlen, "HTTPS on %s: this libmicrohttpd was built without TLS (GnuTLS)",
                 listen_addr);
        return NULL;
    }
    struct flyt_http_server *srv = calloc(1, sizeof *srv);
    if (!srv) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    srv->routes = routes;
    while (routes[srv->nroutes].method)
        srv->nroutes++;
    srv->ctx = ctx;
    srv->stats = calloc(srv->nroutes + 1, sizeof *srv->stats);
    pthread_mutex_init(&srv->lock, NULL);
    srv->guard = flyt_http_guard_new(limits);
    if (use_tls) {
        srv->tls.cert_pem = strdup(tls->cert_pem);
        srv->tls.key_pem = strdup(tls->key_pem);
    }
    int allocated = srv->stats && srv->guard && (!use_tls || (srv->tls.cert_pem && srv->tls.key_pem));
    int fd = allocated ? bind_listen(listen_addr, &srv->port, err, errlen) : -1;
    if (fd < 0) {
        if (!allocated)
            snprintf(err, errlen, "out of memory");
        server_free(srv);
        return NULL;
    }
    /* The guard refuses first (and notes it); the daemon's own limits, one above, only back
     * it up for a connection the guard could not track. */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION
                     | MHD_USE_ERROR_LOG | (use_tls ? MHD_USE_TLS : 0);
    /* Without TLS the options' list ends before the certificate (MHD_OPTION_END). */
    srv->daemon = MHD_start_daemon(
        flags, 0, on_accept, srv, on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_CONNECTION_TIMEOUT, limits->idle_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, limits->max_connections + 1,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits->max_per_peer + 1,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)FLYT_HTTP_HEADER_MEMORY,
        use_tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, srv->tls.cert_pem,
        MHD_OPTION_HTTPS_MEM_KEY, srv->tls.key_pem,
        MHD_OPTION_HTTPS_PRIORITIES, TLS_PRIORITIES,
        MHD_OPTION_END);
    if (!srv->daemon) {
        snprintf(err, errlen, "cannot start the HTTP%s server on %s%s", use_tls ? "S" : "",
                 listen_addr, use_tls ? " (the certificate or key did not load)" : "");
        close(fd);
        server_free(srv);
        return NULL;
    }
    return srv;
}

int flyt_http_port(const struct flyt_http_server *srv) { return srv->port; }

void flyt_http_stop(struct flyt_http_server *srv)
{
    if (!srv)
        return;
    MHD_stop_daemon(srv->daemon);
    server_free(srv);
}

long long flyt_http_refused_at(struct flyt_http_server *srv)
{
    return flyt_http_guard_refused_at(srv->guard);
}

static void metric_route(struct flyt_http_server *srv, size_t i, char *out, size_t len)
{
    if (i == srv->nroutes)
        snprintf(out, len, "unmatched");
    else
        snprintf(out, len, "%s %s", srv->routes[i].method, srv->routes[i].pattern);
}

void flyt_http_metrics(struct flyt_http_server *srv, struct flyt_buf *out)
{
    char name[256];
    pthread_mutex_lock(&srv->lock);
    flyt_buf_printf(out, "# HELP flyt_http_requests_total API requests by route and status class.\n"
                         "# TYPE flyt_http_requests_total counter\n");
    for (size_t i = 0; i <= srv->nroutes; i++) {
        metric_route(srv, i, name, sizeof name);
        for (int c = 1; c <= 5; c++)
            if (srv->stats[i].by_class[c])
                flyt_buf_printf(out, "flyt_http_requests_total{route=\"%s\",code=\"%dxx\"} %llu\n",
                                name, c, srv->stats[i].by_class[c]);
    }
    flyt_buf_printf(out, "# HELP flyt_http_request_errors_total API requests answered 4xx or 5xx.\n"
                         "# TYPE flyt_http_request_errors_total counter\n");
    for (size_t i = 0; i <= srv->nroutes; i++) {
        metric_route(srv, i, name, sizeof name);
        flyt_buf_printf(out, "flyt_http_request_errors_total{route=\"%s\"} %llu\n", name,
                        srv->stats[i].errors);
    }
    flyt_buf_printf(out, "# HELP flyt_http_request_duration_seconds API request latency.\n"
                         "# TYPE flyt_http_request_duration_seconds histogram\n");
    for (size_t i = 0; i <= srv->nroutes; i++) {
        const struct route_stats *st = &srv->stats[i];
        if (!st->count)
            continue;
        metric_route(srv, i, name, sizeof name);
        for (size_t b = 0; b < NBUCKETS; b++)
            flyt_buf_printf(out, "flyt_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n",
                            name, buckets[b], st->bucket[b]);
        flyt_buf_printf(out, "flyt_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n"
                             "flyt_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n"
                             "flyt_http_request_duration_seconds_count{route=\"%s\"} %llu\n",
                        name, st->count, name, st->sum, name, st->count);
    }
    pthread_mutex_unlock(&srv->lock);
    flyt_http_guard_metrics(srv->guard, out);
}

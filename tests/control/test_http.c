/* flyt_http: routes and captures, bodies, tokens, errors, limits, metrics, client errors. */
#include "check.h"
#include "flyt_http.h"
#include "flyt_log.h"
#include "rawhttp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void h_echo(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx;
    const char *q = flyt_http_query(req, "q");
    json_t *j = json_pack("{s:s,s:s,s:s*,s:s*,s:O*}", "method", req->method, "route", req->route,
                          "token", req->token, "q", q, "body", req->body);
    json_t *ps = json_array();
    for (int i = 0; i < req->nparams; i++)
        json_array_append_new(ps, json_string(req->params[i]));
    json_object_set_new(j, "params", ps);
    flyt_http_reply_json(res, 200, j);
}

static void h_fail(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx;
    flyt_http_reply_error(res, 409, "conflict", "id %s exists", req->params[0]);
}

static void h_none(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx;
    (void)req;
    (void)res;
}

static void h_slow(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx;
    (void)req;
    usleep(1500 * 1000);
    flyt_http_reply_status(res, 204);
}

static const struct flyt_http_route routes[] = {
    {"POST", "/v1/things/import", h_echo},
    {"GET", "/v1/things/{id}", h_echo},
    {"POST", "/v1/things/{id}", h_fail},
    {"PATCH", "/v1/nodes/{id}/sessions/{sid}/ended", h_echo},
    {"GET", "/v1/none", h_none},
    {"DELETE", "/v1/slow", h_slow},
    {NULL, NULL, NULL}};

int main(void)
{
    flyt_log_init("test_http", FLYT_LOG_WARN);
    char err[512];
    struct flyt_http_server *srv = flyt_http_start("127.0.0.1:0", routes, NULL, err, sizeof err);
    CHECK_NE(srv, NULL, "server starts on a free port (%s)", err);
    int port = flyt_http_port(srv);
    CHECK_GT(port, 0, "port %d", port);
    char base[64], url[256];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);

    struct flyt_http_server *dup = flyt_http_start(base + 7, routes, NULL, err, sizeof err);
    CHECK_EQ(dup, NULL, "second bind refused: %s", err);
    CHECK(strstr(err, "Address already in use"), "second bind refused: %s", err);
    CHECK_EQ(flyt_http_start("nonsense", routes, NULL, err, sizeof err), NULL, "bad address refused: %s", err);
    CHECK(strstr(err, "expected HOST:PORT"), "bad address refused: %s", err);

    long status;
    json_t *ans;
    /* captures, query, token */
    snprintf(url, sizeof url, "%s/v1/things/abc-1?q=hello%%20world", base);
    CHECK_EQ(flyt_http_call("GET", url, "tok123", NULL, &status, &ans, err, sizeof err), 0, "GET with capture: %ld %s", status, err);
    CHECK_EQ(status, 200, "GET with capture: %ld %s", status, err);
    CHECK_STR_EQ(json_string_value(json_object_get(ans, "token")), "tok123", "bearer token");
    CHECK_STR_EQ(json_string_value(json_object_get(ans, "q")), "hello world", "query decoded");
    CHECK_STR_EQ(json_string_value(json_array_get(json_object_get(ans, "params"), 0)), "abc-1",
          "capture {id}");
    CHECK_STR_EQ(json_string_value(json_object_get(ans, "route")), "GET /v1/things/{id}",
          "route name");
    json_decref(ans);

    /* two captures, JSON body */
    snprintf(url, sizeof url, "%s/v1/nodes/n1/sessions/s9/ended", base);
    json_t *body = json_pack("{s:s}", "reason", "exit");
    CHECK_EQ(flyt_http_call("PATCH", url, NULL, body, &status, &ans, err, sizeof err), 0, "PATCH with body");
    CHECK_EQ(status, 200, "PATCH with body");
    json_t *ps = json_object_get(ans, "params");
    CHECK_EQ(json_array_size(ps), 2,
          "two captures");
    CHECK_STR_EQ(json_string_value(json_array_get(ps, 1)), "s9",
          "two captures");
    CHECK(json_equal(json_object_get(ans, "body"), body), "body echoed");
    CHECK_EQ(json_object_get(ans, "token"), NULL, "no token without Authorization");
    json_decref(ans);
    json_decref(body);

    /* literal route before the capture route */
    snprintf(url, sizeof url, "%s/v1/things/import", base);
    CHECK_EQ(flyt_http_call("POST", url, "t", NULL, &status, &ans, err, sizeof err), 0, "literal route wins");
    CHECK_EQ(status, 200, "literal route wins");
    json_decref(ans);

    /* errors in the docs/api.md format */
    snprintf(url, sizeof url, "%s/v1/things/x7", base);
    CHECK_EQ(flyt_http_call("POST", url, "t", NULL, &status, &ans, err, sizeof err), 0, "handler error status");
    CHECK_EQ(status, 409, "handler error status");
    CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(ans, "error"), "code")), "conflict", "error code");
    CHECK_STR_EQ(err, "HTTP 409 conflict: id x7 exists", "client err text: %s", err);
    json_decref(ans);

    snprintf(url, sizeof url, "%s/v1/nothing", base);
    CHECK_EQ(flyt_http_call("GET", url, "t", NULL, &status, NULL, err, sizeof err), 0, "unknown path 404: %s", err);
    CHECK_EQ(status, 404, "unknown path 404: %s", err);
    CHECK(strstr(err, "not_found"), "unknown path 404: %s", err);
    snprintf(url, sizeof url, "%s/v1/things/abc", base);
    CHECK_EQ(flyt_http_call("DELETE", url, "t", NULL, &status, NULL, err, sizeof err), 0, "wrong method 405: %s", err);
    CHECK_EQ(status, 405, "wrong method 405: %s", err);
    CHECK(strstr(err, "not allowed"), "wrong method 405: %s", err);
    snprintf(url, sizeof url, "%s/v1/things/", base);
    CHECK_EQ(flyt_http_call("GET", url, "t", NULL, &status, NULL, err, sizeof err), 0, "empty capture 404");
    CHECK_EQ(status, 404, "empty capture 404");
    snprintf(url, sizeof url, "%s/v1/none", base);
    CHECK_EQ(flyt_http_call("GET", url, "t", NULL, &status, NULL, err, sizeof err), 0, "no answer -> 500: %s", err);
    CHECK_EQ(status, 500, "no answer -> 500: %s", err);
    CHECK(strstr(err, "internal"), "no answer -> 500: %s", err);

    /* malformed JSON (flyt_http_call only sends valid JSON) */
    {
        char out[4096];
        CHECK(raw_http(port, "PATCH /v1/nodes/a/sessions/b/ended HTTP/1.1\r\nHost: x\r\n"
                             "Content-Length: 8\r\nConnection: close\r\n\r\n{\"a\": 1,",
                       out, sizeof out) == 0, "raw request");
        CHECK(strstr(out, "HTTP/1.1 400") && strstr(out, "\"code\":\"bad_request\"")
                  && strstr(out, "malformed JSON body"), "malformed JSON -> 400 bad_request");
    }

    /* body limit */
    size_t big = FLYT_HTTP_BODY_LIMIT + 10;
    char *s = malloc(big + 1);
    memset(s, 'a', big);
    s[big] = 0;
    body = json_pack("{s:s}", "x", s);
    free(s);
    snprintf(url, sizeof url, "%s/v1/nodes/a/sessions/b/ended", base);
    CHECK_EQ(flyt_http_call("PATCH", url, "t", body, &status, NULL, err, sizeof err), 0, "body over 1 MiB -> 413: %s", err);
    CHECK_EQ(status, 413, "body over 1 MiB -> 413: %s", err);
    json_decref(body);

    /* client timeout and connection errors */
    snprintf(url, sizeof url, "%s/v1/slow", base);
    CHECK_EQ(flyt_http_call_timeout("DELETE", url, "t", NULL, 300, &status, NULL, err, sizeof err), -1, "client timeout: %s", err);
    CHECK(strstr(err, "timed out"), "client timeout: %s", err);
    CHECK(flyt_http_call("GET", "http://127.0.0.1:1/v1/x", "t", NULL, &status, NULL, err, sizeof err) == -1, "connection refused: %s", err);
    CHECK_EQ(status, 0, "connection refused: %s", err);

    /* metrics */
    struct flyt_buf m = {0};
    flyt_http_metrics(srv, &m);
    char *text = flyt_buf_take(&m);
    CHECK(strstr(text, "flyt_http_requests_total{route=\"GET /v1/things/{id}\",code=\"2xx\"} 1"),
          "request counter");
    CHECK(strstr(text, "flyt_http_request_errors_total{route=\"POST /v1/things/{id}\"} 1"),
          "error counter");
    CHECK(strstr(text, "flyt_http_requests_total{route=\"unmatched\",code=\"4xx\"}"), "unmatched");
    CHECK(strstr(text, "flyt_http_request_duration_seconds_count{route=\"GET /v1/things/{id}\"} 1"),
          "latency histogram");
    free(text);

    flyt_http_stop(srv);
    printf("test_http: all passed\n");
    return 0;
}

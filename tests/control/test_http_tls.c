/* flyt_http over TLS: a server with a certificate answers callers that trust its CA and no
 * one else (another CA, plain HTTP); bad pairs are refused at load with the file named;
 * and the cost: the median latency of one call (a new connection each, as every caller
 * makes) plain and over TLS on loopback.
 *   test_http_tls PATH/make_test_certs.sh */
#include "check.h"
#include "flyt_config.h"
#include "flyt_http.h"
#include "flyt_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BENCH_CALLS 200

static char dir[128];

static void h_ping(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx, (void)req;
    flyt_http_reply_json(res, 200, json_pack("{s:b}", "ok", 1));
}

static const struct flyt_http_route routes[] = {{"GET", "/v1/ping", h_ping}, {NULL, NULL, NULL}};

static const char *file(const char *name)
{
    static char paths[8][256];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of BENCH_CALLS calls to url, each a new connection (and handshake). */
static double median_call_ms(const char *url)
{
    static double ms[BENCH_CALLS];
    char err[512];
    long status;
    for (int i = 0; i < BENCH_CALLS; i++) {
        double t0 = now_ms();
        if (flyt_http_call("GET", url, NULL, NULL, &status, NULL, err, sizeof err) != 0)
            CHECK(0, "bench call %d: %s", i, err);
        ms[i] = now_ms() - t0;
    }
    qsort(ms, BENCH_CALLS, sizeof ms[0], by_value);
    return (ms[BENCH_CALLS / 2 - 1] + ms[BENCH_CALLS / 2]) / 2;
}

/* Loads a config text with tls_* keys; the load's result, its error in err. */
static int load_from_config(const char *text, char *err, size_t errlen)
{
    static const struct flyt_cfg_key keys[] = {FLYT_HTTP_TLS_CFG_KEYS, {NULL, 0, NULL, NULL, false, 0, 0}};
    struct flyt_config *cfg = flyt_config_new(keys);
    CHECK_EQ(flyt_config_parse(cfg, file("t.conf"), text, err, errlen), 0, "parse: %s", err);
    struct flyt_http_tls tls;
    int rc = flyt_http_tls_from_config(cfg, file("t.conf"), &tls, err, errlen);
    flyt_http_tls_free(&tls);
    flyt_config_free(cfg);
    return rc;
}

static void check_refusals(void)
{
    char err[1024];
    struct flyt_http_tls tls;
    printf("-- bad pairs are refused with the file named\n");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cp %s %s && chmod 644 %s", file("server.key"), file("open.key"),
             file("open.key"));
    CHECK_EQ(system(cmd), 0, "%s", cmd);
    CHECK_EQ(flyt_http_tls_load(file("server.pem"), file("open.key"), &tls, err, sizeof err), -1,
             "a world-readable key refused");
    CHECK(strstr(err, "open.key is open to other users") && strstr(err, "chmod 600"),
          "it says so: %s", err);
    CHECK_EQ(flyt_http_tls_load(file("server.pem"), file("other-ca.key"), &tls, err, sizeof err),
             -1, "a key of another certificate refused");
    CHECK(strstr(err, "other-ca.key is not the key of"), "it says so: %s", err);
    CHECK_EQ(flyt_http_tls_load(file("server.key"), file("server.key"), &tls, err, sizeof err), -1,
             "a key given as the certificate refused");
    CHECK(strstr(err, "no PEM certificate"), "it says so: %s", err);
    CHECK_EQ(flyt_http_tls_load(file("missing.pem"), file("server.key"), &tls, err, sizeof err),
             -1, "a missing certificate refused");
    CHECK(strstr(err, "missing.pem") && strstr(err, "No such file"), "it says so: %s", err);
    CHECK_EQ(load_from_config("tls_cert_file = server.pem\n", err, sizeof err), -1,
             "a certificate without its key refused");
    CHECK(strstr(err, "t.conf:1: tls_cert_file") && strstr(err, "without tls_key_file"),
          "it says so: %s", err);
    CHECK_EQ(load_from_config("tls_key_file = server.key\n", err, sizeof err), -1,
             "a key without its certificate refused");
    CHECK_EQ(load_from_config("tls_cert_file = server.pem\ntls_key_file = server.key\n", err,
                              sizeof err), 0, "the pair, relative to the config file: %s", err);
    CHECK_EQ(load_from_config("", err, sizeof err), 0, "neither: plain HTTP");
    CHECK_EQ(flyt_http_client_ca(file("server.key"), err, sizeof err), -1,
             "a CA file without a certificate refused");
    CHECK(strstr(err, "no PEM certificate"), "it says so: %s", err);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_http_tls PATH/make_test_certs.sh\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    flyt_log_init("test_http_tls", FLYT_LOG_ERROR);
    snprintf(dir, sizeof dir, "/tmp/flyt-test-tls-%d", (int)getpid());
    char cmd[600], err[1024];
    snprintf(cmd, sizeof cmd, "%s %s", argv[1], dir);
    int rc = system(cmd);
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
        return 77;
    CHECK_EQ(rc, 0, "%s", cmd);

    struct flyt_http_tls tls;
    CHECK_EQ(flyt_http_tls_load(file("server.pem"), file("server.key"), &tls, err, sizeof err), 0,
             "the server's pair loads: %s", err);
    struct flyt_http_server *https = flyt_http_start_tls("127.0.0.1:0", routes, NULL, NULL, &tls,
                                                         err, sizeof err);
    flyt_http_tls_free(&tls);
    CHECK_NE(https, NULL, "HTTPS server starts: %s", err);
    struct flyt_http_server *plain = flyt_http_start("127.0.0.1:0", routes, NULL, err, sizeof err);
    CHECK_NE(plain, NULL, "plain server starts: %s", err);
    char tls_url[128], plain_url[128], url[128];
    snprintf(tls_url, sizeof tls_url, "https://127.0.0.1:%d/v1/ping", flyt_http_port(https));
    snprintf(plain_url, sizeof plain_url, "http://127.0.0.1:%d/v1/ping", flyt_http_port(plain));
    long status;

    printf("-- only callers that trust the server's CA get an answer\n");
    CHECK_EQ(flyt_http_client_ca(file("ca.pem"), err, sizeof err), 0, "trust the CA: %s", err);
    CHECK_EQ(flyt_http_call("GET", tls_url, NULL, NULL, &status, NULL, err, sizeof err), 0,
             "a call with the right CA: %s", err);
    CHECK_EQ(status, 200, "answered 200");
    snprintf(url, sizeof url, "https://localhost:%d/v1/ping", flyt_http_port(https));
    CHECK_EQ(flyt_http_call("GET", url, NULL, NULL, &status, NULL, err, sizeof err), 0,
             "by the host name of the certificate: %s", err);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/ping", flyt_http_port(https));
    CHECK_EQ(flyt_http_call("GET", url, NULL, NULL, &status, NULL, err, sizeof err), -1,
             "plain HTTP to the TLS port gets no answer");
    printf("   plain HTTP to it: %s\n", err);
    CHECK_EQ(flyt_http_client_ca(file("other-ca.pem"), err, sizeof err), 0, "trust another CA");
    CHECK_EQ(flyt_http_call("GET", tls_url, NULL, NULL, &status, NULL, err, sizeof err), -1,
             "a caller trusting another CA refuses the server");
    CHECK(strstr(err, "certificate") && strstr(err, "other-ca.pem"), "it says why: %s", err);
    printf("   with another CA: %s\n", err);
    CHECK_EQ(flyt_http_client_ca(NULL, err, sizeof err), 0, "back to the system's store");
    CHECK_EQ(flyt_http_call("GET", tls_url, NULL, NULL, &status, NULL, err, sizeof err), -1,
             "the system's store does not know the test CA: refused");

    check_refusals();

    printf("-- cost: median of %d calls, a new connection each, loopback\n", BENCH_CALLS);
    CHECK_EQ(flyt_http_client_ca(file("ca.pem"), err, sizeof err), 0, "trust the CA");
    double plain_ms = median_call_ms(plain_url), tls_ms = median_call_ms(tls_url);
    printf("   plain HTTP %.3f ms, HTTPS %.3f ms (TLS 1.3, ECDSA P-256): +%.3f ms a call\n",
           plain_ms, tls_ms, tls_ms - plain_ms);
    CHECK_LT(tls_ms, 100.0, "an HTTPS call stays well under the callers' timeouts");

    flyt_http_stop(https);
    flyt_http_stop(plain);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) {
    }
    printf("test_http_tls: all passed\n");
    return 0;
}

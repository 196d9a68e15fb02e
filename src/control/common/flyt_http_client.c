/* The HTTP client side of flyt_http.h over libcurl. */
#include "flyt_http.h"

#include <curl/curl.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANSWER_LIMIT (16u << 20)

const char *flyt_http_client_ca_file(void);   /* flyt_http_tls.c: NULL for the system's */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

struct answer_buf {
    char *data;
    size_t len;
    int too_large;
};

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct answer_buf *a = userdata;
    size_t n = size * nmemb;
    if (a->len + n > ANSWER_LIMIT) {
        a->too_large = 1;
        return 0;
    }
    char *d = realloc(a->data, a->len + n + 1);
    if (!d)
        return 0;
    memcpy(d + a->len, ptr, n);
    a->data = d;
    a->len += n;
    a->data[a->len] = 0;
    return n;
}

int flyt_http_call(const char *method, const char *url, const char *token, json_t *body,
                   long *status, json_t **answer, char *err, size_t errlen)
{
    return flyt_http_call_timeout(method, url, token, body, 10000, status, answer, err, errlen);
}

/* One request with payload (NULL: none) of type ctype; the answer's bytes in ab. 0 when an
 * HTTP answer came (status set), -1 with err when none did. */
static int perform(const char *method, const char *url, const char *token, const char *payload,
                   size_t plen, const char *ctype, long timeout_ms, long *status,
                   struct answer_buf *ab, char *err, size_t errlen)
{
    *status = 0;
    if (err && errlen)
        err[0] = 0;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        snprintf(err, errlen, "libcurl initialisation failed");
        return -1;
    }
    CURL *curl = curl_easy_init();
    if (!curl) {
        snprintf(err, errlen, "libcurl: cannot create a handle");
        return -1;
    }
    struct curl_slist *headers = NULL;
    char auth[600], type[128];
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        headers = curl_slist_append(headers, auth);
    }
    if (payload) {
        snprintf(type, sizeof type, "Content-Type: %s", ctype);
        headers = curl_slist_append(headers, type);
    }
    headers = curl_slist_append(headers, "Expect:");   /* no 100-continue round trip */
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_PROXY, "");
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 3000 ? timeout_ms : 3000L);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, ab);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);   /* libcurl's defaults, never off */
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(curl, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
    if (flyt_http_client_ca_file()) {   /* that CA alone: not the system's directory too */
        curl_easy_setopt(curl, CURLOPT_CAINFO, flyt_http_client_ca_file());
        curl_easy_setopt(curl, CURLOPT_CAPATH, NULL);
    }
    if (payload) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)plen);
    } else if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "DELETE") != 0) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "");      /* Content-Length: 0 */
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, 0L);
    }
    CURLcode rc = curl_easy_perform(curl);
    int result = 0;
    if (rc != CURLE_OK) {
        const char *ca = flyt_http_client_ca_file();
        snprintf(err, errlen, "%s %s: %s%s%s%s", method, url,
                 ab->too_large ? "answer too large" : curl_err[0] ? curl_err
                                                                  : curl_easy_strerror(rc),
                 rc == CURLE_PEER_FAILED_VERIFICATION ? " (verified against " : "",
                 rc == CURLE_PEER_FAILED_VERIFICATION ? (ca ? ca : "the system's CA store") : "",
                 rc == CURLE_PEER_FAILED_VERIFICATION ? ")" : "");
        result = -1;
    } else {
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return result;
}

/* A non-2xx answer's error body into err: "HTTP <status> <code>: <message>". */
static void error_text(long status, json_t *j, const struct answer_buf *ab, char *err,
                       size_t errlen)
{
    json_t *e = j ? json_object_get(j, "error") : NULL;
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    snprintf(err, errlen, "HTTP %ld %s: %s", status, code ? code : "error",
             msg ? msg : (ab->data ? ab->data : "(no body)"));
}

int flyt_http_call_timeout(const char *method, const char *url, const char *token, json_t *body,
                           long timeout_ms, long *status, json_t **answer, char *err,
                           size_t errlen)
{
    if (answer)
        *answer = NULL;
    char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
    struct answer_buf ab = {0};
    int result = perform(method, url, token, payload, payload ? strlen(payload) : 0,
                         "application/json", timeout_ms, status, &ab, err, errlen);
    if (result == 0) {
        json_t *j = NULL;
        if (ab.len) {
            json_error_t jerr;
            j = json_loadb(ab.data, ab.len, 0, &jerr);
        }
        if (*status >= 200 && *status < 300) {
            if (ab.len && !j) {
                snprintf(err, errlen, "%s %s: HTTP %ld answer is not JSON", method, url, *status);
                result = -1;
            }
        } else {
            error_text(*status, j, &ab, err, errlen);
        }
        if (answer && result == 0)
            *answer = j;
        else
            json_decref(j);
    }
    free(ab.data);
    free(payload);
    return result;
}

int flyt_http_call_bytes(const char *method, const char *url, const char *token, const void *body,
                         size_t len, long timeout_ms, long *status, char **out, size_t *outlen,
                         char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    struct answer_buf ab = {0};
    int result = perform(method, url, token, body, len, "application/octet-stream", timeout_ms,
                         status, &ab, err, errlen);
    if (result == 0 && (*status < 200 || *status >= 300)) {
        json_error_t jerr;
        json_t *j = ab.len ? json_loadb(ab.data, ab.len, 0, &jerr) : NULL;
        error_text(*status, j, &ab, err, errlen);
        json_decref(j);
    } else if (result == 0) {
        *out = ab.data;
        *outlen = ab.len;
        ab.data = NULL;
    }
    free(ab.data);
    return result;
}

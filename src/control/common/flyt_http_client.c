/* The HTTP client side of flyt_http.h over libcurl. */
#include "flyt_http.h"

#include <curl/curl.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANSWER_LIMIT (16u << 20)

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

int flyt_http_call_timeout(const char *method, const char *url, const char *token, json_t *body,
                           long timeout_ms, long *status, json_t **answer, char *err,
                           size_t errlen)
{
    if (answer)
        *answer = NULL;
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
    char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
    struct curl_slist *headers = NULL;
    char auth[600];
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        headers = curl_slist_append(headers, auth);
    }
    if (payload)
        headers = curl_slist_append(headers, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Expect:");   /* no 100-continue round trip */
    struct answer_buf ab = {0};
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_PROXY, "");
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 3000 ? timeout_ms : 3000L);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &ab);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    if (payload) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
    } else if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "DELETE") != 0) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "");      /* Content-Length: 0 */
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, 0L);
    }
    CURLcode rc = curl_easy_perform(curl);
    int result = 0;
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "%s %s: %s", method, url,
                 ab.too_large ? "answer too large" : curl_err[0] ? curl_err
                                                                 : curl_easy_strerror(rc));
        result = -1;
    } else {
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
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
            json_t *e = j ? json_object_get(j, "error") : NULL;
            const char *code = json_string_value(json_object_get(e, "code"));
            const char *msg = json_string_value(json_object_get(e, "message"));
            snprintf(err, errlen, "HTTP %ld %s: %s", *status, code ? code : "error",
                     msg ? msg : (ab.data ? ab.data : "(no body)"));
        }
        if (answer && result == 0)
            *answer = j;
        else
            json_decref(j);
    }
    free(ab.data);
    free(payload);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return result;
}

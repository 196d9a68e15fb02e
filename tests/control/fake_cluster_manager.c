/*
 * A stand-in for flyt-cluster-manager's VM API (docs/api.md, "VM"), made with flyt_http,
 * for testing flyt-client-manager without GPU nodes: every session it hands out points
 * at one given endpoint (a flyt-server with the host backend).
 *
 * usage: fake_cluster_manager --listen HOST:PORT --vm-token TOKEN --endpoint ADDR
 *                             --log FILE [--first-id N] [--session-key HEX]
 *                             [--refuse-file FILE] [--fail-file FILE]
 * Appends one line per request to FILE: "create s-N pid=P process=NAME" (or, for a
 * pid holding a live session, which it gets again as the real one answers, "again s-N"),
 * "release s-N" (or "release s-N unknown"), "alive s-N" (or "alive s-N unknown").
 * While --refuse-file exists, creation answers 409 no_capacity; while --fail-file exists,
 * 503 unavailable. With --session-key the session token is a real one (flyt_token.h),
 * else "tok-s-N". Stops on SIGTERM/SIGINT.
 */
#include "flyt_http.h"
#include "flyt_token.h"

#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SESSIONS 1024

static struct {
    const char *vm_token, *endpoint, *refuse_file, *fail_file;
    unsigned char key[64];
    size_t keylen;
    FILE *log;
    pthread_mutex_t lock;
    int next_id;
    char live[MAX_SESSIONS][32];
    long long live_pid[MAX_SESSIONS];
    int nlive;
} fake = {.lock = PTHREAD_MUTEX_INITIALIZER, .next_id = 1};

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(fake.log, fmt, ap);
    va_end(ap);
    fputc('\n', fake.log);
    fflush(fake.log);
}

static int authorized(const struct flyt_http_request *req, struct flyt_http_response *res)
{
    if (req->token == NULL || strcmp(req->token, fake.vm_token) != 0) {
        flyt_http_reply_error(res, 401, "unauthorized", "missing or unknown token");
        return 0;
    }
    return 1;
}

/* lock held: index of pid's live session, -1 if none */
static int find_live_pid(long long pid)
{
    for (int i = 0; i < fake.nlive; i++)
        if (fake.live_pid[i] == pid)
            return i;
    return -1;
}

/* lock held: index of a live session, -1 if none */
static int find_live(const char *id)
{
    for (int i = 0; i < fake.nlive; i++)
        if (strcmp(fake.live[i], id) == 0)
            return i;
    return -1;
}

static void h_create(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx;
    if (!authorized(req, res))
        return;
    json_t *pid = json_object_get(req->body, "pid");
    if (!json_is_integer(pid) || json_integer_value(pid) <= 0) {
        flyt_http_reply_error(res, 400, "bad_request", "pid: expected a positive integer");
        return;
    }
    if (fake.refuse_file && access(fake.refuse_file, F_OK) == 0) {
        flyt_http_reply_error(res, 409, "no_capacity",
                              "needs 64 SMs and 20 GiB; best GPU node-a/0 has 8 SMs free");
        return;
    }
    if (fake.fail_file && access(fake.fail_file, F_OK) == 0) {
        flyt_http_reply_error(res, 503, "unavailable", "the node could not start the server");
        return;
    }
    const char *proc = json_string_value(json_object_get(req->body, "process"));
    char id[32], token[256];
    pthread_mutex_lock(&fake.lock);
    int held = find_live_pid(json_integer_value(pid));
    if (held >= 0) {
        snprintf(id, sizeof id, "%s", fake.live[held]);
        logf_("again %s", id);
    } else {
        snprintf(id, sizeof id, "s-%d", fake.next_id++);
        if (fake.nlive < MAX_SESSIONS) {
            fake.live_pid[fake.nlive] = json_integer_value(pid);
            snprintf(fake.live[fake.nlive++], sizeof fake.live[0], "%s", id);
        }
        logf_("create %s pid=%lld process=%s", id, (long long)json_integer_value(pid),
              proc ? proc : "-");
    }
    pthread_mutex_unlock(&fake.lock);
    if (fake.keylen)
        flyt_session_token_make(fake.key, fake.keylen, id, (long long)time(NULL) + 3600, token,
                                sizeof token);
    else
        snprintf(token, sizeof token, "tok-%s", id);
    json_t *s = json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", id, "vm_id", "vm-test", "pid",
                          json_integer_value(pid), "endpoint", fake.endpoint, "state", "active");
    flyt_http_reply_json(res, held >= 0 ? 200 : 201,
                         json_pack("{s:o, s:s}", "session", s, "token", token));
}

static void h_delete(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx;
    if (!authorized(req, res))
        return;
    /* slow, as a busy cluster manager: a request racing a release finds it not yet done */
    nanosleep(&(struct timespec){0, 150 * 1000 * 1000}, NULL);
    pthread_mutex_lock(&fake.lock);
    int i = find_live(req->params[0]);
    if (i >= 0) {
        memcpy(fake.live[i], fake.live[--fake.nlive], sizeof fake.live[0]);
        fake.live_pid[i] = fake.live_pid[fake.nlive];
    }
    logf_("release %s%s", req->params[0], i >= 0 ? "" : " unknown");
    pthread_mutex_unlock(&fake.lock);
    if (i < 0)
        flyt_http_reply_error(res, 404, "not_found", "no session %s", req->params[0]);
    else
        flyt_http_reply_status(res, 204);
}

static void h_alive(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx;
    if (!authorized(req, res))
        return;
    pthread_mutex_lock(&fake.lock);
    int i = find_live(req->params[0]);
    logf_("alive %s%s", req->params[0], i >= 0 ? "" : " unknown");
    pthread_mutex_unlock(&fake.lock);
    if (i < 0)
        flyt_http_reply_error(res, 404, "not_found", "no session %s", req->params[0]);
    else
        flyt_http_reply_status(res, 204);
}

static const struct flyt_http_route routes[] = {
    {"POST", "/v1/sessions", h_create},
    {"DELETE", "/v1/sessions/{id}", h_delete},
    {"POST", "/v1/sessions/{id}/alive", h_alive},
    {NULL, NULL, NULL}};

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"listen", required_argument, NULL, 'l'},
                                         {"vm-token", required_argument, NULL, 't'},
                                         {"endpoint", required_argument, NULL, 'e'},
                                         {"log", required_argument, NULL, 'o'},
                                         {"first-id", required_argument, NULL, 'f'},
                                         {"session-key", required_argument, NULL, 'k'},
                                         {"refuse-file", required_argument, NULL, 'r'},
                                         {"fail-file", required_argument, NULL, 'x'},
                                         {NULL, 0, NULL, 0}};
    const char *listen = NULL, *log = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l': listen = optarg; break;
        case 't': fake.vm_token = optarg; break;
        case 'e': fake.endpoint = optarg; break;
        case 'o': log = optarg; break;
        case 'f': fake.next_id = atoi(optarg); break;
        case 'k':
            if (flyt_hex_decode(optarg, fake.key, sizeof fake.key, &fake.keylen) < 0) {
                fprintf(stderr, "bad --session-key\n");
                return 2;
            }
            break;
        case 'r': fake.refuse_file = optarg; break;
        case 'x': fake.fail_file = optarg; break;
        default: return 2;
        }
    }
    if (!listen || !fake.vm_token || !fake.endpoint || !log) {
        fprintf(stderr, "usage: fake_cluster_manager --listen HOST:PORT --vm-token T "
                        "--endpoint ADDR --log FILE [...]\n");
        return 2;
    }
    fake.log = fopen(log, "a");
    if (fake.log == NULL) {
        perror(log);
        return 2;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    char err[256];
    struct flyt_http_server *s = flyt_http_start(listen, routes, NULL, err, sizeof err);
    if (s == NULL) {
        fprintf(stderr, "fake_cluster_manager: %s\n", err);
        return 1;
    }
    printf("listening on port %d\n", flyt_http_port(s));
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    flyt_http_stop(s);
    fclose(fake.log);
    return 0;
}

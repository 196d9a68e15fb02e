/*
 * Checkpoint and restore on the node (docs/node-manager.md, "Checkpoint and
 * restore"; docs/api.md, "Cluster manager -> node manager"):
 *   POST   /v1/servers/{id}/checkpoint  the session writes STATE_DIR/ID.state;
 *          {"stop": true}: the session ends after it and its server is stopped;
 *          with "suspend": true it is preempted (its client waits for a restore);
 *          {"to": {"address", "secret"}}: and streams it to a receiving server
 *   GET    /v1/servers/{id}/checkpoint  its progress: {sent, estimate}
 *   GET    /v1/checkpoints/{id}?offset=N&length=M  bytes of that file
 *   PUT    /v1/checkpoints/{id}?offset=N  bytes into it (offset 0 starts it anew)
 *   DELETE /v1/checkpoints/{id}           removes it
 * POST /v1/servers with "restore": true starts `flyt-server --restore` on it; with
 * "receive": true it starts one that takes the state streamed to it (servers.c).
 * One file per session: a migration that falls back to its source restores
 * the file its checkpoint left there, with nothing to copy.
 */
#include "nm.h"

#include "flyt_ckpt_request.h"
#include "flyt_log.h"
#include "flyt_server_status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_TIMEOUT_MS (10LL * 60 * 1000)

int nm_state_file(const struct nm *nm, const char *sid, char *out, size_t outlen)
{
    return snprintf(out, outlen, "%s/%s.state", nm->cfg.state_dir, sid) < (int)outlen ? 0 : -1;
}

/* The {id} of the request as a session id with its state file; -1 once answered. */
static int state_path_of(struct nm *nm, const struct flyt_http_request *req,
                         struct flyt_http_response *res, char *path, size_t pathlen)
{
    if (!nm_authorized(nm, req, res))
        return -1;
    if (!nm_valid_sid(req->params[0]) || nm_state_file(nm, req->params[0], path, pathlen) != 0) {
        flyt_http_reply_error(res, 400, "bad_request", "not a session id: %s", req->params[0]);
        return -1;
    }
    return 0;
}

/* A non-negative integer query argument (absent: dflt); -1 once answered. */
static long long query_num(const struct flyt_http_request *req, struct flyt_http_response *res,
                           const char *name, long long dflt)
{
    const char *v = flyt_http_query(req, name);
    if (!v)
        return dflt;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < 0) {
        flyt_http_reply_error(res, 400, "bad_request", "%s: expected a non-negative integer", name);
        return -1;
    }
    return n;
}

void nm_h_checkpoint(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    char path[PATH_MAX + NM_SID_MAX + 16], status_path[sizeof path];
    if (state_path_of(nm, req, res, path, sizeof path) != 0)
        return;
    json_t *stop = json_object_get(req->body, "stop"), *to = json_object_get(req->body, "to");
    json_t *suspend = json_object_get(req->body, "suspend");
    const char *to_addr = json_string_value(json_object_get(to, "address"));
    const char *to_secret = json_string_value(json_object_get(to, "secret"));
    if ((req->body && !json_is_object(req->body)) || (stop && !json_is_boolean(stop)) ||
        (suspend && (!json_is_boolean(suspend) || (json_is_true(suspend) && !json_is_true(stop)))) ||
        (to && (!to_addr || !to_secret || strncmp(to_addr, "tcp://", 6) != 0))) {
        flyt_http_reply_error(res, 400, "bad_request", "body: expected {\"stop\": true|false, "
                              "\"suspend\"?: true|false (only with stop), \"to\"?: "
                              "{\"address\": \"tcp://HOST:PORT\", \"secret\": HEX}}");
        return;
    }
    pthread_mutex_lock(&nm->lock);
    struct nm_server *s = nm_server_find(nm, req->params[0]);
    int running = s && s->state == NM_RUNNING;
    if (running)
        snprintf(status_path, sizeof status_path, "%s", s->status_path);
    pthread_mutex_unlock(&nm->lock);
    if (!running) {
        flyt_http_reply_error(res, 404, "not_found", "no running server for session %s",
                              req->params[0]);
        return;
    }
    struct flyt_ckpt_outcome out;
    char err[600];
    struct flyt_ckpt_dest dest = {to_addr, to_secret};
    uint32_t flags = (json_is_true(stop) ? FLYT_CKPT_STOP : 0u) |
                     (json_is_true(suspend) ? FLYT_CKPT_SUSPEND : 0u);
    int rc = flyt_ckpt_request(status_path, path, &dest, flags, CKPT_TIMEOUT_MS, &out,
                               err, sizeof err);
    if (rc != 0 || out.result != 0) {
        flyt_warn("session %s: checkpoint failed: %s", req->params[0], err);
        /* no_session: no client holds anything there; a migration starts it afresh */
        flyt_http_reply_error(res, 409, rc == FLYT_CKPT_NO_SESSION ? "no_session" : "conflict",
                              "session %s: checkpoint: %s", req->params[0], err);
        return;
    }
    flyt_info("session %s: checkpoint of %llu bytes in %.1f ms%s", req->params[0],
              (unsigned long long)out.bytes, (double)out.ns / 1e6,
              json_is_true(stop) ? "; stopping its server" : "");
    if (json_is_true(stop))
        nm_server_stop_wait(nm, req->params[0]); /* the session ended: nothing else to serve */
    flyt_http_reply_json(res, 200, json_pack("{s:I,s:f,s:b,s:b,s:I}", "bytes",
                                             (json_int_t)out.bytes, "ms", (double)out.ns / 1e6,
                                             "stopped", json_is_true(stop), "streamed", to != NULL,
                                             "precopy_ms", (json_int_t)out.precopy_ms));
}

/* GET /v1/servers/{id}/checkpoint: how far the checkpoint in progress is. */
void nm_h_checkpoint_progress(void *ctx, const struct flyt_http_request *req,
                              struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    char path[PATH_MAX + NM_SID_MAX + 16], status_path[sizeof path];
    if (state_path_of(nm, req, res, path, sizeof path) != 0)
        return;
    pthread_mutex_lock(&nm->lock);
    struct nm_server *s = nm_server_find(nm, req->params[0]);
    if (s)
        snprintf(status_path, sizeof status_path, "%s", s->status_path);
    pthread_mutex_unlock(&nm->lock);
    uint64_t sent = 0, estimate = 0;
    if (!s || flyt_ckpt_progress(status_path, &sent, &estimate) != 0) {
        flyt_http_reply_error(res, 404, "not_found", "no server for session %s", req->params[0]);
        return;
    }
    flyt_http_reply_json(res, 200, json_pack("{s:I,s:I}", "sent", (json_int_t)sent, "estimate",
                                             (json_int_t)estimate));
}

void nm_h_state_get(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    char path[PATH_MAX + NM_SID_MAX + 16];
    if (state_path_of(nm, req, res, path, sizeof path) != 0)
        return;
    long long off = query_num(req, res, "offset", 0);
    long long len = off < 0 ? -1 : query_num(req, res, "length", 512 * 1024);
    if (off < 0 || len < 0)
        return;
    if (len > FLYT_HTTP_BODY_LIMIT)
        len = FLYT_HTTP_BODY_LIMIT;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = fd < 0 ? NULL : malloc((size_t)len + 1);
    ssize_t n = buf ? pread(fd, buf, (size_t)len, off) : -1;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    if (n < 0) {
        free(buf);
        flyt_http_reply_error(res, fd < 0 && saved == ENOENT ? 404 : 500,
                              fd < 0 && saved == ENOENT ? "not_found" : "internal",
                              "state of session %s: %s", req->params[0], strerror(saved));
        return;
    }
    flyt_http_reply_bytes(res, 200, buf, (size_t)n);
}

void nm_h_state_put(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    char path[PATH_MAX + NM_SID_MAX + 16];
    if (state_path_of(nm, req, res, path, sizeof path) != 0)
        return;
    long long off = query_num(req, res, "offset", 0);
    if (off < 0)
        return;
    if (req->body) {
        flyt_http_reply_error(res, 400, "bad_request", "body: expected application/octet-stream");
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (off == 0 ? O_TRUNC : 0), 0600);
    struct stat st;
    int rc = fd < 0 ? -1 : fstat(fd, &st);
    if (rc == 0 && st.st_size != off) {
        close(fd);
        flyt_http_reply_error(res, 409, "conflict", "offset %lld: the file holds %lld bytes", off,
                              (long long)st.st_size);
        return;
    }
    ssize_t n = rc == 0 && req->raw_len ? pwrite(fd, req->raw, req->raw_len, off) : 0;
    int saved = errno;
    if (fd >= 0 && close(fd) != 0 && n >= 0)
        n = -1;
    if (rc != 0 || n != (ssize_t)req->raw_len) {
        flyt_http_reply_error(res, 507, "internal", "state of session %s: %s", req->params[0],
                              n >= 0 && rc == 0 ? "short write" : strerror(saved));
        return;
    }
    flyt_http_reply_json(res, 200, json_pack("{s:I}", "bytes", (json_int_t)(off + n)));
}

void nm_h_state_delete(void *ctx, const struct flyt_http_request *req,
                       struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    char path[PATH_MAX + NM_SID_MAX + 16];
    if (state_path_of(nm, req, res, path, sizeof path) != 0)
        return;
    char received[sizeof path + 16]; /* a receiving server's copy (docs/node-manager.md) */
    snprintf(received, sizeof received, "%s/%s.received", nm->cfg.state_dir, req->params[0]);
    int had_received = unlink(received) == 0;
    if (unlink(path) != 0 && !(errno == ENOENT && had_received)) {
        flyt_http_reply_error(res, errno == ENOENT ? 404 : 500,
                              errno == ENOENT ? "not_found" : "internal", "state of session %s: %s",
                              req->params[0], strerror(errno));
        return;
    }
    flyt_http_reply_status(res, 204);
}

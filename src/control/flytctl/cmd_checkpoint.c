/* flytctl checkpoint / restore / migrate / node drain|undrain (docs/flytctl.md): state
 * files move in chunks through the cluster manager (docs/api.md, "Checkpoint, restore,
 * migration"); progress goes to stderr, results to stdout. */
#include "ctl.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHUNK (512 * 1024)
#define LONG_CALL_MS (10L * 60 * 1000)
#define PROGRESS_STEP (64LL << 20)

const struct ctl_opt ctl_checkpoint_opts[] = {
    {"--to", "FILE", "where to write the state (required)"},
    {"--stop", NULL, "end the session after the checkpoint: it is suspended (preemption)"},
    {NULL, NULL, NULL}};
const struct ctl_opt ctl_where_opts[] = {
    {"--node", "ID", "the target node (default: placement picks one)"},
    {"--gpu", "N", "the GPU index on the target node"},
    {NULL, NULL, NULL}};

const struct ctl_opt ctl_migrate_opts[] = {
    {"--node", "ID", "the target node (default: placement picks one)"},
    {"--gpu", "N", "the GPU index on the target node"},
    {"--via", "stream|file", "stream the state to a receiving server (default), or copy its file"},
    {NULL, NULL, NULL}};

static long call_ms(const struct ctl *c) { return c->timeout_ms > LONG_CALL_MS ? c->timeout_ms : LONG_CALL_MS; }

static void progress(const char *what, long long done, long long total, long long *shown)
{
    if (done - *shown < PROGRESS_STEP && done != total)
        return;
    *shown = done;
    fprintf(stderr, "%s: %lld of %lld bytes\n", what, done, total);
}

/* Downloads the session's state file into path (via path.tmp). */
static int download(struct ctl *c, const char *sid, const char *path, long long total)
{
    char tmp[4200], url[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "flytctl: %s: %s\n", tmp, strerror(errno));
        return CTL_EUSAGE;
    }
    long long off = 0, shown = 0;
    int rc = CTL_OK;
    for (;;) {
        char *data;
        size_t n;
        ctl_path(url, sizeof url, "/v1/sessions/%s/checkpoint", sid);
        snprintf(url + strlen(url), sizeof url - strlen(url), "?offset=%lld&length=%d", off, CHUNK);
        if ((rc = ctl_call_bytes(c, "GET", url, NULL, 0, c->timeout_ms, &data, &n)))
            break;
        if (n && fwrite(data, 1, n, f) != n)
            rc = CTL_EUSAGE;
        free(data);
        off += (long long)n;
        if (total > CHUNK)
            progress("download", off, total, &shown);
        if (rc || n < CHUNK)
            break;
    }
    if (fclose(f) != 0 && !rc)
        rc = CTL_EUSAGE;
    if (!rc && off != total) {
        fprintf(stderr, "flytctl: got %lld of %lld bytes\n", off, total);
        rc = CTL_EAPI;
    }
    if (!rc && rename(tmp, path) != 0) {
        fprintf(stderr, "flytctl: %s: %s\n", path, strerror(errno));
        rc = CTL_EUSAGE;
    }
    if (rc)
        remove(tmp);
    return rc;
}

int ctl_checkpoint(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    const char *sid = a->pos[0], *to = ctl_opt(cmd, a, "--to");
    if (!to)
        return ctl_usage(cmd, "give --to FILE");
    if (ctl_arg_id(cmd, "SESSION", sid))
        return CTL_EUSAGE;
    int stop = ctl_opt(cmd, a, "--stop") != NULL;
    char path[512];
    ctl_path(path, sizeof path, "/v1/sessions/%s/checkpoint", sid);
    json_t *ans = NULL, *body = json_pack("{s:b}", "stop", stop);
    long saved = c->timeout_ms;
    c->timeout_ms = call_ms(c);
    int rc = ctl_call(c, "POST", path, body, 1, &ans);
    c->timeout_ms = saved;
    json_decref(body);
    if (rc)
        return rc;
    json_t *ck = json_object_get(ans, "checkpoint");
    long long bytes = json_integer_value(json_object_get(ck, "bytes"));
    double ms = json_number_value(json_object_get(ck, "ms"));
    json_decref(ans);
    fprintf(stderr, "checkpoint: %lld bytes written on the node in %.1f ms\n", bytes, ms);
    rc = download(c, sid, to, bytes);
    if (rc)
        return rc;
    if (ctl_call(c, "DELETE", path, NULL, 1, &ans) == CTL_OK)
        json_decref(ans);
    printf("Session %s: %lld bytes written to %s%s.\n", sid, bytes, to,
           stop ? "; the session is stopped (suspended) until restored" : "");
    return CTL_OK;
}

/* The session id in a state file's SESSION record (docs/state-format.md). */
static int file_session(const char *file, char *sid, size_t sidlen, long long *size)
{
    unsigned char head[48 + 16 + 136];
    FILE *f = fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "flytctl: %s: %s\n", file, strerror(errno));
        return -1;
    }
    size_t n = fread(head, 1, sizeof head, f);
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fclose(f);
    uint32_t type;
    memcpy(&type, head + 48, sizeof type);
    if (n != sizeof head || memcmp(head, "FLYTSTAT", 8) != 0 || type != 1 || head[64] == 0
        || memchr(head + 64, 0, 136) == NULL) {
        fprintf(stderr, "flytctl: %s is not a Flyt state file of a managed session\n", file);
        return -1;
    }
    snprintf(sid, sidlen, "%s", (const char *)head + 64);
    return 0;
}

static int upload(struct ctl *c, const char *sid, const char *file, long long total)
{
    FILE *f = fopen(file, "rb");
    char *buf = malloc(CHUNK), url[512];
    int rc = f && buf ? CTL_OK : CTL_EUSAGE;
    long long off = 0, shown = 0;
    while (rc == CTL_OK) {
        size_t n = fread(buf, 1, CHUNK, f);
        if (n == 0)
            break;
        ctl_path(url, sizeof url, "/v1/sessions/%s/restore", sid);
        snprintf(url + strlen(url), sizeof url - strlen(url), "?offset=%lld", off);
        char *ans;
        size_t an;
        rc = ctl_call_bytes(c, "PUT", url, buf, n, c->timeout_ms, &ans, &an);
        free(ans);
        off += (long long)n;
        if (total > CHUNK && rc == CTL_OK)
            progress("upload", off, total, &shown);
    }
    if (f)
        fclose(f);
    free(buf);
    return rc;
}

/* "node" / "gpu_index" from --node / --gpu; NULL after a usage error. */
static json_t *where_body(const struct ctl_cmd *cmd, struct ctl_args *a)
{
    const char *node = ctl_opt(cmd, a, "--node"), *gpu = ctl_opt(cmd, a, "--gpu");
    long long g = 0;
    if ((node && ctl_arg_id(cmd, "--node", node)) || (gpu && ctl_arg_count(cmd, "--gpu", gpu, 0,
                                                                            1023, &g)))
        return NULL;
    json_t *b = json_object();
    if (node)
        json_object_set_new(b, "node", json_string(node));
    if (gpu)
        json_object_set_new(b, "gpu_index", json_integer(g));
    return b;
}

int ctl_restore(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    char sid[136], path[512];
    long long size;
    json_t *body = where_body(cmd, a), *ans = NULL;
    if (!body)
        return CTL_EUSAGE;
    if (file_session(a->pos[0], sid, sizeof sid, &size) != 0) {
        json_decref(body);
        return CTL_EUSAGE;
    }
    ctl_path(path, sizeof path, "/v1/sessions/%s/restore", sid);
    int rc = ctl_call(c, "POST", path, body, 1, &ans);
    json_decref(body);
    if (rc)
        return rc;
    json_t *r = json_object_get(ans, "restore");
    fprintf(stderr, "restore: session %s to node %s GPU %lld; uploading %lld bytes\n", sid,
            json_string_value(json_object_get(r, "node")),
            (long long)json_integer_value(json_object_get(r, "gpu_index")), size);
    json_decref(ans);
    rc = upload(c, sid, a->pos[0], size);
    if (rc) {
        if (ctl_call(c, "DELETE", path, NULL, 1, &ans) == CTL_OK)
            json_decref(ans);
        return rc;
    }
    ctl_path(path, sizeof path, "/v1/sessions/%s/restore/start", sid);
    long saved = c->timeout_ms;
    c->timeout_ms = call_ms(c);
    rc = ctl_call(c, "POST", path, NULL, 1, &ans);
    c->timeout_ms = saved;
    if (rc)
        return rc;
    json_t *s = json_object_get(ans, "session");
    printf("Session %s restored on %s/%lld at %s.\n", sid,
           json_string_value(json_object_get(s, "node")),
           (long long)json_integer_value(json_object_get(s, "gpu_index")),
           json_string_value(json_object_get(s, "endpoint")));
    json_decref(ans);
    return CTL_OK;
}

/* Starts a migration of sid and follows it to its end; prints its outcome. */
static int migrate_one(struct ctl *c, const char *sid, json_t *body)
{
    char path[512];
    json_t *ans = NULL;
    ctl_path(path, sizeof path, "/v1/sessions/%s/migrate", sid);
    int rc = ctl_call(c, "POST", path, body, 1, &ans);
    if (rc)
        return rc;
    json_t *m = json_object_get(ans, "migration");
    fprintf(stderr, "migrate %s: %s -> %s GPU %lld\n", sid,
            json_string_value(json_object_get(m, "from_node")),
            json_string_value(json_object_get(m, "to_node")),
            (long long)json_integer_value(json_object_get(m, "to_gpu")));
    json_decref(ans);
    ctl_path(path, sizeof path, "/v1/sessions/%s/migration", sid);
    char phase[32] = "";
    long long shown = 0;
    for (;;) {
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
        if ((rc = ctl_call(c, "GET", path, NULL, 1, &ans)))
            return rc;
        m = json_object_get(ans, "migration");
        const char *ph = json_string_value(json_object_get(m, "phase"));
        long long bytes = json_integer_value(json_object_get(m, "bytes"));
        long long total = json_integer_value(json_object_get(m, "total"));
        if (ph && strcmp(ph, phase) != 0) {
            snprintf(phase, sizeof phase, "%s", ph);
            fprintf(stderr, "migrate %s: %s\n", sid, ph);
        }
        if (ph && (strcmp(ph, "copy") == 0 || strcmp(ph, "stream") == 0) && total > CHUNK)
            progress(ph, bytes, total, &shown); /* stream: of about total */
        if (json_is_true(json_object_get(m, "done")))
            break;
        json_decref(ans);
    }
    int ok = json_is_true(json_object_get(m, "ok"));
    if (c->json)
        ctl_print_json(ans);
    else if (ok)
        printf("Session %s migrated to %s at %s (%s); downtime %lld ms.\n", sid,
               json_string_value(json_object_get(m, "to_node")),
               json_string_value(json_object_get(m, "endpoint")),
               json_string_value(json_object_get(m, "via")),
               (long long)json_integer_value(json_object_get(m, "downtime_ms")));
    else
        fprintf(stderr, "flytctl: session %s: %s\n", sid,
                json_string_value(json_object_get(m, "message")));
    json_decref(ans);
    return ok ? CTL_OK : CTL_EAPI;
}

int ctl_migrate(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    if (ctl_arg_id(cmd, "SESSION", a->pos[0]))
        return CTL_EUSAGE;
    const char *via = ctl_opt(cmd, a, "--via");
    if (via && strcmp(via, "stream") != 0 && strcmp(via, "file") != 0) {
        fprintf(stderr, "flytctl: migrate: --via wants stream or file, got \"%s\"\n", via);
        return CTL_EUSAGE;
    }
    json_t *body = where_body(cmd, a);
    if (!body)
        return CTL_EUSAGE;
    if (via)
        json_object_set_new(body, "stream", json_boolean(strcmp(via, "stream") == 0));
    int rc = migrate_one(c, a->pos[0], body);
    json_decref(body);
    return rc;
}

static int drain(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a, const char *method)
{
    if (ctl_arg_id(cmd, "ID", a->pos[0]))
        return CTL_EUSAGE;
    char path[512];
    json_t *ans = NULL;
    ctl_path(path, sizeof path, "/v1/nodes/%s/drain", a->pos[0]);
    int rc = ctl_call(c, method, path, NULL, 1, &ans);
    if (rc)
        return rc;
    json_t *ids = json_object_get(ans, "sessions");
    if (strcmp(method, "DELETE") == 0) {
        printf("Node %s takes placements again.\n", a->pos[0]);
        json_decref(ans);
        return CTL_OK;
    }
    size_t i, failed = 0;
    json_t *id;
    fprintf(stderr, "node %s draining: %zu session(s) to migrate\n", a->pos[0],
            json_array_size(ids));
    json_array_foreach(ids, i, id) {
        json_t *body = json_object();
        if (migrate_one(c, json_string_value(id), body) != CTL_OK)
            failed++;
        json_decref(body);
    }
    printf("Node %s drained: %zu session(s) migrated, %zu failed.\n", a->pos[0],
           json_array_size(ids) - failed, failed);
    json_decref(ans);
    return failed ? CTL_EAPI : CTL_OK;
}

int ctl_node_drain(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    return drain(c, cmd, a, "POST");
}

int ctl_node_undrain(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    return drain(c, cmd, a, "DELETE");
}

/*
 * Servers of an earlier run: a node manager that crashed or was killed (SIGKILL,
 * OOM) left its flyt-servers running, and their tenants' programs with them. At start
 * it adopts them instead of ending their sessions (docs/node-manager.md, "Restart").
 *
 * Each server has a record, STATE_DIR/SID.server (0600, JSON), written when it is
 * spawned and again when its share changes: its pid and that process's start time,
 * GPU (index and UUID), port, Unix socket, SM groups, memory quota and VM. A record is
 * adopted only when the process is provably that server:
 *   - a pidfd is opened on the pid first, and then /proc/PID/stat must show the
 *     recorded start time (a reused pid has another), so the pidfd names that very
 *     process for good;
 *   - /proc/PID/exe must be the configured flyt-server (also when it was replaced on
 *     disk since: " (deleted)");
 *   - its status page must say it listens on the recorded port, as the recorded pid.
 * A process that fails the first two is someone else's: left alone, never signalled.
 * Our server that fails the last (it never listened) or whose GPU changed is killed
 * (its process group). Adopted servers are not our children: the main loop polls
 * their pidfds (nm_adopted_exited) instead of waitid, signals go through the pidfd,
 * and someone else reaps them. The register call that follows reports them alive; the
 * cluster manager keeps their sessions (and the capacity they hold, which it never
 * released) and names in its answer's "stop" list those it no longer knows.
 */
#include "nm.h"

#include "flyt_log.h"
#include "flyt_proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the record ---- */

int nm_server_record(struct nm *nm, const struct nm_server *s)
{
    FLYT_ASSERT_HELD(&nm->lock);
    unsigned long long start = 0;
    int ended = 0;
    const struct nm_gpu *gpu = nm_gpu_by_index(nm, s->gpu_index);
    if (!gpu || flyt_proc_start_time(s->pid, &start, &ended) != 0) {
        flyt_warn("session %s: no record of server pid %d: a later run cannot adopt it", s->sid,
                  (int)s->pid);
        return -1;
    }
    json_t *groups = json_array();
    for (int i = 0; i < s->ngroups; i++)
        json_array_append_new(groups, json_integer(s->groups[i]));
    json_t *rec = json_pack("{s:s,s:i,s:I,s:i,s:s,s:i,s:s,s:o,s:i,s:I,s:s}", "session_id", s->sid,
                            "pid", (int)s->pid, "start_time", (json_int_t)start, "gpu_index",
                            s->gpu_index, "gpu_uuid", gpu->uuid, "port", s->port, "sock",
                            s->sock_path, "sm_groups", groups, "sm_count", s->sm_count,
                            "memory_quota", (json_int_t)s->memory_quota, "vm_id", s->vm_id);
    char *text = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    json_decref(rec);
    char tmp[sizeof s->record_path + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", s->record_path);
    unlink(tmp);
    int fd = text ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
    size_t len = text ? strlen(text) : 0;
    int ok = fd >= 0 && write(fd, text, len) == (ssize_t)len;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    ok = ok && rename(tmp, s->record_path) == 0; /* a reader sees the old record or the new */
    free(text);
    if (!ok) {
        flyt_warn("session %s: cannot write %s (%s): a later run cannot adopt its server", s->sid,
                  s->record_path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* The record of sid as a server entry (not linked); NULL when unreadable or malformed. */
static struct nm_server *record_load(const struct nm_config *c, const char *sid,
                                     unsigned long long *start, char *uuid, size_t uuidlen)
{
    char path[PATH_MAX + NM_SID_MAX + 16];
    snprintf(path, sizeof path, "%s/%s.server", c->state_dir, sid);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    json_t *groups = json_object_get(r, "sm_groups");
    const char *rsid = json_string_value(json_object_get(r, "session_id"));
    const char *ruuid = json_string_value(json_object_get(r, "gpu_uuid"));
    const char *sock = json_string_value(json_object_get(r, "sock"));
    const char *vm = json_string_value(json_object_get(r, "vm_id"));
    struct nm_server *s = calloc(1, sizeof *s);
    if (!s || !rsid || strcmp(rsid, sid) != 0 || !ruuid || !sock || !vm ||
        strlen(sock) >= sizeof s->sock_path || strlen(vm) >= sizeof s->vm_id ||
        !json_is_array(groups) || json_array_size(groups) > NM_MAX_GROUPS) {
        flyt_warn("%s: not a server record this node manager wrote (%s)", path,
                  r ? "fields missing" : je.text);
        json_decref(r);
        free(s);
        return NULL;
    }
    snprintf(s->sid, sizeof s->sid, "%s", sid);
    s->pid = (pid_t)json_integer_value(json_object_get(r, "pid"));
    *start = (unsigned long long)json_integer_value(json_object_get(r, "start_time"));
    snprintf(uuid, uuidlen, "%s", ruuid);
    s->gpu_index = (int)json_integer_value(json_object_get(r, "gpu_index"));
    s->port = (int)json_integer_value(json_object_get(r, "port"));
    s->sm_count = (int)json_integer_value(json_object_get(r, "sm_count"));
    s->memory_quota = json_integer_value(json_object_get(r, "memory_quota"));
    snprintf(s->sock_path, sizeof s->sock_path, "%s", sock);
    snprintf(s->vm_id, sizeof s->vm_id, "%s", vm);
    size_t i;
    json_t *g;
    json_array_foreach(groups, i, g)
        s->groups[s->ngroups++] = (int)json_integer_value(g);
    json_decref(r);
    snprintf(s->key_path, sizeof s->key_path, "%s/%s.key", c->state_dir, sid);
    snprintf(s->status_path, sizeof s->status_path, "%s/%s.status", c->state_dir, sid);
    snprintf(s->record_path, sizeof s->record_path, "%s/%s.server", c->state_dir, sid);
    s->pidfd = -1;
    return s;
}

/* ---- proving the process ---- */

/* Whether pid runs the configured flyt-server binary. */
static int runs_server_binary(const struct nm_config *c, pid_t pid)
{
    char link[64], exe[PATH_MAX + 16], want[PATH_MAX];
    snprintf(link, sizeof link, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(link, exe, sizeof exe - 1);
    if (n <= 0 || !realpath(c->server_path, want))
        return 0;
    exe[n] = '\0';
    size_t wl = strlen(want);
    return strncmp(exe, want, wl) == 0 && (exe[wl] == '\0' || strcmp(exe + wl, " (deleted)") == 0);
}

enum verdict { LEAVE, STOP, ADOPT };

/* What to do with the process of record s; s->pidfd open unless LEAVE. */
static enum verdict judge(struct nm *nm, struct nm_server *s, unsigned long long start,
                          const char *uuid, char *why, size_t whylen)
{
    s->pidfd = s->pid > 1 ? flyt_pidfd_open(s->pid) : -1;
    if (s->pidfd < 0) {
        snprintf(why, whylen, "pid %d is gone", (int)s->pid);
        return LEAVE;
    }
    unsigned long long now_start;
    int ended;
    /* after the pidfd: if this is the recorded process, the pidfd is too */
    if (flyt_proc_start_time(s->pid, &now_start, &ended) != 0 || ended || now_start != start) {
        snprintf(why, whylen, "pid %d is another process now (start time %llu, recorded %llu)",
                 (int)s->pid, now_start, start);
        return LEAVE;
    }
    if (!runs_server_binary(&nm->cfg, s->pid)) {
        snprintf(why, whylen, "pid %d does not run %s", (int)s->pid, nm->cfg.server_path);
        return LEAVE;
    }
    const struct nm_gpu *gpu = nm_gpu_by_index(nm, s->gpu_index);
    if (!gpu || strcmp(gpu->uuid, uuid) != 0) {
        snprintf(why, whylen, "its GPU %d (%s) is not this node's any more", s->gpu_index, uuid);
        return STOP;
    }
    if (!nm_server_listening(s)) {
        snprintf(why, whylen, "its status page does not say it listens on port %d", s->port);
        return STOP;
    }
    return ADOPT;
}

/* Adopts the server of sid's record, or stops it, or leaves its pid alone. */
static void adopt_one(struct nm *nm, const char *sid)
{
    FLYT_ASSERT_HELD(&nm->lock);
    unsigned long long start = 0;
    char uuid[64], why[PATH_MAX + 128];
    struct nm_server *s = record_load(&nm->cfg, sid, &start, uuid, sizeof uuid);
    if (!s)
        return;
    enum verdict v = judge(nm, s, start, uuid, why, sizeof why);
    if (v == ADOPT) {
        s->adopted = 1;
        s->state = NM_RUNNING;
        s->next = nm->servers;
        nm->servers = s;
        char ep[NM_STR * 2];
        nm_server_endpoint(nm, s, ep, sizeof ep);
        flyt_info("session %s: adopted server pid %d of an earlier run at %s (GPU %d, %d SMs, "
                  "%lld bytes)", sid, (int)s->pid, ep, s->gpu_index, s->sm_count, s->memory_quota);
        return;
    }
    if (v == STOP) {
        /* ours and alive (the pidfd holds it): its group id is still its own */
        kill(-s->pid, SIGKILL);
        flyt_pidfd_signal(s->pidfd, SIGKILL);
        flyt_warn("session %s: stopped server pid %d of an earlier run: %s", sid, (int)s->pid, why);
    } else {
        flyt_info("session %s: no server of an earlier run to adopt (%s): its files go", sid,
                  why);
    }
    if (s->pidfd >= 0)
        close(s->pidfd);
    free(s);
}

/* sid of a state_dir file NAME ending in a suffix of ours, into sid; 0 when it is none. */
static int file_sid(const char *name, char *sid, size_t sidlen)
{
    static const char *const suffixes[] = {".server", ".status", ".key", ".sock", ".server.tmp"};
    size_t l = strlen(name);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t sl = strlen(suffixes[i]);
        if (l > sl && l - sl < sidlen && strcmp(name + l - sl, suffixes[i]) == 0) {
            memcpy(sid, name, l - sl);
            sid[l - sl] = '\0';
            return nm_valid_sid(sid);
        }
    }
    return 0;
}

int nm_adopted_exited(struct nm_server *s)
{
    if (!flyt_pidfd_exited(s->pidfd))
        return 0;
    kill(-s->pid, SIGKILL); /* what is left of its sessions */
    return 1;
}

void nm_servers_adopt(struct nm *nm)
{
    const char *dirpath = nm->cfg.state_dir;
    pthread_mutex_lock(&nm->lock);
    for (int pass = 0; pass < 2; pass++) { /* records first, then the files nobody owns */
        DIR *d = opendir(dirpath);
        if (!d)
            break;
        struct dirent *e;
        int removed = 0;
        while ((e = readdir(d))) {
            char sid[NM_SID_MAX];
            size_t l = strlen(e->d_name);
            if (!file_sid(e->d_name, sid, sizeof sid))
                continue;
            if (pass == 0 && l > 7 && strcmp(e->d_name + l - 7, ".server") == 0)
                adopt_one(nm, sid);
            if (pass == 1 && !nm_server_find(nm, sid)) {
                char p[PATH_MAX + NM_STR];
                snprintf(p, sizeof p, "%s/%s", dirpath, e->d_name);
                removed += unlink(p) == 0;
            }
        }
        closedir(d);
        if (removed)
            flyt_info("removed %d file(s) of an earlier run from %s", removed, dirpath);
    }
    pthread_mutex_unlock(&nm->lock);
}

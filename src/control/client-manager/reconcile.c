/*
 * A client manager killed (SIGKILL, OOM, crash) could not release its sessions: those of
 * processes that ended meanwhile would hold their GPU share until the cluster manager's
 * idle grace. So it keeps a state file (state_file, 0600): one line per live session,
 * "SESSION_ID PID START_TIME", rewritten whole whenever the set changes. At start it
 * reconciles with the cluster manager, which lists the VM's live sessions:
 *   - a session whose process still runs (the recorded pid with the recorded start
 *     time: a reused pid has another) is taken over: the process is watched again, its
 *     session pinged alive and released when it ends, as if nothing had happened;
 *   - every other live session of the VM (its process ended, or it is not in the file:
 *     a request whose answer the killed manager never got) is released at once.
 * No token is kept on disk: a process taken over that asks again gets its session and a
 * fresh token from the cluster manager (which answers a pid's existing session).
 */
#include "cmgr.h"

#include "flyt_log.h"
#include "flyt_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int held_save(const char *path, const struct cmgr_held *h, int n)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    int ok = f != NULL;
    for (int i = 0; ok && i < n; i++)
        ok = fprintf(f, "%s %d %llu\n", h[i].id, (int)h[i].pid, h[i].start) > 0;
    if (f && fclose(f) != 0)
        ok = 0;
    else if (!f && fd >= 0)
        close(fd);
    if (!ok || rename(tmp, path) != 0) {
        flyt_warn("cannot write the state file %s (%s): a restart would release the sessions "
                  "of running processes", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* The state file's lines; none when there is no file. */
static struct cmgr_held *held_load(const char *path, int *n)
{
    *n = 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    struct cmgr_held *h = NULL;
    int cap = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        struct cmgr_held one;
        int pid;
        if (sscanf(line, "%127s %d %llu", one.id, &pid, &one.start) != 3 || pid <= 0)
            continue;
        one.pid = pid;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            struct cmgr_held *g = realloc(h, sizeof *h * (size_t)cap);
            if (!g)
                break;
            h = g;
        }
        h[(*n)++] = one;
    }
    fclose(f);
    return h;
}

static const struct cmgr_held *held_find(const struct cmgr_held *h, int n, const char *id)
{
    for (int i = 0; i < n; i++)
        if (strcmp(h[i].id, id) == 0)
            return &h[i];
    return NULL;
}

/* Whether the recorded process of h still runs. */
static int still_runs(const struct cmgr_held *h)
{
    unsigned long long start;
    int ended;
    return flyt_proc_start_time(h->pid, &start, &ended) == 0 && !ended && start == h->start;
}

enum cluster_outcome reconcile_once(const struct cmgr_config *c)
{
    char err[512] = "";
    struct cluster_live *live = NULL;
    int nlive = 0, nheld = 0, kept = 0, released = 0;
    enum cluster_outcome o =
        cluster_sessions_live(c, (long)c->request_timeout_ms, &live, &nlive, err, sizeof err);
    if (o == CLUSTER_RETRY)
        return o;
    if (o != CLUSTER_OK) {
        flyt_error("cannot learn this VM's sessions from the cluster manager: %s; sessions of "
                   "an earlier run end after its idle grace", err);
        return o;
    }
    struct cmgr_held *held = held_load(c->state_path, &nheld);
    for (int i = 0; i < nlive; i++) {
        const struct cmgr_held *h = held_find(held, nheld, live[i].id);
        int mine = h && h->pid == live[i].pid && live[i].active;
        if (sessions_knows(live[i].id, (pid_t)live[i].pid))
            continue; /* this run's own, asked for meanwhile */
        if (mine && still_runs(h) && sessions_adopt(h->pid, h->start, err, sizeof err) == 0) {
            kept++;
            continue;
        }
        flyt_info("session %s of process %lld: %s; releasing it", live[i].id, live[i].pid,
                  !h ? "not held by the earlier run (its request's answer was lost)"
                  : !mine ? "not the earlier run's any more"
                          : "its process ended while the client manager was not running");
        sessions_release_orphan(live[i].id, (pid_t)live[i].pid);
        released++;
    }
    if (nlive || nheld)
        flyt_info("reconciled with the cluster manager: %d live session(s) of this VM, %d taken "
                  "over (their processes run), %d released", nlive, kept, released);
    free(live);
    free(held);
    return CLUSTER_OK;
}

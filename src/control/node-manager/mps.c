/*
 * MPS (mps = true): one MPS control daemon per GPU while the node manager
 * runs, so that the servers of a GPU run concurrently (each in its own green
 * context) instead of time-slicing.
 *
 * GPU i gets the pipe directory MPS_PIPE_DIR/gpu<i> and the log directory
 * MPS_LOG_DIR/gpu<i>; its daemon is started with
 *   CUDA_VISIBLE_DEVICES=<GPU UUID> CUDA_MPS_PIPE_DIRECTORY=... CUDA_MPS_LOG_DIRECTORY=...
 *   nvidia-cuda-mps-control -d
 * and stopped by writing "quit" to nvidia-cuda-mps-control with the same
 * environment (GPU-MACHINE.md). Servers of GPU i get the same two directories
 * and CUDA_VISIBLE_DEVICES=<UUID> (servers.c): UUIDs, not indices, are what
 * NVIDIA's MPS documentation recommends so that the daemon's remapping of
 * visible devices cannot confuse the client.
 */
#include "nm.h"

#include "flyt_log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int started[NM_MAX_GPUS];

void nm_mps_dirs(const struct nm *nm, int index, char *pipe, size_t plen, char *log, size_t llen)
{
    /* config paths are bounded far below PATH_MAX; a cut path fails at mkdir */
    if (snprintf(pipe, plen, "%s/gpu%d", nm->cfg.mps_pipe_dir, index) >= (int)plen)
        pipe[0] = '\0';
    if (snprintf(log, llen, "%s/gpu%d", nm->cfg.mps_log_dir, index) >= (int)llen)
        log[0] = '\0';
}

static int mkdirs(const char *path, char *err, size_t errlen)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "mkdir %s: %s", p, strerror(errno));
            return -1;
        }
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", p, strerror(errno));
        return -1;
    }
    return 0;
}

/* The control program as a path execve takes: a bare name is looked up in PATH. */
static void control_path(const struct nm *nm, char *out, size_t len)
{
    const char *c = nm->cfg.mps_control;
    snprintf(out, len, "%s", c);
    if (strchr(c, '/'))
        return;
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        char cand[PATH_MAX];
        int k = snprintf(cand, sizeof cand, "%.*s/%s", (int)n, path, c);
        if (k > 0 && (size_t)k < sizeof cand && access(cand, X_OK) == 0) {
            snprintf(out, len, "%s", cand);
            return;
        }
        path += n + (end ? 1 : 0);
    }
}

/* Runs the control program for GPU i: "-d" to start, input "quit\n" to stop. */
static int control(struct nm *nm, int i, int start, char *err, size_t errlen)
{
    const struct nm_gpu *gpu = &nm->gpus[i];
    char pipe[PATH_MAX], log[PATH_MAX], prog[PATH_MAX];
    nm_mps_dirs(nm, gpu->index, pipe, sizeof pipe, log, sizeof log);
    control_path(nm, prog, sizeof prog);
    char e_vis[128], e_pipe[PATH_MAX + 32], e_log[PATH_MAX + 32];
    snprintf(e_vis, sizeof e_vis, "CUDA_VISIBLE_DEVICES=%s", gpu->uuid);
    snprintf(e_pipe, sizeof e_pipe, "CUDA_MPS_PIPE_DIRECTORY=%s", pipe);
    snprintf(e_log, sizeof e_log, "CUDA_MPS_LOG_DIRECTORY=%s", log);
    const char *extra[] = {e_vis, e_pipe, e_log, NULL};
    char **env = nm_env_build(extra);
    if (!env) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char *argv_start[] = {prog, (char *)"-d", NULL};
    char *argv_stop[] = {prog, NULL};
    char why[512] = "";
    int rc = nm_run(prog, start ? argv_start : argv_stop, env, start ? NULL : "quit\n", 20000,
                    why, sizeof why);
    nm_env_free(env);
    if (rc != 0) {
        if (rc > 0 && start)
            snprintf(err, errlen,
                     "%s -d for GPU %d exited with status %d (is a daemon of an earlier run "
                     "still there? stop it: echo quit | CUDA_MPS_PIPE_DIRECTORY=%s %s)",
                     prog, gpu->index, rc, pipe, prog);
        else if (rc > 0)
            snprintf(err, errlen, "%s (quit) for GPU %d exited with status %d", prog, gpu->index,
                     rc);
        else
            snprintf(err, errlen, "%s", why);
        return -1;
    }
    return 0;
}

int nm_mps_start(struct nm *nm, char *err, size_t errlen)
{
    if (!nm->cfg.mps)
        return 0;
    for (int i = 0; i < nm->ngpus; i++) {
        char pipe[PATH_MAX], log[PATH_MAX];
        nm_mps_dirs(nm, nm->gpus[i].index, pipe, sizeof pipe, log, sizeof log);
        if (mkdirs(pipe, err, errlen) != 0 || mkdirs(log, err, errlen) != 0 ||
            control(nm, i, 1, err, errlen) != 0) {
            nm_mps_stop(nm);
            return -1;
        }
        started[i] = 1;
        flyt_info("MPS control daemon started for GPU %d (pipe directory %s)", nm->gpus[i].index,
                  pipe);
    }
    return 0;
}

void nm_mps_stop(struct nm *nm)
{
    for (int i = 0; i < nm->ngpus; i++) {
        if (!started[i])
            continue;
        char err[512];
        if (control(nm, i, 0, err, sizeof err) != 0)
            flyt_warn("stopping MPS of GPU %d: %s", nm->gpus[i].index, err);
        else
            flyt_info("MPS control daemon of GPU %d stopped", nm->gpus[i].index);
        started[i] = 0;
    }
}

/* The checkpoint request of flyt_ckpt_request.h over the status page. */
#include "flyt_ckpt_request.h"

#include "flyt_server_status.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define LOAD(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* The session child with a client connected (the last one, if several). */
static pid_t session_pid(struct flyt_server_status *p)
{
    pid_t pid = 0;
    for (int i = 0; i < FLYT_STATUS_SLOTS; i++)
        if (LOAD(&p->slots[i].pid) > 0 && LOAD(&p->slots[i].admitted))
            pid = LOAD(&p->slots[i].pid);
    return pid;
}

/* Whether the session still holds its slot: its server clears it on reaping it. */
static int session_lives(struct flyt_server_status *p, pid_t pid)
{
    for (int i = 0; i < FLYT_STATUS_SLOTS; i++)
        if (LOAD(&p->slots[i].pid) == pid)
            return 1;
    return 0;
}

/* Posts the request and waits for its answer; the page is mapped. */
static int ask(struct flyt_server_status *p, const char *status_path, const char *state_path,
               const struct flyt_ckpt_dest *dest, uint32_t flags, long timeout_ms, struct flyt_ckpt_outcome *out, char *err, size_t errlen)
{
    if (LOAD(&p->magic) != FLYT_STATUS_MAGIC) {
        snprintf(err, errlen, "%s is not a listening server's status page", status_path);
        return -1;
    }
    pid_t pid = session_pid(p);
    if (pid <= 0) {
        snprintf(err, errlen, "no session is connected");
        return FLYT_CKPT_NO_SESSION;
    }
    if (strlen(state_path) >= sizeof p->ckpt_path) {
        snprintf(err, errlen, "path too long");
        return -1;
    }
    const char *to = dest && dest->address ? dest->address : "";
    const char *secret = dest && dest->secret ? dest->secret : "";
    if (strlen(to) >= sizeof p->ckpt_dest || strlen(secret) >= sizeof p->ckpt_secret) {
        snprintf(err, errlen, "destination address or secret too long");
        return -1;
    }
    snprintf(p->ckpt_path, sizeof p->ckpt_path, "%s", state_path);
    snprintf(p->ckpt_dest, sizeof p->ckpt_dest, "%s", to);
    snprintf(p->ckpt_secret, sizeof p->ckpt_secret, "%s", secret);
    STORE(&p->ckpt_sent, 0);
    STORE(&p->ckpt_estimate, 0);
    STORE(&p->ckpt_precopy_ms, 0);
    STORE(&p->ckpt_pid, (int32_t)pid);
    STORE(&p->ckpt_flags, flags & (FLYT_CKPT_STOP | FLYT_CKPT_SUSPEND));
    uint64_t gen = LOAD(&p->ckpt_gen) + 1;
    STORE(&p->ckpt_gen, gen);
    if (kill(pid, SIGURG) != 0) {
        snprintf(err, errlen, "SIGURG to the session %d: %s", (int)pid, strerror(errno));
        return -1;
    }
    int lives = 1;
    for (long waited = 0; waited < timeout_ms && LOAD(&p->ckpt_done_gen) != gen && lives;
         waited += 5) {
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
        lives = session_lives(p, pid);
    }
    if (LOAD(&p->ckpt_done_gen) != gen) {
        if (lives)
            snprintf(err, errlen, "no answer from session %d within %ld ms", (int)pid, timeout_ms);
        else
            snprintf(err, errlen, "session %d ended without answering (its server's log says how)",
                     (int)pid);
        return -1;
    }
    out->result = LOAD(&p->ckpt_result);
    out->bytes = LOAD(&p->ckpt_bytes);
    out->ns = LOAD(&p->ckpt_ns);
    out->precopy_ms = LOAD(&p->ckpt_precopy_ms);
    if (out->result != 0)
        snprintf(err, errlen, "refused (CUDA error %d): %.*s", (int)out->result,
                 (int)sizeof p->ckpt_error, p->ckpt_error);
    return 0;
}

static struct flyt_server_status *page_map(const char *status_path, char *err, size_t errlen)
{
    int fd = open(status_path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", status_path, strerror(errno));
        return NULL;
    }
    struct flyt_server_status *p =
        mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "%s: cannot map it: %s", status_path, strerror(errno));
        return NULL;
    }
    return p;
}

int flyt_ckpt_request(const char *status_path, const char *state_path,
                      const struct flyt_ckpt_dest *dest, uint32_t flags, long timeout_ms,
                      struct flyt_ckpt_outcome *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    struct flyt_server_status *p = page_map(status_path, err, errlen);
    if (p == NULL)
        return -1;
    int rc = ask(p, status_path, state_path, dest, flags, timeout_ms, out, err, errlen);
    munmap(p, sizeof *p);
    return rc;
}

int flyt_ckpt_progress(const char *status_path, uint64_t *sent, uint64_t *estimate)
{
    char err[16];
    struct flyt_server_status *p = page_map(status_path, err, sizeof err);
    if (p == NULL)
        return -1;
    *sent = LOAD(&p->ckpt_sent);
    *estimate = LOAD(&p->ckpt_estimate);
    munmap(p, sizeof *p);
    return 0;
}

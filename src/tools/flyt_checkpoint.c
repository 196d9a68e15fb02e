/*
 * flyt-checkpoint: asks a managed flyt-server's connected session to write
 * its state (docs/state-format.md), as the node manager does: the request
 * goes into the server's status page (--status-file), SIGURG wakes the
 * session, and the answer is waited for and printed.
 *
 * usage: flyt-checkpoint STATUS_FILE STATE_FILE [--stop]
 * Prints "checkpoint: BYTES bytes in MS ms"; exit 0, or 1 with the reason.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "flyt_server_status.h"

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

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "--stop") != 0)) {
        fprintf(stderr, "usage: flyt-checkpoint STATUS_FILE STATE_FILE [--stop]\n");
        return 2;
    }
    int fd = open(argv[1], O_RDWR | O_CLOEXEC);
    struct flyt_server_status *p =
        fd < 0 ? MAP_FAILED : mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED || LOAD(&p->magic) != FLYT_STATUS_MAGIC) {
        fprintf(stderr, "flyt-checkpoint: %s is not a listening server's status page\n", argv[1]);
        return 1;
    }
    pid_t pid = session_pid(p);
    if (pid <= 0 || strlen(argv[2]) >= sizeof p->ckpt_path) {
        fprintf(stderr, "flyt-checkpoint: %s\n", pid <= 0 ? "no session is connected" : "path too long");
        return 1;
    }
    snprintf(p->ckpt_path, sizeof p->ckpt_path, "%s", argv[2]);
    STORE(&p->ckpt_pid, (int32_t)pid);
    STORE(&p->ckpt_flags, argc == 4 ? FLYT_CKPT_STOP : 0u);
    uint64_t gen = LOAD(&p->ckpt_gen) + 1;
    STORE(&p->ckpt_gen, gen);
    if (kill(pid, SIGURG) != 0) {
        perror("flyt-checkpoint: SIGURG to the session");
        return 1;
    }
    for (int i = 0; i < 60000 && LOAD(&p->ckpt_done_gen) != gen; i++) /* up to 10 minutes */
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    if (LOAD(&p->ckpt_done_gen) != gen) {
        fprintf(stderr, "flyt-checkpoint: no answer from session %d\n", (int)pid);
        return 1;
    }
    if (LOAD(&p->ckpt_result) != 0) {
        fprintf(stderr, "flyt-checkpoint: refused (CUDA error %d): %s\n", (int)LOAD(&p->ckpt_result),
                p->ckpt_error);
        return 1;
    }
    printf("checkpoint: %llu bytes in %.3f ms\n", (unsigned long long)LOAD(&p->ckpt_bytes),
           (double)LOAD(&p->ckpt_ns) / 1e6);
    return 0;
}

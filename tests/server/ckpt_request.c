/* A checkpoint request through the status page: see ckpt_request.h. */
#include "ckpt_request.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "flyt_server_status.h"

static struct flyt_server_status *map_page(const char *status_path)
{
    int fd = open(status_path, O_RDWR);
    CHECK(fd >= 0, "status page %s opens", status_path);
    void *m = mmap(NULL, sizeof(struct flyt_server_status), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(m != MAP_FAILED, "status page maps");
    return m;
}

uint64_t ckpt_post(const char *status_path, const char *state_path, uint32_t flags)
{
    struct flyt_server_status *p = map_page(status_path);
    pid_t pid = 0;
    for (int i = 0; i < FLYT_STATUS_SLOTS; i++)
        if (p->slots[i].pid > 0 && p->slots[i].admitted)
            pid = p->slots[i].pid;
    CHECK_GT(pid, 0, "the session's pid is on the page");
    snprintf(p->ckpt_path, sizeof p->ckpt_path, "%s", state_path);
    __atomic_store_n(&p->ckpt_pid, (int32_t)pid, __ATOMIC_RELEASE);
    __atomic_store_n(&p->ckpt_flags, flags, __ATOMIC_RELEASE);
    uint64_t gen = __atomic_load_n(&p->ckpt_gen, __ATOMIC_ACQUIRE) + 1;
    __atomic_store_n(&p->ckpt_gen, gen, __ATOMIC_RELEASE);
    CHECK_EQ(kill(pid, SIGURG), 0, "SIGURG to the session");
    munmap(p, sizeof *p);
    return gen;
}

int ckpt_wait(const char *status_path, uint64_t gen, int timeout_ms, char *error, size_t errlen)
{
    struct flyt_server_status *p = map_page(status_path);
    int done = 0;
    for (int waited = 0; waited <= timeout_ms && !done; waited += 5) {
        done = __atomic_load_n(&p->ckpt_done_gen, __ATOMIC_ACQUIRE) == gen;
        struct timespec ts = {0, 5 * 1000 * 1000};
        if (!done)
            nanosleep(&ts, NULL);
    }
    int result = done ? p->ckpt_result : -1;
    snprintf(error, errlen, "%s", done ? p->ckpt_error : "no answer in time");
    munmap(p, sizeof *p);
    return result;
}

/* The header's version at byte 8 and sections {type u32, flags u32, length
 * u64} after its 48 bytes (docs/state-format.md). */
uint32_t ckpt_sections(const char *state_path,
                       void (*fn)(uint32_t type, const unsigned char *body, uint64_t len, void *arg),
                       void *arg)
{
    FILE *f = fopen(state_path, "rb");
    CHECK(f != NULL, "open %s", state_path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    unsigned char *data = malloc((size_t)size);
    rewind(f);
    CHECK(data != NULL && fread(data, 1, (size_t)size, f) == (size_t)size, "read the state");
    fclose(f);
    uint32_t version;
    memcpy(&version, data + 8, sizeof version);
    for (size_t pos = 48;;) {
        uint32_t type;
        uint64_t len;
        memcpy(&type, data + pos, sizeof type);
        memcpy(&len, data + pos + 8, sizeof len);
        pos += 16;
        if (type == 0)
            break;
        fn(type, data + pos, len, arg);
        pos += len;
    }
    free(data);
    return version;
}

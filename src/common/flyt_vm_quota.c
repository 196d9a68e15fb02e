/* A VM's memory quota on a node, shared by its servers: see flyt_vm_quota.h. */
#include "flyt_vm_quota.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* sequentially consistent: a charge's own add is seen by every later sum */
#define LOAD(p)     __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define ADD(p, v)   __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
#define SUB(p, v)   __atomic_sub_fetch((p), (v), __ATOMIC_SEQ_CST)

static uint64_t owner_of(pid_t server, pid_t session)
{
    return (uint64_t)(uint32_t)server << 32 | (uint32_t)session;
}

static pid_t server_of(uint64_t owner) { return (pid_t)(owner >> 32); }

static void free_slot(struct flyt_vmq_slot *s)
{
    STORE(&s->owner, 0); /* its bytes stop counting here */
    STORE(&s->held, 0);
}

static struct flyt_vm_quota *map_fd(int fd, const char *path, char *err, size_t errlen)
{
    void *m = mmap(NULL, sizeof(struct flyt_vm_quota), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "cannot map the VM quota page %s: %s", path, strerror(errno));
        return NULL;
    }
    return m;
}

static int valid(const struct flyt_vm_quota *q)
{
    return LOAD(&q->magic) == FLYT_VMQ_MAGIC && q->version == FLYT_VMQ_VERSION &&
           q->nslots == FLYT_VMQ_SLOTS;
}

/* Whether pid is a running flyt-server (not a pid reused by something else). */
static int server_runs(pid_t pid)
{
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (!fgets(comm, sizeof comm, f))
        comm[0] = '\0';
    fclose(f);
    return strncmp(comm, "flyt-server", 11) == 0;
}

struct flyt_vm_quota *flyt_vmq_create(const char *path, uint64_t quota, char *err, size_t errlen)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || fchmod(fd, 0600) != 0 ||
        (st.st_size != (off_t)sizeof(struct flyt_vm_quota) &&
         ftruncate(fd, (off_t)sizeof(struct flyt_vm_quota)) != 0)) {
        snprintf(err, errlen, "cannot create the VM quota page %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    struct flyt_vm_quota *q = map_fd(fd, path, err, errlen);
    if (!q)
        return NULL;
    if (!valid(q)) {
        memset(q, 0, sizeof *q);
        q->version = FLYT_VMQ_VERSION;
        q->nslots = FLYT_VMQ_SLOTS;
        STORE(&q->magic, FLYT_VMQ_MAGIC);
    }
    for (int i = 0; i < FLYT_VMQ_SLOTS; i++) { /* an earlier run's servers that are gone */
        uint64_t owner = LOAD(&q->slots[i].owner);
        if (owner && !server_runs(server_of(owner)))
            free_slot(&q->slots[i]);
    }
    flyt_vmq_set_quota(q, quota);
    return q;
}

void flyt_vmq_set_quota(struct flyt_vm_quota *q, uint64_t quota) { STORE(&q->quota, quota); }

void flyt_vmq_release_server(struct flyt_vm_quota *q, pid_t server)
{
    for (int i = 0; i < FLYT_VMQ_SLOTS; i++) {
        uint64_t owner = LOAD(&q->slots[i].owner);
        if (owner && server_of(owner) == server)
            free_slot(&q->slots[i]);
    }
}

struct flyt_vm_quota *flyt_vmq_open(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot open the VM quota page %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (st.st_size != (off_t)sizeof(struct flyt_vm_quota)) {
        snprintf(err, errlen, "%s is not a VM quota page (%lld bytes)", path,
                 (long long)st.st_size);
        close(fd);
        return NULL;
    }
    struct flyt_vm_quota *q = map_fd(fd, path, err, errlen);
    if (q && !valid(q)) {
        snprintf(err, errlen, "%s is not a VM quota page of version %u", path, FLYT_VMQ_VERSION);
        flyt_vmq_unmap(q);
        return NULL;
    }
    return q;
}

int flyt_vmq_claim(struct flyt_vm_quota *q, pid_t server, pid_t session)
{
    uint64_t me = owner_of(server, session);
    for (int i = 0; i < FLYT_VMQ_SLOTS; i++) {
        uint64_t none = 0;
        if (__atomic_compare_exchange_n(&q->slots[i].owner, &none, me, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
            STORE(&q->slots[i].held, 0); /* a dead owner's late add does not carry over */
            return i;
        }
    }
    return -1;
}

uint64_t flyt_vmq_used(const struct flyt_vm_quota *q)
{
    uint64_t sum = 0;
    for (int i = 0; i < FLYT_VMQ_SLOTS; i++)
        if (LOAD(&q->slots[i].owner))
            sum += LOAD(&q->slots[i].held);
    return sum;
}

uint64_t flyt_vmq_quota(const struct flyt_vm_quota *q) { return LOAD(&q->quota); }

int flyt_vmq_has_session(const struct flyt_vm_quota *q, pid_t session)
{
    for (int i = 0; i < FLYT_VMQ_SLOTS; i++) {
        uint64_t owner = LOAD(&q->slots[i].owner);
        if (owner && (pid_t)(owner & 0xffffffffu) == session)
            return 1;
    }
    return 0;
}

int flyt_vmq_charge(struct flyt_vm_quota *q, int slot, uint64_t size)
{
    uint64_t quota = flyt_vmq_quota(q);
    if (slot < 0 || slot >= FLYT_VMQ_SLOTS || size > quota)
        return -1;
    ADD(&q->slots[slot].held, size);
    uint64_t used = flyt_vmq_used(q);
    if (used > quota || used < size) { /* past the quota (or a sum that wrapped) */
        SUB(&q->slots[slot].held, size);
        return -1;
    }
    return 0;
}

void flyt_vmq_uncharge(struct flyt_vm_quota *q, int slot, uint64_t size)
{
    if (slot >= 0 && slot < FLYT_VMQ_SLOTS && size)
        SUB(&q->slots[slot].held, size);
}

void flyt_vmq_release(struct flyt_vm_quota *q, pid_t server, pid_t session)
{
    uint64_t me = owner_of(server, session);
    for (int i = 0; i < FLYT_VMQ_SLOTS; i++)
        if (LOAD(&q->slots[i].owner) == me)
            free_slot(&q->slots[i]);
}

void flyt_vmq_unmap(struct flyt_vm_quota *q)
{
    if (q)
        munmap(q, sizeof *q);
}

/* Memory accounting and the status page: see quota.h. */
#include "quota.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "flyt_assert.h"

static struct flyt_server_status *page;
static int my_slot = -1; /* in a session child */
/* --vm-quota: the VM's one quota on this node, shared with its other servers */
static struct flyt_vm_quota *vm_page;
static pid_t vm_server_pid; /* the listening parent: half of each slot's owner */
static int vm_slot = -1;    /* in a session child */

#define LOAD(p)      __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v)  __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define ADD(p, v)    __atomic_add_fetch((p), (v), __ATOMIC_ACQ_REL)
#define SUB(p, v)    __atomic_sub_fetch((p), (v), __ATOMIC_ACQ_REL)

int flyt_status_open(const char *path, uint64_t quota, char *err, size_t errlen)
{
    size_t size = sizeof *page;
    void *mem;
    if (path) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
            snprintf(err, errlen, "cannot create the status file %s: %s", path, strerror(errno));
            return -1;
        }
        if (ftruncate(fd, (off_t)size) != 0) {
            snprintf(err, errlen, "cannot size the status file %s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
    } else {
        mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    }
    if (mem == MAP_FAILED) {
        snprintf(err, errlen, "cannot map the status page: %s", strerror(errno));
        return -1;
    }
    page = mem;
    memset(page, 0, size);
    page->version = FLYT_STATUS_VERSION;
    page->server_pid = (uint32_t)getpid();
    page->memory_quota = quota;
    return 0;
}

int flyt_quota_vm_open(const char *path, char *err, size_t errlen)
{
    vm_page = flyt_vmq_open(path, err, errlen);
    vm_server_pid = getpid();
    return vm_page ? 0 : -1;
}

struct flyt_server_status *flyt_status_page(void) { return page; }

void flyt_status_listening(unsigned port)
{
    if (!page)
        return;
    STORE(&page->listen_port, (uint32_t)port);
    STORE(&page->magic, FLYT_STATUS_MAGIC);
    if (msync(page, sizeof *page, MS_ASYNC) != 0) {
        /* a file-backed page is coherent with reads through the page cache anyway */
    }
}

void flyt_status_session_ended(pid_t pid)
{
    if (vm_page)
        flyt_vmq_release(vm_page, vm_server_pid, pid);
    if (!page)
        return;
    for (int i = 0; i < FLYT_STATUS_SLOTS; i++)
        if (LOAD(&page->slots[i].pid) == (int32_t)pid) {
            uint64_t left = __atomic_exchange_n(&page->slots[i].used, 0, __ATOMIC_ACQ_REL);
            if (left)
                SUB(&page->memory_used, left);
            STORE(&page->slots[i].admitted, 0);
            STORE(&page->slots[i].pid, 0);
            SUB(&page->sessions, 1);
            return;
        }
}

/* A slot for this process, taken once: 0, or -1 when none is free (nor the VM's). */
static int claim_slot(void)
{
    static int claimed; /* 1 taken, -1 refused */
    if (!page || claimed)
        return claimed < 0 ? -1 : 0;
    claimed = -1;
    int32_t me = (int32_t)getpid();
    for (int i = 0; i < FLYT_STATUS_SLOTS; i++) {
        int32_t free_slot = 0;
        /* the parent frees a slot (by pid) only after its holder was reaped */
        if (__atomic_compare_exchange_n(&page->slots[i].pid, &free_slot, me, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            STORE(&page->slots[i].used, 0);
            ADD(&page->sessions, 1);
            ADD(&page->sessions_total, 1);
            my_slot = i;
            /* the parent frees both slots when it reaps this child, whatever happens */
            if (vm_page && (vm_slot = flyt_vmq_claim(vm_page, vm_server_pid, me)) < 0)
                return -1;
            claimed = 1;
            return 0;
        }
    }
    return -1;
}

int flyt_quota_child_restoring(void) { return claim_slot(); }

int flyt_quota_child_admitted(void)
{
    if (claim_slot() != 0)
        return -1;
    if (page)
        STORE(&page->slots[my_slot].admitted, 1);
    return 0;
}

int flyt_quota_active(void) { return page != NULL; }

int flyt_quota_same_vm(pid_t session) { return vm_page && flyt_vmq_has_session(vm_page, session); }

uint64_t flyt_quota_limit(void)
{
    uint64_t own = page ? LOAD(&page->memory_quota) : 0;
    uint64_t vm = vm_page ? flyt_vmq_quota(vm_page) : 0;
    return own && vm ? (own < vm ? own : vm) : own ? own : vm;
}

int flyt_quota_my_slot(void) { return my_slot; }

uint64_t flyt_quota_used_total(void)
{
    uint64_t own = page ? LOAD(&page->memory_used) : 0;
    uint64_t vm = vm_page ? flyt_vmq_used(vm_page) : 0;
    return vm > own ? vm : own; /* the VM's processes together */
}

int flyt_quota_charge(struct flyt_memtab *t, uint64_t size)
{
    if (!page)
        return 0;
    /* the VM's quota first: what this server holds is part of the VM's use */
    if (vm_page && flyt_vmq_charge(vm_page, vm_slot, size) != 0)
        return -1;
    uint64_t quota = LOAD(&page->memory_quota); /* a live resize may change it */
    uint64_t cur = LOAD(&page->memory_used);
    for (;;) {
        if (size > UINT64_MAX - cur || (quota && (size > quota || cur > quota - size))) {
            if (vm_page)
                flyt_vmq_uncharge(vm_page, vm_slot, size);
            return -1; /* past the quota, or more than any GPU has */
        }
        if (__atomic_compare_exchange_n(&page->memory_used, &cur, cur + size, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            break;
    }
    if (my_slot >= 0)
        ADD(&page->slots[my_slot].used, size);
    t->used += size;
    return 0;
}

void flyt_quota_uncharge(struct flyt_memtab *t, uint64_t size)
{
    if (!page || size == 0)
        return;
    FLYT_ASSERT(size <= t->used); /* only what was charged is given back */
    if (size > t->used) /* never below zero, whatever a caller does */
        size = t->used;
    t->used -= size;
    if (my_slot >= 0)
        SUB(&page->slots[my_slot].used, size);
    SUB(&page->memory_used, size);
    if (vm_page)
        flyt_vmq_uncharge(vm_page, vm_slot, size);
}

/* ---- pointer -> size ---- */

int flyt_memtab_put(struct flyt_memtab *t, uint64_t ptr, uint64_t size)
{
    if (!ptr)
        return 0;
    flyt_hash_slot *s = flyt_hash_find(&t->map, ptr);
    if (!s)
        s = flyt_hash_insert(&t->map, ptr);
    if (!s)
        return -1;
    s->value.u64 = size;
    return 0;
}

int flyt_memtab_add(struct flyt_memtab *t, uint64_t ptr, uint64_t size)
{
    if (!page || !ptr)
        return 0;
    flyt_hash_slot *s = flyt_hash_find(&t->map, ptr);
    if (s) /* the backend handed out a live pointer again: keep the newer size */
        flyt_quota_uncharge(t, s->value.u64);
    return flyt_memtab_put(t, ptr, size);
}

uint64_t flyt_memtab_size(const struct flyt_memtab *t, uint64_t ptr)
{
    flyt_hash_slot *s = flyt_hash_find(&t->map, ptr);
    return s ? s->value.u64 : 0;
}

uint64_t flyt_memtab_take(struct flyt_memtab *t, uint64_t ptr)
{
    flyt_hash_slot *s = flyt_hash_find(&t->map, ptr);
    if (!s)
        return 0;
    uint64_t size = s->value.u64;
    flyt_hash_remove_slot(&t->map, s);
    return size;
}

void flyt_memtab_remove(struct flyt_memtab *t, uint64_t ptr)
{
    flyt_hash_slot *s = flyt_hash_find(&t->map, ptr);
    if (!s)
        return;
    FLYT_ASSERT(s->value.u64 <= t->used); /* used covers every tracked size */
    flyt_quota_uncharge(t, flyt_memtab_take(t, ptr));
}

void flyt_memtab_clear(struct flyt_memtab *t)
{
    flyt_quota_uncharge(t, t->used);
    flyt_hash_clear(&t->map);
}

void flyt_memtab_free(struct flyt_memtab *t)
{
    flyt_memtab_clear(t);
    flyt_hash_free(&t->map);
}

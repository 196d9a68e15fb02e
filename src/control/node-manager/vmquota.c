/*
 * A VM's memory quota on this node (src/common/flyt_vm_quota.h): one page per
 * VM with servers here, STATE_DIR/vm-VM_ID.quota, shared by all of them (each
 * gets --vm-quota), so the VM's processes together stay within its memory. The
 * page lives while any server of the VM does; a server that ends gives back
 * every slot its sessions held. Callers hold nm.lock.
 */
#include "nm.h"

#include "flyt_log.h"
#include "flyt_vm_quota.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct nm_vmq {
    struct nm_vmq *next, **list; /* list: the head it is linked from */
    char vm_id[NM_SID_MAX];
    char path[PATH_MAX + NM_SID_MAX + 16];
    struct flyt_vm_quota *page;
    int refs; /* servers of the VM */
};

int nm_vmq_get(struct nm *nm, struct nm_server *s, char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&nm->lock);
    if (!s->vm_id[0]) /* the cluster manager did not say: the server's own quota only */
        return 0;
    struct nm_vmq *q = nm->vmqs;
    while (q && strcmp(q->vm_id, s->vm_id) != 0)
        q = q->next;
    if (!q) {
        q = calloc(1, sizeof *q);
        if (!q) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        snprintf(q->vm_id, sizeof q->vm_id, "%s", s->vm_id);
        snprintf(q->path, sizeof q->path, "%s/vm-%s.quota", nm->cfg.state_dir, s->vm_id);
        q->page = flyt_vmq_create(q->path, (uint64_t)s->memory_quota, err, errlen);
        if (!q->page) {
            free(q);
            return -1;
        }
        q->list = &nm->vmqs;
        q->next = nm->vmqs;
        nm->vmqs = q;
    }
    /* the cluster manager gives all of a VM's sessions one share: the latest is it */
    flyt_vmq_set_quota(q->page, (uint64_t)s->memory_quota);
    q->refs++;
    s->vmq = q;
    return 0;
}

const char *nm_vmq_path(const struct nm_server *s) { return s->vmq ? s->vmq->path : NULL; }

void nm_vmq_set_quota(struct nm_server *s, long long quota)
{
    if (s->vmq)
        flyt_vmq_set_quota(s->vmq->page, (uint64_t)quota);
}

long long nm_vmq_used(const struct nm_server *s)
{
    return s->vmq ? (long long)flyt_vmq_used(s->vmq->page) : -1;
}

void nm_vmq_server_gone(struct nm_server *s)
{
    if (s->vmq && s->pid > 0)
        flyt_vmq_release_server(s->vmq->page, s->pid);
}

void nm_vmq_put(struct nm_server *s)
{
    struct nm_vmq *q = s->vmq;
    s->vmq = NULL;
    if (!q || --q->refs > 0)
        return;
    for (struct nm_vmq **pp = q->list; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    flyt_vmq_unmap(q->page);
    if (unlink(q->path) != 0)
        flyt_debug("VM %s: %s already gone", q->vm_id, q->path);
    free(q);
}

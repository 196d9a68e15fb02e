/*
 * The memory quota of a VM on a node, shared by all its flyt-servers there
 * (one per CUDA process of the VM): the VM's processes together never hold
 * more device memory than its share (docs/node-manager.md, "A VM's share").
 *
 * The node manager creates the page (a file of its state dir, mode 0600,
 * STATE_DIR/vm-VM_ID.quota) when it starts the VM's first server there,
 * passes it to each of the VM's servers (flyt-server --vm-quota FILE), writes
 * the quota (at each start and live resize) and removes the file when the
 * VM's last server there has ended.
 *
 * Each session (a server's child serving one connection) takes a slot once
 * its client is admitted, owned by (server pid, session pid), and keeps the
 * bytes it holds in it; the VM's use is the sum over the owned slots. A
 * charge adds its bytes to its own slot first and then sums: of two
 * concurrent charges the later sum sees both, so the quota is never passed
 * (at the limit both may be refused). Nothing is ever left charged by a
 * process that died: the server frees a session's slot when it reaps it, the
 * node manager frees every slot of a server that ended (after its process
 * group was killed), and a slot's bytes count only while it is owned.
 */
#ifndef FLYT_VM_QUOTA_H
#define FLYT_VM_QUOTA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FLYT_VMQ_MAGIC   0x3151544d56544c46ull /* "FLTVMTQ1" little-endian */
#define FLYT_VMQ_VERSION 1u
#define FLYT_VMQ_SLOTS   256 /* admitted sessions of one VM on a node */

struct flyt_vmq_slot {
    uint64_t owner; /* (server pid << 32) | session pid; 0: free */
    uint64_t held;  /* bytes the session holds; counted only while owned */
};

struct flyt_vm_quota {
    uint64_t magic;   /* FLYT_VMQ_MAGIC */
    uint32_t version; /* FLYT_VMQ_VERSION */
    uint32_t nslots;  /* FLYT_VMQ_SLOTS */
    uint64_t quota;   /* bytes; written by the node manager */
    struct flyt_vmq_slot slots[FLYT_VMQ_SLOTS];
};

/* ---- the node manager ---- */

/* Creates path (0600) or maps the one left by an earlier run of the node manager
 * (whose slots of servers no longer running are freed), with quota. NULL with a
 * reason in err. */
struct flyt_vm_quota *flyt_vmq_create(const char *path, uint64_t quota, char *err,
                                      size_t errlen);
void flyt_vmq_set_quota(struct flyt_vm_quota *q, uint64_t quota);
/* Frees every slot of server (its process group is gone). */
void flyt_vmq_release_server(struct flyt_vm_quota *q, pid_t server);

/* ---- a server ---- */

/* Maps an existing page. NULL with a reason in err. */
struct flyt_vm_quota *flyt_vmq_open(const char *path, char *err, size_t errlen);
/* A slot for the admitted session of server: its index, or -1 when all are taken. */
int flyt_vmq_claim(struct flyt_vm_quota *q, pid_t server, pid_t session);
/* Adds size to slot's bytes unless the VM would pass its quota: 0, or -1. */
int flyt_vmq_charge(struct flyt_vm_quota *q, int slot, uint64_t size);
void flyt_vmq_uncharge(struct flyt_vm_quota *q, int slot, uint64_t size);
/* Frees the slot of server's session (reaped). */
void flyt_vmq_release(struct flyt_vm_quota *q, pid_t server, pid_t session);

/* ---- both ---- */

uint64_t flyt_vmq_quota(const struct flyt_vm_quota *q);
/* Whether session (a server's child) holds a slot: it serves a process of this VM. */
int flyt_vmq_has_session(const struct flyt_vm_quota *q, pid_t session);
/* Bytes the VM's sessions hold now. */
uint64_t flyt_vmq_used(const struct flyt_vm_quota *q);
void flyt_vmq_unmap(struct flyt_vm_quota *q);

#endif

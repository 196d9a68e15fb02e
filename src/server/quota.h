/*
 * Memory accounting and the status page of a managed server.
 *
 * A server started with --memory-quota or --status-file keeps a status page
 * (flyt_server_status.h) shared by its listening parent and its session
 * children. Each session records the size of every device allocation by
 * pointer (MEM_ALLOC, MEM_ALLOC_PITCH, MEM_ALLOC_ASYNC, from any pool) and
 * subtracts it when the pointer is freed; the page's memory_used is the sum
 * over the server's sessions, and an allocation that would take it past the
 * quota is refused before the backend sees it. Without either option there is
 * no page and nothing is tracked (standalone use is unchanged).
 *
 * With --vm-quota FILE (flyt_vm_quota.h) every charge is also a charge against
 * the VM's one quota on this node, shared with its other servers: the VM's
 * processes together stay within it, and the device reports what the VM has.
 */
#ifndef FLYT_QUOTA_H
#define FLYT_QUOTA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "flyt_hash.h"
#include "flyt_server_status.h"
#include "flyt_vm_quota.h"

/* ---- the page (parent side) ---- */

/* Creates the page: in path (created/truncated, 0644) or, with path NULL, in
 * anonymous shared memory. 0, or -1 with a reason in err. */
int flyt_status_open(const char *path, uint64_t quota, char *err, size_t errlen);
/* Maps the VM's quota page (before any session is forked): 0, or -1 with why. */
int flyt_quota_vm_open(const char *path, char *err, size_t errlen);
/* The page, NULL when the server runs without one. */
struct flyt_server_status *flyt_status_page(void);
/* After the listen socket is bound: publishes the port and the magic. */
void flyt_status_listening(unsigned port);
/* Slots are taken by session children once their client is admitted (so connections
 * that never are hold none): see flyt_quota_child_admitted. */
/* A session child was reaped: whatever it still held is subtracted. */
void flyt_status_session_ended(pid_t pid);

/* ---- the session (child side) ---- */

/* The child's client was admitted: takes a free slot for this process (marked admitted:
 * a client is connected) and counts the session. 0, or -1 when every slot is taken (the
 * client is then refused). A no-op without a page. */
int flyt_quota_child_admitted(void);
/* The same slot taken before the client came, not admitted yet (a state restored ahead
 * of it, whose allocations count against the quota): 0 or -1 as above. */
int flyt_quota_child_restoring(void);
/* The slot of this session child, -1 when none (not admitted yet). */
int flyt_quota_my_slot(void);

/* Pointer -> size of the session's live allocations. */
struct flyt_memtab {
    flyt_hash map;  /* pointer -> size (value.u64) */
    uint64_t  used; /* this session's bytes */
};

/* Whether allocations are tracked at all (a page exists). */
int flyt_quota_active(void);
/* Whether session (another server's child, on this node) serves a process of
 * this session's VM (both hold slots of the --vm-quota page). */
int flyt_quota_same_vm(pid_t session);
/* The quota in bytes (0: none): the smaller of the server's and the VM's. */
uint64_t flyt_quota_limit(void);
/* Bytes allocated by every session of this server, or of the VM with --vm-quota. */
uint64_t flyt_quota_used_total(void);

/* Reserves size bytes against the quota before an allocation: 0, or -1 when
 * the quota would be exceeded. A no-op without a page. */
int flyt_quota_charge(struct flyt_memtab *t, uint64_t size);
/* Gives back a reservation (failed allocation, or a freed one). */
void flyt_quota_uncharge(struct flyt_memtab *t, uint64_t size);
/* Records a successful allocation that was charged. 0, or -1 when out of
 * memory (the caller then frees it and uncharges). */
int flyt_memtab_add(struct flyt_memtab *t, uint64_t ptr, uint64_t size);
/* The size recorded for ptr, 0 when it is not a tracked allocation. */
uint64_t flyt_memtab_size(const struct flyt_memtab *t, uint64_t ptr);
/* Forgets ptr and uncharges its size (after a successful free). */
void flyt_memtab_remove(struct flyt_memtab *t, uint64_t ptr);
/* Forgets and uncharges everything (device reset, end of session). */
void flyt_memtab_clear(struct flyt_memtab *t);
/* The table alone, with or without a page, charging nothing (a backend's own
 * records use it): put adds or updates ptr (0, or -1 when out of memory);
 * take removes it and returns its size (0 when absent). Entries with ptr 0
 * in t->e[0..cap) are empty. */
int      flyt_memtab_put(struct flyt_memtab *t, uint64_t ptr, uint64_t size);
uint64_t flyt_memtab_take(struct flyt_memtab *t, uint64_t ptr);
void flyt_memtab_free(struct flyt_memtab *t);

#endif

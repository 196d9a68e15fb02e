/*
 * CUDA IPC between the sessions of one tenant (docs/protocol.md, "IPC").
 *
 * Each session is its own process, so a handle one program exports names
 * something the *server* session holds: the handle carries that session's
 * pid, the nonce of its broker (an abstract Unix socket it listens on from
 * its first export) and a random token for the export. The importing
 * session asks that broker, which checks that the asker is a session of
 * the same tenant (a child of the same flyt-server, or of the same VM on
 * this node by the --vm-quota page) and answers with a descriptor of the
 * memory (SCM_RIGHTS) or the driver's bytes of an interprocess event.
 *
 * Invariants: an export lives exactly as long as its allocation, event or
 * pool (flyt_ipc_mem_freed, flyt_ipc_event_gone, flyt_ipc_pool_gone); an import's mapping lives until
 * its opens are all closed, whatever the exporter does since (the memory
 * stays while mapped, as the driver's own IPC). A session holding any export
 * or import cannot be checkpointed (flyt_ipc_busy).
 */
#ifndef FLYT_IPC_H
#define FLYT_IPC_H

#include <stdint.h>

struct flyt_session;
struct flyt_ipc;

/* The allocation at ptr was freed: handles to it stop opening (an imported
 * pool allocation: it is no longer held). */
void flyt_ipc_mem_freed(struct flyt_session *s, uint64_t ptr);
/* Pool id was destroyed: its export ends. */
void flyt_ipc_pool_gone(struct flyt_session *s, uint64_t id);
/* VMM allocation id had its last release: its export ends. */
void flyt_ipc_vmem_gone(struct flyt_session *s, uint64_t id);
/* Event id was destroyed: its export ends, or it was an opened one. */
void flyt_ipc_event_gone(struct flyt_session *s, uint64_t id);
/* A device reset is about to drop every allocation and event: opened
 * mappings are undone now, exports end. */
void flyt_ipc_reset(struct flyt_session *s);
/* NULL, or what the session shares with another process (a checkpoint is refused). */
const char *flyt_ipc_busy(struct flyt_session *s);
/* The session ends: the broker stops, the tables go. */
void flyt_ipc_end(struct flyt_session *s);

#endif

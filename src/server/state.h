/*
 * Checkpoint and restore of a session (docs/state-format.md): its device
 * allocations with their contents at their addresses, its modules with their
 * images, functions, streams, events, the default pool, its share and its
 * ids, written to a versioned file whose SHA-256 covers it all, and recreated
 * in a fresh server session that then answers the same ids and pointers.
 *
 * An object the capture does not support yet makes it fail, naming the
 * object's kind, before anything is drained or written: never a partial state.
 */
#ifndef FLYT_STATE_H
#define FLYT_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "session.h"

/* A verified state file, mapped read-only. */
struct flyt_state;

/* Opens and verifies path: magic, version (a newer one is refused), the
 * SHA-256 trailer, and the bounds of every section and record. NULL with the
 * reason in err. */
struct flyt_state *flyt_state_open(const char *path, char *err, size_t errlen);
/* The same for a file whose bytes were hashed as they arrived and matched its version-6
 * trailer (flyt_rh_finish; hash_ns: that hashing's time): the rest is checked, the hash
 * not again. An older version is hashed as by flyt_state_open. */
struct flyt_state *flyt_state_open_hashed(const char *path, uint64_t hash_ns, char *err,
                                          size_t errlen);
/* The same for a state received into memory (an anonymous mapping of size bytes at data,
 * handed over: unmapped by flyt_state_close); what names it in messages. */
struct flyt_state *flyt_state_open_memory(const unsigned char *data, size_t size, int prehashed,
                                          uint64_t hash_ns, const char *what, char *err,
                                          size_t errlen);
/* The session id the state was captured from, "" for a standalone server. */
const char *flyt_state_session_id(const struct flyt_state *st);
void flyt_state_close(struct flyt_state *st);
/* The session's instance and the request-stream offset its client resumes
 * at: 1, or 0 for a state without them (format version 1). */
int flyt_state_client(const struct flyt_state *st, uint8_t instance[16], uint64_t *consumed);

/* Drains the session and writes its state to fd (*bytes: how many). On
 * failure err says why in one line; the session is unchanged either way. */
CUresult flyt_state_capture(flyt_session *s, int fd, uint64_t *bytes, char *err, size_t errlen);
/* The same into path, through a temporary file renamed at the end; and when
 * sock >= 0, the same bytes to that receiving server (state_stream.h) as they
 * are written. */
CUresult flyt_state_capture_file(flyt_session *s, const char *path, int sock, uint64_t *bytes,
                                 char *err, size_t errlen);
/* Recreates st in s, whose backend was just opened (with its share, if the
 * server has one) and holds nothing yet. */
CUresult flyt_state_restore(flyt_session *s, const struct flyt_state *st, char *err, size_t errlen);

/* At a request boundary: serves a checkpoint request posted in the status
 * page for this process. FLYT_CONT, or FLYT_END_BYE when the session is to
 * end after it (FLYT_CKPT_STOP). */
int flyt_state_poll(flyt_session *s);

/* A module global the client looked up, kept for checkpoints (0, or -1 out
 * of memory); the globals of an unloaded module, or all, forgotten. */
int  flyt_state_global_seen(flyt_session *s, uint64_t module, const char *name, uint64_t addr,
                            uint64_t size);
void flyt_state_globals_drop(flyt_session *s, uint64_t module); /* 0: all */

#endif

/*
 * The state file's bytes on their way out, and their integrity
 * (docs/state-format.md, "Integrity" and "Phase timings").
 *
 * Since format version 6 the trailer is a SHA-256 over the list of the
 * SHA-256s of the body's 4 MiB chunks (flyt_state_root), so chunks hash on
 * several threads. The writer fills large blocks (pinned staging buffers
 * where the backend has them, so device memory is read straight into them);
 * each full block is hashed chunk by chunk on worker threads and written to
 * the file and sent to the receiving server by two more threads, in order,
 * while the caller fills the next block.
 */
#ifndef FLYT_STATE_PIPE_H
#define FLYT_STATE_PIPE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* A thread that takes none of the session's signals (SIGURG wakes its reads). */
int flyt_spawn_unsignalled(pthread_t *th, void *(*fn)(void *), void *arg);

/* Phase times of one capture (ns); hashing is summed over its threads. */
struct flyt_state_times {
    uint64_t drain, d2h, hash, write, send, stall, fsync;
    uint64_t unsent;    /* bytes the stream left out (the receiver holds them) */
    uint64_t file_tail; /* the file completed after the stream's last byte */
    int      threads; /* hashing threads */
    int      streamed;
};

struct flyt_swriter;

/* A writer to fd and, when sock >= 0, the same bytes to sock; *sent (may be
 * NULL) follows the bytes out. Blocks come from b's staging buffers (b may be
 * NULL). NULL out of memory or threads. */
struct flyt_swriter *flyt_sw_open(flyt_backend *b, int fd, int sock, uint64_t *sent);
/* Appends n bytes; 0, or -1 once an output failed. */
int flyt_sw_put(struct flyt_swriter *w, const void *p, size_t n);
/* The same, but the n bytes go to the file and the hash, not to the socket: the
 * receiver holds them already (a kernel image it preloaded) and puts them in their place
 * itself. flyt_sw_unsent: how many bytes were left out so. */
int      flyt_sw_put_unsent(struct flyt_swriter *w, const void *p, size_t n);
uint64_t flyt_sw_unsent(const struct flyt_swriter *w);
/* Room in the current block to be filled in place (*room >= 1), then
 * flyt_sw_commit of how much was: device reads land there directly. NULL
 * once an output failed. */
void *flyt_sw_reserve(struct flyt_swriter *w, size_t *room);
int   flyt_sw_commit(struct flyt_swriter *w, size_t n);
/* The body is complete: waits for every block, appends the trailer. 0 or -1. */
int flyt_sw_finish(struct flyt_swriter *w);
/* Bytes so far, and the first output error: its errno (0: none), *on_sock when
 * it was the stream's. */
uint64_t flyt_sw_total(const struct flyt_swriter *w);
int      flyt_sw_error(const struct flyt_swriter *w, int *on_sock);
/* Stops the threads, gives the blocks back; adds its times to t. */
void flyt_sw_close(struct flyt_swriter *w, struct flyt_state_times *t);

/* The version-6 trailer of body (len bytes), hashed on threads; *hash_ns: the
 * hashing time summed over them. 0, or -1 out of memory. */
int flyt_state_root(const unsigned char *body, size_t len, unsigned char root[32],
                    uint64_t *hash_ns);

/* The receiving server's side: the stream's bytes, received into one buffer at base
 * that never moves, hashed in place by chunks on threads as they become final, so that
 * the state is verified soon after its last byte. flyt_rh_final: bytes [0, final) will
 * not change and are body (not the trailer). NULL out of memory or threads. */
struct flyt_rhash;
struct flyt_rhash *flyt_rh_open(const unsigned char *base);
int                flyt_rh_final(struct flyt_rhash *h, size_t final); /* 0, or -1 no memory */
/* The stream ended with total bytes at base: 1 when its last 32 are the version-6
 * trailer of the rest, 0 when not (corrupted, or an older format: hash it as
 * flyt_state_open does), -1 out of memory; *hash_ns: the hashing time summed over the
 * threads. */
int  flyt_rh_finish(struct flyt_rhash *h, size_t total, uint64_t *hash_ns);
void flyt_rh_close(struct flyt_rhash *h);

#endif

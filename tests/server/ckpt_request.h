/*
 * A checkpoint request posted in a server's status page as the node manager
 * posts it (docs/state-format.md): for tests of checkpoint and restore, on
 * the server side (raw frames) and the client side (a program that is moved).
 */
#ifndef FLYT_TEST_CKPT_REQUEST_H
#define FLYT_TEST_CKPT_REQUEST_H

#include <stddef.h>
#include <stdint.h>

/* Asks the session admitted on the page at status_path to checkpoint to
 * state_path with flags (FLYT_CKPT_*), and wakes it with SIGURG. Returns the
 * request's generation; a failed check ends the test. */
uint64_t ckpt_post(const char *status_path, const char *state_path, uint32_t flags);
/* Waits up to timeout_ms for the answer to request gen: its result (a
 * CUresult), the error line in error; -1 when none came in time. */
int ckpt_wait(const char *status_path, uint64_t gen, int timeout_ms, char *error, size_t errlen);

/* Calls fn on each section of the state file (its type, bytes and length)
 * up to END; returns the file's format version. */
uint32_t ckpt_sections(const char *state_path,
                       void (*fn)(uint32_t type, const unsigned char *body, uint64_t len, void *arg),
                       void *arg);

#endif

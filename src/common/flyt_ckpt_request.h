/*
 * Asking a managed flyt-server's session for a checkpoint through its status
 * page (flyt_server_status.h, docs/state-format.md): the one implementation of
 * that contract, used by flyt-checkpoint and the node manager.
 */
#ifndef FLYT_CKPT_REQUEST_H
#define FLYT_CKPT_REQUEST_H

#include <stddef.h>
#include <stdint.h>

struct flyt_ckpt_outcome {
    int32_t  result; /* the session's CUresult: 0 written */
    uint64_t bytes;  /* the state file's size */
    uint64_t ns;     /* the session's drain and write */
    uint32_t precopy_ms; /* its kernel images sent ahead first, while the program ran */
};

/* Where the session also streams its state (a receiving flyt-server: docs/server.md,
 * --restore-listen); NULL or an empty address: the file only. */
struct flyt_ckpt_dest {
    const char *address; /* tcp://HOST:PORT */
    const char *secret;  /* the receiver's one-time secret, hex */
};

/* Writes the request for state_path into the page at status_path (flags: FLYT_CKPT_STOP,
 * the session ends after a successful checkpoint, with FLYT_CKPT_SUSPEND for a
 * preemption), wakes the connected session and waits up to
 * timeout_ms for its answer. 0 with out when the session answered (out->result says
 * whether it wrote the file; err has its reason when not); FLYT_CKPT_NO_SESSION
 * when no client is connected (a session with nothing to capture); -1 with err
 * when the session could not be asked or did not answer. */
#define FLYT_CKPT_NO_SESSION (-2)
int flyt_ckpt_request(const char *status_path, const char *state_path,
                      const struct flyt_ckpt_dest *dest, uint32_t flags, long timeout_ms,
                      struct flyt_ckpt_outcome *out, char *err, size_t errlen);
/* While a request is served: the bytes written so far and about how many there will
 * be (0: not known yet). 0, or -1 when the page cannot be read. */
int flyt_ckpt_progress(const char *status_path, uint64_t *sent, uint64_t *estimate);

#endif

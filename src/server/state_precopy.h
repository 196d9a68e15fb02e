/*
 * Kernel images sent ahead of a streamed migration (docs/state-format.md,
 * "Pre-copy of kernel images"): while the program still runs on the source,
 * a thread of the source connects to the receiving server, lists the
 * session's modules (id, SHA-256, size), sends the images the receiver does
 * not find in its module cache, and the receiver loads them into its already
 * open context. The state that follows the stop then finds each module
 * loaded. Nothing of it is required: whatever was not preloaded is loaded
 * from the state as before.
 */
#ifndef FLYT_STATE_PRECOPY_H
#define FLYT_STATE_PRECOPY_H

#include <stddef.h>
#include <stdint.h>

#include "session.h"

#define FLYT_PRECOPY_MAGIC  "FLYTPRE2" /* 8 bytes, in place of the state's header */
#define FLYT_PRECOPY_MAGIC1 "FLYTPRE1" /* the first version: the state carries every image */

/* ---- the source (the session thread, at a request boundary) ---- */

/* Snapshots the session's modules and starts the thread that connects to dest
 * and sends them: 1 when started (the session carries on; flyt_precopy_ready
 * says when to capture), 0 when there is nothing to send or it could not start
 * (capture at once, as without it). */
int flyt_precopy_start(flyt_session *s, const char *dest, const char *secret);
/* Whether a started pre-copy's thread has finished (one load). */
int flyt_precopy_ready(void);
/* Joins it: the connection to the receiver, its greeting and pre-copy done, on
 * which the state is to be streamed; or -1 with why (the receiver refused or
 * is gone: the stream would fail the same way). */
int flyt_precopy_collect(char *why, size_t whylen);

/* Whether the receiver of the collected pre-copy holds this image: the streamed state
 * leaves its bytes out (flyt_sw_put_unsent). */
int  flyt_precopy_receiver_holds(uint64_t id, const uint8_t sha[32], uint64_t size);
/* The capture is over: forgets the list. */
void flyt_precopy_forget(void);

/* ---- the receiver (the process that opened the device, before the state) ---- */

/* After the greeting on fd: takes the source's pre-copy if it sends one and
 * loads the images into the preopened backend. 0 (done, or none sent: the
 * state comes next), or -1 with err when the connection can no longer carry
 * the state (a broken or malformed pre-copy). */
int flyt_precopy_receive(int fd, const struct flyt_server_config *cfg, long long deadline_ms,
                         char *err, size_t errlen);
/* A MODULE section of the incoming state whose image the source left out (it listed
 * the image and this receiver said it holds it): 1 with *image (NULL when it did not
 * arrive whole after all: the state cannot be completed), 0 when the section carries
 * its image. */
int flyt_precopy_left_out(uint64_t id, const uint8_t sha[32], uint64_t size, const void **image);
/* Whether any image is left out of the incoming state. */
int  flyt_precopy_leaves_out(void);
/* The state arrived: the images held for it are freed. */
void flyt_precopy_images_free(void);
/* The module preloaded for this id and image, handed over (NULL: none). */
flyt_bhandle flyt_precopy_take(uint64_t id, const uint8_t sha[32], uint64_t size);
/* The restore succeeded in restore_ns: unloads what it did not take and logs
 * the pre-copy's gain. */
void flyt_precopy_settle(flyt_backend *b, uint64_t restore_ns);

#endif

/*
 * A session's state streamed straight to the server that takes it over
 * (docs/state-format.md, "Streaming"): the source's checkpoint connects to
 * the receiving server (flyt-server --restore-listen), proves a one-time
 * secret, sends the state file's bytes as it writes them, and reads one
 * answer line once the receiver has verified the whole state.
 */
#ifndef FLYT_STATE_STREAM_H
#define FLYT_STATE_STREAM_H

#include <stddef.h>

#include "state.h"

#define FLYT_STREAM_MAGIC "FLYTSTM1"  /* 8 bytes, then the secret */
#define FLYT_STREAM_SECRET_LEN 64     /* hex digits */

/* CLOCK_MONOTONIC in ms: the deadlines below. */
long long flyt_stream_now_ms(void);
/* Exactly len bytes from fd by deadline (flyt_stream_now_ms): 0, or -1 (the
 * deadline passed, the connection ended or failed). */
int flyt_stream_read_by(int fd, void *buf, size_t len, long long deadline);

/* Source: connects to address (retrying a refused connection for a few seconds:
 * the receiver may still be starting) and sends the greeting. The socket, or -1
 * with why in err. */
int flyt_stream_connect(const char *address, const char *secret, char *err, size_t errlen);
/* Source, after the last byte: ends the stream and waits for the receiver's verdict.
 * 0 when it took the state, -1 with its reason in err. Closes fd. */
int flyt_stream_finish(int fd, char *err, size_t errlen);

/* Receiver (--restore-listen): listens on address for one connection within
 * timeout_s, checks its secret against secret_file, takes the kernel images the
 * source sends ahead of the state, if it does, and loads them (state_precopy.h)
 * into the preopened backend, writes the state's bytes into path
 * (through path.tmp), opens and verifies it as flyt_state_open does and checks
 * that it holds cfg's session id ("" for a standalone server). The verified state, or
 * NULL with why in err. A refusal is answered to the source at once; so is the
 * acceptance when sender is NULL, else *sender is the source's connection, whose
 * verdict flyt_stream_verdict gives later (once the state is restored and the
 * server listens: the source ends its session on it). */
struct flyt_state *flyt_stream_receive(const char *address, const char *secret_file,
                                       const char *path, int timeout_s,
                                       const struct flyt_server_config *cfg, int *sender,
                                       char *err, size_t errlen);
/* The received state's file (flyt_stream_receive's path): keep: written, in the
 * background unless wait (the source was answered: not downtime); else its temporary
 * file removed (the restore failed). */
void flyt_stream_keep_file(int keep, int wait);
/* Answers the source on sender (why NULL: the state was taken) and closes it. */
void flyt_stream_verdict(int sender, const char *why);

#endif

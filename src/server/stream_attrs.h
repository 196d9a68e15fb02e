/*
 * The stream attributes a session's program set (cuStreamSetAttribute,
 * cuStreamCopyAttributes), kept by stream id. A live resize gives every
 * stream, the default ones included, a new backend stream in the new green
 * context, which starts with the driver's defaults: the session sets each
 * recorded attribute again on it (docs/server.md, "Live resize"). Flags and
 * priority are the backend's to carry (it makes the new stream with them).
 */
#ifndef FLYT_STREAM_ATTRS_H
#define FLYT_STREAM_ATTRS_H

#include "session.h"

/* After a CALL the backend ran successfully: records what it set. */
void flyt_stream_attrs_note(flyt_session *s, uint32_t call_id, const uint64_t *client_args,
                            const void *in);
/* The stream is gone (STREAM_DESTROY). */
void flyt_stream_attrs_forget(flyt_session *s, uint64_t stream);
/* Every record (device reset, end of session). */
void flyt_stream_attrs_clear(flyt_session *s);
/* After a resize moved the streams: sets every recorded attribute on the
 * stream that now answers to its id. Returns how many could not be set
 * (each said in the log). */
int flyt_stream_attrs_reapply(flyt_session *s);

#endif

/*
 * Live resize, the session's side (docs/server.md, "Live resize"): the node
 * manager posts a new SM share in the status page and sends SIGURG; the
 * session applies it at a request boundary, after draining its work, and
 * acknowledges it in its slot. The memory quota needs nothing here: it is
 * read from the page at every allocation.
 */
#ifndef FLYT_RESIZE_H
#define FLYT_RESIZE_H

#include "session.h"

/* In the session child before the backend starts threads: SIGURG is blocked
 * in every thread and read through a descriptor instead (with a page only). */
void flyt_resize_init(flyt_session *s);
/* The share the session should start on: the page's latest resize when
 * there was one (then groups/ngroups/granularity point at it), else the
 * command line's are left as they are. */
void flyt_resize_initial(flyt_session *s, const int **groups, int *ngroups, unsigned *granularity);
/* At a request boundary: applies a share posted since the last one. */
void flyt_resize_poll(flyt_session *s);
/* For an idle session (nothing buffered): blocks until the socket has
 * something, a resize or checkpoint was signalled (SIGURG) or s->wake_at_ms
 * passed; 1 when only one of the latter (the caller then looks at the status
 * page with flyt_resize_poll and flyt_state_poll, outside the reader role). */
int flyt_resize_wait(flyt_session *s);

#endif

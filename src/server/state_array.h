/*
 * CUDA arrays, mipmapped arrays, texture and surface objects in a checkpoint
 * (sections ARRAY, MIPMAP, TEXOBJ and SURFOBJ of docs/state-format.md): their
 * descriptors as the session recorded them when they were made
 * (handlers_array.c), the arrays' contents, and their restore under the ids
 * and values the client holds.
 */
#ifndef FLYT_STATE_ARRAY_H
#define FLYT_STATE_ARRAY_H

#include <stddef.h>
#include <stdint.h>

#include "session.h"
#include "state_pipe.h"

/* Whether a section type is one of these. */
int flyt_state_array_section(uint32_t type);
/* The section's record and the bytes after it are well-formed. */
int flyt_state_array_record_ok(uint32_t type, const unsigned char *p, uint64_t len);
/* NULL when e can be captured, else what it is (the capture refuses it). */
const char *flyt_state_array_refused(const flyt_session *s, const struct flyt_hentry *e);
/* e's section (and contents) to the writer. */
CUresult flyt_state_array_write(flyt_session *s, struct flyt_swriter *sw, const struct flyt_hentry *e);
/* A section made again under its id (*last: state.c's server-id order). */
CUresult flyt_state_array_restore(flyt_session *s, uint32_t type, const unsigned char *p,
                                  uint64_t len, uint64_t *last, char *err, size_t errlen);

/* state.c: an entry under exactly id (a restore). */
struct flyt_hentry *flyt_state_add_exact(flyt_session *s, uint64_t id, enum flyt_htype type,
                                         flyt_bhandle bh, uint64_t *last_server_id);

/* handlers_array.c, shared with the restore: objects made from the wire's
 * descriptors (the session's array ids translated); an entry named as a
 * level of a mipmapped array; a texture or surface entry given the value
 * its client holds (the backend translates it when the backend's differs)
 * and its descriptor (len bytes of a flyt_req_tex_create). */
CUresult flyt_tex_make(flyt_session *s, const flyt_req_tex_create *r, uint64_t *obj);
CUresult flyt_surf_make(flyt_session *s, const flyt_res_desc *r, uint64_t *obj);
void     flyt_array_level_name(struct flyt_hentry *level, const struct flyt_hentry *mipmap,
                               unsigned l);
flyt_req_array_create flyt_array_level_desc(const flyt_req_array_create *m, unsigned l);
CUresult flyt_obj_keep(flyt_session *s, struct flyt_hentry *e, uint64_t client, const void *desc,
                       size_t len);

#endif

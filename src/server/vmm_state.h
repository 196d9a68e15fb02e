/*
 * The program's VMM objects in a checkpoint (handlers_vmm.c; sections
 * VRANGE and VMEM of docs/state-format.md): a snapshot of what the backend
 * holds, joined with the client's handle ids, and their restore.
 */
#ifndef FLYT_VMM_STATE_H
#define FLYT_VMM_STATE_H

#include "session.h"
#include "state_format.h"

struct flyt_vmm_smem {
    flyt_bhandle            bh;
    struct flyt_state_vmem  rec; /* id 0 until a handle names it */
    struct flyt_state_vmap *maps;
    size_t                  cap_maps;
};

struct flyt_vmm_snap {
    struct flyt_state_vrange *ranges;
    size_t                    nranges, cap_ranges;
    struct flyt_vmm_smem     *mems;
    size_t                    nmems, cap_mems;
    int                       oom;
};

/* Fills snap (empty when the backend holds no VMM objects); what cannot be
 * captured is CUDA_ERROR_NOT_SUPPORTED with its kind in *what. */
CUresult flyt_vmm_snap_take(flyt_session *s, struct flyt_vmm_snap *snap, const char **what);
void flyt_vmm_snap_free(struct flyt_vmm_snap *snap);
const struct flyt_vmm_smem *flyt_vmm_snap_by_id(const struct flyt_vmm_snap *snap, uint64_t id);

/* The whole allocation mapped read-write at a temporary *va (its contents
 * are read and written there, mapped elsewhere or not); closed after a drain. */
CUresult flyt_vmm_window_open(flyt_session *s, flyt_bhandle mem, uint64_t size, uint64_t *va);
CUresult flyt_vmm_window_close(flyt_session *s, uint64_t va, uint64_t size);

/* The same for an allocation of the snapshot, released ones included. */
CUresult flyt_vmm_capture_open(flyt_session *s, const struct flyt_vmm_smem *m, uint64_t *va);
CUresult flyt_vmm_capture_close(flyt_session *s, const struct flyt_vmm_smem *m, uint64_t va);

typedef CUresult (*flyt_vmm_bytes_fn)(flyt_session *s, uint64_t addr, uint64_t size,
                                      const unsigned char *data, char *err, size_t errlen);
CUresult flyt_vmm_restore_range(flyt_session *s, const struct flyt_state_vrange *r, char *err,
                                size_t errlen);
/* A VMEM section: the allocation made again (charged when a handle names
 * it), mapped, its access granted, its contents written by bytes; *mem is it. */
CUresult flyt_vmm_restore_mem(flyt_session *s, const struct flyt_state_vmem *r,
                              const unsigned char *tail, flyt_vmm_bytes_fn bytes,
                              flyt_bhandle *mem, char *err, size_t errlen);

#endif

/*
 * Context-local storage: the store behind the driver's hidden
 * CONTEXT_LOCAL_STORAGE export table. NVIDIA's runtime keeps its per-context
 * state here and looks it up before almost every runtime call, so it is
 * answered in the client, never as a round trip.
 *
 * ctx NULL or (CUcontext)-1 means the calling thread's current context
 * (cuCtxGetCurrent); no current context is CUDA_ERROR_INVALID_CONTEXT.
 * (NVIDIA's driver 580 crashes on -1; taking it as "current" is harmless.)
 */
#ifndef FLYT_CTX_STORAGE_H
#define FLYT_CTX_STORAGE_H

#include <cuda.h>

/* Called as dtor(ctx, key, value) when the context is destroyed. */
typedef void (*flyt_cls_dtor)(CUcontext ctx, void *key, void *value);

/* Stores value under key for ctx; a key already there is
 * CUDA_ERROR_INVALID_HANDLE and keeps its value, as in NVIDIA's driver. */
CUresult flyt_ctx_storage_put(CUcontext ctx, void *key, void *value, flyt_cls_dtor dtor);
/* Forgets key without calling its dtor; CUDA_ERROR_INVALID_HANDLE if absent. */
CUresult flyt_ctx_storage_delete(CUcontext ctx, void *key);
/* *value = the value under key; CUDA_ERROR_INVALID_HANDLE if absent. */
CUresult flyt_ctx_storage_get(void **value, CUcontext ctx, void *key);

/* Runs the dtors of ctx's entries and forgets them: the context module calls
 * this when it destroys (or resets) a context. Safe for a ctx with none. */
void flyt_ctx_storage_drop(CUcontext ctx);

#endif

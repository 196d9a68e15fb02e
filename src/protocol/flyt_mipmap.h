/*
 * What a level of a mipmapped array measures, for the client (descriptor
 * queries) and the server's host backend alike.
 */
#ifndef FLYT_MIPMAP_H
#define FLYT_MIPMAP_H

#include <cuda.h>

/* Level l of a mipmapped array described by d: width, height and depth each
 * halved l times (at least 1; 0 stays 0), layers and cubemap faces kept. */
static inline CUDA_ARRAY3D_DESCRIPTOR flyt_mipmap_level_desc(const CUDA_ARRAY3D_DESCRIPTOR *d,
                                                             unsigned l)
{
    size_t ext[3] = {d->Width, d->Height, d->Depth};
    int whole_depth = (d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
    for (int i = 0; i < 3; i++)
        if (ext[i] != 0 && !(i == 2 && whole_depth))
            ext[i] = ext[i] >> l ? ext[i] >> l : 1;
    CUDA_ARRAY3D_DESCRIPTOR ld = *d;
    ld.Width = ext[0], ld.Height = ext[1], ld.Depth = ext[2];
    return ld;
}

#endif

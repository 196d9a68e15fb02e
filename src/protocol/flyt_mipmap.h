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

/* Bytes of one element of an array of format with channels (1, 2 or 4 for
 * the plain formats; the normalized and 10-10-10-2 ones name their own
 * count); 0 for the block-compressed and YUV formats, whose texels are not
 * whole bytes each or which have planes. */
static inline unsigned flyt_array_elem_bytes(unsigned format, unsigned channels)
{
    unsigned size, fixed = 0; /* fixed: the channels the format names */
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: size = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: size = 2; break;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: size = 4; break;
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: size = 1, fixed = 1; break;
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2: size = 1, fixed = 2; break;
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4: size = 1, fixed = 4; break;
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X1: size = 2, fixed = 1; break;
    case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X2: size = 2, fixed = 2; break;
    case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4: size = 2, fixed = 4; break;
    case CU_AD_FORMAT_UNORM_INT_101010_2: size = 4, fixed = 1; break;
    default: return 0;
    }
    if (fixed)
        return size * fixed;
    return channels == 1 || channels == 2 || channels == 4 ? size * channels : 0;
}

#endif

/*
 * Kernel images (fatbin.c): where one starts and how many bytes it spans,
 * and a fatbinary cut to the entries a device can load.
 */
#ifndef FLYT_FATBIN_H
#define FLYT_FATBIN_H

#include <stddef.h>

/* Where an image (fatbinary or its runtime wrapper, cubin, PTX) starts and
 * how many bytes it spans: 0, or -1 for a wrapper without data. */
int flyt_image_extent(const void *image, const void **start, size_t *size);

/* A fatbinary of size bytes cut to the entries a device of sm (e.g. 90)
 * can load, in a new malloc'd buffer: 1 with *out and *out_size; 0 when
 * nothing would be left out (or nothing left to load); -1 when it is not
 * laid out as a fatbinary (ship it whole). */
int flyt_fatbin_trim(const void *image, size_t size, unsigned sm, void **out, size_t *out_size);

#endif

/*
 * The smallest image the host backend (and Flyt's checks of a fatbinary's
 * header) takes as a fatbinary: its header (magic, version 1, header size
 * 16, body size) and `body` bytes; no kernel runs from it. Tests vary `seed`
 * for distinct images.
 */
#ifndef FLYT_TEST_FAKE_FATBIN_H
#define FLYT_TEST_FAKE_FATBIN_H

#include <stdint.h>
#include <string.h>

#define FLYT_FAKE_FATBIN_HEADER 16

/* Writes the image into img (FLYT_FAKE_FATBIN_HEADER + body bytes); its size. */
static inline size_t flyt_fake_fatbin(unsigned char *img, uint64_t body, unsigned char seed)
{
    uint32_t magic = 0xBA55ED50u;
    uint16_t version = 1, hdr = FLYT_FAKE_FATBIN_HEADER;
    memcpy(img, &magic, 4);
    memcpy(img + 4, &version, 2);
    memcpy(img + 6, &hdr, 2);
    memcpy(img + 8, &body, 8);
    for (uint64_t i = 0; i < body; i++)
        img[FLYT_FAKE_FATBIN_HEADER + i] = (unsigned char)(i * 7 + seed);
    return FLYT_FAKE_FATBIN_HEADER + (size_t)body;
}

#endif

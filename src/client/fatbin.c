/*
 * Kernel images as programs hand them over: a fatbinary (or the wrapper
 * NVIDIA's runtime registers it with), a cubin (ELF) or PTX text. Here:
 * how many bytes an image spans, and a fatbinary trimmed to the entries the
 * session's GPU can load.
 *
 * A fatbinary is a 16-byte header {magic, version, header size, body size}
 * and a body of entries, each a header {kind, version, header size, payload
 * size, ..., arch at byte 28, flags at 40} and its payload (compressed or
 * not). NVIDIA's libraries carry one cubin per architecture and PTX for the
 * newest: cuBLASLt's are 217 MB, 40 of them for sm_90. The driver loads a
 * cubin of the device's major version no newer than the device (sm_90a and
 * family-specific ones included) or else compiles PTX no newer than it; the
 * trimmed image keeps exactly those entries, and any entry of a kind it
 * does not know, in their order.
 */
#include "fatbin.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC         0xBA55ED50u
#define ENTRY_PTX            1
#define ENTRY_ELF            2
#define ENTRY_ARCH_AT        28 /* u32 within the entry header: sm number (90, 100, ...) */
#define ENTRY_MIN_HEADER     32

struct fatbin_wrapper {
    int32_t magic;
    int32_t version;
    const void *data;
    void *filename_or_fatbins;
};

struct fatbin_header {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;
};

/* An ELF image's extent: its furthest section or header table. */
static size_t elf_size(const unsigned char *img)
{
    uint64_t shoff, phoff;
    uint16_t phentsize, phnum, shentsize, shnum;
    memcpy(&phoff, img + 0x20, 8);
    memcpy(&shoff, img + 0x28, 8);
    memcpy(&phentsize, img + 0x36, 2);
    memcpy(&phnum, img + 0x38, 2);
    memcpy(&shentsize, img + 0x3a, 2);
    memcpy(&shnum, img + 0x3c, 2);
    uint64_t end = shoff + (uint64_t)shentsize * shnum;
    if (phoff + (uint64_t)phentsize * phnum > end)
        end = phoff + (uint64_t)phentsize * phnum;
    for (uint16_t i = 0; i < shnum; i++) {
        const unsigned char *sh = img + shoff + (uint64_t)i * shentsize;
        uint32_t type;
        uint64_t off, size;
        memcpy(&type, sh + 4, 4);
        memcpy(&off, sh + 0x18, 8);
        memcpy(&size, sh + 0x20, 8);
        if (type != 8 /* SHT_NOBITS */ && off + size > end)
            end = off + size;
    }
    return (size_t)end;
}

int flyt_image_extent(const void *image, const void **start, size_t *size)
{
    const unsigned char *p = image;
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic == FATBIN_WRAPPER_MAGIC) {
        const struct fatbin_wrapper *w = image;
        p = w->data;
        if (p == NULL)
            return -1;
        memcpy(&magic, p, 4);
    }
    if (magic == FATBIN_MAGIC) {
        const struct fatbin_header *h = (const void *)p;
        *start = p;
        *size = (size_t)h->header_size + (size_t)h->fat_size;
        return 0;
    }
    *start = p;
    if (memcmp(p, "\x7f" "ELF", 4) == 0 && p[4] == 2 /* 64-bit */) {
        *size = elf_size(p);
        return 0;
    }
    *size = strlen((const char *)p) + 1; /* PTX text */
    return 0;
}

/* Whether the driver could load the entry on a device of sm (e.g. 90). */
static int entry_usable(uint16_t kind, uint32_t arch, unsigned sm)
{
    switch (kind) {
    case ENTRY_ELF: return arch / 10 == sm / 10 && arch <= sm;
    case ENTRY_PTX: return arch <= sm;
    default: return 1; /* not ours to judge */
    }
}

/* The entries' extents, walked: -1 when one runs past the body. */
static int entry_at(const unsigned char *body, uint64_t body_size, uint64_t at, uint16_t *kind,
                    uint32_t *arch, uint64_t *span)
{
    uint32_t header;
    uint64_t payload;
    if (body_size - at < ENTRY_MIN_HEADER)
        return -1;
    memcpy(kind, body + at, 2);
    memcpy(&header, body + at + 4, 4);
    memcpy(&payload, body + at + 8, 8);
    memcpy(arch, body + at + ENTRY_ARCH_AT, 4);
    if (header < ENTRY_MIN_HEADER || header > body_size - at || payload > body_size - at - header)
        return -1;
    *span = header + payload;
    return 0;
}

int flyt_fatbin_trim(const void *image, size_t size, unsigned sm, void **out, size_t *out_size)
{
    const unsigned char *p = image;
    struct fatbin_header h;
    if (size < sizeof h)
        return -1;
    memcpy(&h, p, sizeof h);
    if (h.magic != FATBIN_MAGIC || h.header_size < sizeof h || h.header_size > size ||
        h.fat_size > size - h.header_size)
        return -1;
    const unsigned char *body = p + h.header_size;
    uint64_t kept = 0, usable = 0;
    for (uint64_t at = 0, span; at < h.fat_size; at += span) {
        uint16_t kind;
        uint32_t arch;
        if (entry_at(body, h.fat_size, at, &kind, &arch, &span) != 0)
            return -1; /* not laid out as known: shipped whole, for the driver to judge */
        if (entry_usable(kind, arch, sm)) {
            kept += span;
            usable += kind == ENTRY_ELF || kind == ENTRY_PTX;
        }
    }
    if (kept == h.fat_size || usable == 0) /* nothing to leave out, or nothing would load */
        return 0;
    unsigned char *t = malloc(h.header_size + kept);
    if (t == NULL)
        return -1;
    memcpy(t, p, h.header_size);
    uint64_t w = h.header_size;
    for (uint64_t at = 0, span; at < h.fat_size; at += span) {
        uint16_t kind;
        uint32_t arch;
        entry_at(body, h.fat_size, at, &kind, &arch, &span);
        if (entry_usable(kind, arch, sm)) {
            memcpy(t + w, body + at, span);
            w += span;
        }
    }
    h.fat_size = kept;
    memcpy(t, &h, sizeof h);
    *out = t;
    *out_size = (size_t)w;
    return 1;
}

/*
 * Kernel images cut to the session's GPU (src/client/fatbin.c) alone: a
 * fatbinary laid out as nvcc writes them (cubins for several architectures,
 * sm_90a among them, PTX, an entry of a kind not known here) keeps exactly
 * what a device of each architecture loads, in order; a fatbinary with
 * nothing to leave out, or nothing left to load, is not cut; malformed ones
 * are left for the driver. Image extents of a wrapper, a cubin and PTX.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fatbin.h"

enum { PTX = 1, ELF = 2, OTHER = 16 };

struct entry {
    uint16_t kind;
    uint32_t arch;
    uint64_t flags;
    uint32_t payload; /* bytes, a multiple of 8 */
};

/* A fatbinary of the entries, each payload filled with its index. */
static unsigned char *build(const struct entry *e, int n, size_t *size)
{
    size_t body = 0;
    for (int i = 0; i < n; i++)
        body += 64 + e[i].payload;
    unsigned char *p = calloc(1, 16 + body);
    uint32_t magic = 0xBA55ED50u;
    uint16_t version = 1, header = 16;
    uint64_t fat = body;
    memcpy(p, &magic, 4);
    memcpy(p + 4, &version, 2);
    memcpy(p + 6, &header, 2);
    memcpy(p + 8, &fat, 8);
    size_t at = 16;
    for (int i = 0; i < n; i++) {
        uint32_t eh = 64;
        uint64_t payload = e[i].payload;
        memcpy(p + at, &e[i].kind, 2);
        memcpy(p + at + 4, &eh, 4);
        memcpy(p + at + 8, &payload, 8);
        memcpy(p + at + 28, &e[i].arch, 4);
        memcpy(p + at + 40, &e[i].flags, 8);
        memset(p + at + 64, 'a' + i, e[i].payload);
        at += 64 + e[i].payload;
    }
    *size = 16 + body;
    return p;
}

/* The indexes of the entries a trimmed image holds, as letters ("ace"). */
static void kept(const unsigned char *p, size_t size, char *out)
{
    uint64_t fat;
    memcpy(&fat, p + 8, 8);
    CHECK_EQ(16 + fat, size, "the header's body size is the body's");
    int k = 0;
    for (size_t at = 16; at < size; k++) {
        uint64_t payload;
        memcpy(&payload, p + at + 8, 8);
        out[k] = (char)p[at + 64];
        at += 64 + payload;
    }
    out[k] = '\0';
}

static void expect_cut(const struct entry *e, int n, unsigned sm, const char *want)
{
    size_t size, cut_size = 0;
    unsigned char *fb = build(e, n, &size);
    void *cut = NULL;
    CHECK_EQ(flyt_fatbin_trim(fb, size, sm, &cut, &cut_size), 1, "sm_%u: cut", sm);
    char got[16] = "";
    if (cut != NULL)
        kept(cut, cut_size, got);
    CHECK(strcmp(got, want) == 0, "sm_%u keeps %s (got %s)", sm, want, got);
    free(cut);
    free(fb);
}

int main(void)
{
    const struct entry lib[] = {
        {ELF, 80, 0x11, 48},       /* a */
        {PTX, 90, 0x8011, 24},     /* b */
        {ELF, 90, 0x11, 40},       /* c */
        {ELF, 90, 0x100011, 40},   /* d: sm_90a */
        {ELF, 100, 0x1008011, 32}, /* e */
        {PTX, 120, 0x8011, 16},    /* f */
        {OTHER, 0, 0, 8},          /* g */
    };
    expect_cut(lib, 7, 90, "bcdg");  /* sm_90: its cubins, sm_90a too, PTX up to 90 */
    expect_cut(lib, 7, 86, "ag");    /* sm_86: sm_80's cubin runs there; no newer PTX */
    expect_cut(lib, 7, 100, "beg");  /* sm_100: its cubin, and PTX to compile */
    expect_cut(lib, 7, 120, "bfg");  /* sm_120: PTX only (no cubin of major 12) */

    size_t size;
    void *cut = NULL;
    size_t cut_size = 0;
    unsigned char *only90 = build(lib + 2, 2, &size);
    CHECK_EQ(flyt_fatbin_trim(only90, size, 90, &cut, &cut_size), 0, "nothing to leave out: not cut");
    CHECK_EQ(flyt_fatbin_trim(only90, size, 70, &cut, &cut_size), 0,
             "nothing an sm_70 loads: not cut (the driver says so)");
    uint64_t huge = 1u << 20;
    memcpy(only90 + 16 + 8, &huge, 8); /* the first payload runs past the body */
    CHECK_EQ(flyt_fatbin_trim(only90, size, 90, &cut, &cut_size), -1, "a payload past the body");
    free(only90);
    static const char elf[64] = "\x7f" "ELF\x02";
    CHECK_EQ(flyt_fatbin_trim(elf, sizeof elf, 90, &cut, &cut_size), -1, "a cubin is not a fatbinary");

    unsigned char *fb = build(lib, 7, &size);
    struct {
        int32_t magic, version;
        const void *data;
        void *rest;
    } wrapper = {0x466243b1, 1, fb, NULL};
    const void *start = NULL;
    size_t extent = 0;
    CHECK_EQ(flyt_image_extent(&wrapper, &start, &extent), 0, "a runtime wrapper");
    CHECK(start == fb && extent == size, "its fatbinary, all of it (%zu of %zu)", extent, size);
    static const char ptx[] = ".version 8.0\n.target sm_90\n";
    CHECK_EQ(flyt_image_extent(ptx, &start, &extent), 0, "PTX text");
    CHECK_EQ(extent, sizeof ptx, "up to its terminating zero");
    free(fb);
    return check_done();
}

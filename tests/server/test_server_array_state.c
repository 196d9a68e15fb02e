/*
 * Checkpoint and restore of a session's CUDA arrays, mipmapped arrays,
 * texture and surface objects (docs/state-format.md, ARRAY, MIPMAP, TEXOBJ
 * and SURFOBJ) with the host backend: arrays of every shape (1D, 2D, 3D,
 * layered, cubemap, layered cubemap, surface load/store) and formats, two
 * mipmapped arrays (one with levels the client never fetched), texture
 * objects on an array, a mipmapped array, linear and pitch2D memory, and a
 * surface object. A new flyt-server --restore FILE holds the same ids with the
 * same contents; the objects answer to the values the client holds although
 * the backend gave others (the session translates them), a new object never
 * takes a value a restored one's client holds, and the restored session
 * checkpoints and restores again.
 *
 * usage: test_server_array_state PATH-TO-flyt-server
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ckpt_request.h"
#include "harness.h"
#include "state_format.h"

#define F_LAYERED 0x01u /* CUDA_ARRAY3D_* */
#define F_SURFACE 0x02u
#define F_CUBEMAP 0x04u

static char dir[64], status_path[128], state_path[128];

struct arr {
    const char           *what;
    flyt_req_array_create desc;
    uint64_t              id;
    int                   level; /* -1: an array of its own; else a level of mipmaps[mipmap] */
    int                   mipmap;
};

/* format codes: 1 u8, 2 u16, 3 u32, 8 s8, 9 s16, 0x0a s32, 0x10 half, 0x20 float */
static struct arr arrays[] = {
    {"1D float x1", {100, 0, 0, 0x20, 1, 0, 0}, 0, -1, 0},
    {"2D u8 x4 surface load/store", {64, 32, 0, 0x01, 4, F_SURFACE, 0}, 0, -1, 0},
    {"3D half x2", {16, 8, 5, 0x10, 2, 0, 0}, 0, -1, 0},
    {"2D layered s32 x1, 3 layers", {32, 16, 3, 0x0a, 1, F_LAYERED, 0}, 0, -1, 0},
    {"cubemap float x4", {16, 16, 6, 0x20, 4, F_CUBEMAP, 0}, 0, -1, 0},
    {"layered cubemap u16 x1, 2 layers", {8, 8, 12, 0x02, 1, F_CUBEMAP | F_LAYERED, 0}, 0, -1, 0},
    {"1D layered s8 x2, 4 layers", {50, 0, 4, 0x08, 2, F_LAYERED, 0}, 0, -1, 0},
    {"mipmap A level 0", {0}, 0, 0, 0},
    {"mipmap A level 1", {0}, 0, 1, 0},
    {"mipmap A level 2", {0}, 0, 2, 0},
    {"mipmap A level 3", {0}, 0, 3, 0},
    {"mipmap B level 1 (0 and 2 never fetched)", {0}, 0, 1, 1},
};
#define NARRAYS (sizeof arrays / sizeof arrays[0])

static struct {
    flyt_req_array_create desc;
    uint64_t              id;
} mipmaps[] = {
    {{32, 16, 0, 0x20, 1, 0, 4}, 0},  /* 2D float, 4 levels */
    {{16, 8, 4, 0x09, 2, 0, 3}, 0},   /* 3D s16 x2, 3 levels */
};

static uint64_t elem(const flyt_req_array_create *d)
{
    unsigned size = d->format == 0x20 || d->format == 0x03 || d->format == 0x0a ? 4
                  : d->format == 0x10 || d->format == 0x02 || d->format == 0x09 ? 2 : 1;
    return size * d->channels;
}

static uint64_t bytes_of(const flyt_req_array_create *d, uint64_t *row, uint64_t *rows,
                         uint64_t *slices)
{
    *row = d->width * elem(d);
    *rows = d->height ? d->height : 1;
    *slices = d->depth ? d->depth : 1;
    return *row * *rows * *slices;
}

static unsigned char pattern(uint64_t id, uint64_t i)
{
    return (unsigned char)(i * 31u + id * 7u + (i >> 8));
}

static flyt_copy_side device_side(uint64_t addr, uint64_t row, uint64_t rows)
{
    return (flyt_copy_side){.kind = FLYT_SIDE_DEVICE, .handle = addr, .pitch = row, .height = rows};
}

static flyt_copy_side array_side(uint64_t id)
{
    return (flyt_copy_side){.kind = FLYT_SIDE_ARRAY, .handle = id};
}

/* The whole array to or from packed device memory at addr. */
static int array_copy(int fd, const struct arr *a, uint64_t addr, int to_array)
{
    uint64_t row, rows, slices;
    bytes_of(&a->desc, &row, &rows, &slices);
    flyt_req_array_copy r = {.width_bytes = row, .height = rows, .depth = slices};
    r.dst = to_array ? array_side(a->id) : device_side(addr, row, rows);
    r.src = to_array ? device_side(addr, row, rows) : array_side(a->id);
    return th_call(fd, FLYT_OP_ARRAY_COPY, &r, sizeof r, NULL, 0, NULL);
}

static void fill(int fd, const struct arr *a)
{
    uint64_t row, rows, slices, n = bytes_of(&a->desc, &row, &rows, &slices), dev;
    unsigned char *p = malloc(n);
    for (uint64_t i = 0; i < n; i++)
        p[i] = pattern(a->id, i);
    CHECK_EQ(th_alloc(fd, n, &dev), T_SUCCESS, "staging memory for %s", a->what);
    CHECK_EQ(th_htod(fd, dev, p, n), T_SUCCESS, "pattern for %s", a->what);
    CHECK_EQ(array_copy(fd, a, dev, 1), T_SUCCESS, "fill %s", a->what);
    CHECK_EQ(th_free(fd, dev), T_SUCCESS, "free staging");
    free(p);
}

static void check_contents(int fd, const struct arr *a)
{
    uint64_t row, rows, slices, n = bytes_of(&a->desc, &row, &rows, &slices), dev;
    unsigned char *got = malloc(n), *want = malloc(n);
    for (uint64_t i = 0; i < n; i++)
        want[i] = pattern(a->id, i);
    int had;
    CHECK_EQ(th_alloc(fd, n, &dev), T_SUCCESS, "staging memory for %s", a->what);
    CHECK_EQ(array_copy(fd, a, dev, 0), T_SUCCESS, "read %s", a->what);
    CHECK_EQ(th_dtoh(fd, dev, n, got, &had), T_SUCCESS, "read back %s", a->what);
    CHECK_MEM_EQ(got, want, n, "contents of %s", a->what);
    CHECK_EQ(th_free(fd, dev), T_SUCCESS, "free staging");
    free(got);
    free(want);
}

static uint64_t make(int fd, uint16_t op, const void *req, size_t len, const char *what)
{
    flyt_rep_u64 rep = {0};
    CHECK_EQ(th_call_rep(fd, op, req, len, NULL, 0, &rep, sizeof rep), T_SUCCESS, "%s", what);
    return rep.value;
}

/* The level's extent: halved per level (0 stays 0). */
static flyt_req_array_create level_desc(flyt_req_array_create m, unsigned l)
{
    uint64_t *ext[3] = {&m.width, &m.height, &m.depth};
    for (int i = 0; i < 3; i++)
        if (*ext[i])
            *ext[i] = *ext[i] >> l ? *ext[i] >> l : 1;
    m.levels = 0;
    return m;
}

static uint64_t lin_dev, pitch_dev;       /* device memory read by textures */
static uint64_t tex_array, tex_mip, tex_lin, tex_pitch, surf; /* values the client holds */

static flyt_req_tex_create tex_on(uint32_t type, uint64_t handle)
{
    flyt_req_tex_create t;
    memset(&t, 0, sizeof t);
    t.res.type = type;
    t.res.handle = handle;
    t.tex.filter_mode = 0;
    return t;
}

static void build_session(int fd)
{
    th_say("arrays of every shape, two mipmapped arrays, their contents");
    for (size_t m = 0; m < 2; m++)
        mipmaps[m].id = make(fd, FLYT_OP_MIPMAP_CREATE, &mipmaps[m].desc, sizeof mipmaps[m].desc,
                             "mipmapped array");
    for (size_t i = 0; i < NARRAYS; i++) {
        struct arr *a = &arrays[i];
        if (a->level < 0) {
            a->id = make(fd, FLYT_OP_ARRAY_CREATE, &a->desc, sizeof a->desc, a->what);
        } else {
            flyt_req_mipmap_level r = {mipmaps[a->mipmap].id, (uint32_t)a->level, 0};
            a->id = make(fd, FLYT_OP_MIPMAP_LEVEL, &r, sizeof r, a->what);
            a->desc = level_desc(mipmaps[a->mipmap].desc, (unsigned)a->level);
        }
        fill(fd, a);
    }

    th_say("texture objects (array, mipmapped array, linear, pitch2D) and a surface object");
    flyt_req_tex_create t = tex_on(0 /* ARRAY */, arrays[0].id);
    uint64_t gone = make(fd, FLYT_OP_TEX_CREATE, &t, sizeof t, "a texture to be destroyed");
    flyt_req_handle h = {gone};
    CHECK_EQ(th_call(fd, FLYT_OP_TEX_DESTROY, &h, sizeof h, NULL, 0, NULL), T_SUCCESS,
             "destroyed: the restored backend's values shift");
    t = tex_on(0, arrays[1].id);
    t.tex.address_mode[0] = 1, t.tex.flags = 2, t.tex.border_color[0] = 0.5f;
    tex_array = make(fd, FLYT_OP_TEX_CREATE, &t, sizeof t, "texture on a 2D array");
    t = tex_on(1 /* MIPMAPPED_ARRAY */, mipmaps[0].id);
    t.tex.mipmap_filter_mode = 1, t.tex.max_mipmap_level_clamp = 3.0f;
    t.view = (flyt_view_desc){.present = 1, .format = 0x16 /* 1x32 float */, .width = 32,
                              .height = 16, .first_mip = 0, .last_mip = 3};
    tex_mip = make(fd, FLYT_OP_TEX_CREATE, &t, sizeof t, "texture on a mipmapped array, with a view");
    CHECK_EQ(th_alloc(fd, 4096, &lin_dev), T_SUCCESS, "linear memory");
    t = tex_on(2 /* LINEAR */, lin_dev);
    t.res.format = 0x20, t.res.channels = 1, t.res.size = 4096;
    tex_lin = make(fd, FLYT_OP_TEX_CREATE, &t, sizeof t, "texture on linear memory");
    CHECK_EQ(th_alloc(fd, 64 * 16, &pitch_dev), T_SUCCESS, "pitch2D memory");
    t = tex_on(3 /* PITCH2D */, pitch_dev);
    t.res.format = 0x01, t.res.channels = 4, t.res.width = 16, t.res.height = 16, t.res.pitch = 64;
    tex_pitch = make(fd, FLYT_OP_TEX_CREATE, &t, sizeof t, "texture on pitch2D memory");
    flyt_res_desc r = {.type = 0, .handle = arrays[1].id};
    surf = make(fd, FLYT_OP_SURF_CREATE, &r, sizeof r, "surface on the load/store array");
}

static int checkpoint(const char *path, char *error, size_t errlen)
{
    int result = ckpt_wait(status_path, ckpt_post(status_path, path, 0), 5000, error, errlen);
    CHECK_NE(result, -1, "the checkpoint was answered");
    return result;
}

static int destroy(int fd, uint16_t op, uint64_t value)
{
    flyt_req_handle h = {value};
    return th_call(fd, op, &h, sizeof h, NULL, 0, NULL);
}

static void restored_session_matches(int fd)
{
    th_say("the restored session: same array ids and contents");
    for (size_t i = 0; i < NARRAYS; i++)
        check_contents(fd, &arrays[i]);
    flyt_req_mipmap_level r = {mipmaps[1].id, 2, 0};
    struct arr unfetched = {"mipmap B level 2, fetched after the restore", level_desc(mipmaps[1].desc, 2),
                            0, 2, 1};
    unfetched.id = make(fd, FLYT_OP_MIPMAP_LEVEL, &r, sizeof r, "a level never fetched before");
    CHECK_EQ(destroy(fd, FLYT_OP_ARRAY_DESTROY, unfetched.id), T_INVALID_HANDLE,
             "a restored level is still refused alone");
    fill(fd, &unfetched);
    check_contents(fd, &unfetched);
}

/* Objects answer to the values the client holds; a new one gets none of them. */
static void restored_objects_resolve(int fd)
{
    th_say("texture and surface objects answer to the client's values");
    flyt_req_tex_create t = tex_on(0, arrays[4].id);
    uint64_t fresh = make(fd, FLYT_OP_TEX_CREATE, &t, sizeof t, "a new texture on a restored array");
    uint64_t held[] = {tex_array, tex_mip, tex_lin, tex_pitch, surf};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++)
        CHECK_NE(fresh, held[i], "the new value %llu is none the client holds",
                 (unsigned long long)fresh);
    CHECK_EQ(destroy(fd, FLYT_OP_TEX_DESTROY, fresh), T_SUCCESS, "the new texture destroyed");
    CHECK_EQ(destroy(fd, FLYT_OP_TEX_DESTROY, surf), T_INVALID_HANDLE,
             "a surface value is no texture");
    CHECK_EQ(destroy(fd, FLYT_OP_TEX_DESTROY, tex_lin), T_SUCCESS, "a restored texture destroyed");
    CHECK_EQ(destroy(fd, FLYT_OP_TEX_DESTROY, tex_lin), T_INVALID_HANDLE, "then gone");
}

static void restored_objects_destroyed(int fd)
{
    th_say("every object is destroyed by the client's ids and values");
    CHECK_EQ(destroy(fd, FLYT_OP_SURF_DESTROY, surf), T_SUCCESS, "surface");
    CHECK_EQ(destroy(fd, FLYT_OP_TEX_DESTROY, tex_array), T_SUCCESS, "texture on an array");
    CHECK_EQ(destroy(fd, FLYT_OP_TEX_DESTROY, tex_mip), T_SUCCESS, "texture on a mipmapped array");
    CHECK_EQ(destroy(fd, FLYT_OP_TEX_DESTROY, tex_pitch), T_SUCCESS, "texture on pitch2D memory");
    for (size_t i = 0; i < NARRAYS; i++)
        if (arrays[i].level < 0)
            CHECK_EQ(destroy(fd, FLYT_OP_ARRAY_DESTROY, arrays[i].id), T_SUCCESS, "%s", arrays[i].what);
    for (size_t m = 0; m < 2; m++)
        CHECK_EQ(destroy(fd, FLYT_OP_MIPMAP_DESTROY, mipmaps[m].id), T_SUCCESS, "mipmapped array");
    CHECK_EQ(destroy(fd, FLYT_OP_MIPMAP_DESTROY, mipmaps[0].id), T_INVALID_HANDLE, "then gone");
}

struct seen {
    int arrays, mipmaps, texs, surfs;
};

static void section_matches(uint32_t type, const unsigned char *body, uint64_t len, void *arg)
{
    struct seen *n = arg;
    (void)len;
    if (type == FLYT_SS_ARRAY) {
        struct flyt_state_array r;
        memcpy(&r, body, sizeof r);
        for (size_t i = 0; i < NARRAYS; i++)
            if (arrays[i].id == r.id) {
                n->arrays++;
                CHECK_MEM_EQ(&r.desc, &arrays[i].desc, sizeof r.desc, "descriptor of %s", arrays[i].what);
                CHECK_EQ(r.mipmap, arrays[i].level < 0 ? 0 : mipmaps[arrays[i].mipmap].id,
                         "%s: its mipmapped array", arrays[i].what);
            }
    } else if (type == FLYT_SS_MIPMAP) {
        struct flyt_state_mipmap r;
        memcpy(&r, body, sizeof r);
        for (size_t m = 0; m < 2; m++)
            if (mipmaps[m].id == r.id) {
                n->mipmaps++;
                CHECK_MEM_EQ(&r.desc, &mipmaps[m].desc, sizeof r.desc, "mipmap descriptor");
            }
    } else if (type == FLYT_SS_TEXOBJ) {
        struct flyt_state_texobj r;
        memcpy(&r, body, sizeof r);
        n->texs++;
        if (r.value == tex_pitch)
            CHECK(r.desc.res.type == 3 && r.desc.res.pitch == 64 && r.desc.res.handle == pitch_dev,
                  "the pitch2D texture's resource");
        if (r.value == tex_mip)
            CHECK(r.desc.view.present == 1 && r.desc.view.last_mip == 3 &&
                      r.desc.tex.max_mipmap_level_clamp == 3.0f,
                  "the mipmapped texture's view and texture descriptors");
    } else if (type == FLYT_SS_SURFOBJ) {
        struct flyt_state_surfobj r;
        memcpy(&r, body, sizeof r);
        n->surfs++;
        CHECK(r.value == surf && r.res.handle == arrays[1].id, "the surface's value and array");
    }
}

/* The state file's ARRAY, MIPMAP, TEXOBJ and SURFOBJ sections name the
 * client's ids and values with the descriptors they were made with. */
static void state_sections_match(void)
{
    th_say("the state's sections hold the descriptors, ids and values");
    struct seen n = {0};
    CHECK(ckpt_sections(state_path, section_matches, &n) >= 8u, "format version 8 or later");
    CHECK_EQ(n.arrays, (int)NARRAYS, "every array has its section");
    CHECK_EQ(n.mipmaps, 2, "every mipmapped array has its section");
    CHECK_EQ(n.texs, 4, "four textures");
    CHECK_EQ(n.surfs, 1, "one surface");
}

int main(int argc, char **argv)
{
    const char *bin;
    int fd = th_ckpt_main(argc, argv, "arrst", &bin, dir, status_path, state_path);
    build_session(fd);
    th_say("checkpoint");
    char error[256];
    CHECK_EQ(checkpoint(state_path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    check_contents(fd, &arrays[2]);
    close(fd);
    state_sections_match();
    th_server_stop();

    th_say("flyt-server --restore");
    th_ckpt_restore(bin, status_path, state_path);
    fd = th_ckpt_resume("restored session");
    restored_session_matches(fd);
    restored_objects_resolve(fd);
    th_say("the restored session checkpoints again");
    CHECK_EQ(checkpoint(state_path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    close(fd);
    CHECK(th_server_log_clean(), "no session crashed");
    th_server_stop();

    th_say("and restores again");
    th_ckpt_restore(bin, status_path, state_path);
    fd = th_ckpt_resume("twice restored session");
    for (size_t i = 0; i < NARRAYS; i++)
        check_contents(fd, &arrays[i]);
    CHECK_EQ(destroy(fd, FLYT_OP_TEX_DESTROY, tex_lin), T_INVALID_HANDLE,
             "the texture destroyed before stays gone");
    restored_objects_destroyed(fd);
    th_post(fd, FLYT_OP_GOODBYE, NULL, 0, NULL, 0);
    close(fd);
    CHECK(th_server_log_clean(), "no session crashed");
    th_server_stop();

    th_ckpt_end(dir, status_path, state_path);
    printf("test_server_array_state: all checks passed\n");
    return 0;
}

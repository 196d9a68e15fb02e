/*
 * Checkpoint and restore of a session's VMM objects (docs/state-format.md,
 * VRANGE and VMEM) with the host backend: reservations (one at a hint),
 * physical allocations mapped with their access, one whose handle was
 * released (alive through its mapping), one retained twice, one unmapped
 * holding data; a new flyt-server --restore FILE serves the same
 * addresses, handle ids and contents, and the handles work on. An
 * allocation retained and then unmapped is refused, naming it.
 *
 * usage: test_server_vmm_state PATH-TO-flyt-server
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ckpt_request.h"
#include "harness.h"
#include "state_format.h"

#define RW 3u /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
#define RO 1u /* CU_MEM_ACCESS_FLAGS_PROT_READ */

static char dir[64], status_path[128], state_path[128];
static uint64_t gran;
static uint64_t va_main, va_hint, hint_at;  /* reservations: 4 granules; 2 at a hint */
static uint64_t h_mapped, h_kept;           /* mapped at va_main (retained: 2 refs); unmapped */

static const flyt_vmm_prop device_prop = {.type = 1 /* PINNED */, .location_type = 1 /* DEVICE */};

static unsigned char pattern(uint64_t addr, uint64_t i)
{
    return (unsigned char)(i * 29u + (addr >> 21) * 13u + (i >> 12));
}

static int reserve(int fd, uint64_t size, uint64_t hint, uint64_t *va)
{
    flyt_req_vmm_reserve r = {size, 0, hint, 0};
    flyt_rep_u64 rep = {0};
    int rc = th_call_rep(fd, FLYT_OP_VMM_RESERVE, &r, sizeof r, NULL, 0, &rep, sizeof rep);
    *va = rep.value;
    return rc;
}

static int create(int fd, uint64_t size, uint64_t *handle)
{
    flyt_req_vmm_create r = {size, 0, device_prop};
    flyt_rep_u64_pair rep = {0}; /* id, compression granted */
    int rc = th_call_rep(fd, FLYT_OP_VMM_CREATE, &r, sizeof r, NULL, 0, &rep, sizeof rep);
    *handle = rep.a;
    return rc;
}

static int map(int fd, uint64_t va, uint64_t size, uint64_t offset, uint64_t handle)
{
    flyt_req_vmm_map r = {va, size, offset, handle, 0};
    return th_call(fd, FLYT_OP_VMM_MAP, &r, sizeof r, NULL, 0, NULL);
}

static int range_op(int fd, uint16_t op, uint64_t va, uint64_t size)
{
    flyt_req_vmm_range r = {va, size};
    return th_call(fd, op, &r, sizeof r, NULL, 0, NULL);
}

static int set_access(int fd, uint64_t va, uint64_t size, uint32_t flags)
{
    flyt_req_vmm_access r = {va, size, 1, 0};
    flyt_vmm_access d = {1 /* DEVICE */, 0, flags, 0};
    return th_call(fd, FLYT_OP_VMM_SET_ACCESS, &r, sizeof r, &d, sizeof d, NULL);
}

static int handle_op(int fd, uint16_t op, uint64_t handle, uint64_t *out)
{
    flyt_req_handle r = {handle};
    flyt_rep_u64 rep = {0};
    int rc = th_call_rep(fd, op, &r, sizeof r, NULL, 0, &rep, sizeof rep);
    if (out)
        *out = rep.value;
    return rc;
}

static void fill(int fd, uint64_t va, uint64_t size)
{
    unsigned char *p = malloc(size);
    for (uint64_t i = 0; i < size; i++)
        p[i] = pattern(va, i);
    CHECK_EQ(th_htod(fd, va, p, size), T_SUCCESS, "pattern at 0x%llx", (unsigned long long)va);
    free(p);
}

/* The pattern that was written at written is read at va. */
static void check_pattern(int fd, uint64_t va, uint64_t written, uint64_t size, const char *what)
{
    unsigned char *got = malloc(size), *want = malloc(size);
    for (uint64_t i = 0; i < size; i++)
        want[i] = pattern(written, i);
    int had;
    CHECK_EQ(th_dtoh(fd, va, size, got, &had), T_SUCCESS, "read %s", what);
    CHECK_MEM_EQ(got, want, size, "%s", what);
    free(got);
    free(want);
}

static int checkpoint(const char *path, char *error, size_t errlen)
{
    int result = ckpt_wait(status_path, ckpt_post(status_path, path, 0), 5000, error, errlen);
    CHECK_NE(result, -1, "the checkpoint was answered");
    return result;
}

static void build_session(int fd)
{
    th_say("reservations, physical allocations, mappings, access and contents");
    flyt_rep_u64 g = {0};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_VMM_GRANULARITY, &device_prop, sizeof device_prop, NULL, 0, &g,
                         sizeof g), T_SUCCESS, "granularity");
    gran = g.value;
    CHECK_EQ(reserve(fd, 4 * gran, 0, &va_main), T_SUCCESS, "a reservation anywhere");
    hint_at = va_main + 16 * gran;
    CHECK_EQ(reserve(fd, 2 * gran, hint_at, &va_hint), T_SUCCESS, "a reservation at a hint");
    CHECK_EQ(va_hint, hint_at, "a free hint is granted");

    CHECK_EQ(create(fd, 2 * gran, &h_mapped), T_SUCCESS, "an allocation of 2 granules");
    CHECK_EQ(map(fd, va_main, 2 * gran, 0, h_mapped), T_SUCCESS, "mapped at the reservation");
    CHECK_EQ(set_access(fd, va_main, 2 * gran, RW), T_SUCCESS, "read-write");
    fill(fd, va_main, 2 * gran);
    uint64_t again;
    CHECK_EQ(handle_op(fd, FLYT_OP_VMM_RETAIN, va_main + 4096, &again), T_SUCCESS, "retained");
    CHECK_EQ(again, h_mapped, "retain names the same handle");

    uint64_t h_released;
    CHECK_EQ(create(fd, 2 * gran, &h_released), T_SUCCESS, "an allocation mapped at an offset");
    CHECK_EQ(map(fd, va_main + 2 * gran, gran, gran, h_released), T_SUCCESS, "its second granule");
    CHECK_EQ(set_access(fd, va_main + 2 * gran, gran, RW), T_SUCCESS, "read-write");
    fill(fd, va_main + 2 * gran, gran);
    CHECK_EQ(set_access(fd, va_main + 2 * gran, gran, RO), T_SUCCESS, "then read-only");
    CHECK_EQ(handle_op(fd, FLYT_OP_VMM_RELEASE, h_released, NULL), T_SUCCESS,
             "its handle released: the mapping keeps it");

    CHECK_EQ(create(fd, gran, &h_kept), T_SUCCESS, "an allocation to be unmapped");
    CHECK_EQ(map(fd, va_hint, gran, 0, h_kept), T_SUCCESS, "mapped for a while");
    CHECK_EQ(set_access(fd, va_hint, gran, RW), T_SUCCESS, "read-write");
    fill(fd, va_hint, gran);
    CHECK_EQ(range_op(fd, FLYT_OP_VMM_UNMAP, va_hint, gran), T_SUCCESS, "unmapped, data kept");
}

/* Retained, then unmapped: its extra reference cannot be taken again. */
static void refused_retained_unmapped(int fd)
{
    th_say("an allocation retained and then unmapped is refused, naming it");
    uint64_t h, again;
    CHECK_EQ(create(fd, gran, &h), T_SUCCESS, "create");
    CHECK_EQ(map(fd, va_hint + gran, gran, 0, h), T_SUCCESS, "map");
    CHECK_EQ(handle_op(fd, FLYT_OP_VMM_RETAIN, va_hint + gran, &again), T_SUCCESS, "retain");
    CHECK_EQ(range_op(fd, FLYT_OP_VMM_UNMAP, va_hint + gran, gran), T_SUCCESS, "unmap");
    char error[256], bad[160];
    snprintf(bad, sizeof bad, "%s/never.state", dir);
    CHECK_EQ(checkpoint(bad, error, sizeof error), T_NOT_SUPPORTED, "refused");
    CHECK(strstr(error, "retained") != NULL, "the error says why: %s", error);
    CHECK_EQ(handle_op(fd, FLYT_OP_VMM_RELEASE, h, NULL), T_SUCCESS, "release");
    CHECK_EQ(handle_op(fd, FLYT_OP_VMM_RELEASE, h, NULL), T_SUCCESS, "release again");
}

static void restored_session_matches(void)
{
    th_say("the restored session: same addresses, handles and contents");
    int fd = th_ckpt_resume("restored session");
    check_pattern(fd, va_main, va_main, 2 * gran, "the mapped allocation");
    unsigned char byte;
    int had;
    CHECK_EQ(th_dtoh(fd, va_main + 2 * gran, 1, &byte, &had), T_INVALID_VALUE,
             "the released one's mapping is read-only still (the host backend copies only RW)");
    CHECK_EQ(set_access(fd, va_main + 2 * gran, gran, RW), T_SUCCESS, "made read-write");
    check_pattern(fd, va_main + 2 * gran, va_main + 2 * gran, gran, "the released one's mapping");
    CHECK_EQ(map(fd, va_hint, gran, 0, h_kept), T_SUCCESS, "the unmapped one's handle maps again");
    CHECK_EQ(set_access(fd, va_hint, gran, RW), T_SUCCESS, "read-write");
    check_pattern(fd, va_hint, va_hint, gran, "the unmapped one's contents");
    fill(fd, va_main, 4096);
    check_pattern(fd, va_main, va_main, 4096, "a restored mapping takes writes");
    uint64_t again;
    CHECK_EQ(handle_op(fd, FLYT_OP_VMM_RETAIN, va_main, &again), T_SUCCESS, "retain");
    CHECK_EQ(again, h_mapped, "the same handle id");
    for (int i = 0; i < 3; i++)
        CHECK_EQ(handle_op(fd, FLYT_OP_VMM_RELEASE, h_mapped, NULL), T_SUCCESS, "release %d of 3", i);
    CHECK_EQ(handle_op(fd, FLYT_OP_VMM_RELEASE, h_mapped, NULL), T_INVALID_VALUE, "then gone");
    CHECK_EQ(handle_op(fd, FLYT_OP_VMM_RELEASE, h_kept, NULL), T_SUCCESS, "release the other");
    CHECK_EQ(range_op(fd, FLYT_OP_VMM_FREE, va_main, 4 * gran), T_INVALID_VALUE,
             "a reservation with mappings does not free");
    CHECK_EQ(range_op(fd, FLYT_OP_VMM_UNMAP, va_main, 3 * gran), T_SUCCESS, "unmap both");
    CHECK_EQ(range_op(fd, FLYT_OP_VMM_UNMAP, va_hint, gran), T_SUCCESS, "unmap the third");
    CHECK_EQ(range_op(fd, FLYT_OP_VMM_FREE, va_main, 4 * gran), T_SUCCESS, "free a reservation");
    CHECK_EQ(range_op(fd, FLYT_OP_VMM_FREE, va_hint, 2 * gran), T_SUCCESS, "and the other");
    th_post(fd, FLYT_OP_GOODBYE, NULL, 0, NULL, 0);
    close(fd);
}

int main(int argc, char **argv)
{
    const char *bin;
    int fd = th_ckpt_main(argc, argv, "vmmst", &bin, dir, status_path, state_path);
    build_session(fd);
    refused_retained_unmapped(fd);
    th_say("checkpoint");
    char error[256];
    CHECK_EQ(checkpoint(state_path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    check_pattern(fd, va_main, va_main, 4096, "the session carries on");
    close(fd);
    th_server_stop();

    th_say("flyt-server --restore");
    th_ckpt_restore(bin, status_path, state_path);
    restored_session_matches();
    CHECK(th_server_log_clean(), "no session crashed");
    th_server_stop();

    th_ckpt_end(dir, status_path, state_path);
    printf("test_server_vmm_state: all checks passed\n");
    return 0;
}

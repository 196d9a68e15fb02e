/* flyt_vm_quota, one memory quota for a VM's servers: processes racing to
 * the limit never pass it together, a reaped session's and an ended server's
 * bytes are the VM's again, and a page left by an earlier node manager is taken
 * over with the slots of servers that no longer run freed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "flyt_vm_quota.h"

#define MiB (1024ull * 1024)
#define RACERS 8

static char path[64];

/* A session of server: charges 1 MiB at a time until refused; exits with how many. */
static void racer(struct flyt_vm_quota *q, pid_t server, int go_fd)
{
    char go;
    int slot = flyt_vmq_claim(q, server, getpid());
    if (slot < 0 || read(go_fd, &go, 1) != 1)
        _exit(255);
    int got = 0;
    while (flyt_vmq_charge(q, slot, MiB) == 0)
        got++;
    _exit(got > 254 ? 254 : got);
}

static void test_race(void)
{
    char err[128] = "";
    struct flyt_vm_quota *q = flyt_vmq_create(path, 64 * MiB, err, sizeof err);
    CHECK(q, "a page of 64 MiB at %s: %s", path, err);
    if (!q)
        return;
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "the page is 0600");
    int go[2];
    CHECK_EQ(pipe(go), 0, "pipe");
    pid_t kids[RACERS];
    for (int i = 0; i < RACERS; i++)
        if ((kids[i] = fork()) == 0)
            racer(q, getppid(), go[0]);
    usleep(100 * 1000);
    char start[RACERS];
    memset(start, 'g', sizeof start);
    CHECK_EQ(write(go[1], start, sizeof start), (ssize_t)sizeof start, "the racers start together");
    int total = 0;
    for (int i = 0; i < RACERS; i++) {
        int status = 0;
        waitpid(kids[i], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) < 255, "racer %d ran", i);
        total += WEXITSTATUS(status);
    }
    CHECK_LE(total, 64, "%d racers charged %d MiB of the VM's 64 MiB: never more", RACERS, total);
    CHECK_GE(total, 64 - RACERS, "and the quota was used (%d MiB)", total);
    CHECK_EQ(flyt_vmq_used(q), (uint64_t)total * MiB, "the page holds what they charged");
    /* the racers' server "ended": its slots are freed, the bytes the VM's again */
    flyt_vmq_release_server(q, getpid());
    CHECK_EQ(flyt_vmq_used(q), 0, "an ended server's bytes are given back");
    close(go[0]);
    close(go[1]);
    flyt_vmq_unmap(q);
}

static void test_reaped_session(void)
{
    char err[128] = "";
    struct flyt_vm_quota *nm = flyt_vmq_create(path, 10 * MiB, err, sizeof err);
    struct flyt_vm_quota *a = flyt_vmq_open(path, err, sizeof err);
    CHECK(nm && a, "the node manager's and a server's mapping: %s", err);
    if (!nm || !a)
        return;
    int s1 = flyt_vmq_claim(a, 100, 101), s2 = flyt_vmq_claim(a, 200, 201);
    CHECK(s1 >= 0 && s2 >= 0 && s1 != s2, "two sessions of two servers take two slots");
    CHECK_EQ(flyt_vmq_charge(a, s1, 8 * MiB), 0, "the first takes 8 MiB");
    CHECK_EQ(flyt_vmq_charge(a, s2, 4 * MiB), -1, "the second cannot take 4 MiB more");
    CHECK_EQ(flyt_vmq_charge(a, s2, 2 * MiB), 0, "but the 2 MiB left");
    CHECK_EQ(flyt_vmq_used(nm), 10 * MiB, "the node manager sees the VM's 10 MiB");
    flyt_vmq_release(a, 100, 101); /* its server reaped the first session */
    CHECK_EQ(flyt_vmq_charge(a, s2, 8 * MiB), 0, "once it is reaped its 8 MiB are the second's");
    flyt_vmq_set_quota(nm, 20 * MiB);
    CHECK_EQ(flyt_vmq_quota(a), 20 * MiB, "a resize is seen by the server at once");
    CHECK_EQ(flyt_vmq_charge(a, s2, 10 * MiB), 0, "and allocations follow it");
    flyt_vmq_uncharge(a, s2, 20 * MiB);
    CHECK_EQ(flyt_vmq_used(nm), 0, "freed: nothing held");
    /* a page left with a slot of a server that no longer runs (pid 200 is no flyt-server) */
    CHECK_EQ(flyt_vmq_charge(a, -1, 1), -1, "a charge without a slot is refused");
    CHECK_EQ(flyt_vmq_charge(a, s2, 5 * MiB), 0, "5 MiB held by a server that will be gone");
    flyt_vmq_unmap(a);
    flyt_vmq_unmap(nm);
    nm = flyt_vmq_create(path, 20 * MiB, err, sizeof err);
    CHECK(nm, "a later node manager takes the page over: %s", err);
    if (nm)
        CHECK_EQ(flyt_vmq_used(nm), 0, "with the slots of servers that no longer run freed");
    flyt_vmq_unmap(nm);
}

static void test_not_a_page(void)
{
    char err[160];
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("not a page", f);
        fclose(f);
    }
    CHECK(!flyt_vmq_open(path, err, sizeof err), "a server refuses a file that is no page");
    CHECK(strstr(err, "not a VM quota page"), "and says so: %s", err);
}

int main(void)
{
    snprintf(path, sizeof path, "/tmp/flyt-vmq-test-%d.quota", (int)getpid());
    unlink(path);
    test_race();
    unlink(path);
    test_reaped_session();
    test_not_a_page();
    unlink(path);
    return check_done();
}

/*
 * Issue 8, attack 1: same-machine pageable copies must never reach memory
 * the connected client could not reach itself. The attack: a client
 * (nobody) connects, forks a child that keeps the socket, and exec's a
 * setuid-root program; the child then asks the server (root) to copy from
 * and into that program's memory by address. Before the fix the server read
 * it (and told mapped from unmapped addresses by the error); now both
 * copies answer CUDA_ERROR_NOT_PERMITTED. The client's own memory is still
 * copied. Needs root (two users, a setuid file): reports SKIP otherwise.
 * usage: test_server_peer FLYT_SERVER_BINARY
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534
#define T_NOT_PERMITTED 800

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC), out = -1;
    if (in >= 0)
        out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    char buf[65536];
    ssize_t n = 0;
    while (out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            n = -1;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return in >= 0 && out >= 0 && n == 0 ? 0 : -1;
}

/* The start of the first mapping of pid, 0 when unknown. */
static unsigned long first_mapping(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned long start = 0;
    if (f != NULL) {
        if (fscanf(f, "%lx-", &start) != 1)
            start = 0;
        fclose(f);
    }
    return start;
}

/* Whether pid now runs the program at exe. */
static int runs(pid_t pid, const char *exe)
{
    char path[64], target[4096];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0)
        return 0;
    target[n] = '\0';
    return strcmp(target, exe) == 0;
}

static int peer_copy(int fd, uint16_t op, uint64_t dst, uint64_t src)
{
    flyt_req_memcpy_peer r = {.dst = dst, .src = src, .size = 16};
    return th_call(fd, op, &r, sizeof r, NULL, 0, NULL);
}

/* The attacker: nobody, connected; reports its own copy, forks the child
 * that keeps the socket, then becomes the setuid program. */
static void attacker(const char *suid, int to_child, int results)
{
    if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
        _exit(3);
    /* as a process started by that user would be (a change of user made it
     * undumpable, which alone would keep the server out) */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    int fd = th_connect();
    uint64_t dev = 0;
    if (fd < 0 || th_hello(fd) != 0 || th_alloc(fd, 4096, &dev) != 0)
        _exit(4);
    char mine[16] = "the client's own";
    int own = peer_copy(fd, FLYT_OP_MEMCPY_HTOD_PEER, dev, (uint64_t)(uintptr_t)mine);
    if (write(results, &own, sizeof own) != sizeof own)
        _exit(5);
    if (fork() == 0) {
        unsigned long addr = 0;
        if (read(to_child, &addr, sizeof addr) != sizeof addr)
            _exit(6);
        int got[2] = {peer_copy(fd, FLYT_OP_MEMCPY_HTOD_PEER, dev, addr),
                      peer_copy(fd, FLYT_OP_MEMCPY_DTOH_PEER, addr, dev)};
        _exit(write(results, got, sizeof got) == sizeof got ? 0 : 7);
    }
    close(fd);
    execl(suid, "suid-sleep", "30", (char *)NULL);
    _exit(127);
}

static pid_t attacker_pid;

/* The attacker's processes (it leads its own group) go when the test ends,
 * passed or not. */
static void stop_attacker(void)
{
    if (attacker_pid > 0)
        kill(-attacker_pid, SIGKILL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FLYT_SERVER_BINARY\n", argv[0]);
        return 2;
    }
    if (geteuid() != 0)
        check_skip("the attack needs two users and a setuid file (run as root)");
    th_watchdog(90);
    th_server_start(argv[1], NULL);
    char suid[4096];
    snprintf(suid, sizeof suid, "%s/suid-sleep", th_temp_dir());
    struct statvfs fs;
    if (statvfs(th_temp_dir(), &fs) != 0 || (fs.f_flag & ST_NOSUID)) {
        th_passed();
        check_skip("the temporary directory is mounted nosuid");
    }
    CHECK_EQ(chmod(th_temp_dir(), 0755), 0, "the socket is open to the unprivileged client");
    CHECK_EQ(chmod(th_socket_path(), 0666), 0, "the socket is open to the unprivileged client");
    CHECK_EQ(copy_file("/bin/sleep", suid), 0, "a setuid-root program to exec");
    CHECK_EQ(chown(suid, 0, 0), 0, "a setuid-root program to exec");
    CHECK_EQ(chmod(suid, 04755), 0, "a setuid-root program to exec");

    int to_child[2], results[2];
    if (pipe(to_child) != 0 || pipe(results) != 0)
        return 1;
    pid_t a = fork();
    if (a == 0) {
        setpgid(0, 0);
        attacker(suid, to_child[0], results[1]);
    }
    setpgid(a, a);
    attacker_pid = a;
    atexit(stop_attacker);
    int own = -1, got[2] = {-1, -1};
    CHECK_EQ(read(results[0], &own, sizeof own), sizeof own,
             "the client's own pageable memory is copied (result %d)", own);
    CHECK_EQ(own, 0, "the client's own pageable memory is copied (result %d)", own);
    for (int i = 0; i < 500 && !runs(a, suid); i++)
        usleep(10000);
    CHECK(runs(a, suid), "the client's process now runs the setuid program");
    unsigned long addr = first_mapping(a);
    CHECK_NE(addr, 0, "its first mapping is at %#lx", addr);
    CHECK_EQ(write(to_child[1], &addr, sizeof addr), sizeof addr, "the child gets the address");
    CHECK_EQ(read(results[0], got, sizeof got), sizeof got, "the child's two copies answered");
    CHECK_EQ(got[0], T_NOT_PERMITTED,
             "reading the setuid program's memory is not permitted (result %d)", got[0]);
    CHECK_EQ(got[1], T_NOT_PERMITTED,
             "writing it is not permitted, and says nothing of the mapping (result %d)", got[1]);
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    CHECK(th_server_works(), "the server still serves");
    unlink(suid);
    th_passed();
    return 0;
}

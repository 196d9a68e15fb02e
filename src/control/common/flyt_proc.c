/* Processes by pid, told apart from later holders of the pid: see flyt_proc.h. */
#include "flyt_proc.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

int flyt_proc_start_time(pid_t pid, unsigned long long *start, int *ended)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold anything but ends here */
    if (p == NULL || p[1] != ' ')
        return -1;
    p += 2;
    char state = *p;
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    if (p == NULL)
        return -1;
    *start = strtoull(p, NULL, 10);
    *ended = state == 'Z' || state == 'X' || state == 'x';
    return 0;
}

int flyt_pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0); /* pidfds are close-on-exec */
}

int flyt_pidfd_signal(int pidfd, int sig)
{
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

int flyt_pidfd_exited(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

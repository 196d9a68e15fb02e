/*
 * Other processes, by pid, without mistaking a reused pid for the process meant:
 * its start time (field 22 of /proc/PID/stat, clock ticks since boot) tells two
 * processes of one pid apart, and a pidfd (Linux 5.3+) names one process for good
 * (signals through it never reach a later holder of the pid; it polls readable once
 * the process has exited, reaped or not, child or not).
 */
#ifndef FLYT_PROC_H
#define FLYT_PROC_H

#include <sys/types.h>

/* pid's start time and whether it has ended (gone, zombie or dead). 0, or -1 when
 * there is no such process. */
int flyt_proc_start_time(pid_t pid, unsigned long long *start, int *ended);
/* A pidfd for pid (close-on-exec), or -1 with errno. */
int flyt_pidfd_open(pid_t pid);
/* sig to the process of pidfd: 0, or -1 with errno (ESRCH: it has exited). */
int flyt_pidfd_signal(int pidfd, int sig);
/* Whether the process of pidfd has exited (polled without waiting). */
int flyt_pidfd_exited(int pidfd);

#endif

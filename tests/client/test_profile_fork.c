/*
 * FLYT_PROFILE=1 in a process that forks: the table printed at exit is each
 * process's own. The parent allocates and frees (its table counts them), then
 * a child that makes no call exits through exit(): it prints no table, rather
 * than a copy of its parent's. Prints the parent's pid for the run script.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    void *p = NULL;
    if (cudaMalloc(&p, 1 << 20) != cudaSuccess || cudaFree(p) != cudaSuccess) {
        fprintf(stderr, "test_profile_fork: cudaMalloc/cudaFree failed\n");
        return 1;
    }
    fflush(NULL);
    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child == 0)
        exit(0); /* runs the atexit handlers, the profile's too */
    int st = 0;
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 1;
    printf("parent %ld\n", (long)getpid());
    return 0;
}

/*
 * FLYT_ASSERT and FLYT_ASSERT_HELD (src/common/flyt_assert.h): each case runs
 * in a child process, which must end by SIGABRT with the failed condition on
 * its stderr where the invariant is broken, and exit 0 where it holds. Only
 * builds with asserts (FLYT_ASSERTS) can show this; others report skipped.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../lib/check.h"
#include "flyt_assert.h"

#ifdef FLYT_ASSERTS

static pthread_mutex_t static_mutex = FLYT_MUTEX_INITIALIZER;
static pthread_mutex_t dynamic_mutex;

/* Runs fn in a child; its stderr lands in err (NUL-terminated). Returns the
 * wait status. */
static int run_child(void (*fn)(void), char *err, size_t errlen)
{
    int pipefd[2];
    CHECK_EQ(pipe(pipefd), 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    CHECK_GE(pid, 0, "fork");
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        fn();
        _exit(0);
    }
    close(pipefd[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < errlen && (n = read(pipefd[0], err + got, errlen - 1 - got)) > 0)
        got += (size_t)n;
    err[got] = '\0';
    close(pipefd[0]);
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid, "waitpid");
    return status;
}

static void expect_abort(const char *what, void (*fn)(void), const char *says)
{
    char err[1024];
    int status = run_child(fn, err, sizeof err);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "%s: aborts", what);
    CHECK(strstr(err, says) != NULL, "%s: stderr names \"%s\" (%s)", what, says, err);
}

static void expect_pass(const char *what, void (*fn)(void))
{
    char err[1024];
    int status = run_child(fn, err, sizeof err);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: passes (%s)", what, err);
}

static void held_static(void)
{
    pthread_mutex_lock(&static_mutex);
    FLYT_ASSERT_HELD(&static_mutex);
    pthread_mutex_unlock(&static_mutex);
}

static void not_held_static(void) { FLYT_ASSERT_HELD(&static_mutex); }

static void held_dynamic(void)
{
    pthread_mutex_lock(&dynamic_mutex);
    FLYT_ASSERT_HELD(&dynamic_mutex);
    pthread_mutex_unlock(&dynamic_mutex);
}

static void not_held_dynamic(void) { FLYT_ASSERT_HELD(&dynamic_mutex); }

/* Another thread holds the mutex for a while: the caller does not. */
static void *hold_briefly(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&dynamic_mutex);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_unlock(&dynamic_mutex);
    return NULL;
}

static void held_by_another(void)
{
    pthread_t t;
    pthread_mutex_lock(&dynamic_mutex); /* so the thread has it before the check */
    pthread_create(&t, NULL, hold_briefly, NULL);
    pthread_mutex_unlock(&dynamic_mutex);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    FLYT_ASSERT_HELD(&dynamic_mutex);
}

static void false_condition(void)
{
    int two = 2;
    FLYT_ASSERT(1 + 1 == two + 1);
}

static void true_condition(void)
{
    int two = 2;
    FLYT_ASSERT(1 + 1 == two);
}

int main(void)
{
    CHECK_EQ(flyt_mutex_init(&dynamic_mutex), 0, "flyt_mutex_init");
    expect_pass("FLYT_ASSERT of a true condition", true_condition);
    expect_abort("FLYT_ASSERT of a false condition", false_condition, "1 + 1 == two + 1");
    expect_pass("held FLYT_MUTEX_INITIALIZER mutex", held_static);
    expect_abort("FLYT_MUTEX_INITIALIZER mutex not held", not_held_static, "thread holds &static_mutex");
    expect_pass("held flyt_mutex_init mutex", held_dynamic);
    expect_abort("flyt_mutex_init mutex not held", not_held_dynamic, "thread holds &dynamic_mutex");
    expect_abort("mutex held by another thread", held_by_another, "thread holds &dynamic_mutex");
    printf("PASS\n");
    return 0;
}

#else

int main(void)
{
    printf("SKIP: asserts are off in this build (Debug, sanitizer and fuzz builds have them)\n");
    return CHECK_SKIP_CODE;
}

#endif

/* Invariants asserted, not only written. FLYT_ASSERT is on in Debug,
 * sanitizer and fuzz builds (FLYT_ASSERTS, set by CMake) and costs nothing
 * elsewhere; a failed assertion names the condition and aborts, so a broken
 * invariant is found where it breaks, not where it is later noticed.
 *
 * Lock ownership: FLYT_ASSERT_HELD(m) checks that the calling thread holds
 * mutex m (every *_locked function starts with it). With asserts on,
 * mutexes made by flyt_mutex_init or FLYT_MUTEX_INITIALIZER are
 * error-checking, whose lock by its own holder fails with EDEADLK at once:
 * that answer proves ownership without a field of our own to keep. */
#ifndef FLYT_ASSERT_H
#define FLYT_ASSERT_H

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef FLYT_ASSERTS
#define FLYT_ASSERT(cond)                                                        \
    ((cond) ? (void)0 : flyt_assert_fail(#cond, __FILE__, __LINE__, __func__))
#define FLYT_ASSERT_HELD(mutex)                                                  \
    (flyt_mutex_held(mutex) ? (void)0                                            \
                            : flyt_assert_fail("thread holds " #mutex, __FILE__, \
                                               __LINE__, __func__))
#define FLYT_MUTEX_INITIALIZER PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP
#else
/* sizeof keeps the condition compiled (no unused variables) but never run */
#define FLYT_ASSERT(cond) ((void)sizeof(!(cond)))
#define FLYT_ASSERT_HELD(mutex) ((void)sizeof(mutex))
#define FLYT_MUTEX_INITIALIZER PTHREAD_MUTEX_INITIALIZER
#endif

static inline void flyt_assert_fail(const char *cond, const char *file, int line,
                                    const char *func)
{
    fprintf(stderr, "flyt: assertion failed: %s (%s:%d, %s)\n", cond, file, line, func);
    fflush(stderr);
    abort();
}

/* Error-checking where asserts are on, the default kind elsewhere. */
static inline int flyt_mutex_init(pthread_mutex_t *mutex)
{
#ifdef FLYT_ASSERTS
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
    int rc = pthread_mutex_init(mutex, &attr);
    pthread_mutexattr_destroy(&attr);
    return rc;
#else
    return pthread_mutex_init(mutex, NULL);
#endif
}

#ifdef FLYT_ASSERTS
/* Only for error-checking mutexes. Held by us: EDEADLK at once. Not held:
 * the lock succeeds (perhaps after another holder lets go), is given back,
 * and the answer is no. */
static inline int flyt_mutex_held(pthread_mutex_t *mutex)
{
    int rc = pthread_mutex_lock(mutex);
    if (rc == EDEADLK)
        return 1;
    if (rc == 0)
        pthread_mutex_unlock(mutex);
    return 0;
}
#endif

#endif

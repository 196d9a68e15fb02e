/*
 * Fatbinaries by content: SHA-256 and the optional on-disk cache
 * (--cache-dir), where an image lives as <hex sha256>.fatbin. The server
 * reads no other file: names come only from the hash, and a file is used
 * only if its size and hash match what the client asked for.
 */
#ifndef FLYT_MODULE_CACHE_H
#define FLYT_MODULE_CACHE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

void flyt_sha256(const void *data, size_t len, uint8_t out[32]);
void flyt_sha256_format(const uint8_t sha[32], char out[65]);

/* The SHA-256 of an image computed on a thread of its own while the caller
 * goes on (with the driver's load of the same image): a cuBLAS start ships
 * ~100 MB, whose hash would otherwise add ~100 ms to the loads. Small images,
 * or no thread to be had, are hashed at begin. data must stay until end. */
struct flyt_sha256_job {
    pthread_t   thread;
    int         threaded;
    const void *data;
    size_t      len;
    uint8_t     sha[32];
};
void flyt_sha256_begin(struct flyt_sha256_job *job, const void *data, size_t len);
/* Waits for the hash and writes it to out. */
void flyt_sha256_end(struct flyt_sha256_job *job, uint8_t out[32]);

/* The cached image of this hash and size, malloc'd; NULL when dir is NULL,
 * the file is absent, or it does not match (a mismatching file is logged). */
void *flyt_cache_load(const char *dir, const uint8_t sha[32], uint64_t size);
/* flyt_cache_load in two halves, so that the hash can be checked beside the
 * driver's load: the file's bytes, not checked yet; then, with their hash
 * got, 0 when they match (the file counts as used), else -1 (logged). */
void *flyt_cache_read(const char *dir, const uint8_t sha[32], uint64_t size);
int   flyt_cache_check(const char *dir, const uint8_t sha[32], const uint8_t got[32]);
/* Stores an image atomically (temporary file, then rename). Failures are
 * logged and otherwise ignored: the cache only saves transfers. With
 * max_bytes (0: no limit) the folder's images stay within it: the least
 * recently used ones go first (a load counts as a use), and an image larger
 * than the limit is not stored. */
void flyt_cache_store(const char *dir, const uint8_t sha[32], const void *data, uint64_t size,
                      uint64_t max_bytes);
/* Removes the image of this hash (one the driver refused: it must not stay). */
void flyt_cache_drop(const char *dir, const uint8_t sha[32]);

#endif

/* SHA-256 through OpenSSL's EVP API, and the fatbinary cache directory. */
#include "module_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "flyt_io.h"
#include "flyt_log.h"

void flyt_sha256(const void *data, size_t len, uint8_t out[32])
{
    unsigned int n = 0;
    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != 32)
        memset(out, 0, 32); /* cannot match a real client hash of real data */
}

/* Below this an image is hashed at once: a thread costs more than it saves. */
#define SHA_THREAD_MIN_BYTES (256u << 10)

static void *sha256_thread(void *arg)
{
    struct flyt_sha256_job *job = arg;
    flyt_sha256(job->data, job->len, job->sha);
    return NULL;
}

void flyt_sha256_begin(struct flyt_sha256_job *job, const void *data, size_t len)
{
    job->data = data;
    job->len = len;
    job->threaded = len >= SHA_THREAD_MIN_BYTES &&
                    pthread_create(&job->thread, NULL, sha256_thread, job) == 0;
    if (!job->threaded)
        flyt_sha256(data, len, job->sha);
}

void flyt_sha256_end(struct flyt_sha256_job *job, uint8_t out[32])
{
    if (job->threaded)
        pthread_join(job->thread, NULL);
    job->threaded = 0;
    memcpy(out, job->sha, 32);
}

void flyt_sha256_format(const uint8_t sha[32], char out[65])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[sha[i] >> 4];
        out[2 * i + 1] = digits[sha[i] & 15];
    }
    out[64] = '\0';
}

static int cache_path(const char *dir, const uint8_t sha[32], char *buf, size_t len)
{
    char hex[65];
    flyt_sha256_format(sha, hex);
    int n = snprintf(buf, len, "%s/%s.fatbin", dir, hex);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

void *flyt_cache_read(const char *dir, const uint8_t sha[32], uint64_t size)
{
    char path[4096];
    if (dir == NULL || size == 0 || cache_path(dir, sha, path, sizeof path) != 0)
        return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *data = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
        flyt_warn("cache file %s is not a regular file of %llu bytes; ignoring it", path,
                  (unsigned long long)size);
    } else if ((data = malloc(size)) == NULL || flyt_read_all(fd, data, size) != 0) {
        flyt_warn("cannot read cache file %s", path);
        free(data);
        data = NULL;
    }
    close(fd);
    return data;
}

int flyt_cache_check(const char *dir, const uint8_t sha[32], const uint8_t got[32])
{
    char path[4096];
    if (cache_path(dir, sha, path, sizeof path) != 0)
        return -1;
    if (memcmp(got, sha, 32) != 0) {
        flyt_warn("cache file %s does not match its hash; ignoring it", path);
        return -1;
    }
    utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW); /* a use: the least recently used go first */
    return 0;
}

void *flyt_cache_load(const char *dir, const uint8_t sha[32], uint64_t size)
{
    void *data = flyt_cache_read(dir, sha, size);
    if (data == NULL)
        return NULL;
    uint8_t got[32];
    flyt_sha256(data, size, got);
    if (flyt_cache_check(dir, sha, got) != 0) {
        free(data);
        return NULL;
    }
    return data;
}

struct cached {
    struct timespec used; /* the file's mtime: its last store or load */
    uint64_t        size;
    char            name[80];
};

static int by_use(const void *x, const void *y)
{
    const struct timespec *a = &((const struct cached *)x)->used, *b = &((const struct cached *)y)->used;
    return a->tv_sec != b->tv_sec ? (a->tv_sec > b->tv_sec) - (a->tv_sec < b->tv_sec)
                                  : (a->tv_nsec > b->tv_nsec) - (a->tv_nsec < b->tv_nsec);
}

static int is_image_name(const char *name)
{
    size_t n = strlen(name);
    return n == 64 + 7 && strcmp(name + 64, ".fatbin") == 0;
}

/* The images of dir (malloc'd, *n of them, *total bytes), least recently used first. */
static struct cached *cache_list(int dfd, size_t *n, uint64_t *total)
{
    DIR *d = fdopendir(dup(dfd));
    struct cached *list = NULL;
    size_t cap = 0;
    *n = 0;
    *total = 0;
    if (d == NULL)
        return NULL;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        struct stat st;
        if (!is_image_name(e->d_name) ||
            fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (*n == cap) {
            struct cached *l = realloc(list, (cap = cap ? cap * 2 : 64) * sizeof *l);
            if (l == NULL)
                break;
            list = l;
        }
        list[*n].used = st.st_mtim;
        list[*n].size = (uint64_t)st.st_size;
        snprintf(list[*n].name, sizeof list[*n].name, "%s", e->d_name);
        *total += (uint64_t)st.st_size;
        ++*n;
    }
    closedir(d);
    if (list)
        qsort(list, *n, sizeof *list, by_use);
    return list;
}

/* Evicts the least recently used images of dir until need more bytes fit in
 * max. Under the folder's lock: sessions of the VM store concurrently. */
static void cache_make_room(const char *dir, uint64_t need, uint64_t max)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    flock(dfd, LOCK_EX);
    size_t n = 0;
    uint64_t total = 0;
    struct cached *list = cache_list(dfd, &n, &total);
    for (size_t i = 0; i < n && total + need > max; i++) {
        if (unlinkat(dfd, list[i].name, 0) == 0) {
            total -= list[i].size;
            flyt_info("image cache %s: evicted %s (%llu bytes), the least recently used, to keep "
                      "within %llu bytes", dir, list[i].name, (unsigned long long)list[i].size,
                      (unsigned long long)max);
        }
    }
    free(list);
    flock(dfd, LOCK_UN);
    close(dfd);
}

void flyt_cache_store(const char *dir, const uint8_t sha[32], const void *data, uint64_t size,
                      uint64_t max_bytes)
{
    char path[4096], tmp[4096 + 32];
    if (dir == NULL || cache_path(dir, sha, path, sizeof path) != 0)
        return;
    if (access(path, F_OK) == 0)
        return; /* another session stored it already */
    if (max_bytes && size > max_bytes) {
        flyt_debug("image of %llu bytes not cached: over the cache's limit of %llu bytes",
                   (unsigned long long)size, (unsigned long long)max_bytes);
        return;
    }
    if (max_bytes)
        cache_make_room(dir, size, max_bytes);
    /* pid-unique temporary name, so concurrent sessions never share one */
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        flyt_warn("cannot create %s: %s", tmp, strerror(errno));
        return;
    }
    int ok = flyt_write_all(fd, data, size) == 0;
    ok = (close(fd) == 0) && ok;
    if (ok && rename(tmp, path) == 0) {
        flyt_debug("cached fatbinary %s (%llu bytes)", path, (unsigned long long)size);
        return;
    }
    flyt_warn("cannot store %s: %s", path, strerror(errno));
    unlink(tmp);
}

void flyt_cache_drop(const char *dir, const uint8_t sha[32])
{
    char path[4096];
    if (dir == NULL || cache_path(dir, sha, path, sizeof path) != 0)
        return;
    if (unlink(path) == 0)
        flyt_info("dropped cached fatbinary %s: the driver refused it", path);
}

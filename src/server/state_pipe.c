/* The state's bytes on their way out, hashed by chunks on threads: see state_pipe.h. */
#include "state_pipe.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "flyt_clock.h"
#include "session.h"
#include "state_format.h"

#define BLOCK       FLYT_STAGING_CHUNK /* one staging buffer: a whole number of chunks */
#define NBLOCKS     6                  /* of the backend's 8 staging buffers */
#define MAX_HASHERS 8
#define CPB         (BLOCK / FLYT_STATE_CHUNK)
_Static_assert(BLOCK % FLYT_STATE_CHUNK == 0, "a block holds whole chunks");

typedef unsigned char digest[32];

static int hashers(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_HASHERS ? MAX_HASHERS : (int)n;
}

static int sha256(const void *p, size_t n, digest out)
{
    unsigned len = 0;
    return EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) == 1 && len == 32 ? 0 : -1;
}

/* The trailer over the chunks' digests: the body's length and the chunk size
 * are in it, so a file cut or re-chunked cannot keep it. */
static int root_of(const digest *d, uint64_t nchunks, uint64_t body_len, unsigned char root[32])
{
    unsigned char head[24];
    uint64_t chunk = FLYT_STATE_CHUNK;
    memcpy(head, FLYT_STATE_ROOT_TAG, 8);
    memcpy(head + 8, &body_len, 8);
    memcpy(head + 16, &chunk, 8);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned len = 0;
    int ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 &&
             EVP_DigestUpdate(md, head, sizeof head) == 1 &&
             (nchunks == 0 || EVP_DigestUpdate(md, d, nchunks * sizeof *d) == 1) &&
             EVP_DigestFinal_ex(md, root, &len) == 1 && len == 32;
    EVP_MD_CTX_free(md);
    return ok ? 0 : -1;
}

int flyt_spawn_unsignalled(pthread_t *th, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(th, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* ---- verifying: the root of a whole body ---- */

struct root_job {
    const unsigned char *body;
    size_t               len;
    uint64_t             nchunks, next; /* next: claimed atomically */
    digest              *d;
    uint64_t             ns;            /* summed, atomically */
    int                  failed;
};

static void *root_worker(void *arg)
{
    struct root_job *j = arg;
    uint64_t t0 = flyt_mono_ns();
    for (uint64_t c; (c = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->nchunks;) {
        size_t off = c * FLYT_STATE_CHUNK, n = j->len - off < FLYT_STATE_CHUNK ? j->len - off
                                                                               : FLYT_STATE_CHUNK;
        if (sha256(j->body + off, n, j->d[c]) != 0)
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    }
    __atomic_fetch_add(&j->ns, flyt_mono_ns() - t0, __ATOMIC_RELAXED);
    return NULL;
}

int flyt_state_root(const unsigned char *body, size_t len, unsigned char root[32], uint64_t *hash_ns)
{
    struct root_job j = {.body = body, .len = len,
                         .nchunks = (len + FLYT_STATE_CHUNK - 1) / FLYT_STATE_CHUNK};
    j.d = malloc((j.nchunks ? j.nchunks : 1) * sizeof *j.d);
    if (j.d == NULL)
        return -1;
    pthread_t th[MAX_HASHERS];
    int n = 0, want = j.nchunks < (uint64_t)hashers() ? (int)j.nchunks : hashers();
    while (n < want - 1 && flyt_spawn_unsignalled(&th[n], root_worker, &j) == 0)
        n++;
    root_worker(&j); /* this thread too */
    while (n > 0)
        pthread_join(th[--n], NULL);
    int rc = j.failed ? -1 : root_of(j.d, j.nchunks, len, root);
    free(j.d);
    *hash_ns = j.ns;
    return rc;
}

/* ---- writing ---- */

struct span {
    size_t off, len;
};

struct block {
    unsigned char *mem;
    int            staged;  /* a staging buffer of the backend (else malloc'd) */
    size_t         len;     /* published: its bytes */
    int            pending; /* chunks to hash and outputs to write it to */
    struct span   *unsent;  /* ranges the socket skips (the receiver holds them) */
    int            nunsent, cap_unsent;
    int            file_left, file_busy; /* the file has not taken it; is writing it */
};

/* A block the file had not written yet when its buffer was needed again: a streamed
 * state goes on to the socket while the (fallback) file lags behind. */
struct fcopy {
    struct fcopy  *next;
    uint64_t       blockno;
    size_t         len;
    unsigned char  mem[];
};

enum { OUT_FILE, OUT_SOCK };

struct flyt_swriter {
    flyt_backend   *b;
    int             fd, sock;
    uint64_t       *sent;
    struct block    blk[NBLOCKS];
    size_t          cur_len;       /* bytes in the block being filled (number nfilled) */
    uint64_t        total;         /* bytes put */
    uint64_t        unsent;        /* of them, bytes the socket skips */
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    /* under mu */
    uint64_t        nfilled;       /* blocks published */
    uint64_t        chunks_avail;  /* chunks in them */
    uint64_t        next_chunk;    /* the next to hash */
    digest         *d;
    size_t          cap_d;
    uint64_t        next_out[2];   /* the next block for each output */
    uint64_t        out_bytes[2];
    struct fcopy   *copies, *copies_tail; /* in block order */
    unsigned char  *detached;   /* a buffer the file is writing, replaced in its block */
    int             detached_staged;
    uint64_t        copy_bytes, copy_max;
    int             stop;
    int             failed, failed_sock;
    uint64_t        hash_ns, write_ns, send_ns, stall_ns, file_tail_ns;
    pthread_t       th[MAX_HASHERS + 2];
    int             nth, nhash;
};

/* The first output error sticks; read without the lock by the filling thread. */
static int failed(const struct flyt_swriter *w)
{
    return __atomic_load_n(&w->failed, __ATOMIC_ACQUIRE);
}

static void set_failed(struct flyt_swriter *w, int err, int on_sock)
{
    if (err && !failed(w)) {
        w->failed_sock = on_sock;
        __atomic_store_n(&w->failed, err, __ATOMIC_RELEASE);
    }
}

static int write_full(int fd, int is_sock, const void *p, size_t n)
{
    for (size_t off = 0; off < n;) {
        ssize_t k = is_sock ? send(fd, (const char *)p + off, n - off, MSG_NOSIGNAL)
                            : write(fd, (const char *)p + off, n - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? errno : EIO;
        off += (size_t)k;
    }
    return 0;
}

/* A block to the receiver, less the ranges it holds already. */
static int send_block(int sock, const struct block *bk)
{
    size_t at = 0;
    int err = 0;
    for (int i = 0; i <= bk->nunsent && !err; i++) {
        size_t end = i < bk->nunsent ? bk->unsent[i].off : bk->len;
        err = write_full(sock, 1, bk->mem + at, end - at);
        at = i < bk->nunsent ? end + bk->unsent[i].len : end;
    }
    return err;
}

static void *hash_worker(void *arg)
{
    struct flyt_swriter *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && w->next_chunk >= w->chunks_avail)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->stop)
            break;
        uint64_t c = w->next_chunk++;
        struct block *bk = &w->blk[(c / CPB) % NBLOCKS];
        size_t off = (c % CPB) * FLYT_STATE_CHUNK;
        size_t n = bk->len - off < FLYT_STATE_CHUNK ? bk->len - off : FLYT_STATE_CHUNK;
        pthread_mutex_unlock(&w->mu);
        digest d;
        uint64_t t0 = flyt_mono_ns();
        int rc = sha256(bk->mem + off, n, d);
        uint64_t dt = flyt_mono_ns() - t0;
        pthread_mutex_lock(&w->mu);
        if (rc != 0)
            set_failed(w, ENOMEM, 0);
        memcpy(w->d[c], d, sizeof d);
        w->hash_ns += dt;
        bk->pending--;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void *sock_worker(void *arg)
{
    struct flyt_swriter *w = arg;
    int which = OUT_SOCK, fd = w->sock;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && !failed(w) && w->next_out[which] >= w->nfilled)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->stop || failed(w))
            break;
        struct block *bk = &w->blk[w->next_out[which] % NBLOCKS];
        pthread_mutex_unlock(&w->mu);
        uint64_t t0 = flyt_mono_ns();
        int err = send_block(fd, bk);
        uint64_t dt = flyt_mono_ns() - t0;
        pthread_mutex_lock(&w->mu);
        w->send_ns += dt;
        if (err) {
            set_failed(w, err, 1);
            pthread_cond_broadcast(&w->cv);
            break;
        }
        w->next_out[which]++;
        w->out_bytes[which] += bk->len;
        for (int i = 0; i < bk->nunsent; i++)
            w->out_bytes[which] -= bk->unsent[i].len;
        if (w->sent)
            __atomic_store_n(w->sent, w->out_bytes[which], __ATOMIC_RELEASE);
        bk->pending--;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* The file's next block: its copy when it was copied away, else its buffer (marked busy);
 * NULL when there is none yet (lock held). */
static const unsigned char *file_next(struct flyt_swriter *w, struct fcopy **copy, size_t *len)
{
    uint64_t k = w->next_out[OUT_FILE];
    *copy = NULL;
    if (k >= w->nfilled)
        return NULL;
    if (w->copies && w->copies->blockno == k) {
        *copy = w->copies;
        if ((w->copies = w->copies->next) == NULL)
            w->copies_tail = NULL;
        *len = (*copy)->len;
        return (*copy)->mem;
    }
    struct block *bk = &w->blk[k % NBLOCKS];
    bk->file_busy = 1;
    *len = bk->len;
    return bk->mem;
}

static void release_buffer(struct flyt_swriter *w, unsigned char *mem, int staged)
{
    if (staged)
        w->b->ops->staging_put(w->b, mem);
    else
        free(mem);
}

static void *file_worker(void *arg)
{
    struct flyt_swriter *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        struct fcopy *copy;
        size_t len = 0;
        const unsigned char *p = NULL;
        while (!w->stop && !failed(w) && (p = file_next(w, &copy, &len)) == NULL)
            pthread_cond_wait(&w->cv, &w->mu);
        if (p == NULL)
            break;
        pthread_mutex_unlock(&w->mu);
        uint64_t t0 = flyt_mono_ns();
        int err = write_full(w->fd, 0, p, len);
        uint64_t dt = flyt_mono_ns() - t0;
        pthread_mutex_lock(&w->mu);
        w->write_ns += dt;
        if (copy) {
            w->copy_bytes -= copy->len;
            free(copy);
        } else if (p == w->detached) { /* its block has a buffer of its own now */
            release_buffer(w, w->detached, w->detached_staged);
            w->detached = NULL;
            w->copy_bytes -= len;
        } else {
            struct block *bk = &w->blk[w->next_out[OUT_FILE] % NBLOCKS];
            bk->file_busy = bk->file_left = 0;
            bk->pending--;
        }
        w->next_out[OUT_FILE]++;
        w->out_bytes[OUT_FILE] += len;
        if (w->sent && w->sock < 0)
            __atomic_store_n(w->sent, w->out_bytes[OUT_FILE], __ATOMIC_RELEASE);
        if (err)
            set_failed(w, err, 0);
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* The block in bk (number blockno), hashed and sent, still waits for the file: copied
 * away so that its buffer can be filled again (lock held). 0, or -1 when not (no memory,
 * or the copies' budget spent: the file sets the pace then). */
static int copy_for_file(struct flyt_swriter *w, struct block *bk, uint64_t blockno)
{
    if (w->sock < 0 || bk->pending != 1 || !bk->file_left || w->copy_bytes + bk->len > w->copy_max)
        return -1;
    if (bk->file_busy) { /* being written: the file keeps the buffer, the block gets another */
        unsigned char *fresh = w->detached ? NULL : malloc(BLOCK);
        if (fresh == NULL)
            return -1;
        w->detached = bk->mem;
        w->detached_staged = bk->staged;
        bk->mem = fresh;
        bk->staged = 0;
        w->copy_bytes += bk->len;
        bk->file_left = bk->file_busy = 0;
        bk->pending--;
        return 0;
    }
    struct fcopy *c = malloc(sizeof *c + bk->len);
    if (c == NULL)
        return -1;
    *c = (struct fcopy){.blockno = blockno, .len = bk->len};
    memcpy(c->mem, bk->mem, bk->len);
    if (w->copies_tail)
        w->copies_tail->next = c;
    else
        w->copies = c;
    w->copies_tail = c;
    w->copy_bytes += bk->len;
    bk->file_left = 0;
    bk->pending--;
    return 0;
}


/* Hands the current block to the threads and waits until the next one is free. */
static int publish(struct flyt_swriter *w)
{
    if (w->cur_len == 0)
        return failed(w) ? -1 : 0;
    uint64_t chunks = (w->cur_len + FLYT_STATE_CHUNK - 1) / FLYT_STATE_CHUNK;
    pthread_mutex_lock(&w->mu);
    if (w->chunks_avail + chunks > w->cap_d) {
        size_t cap = w->cap_d ? w->cap_d * 2 : 64;
        digest *d = realloc(w->d, cap * sizeof *d);
        if (d == NULL) {
            set_failed(w, ENOMEM, 0);
            pthread_mutex_unlock(&w->mu);
            return -1;
        }
        w->d = d;
        w->cap_d = cap;
    }
    struct block *bk = &w->blk[w->nfilled % NBLOCKS];
    bk->len = w->cur_len;
    bk->pending = (int)chunks + 1 + (w->sock >= 0);
    bk->file_left = 1;
    w->chunks_avail += chunks;
    w->nfilled++;
    pthread_cond_broadcast(&w->cv);
    uint64_t t0 = flyt_mono_ns();
    struct block *next = &w->blk[w->nfilled % NBLOCKS];
    while (next->pending > 0 && !failed(w) && copy_for_file(w, next, w->nfilled - NBLOCKS) != 0)
        pthread_cond_wait(&w->cv, &w->mu);
    w->stall_ns += flyt_mono_ns() - t0;
    int rc = failed(w) ? -1 : 0;
    pthread_mutex_unlock(&w->mu);
    w->cur_len = 0;
    next->nunsent = 0;
    return rc;
}

void *flyt_sw_reserve(struct flyt_swriter *w, size_t *room)
{
    if (failed(w))
        return NULL;
    *room = BLOCK - w->cur_len;
    return w->blk[w->nfilled % NBLOCKS].mem + w->cur_len;
}

int flyt_sw_commit(struct flyt_swriter *w, size_t n)
{
    w->cur_len += n;
    w->total += n;
    return w->cur_len == BLOCK ? publish(w) : failed(w) ? -1 : 0;
}

int flyt_sw_put(struct flyt_swriter *w, const void *p, size_t n)
{
    while (n > 0) {
        size_t room;
        unsigned char *dst = flyt_sw_reserve(w, &room);
        if (dst == NULL)
            return -1;
        size_t take = n < room ? n : room;
        memcpy(dst, p, take);
        p = (const char *)p + take;
        n -= take;
        if (flyt_sw_commit(w, take) != 0)
            return -1;
    }
    return failed(w) ? -1 : 0;
}

/* The block being filled skips n bytes at its current end on the socket. */
static int skip_on_sock(struct flyt_swriter *w, size_t n)
{
    struct block *bk = &w->blk[w->nfilled % NBLOCKS];
    struct span *last = bk->nunsent ? &bk->unsent[bk->nunsent - 1] : NULL;
    if (last && last->off + last->len == w->cur_len) {
        last->len += n;
        return 0;
    }
    if (bk->nunsent == bk->cap_unsent) {
        int cap = bk->cap_unsent ? bk->cap_unsent * 2 : 8;
        struct span *more = realloc(bk->unsent, (size_t)cap * sizeof *more);
        if (more == NULL)
            return -1;
        bk->unsent = more;
        bk->cap_unsent = cap;
    }
    bk->unsent[bk->nunsent++] = (struct span){w->cur_len, n};
    return 0;
}

int flyt_sw_put_unsent(struct flyt_swriter *w, const void *p, size_t n)
{
    if (w->sock < 0)
        return flyt_sw_put(w, p, n);
    while (n > 0) {
        size_t room;
        unsigned char *dst = flyt_sw_reserve(w, &room);
        size_t take = n < room ? n : room;
        if (dst == NULL || skip_on_sock(w, take) != 0)
            return -1;
        memcpy(dst, p, take);
        p = (const char *)p + take;
        n -= take;
        w->unsent += take;
        if (flyt_sw_commit(w, take) != 0)
            return -1;
    }
    return failed(w) ? -1 : 0;
}

uint64_t flyt_sw_unsent(const struct flyt_swriter *w)
{
    return w->unsent;
}

int flyt_sw_finish(struct flyt_swriter *w)
{
    uint64_t body = w->total;
    unsigned char root[32];
    if (publish(w) != 0)
        return -1;
    pthread_mutex_lock(&w->mu);
    uint64_t t0 = flyt_mono_ns();
    for (int i = 0; i < NBLOCKS && !failed(w); i++) /* hashed and sent; the file may lag */
        while (w->blk[i].pending > w->blk[i].file_left && !failed(w))
            pthread_cond_wait(&w->cv, &w->mu);
    w->stall_ns += flyt_mono_ns() - t0;
    int bad = failed(w);
    if (!bad && root_of(w->d, w->chunks_avail, body, root) != 0)
        set_failed(w, ENOMEM, 0);
    pthread_mutex_unlock(&w->mu);
    if (bad || failed(w))
        return -1;
    /* the trailer, not hashed itself: the receiver first, which verifies and restores
     * while the file is completed */
    int err = w->sock >= 0 ? write_full(w->sock, 1, root, sizeof root) : 0;
    if (err)
        set_failed(w, err, 1);
    else if (w->sock >= 0)
        shutdown(w->sock, SHUT_WR);
    pthread_mutex_lock(&w->mu);
    t0 = flyt_mono_ns();
    while (w->next_out[OUT_FILE] < w->nfilled && !failed(w)) /* the file's every block */
        pthread_cond_wait(&w->cv, &w->mu);
    w->file_tail_ns = flyt_mono_ns() - t0;
    pthread_mutex_unlock(&w->mu);
    if (!err && (err = failed(w)) == 0 && (err = write_full(w->fd, 0, root, sizeof root)) != 0)
        set_failed(w, err, 0);
    w->total += sizeof root;
    if (w->sent && !err)
        __atomic_store_n(w->sent, w->total - w->unsent, __ATOMIC_RELEASE);
    return err ? -1 : 0;
}

uint64_t flyt_sw_total(const struct flyt_swriter *w)
{
    return w->total;
}

int flyt_sw_error(const struct flyt_swriter *w, int *on_sock)
{
    int err = failed(w);
    *on_sock = err && w->failed_sock;
    return err;
}

struct flyt_swriter *flyt_sw_open(flyt_backend *b, int fd, int sock, uint64_t *sent)
{
    struct flyt_swriter *w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    w->b = b;
    w->fd = fd;
    w->sock = sock;
    w->sent = sent;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    w->copy_max = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 4 : 0;
    int ok = 1;
    for (int i = 0; i < NBLOCKS && ok; i++) {
        size_t got = 0;
        void *m = b ? b->ops->staging_get(b, BLOCK, &got) : NULL;
        if (m && got < BLOCK) { /* a short one cannot hold whole chunks */
            b->ops->staging_put(b, m);
            m = NULL;
        }
        w->blk[i].staged = m != NULL;
        w->blk[i].mem = m ? m : malloc(BLOCK);
        ok = w->blk[i].mem != NULL;
    }
    if (ok && flyt_spawn_unsignalled(&w->th[w->nth], file_worker, w) == 0)
        w->nth++;
    else
        ok = 0;
    if (ok && sock >= 0 && flyt_spawn_unsignalled(&w->th[w->nth], sock_worker, w) == 0)
        w->nth++;
    else if (sock >= 0)
        ok = 0;
    for (int i = 0; ok && i < hashers(); i++) {
        if (flyt_spawn_unsignalled(&w->th[w->nth], hash_worker, w) != 0)
            break;
        w->nth++, w->nhash++;
    }
    if (!ok || w->nhash == 0) {
        flyt_sw_close(w, NULL);
        return NULL;
    }
    return w;
}

void flyt_sw_close(struct flyt_swriter *w, struct flyt_state_times *t)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    while (w->nth > 0)
        pthread_join(w->th[--w->nth], NULL);
    for (int i = 0; i < NBLOCKS; i++) {
        if (w->blk[i].staged)
            w->b->ops->staging_put(w->b, w->blk[i].mem);
        else
            free(w->blk[i].mem);
        free(w->blk[i].unsent);
    }
    if (w->detached)
        release_buffer(w, w->detached, w->detached_staged);
    for (struct fcopy *c = w->copies, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    if (t) {
        t->hash += w->hash_ns;
        t->write += w->write_ns;
        t->send += w->send_ns;
        t->stall += w->stall_ns;
        t->unsent += w->unsent;
        t->file_tail += w->file_tail_ns;
        t->threads = w->nhash;
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->d);
    free(w);
}

/* ---- verifying as the bytes arrive (the receiving server) ---- */

struct flyt_rhash {
    const unsigned char *base;
    pthread_mutex_t      mu;
    pthread_cond_t       cv;
    /* under mu */
    uint64_t             avail, next, done; /* chunks final, claimed, hashed */
    size_t               last_len;          /* the last chunk's bytes, once finishing */
    int                  finishing, stop, failed;
    digest              *d;
    uint64_t             d_cap, hash_ns;
    pthread_t            th[MAX_HASHERS];
    int                  nth;
};

static void *rhash_worker(void *arg)
{
    struct flyt_rhash *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->stop && h->next >= h->avail)
            pthread_cond_wait(&h->cv, &h->mu);
        if (h->stop)
            break;
        uint64_t c = h->next++;
        size_t n = h->finishing && c == h->avail - 1 ? h->last_len : FLYT_STATE_CHUNK;
        pthread_mutex_unlock(&h->mu);
        digest d;
        uint64_t t0 = flyt_mono_ns();
        int rc = sha256(h->base + c * FLYT_STATE_CHUNK, n, d);
        uint64_t dt = flyt_mono_ns() - t0;
        pthread_mutex_lock(&h->mu);
        h->failed |= rc != 0;
        memcpy(h->d[c], d, sizeof d);
        h->hash_ns += dt;
        h->done++;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* Room for the digests of chunks up to n (lock held); 0, or -1 out of memory. */
static int rh_room(struct flyt_rhash *h, uint64_t n)
{
    if (n <= h->d_cap)
        return 0;
    uint64_t cap = h->d_cap ? h->d_cap : 64;
    while (cap < n)
        cap *= 2;
    digest *d = realloc(h->d, cap * sizeof *d);
    if (d == NULL)
        return -1;
    h->d = d;
    h->d_cap = cap;
    return 0;
}

struct flyt_rhash *flyt_rh_open(const unsigned char *base)
{
    struct flyt_rhash *h = calloc(1, sizeof *h);
    if (h == NULL)
        return NULL;
    h->base = base;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    while (h->nth < hashers() && flyt_spawn_unsignalled(&h->th[h->nth], rhash_worker, h) == 0)
        h->nth++;
    if (h->nth == 0) {
        flyt_rh_close(h);
        return NULL;
    }
    return h;
}

int flyt_rh_final(struct flyt_rhash *h, size_t final)
{
    uint64_t avail = final / FLYT_STATE_CHUNK;
    pthread_mutex_lock(&h->mu);
    if (avail > h->avail && !h->finishing) {
        if (rh_room(h, avail) != 0)
            h->failed = 1;
        else
            h->avail = avail;
        pthread_cond_broadcast(&h->cv);
    }
    int rc = h->failed ? -1 : 0;
    pthread_mutex_unlock(&h->mu);
    return rc;
}

int flyt_rh_finish(struct flyt_rhash *h, size_t total, uint64_t *hash_ns)
{
    *hash_ns = 0;
    if (total < FLYT_STATE_HASH + 1)
        return 0; /* too short to hold a body and its trailer */
    size_t body_len = total - FLYT_STATE_HASH;
    uint64_t nchunks = (body_len + FLYT_STATE_CHUNK - 1) / FLYT_STATE_CHUNK;
    pthread_mutex_lock(&h->mu);
    if (h->avail > nchunks || rh_room(h, nchunks) != 0)
        h->failed = 1; /* final bytes past the body: the caller's error */
    else {
        h->finishing = 1;
        h->last_len = body_len - (nchunks - 1) * FLYT_STATE_CHUNK;
        h->avail = nchunks;
        pthread_cond_broadcast(&h->cv);
    }
    while (!h->failed && h->done < h->avail)
        pthread_cond_wait(&h->cv, &h->mu);
    *hash_ns = h->hash_ns;
    int failed = h->failed;
    pthread_mutex_unlock(&h->mu);
    unsigned char root[32];
    if (failed || root_of(h->d, nchunks, body_len, root) != 0)
        return -1;
    return memcmp(root, h->base + body_len, sizeof root) == 0;
}

void flyt_rh_close(struct flyt_rhash *h)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    while (h->nth > 0)
        pthread_join(h->th[--h->nth], NULL);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->d);
    free(h);
}

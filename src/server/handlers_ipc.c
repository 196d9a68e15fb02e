/*
 * IPC_*: CUDA IPC between the sessions of one tenant (ipc.h says how).
 *
 * The broker is a thread of the exporting session, started at its first
 * export: it answers one request per connection, under the table's lock,
 * and only to a process that is a session of the same tenant. The session
 * thread adds and removes exports under the same lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "flyt_array.h"
#include "flyt_log.h"
#include "flyt_transport.h"
#include "ipc.h"
#include "quota.h"
#include "session.h"

#define IPC_MAGIC      0x3143504954594c46ull /* "FLYTIPC1" little-endian */
#define IPC_MEM        1u
#define IPC_EVENT      2u
#define IPC_VMM        3u
#define IPC_POOL       4u
#define IPC_PTR        5u /* an allocation of an exported pool */
#define IPC_WAIT_S     5 /* an exporter's broker must answer within this */
#define IPC_MAX_IMPORT 4096

/* The handle the program holds (FLYT_IPC_HANDLE_BYTES; the rest zero). */
struct ipc_handle {
    uint64_t magic;
    uint32_t kind;
    uint32_t pid;   /* the exporting session's process */
    uint64_t nonce; /* its broker's */
    uint64_t token; /* the export's */
};
_Static_assert(sizeof(struct ipc_handle) <= FLYT_IPC_HANDLE_BYTES, "a handle fits CUDA's");

/* Broker request and answer (SOCK_SEQPACKET: one message each). */
struct ipc_ask {
    uint64_t magic;
    uint64_t token;
    uint32_t kind;
    uint32_t pad;
};
struct ipc_answer {
    int32_t  result;
    uint32_t kind;
    uint64_t unit_size, offset, size; /* memory: its mapping, the allocation in it */
    uint8_t  bytes[FLYT_IPC_HANDLE_BYTES]; /* the driver's, of an event or pool allocation */
};

struct ipc_export {
    uint64_t token;
    uint32_t kind;
    int      fd;  /* memory, a pool: its descriptor; -1 for an event (or where none is needed) */
    uint64_t key; /* memory: the allocation's address; event, VMM allocation, pool: its session id */
    uint64_t unit_size, offset, size;
    uint8_t  bytes[FLYT_IPC_HANDLE_BYTES];
};

struct ipc_import {
    struct ipc_handle from;
    uint64_t          ptr, unit_addr, unit_size, size;
    uint32_t          opens;
};

struct flyt_ipc {
    pthread_mutex_t    mu; /* exports, shared with the broker thread */
    struct ipc_export *exports;
    size_t             nexports, cap_exports;
    int                listen_fd; /* -1 until the first export */
    int                stop_fd;   /* eventfd: the broker returns */
    pthread_t          broker;
    uint64_t           nonce;

    struct ipc_import *imports; /* the session thread's alone */
    size_t             nimports, cap_imports;
    uint64_t          *events_opened; /* ids of events opened from handles */
    size_t             nevents, cap_events;
    uint64_t          *ptrs_imported; /* pool allocations imported, until freed */
    size_t             nptrs, cap_ptrs;
};

static struct flyt_ipc *ipc_of(flyt_session *s)
{
    if (s->ipc == NULL) {
        struct flyt_ipc *x = calloc(1, sizeof *x);
        if (x == NULL)
            return NULL;
        pthread_mutex_init(&x->mu, NULL);
        x->listen_fd = -1;
        s->ipc = x;
    }
    return s->ipc;
}

static void broker_name(struct sockaddr_un *a, socklen_t *len, uint32_t pid, uint64_t nonce)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* abstract: nothing on disk to leave behind */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "flyt-ipc-%u-%016llx", pid,
                     (unsigned long long)nonce);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* ---- who may ask ---- */

static pid_t parent_of(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *end = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
    int ppid = -1;
    char state;
    if (end == NULL || sscanf(end + 1, " %c %d", &state, &ppid) != 2)
        return -1;
    return (pid_t)ppid;
}

/* A session of the same tenant: another child of this flyt-server, or of a
 * server of the same VM on this node, running as this server's user. */
static int same_tenant(const struct ucred *peer)
{
    if (peer->uid != geteuid() || peer->pid == getpid())
        return 0;
    return parent_of(peer->pid) == getppid() || flyt_quota_same_vm(peer->pid);
}

/* ---- the broker ---- */

static struct ipc_export *export_by_token(struct flyt_ipc *x, uint64_t token, uint32_t kind)
{
    for (size_t i = 0; i < x->nexports; i++)
        if (x->exports[i].token == token && x->exports[i].kind == kind)
            return &x->exports[i];
    return NULL;
}

static void broker_answer(struct flyt_ipc *x, int conn)
{
    struct ucred peer;
    socklen_t plen = sizeof peer;
    struct ipc_ask ask;
    struct ipc_answer ans;
    memset(&ans, 0, sizeof ans);
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &plen) != 0 ||
        flyt_read_full(conn, &ask, sizeof ask) != 0 || ask.magic != IPC_MAGIC)
        return;
    if (!same_tenant(&peer)) {
        flyt_warn("ipc: process %d asked for a handle of this session: not a session of the "
                  "same tenant, refused", (int)peer.pid);
        ans.result = CUDA_ERROR_NOT_PERMITTED;
        flyt_write_full(conn, &ans, sizeof ans);
        return;
    }
    struct iovec iov = {&ans, sizeof ans};
    pthread_mutex_lock(&x->mu);
    const struct ipc_export *e = export_by_token(x, ask.token, ask.kind);
    if (e == NULL) {
        ans.result = CUDA_ERROR_INVALID_HANDLE; /* freed, destroyed, or never made */
    } else {
        ans.kind = e->kind;
        ans.unit_size = e->unit_size;
        ans.offset = e->offset;
        ans.size = e->size;
        memcpy(ans.bytes, e->bytes, sizeof ans.bytes);
    }
    /* the asker sees a failure as no answer */
    if (e != NULL && e->fd >= 0)
        flyt_writev_full_fd(conn, &iov, 1, e->fd);
    else
        flyt_write_full(conn, &ans, sizeof ans);
    pthread_mutex_unlock(&x->mu);
}

static void *broker_main(void *arg)
{
    struct flyt_ipc *x = arg;
    for (;;) {
        struct pollfd p[2] = {{x->listen_fd, POLLIN, 0}, {x->stop_fd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            return NULL;
        if (p[1].revents)
            return NULL; /* flyt_ipc_end */
        if (!(p[0].revents & POLLIN))
            continue;
        int conn = accept4(x->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0)
            continue;
        struct timeval tv = {IPC_WAIT_S, 0};
        setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        broker_answer(x, conn);
        close(conn);
    }
}

static CUresult broker_start(struct flyt_ipc *x)
{
    if (x->listen_fd >= 0)
        return CUDA_SUCCESS;
    for (int tries = 0; tries < 4; tries++) {
        uint64_t nonce = 0;
        if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
            return CUDA_ERROR_OPERATING_SYSTEM;
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        struct sockaddr_un a;
        socklen_t len;
        broker_name(&a, &len, (uint32_t)getpid(), nonce);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&a, len) == 0 && listen(fd, 16) == 0) {
            x->listen_fd = fd;
            x->nonce = nonce;
            x->stop_fd = eventfd(0, EFD_CLOEXEC);
            if (x->stop_fd >= 0 && pthread_create(&x->broker, NULL, broker_main, x) == 0)
                return CUDA_SUCCESS;
            if (x->stop_fd >= 0)
                close(x->stop_fd);
            x->listen_fd = -1;
            close(fd);
            return CUDA_ERROR_OPERATING_SYSTEM;
        }
        int was = errno;
        if (fd >= 0)
            close(fd);
        if (was != EADDRINUSE) { /* a name taken is tried again with another nonce */
            flyt_error("ipc: cannot listen for handle requests: %s", strerror(was));
            return CUDA_ERROR_OPERATING_SYSTEM;
        }
    }
    return CUDA_ERROR_OPERATING_SYSTEM;
}

/* Whether an answer of kind comes with a descriptor as it must: memory
 * always, an event never, a pool and its allocations as the backend needs. */
static int fd_fits(uint32_t kind, int fd)
{
    if (kind == IPC_MEM || kind == IPC_VMM)
        return fd >= 0;
    return kind != IPC_EVENT || fd < 0;
}

/* Asks the broker named in h. CUDA_SUCCESS with *ans (and *fd for memory, the caller's). */
static CUresult broker_ask(const struct ipc_handle *h, struct ipc_answer *ans, int *fd)
{
    *fd = -1;
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    struct timeval tv = {IPC_WAIT_S, 0};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_un a;
    socklen_t len;
    broker_name(&a, &len, h->pid, h->nonce);
    struct ucred peer;
    socklen_t plen = sizeof peer;
    CUresult r = CUDA_ERROR_INVALID_HANDLE; /* no such session (ended, or on another node) */
    struct ipc_ask ask = {.magic = IPC_MAGIC, .token = h->token, .kind = h->kind};
    if (connect(sock, (struct sockaddr *)&a, len) != 0)
        goto out;
    /* the name is only a name: the answer must come from that session, as this server's user */
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &peer, &plen) != 0 ||
        peer.pid != (pid_t)h->pid || peer.uid != geteuid())
        goto out;
    if (flyt_write_full(sock, &ask, sizeof ask) != 0 || flyt_read_full_fd(sock, ans, sizeof *ans, fd) != 0)
        goto out;
    r = (CUresult)ans->result;
    if (r == CUDA_SUCCESS && (ans->kind != h->kind || !fd_fits(h->kind, *fd)))
        r = CUDA_ERROR_INVALID_HANDLE;
out:
    if (r != CUDA_SUCCESS && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    close(sock);
    return r;
}

/* Whether the memory an answer describes lies inside the unit it came in
 * (another session's word: checked before anything is mapped). */
static int unit_holds(const struct ipc_answer *a)
{
    return a->offset < a->unit_size && a->size <= a->unit_size - a->offset;
}

/* ---- exports ---- */

static void handle_out(const struct flyt_ipc *x, uint32_t kind, uint64_t token,
                       flyt_rep_ipc_handle *rep)
{
    struct ipc_handle h = {.magic = IPC_MAGIC, .kind = kind, .pid = (uint32_t)getpid(),
                           .nonce = x->nonce, .token = token};
    memset(rep->handle, 0, sizeof rep->handle);
    memcpy(rep->handle, &h, sizeof h);
}

/* The export of (kind, key), made by fill when there is none yet. */
static CUresult export_get(flyt_session *s, uint32_t kind, uint64_t key, flyt_rep_ipc_handle *rep,
                           CUresult (*fill)(flyt_session *s, struct ipc_export *e))
{
    struct flyt_ipc *x = ipc_of(s);
    if (x == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < x->nexports; i++)
        if (x->exports[i].kind == kind && x->exports[i].key == key) {
            handle_out(x, kind, x->exports[i].token, rep);
            return CUDA_SUCCESS;
        }
    struct ipc_export e = {.kind = kind, .fd = -1, .key = key};
    CUresult r = broker_start(x);
    if (r == CUDA_SUCCESS && getrandom(&e.token, sizeof e.token, 0) != (ssize_t)sizeof e.token)
        r = CUDA_ERROR_OPERATING_SYSTEM;
    if (r == CUDA_SUCCESS)
        r = fill(s, &e);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&x->mu);
    int full = flyt_array_room((void **)&x->exports, &x->cap_exports, x->nexports, sizeof e);
    if (!full)
        x->exports[x->nexports++] = e;
    pthread_mutex_unlock(&x->mu);
    if (full) {
        if (e.fd >= 0)
            close(e.fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    handle_out(x, kind, e.token, rep);
    return CUDA_SUCCESS;
}

static void export_drop(flyt_session *s, uint32_t kind, uint64_t key)
{
    struct flyt_ipc *x = s->ipc;
    if (x == NULL)
        return;
    pthread_mutex_lock(&x->mu);
    for (size_t i = 0; i < x->nexports; i++)
        if (x->exports[i].kind == kind && x->exports[i].key == key) {
            if (x->exports[i].fd >= 0)
                close(x->exports[i].fd);
            x->exports[i--] = x->exports[--x->nexports];
        }
    pthread_mutex_unlock(&x->mu);
}

static CUresult fill_mem(flyt_session *s, struct ipc_export *e)
{
    uint64_t unit_base = 0;
    CUresult r = FLYT_BCALL(s, ipc_mem_export, e->key, &e->fd, &unit_base, &e->unit_size, &e->size);
    if (r == CUDA_SUCCESS)
        e->offset = e->key - unit_base;
    return r;
}

int handle_IPC_MEM_EXPORT(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    c->result = export_get(s, IPC_MEM, r->handle, c->rep, fill_mem);
    return FLYT_CONT;
}

static CUresult fill_event(flyt_session *s, struct ipc_export *e)
{
    flyt_bhandle ev;
    CUresult r = flyt_lookup(s, e->key, FLYT_H_EVENT, &ev);
    return r == CUDA_SUCCESS ? FLYT_BCALL(s, ipc_event_export, ev, e->bytes) : r;
}

static CUresult fill_vmm(flyt_session *s, struct ipc_export *e)
{
    flyt_bhandle mem;
    CUresult r = flyt_lookup(s, e->key, FLYT_H_VMEM, &mem);
    if (r == CUDA_SUCCESS)
        r = FLYT_BCALL(s, ipc_vmm_export, mem, &e->fd, &e->size);
    e->unit_size = e->size;
    return r == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : r; /* as the driver */
}

int handle_IPC_VMM_EXPORT(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    c->result = export_get(s, IPC_VMM, r->handle, c->rep, fill_vmm);
    return FLYT_CONT;
}

int handle_IPC_EVENT_EXPORT(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    c->result = export_get(s, IPC_EVENT, r->handle, c->rep, fill_event);
    return FLYT_CONT;
}

/* ---- imports ---- */

/* The handle of req, checked: CUDA_SUCCESS, or why it opens nothing here. */
static CUresult handle_in(const flyt_req_ipc_open *req, uint32_t kind, struct ipc_handle *h)
{
    memcpy(h, req->handle, sizeof *h);
    for (size_t i = sizeof *h; i < FLYT_IPC_HANDLE_BYTES; i++)
        if (req->handle[i] != 0)
            return CUDA_ERROR_INVALID_VALUE;
    if (h->magic != IPC_MAGIC || h->kind != kind || h->pid == 0)
        return CUDA_ERROR_INVALID_VALUE; /* not a handle Flyt made */
    if (h->pid == (uint32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* the driver's answer for one's own handle */
    return CUDA_SUCCESS;
}

static struct ipc_import *import_of(struct flyt_ipc *x, const struct ipc_handle *h)
{
    for (size_t i = 0; x && i < x->nimports; i++)
        if (memcmp(&x->imports[i].from, h, sizeof *h) == 0)
            return &x->imports[i];
    return NULL;
}

static CUresult mem_open(flyt_session *s, const struct ipc_handle *h, flyt_rep_u64_pair *rep)
{
    struct flyt_ipc *x = ipc_of(s);
    if (x == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct ipc_import *had = import_of(x, h);
    if (had) { /* as the driver: the same pointer, one more open */
        had->opens++;
        rep->a = had->ptr;
        rep->b = had->size;
        return CUDA_SUCCESS;
    }
    if (x->nimports >= IPC_MAX_IMPORT ||
        flyt_array_room((void **)&x->imports, &x->cap_imports, x->nimports, sizeof *x->imports) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct ipc_answer ans;
    int fd = -1;
    CUresult r = broker_ask(h, &ans, &fd);
    if (r == CUDA_SUCCESS && !unit_holds(&ans))
        r = CUDA_ERROR_INVALID_HANDLE;
    uint64_t unit_addr = 0;
    if (r == CUDA_SUCCESS)
        r = FLYT_BCALL(s, ipc_mem_import, fd, ans.unit_size, &unit_addr);
    if (fd >= 0)
        close(fd);
    if (r != CUDA_SUCCESS)
        return r;
    struct ipc_import *im = &x->imports[x->nimports++];
    *im = (struct ipc_import){.from = *h, .ptr = unit_addr + ans.offset, .unit_addr = unit_addr,
                              .unit_size = ans.unit_size, .size = ans.size, .opens = 1};
    rep->a = im->ptr;
    rep->b = im->size;
    return CUDA_SUCCESS;
}

int handle_IPC_MEM_OPEN(flyt_session *s, flyt_call *c)
{
    const flyt_req_ipc_open *r = c->req;
    struct ipc_handle h;
    c->result = r->id || (r->flags & ~(uint32_t)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
                    ? CUDA_ERROR_INVALID_VALUE
                    : handle_in(r, IPC_MEM, &h);
    if (c->result == CUDA_SUCCESS)
        c->result = mem_open(s, &h, c->rep);
    return FLYT_CONT;
}

int handle_IPC_MEM_CLOSE(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    struct flyt_ipc *x = s->ipc;
    c->result = CUDA_ERROR_INVALID_VALUE; /* not a pointer an open returned */
    for (size_t i = 0; x && i < x->nimports; i++) {
        struct ipc_import *im = &x->imports[i];
        if (im->ptr != r->handle)
            continue;
        if (im->opens > 1) {
            rep->value = --im->opens;
            c->result = CUDA_SUCCESS;
            break;
        }
        c->result = FLYT_BCALL(s, ipc_mem_unimport, im->unit_addr, im->unit_size);
        if (c->result == CUDA_SUCCESS)
            x->imports[i] = x->imports[--x->nimports];
        break;
    }
    return FLYT_CONT;
}

int handle_IPC_EVENT_OPEN(flyt_session *s, flyt_call *c)
{
    const flyt_req_ipc_open *r = c->req;
    struct flyt_ipc *x = ipc_of(s);
    struct ipc_handle h;
    c->result = x == NULL ? CUDA_ERROR_OUT_OF_MEMORY
                : r->flags || r->id < FLYT_CLIENT_IDS ? CUDA_ERROR_INVALID_VALUE
                                                      : handle_in(r, IPC_EVENT, &h);
    if (c->result == CUDA_SUCCESS &&
        flyt_array_room((void **)&x->events_opened, &x->cap_events, x->nevents, sizeof(uint64_t)) != 0)
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
    struct ipc_answer ans;
    int fd = -1;
    if (c->result == CUDA_SUCCESS)
        c->result = broker_ask(&h, &ans, &fd);
    flyt_bhandle ev = NULL;
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, ipc_event_import, ans.bytes, &ev);
    uint64_t id = 0;
    if (c->result == CUDA_SUCCESS)
        flyt_publish_stream_event(s, c, FLYT_H_EVENT, ev, r->id, &id);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    flyt_handles_get(&s->handles, id, FLYT_H_EVENT)->u.event_flags =
        CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
    x->events_opened[x->nevents++] = r->id;
    return FLYT_CONT;
}

int handle_IPC_VMM_IMPORT(flyt_session *s, flyt_call *c)
{
    const flyt_req_ipc_open *r = c->req;
    flyt_rep_u64_pair *rep = c->rep;
    struct flyt_ipc *x = ipc_of(s);
    struct ipc_handle h;
    c->result = x == NULL ? CUDA_ERROR_OUT_OF_MEMORY
                : r->flags || r->id ? CUDA_ERROR_INVALID_VALUE
                                    : handle_in(r, IPC_VMM, &h);
    struct ipc_answer ans;
    int fd = -1;
    if (c->result == CUDA_SUCCESS)
        c->result = broker_ask(&h, &ans, &fd);
    flyt_bhandle mem = NULL;
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, ipc_vmm_import, fd, ans.size, &mem);
    if (fd >= 0)
        close(fd);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    struct flyt_hentry *e = flyt_handles_add(&s->handles, FLYT_H_VMEM, mem);
    if (e == NULL) {
        FLYT_BCALL(s, vmm_release, mem);
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return FLYT_CONT;
    }
    /* the exporter's memory: charged to it, not here */
    e->u.vmem = (struct flyt_vmem_info){.size = ans.size, .refs = 1, .imported = 1};
    rep->a = e->id;
    rep->b = ans.size;
    return FLYT_CONT;
}

/* ---- memory pools and their allocations ---- */

static CUresult fill_pool(flyt_session *s, struct ipc_export *e)
{
    flyt_bhandle pool;
    CUresult r = flyt_lookup(s, e->key, FLYT_H_POOL, &pool);
    if (r != CUDA_SUCCESS)
        return r;
    const struct flyt_pool_info *p = &flyt_handles_get(&s->handles, e->key, FLYT_H_POOL)->u.pool;
    if (p->imported || !(p->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE; /* as the driver: a pool created shareable, here */
    return FLYT_BCALL(s, ipc_pool_export, pool, &e->fd);
}

int handle_IPC_POOL_EXPORT(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    c->result = export_get(s, IPC_POOL, r->handle, c->rep, fill_pool);
    return FLYT_CONT;
}

static CUresult fill_ptr(flyt_session *s, struct ipc_export *e)
{
    uint64_t unit_base = 0;
    CUresult r = FLYT_BCALL(s, ipc_ptr_export, e->key, e->bytes, &e->fd, &unit_base,
                            &e->unit_size, &e->size);
    if (r == CUDA_SUCCESS)
        e->offset = e->key - unit_base;
    return r;
}

int handle_IPC_PTR_EXPORT(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    c->result = export_get(s, IPC_PTR, r->handle, c->rep, fill_ptr);
    return FLYT_CONT;
}

struct pool_search {
    const struct ipc_handle *h;
    uint64_t                 id;
};

static int same_pool(struct flyt_hentry *e, void *arg)
{
    struct pool_search *q = arg;
    if (e->type != FLYT_H_POOL || !e->u.pool.imported || e->u.pool.origin != q->h->nonce ||
        e->u.pool.token != q->h->token)
        return 0;
    q->id = e->id;
    return 1;
}

int handle_IPC_POOL_IMPORT(flyt_session *s, flyt_call *c)
{
    const flyt_req_ipc_open *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    struct ipc_handle h;
    c->result = r->flags || r->id ? CUDA_ERROR_INVALID_VALUE : handle_in(r, IPC_POOL, &h);
    /* as the driver: a pool imported again is the same pool */
    struct pool_search q = {&h, 0};
    if (c->result == CUDA_SUCCESS && flyt_handles_foreach(&s->handles, same_pool, &q)) {
        rep->value = q.id;
        return FLYT_CONT;
    }
    struct ipc_answer ans;
    int fd = -1;
    if (c->result == CUDA_SUCCESS)
        c->result = broker_ask(&h, &ans, &fd);
    flyt_bhandle pool = NULL;
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, ipc_pool_import, fd, &pool);
    if (fd >= 0)
        close(fd);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    struct flyt_hentry *e = flyt_handles_add(&s->handles, FLYT_H_POOL, pool);
    if (e == NULL) {
        FLYT_BCALL(s, pool_destroy, pool);
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return FLYT_CONT;
    }
    e->u.pool = (struct flyt_pool_info){.handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                        .imported = 1, .origin = h.nonce, .token = h.token};
    rep->value = e->id;
    return FLYT_CONT;
}

/* The allocation of h in the imported pool bh: its pointer here. */
static CUresult ptr_import(flyt_session *s, flyt_bhandle bh, const struct ipc_handle *h,
                           flyt_rep_u64_pair *rep)
{
    struct flyt_ipc *x = ipc_of(s);
    if (x == NULL || x->nptrs >= IPC_MAX_IMPORT ||
        flyt_array_room((void **)&x->ptrs_imported, &x->cap_ptrs, x->nptrs, sizeof(uint64_t)) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct ipc_answer ans;
    int fd = -1;
    CUresult r = broker_ask(h, &ans, &fd);
    if (r == CUDA_SUCCESS && fd >= 0 && !unit_holds(&ans))
        r = CUDA_ERROR_INVALID_HANDLE;
    uint64_t addr = 0;
    if (r == CUDA_SUCCESS)
        r = FLYT_BCALL(s, ipc_ptr_import, bh, ans.bytes, fd, ans.unit_size, ans.offset, &addr);
    if (fd >= 0)
        close(fd);
    if (r != CUDA_SUCCESS)
        return r;
    x->ptrs_imported[x->nptrs++] = addr;
    rep->a = addr;
    rep->b = ans.size;
    return CUDA_SUCCESS;
}

int handle_IPC_PTR_IMPORT(flyt_session *s, flyt_call *c)
{
    const flyt_req_ipc_open *r = c->req;
    struct ipc_handle h;
    c->result = r->flags ? CUDA_ERROR_INVALID_VALUE : handle_in(r, IPC_PTR, &h);
    flyt_bhandle bh = NULL;
    if (c->result == CUDA_SUCCESS)
        c->result = flyt_lookup(s, r->id, FLYT_H_POOL, &bh);
    /* the pool it was allocated from must be one opened from the same session */
    if (c->result == CUDA_SUCCESS) {
        const struct flyt_pool_info *p = &flyt_handles_get(&s->handles, r->id, FLYT_H_POOL)->u.pool;
        if (!p->imported || p->origin != h.nonce)
            c->result = CUDA_ERROR_INVALID_VALUE;
    }
    if (c->result == CUDA_SUCCESS)
        c->result = ptr_import(s, bh, &h, c->rep);
    return FLYT_CONT;
}

/* ---- the session's hooks ---- */

void flyt_ipc_mem_freed(flyt_session *s, uint64_t ptr)
{
    export_drop(s, IPC_MEM, ptr);
    export_drop(s, IPC_PTR, ptr);
    struct flyt_ipc *x = s->ipc;
    for (size_t i = 0; x && i < x->nptrs; i++)
        if (x->ptrs_imported[i] == ptr)
            x->ptrs_imported[i--] = x->ptrs_imported[--x->nptrs];
}

void flyt_ipc_pool_gone(flyt_session *s, uint64_t id) { export_drop(s, IPC_POOL, id); }

void flyt_ipc_vmem_gone(flyt_session *s, uint64_t id) { export_drop(s, IPC_VMM, id); }

void flyt_ipc_event_gone(flyt_session *s, uint64_t id)
{
    export_drop(s, IPC_EVENT, id);
    struct flyt_ipc *x = s->ipc;
    for (size_t i = 0; x && i < x->nevents; i++)
        if (x->events_opened[i] == id)
            x->events_opened[i--] = x->events_opened[--x->nevents];
}

static void drop_all(struct flyt_ipc *x)
{
    pthread_mutex_lock(&x->mu);
    for (size_t i = 0; i < x->nexports; i++)
        if (x->exports[i].fd >= 0)
            close(x->exports[i].fd);
    x->nexports = 0;
    pthread_mutex_unlock(&x->mu);
    x->nimports = 0;
    x->nevents = 0;
    x->nptrs = 0;
}

void flyt_ipc_reset(flyt_session *s)
{
    struct flyt_ipc *x = s->ipc;
    if (x == NULL)
        return;
    /* the mappings first, while the context that made them is there */
    for (size_t i = 0; i < x->nimports; i++)
        FLYT_BCALL(s, ipc_mem_unimport, x->imports[i].unit_addr, x->imports[i].unit_size);
    for (size_t i = 0; i < x->nptrs; i++)
        FLYT_BCALL(s, mem_free, x->ptrs_imported[i]);
    drop_all(x);
}

static int imported_object(struct flyt_hentry *e, void *arg)
{
    (void)arg;
    return (e->type == FLYT_H_VMEM && e->u.vmem.imported) ||
           (e->type == FLYT_H_POOL && e->u.pool.imported);
}

const char *flyt_ipc_busy(flyt_session *s)
{
    const struct flyt_ipc *x = s->ipc;
    if (x == NULL)
        return NULL;
    if (x->nexports)
        return "memory or an event shared with another process (cuIpcGetMemHandle, "
               "cuIpcGetEventHandle, cuMemExportToShareableHandle, cuMemPoolExport*)";
    /* VMM and pool imports are the handle table's entries marked imported */
    if (x->nimports || x->nevents || x->nptrs ||
        flyt_handles_foreach(&s->handles, imported_object, NULL))
        return "memory or an event of another process (cuIpcOpenMemHandle, cuIpcOpenEventHandle, "
               "cuMemImportFromShareableHandle, cuMemPoolImport*)";
    return NULL;
}

void flyt_ipc_end(flyt_session *s)
{
    struct flyt_ipc *x = s->ipc;
    if (x == NULL)
        return;
    if (x->listen_fd >= 0) {
        uint64_t one = 1;
        if (write(x->stop_fd, &one, sizeof one) != (ssize_t)sizeof one)
            return; /* never for an eventfd; the broker would still read the table */
        pthread_join(x->broker, NULL);
        close(x->stop_fd);
        close(x->listen_fd);
    }
    drop_all(x);
    pthread_mutex_destroy(&x->mu);
    free(x->exports);
    free(x->imports);
    free(x->events_opened);
    free(x->ptrs_imported);
    free(x);
    s->ipc = NULL;
}

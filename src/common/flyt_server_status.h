/*
 * The status page of a flyt-server (--status-file): how its node manager sees
 * whether the server listens, whether a client is connected and how much
 * memory its sessions hold, without talking to it.
 *
 * The server creates the file (mode 0644, truncated), maps it shared and
 * keeps it up to date: the listening parent sets `listen_port` and then
 * `magic` once it listens, and counts its admitted sessions in `sessions`;
 * each session child keeps its allocations in its own `slots[]` entry and in
 * `memory_used` (the sum, which the memory quota is checked against, so the
 * quota holds across every connection of the server). A child takes its slot
 * when its client is admitted: connections that never are take none. The
 * parent clears the slot of a session that ended, whatever way it ended.
 *
 * Readers (the node manager) pread() the file: every field is a naturally
 * aligned 32- or 64-bit value written with an atomic store, so each one reads
 * whole; the page as a whole is not a snapshot.
 *
 * Live resize (docs/server.md, "Live resize"): the node manager, which
 * starts the server and owns the file, maps it too and writes
 *   - memory_quota: in force for the next allocation of every session;
 *   - the SM share: share_gen made odd, share_groups/share_ngroups written,
 *     share_gen made even again (a sequence lock), share_posted_ns set, then
 *     SIGURG to each session child. A session applies a new even share_gen
 *     at its next request boundary (an idle one is woken by the signal),
 *     after draining its work, and acknowledges it in its slot: share_gen,
 *     share_result (a CUresult), share_sms and its times.
 * A session that starts later takes the page's share (share_gen > 0)
 * instead of its command line's.
 *
 * Checkpoint (docs/state-format.md): the node manager writes ckpt_path,
 * ckpt_pid (the session child to capture) and ckpt_flags, then increments
 * ckpt_gen and sends SIGURG to that child. The child, at its next request
 * boundary, drains its work, writes the session's state to ckpt_path and
 * answers in ckpt_result (a CUresult), ckpt_bytes, ckpt_ns and ckpt_error
 * (one line, empty on success), and last sets ckpt_done_gen = ckpt_gen.
 * With ckpt_dest set it also streams the state there; if that fails, the
 * checkpoint fails and the session carries on (even with FLYT_CKPT_STOP).
 * These fields were appended to version 2: readers of its front are unchanged.
 */
#ifndef FLYT_SERVER_STATUS_H
#define FLYT_SERVER_STATUS_H

#include <stdint.h>

#define FLYT_STATUS_MAGIC   0x3153555441545346ull /* "FSTATUS1" little-endian */
#define FLYT_STATUS_VERSION 3u /* 3: ckpt_dest, ckpt_secret, ckpt_sent, ckpt_estimate */
#define FLYT_STATUS_SLOTS   64 /* concurrent connections of one managed server */
#define FLYT_STATUS_GROUPS  512 /* SM groups a resized share may list */

struct flyt_status_slot {
    int32_t  pid;      /* the session child, 0: free (taken once its client is admitted) */
    uint32_t admitted; /* 1 once the client may use the GPU (token accepted, or none asked) */
    uint64_t used;     /* bytes this session holds */
    uint64_t share_gen;      /* the last resize this session applied (or failed) */
    int32_t  share_result;   /* its CUresult */
    uint32_t share_sms;      /* SMs the session runs on since */
    uint64_t share_drain_ns; /* waiting for its in-flight work */
    uint64_t share_apply_ns; /* making the new share current, after the drain */
    uint64_t share_done_ns;  /* CLOCK_MONOTONIC when it was in force */
};

struct flyt_server_status {
    uint64_t magic;          /* FLYT_STATUS_MAGIC once the server listens, else 0 */
    uint32_t version;        /* FLYT_STATUS_VERSION */
    uint32_t server_pid;     /* the listening parent */
    uint32_t listen_port;    /* bound TCP port (0 for a Unix socket) */
    uint32_t sessions;       /* admitted connections (live session children holding a slot);
                              * a client is connected when a slot has pid > 0 and admitted */
    uint64_t sessions_total; /* connections admitted since start */
    uint64_t memory_used;    /* bytes allocated by all sessions */
    uint64_t memory_quota;   /* --memory-quota, 0 when none */
    uint32_t sm_count;       /* SMs of the --sm-groups share, 0 when none */
    uint32_t pad;
    struct flyt_status_slot slots[FLYT_STATUS_SLOTS];
    /* the SM share of a live resize (above); written by the node manager */
    uint64_t share_gen;        /* 0: the command line's share; odd: being written */
    uint64_t share_posted_ns;  /* CLOCK_MONOTONIC when the node manager posted it */
    uint32_t share_granularity;
    uint32_t share_ngroups;
    uint16_t share_groups[FLYT_STATUS_GROUPS];
    /* a checkpoint request (above); written by the node manager */
    uint64_t ckpt_gen;
    int32_t  ckpt_pid;
    uint32_t ckpt_flags; /* FLYT_CKPT_* */
    char     ckpt_path[512];
    /* and its answer, by the session */
    uint64_t ckpt_done_gen;
    int32_t  ckpt_result;
    uint32_t ckpt_precopy_ms; /* the kernel images sent ahead, before the drain (the
                               * program ran on meanwhile: not downtime); 0: none */
    uint64_t ckpt_bytes;
    uint64_t ckpt_ns; /* drain and write */
    char     ckpt_error[256];
    /* a destination besides ckpt_path (docs/state-format.md, "Streaming"): the
     * session also streams the state to this receiving server, "" when none */
    char     ckpt_dest[256];   /* tcp://HOST:PORT */
    char     ckpt_secret[80];  /* its one-time secret, hex */
    /* progress, by the session while it writes */
    uint64_t ckpt_sent;        /* bytes written so far */
    uint64_t ckpt_estimate;    /* about how many there will be: the allocations' bytes */
};

/* ckpt_flags: the session ends after a successful checkpoint (preemption,
 * or the source of a migration); otherwise it carries on. */
#define FLYT_CKPT_STOP 1u
/* With STOP: the session is suspended (preempted), restored at a time nobody knows:
 * its client waits for it without a deadline (docs/protocol.md, "Session moves"). */
#define FLYT_CKPT_SUSPEND 2u

#endif

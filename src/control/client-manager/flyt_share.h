/* A program's request for another share of its VM (docs/api.md, "App-requested scaling";
 * docs/client-manager.md): asked of the VM's flyt-client-manager over its socket, which
 * asks the cluster manager. Link the flyt_share library (this header's folder). */
#ifndef FLYT_SHARE_H
#define FLYT_SHARE_H

struct flyt_share_answer {
    char state[16];        /* "granted" or "queued" */
    char request[128];     /* the request's id (flytctl vm requests lists it) */
    long long sm, memory;  /* the VM's share now: SMs, bytes (queued: unchanged yet) */
    char message[1024];    /* why, when refused or failed */
};

/* Asks for the VM's share to become sm ("+16", "-16", "48" SMs; NULL or "": unchanged) and
 * memory ("+1GiB", "-512MiB", "8GiB"; NULL or "": unchanged), with an optional reason
 * (one line of printable text) for the record. socket: NULL for $FLYT_CLIENT_MANAGER, else
 * /run/flyt/client.sock. Waits for the answer at most $FLYT_CLIENT_MANAGER_TIMEOUT seconds
 * (default 90). 0: granted or queued (ans filled); -1: refused or failed, ans->message
 * says why. */
int flyt_share_request(const char *socket, const char *sm, const char *memory,
                       const char *reason, struct flyt_share_answer *ans);

#endif

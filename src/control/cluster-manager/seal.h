/* Node secrets sealed at rest (docs/api.md, "store_key_file"): a node's session_key and
 * manager_token are kept in the store as "sealed1:" base64(nonce | ciphertext | tag),
 * AES-256-GCM under a key held outside the store, with the column and the node's id as
 * associated data (a sealed value moved to another row or column does not open).
 * The nonce is derived from the value (HMAC-SHA256 of the associated data and the
 * plaintext under a subkey of its own): sealing one value twice gives the same text, so
 * rewriting a node row at each heartbeat neither changes it nor uses up nonces. */
#ifndef FLYT_CLM_SEAL_H
#define FLYT_CLM_SEAL_H

#include "store.h"

#include <stddef.h>

#define SEAL_PREFIX "sealed1:"
#define SEAL_TEXT_MAX 256   /* a sealed value of up to 64 characters fits */

/* The subkeys derived from the 32-byte key of the key file. */
struct seal_key {
    unsigned char enc[32], nonce[32];
};

/* The key file: 64 hex digits (32 bytes) on one line, the owner's alone (as the token
 * files). create: a missing file is made (0600, a random key) first. 0, or -1 with err. */
int seal_key_file_load(const char *path, int create, struct seal_key *key, char *err,
                       size_t errlen);
/* A random key held in memory only (an in-memory store keeps nothing at rest). */
int seal_key_random(struct seal_key *key);
void seal_key_forget(struct seal_key *key);

int seal_is_sealed(const char *text);
/* plain sealed into out (SEAL_TEXT_MAX); "" stays "". 0, or -1 when it does not fit. */
int seal_text(const struct seal_key *key, const char *ad, const char *plain, char *out,
              size_t outlen);
/* A sealed text opened into out: 0; -1 when it does not open with key (another key, or
 * altered) or does not fit. */
int seal_open(const struct seal_key *key, const char *ad, const char *text, char *out,
              size_t outlen);

/* store_nodes.c: from now on node secrets are sealed with key (kept by the caller, alive
 * while the store is open), and those the store holds in plain text (a store of an older
 * version) are sealed in place. Returns how many were sealed; DB_ERR with err when a
 * sealed one does not open with key. */
int store_nodes_seal(struct store *st, const struct seal_key *key, char *err, size_t errlen);

#endif

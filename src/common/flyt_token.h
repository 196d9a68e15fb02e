/* Tokens: random API tokens, SHA-256 hashes of them, and session tokens (docs/api.md).
 * Depends only on OpenSSL's libcrypto, so flyt-server can link it too. */
#ifndef FLYT_TOKEN_H
#define FLYT_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define FLYT_TOKEN_BYTES 32                        /* API tokens and session keys */
#define FLYT_TOKEN_HEX_LEN (2 * FLYT_TOKEN_BYTES)  /* 64 hex characters */
#define FLYT_SHA256_HEX_LEN 64

/* nbytes random bytes (RAND_bytes) as lowercase hex into out (needs 2*nbytes+1).
 * 0 on success, -1 when the RNG fails or out is too small. */
int flyt_random_hex(size_t nbytes, char *out, size_t outlen);
/* A new API token: FLYT_TOKEN_HEX_LEN hex characters. out needs 65 bytes. */
int flyt_token_new(char *out, size_t outlen);
/* SHA-256 of data as lowercase hex; out needs 65 bytes. */
int flyt_sha256_hex(const void *data, size_t len, char *out, size_t outlen);
/* Constant-time equality of two strings (time depends only on their lengths). */
bool flyt_token_equal(const char *a, const char *b);

/* Hex <-> bytes. decode: 0 on success, -1 on odd length, a non-hex char or overflow. */
void flyt_hex_encode(const unsigned char *in, size_t len, char *out);  /* out: 2*len+1 */
int flyt_hex_decode(const char *hex, unsigned char *out, size_t outcap, size_t *outlen);

/* Session tokens: hex(HMAC-SHA256(key, session_id "\n" expiry)) "." session_id "." expiry.
 * key is the raw session key (the bytes of the hex "session_key" of docs/api.md).
 * make: 0 on success, -1 when out is too small. */
int flyt_session_token_make(const unsigned char *key, size_t keylen, const char *session_id,
                            long long expiry_unix, char *out, size_t outlen);
/* verify: 0 when the token is for session_id, not expired at now_unix and its HMAC
 * verifies; -1 with a reason in err otherwise. */
int flyt_session_token_verify(const unsigned char *key, size_t keylen, const char *token,
                              const char *session_id, long long now_unix, char *err,
                              size_t errlen);

/* The key a session's tokens are signed with once they were revoked epoch times
 * (docs/api.md, "Revoking a session's tokens"): HMAC-SHA256(key, "flyt-session-epoch\n"
 * session_id "\n" epoch), 32 bytes; epoch 0 is key itself. 0, or -1 when out is too small. */
int flyt_session_key_derive(const unsigned char *key, size_t keylen, const char *session_id,
                            long long epoch, unsigned char *out, size_t outcap, size_t *outlen);
/* A session key file (hex, 32 to 2*outcap digits, the owner's alone): 0 with the raw key,
 * or -1 with why. flyt-server reads it at start and again at each admission. */
int flyt_session_key_file_read(const char *path, unsigned char *out, size_t outcap,
                               size_t *outlen, char *why, size_t whylen);

/* Files that hold secrets (tokens, keys, the store) must be the owner's
 * alone. flyt_private_check: 0 when path is missing or neither group nor
 * others may read, write or enter it; else -1 and why names the file, its
 * mode and the fix (chmod 600 / 700). */
int flyt_private_check(const char *path, char *why, size_t whylen);
/* Opens a secret file for reading, refused unless it is a regular file
 * without any of the mode bits refused (0077: the owner's alone; 0007: its
 * group may read it too): NULL with why. */
FILE *flyt_secret_open(const char *path, unsigned refused, char *why, size_t whylen);

/* Token files: one token a line (printable, no spaces); blank lines and lines starting
 * with '#' are skipped. The file is opened with flyt_secret_open(refused). Up to max
 * tokens of min_len..FLYT_TOKEN_LINE_MAX-1 characters go into tokens; their count (>= 1),
 * or -1 with why naming the file (none, too many, a malformed one). Several lines are how
 * an operator rotates a token with no downtime: add the new one, switch, remove the old. */
#define FLYT_TOKEN_LINE_MAX 256
#define FLYT_TOKEN_FILE_MAX 8
typedef char flyt_token_line[FLYT_TOKEN_LINE_MAX];
int flyt_token_file_read(const char *path, unsigned refused, size_t min_len,
                         flyt_token_line *tokens, int max, char *why, size_t whylen);

#endif

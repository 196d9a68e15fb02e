/* Tokens and session tokens: see flyt_token.h. */
#include "flyt_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void flyt_hex_encode(const unsigned char *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * len] = 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int flyt_hex_decode(const char *hex, unsigned char *out, size_t outcap, size_t *outlen)
{
    size_t n = strlen(hex);
    if (n % 2 || n / 2 > outcap)
        return -1;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    if (outlen)
        *outlen = n / 2;
    return 0;
}

int flyt_random_hex(size_t nbytes, char *out, size_t outlen)
{
    if (nbytes == 0 || nbytes > 256 || outlen < 2 * nbytes + 1)
        return -1;
    unsigned char buf[256];
    if (RAND_bytes(buf, (int)nbytes) != 1)
        return -1;
    flyt_hex_encode(buf, nbytes, out);
    OPENSSL_cleanse(buf, nbytes);
    return 0;
}

int flyt_token_new(char *out, size_t outlen)
{
    return flyt_random_hex(FLYT_TOKEN_BYTES, out, outlen);
}

int flyt_sha256_hex(const void *data, size_t len, char *out, size_t outlen)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (outlen < 2 * 32 + 1 || EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) != 1)
        return -1;
    flyt_hex_encode(md, mdlen, out);
    return 0;
}

bool flyt_token_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb)
        return false;
    return CRYPTO_memcmp(a, b, la) == 0;
}

static int session_mac(const unsigned char *key, size_t keylen, const char *session_id,
                       long long expiry, char hex[65])
{
    char msg[512];
    int n = snprintf(msg, sizeof msg, "%s\n%lld", session_id, expiry);
    if (n < 0 || (size_t)n >= sizeof msg)
        return -1;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, (size_t)n, md, &mdlen)
        || mdlen != 32)
        return -1;
    flyt_hex_encode(md, mdlen, hex);
    return 0;
}

int flyt_session_token_make(const unsigned char *key, size_t keylen, const char *session_id,
                            long long expiry_unix, char *out, size_t outlen)
{
    char mac[65];
    if (!*session_id || session_mac(key, keylen, session_id, expiry_unix, mac) < 0)
        return -1;
    int n = snprintf(out, outlen, "%s.%s.%lld", mac, session_id, expiry_unix);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

int flyt_session_token_verify(const unsigned char *key, size_t keylen, const char *token,
                              const char *session_id, long long now_unix, char *err,
                              size_t errlen)
{
    const char *why = NULL;
    size_t len = strlen(token);
    const char *last = strrchr(token, '.');
    if (len < 66 || token[64] != '.' || !last || last <= token + 64) {
        why = "malformed session token";
    } else {
        size_t idlen = (size_t)(last - (token + 65));
        char *end;
        long long expiry = strtoll(last + 1, &end, 10);
        if (idlen != strlen(session_id) || memcmp(token + 65, session_id, idlen) != 0) {
            why = "session token is for another session";
        } else if (!last[1] || *end) {
            why = "malformed session token expiry";
        } else if (expiry <= now_unix) {
            why = "session token expired";
        } else {
            char mac[65];
            if (session_mac(key, keylen, session_id, expiry, mac) < 0
                || CRYPTO_memcmp(mac, token, 64) != 0)
                why = "session token signature does not verify";
        }
    }
    if (why) {
        if (err && errlen)
            snprintf(err, errlen, "%s", why);
        return -1;
    }
    return 0;
}

int flyt_session_key_derive(const unsigned char *key, size_t keylen, const char *session_id,
                            long long epoch, unsigned char *out, size_t outcap, size_t *outlen)
{
    if (epoch == 0) {
        if (keylen > outcap)
            return -1;
        memcpy(out, key, keylen);
        *outlen = keylen;
        return 0;
    }
    char msg[512];
    int n = snprintf(msg, sizeof msg, "flyt-session-epoch\n%s\n%lld", session_id, epoch);
    unsigned int mdlen = 0;
    unsigned char md[EVP_MAX_MD_SIZE];
    if (n < 0 || (size_t)n >= sizeof msg || outcap < 32
        || !HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, (size_t)n, md, &mdlen)
        || mdlen != 32)
        return -1;
    memcpy(out, md, 32);
    OPENSSL_cleanse(md, sizeof md);
    *outlen = 32;
    return 0;
}

int flyt_session_key_file_read(const char *path, unsigned char *out, size_t outcap,
                               size_t *outlen, char *why, size_t whylen)
{
    flyt_token_line line[1];
    if (whylen)
        why[0] = '\0';
    int rc = flyt_token_file_read(path, 0077, 32, line, 1, why, whylen) < 0 ? -1
             : flyt_hex_decode(line[0], out, outcap, outlen);
    OPENSSL_cleanse(line, sizeof line);
    size_t used = strlen(why);
    if (rc != 0 && used + 1 < whylen)
        snprintf(why + used, whylen - used, "%s(it must hold the session key as 32 to %zu hex "
                 "digits, the owner's alone)", used ? " " : "", 2 * outcap);
    return rc;
}

static int private_mode(const char *path, const struct stat *st, unsigned refused, char *why,
                        size_t whylen)
{
    if (!(st->st_mode & refused))
        return 0;
    snprintf(why, whylen, "%s is open to other users (mode %04o) and holds secrets: refusing it; "
             "chmod %s %s", path, (unsigned)(st->st_mode & 07777),
             S_ISDIR(st->st_mode) ? "700" : "600", path);
    return -1;
}

int flyt_private_check(const char *path, char *why, size_t whylen)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0; /* nothing there yet: it is created private */
    return private_mode(path, &st, 0077, why, whylen);
}

FILE *flyt_secret_open(const char *path, unsigned refused, char *why, size_t whylen)
{
    FILE *f = fopen(path, "re");
    struct stat st;
    if (f == NULL) {
        snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, whylen, "%s is not a regular file", path);
        fclose(f);
        return NULL;
    }
    if (private_mode(path, &st, refused, why, whylen) != 0) {
        fclose(f);
        return NULL;
    }
    return f;
}

/* One line of a token file, trimmed: NULL when it holds a token, else why not. */
static const char *token_line_check(char *line, size_t min_len, char **tok)
{
    char *s = line;
    while (*s == ' ' || *s == '\t')
        s++;
    size_t len = strcspn(s, "\r\n");
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    s[len] = '\0';
    *tok = s;
    if (len == 0 || s[0] == '#')
        return "";
    if (len < min_len)
        return "a token is shorter than required";
    if (len >= FLYT_TOKEN_LINE_MAX)
        return "a token is too long";
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return "a token must be one word of printable characters";
    return NULL;
}

int flyt_token_file_read(const char *path, unsigned refused, size_t min_len,
                         flyt_token_line *tokens, int max, char *why, size_t whylen)
{
    FILE *f = flyt_secret_open(path, refused, why, whylen);
    if (!f)
        return -1;
    char line[2 * FLYT_TOKEN_LINE_MAX];
    int n = 0;
    const char *bad = NULL;
    while (!bad && fgets(line, sizeof line, f)) {
        char *tok;
        const char *w = token_line_check(line, min_len, &tok);
        if (w && *w)
            bad = w;
        else if (!w && n == max)
            bad = max == 1 ? "it holds more than one token" : "it holds too many tokens";
        else if (!w)
            snprintf(tokens[n++], FLYT_TOKEN_LINE_MAX, "%s", tok);
    }
    fclose(f);
    OPENSSL_cleanse(line, sizeof line);
    if (!bad && n == 0)
        bad = "it holds no token";
    if (bad) {
        if (min_len && strcmp(bad, "a token is shorter than required") == 0)
            snprintf(why, whylen, "%s: a token must be at least %zu characters", path, min_len);
        else
            snprintf(why, whylen, "%s: %s", path, bad);
        return -1;
    }
    return n;
}

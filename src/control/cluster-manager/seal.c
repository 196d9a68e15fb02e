/* Node secrets sealed at rest: the key file and AES-256-GCM (seal.h). */
#include "seal.h"

#include "flyt_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define KEY_BYTES 32
#define NONCE_BYTES 12
#define TAG_BYTES 16
#define PLAIN_MAX 128

static int hmac32(const unsigned char *key, const void *msg, size_t len, unsigned char out[32])
{
    unsigned int outlen = 0;
    return HMAC(EVP_sha256(), key, KEY_BYTES, msg, len, out, &outlen) && outlen == 32 ? 0 : -1;
}

static int derive(const unsigned char raw[KEY_BYTES], struct seal_key *key)
{
    static const char enc_label[] = "flyt-store-seal-enc", nonce_label[] = "flyt-store-seal-nonce";
    return hmac32(raw, enc_label, sizeof enc_label - 1, key->enc) < 0
                   || hmac32(raw, nonce_label, sizeof nonce_label - 1, key->nonce) < 0
               ? -1 : 0;
}

/* A new key file, made 0600 with O_EXCL: a manager starting beside us at the same moment
 * makes it or finds ours, never half of one. */
static int key_file_create(const char *path, char *err, size_t errlen)
{
    char hex[2 * KEY_BYTES + 2];
    if (flyt_random_hex(KEY_BYTES, hex, sizeof hex - 1) < 0) {
        snprintf(err, errlen, "cannot make a key for %s: no random bytes", path);
        return -1;
    }
    strcat(hex, "\n");
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == EEXIST)
        return 0;
    size_t len = strlen(hex);
    int ok = fd >= 0 && write(fd, hex, len) == (ssize_t)len && fsync(fd) == 0;
    OPENSSL_cleanse(hex, sizeof hex);
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (!ok) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        if (fd >= 0)
            unlink(path);
        return -1;
    }
    return 0;
}

int seal_key_file_load(const char *path, int create, struct seal_key *key, char *err,
                       size_t errlen)
{
    if (create && access(path, F_OK) != 0 && key_file_create(path, err, errlen) < 0)
        return -1;
    flyt_token_line line[1];
    unsigned char raw[KEY_BYTES + 1];
    size_t rawlen = 0;
    char why[1400];
    int rc = flyt_token_file_read(path, 0077, 1, line, 1, why, sizeof why) < 0 ? -1 : 0;
    if (rc == 0 && (flyt_hex_decode(line[0], raw, sizeof raw, &rawlen) < 0
                    || rawlen != KEY_BYTES)) {
        snprintf(why, sizeof why, "%s does not hold a key: it must hold 64 hex digits (32 "
                 "bytes), e.g. made with: openssl rand -hex 32", path);
        rc = -1;
    }
    if (rc == 0 && derive(raw, key) < 0) {
        snprintf(why, sizeof why, "cannot derive the keys of %s", path);
        rc = -1;
    }
    OPENSSL_cleanse(line, sizeof line);
    OPENSSL_cleanse(raw, sizeof raw);
    if (rc < 0)
        snprintf(err, errlen, "%s", why);
    return rc;
}

int seal_key_random(struct seal_key *key)
{
    unsigned char raw[KEY_BYTES];
    int rc = RAND_bytes(raw, sizeof raw) == 1 ? derive(raw, key) : -1;
    OPENSSL_cleanse(raw, sizeof raw);
    return rc;
}

void seal_key_forget(struct seal_key *key)
{
    OPENSSL_cleanse(key, sizeof *key);
}

int seal_is_sealed(const char *text)
{
    return strncmp(text, SEAL_PREFIX, strlen(SEAL_PREFIX)) == 0;
}

/* AES-256-GCM of in (encrypt or decrypt) with ad; the tag is written or checked. */
static int gcm(const struct seal_key *key, int encrypt, const unsigned char nonce[NONCE_BYTES],
               const char *ad, const unsigned char *in, int inlen, unsigned char *out,
               unsigned char tag[TAG_BYTES])
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int len = 0, ok = ctx != NULL
        && EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), NULL, key->enc, nonce, encrypt) == 1
        && EVP_CipherUpdate(ctx, NULL, &len, (const unsigned char *)ad, (int)strlen(ad)) == 1
        && EVP_CipherUpdate(ctx, out, &len, in, inlen) == 1 && len == inlen
        && (encrypt || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_BYTES, tag) == 1)
        && EVP_CipherFinal_ex(ctx, out + len, &len) == 1
        && (!encrypt || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG_BYTES, tag) == 1);
    EVP_CIPHER_CTX_free(ctx);
    return ok ? 0 : -1;
}

int seal_text(const struct seal_key *key, const char *ad, const char *plain, char *out,
              size_t outlen)
{
    size_t n = strlen(plain), prefix = strlen(SEAL_PREFIX);
    if (n == 0) {
        snprintf(out, outlen, "%s", "");
        return 0;
    }
    unsigned char raw[NONCE_BYTES + PLAIN_MAX + TAG_BYTES], md[32];
    char msg[ID_MAX + 32 + PLAIN_MAX + 2];
    int m = snprintf(msg, sizeof msg, "%s\n%s", ad, plain);
    if (n > PLAIN_MAX || m < 0 || (size_t)m >= sizeof msg
        || outlen < prefix + 4 * ((NONCE_BYTES + n + TAG_BYTES + 2) / 3) + 1)
        return -1;
    int rc = hmac32(key->nonce, msg, (size_t)m, md);
    OPENSSL_cleanse(msg, sizeof msg);
    memcpy(raw, md, NONCE_BYTES);
    if (rc == 0)
        rc = gcm(key, 1, raw, ad, (const unsigned char *)plain, (int)n, raw + NONCE_BYTES,
                 raw + NONCE_BYTES + n);
    if (rc == 0) {
        memcpy(out, SEAL_PREFIX, prefix);
        EVP_EncodeBlock((unsigned char *)out + prefix, raw, (int)(NONCE_BYTES + n + TAG_BYTES));
    }
    return rc;
}

int seal_open(const struct seal_key *key, const char *ad, const char *text, char *out,
              size_t outlen)
{
    const char *b64 = text + strlen(SEAL_PREFIX);
    size_t b64len = strlen(b64);
    unsigned char raw[NONCE_BYTES + PLAIN_MAX + TAG_BYTES + 3];
    if (!seal_is_sealed(text) || b64len % 4 != 0 || b64len / 4 * 3 > sizeof raw)
        return -1;
    int len = EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)b64len);
    /* EVP_DecodeBlock counts the bytes of the '=' padding too */
    for (size_t i = b64len; len > 0 && i > 0 && b64[i - 1] == '='; i--)
        len--;
    if (len < NONCE_BYTES + TAG_BYTES + 1)
        return -1;
    size_t n = (size_t)len - NONCE_BYTES - TAG_BYTES;
    if (n + 1 > outlen)
        return -1;
    if (gcm(key, 0, raw, ad, raw + NONCE_BYTES, (int)n, (unsigned char *)out,
            raw + NONCE_BYTES + n) < 0) {
        OPENSSL_cleanse(out, outlen);
        return -1;
    }
    out[n] = '\0';
    return 0;
}

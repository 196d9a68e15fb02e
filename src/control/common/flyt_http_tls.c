/* TLS of flyt_http.h: a server's certificate and key, checked with OpenSSL at load (so
 * that --check-config and the start refuse a bad pair with the file named, before
 * libmicrohttpd's GnuTLS gets it), and the CA file that calls verify servers with. */
#include "flyt_http.h"

#include "flyt_config.h"
#include "flyt_parse.h"
#include "flyt_token.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <microhttpd.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEM_FILE_LIMIT (1u << 20)

/* The whole of f (closed), NUL-terminated; NULL with err when unreadable or too large. */
static char *read_all(FILE *f, const char *what, const char *path, char *err, size_t errlen)
{
    char *text = malloc(PEM_FILE_LIMIT + 1);
    size_t n = text ? fread(text, 1, PEM_FILE_LIMIT + 1, f) : 0;
    int bad = !text || ferror(f) || n > PEM_FILE_LIMIT;
    fclose(f);
    if (bad) {
        flyt_set_reason(err, errlen, "%s %s: %s", what, path,
                        !text ? "out of memory" : n > PEM_FILE_LIMIT ? "larger than 1 MiB"
                                                                     : "read error");
        free(text);
        return NULL;
    }
    text[n] = 0;
    return text;
}

static char *read_pem_file(const char *what, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        flyt_set_reason(err, errlen, "%s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    return read_all(f, what, path, err, errlen);
}

/* A passphrase is never asked for: an encrypted key does not load. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return 0;
}

static X509 *first_cert(const char *pem)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    X509 *x = b ? PEM_read_bio_X509(b, NULL, no_passphrase, NULL) : NULL;
    BIO_free(b);
    return x;
}

/* 0 when cert_pem starts with a certificate whose public key is key_pem's. */
static int check_pair(const struct flyt_http_tls *tls, const char *cert_file,
                      const char *key_file, char *err, size_t errlen)
{
    X509 *x = first_cert(tls->cert_pem);
    BIO *b = BIO_new_mem_buf(tls->key_pem, -1);
    EVP_PKEY *key = b ? PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL) : NULL;
    BIO_free(b);
    int rc = -1;
    if (!x)
        flyt_set_reason(err, errlen, "tls_cert_file %s: no PEM certificate in it", cert_file);
    else if (!key)
        flyt_set_reason(err, errlen, "tls_key_file %s: no unencrypted PEM private key in it",
                        key_file);
    else if (X509_check_private_key(x, key) != 1)
        flyt_set_reason(err, errlen, "tls_key_file %s is not the key of tls_cert_file %s",
                        key_file, cert_file);
    else
        rc = 0;
    EVP_PKEY_free(key);
    X509_free(x);
    return rc;
}

int flyt_http_tls_load(const char *cert_file, const char *key_file, struct flyt_http_tls *tls,
                       char *err, size_t errlen)
{
    memset(tls, 0, sizeof *tls);
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        flyt_set_reason(err, errlen, "tls_cert_file %s: this libmicrohttpd was built without "
                        "TLS (GnuTLS), it cannot serve HTTPS", cert_file);
        return -1;
    }
    char why[PATH_MAX + 256];
    FILE *kf = flyt_secret_open(key_file, 0077, why, sizeof why);
    if (!kf) {
        flyt_set_reason(err, errlen, "tls_key_file: %s", why);
        return -1;
    }
    tls->key_pem = read_all(kf, "tls_key_file", key_file, err, errlen);
    if (tls->key_pem)
        tls->cert_pem = read_pem_file("tls_cert_file", cert_file, err, errlen);
    if (!tls->cert_pem || check_pair(tls, cert_file, key_file, err, errlen) < 0) {
        flyt_http_tls_free(tls);
        return -1;
    }
    return 0;
}

void flyt_http_tls_free(struct flyt_http_tls *tls)
{
    if (tls->key_pem)   /* the key leaves no copy behind in freed memory */
        memset(tls->key_pem, 0, strlen(tls->key_pem));
    free(tls->key_pem);
    free(tls->cert_pem);
    memset(tls, 0, sizeof *tls);
}

int flyt_tls_paths_from_config(const struct flyt_config *cfg, const char *cfgpath,
                               const char *cert_key, const char *key_key, char *cert,
                               char *key, size_t cap, char *err, size_t errlen)
{
    int has_cert = flyt_config_path(cfg, cfgpath, cert_key, cert, cap, err, errlen);
    int has_key = flyt_config_path(cfg, cfgpath, key_key, key, cap, err, errlen);
    if (has_cert < 0 || has_key < 0)
        return -1;
    if (!has_cert && !has_key)
        return 0;
    if (!has_cert || !has_key) {
        const char *given = has_cert ? cert_key : key_key;
        flyt_set_reason(err, errlen, "%s:%d: %s %s is set without %s: give both (TLS) or "
                        "neither (plain)", cfgpath, flyt_config_line(cfg, given), given,
                        has_cert ? cert : key, has_cert ? key_key : cert_key);
        return -1;
    }
    struct flyt_http_tls probe;
    char why[2 * PATH_MAX + 256];
    if (flyt_http_tls_load(cert, key, &probe, why, sizeof why) < 0) {
        flyt_set_reason(err, errlen, "%s: %s", cfgpath, why);
        return -1;
    }
    flyt_http_tls_free(&probe);
    return 1;
}

int flyt_http_tls_from_config(const struct flyt_config *cfg, const char *cfgpath,
                              struct flyt_http_tls *tls, char *err, size_t errlen)
{
    char cert[PATH_MAX], key[PATH_MAX];
    memset(tls, 0, sizeof *tls);
    int rc = flyt_tls_paths_from_config(cfg, cfgpath, "tls_cert_file", "tls_key_file", cert, key,
                                        sizeof cert, err, errlen);
    if (rc <= 0)
        return rc;
    char why[2 * PATH_MAX + 256];
    if (flyt_http_tls_load(cert, key, tls, why, sizeof why) < 0) {
        flyt_set_reason(err, errlen, "%s: %s", cfgpath, why);
        return -1;
    }
    return 0;
}

/* ---- the callers' CA ---- */

static char client_ca[PATH_MAX];   /* "": the system's store */

const char *flyt_http_client_ca_file(void) { return client_ca[0] ? client_ca : NULL; }

int flyt_http_client_ca(const char *ca_file, char *err, size_t errlen)
{
    if (!ca_file || !ca_file[0]) {
        client_ca[0] = 0;
        return 0;
    }
    if (strlen(ca_file) >= sizeof client_ca) {
        flyt_set_reason(err, errlen, "CA file %s: path too long", ca_file);
        return -1;
    }
    char *pem = read_pem_file("CA file", ca_file, err, errlen);
    if (!pem)
        return -1;
    X509 *x = first_cert(pem);
    free(pem);
    if (!x) {
        flyt_set_reason(err, errlen, "CA file %s: no PEM certificate in it", ca_file);
        return -1;
    }
    X509_free(x);
    snprintf(client_ca, sizeof client_ca, "%s", ca_file);
    return 0;
}

int flyt_http_client_ca_from_config(const struct flyt_config *cfg, const char *cfgpath,
                                    const char *name, char *err, size_t errlen)
{
    char path[PATH_MAX], why[PATH_MAX + 256];
    int has = flyt_config_path(cfg, cfgpath, name, path, sizeof path, err, errlen);
    if (has < 0)
        return -1;
    if (flyt_http_client_ca(has ? path : NULL, why, sizeof why) < 0) {
        flyt_set_reason(err, errlen, "%s:%d: %s: %s", cfgpath, flyt_config_line(cfg, name), name,
                        why);
        return -1;
    }
    return 0;
}

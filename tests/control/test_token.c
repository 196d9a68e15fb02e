/* flyt_token: random tokens, SHA-256, constant-time compare, session tokens. */
#include "check.h"
#include "flyt_token.h"

#include <string.h>

int main(void)
{
    char a[65], b[65], h[65];
    CHECK_EQ(flyt_token_new(a, sizeof a), 0, "token is 64 hex chars");
    CHECK_EQ(strlen(a), 64, "token is 64 hex chars");
    CHECK_EQ(flyt_token_new(b, sizeof b), 0, "two tokens differ");
    CHECK(strcmp(a, b) != 0, "two tokens differ");
    CHECK_EQ(strspn(a, "0123456789abcdef"), 64, "lowercase hex");
    CHECK_EQ(flyt_token_new(a, 64), -1, "refuses a small buffer");

    CHECK_EQ(flyt_sha256_hex("abc", 3, h, sizeof h), 0,
          "SHA-256(abc) matches the FIPS 180-2 vector");
    CHECK_STR_EQ(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
          "SHA-256(abc) matches the FIPS 180-2 vector");
    CHECK(flyt_token_equal("abc", "abc") && !flyt_token_equal("abc", "abd")
              && !flyt_token_equal("abc", "abcd"), "constant-time equality");

    unsigned char key[32];
    size_t klen;
    CHECK_EQ(flyt_hex_decode(a, key, sizeof key, &klen), 0, "hex decode");
    CHECK_EQ(klen, 32, "hex decode");
    CHECK_EQ(flyt_hex_decode("abc", key, sizeof key, &klen), -1, "odd length refused");
    CHECK_EQ(flyt_hex_decode("zz", key, sizeof key, &klen), -1, "non-hex refused");

    char tok[256];
    CHECK_EQ(flyt_session_token_make((const unsigned char *)"Jefe", 4, "s-1", 2000000000, tok,
                                  sizeof tok), 0, "make");
    CHECK_EQ(strlen(tok), 64 + 1 + 3 + 1 + 10, "format %s", tok);
    CHECK(strstr(tok, ".s-1.2000000000"), "format %s", tok);
    char err[128];
    CHECK_EQ(flyt_session_token_verify((const unsigned char *)"Jefe", 4, tok, "s-1", 1999999999,
                                    err, sizeof err), 0, "verifies");
    CHECK_EQ(flyt_session_token_verify((const unsigned char *)"Jefe", 4, tok, "s-1", 2000000000, err, sizeof err), -1, "expired: %s", err);
    CHECK(strstr(err, "expired"), "expired: %s", err);
    CHECK_EQ(flyt_session_token_verify((const unsigned char *)"Jefe", 4, tok, "s-2", 0, err, sizeof err), -1, "other id: %s", err);
    CHECK(strstr(err, "another session"), "other id: %s", err);
    CHECK_EQ(flyt_session_token_verify((const unsigned char *)"Jeff", 4, tok, "s-1", 0, err, sizeof err), -1, "other key: %s", err);
    CHECK(strstr(err, "signature"), "other key: %s", err);
    char forged[256];
    snprintf(forged, sizeof forged, "%.64s.s-1.2000000001", tok);
    CHECK_EQ(flyt_session_token_verify((const unsigned char *)"Jefe", 4, forged, "s-1", 0, err, sizeof err), -1, "changed expiry: %s", err);
    CHECK(strstr(err, "signature"), "changed expiry: %s", err);
    CHECK_EQ(flyt_session_token_verify((const unsigned char *)"Jefe", 4, "short", "s-1", 0, err, sizeof err), -1, "malformed: %s", err);
    CHECK(strstr(err, "malformed"), "malformed: %s", err);
    /* the MAC part is HMAC-SHA256(key, "s-1\n2000000000"), as computed by
     * `printf 's-1\n2000000000' | openssl dgst -sha256 -hmac Jefe` */
    CHECK_EQ(strncmp(tok, "68020dab9b4c52cebd045a26ac569d8350cadf7310fec593f42f83888123794c", 64), 0,
          "MAC matches openssl's HMAC");
    printf("test_token: all passed\n");
    return 0;
}

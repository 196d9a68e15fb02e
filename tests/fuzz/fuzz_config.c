/*
 * libFuzzer target: the text parsers an operator's files and a client's
 * first bytes reach — a daemon configuration file (every value type, with
 * sections and quotes), the value parsers behind it, server addresses, and
 * session-token verification. Any input must be refused or accepted
 * without a memory error, a leak or undefined behaviour.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flyt_config.h"
#include "flyt_parse.h"
#include "flyt_token.h"
#include "flyt_transport.h"

static const struct flyt_cfg_key keys[] = {
    {"listen", FLYT_CFG_STRING, "0.0.0.0:8600", "address", false, 0, 0},
    {"workers", FLYT_CFG_INT, "4", "count", false, 1, 64},
    {"debug", FLYT_CFG_BOOL, "false", "flag", false, 0, 0},
    {"store.url", FLYT_CFG_STRING, NULL, "where", false, 0, 0},
    {"store.cache", FLYT_CFG_SIZE, "1GiB", "bytes", false, 0, 0},
    {"node.heartbeat", FLYT_CFG_DURATION, "5s", "period", false, 0, 0},
    {NULL, FLYT_CFG_STRING, NULL, NULL, false, 0, 0},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[256];

    struct flyt_config *cfg = flyt_config_new(keys);
    if (cfg != NULL) {
        flyt_config_parse(cfg, "fuzz.conf", text, err, sizeof err);
        flyt_config_free(cfg);
    }
    long long i;
    bool b;
    uint64_t u;
    flyt_parse_int(text, &i, err, sizeof err);
    flyt_parse_bool(text, &b, err, sizeof err);
    flyt_parse_size(text, &u, err, sizeof err);
    flyt_parse_duration_ms(text, &u, err, sizeof err);
    flyt_addr addr;
    flyt_addr_parse(text, &addr, err, sizeof err);
    static const unsigned char key[32] = {1, 2, 3};
    flyt_session_token_verify(key, sizeof key, text, "s-0123456789abcdef", 1700000000, err,
                              sizeof err);
    unsigned char raw[64];
    size_t raw_len;
    flyt_hex_decode(text, raw, sizeof raw, &raw_len);
    free(text);
    return 0;
}

/* Store: rotation and revocation of VM and node tokens, sessions' token epochs. */
#include "store.h"

#include "flyt_token.h"

#include <stdio.h>

static const char *owner_table(enum token_owner owner)
{
    return owner == TOKEN_OF_VM ? "vms" : "nodes";
}

/* 1 when the UPDATE changed a row (db_exec answers the count), 0 when none, < 0: error. */
static int update_one(struct store *st, const char *sql, const struct db_arg *a, int nargs,
                      char *err, size_t errlen)
{
    int rc = db_exec(store_db_(st), sql, a, nargs, NULL, err, errlen);
    return rc < 0 ? rc : rc > 0;
}

int store_token_rotate(struct store *st, enum token_owner owner, const char *id,
                       const char *new_hash, long long old_until, char *err, size_t errlen)
{
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE %s SET old_token_hash = token_hash, old_token_until = ?,"
             " token_hash = ? WHERE id = ?", owner_table(owner));
    struct db_arg a[] = {DB_I(old_until), DB_S(new_hash), DB_S(id)};
    return update_one(st, sql, a, 3, err, errlen);
}

int store_token_revoke(struct store *st, enum token_owner owner, const char *id, int old_only,
                       char *err, size_t errlen)
{
    /* no token hashes to "revoked:..." (hashes are hex), and it is unique as the column asks */
    char none[80] = "revoked:", rnd[33];
    if (flyt_random_hex(16, rnd, sizeof rnd) < 0) {
        snprintf(err, errlen, "the random number generator failed");
        return DB_ERR;
    }
    snprintf(none + 8, sizeof none - 8, "%s", rnd);
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE %s SET old_token_hash = NULL, old_token_until = 0%s"
             " WHERE id = ?", owner_table(owner), old_only ? "" : ", token_hash = ?");
    struct db_arg with_new[] = {DB_S(none), DB_S(id)}, only_id[] = {DB_S(id)};
    return old_only ? update_one(st, sql, only_id, 1, err, errlen)
                    : update_one(st, sql, with_new, 2, err, errlen);
}

int store_session_token_epoch(struct store *st, const char *id, long long *epoch, char *err,
                              size_t errlen)
{
    struct db_rows r;
    struct db_arg a[] = {DB_S(id)};
    int rc = db_exec(store_db_(st), "SELECT token_epoch FROM sessions WHERE id = ?", a, 1, &r,
                     err, errlen);
    if (rc < 0)
        return rc;
    int found = r.nrows > 0;
    *epoch = found ? db_cell_int(&r, 0, 0) : 0;
    db_rows_free(&r);
    return found;
}

int store_session_token_epoch_next(struct store *st, const char *id, long long *epoch,
                                   char *err, size_t errlen)
{
    struct db_arg a[] = {DB_S(id)};
    int rc = update_one(st, "UPDATE sessions SET token_epoch = token_epoch + 1 WHERE id = ?", a,
                        1, err, errlen);
    if (rc <= 0)
        return rc;
    return store_session_token_epoch(st, id, epoch, err, errlen);
}

/* Store: nodes and their GPUs. A node's session_key and manager_token are sealed at rest
 * (seal.h) with the store's key: sealed on the way in, opened on the way out. */
#include "seal.h"
#include "store.h"

#include <openssl/crypto.h>

#include <stdio.h>
#include <stdlib.h>

#define NODE_COLS "id, host_ip, address, state, last_heartbeat, created_at, session_key, manager_token"

/* The two sealed columns; their name and the node's id are the associated data. */
static const char *const secret_cols[] = {"session_key", "manager_token"};
#define NSECRETS 2

static void secret_ad(const char *col, const char *node_id, char *ad, size_t adlen)
{
    snprintf(ad, adlen, "%s:%s", col, node_id);
}

/* A stored value of node_id's column col as the node's secret: opened when sealed, as is
 * when plain (a store not sealed yet: store_nodes_seal seals it at start). */
static int secret_open(struct store *st, const char *node_id, int col, const char *stored,
                       char *out, size_t outlen, char *err, size_t errlen)
{
    const struct seal_key *key = store_db_(st)->seal;
    char ad[ID_MAX + 32];
    secret_ad(secret_cols[col], node_id, ad, sizeof ad);
    if (!seal_is_sealed(stored)) {
        store_copy_(out, outlen, stored);
        return 0;
    }
    if (key && seal_open(key, ad, stored, out, outlen) == 0)
        return 0;
    if (key)
        snprintf(err, errlen, "store_key_file does not match the key the store was sealed with"
                 " (node %s's %s does not open with it)", node_id, secret_cols[col]);
    else
        snprintf(err, errlen, "node %s's %s is sealed and no store key was given", node_id,
                 secret_cols[col]);
    return DB_ERR;
}

/* The secret as the store keeps it: sealed, or as given when the store has no key. */
static int secret_seal(struct store *st, const char *node_id, int col, const char *plain,
                       char *out, size_t outlen, char *err, size_t errlen)
{
    const struct seal_key *key = store_db_(st)->seal;
    char ad[ID_MAX + 32];
    secret_ad(secret_cols[col], node_id, ad, sizeof ad);
    if (!key) {
        store_copy_(out, outlen, plain);
        return 0;
    }
    if (seal_text(key, ad, plain, out, outlen) == 0)
        return 0;
    snprintf(err, errlen, "node %s: cannot seal its %s", node_id, secret_cols[col]);
    return DB_ERR;
}

/* A node's two secrets sealed for the store. */
struct node_sealed {
    char v[NSECRETS][SEAL_TEXT_MAX];
};

static int node_seal(struct store *st, const struct node_rec *n, struct node_sealed *s,
                     char *err, size_t errlen)
{
    const char *plain[NSECRETS] = {n->session_key, n->manager_token};
    for (int c = 0; c < NSECRETS; c++)
        if (secret_seal(st, n->id, c, plain[c], s->v[c], sizeof s->v[c], err, errlen) < 0)
            return DB_ERR;
    return 0;
}

static int node_from_row(struct store *st, const struct db_rows *r, int i, struct node_rec *n,
                         char *err, size_t errlen)
{
    store_copy_(n->id, sizeof n->id, db_cell(r, i, 0));
    store_copy_(n->host_ip, sizeof n->host_ip, db_cell(r, i, 1));
    store_copy_(n->address, sizeof n->address, db_cell(r, i, 2));
    if (node_state_parse(db_cell(r, i, 3), &n->state) < 0)
        n->state = NODE_LOST;   /* a name this version does not know: no capacity */
    n->last_heartbeat = db_cell_int(r, i, 4);
    n->created_at = db_cell_int(r, i, 5);
    if (secret_open(st, n->id, 0, db_cell(r, i, 6), n->session_key, sizeof n->session_key, err,
                    errlen) < 0
        || secret_open(st, n->id, 1, db_cell(r, i, 7), n->manager_token, sizeof n->manager_token,
                       err, errlen) < 0)
        return DB_ERR;
    return 0;
}

static int node_one_args(struct store *st, const char *sql, const struct db_arg *a, int nargs,
                    struct node_rec *node, char *err, size_t errlen)
{
    struct db_rows r;
    struct node_rec scratch;
    int rc = db_exec(store_db_(st), sql, a, nargs, &r, err, errlen);
    if (rc < 0)
        return rc;
    int found = r.nrows > 0;
    if (found && node_from_row(st, &r, 0, node ? node : &scratch, err, errlen) < 0)
        found = DB_ERR;
    OPENSSL_cleanse(&scratch, sizeof scratch);
    db_rows_free(&r);
    return found;
}

static int node_one(struct store *st, const char *sql, const char *arg, struct node_rec *node,
                    char *err, size_t errlen)
{
    struct db_arg a[] = {DB_S(arg)};
    return node_one_args(st, sql, a, 1, node, err, errlen);
}

int store_node_insert(struct store *st, const struct node_rec *n, const char *token_hash,
                      char *err, size_t errlen)
{
    struct node_sealed s;
    if (node_seal(st, n, &s, err, errlen) < 0)
        return DB_ERR;
    struct db_arg a[] = {DB_S(n->id), DB_S(n->host_ip), DB_SN(n->address), DB_S(node_state_name(n->state)),
                         DB_I(n->last_heartbeat), DB_I(n->created_at), DB_SN(s.v[0]),
                         DB_SN(s.v[1]), DB_S(token_hash)};
    return db_exec(store_db_(st),
                   "INSERT INTO nodes (" NODE_COLS ", token_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   a, 9, NULL, err, errlen);
}

int store_node_update(struct store *st, const struct node_rec *n, char *err, size_t errlen)
{
    struct node_sealed s;
    if (node_seal(st, n, &s, err, errlen) < 0)
        return DB_ERR;
    struct db_arg a[] = {DB_S(n->host_ip), DB_SN(n->address), DB_S(node_state_name(n->state)),
                         DB_I(n->last_heartbeat), DB_SN(s.v[0]), DB_SN(s.v[1]),
                         DB_S(n->id)};
    return db_exec(store_db_(st),
                   "UPDATE nodes SET host_ip = ?, address = ?, state = ?, last_heartbeat = ?,"
                   " session_key = ?, manager_token = ? WHERE id = ?", a, 7, NULL, err, errlen);
}

/* One node's plain secrets sealed in place: how many; DB_ERR when a sealed one does not
 * open. The UPDATE only replaces the plain value it read. */
static int node_row_seal(struct store *st, const struct db_rows *r, int i, char *err,
                         size_t errlen)
{
    static const char *const update_sql[NSECRETS] = {
        "UPDATE nodes SET session_key = ? WHERE id = ? AND session_key = ?",
        "UPDATE nodes SET manager_token = ? WHERE id = ? AND manager_token = ?"};
    const char *id = db_cell(r, i, 0);
    int sealed = 0;
    for (int c = 0; c < NSECRETS; c++) {
        const char *stored = db_cell(r, i, 1 + c);
        char plain[SEAL_TEXT_MAX], s[SEAL_TEXT_MAX];
        int rc = secret_open(st, id, c, stored, plain, sizeof plain, err, errlen);
        if (rc == 0 && !seal_is_sealed(stored) && stored[0]) {
            rc = secret_seal(st, id, c, plain, s, sizeof s, err, errlen);
            struct db_arg a[] = {DB_S(s), DB_S(id), DB_S(stored)};
            if (rc == 0)
                rc = db_exec(store_db_(st), update_sql[c], a, 3, NULL, err, errlen);
            sealed += rc > 0;
        }
        OPENSSL_cleanse(plain, sizeof plain);
        if (rc < 0)
            return rc;
    }
    return sealed;
}

int store_nodes_seal(struct store *st, const struct seal_key *key, char *err, size_t errlen)
{
    store_db_(st)->seal = key;
    if (store_begin(st, err, errlen) < 0)
        return DB_ERR;
    struct db_rows r;
    int sealed = db_exec(store_db_(st), "SELECT id, session_key, manager_token FROM nodes",
                         NULL, 0, &r, err, errlen);
    if (sealed < 0) {
        store_rollback(st);
        return sealed;
    }
    sealed = 0;
    for (int i = 0; i < r.nrows && sealed >= 0; i++) {
        int rc = node_row_seal(st, &r, i, err, errlen);
        sealed = rc < 0 ? rc : sealed + rc;
    }
    db_rows_free(&r);
    if (sealed < 0) {
        store_rollback(st);
        return sealed;
    }
    return store_commit(st, err, errlen) < 0 ? DB_ERR : sealed;
}

int store_node_delete(struct store *st, const char *id, char *err, size_t errlen)
{
    struct db_arg a[] = {DB_S(id)};
    /* GPUs explicitly too: SQLite enforces ON DELETE CASCADE only with foreign_keys on */
    int rc = db_exec(store_db_(st), "DELETE FROM gpus WHERE node_id = ?", a, 1, NULL, err, errlen);
    if (rc < 0)
        return rc;
    return db_exec(store_db_(st), "DELETE FROM nodes WHERE id = ?", a, 1, NULL, err, errlen);
}

int store_node_get(struct store *st, const char *id, struct node_rec *node, char *err,
                   size_t errlen)
{
    return node_one(st, "SELECT " NODE_COLS " FROM nodes WHERE id = ?", id, node, err, errlen);
}

int store_node_by_token(struct store *st, const char *token_hash, struct node_rec *node,
                    char *err, size_t errlen)
{
    struct db_arg a[] = {DB_S(token_hash), DB_S(token_hash), DB_I(store_now_ms_())};
    return node_one_args(st, "SELECT " NODE_COLS " FROM nodes WHERE token_hash = ? OR"
                  " (old_token_hash = ? AND old_token_until > ?)", a, 3, node, err, errlen);
}

int store_node_list(struct store *st, struct node_rec **out, int *n, char *err, size_t errlen)
{
    struct db_rows r;
    *out = NULL;
    *n = 0;
    int rc = db_exec(store_db_(st), "SELECT " NODE_COLS " FROM nodes ORDER BY id", NULL, 0, &r,
                     err, errlen);
    if (rc < 0)
        return rc;
    *out = calloc((size_t)(r.nrows ? r.nrows : 1), sizeof **out);
    if (!*out) {
        db_rows_free(&r);
        return DB_ERR;
    }
    int nrows = r.nrows;
    for (int i = 0; i < nrows && rc >= 0; i++)
        rc = node_from_row(st, &r, i, &(*out)[i], err, errlen);
    db_rows_free(&r);
    if (rc < 0) {
        OPENSSL_cleanse(*out, (size_t)nrows * sizeof **out);
        free(*out);
        *out = NULL;
        return rc;
    }
    *n = nrows;
    return 0;
}

int store_gpus_set(struct store *st, const char *node_id, const struct gpu_rec *gpus, int n,
                   char *err, size_t errlen)
{
    struct db_arg id[] = {DB_S(node_id)};
    int rc = db_exec(store_db_(st), "DELETE FROM gpus WHERE node_id = ?", id, 1, NULL, err, errlen);
    for (int i = 0; rc >= 0 && i < n; i++) {
        struct db_arg a[] = {DB_S(node_id), DB_I(gpus[i].index), DB_S(gpus[i].uuid),
                             DB_S(gpus[i].name), DB_I(gpus[i].sm_count),
                             DB_I(gpus[i].sm_granularity), DB_I(gpus[i].memory_total),
                             DB_I(gpus[i].compute_capability)};
        rc = db_exec(store_db_(st),
                     "INSERT INTO gpus (node_id, idx, uuid, name, sm_count, sm_granularity,"
                     " memory_total, compute_capability) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", a, 8,
                     NULL, err, errlen);
    }
    return rc < 0 ? rc : 0;
}

int store_gpus_get(struct store *st, const char *node_id, struct gpu_rec **out, int *n, char *err,
                   size_t errlen)
{
    struct db_rows r;
    struct db_arg a[] = {DB_S(node_id)};
    *out = NULL;
    *n = 0;
    int rc = db_exec(store_db_(st),
                     "SELECT idx, uuid, name, sm_count, sm_granularity, memory_total,"
                     " compute_capability FROM gpus"
                     " WHERE node_id = ? ORDER BY idx", a, 1, &r, err, errlen);
    if (rc < 0)
        return rc;
    *out = calloc((size_t)(r.nrows ? r.nrows : 1), sizeof **out);
    if (!*out) {
        db_rows_free(&r);
        return DB_ERR;
    }
    for (int i = 0; i < r.nrows; i++) {
        struct gpu_rec *g = &(*out)[i];
        g->index = (int)db_cell_int(&r, i, 0);
        store_copy_(g->uuid, sizeof g->uuid, db_cell(&r, i, 1));
        store_copy_(g->name, sizeof g->name, db_cell(&r, i, 2));
        g->sm_count = (int)db_cell_int(&r, i, 3);
        g->sm_granularity = (int)db_cell_int(&r, i, 4);
        g->memory_total = db_cell_int(&r, i, 5);
        g->compute_capability = (int)db_cell_int(&r, i, 6);
    }
    *n = r.nrows;
    db_rows_free(&r);
    return 0;
}

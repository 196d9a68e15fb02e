/* Store: nodes and their GPUs. */
#include "store.h"

#include <stdlib.h>

#define NODE_COLS "id, host_ip, address, state, last_heartbeat, created_at, session_key, manager_token"

static void node_from_row(const struct db_rows *r, int i, struct node_rec *n)
{
    store_copy_(n->id, sizeof n->id, db_cell(r, i, 0));
    store_copy_(n->host_ip, sizeof n->host_ip, db_cell(r, i, 1));
    store_copy_(n->address, sizeof n->address, db_cell(r, i, 2));
    if (node_state_parse(db_cell(r, i, 3), &n->state) < 0)
        n->state = NODE_LOST;   /* a name this version does not know: no capacity */
    n->last_heartbeat = db_cell_int(r, i, 4);
    n->created_at = db_cell_int(r, i, 5);
    store_copy_(n->session_key, sizeof n->session_key, db_cell(r, i, 6));
    store_copy_(n->manager_token, sizeof n->manager_token, db_cell(r, i, 7));
}

static int node_one_args(struct store *st, const char *sql, const struct db_arg *a, int nargs,
                    struct node_rec *node, char *err, size_t errlen)
{
    struct db_rows r;
    int rc = db_exec(store_db_(st), sql, a, nargs, &r, err, errlen);
    if (rc < 0)
        return rc;
    int found = r.nrows > 0;
    if (found && node)
        node_from_row(&r, 0, node);
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
    struct db_arg a[] = {DB_S(n->id), DB_S(n->host_ip), DB_SN(n->address), DB_S(node_state_name(n->state)),
                         DB_I(n->last_heartbeat), DB_I(n->created_at), DB_SN(n->session_key),
                         DB_SN(n->manager_token), DB_S(token_hash)};
    return db_exec(store_db_(st),
                   "INSERT INTO nodes (" NODE_COLS ", token_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   a, 9, NULL, err, errlen);
}

int store_node_update(struct store *st, const struct node_rec *n, char *err, size_t errlen)
{
    struct db_arg a[] = {DB_S(n->host_ip), DB_SN(n->address), DB_S(node_state_name(n->state)),
                         DB_I(n->last_heartbeat), DB_SN(n->session_key), DB_SN(n->manager_token),
                         DB_S(n->id)};
    return db_exec(store_db_(st),
                   "UPDATE nodes SET host_ip = ?, address = ?, state = ?, last_heartbeat = ?,"
                   " session_key = ?, manager_token = ? WHERE id = ?", a, 7, NULL, err, errlen);
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
    for (int i = 0; i < r.nrows; i++)
        node_from_row(&r, i, &(*out)[i]);
    *n = r.nrows;
    db_rows_free(&r);
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
                             DB_I(gpus[i].sm_granularity), DB_I(gpus[i].memory_total)};
        rc = db_exec(store_db_(st),
                     "INSERT INTO gpus (node_id, idx, uuid, name, sm_count, sm_granularity,"
                     " memory_total) VALUES (?, ?, ?, ?, ?, ?, ?)", a, 7, NULL, err, errlen);
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
                     "SELECT idx, uuid, name, sm_count, sm_granularity, memory_total FROM gpus"
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
    }
    *n = r.nrows;
    db_rows_free(&r);
    return 0;
}

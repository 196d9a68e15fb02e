/* Store: capacity reservations of migrations and restores in flight (store.h). */
#include "store.h"

#include <stdlib.h>
#include <string.h>

#define RESERVATION_COLS "session_id, kind, vm_id, node_id, gpu_index, sm_count, sm_groups," \
                         " memory_quota, from_node, stream, created_at"

static void reservation_row(const struct db_rows *r, int i, void *rec)
{
    struct reservation_rec *v = rec;
    memset(v, 0, sizeof *v);
    store_copy_(v->session_id, sizeof v->session_id, db_cell(r, i, 0));
    v->kind = strcmp(db_cell(r, i, 1), "restore") == 0 ? RES_RESTORE : RES_MIGRATE;
    store_copy_(v->vm_id, sizeof v->vm_id, db_cell(r, i, 2));
    store_copy_(v->node_id, sizeof v->node_id, db_cell(r, i, 3));
    v->gpu_index = (int)db_cell_int(r, i, 4);
    v->sm_count = (int)db_cell_int(r, i, 5);
    int n = groups_parse(db_cell(r, i, 6), v->groups, MAX_SM_GROUPS);
    v->ngroups = n < 0 ? 0 : n;
    v->memory_quota = db_cell_int(r, i, 7);
    store_copy_(v->from_node, sizeof v->from_node, db_cell(r, i, 8));
    v->stream = (int)db_cell_int(r, i, 9);
    v->created_at = db_cell_int(r, i, 10);
}

int store_reservation_put(struct store *st, const struct reservation_rec *v, char *err,
                          size_t errlen)
{
    if (store_reservation_delete(st, v->session_id, err, errlen) < 0)
        return DB_ERR;
    char groups[MAX_SM_GROUPS * 4 + 1];
    groups_format(v->groups, v->ngroups, groups, sizeof groups);
    struct db_arg a[] = {DB_S(v->session_id), DB_S(v->kind == RES_RESTORE ? "restore" : "migrate"),
                         DB_S(v->vm_id), DB_S(v->node_id), DB_I(v->gpu_index), DB_I(v->sm_count),
                         DB_S(groups), DB_I(v->memory_quota), DB_SN(v->from_node), DB_I(v->stream),
                         DB_I(v->created_at ? v->created_at : store_now_ms_())};
    return db_exec(store_db_(st),
                   "INSERT INTO reservations (" RESERVATION_COLS ") VALUES"
                   " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", a, 11, NULL, err, errlen);
}

int store_reservation_delete(struct store *st, const char *session_id, char *err, size_t errlen)
{
    struct db_arg a[] = {DB_S(session_id)};
    return db_exec(store_db_(st), "DELETE FROM reservations WHERE session_id = ?", a, 1, NULL,
                   err, errlen);
}

static int reservation_select(struct store *st, const char *where_col, const char *value,
                              struct reservation_rec **out, int *n, char *err, size_t errlen)
{
    char sql[512] = "SELECT " RESERVATION_COLS " FROM reservations";
    struct db_arg a[1];
    int na = 0;
    if (value) {
        strcat(sql, strcmp(where_col, "node_id") == 0 ? " WHERE node_id = ?"
                                                      : " WHERE session_id = ?");
        a[na++] = DB_S(value);
    }
    strcat(sql, " ORDER BY created_at, session_id");
    void *rows;
    int rc = store_select_(st, sql, a, na, sizeof **out, reservation_row, &rows, n, err, errlen);
    *out = rows;
    return rc;
}

int store_reservation_get(struct store *st, const char *session_id, struct reservation_rec *v,
                          char *err, size_t errlen)
{
    struct reservation_rec *all;
    int n;
    if (reservation_select(st, "session_id", session_id, &all, &n, err, errlen) < 0)
        return DB_ERR;
    if (n)
        *v = all[0];
    free(all);
    return n > 0;
}

int store_reservation_list(struct store *st, const char *node_id, struct reservation_rec **out,
                           int *n, char *err, size_t errlen)
{
    return reservation_select(st, "node_id", node_id, out, n, err, errlen);
}

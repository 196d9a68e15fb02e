/* Store: the share requests of VMs' programs (docs/api.md, "App-requested scaling"). */
#include "store.h"

#include <stdlib.h>
#include <string.h>

#define REQUEST_COLS "id, vm_id, sm_ask, memory_ask, reason, sm_target, memory_target, state," \
                     " message, created_at, updated_at"

static void request_from_row(const struct db_rows *r, int i, struct request_rec *q)
{
    memset(q, 0, sizeof *q);
    store_copy_(q->id, sizeof q->id, db_cell(r, i, 0));
    store_copy_(q->vm_id, sizeof q->vm_id, db_cell(r, i, 1));
    store_copy_(q->sm_ask, sizeof q->sm_ask, db_cell(r, i, 2));
    store_copy_(q->memory_ask, sizeof q->memory_ask, db_cell(r, i, 3));
    store_copy_(q->reason, sizeof q->reason, db_cell(r, i, 4));
    q->sm_target = db_cell_int(r, i, 5);
    q->memory_target = db_cell_int(r, i, 6);
    if (request_state_parse_(db_cell(r, i, 7), &q->state) < 0)
        q->state = REQ_CANCELLED;   /* a name this version does not know: not pending */
    store_copy_(q->message, sizeof q->message, db_cell(r, i, 8));
    q->created_at = db_cell_int(r, i, 9);
    q->updated_at = db_cell_int(r, i, 10);
}

static void request_row(const struct db_rows *r, int i, void *rec)
{
    request_from_row(r, i, rec);
}

int store_request_insert(struct store *st, const struct request_rec *q, char *err, size_t errlen)
{
    struct db_arg a[] = {DB_S(q->id), DB_S(q->vm_id), DB_SN(q->sm_ask), DB_SN(q->memory_ask),
                         DB_SN(q->reason), DB_I(q->sm_target), DB_I(q->memory_target),
                         DB_S(request_state_name(q->state)), DB_SN(q->message),
                         DB_I(q->created_at), DB_I(q->updated_at)};
    return db_exec(store_db_(st),
                   "INSERT INTO share_requests (" REQUEST_COLS ") VALUES"
                   " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", a, 11, NULL, err, errlen);
}

int store_request_update(struct store *st, const struct request_rec *q, char *err, size_t errlen)
{
    struct db_arg a[] = {DB_I(q->sm_target), DB_I(q->memory_target),
                         DB_S(request_state_name(q->state)), DB_SN(q->message),
                         DB_I(q->updated_at), DB_S(q->id)};
    return db_exec(store_db_(st),
                   "UPDATE share_requests SET sm_target = ?, memory_target = ?, state = ?,"
                   " message = ?, updated_at = ? WHERE id = ?", a, 6, NULL, err, errlen);
}

int store_request_list(struct store *st, const char *vm_id, int by_state, enum request_state state,
                       struct request_rec **out, int *n, char *err, size_t errlen)
{
    char sql[512] = "SELECT " REQUEST_COLS " FROM share_requests WHERE 1 = 1";
    struct db_arg a[2];
    int na = 0;
    if (vm_id) {
        strcat(sql, " AND vm_id = ?");
        a[na++] = DB_S(vm_id);
    }
    if (by_state) {
        strcat(sql, " AND state = ?");
        a[na++] = DB_S(request_state_name(state));
    }
    strcat(sql, " ORDER BY created_at, id");
    void *rows;
    int rc = store_select_(st, sql, a, na, sizeof **out, request_row, &rows, n, err, errlen);
    *out = rows;
    return rc;
}

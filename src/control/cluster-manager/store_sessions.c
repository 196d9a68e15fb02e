/* Store: sessions. A session is live while its state is "starting" or "active"; only live
 * sessions hold GPU capacity (store.h, INVARIANT). */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SESSION_COLS "id, vm_id, pid, process, node_id, gpu_index, sm_count, sm_groups," \
                     " memory_quota, endpoint, server_pid, state, created_at, last_activity," \
                     " ended_at, disconnected_since, end_reason"
/* read only: written by store_session_token_epoch_next alone */
#define SESSION_READ_COLS SESSION_COLS ", token_epoch"
#define LIVE_STATES "('starting', 'active', 'migrating')"

int session_is_live(const struct session_rec *s)
{
    return s->state == SESSION_STARTING || s->state == SESSION_ACTIVE
           || s->state == SESSION_MIGRATING;
}

static void session_from_row(const struct db_rows *r, int i, struct session_rec *s)
{
    memset(s, 0, sizeof *s);
    store_copy_(s->id, sizeof s->id, db_cell(r, i, 0));
    store_copy_(s->vm_id, sizeof s->vm_id, db_cell(r, i, 1));
    s->pid = db_cell_int(r, i, 2);
    store_copy_(s->process, sizeof s->process, db_cell(r, i, 3));
    store_copy_(s->node_id, sizeof s->node_id, db_cell(r, i, 4));
    s->gpu_index = (int)db_cell_int(r, i, 5);
    s->sm_count = (int)db_cell_int(r, i, 6);
    int n = groups_parse(db_cell(r, i, 7), s->groups, MAX_SM_GROUPS);
    s->ngroups = n < 0 ? 0 : n;
    s->memory_quota = db_cell_int(r, i, 8);
    store_copy_(s->endpoint, sizeof s->endpoint, db_cell(r, i, 9));
    s->server_pid = db_cell_int(r, i, 10);
    if (session_state_parse(db_cell(r, i, 11), &s->state) < 0)
        s->state = SESSION_FAILED;   /* a name this version does not know: not live */
    s->created_at = db_cell_int(r, i, 12);
    s->last_activity = db_cell_int(r, i, 13);
    s->ended_at = db_cell_int(r, i, 14);
    s->disconnected_since = db_cell_int(r, i, 15);
    store_copy_(s->end_reason, sizeof s->end_reason, db_cell(r, i, 16));
    s->token_epoch = db_cell_int(r, i, 17);
}

int store_session_insert(struct store *st, const struct session_rec *s, char *err, size_t errlen)
{
    char groups[MAX_SM_GROUPS * 4 + 1];
    groups_format(s->groups, s->ngroups, groups, sizeof groups);
    struct db_arg a[] = {DB_S(s->id), DB_S(s->vm_id), DB_I(s->pid), DB_SN(s->process),
                         DB_S(s->node_id), DB_I(s->gpu_index), DB_I(s->sm_count), DB_S(groups),
                         DB_I(s->memory_quota), DB_SN(s->endpoint), DB_I(s->server_pid),
                         DB_S(session_state_name(s->state)), DB_I(s->created_at), DB_I(s->last_activity),
                         DB_I(s->ended_at), DB_I(s->disconnected_since), DB_SN(s->end_reason)};
    return db_exec(store_db_(st),
                   "INSERT INTO sessions (" SESSION_COLS ") VALUES"
                   " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   a, 17, NULL, err, errlen);
}

int store_session_update(struct store *st, const struct session_rec *s, char *err, size_t errlen)
{
    struct db_arg a[] = {DB_SN(s->endpoint), DB_I(s->server_pid), DB_S(session_state_name(s->state)),
                         DB_I(s->last_activity), DB_I(s->ended_at), DB_I(s->disconnected_since),
                         DB_SN(s->end_reason), DB_S(s->id)};
    return db_exec(store_db_(st),
                   "UPDATE sessions SET endpoint = ?, server_pid = ?, state = ?, last_activity = ?,"
                   " ended_at = ?, disconnected_since = ?, end_reason = ? WHERE id = ?",
                   a, 8, NULL, err, errlen);
}

int store_session_set_share(struct store *st, const struct session_rec *s, char *err,
                            size_t errlen)
{
    char groups[MAX_SM_GROUPS * 4 + 1];
    groups_format(s->groups, s->ngroups, groups, sizeof groups);
    struct db_arg a[] = {DB_I(s->sm_count), DB_S(groups), DB_I(s->memory_quota), DB_S(s->id)};
    return db_exec(store_db_(st),
                   "UPDATE sessions SET sm_count = ?, sm_groups = ?, memory_quota = ? WHERE id = ?",
                   a, 4, NULL, err, errlen);
}

int store_session_move(struct store *st, const struct session_rec *s, char *err, size_t errlen)
{
    char groups[MAX_SM_GROUPS * 4 + 1];
    groups_format(s->groups, s->ngroups, groups, sizeof groups);
    struct db_arg a[] = {DB_S(s->node_id), DB_I(s->gpu_index), DB_I(s->sm_count), DB_S(groups),
                         DB_I(s->memory_quota), DB_S(s->id)};
    return db_exec(store_db_(st),
                   "UPDATE sessions SET node_id = ?, gpu_index = ?, sm_count = ?, sm_groups = ?,"
                   " memory_quota = ? WHERE id = ?",
                   a, 6, NULL, err, errlen);
}

int store_session_get(struct store *st, const char *id, struct session_rec *s, char *err,
                      size_t errlen)
{
    struct db_rows r;
    struct db_arg a[] = {DB_S(id)};
    int rc = db_exec(store_db_(st), "SELECT " SESSION_READ_COLS " FROM sessions WHERE id = ?", a, 1, &r,
                     err, errlen);
    if (rc < 0)
        return rc;
    int found = r.nrows > 0;
    if (found)
        session_from_row(&r, 0, s);
    db_rows_free(&r);
    return found;
}

int store_session_list(struct store *st, const struct session_filter *f, struct session_rec **out,
                       int *n, char *err, size_t errlen)
{
    char sql[1024];
    struct db_arg a[3];
    int na = 0;
    snprintf(sql, sizeof sql, "SELECT " SESSION_READ_COLS " FROM sessions WHERE 1 = 1");
    if (f && f->vm_id) {
        strcat(sql, " AND vm_id = ?");
        a[na++] = DB_S(f->vm_id);
    }
    if (f && f->node_id) {
        strcat(sql, " AND node_id = ?");
        a[na++] = DB_S(f->node_id);
    }
    if (f && f->by_state) {
        strcat(sql, " AND state = ?");
        a[na++] = DB_S(session_state_name(f->state));
    }
    if (f && f->live_only)
        strcat(sql, " AND state IN " LIVE_STATES);
    strcat(sql, " ORDER BY created_at, id");
    struct db_rows r;
    *out = NULL;
    *n = 0;
    int rc = db_exec(store_db_(st), sql, a, na, &r, err, errlen);
    if (rc < 0)
        return rc;
    *out = calloc((size_t)(r.nrows ? r.nrows : 1), sizeof **out);
    if (!*out) {
        db_rows_free(&r);
        return DB_ERR;
    }
    for (int i = 0; i < r.nrows; i++)
        session_from_row(&r, i, &(*out)[i]);
    *n = r.nrows;
    db_rows_free(&r);
    return 0;
}

int store_session_count_by_state(struct store *st, long long *counts, char *err, size_t errlen)
{
    struct db_rows r;
    int rc = db_exec(store_db_(st),
                     "SELECT state, COUNT(*) FROM sessions GROUP BY state ORDER BY state", NULL, 0,
                     &r, err, errlen);
    if (rc < 0)
        return rc;
    for (int s = 0; s < SESSION_STATES; s++)
        counts[s] = 0;
    for (int i = 0; i < r.nrows; i++) {
        enum session_state state;
        if (session_state_parse(db_cell(&r, i, 0), &state) == 0)
            counts[state] = db_cell_int(&r, i, 1);
    }
    db_rows_free(&r);
    return 0;
}

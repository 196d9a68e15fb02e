/* Store: the event log. */
#include "store.h"

#include <stdlib.h>
#include <sys/time.h>

int store_event_add(struct store *st, const char *kind, const char *subject, const char *message,
                    char *err, size_t errlen)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct db_arg a[] = {DB_I((long long)tv.tv_sec * 1000 + tv.tv_usec / 1000), DB_S(kind),
                         DB_S(subject), DB_S(message)};
    return db_exec(store_db_(st),
                   "INSERT INTO events (time, kind, subject, message) VALUES (?, ?, ?, ?)", a, 4,
                   NULL, err, errlen);
}

int store_event_list(struct store *st, long long since_id, int limit, struct event_rec **out,
                     int *n, char *err, size_t errlen)
{
    struct db_rows r;
    struct db_arg a[] = {DB_I(since_id), DB_I(limit)};
    *out = NULL;
    *n = 0;
    int rc = db_exec(store_db_(st),
                     "SELECT id, time, kind, subject, message FROM events WHERE id > ?"
                     " ORDER BY id LIMIT ?", a, 2, &r, err, errlen);
    if (rc < 0)
        return rc;
    *out = calloc((size_t)(r.nrows ? r.nrows : 1), sizeof **out);
    if (!*out) {
        db_rows_free(&r);
        return DB_ERR;
    }
    for (int i = 0; i < r.nrows; i++) {
        struct event_rec *e = &(*out)[i];
        e->id = db_cell_int(&r, i, 0);
        e->time = db_cell_int(&r, i, 1);
        store_copy_(e->kind, sizeof e->kind, db_cell(&r, i, 2));
        store_copy_(e->subject, sizeof e->subject, db_cell(&r, i, 3));
        store_copy_(e->message, sizeof e->message, db_cell(&r, i, 4));
    }
    *n = r.nrows;
    db_rows_free(&r);
    return 0;
}

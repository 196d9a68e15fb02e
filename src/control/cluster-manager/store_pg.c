/* PostgreSQL driver of db.h over libpq: one connection, text parameters. */
#include "db.h"

#include <libpq-fe.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct db_pg {
    struct db base;
    PGconn *conn;
};

/* '?' -> $1, $2, ... (the store's SQL has no '?' inside literals). */
static char *convert(const char *sql)
{
    size_t n = strlen(sql), q = 0;
    for (size_t i = 0; i < n; i++)
        q += sql[i] == '?';
    char *out = malloc(n + q * 4 + 1);
    if (!out)
        return NULL;
    char *o = out;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        if (sql[i] == '?')
            o += sprintf(o, "$%d", ++k);
        else
            *o++ = sql[i];
    }
    *o = 0;
    return out;
}

static void trim_nl(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = 0;
}

static int pg_exec(struct db *db, const char *sql, const struct db_arg *args, int nargs,
                   struct db_rows *out, char *err, size_t errlen)
{
    struct db_pg *d = (struct db_pg *)db;
    if (out) {
        out->nrows = out->ncols = 0;
        out->cells = NULL;
    }
    char *q = convert(sql);
    const char **vals = calloc((size_t)(nargs ? nargs : 1), sizeof *vals);
    char (*nums)[24] = calloc((size_t)(nargs ? nargs : 1), sizeof *nums);
    if (!q || !vals || !nums) {
        free(q);
        free(vals);
        free(nums);
        snprintf(err, errlen, "out of memory");
        return DB_ERR;
    }
    for (int i = 0; i < nargs; i++) {
        if (args[i].kind == DB_ARG_TEXT) {
            vals[i] = args[i].s;
        } else if (args[i].kind == DB_ARG_INT) {
            snprintf(nums[i], sizeof nums[i], "%lld", args[i].i);
            vals[i] = nums[i];
        }
    }
    PGresult *res = PQexecParams(d->conn, q, nargs, NULL, vals, NULL, NULL, 0);
    free(q);
    free(vals);
    free(nums);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        /* class 23: integrity constraint violation */
        int constraint = state && strncmp(state, "23", 2) == 0;
        snprintf(err, errlen, "postgresql: %s", PQerrorMessage(d->conn));
        trim_nl(err);
        PQclear(res);
        if (PQstatus(d->conn) == CONNECTION_BAD)
            PQreset(d->conn);   /* this request fails; the next one gets a new connection */
        return constraint ? DB_CONSTRAINT : DB_ERR;
    }
    int changed = 0;
    const char *ct = PQcmdTuples(res);
    if (ct && *ct)
        changed = atoi(ct);
    if (out && st == PGRES_TUPLES_OK) {
        int nr = PQntuples(res), nc = PQnfields(res);
        size_t cells = (size_t)nr * (size_t)nc;
        out->cells = calloc(cells ? cells : 1, sizeof *out->cells);
        if (!out->cells) {
            PQclear(res);
            snprintf(err, errlen, "out of memory");
            return DB_ERR;
        }
        out->nrows = nr;
        out->ncols = nc;
        for (int r = 0; r < nr; r++)
            for (int c = 0; c < nc; c++)
                out->cells[r * nc + c] = PQgetisnull(res, r, c) ? NULL : strdup(PQgetvalue(res, r, c));
    }
    PQclear(res);
    return changed;
}

static void pg_close(struct db *db)
{
    struct db_pg *d = (struct db_pg *)db;
    PQfinish(d->conn);
    free(d);
}

static const struct db_ops pg_ops = {pg_exec, pg_close};

static void pg_notice(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;   /* "relation already exists, skipping" and such */
}

struct db *db_open_pg(const char *conninfo, char *err, size_t errlen)
{
    struct db_pg *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    d->conn = PQconnectdb(conninfo);
    if (!d->conn || PQstatus(d->conn) != CONNECTION_OK) {
        snprintf(err, errlen, "postgresql: cannot connect: %s",
                 d->conn ? PQerrorMessage(d->conn) : "out of memory");
        trim_nl(err);
        PQfinish(d->conn);
        free(d);
        return NULL;
    }
    PQsetNoticeProcessor(d->conn, pg_notice, NULL);
    d->base.ops = &pg_ops;
    d->base.dialect = DB_POSTGRESQL;
    d->base.begin_sql = "BEGIN ISOLATION LEVEL SERIALIZABLE";
    return &d->base;
}

/* The SQL layer under the store: one small driver per database (store_sqlite.c, store_pg.c)
 * behind the same calls, so the store's SQL (store_*.c) is written once. Statements use '?'
 * placeholders (the PostgreSQL driver turns them into $1, $2, ...); values come back as
 * text (integers in decimal), NULL for SQL NULL. Not thread-safe: the cluster manager
 * serialises every use under its lock. */
#ifndef FLYT_CLM_DB_H
#define FLYT_CLM_DB_H

#include <stddef.h>

enum db_arg_kind { DB_ARG_NULL, DB_ARG_TEXT, DB_ARG_INT };
struct db_arg {
    enum db_arg_kind kind;
    const char *s;
    long long i;
};
#define DB_NULLARG ((struct db_arg){DB_ARG_NULL, NULL, 0})
#define DB_S(x) ((struct db_arg){DB_ARG_TEXT, (x), 0})
#define DB_I(x) ((struct db_arg){DB_ARG_INT, NULL, (long long)(x)})
/* text, or NULL for an empty optional string */
#define DB_SN(x) ((x) && *(x) ? DB_S(x) : DB_NULLARG)

struct db_rows {
    int nrows, ncols;
    char **cells;   /* cells[row * ncols + col]; NULL for SQL NULL */
};
const char *db_cell(const struct db_rows *r, int row, int col);  /* "" for NULL */
long long db_cell_int(const struct db_rows *r, int row, int col); /* 0 for NULL */
int db_cell_null(const struct db_rows *r, int row, int col);
void db_rows_free(struct db_rows *r);

enum db_dialect { DB_SQLITE, DB_POSTGRESQL };
/* Result codes below 0: errors. */
#define DB_ERR (-1)
#define DB_CONSTRAINT (-3)   /* a UNIQUE / PRIMARY KEY / FOREIGN KEY constraint refused it */

struct db;
struct db_ops {
    /* Runs one statement. Returns the number of rows changed (>= 0) or DB_ERR /
     * DB_CONSTRAINT with err. out (may be NULL) receives the rows it returns. */
    int (*exec)(struct db *db, const char *sql, const struct db_arg *args, int nargs,
                struct db_rows *out, char *err, size_t errlen);
    void (*close)(struct db *db);
};
struct db {
    const struct db_ops *ops;
    enum db_dialect dialect;
    const char *begin_sql;   /* starts a write transaction */
    /* the key node secrets are sealed with (seal.h, set by store_nodes_seal); NULL: they
     * are kept as given (the store's own tests) */
    const struct seal_key *seal;
};

struct db *db_open_sqlite(const char *path, char *err, size_t errlen);
struct db *db_open_pg(const char *conninfo, char *err, size_t errlen);

static inline int db_exec(struct db *db, const char *sql, const struct db_arg *args, int nargs,
                          struct db_rows *out, char *err, size_t errlen)
{
    return db->ops->exec(db, sql, args, nargs, out, err, errlen);
}

#endif

/* SQLite driver of db.h: one connection, WAL journal, foreign keys on, busy timeout. */
#include "db.h"

#include <sqlite3.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flyt_token.h"

struct db_sqlite {
    struct db base;
    sqlite3 *conn;
};

static int sq_exec(struct db *db, const char *sql, const struct db_arg *args, int nargs,
                   struct db_rows *out, char *err, size_t errlen)
{
    struct db_sqlite *d = (struct db_sqlite *)db;
    sqlite3_stmt *st = NULL;
    if (out) {
        out->nrows = out->ncols = 0;
        out->cells = NULL;
    }
    if (sqlite3_prepare_v2(d->conn, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "sqlite: %s", sqlite3_errmsg(d->conn));
        return DB_ERR;
    }
    for (int i = 0; i < nargs; i++) {
        int rc = SQLITE_OK;
        switch (args[i].kind) {
        case DB_ARG_NULL: rc = sqlite3_bind_null(st, i + 1); break;
        case DB_ARG_TEXT: rc = sqlite3_bind_text(st, i + 1, args[i].s, -1, SQLITE_TRANSIENT); break;
        case DB_ARG_INT: rc = sqlite3_bind_int64(st, i + 1, args[i].i); break;
        }
        if (rc != SQLITE_OK) {
            snprintf(err, errlen, "sqlite: bind %d: %s", i + 1, sqlite3_errmsg(d->conn));
            sqlite3_finalize(st);
            return DB_ERR;
        }
    }
    int ncols = sqlite3_column_count(st), cap = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!out)
            continue;
        if (out->nrows == cap) {
            cap = cap ? cap * 2 : 16;
            char **c = realloc(out->cells, sizeof *c * (size_t)cap * (size_t)(ncols ? ncols : 1));
            if (!c) {
                snprintf(err, errlen, "sqlite: out of memory");
                sqlite3_finalize(st);
                db_rows_free(out);
                return DB_ERR;
            }
            out->cells = c;
        }
        out->ncols = ncols;
        for (int i = 0; i < ncols; i++) {
            const unsigned char *t = sqlite3_column_text(st, i);
            out->cells[out->nrows * ncols + i] = t ? strdup((const char *)t) : NULL;
        }
        out->nrows++;
    }
    if (rc != SQLITE_DONE) {
        int ext = sqlite3_extended_errcode(d->conn);
        snprintf(err, errlen, "sqlite: %s", sqlite3_errmsg(d->conn));
        sqlite3_finalize(st);
        if (out)
            db_rows_free(out);
        return (ext & 0xff) == SQLITE_CONSTRAINT ? DB_CONSTRAINT : DB_ERR;
    }
    if (out)
        out->ncols = ncols;
    sqlite3_finalize(st);
    return sqlite3_changes(d->conn);
}

static void sq_close(struct db *db)
{
    struct db_sqlite *d = (struct db_sqlite *)db;
    sqlite3_close(d->conn);
    free(d);
}

static const struct db_ops sqlite_ops = {sq_exec, sq_close};

/* The store holds node session keys and manager tokens: it and its WAL and
 * shared-memory files must be the owner's alone. An existing one open to
 * others is refused; a new one is made 0600 before SQLite opens it (SQLite
 * gives the WAL and -shm files the database file's mode). */
static int private_store(const char *path, char *err, size_t errlen)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    char file[4096], why[1024];
    if (strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0)
        return 0;
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        if (snprintf(file, sizeof file, "%s%s", path, suffixes[i]) >= (int)sizeof file) {
            snprintf(err, errlen, "sqlite: path too long: %s", path);
            return -1;
        }
        if (flyt_private_check(file, why, sizeof why) != 0) {
            snprintf(err, errlen, "sqlite store: %s", why);
            return -1;
        }
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0)
        close(fd);
    return 0; /* a file that cannot be made is SQLite's to report */
}

struct db *db_open_sqlite(const char *path, char *err, size_t errlen)
{
    if (private_store(path, err, errlen) != 0)
        return NULL;
    struct db_sqlite *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    int rc = sqlite3_open_v2(path, &d->conn,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                             NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "sqlite: cannot open %s: %s", path,
                 d->conn ? sqlite3_errmsg(d->conn) : sqlite3_errstr(rc));
        sqlite3_close(d->conn);
        free(d);
        return NULL;
    }
    sqlite3_busy_timeout(d->conn, 5000);
    d->base.ops = &sqlite_ops;
    d->base.dialect = DB_SQLITE;
    d->base.begin_sql = "BEGIN IMMEDIATE";
    static const char *const pragmas[] = {"PRAGMA foreign_keys = ON", "PRAGMA journal_mode = WAL",
                                          "PRAGMA synchronous = NORMAL"};
    for (size_t i = 0; i < sizeof pragmas / sizeof pragmas[0]; i++) {
        struct db_rows r;
        if (sq_exec(&d->base, pragmas[i], NULL, 0, &r, err, errlen) < 0) {
            sq_close(&d->base);
            return NULL;
        }
        db_rows_free(&r);
    }
    return &d->base;
}

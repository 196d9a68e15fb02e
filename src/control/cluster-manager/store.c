/* Store: opening by URL, versioned schema migrations, transactions. The SQL of each kind
 * of record lives in store_vms.c, store_nodes.c, store_sessions.c, store_events.c. */
#include "store.h"

#include "flyt_assert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct store {
    struct db *db;
};

struct db *store_db_(struct store *st) { return st->db; }

long long store_now_ms_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void store_copy_(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

static const char *const node_state_names[NODE_STATES] = {"registered", "ready", "lost",
                                                          "draining"};
static const char *const request_state_names[REQ_STATES] = {"granted", "queued", "refused",
                                                            "superseded", "cancelled"};
static const char *const session_state_names[SESSION_STATES] = {"starting", "active", "released",
                                                                "lost", "failed", "suspended",
                                                                "migrating"};

static int state_parse(const char *const *names, int count, const char *name)
{
    for (int i = 0; i < count; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

const char *node_state_name(enum node_state state)
{
    FLYT_ASSERT(state >= 0 && state < NODE_STATES);
    return node_state_names[state];
}

const char *session_state_name(enum session_state state)
{
    FLYT_ASSERT(state >= 0 && state < SESSION_STATES);
    return session_state_names[state];
}

const char *request_state_name(enum request_state state)
{
    FLYT_ASSERT(state >= 0 && state < REQ_STATES);
    return request_state_names[state];
}

int request_state_parse_(const char *name, enum request_state *state)
{
    int i = state_parse(request_state_names, REQ_STATES, name);
    if (i >= 0)
        *state = (enum request_state)i;
    return i < 0 ? -1 : 0;
}

int node_state_parse(const char *name, enum node_state *state)
{
    int i = state_parse(node_state_names, NODE_STATES, name);
    if (i >= 0)
        *state = (enum node_state)i;
    return i < 0 ? -1 : 0;
}

int session_state_parse(const char *name, enum session_state *state)
{
    int i = state_parse(session_state_names, SESSION_STATES, name);
    if (i >= 0)
        *state = (enum session_state)i;
    return i < 0 ? -1 : 0;
}

/* Migrations: applied in order, each in the one transaction of store_open, each recorded
 * in schema_version. Never edit a released step: add a new migration. "@SERIAL@" is the
 * dialect's auto-increment primary key. */
struct migration {
    int version;
    const char *what;
    const char *const *steps;   /* NULL-terminated; one statement each */
};

static const char *const m1[] = {
    "CREATE TABLE vms ("
    " id TEXT PRIMARY KEY, vm_ip TEXT NOT NULL UNIQUE, host_ip TEXT NOT NULL,"
    " compute_units BIGINT NOT NULL, memory BIGINT NOT NULL, token_hash TEXT NOT NULL UNIQUE,"
    " created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)",
    "CREATE TABLE nodes ("
    " id TEXT PRIMARY KEY, host_ip TEXT NOT NULL, address TEXT, state TEXT NOT NULL,"
    " token_hash TEXT NOT NULL UNIQUE, session_key TEXT, manager_token TEXT,"
    " last_heartbeat BIGINT NOT NULL DEFAULT 0, created_at BIGINT NOT NULL)",
    "CREATE TABLE gpus ("
    " node_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE, idx INTEGER NOT NULL,"
    " uuid TEXT NOT NULL, name TEXT NOT NULL, sm_count INTEGER NOT NULL,"
    " sm_granularity INTEGER NOT NULL, memory_total BIGINT NOT NULL, PRIMARY KEY (node_id, idx))",
    /* sessions keep their vm_id / node_id as plain text: their history outlives the VM or node */
    "CREATE TABLE sessions ("
    " id TEXT PRIMARY KEY, vm_id TEXT NOT NULL, pid BIGINT NOT NULL, process TEXT,"
    " node_id TEXT NOT NULL, gpu_index INTEGER NOT NULL, sm_count INTEGER NOT NULL,"
    " sm_groups TEXT NOT NULL, memory_quota BIGINT NOT NULL, endpoint TEXT,"
    " server_pid BIGINT NOT NULL DEFAULT 0, state TEXT NOT NULL, created_at BIGINT NOT NULL,"
    " last_activity BIGINT NOT NULL, ended_at BIGINT NOT NULL DEFAULT 0,"
    " disconnected_since BIGINT NOT NULL DEFAULT 0, end_reason TEXT)",
    "CREATE INDEX sessions_by_state ON sessions (state, node_id)",
    "CREATE INDEX sessions_by_vm ON sessions (vm_id)",
    "CREATE TABLE events ("
    " id @SERIAL@, time BIGINT NOT NULL, kind TEXT NOT NULL, subject TEXT NOT NULL,"
    " message TEXT NOT NULL)",
    NULL};

/* App-requested scaling: the operator's bounds on a VM's share (0: none) and the requests. */
static const char *const m2[] = {
    "ALTER TABLE vms ADD COLUMN sm_min BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE vms ADD COLUMN sm_max BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE vms ADD COLUMN memory_min BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE vms ADD COLUMN memory_max BIGINT NOT NULL DEFAULT 0",
    /* requests keep their vm_id as plain text: their history outlives the VM */
    "CREATE TABLE share_requests ("
    " id TEXT PRIMARY KEY, vm_id TEXT NOT NULL, sm_ask TEXT, memory_ask TEXT, reason TEXT,"
    " sm_target BIGINT NOT NULL DEFAULT 0, memory_target BIGINT NOT NULL DEFAULT 0,"
    " state TEXT NOT NULL, message TEXT, created_at BIGINT NOT NULL,"
    " updated_at BIGINT NOT NULL)",
    "CREATE INDEX share_requests_by_vm ON share_requests (vm_id, state)",
    NULL};

/* Token rotation (docs/api.md, "Rotating and revoking tokens"): a VM's or node's previous
 * token stays valid until old_token_until (ms); a session's tokens are signed with a key
 * derived for its token_epoch (0: the node's session key itself). */
static const char *const m3[] = {
    "ALTER TABLE vms ADD COLUMN old_token_hash TEXT",
    "ALTER TABLE vms ADD COLUMN old_token_until BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE nodes ADD COLUMN old_token_hash TEXT",
    "ALTER TABLE nodes ADD COLUMN old_token_until BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE sessions ADD COLUMN token_epoch BIGINT NOT NULL DEFAULT 0",
    NULL};

/* Capacity reservations (store_reservations.c): the share a migration or restore placed on
 * its target, held from the placement until the session runs there (or the operation
 * fails); a migration's row also lets a restarted manager finish or undo it. */
static const char *const m4[] = {
    "CREATE TABLE reservations ("
    " session_id TEXT PRIMARY KEY, kind TEXT NOT NULL, vm_id TEXT NOT NULL,"
    " node_id TEXT NOT NULL, gpu_index INTEGER NOT NULL, sm_count INTEGER NOT NULL,"
    " sm_groups TEXT NOT NULL, memory_quota BIGINT NOT NULL, from_node TEXT,"
    " stream INTEGER NOT NULL DEFAULT 0, created_at BIGINT NOT NULL)",
    "CREATE INDEX reservations_by_node ON reservations (node_id)",
    NULL};

/* GPUs' compute capability (MAJOR * 10 + MINOR; 0: not reported, by an older node
 * manager): a session's state moves only to a GPU of its own. */
static const char *const m5[] = {
    "ALTER TABLE gpus ADD COLUMN compute_capability INTEGER NOT NULL DEFAULT 0",
    NULL};

static const struct migration migrations[] = {
    {1, "VMs, nodes, GPUs, sessions, events", m1},
    {2, "VM share bounds, share requests", m2},
    {3, "token rotation and revocation", m3},
    {4, "capacity reservations of migrations and restores", m4},
    {5, "GPUs' compute capability", m5},
};
#define NMIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

int store_latest_schema_version(void) { return migrations[NMIGRATIONS - 1].version; }

static char *dialect_sql(const struct db *db, const char *sql)
{
    const char *serial = db->dialect == DB_SQLITE ? "INTEGER PRIMARY KEY AUTOINCREMENT"
                                                  : "BIGSERIAL PRIMARY KEY";
    const char *at = strstr(sql, "@SERIAL@");
    size_t n = strlen(sql) + strlen(serial) + 1;
    char *out = malloc(n);
    if (!out)
        return NULL;
    if (at)
        snprintf(out, n, "%.*s%s%s", (int)(at - sql), sql, serial, at + 8);
    else
        snprintf(out, n, "%s", sql);
    return out;
}

int store_schema_version(struct store *st, char *err, size_t errlen)
{
    struct db_rows r;
    int rc = db_exec(st->db, "SELECT COALESCE(MAX(version), 0) FROM schema_version", NULL, 0, &r,
                     err, errlen);
    if (rc < 0)
        return rc;
    int v = r.nrows ? (int)db_cell_int(&r, 0, 0) : 0;
    db_rows_free(&r);
    return v;
}

static int migrate(struct store *st, char *err, size_t errlen)
{
    struct db *db = st->db;
    if (store_begin(st, err, errlen) < 0)
        return -1;
    if (db_exec(db, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL,"
                    " applied_at BIGINT NOT NULL, description TEXT NOT NULL)",
                NULL, 0, NULL, err, errlen) < 0)
        goto fail;
    /* two cluster managers starting on one PostgreSQL database migrate one after the other */
    if (db->dialect == DB_POSTGRESQL
        && db_exec(db, "SELECT pg_advisory_xact_lock(7460010)", NULL, 0, NULL, err, errlen) < 0)
        goto fail;
    int current = store_schema_version(st, err, errlen);
    if (current < 0)
        goto fail;
    if (current > store_latest_schema_version()) {
        snprintf(err, errlen,
                 "the store's schema version %d is newer than this flyt-cluster-manager knows (%d)",
                 current, store_latest_schema_version());
        goto fail;
    }
    for (int m = 0; m < NMIGRATIONS; m++) {
        if (migrations[m].version <= current)
            continue;
        for (const char *const *step = migrations[m].steps; *step; step++) {
            char *sql = dialect_sql(db, *step);
            int rc = sql ? db_exec(db, sql, NULL, 0, NULL, err, errlen) : DB_ERR;
            free(sql);
            if (rc < 0) {
                char inner[512];
                snprintf(inner, sizeof inner, "%s", err);
                snprintf(err, errlen, "schema migration %d (%s): %s", migrations[m].version,
                         migrations[m].what, inner);
                goto fail;
            }
        }
        struct db_arg a[] = {DB_I(migrations[m].version), DB_I((long long)time(NULL) * 1000),
                             DB_S(migrations[m].what)};
        if (db_exec(db, "INSERT INTO schema_version (version, applied_at, description)"
                        " VALUES (?, ?, ?)", a, 3, NULL, err, errlen) < 0)
            goto fail;
    }
    return store_commit(st, err, errlen);
fail:
    store_rollback(st);
    return -1;
}

struct store *store_open(const char *url, char *err, size_t errlen)
{
    struct db *db = NULL;
    if (strncmp(url, "postgresql://", 13) == 0 || strncmp(url, "postgres://", 11) == 0)
        db = db_open_pg(url, err, errlen);
    else if (strncmp(url, "sqlite:", 7) == 0)
        db = db_open_sqlite(url + 7, err, errlen);
    else if (strstr(url, "://"))
        snprintf(err, errlen, "store \"%s\": unknown kind (use sqlite:/path or postgresql://...)",
                 url);
    else
        db = db_open_sqlite(url, err, errlen);
    if (!db)
        return NULL;
    struct store *st = calloc(1, sizeof *st);
    if (!st) {
        db->ops->close(db);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    st->db = db;
    if (migrate(st, err, errlen) < 0) {
        store_close(st);
        return NULL;
    }
    return st;
}

void store_close(struct store *st)
{
    if (!st)
        return;
    st->db->ops->close(st->db);
    free(st);
}

const char *store_kind(const struct store *st)
{
    return st->db->dialect == DB_SQLITE ? "sqlite" : "postgresql";
}

int store_begin(struct store *st, char *err, size_t errlen)
{
    return db_exec(st->db, st->db->begin_sql, NULL, 0, NULL, err, errlen) < 0 ? -1 : 0;
}

int store_commit(struct store *st, char *err, size_t errlen)
{
    if (db_exec(st->db, "COMMIT", NULL, 0, NULL, err, errlen) < 0) {
        store_rollback(st);
        return -1;
    }
    return 0;
}

void store_rollback(struct store *st)
{
    char err[256];
    db_exec(st->db, "ROLLBACK", NULL, 0, NULL, err, sizeof err);
}

int store_select_(struct store *st, const char *sql, const struct db_arg *a, int na,
                  size_t recsize, store_row_fn_ *from_row, void **out, int *n, char *err,
                  size_t errlen)
{
    struct db_rows r;
    *out = NULL;
    *n = 0;
    int rc = db_exec(st->db, sql, a, na, &r, err, errlen);
    if (rc < 0)
        return rc;
    char *recs = calloc((size_t)(r.nrows ? r.nrows : 1), recsize);
    if (!recs) {
        db_rows_free(&r);
        return DB_ERR;
    }
    for (int i = 0; i < r.nrows; i++)
        from_row(&r, i, recs + (size_t)i * recsize);
    *out = recs;
    *n = r.nrows;
    db_rows_free(&r);
    return 0;
}

void groups_format(const int *groups, int n, char *out, size_t outlen)
{
    size_t off = 0;
    out[0] = 0;
    for (int i = 0; i < n && off < outlen; i++) {
        int k = snprintf(out + off, outlen - off, "%s%d", i ? "," : "", groups[i]);
        if (k < 0)
            break;
        off += (size_t)k;
    }
}

int groups_parse(const char *text, int *groups, int max)
{
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= MAX_SM_GROUPS || n >= max)
            return -1;
        groups[n++] = (int)v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return n;
}

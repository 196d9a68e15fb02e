/* Store: VM records. */
#include "store.h"

#include <stdlib.h>

#define VM_COLS "id, vm_ip, host_ip, compute_units, memory, created_at, updated_at, sm_min," \
                " sm_max, memory_min, memory_max"

static void vm_from_row(const struct db_rows *r, int i, struct vm_rec *vm)
{
    store_copy_(vm->id, sizeof vm->id, db_cell(r, i, 0));
    store_copy_(vm->vm_ip, sizeof vm->vm_ip, db_cell(r, i, 1));
    store_copy_(vm->host_ip, sizeof vm->host_ip, db_cell(r, i, 2));
    vm->compute_units = db_cell_int(r, i, 3);
    vm->memory = db_cell_int(r, i, 4);
    vm->created_at = db_cell_int(r, i, 5);
    vm->updated_at = db_cell_int(r, i, 6);
    vm->sm_min = db_cell_int(r, i, 7);
    vm->sm_max = db_cell_int(r, i, 8);
    vm->memory_min = db_cell_int(r, i, 9);
    vm->memory_max = db_cell_int(r, i, 10);
}

static int vm_one_args(struct store *st, const char *sql, const struct db_arg *a, int nargs,
                    struct vm_rec *vm, char *err, size_t errlen)
{
    struct db_rows r;
    int rc = db_exec(store_db_(st), sql, a, nargs, &r, err, errlen);
    if (rc < 0)
        return rc;
    int found = r.nrows > 0;
    if (found && vm)
        vm_from_row(&r, 0, vm);
    db_rows_free(&r);
    return found;
}

static int vm_one(struct store *st, const char *sql, const char *arg, struct vm_rec *vm,
                  char *err, size_t errlen)
{
    struct db_arg a[] = {DB_S(arg)};
    return vm_one_args(st, sql, a, 1, vm, err, errlen);
}

int store_vm_insert(struct store *st, const struct vm_rec *vm, const char *token_hash, char *err,
                    size_t errlen)
{
    struct db_arg a[] = {DB_S(vm->id), DB_S(vm->vm_ip), DB_S(vm->host_ip), DB_I(vm->compute_units),
                         DB_I(vm->memory), DB_I(vm->created_at), DB_I(vm->updated_at),
                         DB_I(vm->sm_min), DB_I(vm->sm_max), DB_I(vm->memory_min),
                         DB_I(vm->memory_max), DB_S(token_hash)};
    return db_exec(store_db_(st),
                   "INSERT INTO vms (" VM_COLS ", token_hash) VALUES"
                   " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", a, 12, NULL, err, errlen);
}

int store_vm_update(struct store *st, const struct vm_rec *vm, char *err, size_t errlen)
{
    struct db_arg a[] = {DB_S(vm->vm_ip), DB_S(vm->host_ip), DB_I(vm->compute_units),
                         DB_I(vm->memory), DB_I(vm->updated_at), DB_I(vm->sm_min),
                         DB_I(vm->sm_max), DB_I(vm->memory_min), DB_I(vm->memory_max),
                         DB_S(vm->id)};
    return db_exec(store_db_(st),
                   "UPDATE vms SET vm_ip = ?, host_ip = ?, compute_units = ?, memory = ?,"
                   " updated_at = ?, sm_min = ?, sm_max = ?, memory_min = ?, memory_max = ?"
                   " WHERE id = ?", a, 10, NULL, err, errlen);
}

int store_vm_delete(struct store *st, const char *id, char *err, size_t errlen)
{
    struct db_arg a[] = {DB_S(id)};
    return db_exec(store_db_(st), "DELETE FROM vms WHERE id = ?", a, 1, NULL, err, errlen);
}

int store_vm_get(struct store *st, const char *id, struct vm_rec *vm, char *err, size_t errlen)
{
    return vm_one(st, "SELECT " VM_COLS " FROM vms WHERE id = ?", id, vm, err, errlen);
}

int store_vm_by_ip(struct store *st, const char *vm_ip, struct vm_rec *vm, char *err, size_t errlen)
{
    return vm_one(st, "SELECT " VM_COLS " FROM vms WHERE vm_ip = ?", vm_ip, vm, err, errlen);
}

int store_vm_by_token(struct store *st, const char *token_hash, struct vm_rec *vm,
                  char *err, size_t errlen)
{
    struct db_arg a[] = {DB_S(token_hash), DB_S(token_hash), DB_I(store_now_ms_())};
    return vm_one_args(st, "SELECT " VM_COLS " FROM vms WHERE token_hash = ? OR"
                " (old_token_hash = ? AND old_token_until > ?)", a, 3, vm, err, errlen);
}

int store_vm_list(struct store *st, struct vm_rec **out, int *n, char *err, size_t errlen)
{
    struct db_rows r;
    *out = NULL;
    *n = 0;
    int rc = db_exec(store_db_(st), "SELECT " VM_COLS " FROM vms ORDER BY id", NULL, 0, &r, err,
                     errlen);
    if (rc < 0)
        return rc;
    *out = calloc((size_t)(r.nrows ? r.nrows : 1), sizeof **out);
    if (!*out) {
        db_rows_free(&r);
        return DB_ERR;
    }
    for (int i = 0; i < r.nrows; i++)
        vm_from_row(&r, i, &(*out)[i]);
    *n = r.nrows;
    db_rows_free(&r);
    return 0;
}

/* Result rows shared by both drivers. */
#include "db.h"

#include <stdlib.h>

const char *db_cell(const struct db_rows *r, int row, int col)
{
    const char *c = r->cells[row * r->ncols + col];
    return c ? c : "";
}

long long db_cell_int(const struct db_rows *r, int row, int col)
{
    const char *c = r->cells[row * r->ncols + col];
    return c ? strtoll(c, NULL, 10) : 0;
}

int db_cell_null(const struct db_rows *r, int row, int col)
{
    return r->cells[row * r->ncols + col] == NULL;
}

void db_rows_free(struct db_rows *r)
{
    if (!r || !r->cells)
        return;
    for (int i = 0; i < r->nrows * r->ncols; i++)
        free(r->cells[i]);
    free(r->cells);
    r->cells = NULL;
    r->nrows = r->ncols = 0;
}

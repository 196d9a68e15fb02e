/*
 * The one growable array of plain structs: a pointer, a count and a
 * capacity the caller keeps, grown by doubling.
 */
#ifndef FLYT_ARRAY_H
#define FLYT_ARRAY_H

#include <stddef.h>

/* Room for one more item after n in *items (capacity *cap, items of each
 * bytes): 0, or -1 when out of memory (the array then stays as it was). */
int flyt_array_room(void **items, size_t *cap, size_t n, size_t each);

#endif

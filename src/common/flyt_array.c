#include "flyt_array.h"

#include <stdint.h>
#include <stdlib.h>

int flyt_array_room(void **items, size_t *cap, size_t n, size_t each)
{
    if (n < *cap)
        return 0;
    size_t more = *cap ? *cap * 2 : 8;
    if (each == 0 || more > SIZE_MAX / each)
        return -1;
    void *p = realloc(*items, more * each);
    if (p == NULL)
        return -1;
    *items = p;
    *cap = more;
    return 0;
}

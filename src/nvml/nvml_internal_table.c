/*
 * nvmlInternalGetExportTable: the private table NVIDIA's nvidia-smi fetches
 * from libnvidia-ml.so.1 before anything else, and without which it stops
 * ("Failed to initialize NVML"). Nothing documents it; what is known is its
 * id, that its first word is the table's size in bytes, and what a few of
 * its slots do (seen with driver 580):
 *   81       device handle by index: (index, nvmlDevice_t *out, flags)
 *   213-215  running processes: (device, unsigned *count, entry array),
 *            *count holds the array's capacity on entry
 * Every slot gets a function of its own so that a call names its slot: the
 * known ones answer for the virtual GPU, any other says "not supported"
 * without touching its arguments (their shapes are unknown), and with
 * FLYT_NVML_TRACE set every call is written to stderr with its slot, which
 * is how the remaining slots can be studied on a GPU machine.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml_internal.h"

#define TABLE_SLOTS 256
#define SLOT_HANDLE_BY_INDEX 81
#define SLOT_PROCESSES_FIRST 213
#define SLOT_PROCESSES_LAST 215

/* the table nvidia-smi asks for, as the 16 bytes it passes */
static const unsigned char smi_table_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                                0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};

static int tracing(void)
{
    static int on = -1;
    if (on < 0)
        on = getenv("FLYT_NVML_TRACE") != NULL;
    return on;
}

static nvmlReturn_t slot_called(unsigned slot, uintptr_t a0, uintptr_t a1, uintptr_t a2,
                                uintptr_t a3)
{
    nvmlReturn_t r = NVML_ERROR_NOT_SUPPORTED;
    if (slot == SLOT_HANDLE_BY_INDEX) {
        r = nvmlDeviceGetHandleByIndex_v2((unsigned)a0, (nvmlDevice_t *)a1);
    } else if (slot >= SLOT_PROCESSES_FIRST && slot <= SLOT_PROCESSES_LAST) {
        /* the VM sees no other process of the physical GPU: an empty list,
         * as the public running-process calls answer */
        struct nvmlDevice_st *d;
        r = flyt_nvml_device((nvmlDevice_t)a0, &d);
        if (r == NVML_SUCCESS && a1 == 0)
            r = NVML_ERROR_INVALID_ARGUMENT;
        if (r == NVML_SUCCESS)
            *(unsigned *)a1 = 0;
    }
    if (tracing())
        fprintf(stderr, "flyt-nvml: internal slot %u (%#lx, %#lx, %#lx, %#lx) -> %d\n", slot,
                (unsigned long)a0, (unsigned long)a1, (unsigned long)a2, (unsigned long)a3, (int)r);
    return r;
}

/* One function per slot (numbers from the generated flyt_nvml_slots.inc);
 * arguments are taken as words, which is how callers pass pointers,
 * handles and unsigned numbers alike. */
#define FLYT_NVML_SLOT(n)                                                                  \
    static nvmlReturn_t slot_##n(uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3) \
    {                                                                                      \
        return slot_called(n, a0, a1, a2, a3);                                             \
    }
#include "flyt_nvml_slots.inc"
#undef FLYT_NVML_SLOT

#define FLYT_NVML_SLOT(n) [n] = (uintptr_t)slot_##n,
static const uintptr_t smi_table[TABLE_SLOTS] = {
    [0] = sizeof(uintptr_t) * TABLE_SLOTS,
#include "flyt_nvml_slots.inc"
};
#undef FLYT_NVML_SLOT

FLYT_NVML_EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void **table, const void *id)
{
    if (table == NULL || id == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memcmp(id, smi_table_id, sizeof smi_table_id) != 0) {
        const unsigned char *b = id;
        flyt_nvml_say("internal export table %02x%02x%02x%02x-... is not supported", b[0], b[1],
                      b[2], b[3]);
        *table = NULL;
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *table = smi_table;
    return NVML_SUCCESS;
}

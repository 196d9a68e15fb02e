/*
 * What the driver prints on the server (device printf, device-side assert
 * messages) is written here to the program's own stdout and stderr, before
 * the call that synchronised returns, as NVIDIA's driver prints it in the
 * process that synchronises. docs/device-output.md.
 */
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "flyt_io.h"

/* THE SWITCH for the order of device output among the program's own output.
 * 1: through stdio's stdout/stderr FILEs (fwrite): device lines take their
 * place among the program's printf output even when stdout is a fully
 * buffered file or pipe, as when the driver prints with stdio.
 * 0: straight to fd 1 / fd 2, ahead of whatever the program's stdio still
 * buffers, as when the driver write()s its descriptors. */
#define FLYT_DEVICE_OUTPUT_THROUGH_STDIO 1

/* At exit: 0 fetches only what the driver already printed (NVIDIA documents
 * that the printf buffer is not flushed when the program exits); 1 has the
 * server synchronise first, printing what the last kernels printed, as a
 * context destroyed at exit would. */
#define FLYT_DEVICE_OUTPUT_SYNC_AT_EXIT 0

/* Set once the program has begun to exit: from then on nothing the driver
 * prints reaches the program. Natively the runtime's teardown at exit
 * (unloading the program's modules) prints nothing of what kernels left in
 * the printf buffer (measured: a kernel that printed but was never
 * synchronised shows no line), while the server's driver, which is not
 * exiting, flushes that buffer when the module is unloaded. */
static int exiting;

void flyt_device_output(uint32_t fd, const void *buf, size_t len)
{
    if (__atomic_load_n(&exiting, __ATOMIC_ACQUIRE))
        return;
    if (FLYT_DEVICE_OUTPUT_THROUGH_STDIO)
        fwrite(buf, 1, len, fd == 2 ? stderr : stdout);
    else
        /* a failure: the program closed it, the bytes go nowhere, as natively */
        (void)flyt_write_all(fd == 2 ? STDERR_FILENO : STDOUT_FILENO, buf, len);
}

/* The last pipelined calls before exit may have made the driver print (a
 * launch flushes what earlier kernels printed): one round trip fetches it,
 * then the door closes. Registered when libcuda.so.1 is loaded, which for a
 * runtime program is after the program's constructors registered the
 * runtime's teardown (__cudaUnregisterFatBinary), so this runs before it. */
static void output_at_exit(void)
{
    if (flyt_conn_gets_output()) {
        flyt_req_output_drain req = {.sync = FLYT_DEVICE_OUTPUT_SYNC_AT_EXIT};
        flyt_call(FLYT_OP_OUTPUT_DRAIN, &req, sizeof req, NULL, 0, NULL);
    }
    __atomic_store_n(&exiting, 1, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void output_at_exit_register(void)
{
    atexit(output_at_exit);
}

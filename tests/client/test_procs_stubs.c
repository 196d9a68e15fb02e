/*
 * The fake driver test_procs links against: every libcuda.so.1 export as the
 * generated weak stub, and a flyt_driver_unsupported that records which stub
 * ran, so the test can check that each table address is the symbol it names.
 * Like the library's own stub file, this does not include cuda.h.
 */
#include "flyt_driver_stubs.inc"

const char *flyt_test_last_stub;

CUresult flyt_driver_unsupported(const char *name)
{
    flyt_test_last_stub = name;
    return 801; /* CUDA_ERROR_NOT_SUPPORTED */
}

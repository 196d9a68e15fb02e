/* Every driver export Flyt does not carry out: a weak stub that says so once
 * and returns CUDA_ERROR_NOT_SUPPORTED; the real definitions elsewhere in
 * the library override them. Generated from libcuda.exports; this file must
 * not see cuda.h, whose prototypes the stubs' uniform signature would clash
 * with. */
#include "flyt_driver_stubs.inc"

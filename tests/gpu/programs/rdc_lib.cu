// rdc_lib.cu: the "library" half of the rdc test (compiled with -rdc=true).
// Defines device functions, device variables and a kernel used from
// rdc_main.cu.
#include <cuda_runtime.h>

__device__ int lib_counter;             // incremented by lib_transform
__device__ float lib_scale = 2.5f;      // initialised in the image
__device__ int lib_table[16];           // filled by the host via its symbol

__device__ float lib_transform(float x, int i)
{
    atomicAdd(&lib_counter, 1);
    return x * lib_scale + (float)lib_table[i % 16];
}

// a kernel defined here and launched from rdc_main.cu
__global__ void lib_kernel(float *data, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        data[i] = data[i] + 1.0f;
}

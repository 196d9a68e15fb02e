/* Relocatable PTX for driver_api.c's run-time link (cuLinkCreate): the kernel
 * calls a function and reads a variable defined in driver_api_link_lib.cu. */
extern __device__ float link_helper(float x);
extern __device__ float link_offset;

extern "C" __global__ void linked_kernel(float *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] = link_helper(v[i]) + link_offset;
}

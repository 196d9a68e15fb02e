/* The other half of driver_api.c's run-time link, built both as relocatable
 * PTX and as a relocatable cubin. */
__device__ float link_offset = 0.5f;

__device__ __noinline__ float link_helper(float x)
{
    return 3.0f * x - 1.0f;
}

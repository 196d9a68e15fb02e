/* Kernels of driver_runtime_mix, built into a fatbinary (sm cubin + PTX) that
 * the program embeds and loads with cuModuleLoadData. */
__device__ int drv_scale; /* set by the host through cuModuleGetGlobal */

extern "C" __global__ void drv_saxpy(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

extern "C" __global__ void drv_scale_by_global(int *v, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v[i] *= drv_scale;
}

/* Kernels for driver_api.c, built into driver_api_kernels.cubin (loaded with
 * cuModuleLoad / cuLibraryLoadFromFile) and driver_api_kernels.ptx (JIT). */

__device__ int dev_counter;
__constant__ float scale_table[4] = {1.0f, 2.0f, 4.0f, 8.0f};

/* y[i] = scale_table[sel] * x[i] + y[i]; counts its threads in dev_counter */
extern "C" __global__ void scale_add(const float *x, float *y, int n, int sel)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = scale_table[sel & 3] * x[i] + y[i];
        atomicAdd(&dev_counter, 1);
    }
}

struct Packed {
    int a;
    double b;
    char c;
};

/* Parameters of mixed alignment, for launches through CU_LAUNCH_PARAM_BUFFER_POINTER */
extern "C" __global__ void mixed_args(long long *out, char c, Packed p, short s, double d)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[0] = c;
        out[1] = p.a;
        out[2] = (long long)p.b;
        out[3] = p.c;
        out[4] = s;
        out[5] = (long long)d;
    }
}

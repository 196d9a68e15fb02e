/*
 * cudaGetDeviceProperties for the cuda backend: struct cudaDeviceProp of
 * CUDA 13 (driver_types.h) built from the driver. Every field that has a
 * device attribute is filled from a table of (field offset, field size,
 * attribute) entries; name, uuid, luid and totalGlobalMem come from their
 * own driver calls; reserved[] stays zero.
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "backend_cuda_int.h"
#include "flyt_log.h"

static_assert(sizeof(struct cudaDeviceProp) == FLYT_DEVICE_PROP_SIZE,
              "struct cudaDeviceProp is not the CUDA 13 layout the protocol carries");

struct prop_attr {
    uint16_t offset; /* byte offset in struct cudaDeviceProp */
    uint8_t  size;   /* sizeof(int) or sizeof(size_t) */
    uint16_t attr;   /* CUdevice_attribute */
};

#define P_FIELD(f) ((struct cudaDeviceProp *)0)->f
/* a scalar field (int, unsigned int or size_t) */
#define P(f, a) { offsetof(struct cudaDeviceProp, f), sizeof(P_FIELD(f)), CU_DEVICE_ATTRIBUTE_##a }
/* element i of an int array field */
#define PA(f, i, a) { offsetof(struct cudaDeviceProp, f) + (i) * sizeof(int), sizeof(int), CU_DEVICE_ATTRIBUTE_##a }

static const struct prop_attr prop_attrs[] = {
    P(sharedMemPerBlock, MAX_SHARED_MEMORY_PER_BLOCK),
    P(regsPerBlock, MAX_REGISTERS_PER_BLOCK),
    P(warpSize, WARP_SIZE),
    P(memPitch, MAX_PITCH),
    P(maxThreadsPerBlock, MAX_THREADS_PER_BLOCK),
    PA(maxThreadsDim, 0, MAX_BLOCK_DIM_X),
    PA(maxThreadsDim, 1, MAX_BLOCK_DIM_Y),
    PA(maxThreadsDim, 2, MAX_BLOCK_DIM_Z),
    PA(maxGridSize, 0, MAX_GRID_DIM_X),
    PA(maxGridSize, 1, MAX_GRID_DIM_Y),
    PA(maxGridSize, 2, MAX_GRID_DIM_Z),
    P(totalConstMem, TOTAL_CONSTANT_MEMORY),
    P(major, COMPUTE_CAPABILITY_MAJOR),
    P(minor, COMPUTE_CAPABILITY_MINOR),
    P(textureAlignment, TEXTURE_ALIGNMENT),
    P(texturePitchAlignment, TEXTURE_PITCH_ALIGNMENT),
    P(multiProcessorCount, MULTIPROCESSOR_COUNT),
    P(integrated, INTEGRATED),
    P(canMapHostMemory, CAN_MAP_HOST_MEMORY),
    P(maxTexture1D, MAXIMUM_TEXTURE1D_WIDTH),
    P(maxTexture1DMipmap, MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH),
    PA(maxTexture2D, 0, MAXIMUM_TEXTURE2D_WIDTH),
    PA(maxTexture2D, 1, MAXIMUM_TEXTURE2D_HEIGHT),
    PA(maxTexture2DMipmap, 0, MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH),
    PA(maxTexture2DMipmap, 1, MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT),
    PA(maxTexture2DLinear, 0, MAXIMUM_TEXTURE2D_LINEAR_WIDTH),
    PA(maxTexture2DLinear, 1, MAXIMUM_TEXTURE2D_LINEAR_HEIGHT),
    PA(maxTexture2DLinear, 2, MAXIMUM_TEXTURE2D_LINEAR_PITCH),
    PA(maxTexture2DGather, 0, MAXIMUM_TEXTURE2D_GATHER_WIDTH),
    PA(maxTexture2DGather, 1, MAXIMUM_TEXTURE2D_GATHER_HEIGHT),
    PA(maxTexture3D, 0, MAXIMUM_TEXTURE3D_WIDTH),
    PA(maxTexture3D, 1, MAXIMUM_TEXTURE3D_HEIGHT),
    PA(maxTexture3D, 2, MAXIMUM_TEXTURE3D_DEPTH),
    PA(maxTexture3DAlt, 0, MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE),
    PA(maxTexture3DAlt, 1, MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE),
    PA(maxTexture3DAlt, 2, MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE),
    P(maxTextureCubemap, MAXIMUM_TEXTURECUBEMAP_WIDTH),
    PA(maxTexture1DLayered, 0, MAXIMUM_TEXTURE1D_LAYERED_WIDTH),
    PA(maxTexture1DLayered, 1, MAXIMUM_TEXTURE1D_LAYERED_LAYERS),
    PA(maxTexture2DLayered, 0, MAXIMUM_TEXTURE2D_LAYERED_WIDTH),
    PA(maxTexture2DLayered, 1, MAXIMUM_TEXTURE2D_LAYERED_HEIGHT),
    PA(maxTexture2DLayered, 2, MAXIMUM_TEXTURE2D_LAYERED_LAYERS),
    PA(maxTextureCubemapLayered, 0, MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH),
    PA(maxTextureCubemapLayered, 1, MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS),
    P(maxSurface1D, MAXIMUM_SURFACE1D_WIDTH),
    PA(maxSurface2D, 0, MAXIMUM_SURFACE2D_WIDTH),
    PA(maxSurface2D, 1, MAXIMUM_SURFACE2D_HEIGHT),
    PA(maxSurface3D, 0, MAXIMUM_SURFACE3D_WIDTH),
    PA(maxSurface3D, 1, MAXIMUM_SURFACE3D_HEIGHT),
    PA(maxSurface3D, 2, MAXIMUM_SURFACE3D_DEPTH),
    PA(maxSurface1DLayered, 0, MAXIMUM_SURFACE1D_LAYERED_WIDTH),
    PA(maxSurface1DLayered, 1, MAXIMUM_SURFACE1D_LAYERED_LAYERS),
    PA(maxSurface2DLayered, 0, MAXIMUM_SURFACE2D_LAYERED_WIDTH),
    PA(maxSurface2DLayered, 1, MAXIMUM_SURFACE2D_LAYERED_HEIGHT),
    PA(maxSurface2DLayered, 2, MAXIMUM_SURFACE2D_LAYERED_LAYERS),
    P(maxSurfaceCubemap, MAXIMUM_SURFACECUBEMAP_WIDTH),
    PA(maxSurfaceCubemapLayered, 0, MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH),
    PA(maxSurfaceCubemapLayered, 1, MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS),
    P(surfaceAlignment, SURFACE_ALIGNMENT),
    P(concurrentKernels, CONCURRENT_KERNELS),
    P(ECCEnabled, ECC_ENABLED),
    P(pciBusID, PCI_BUS_ID),
    P(pciDeviceID, PCI_DEVICE_ID),
    P(pciDomainID, PCI_DOMAIN_ID),
    P(tccDriver, TCC_DRIVER),
    P(asyncEngineCount, ASYNC_ENGINE_COUNT),
    P(unifiedAddressing, UNIFIED_ADDRESSING),
    P(memoryBusWidth, GLOBAL_MEMORY_BUS_WIDTH),
    P(l2CacheSize, L2_CACHE_SIZE),
    P(persistingL2CacheMaxSize, MAX_PERSISTING_L2_CACHE_SIZE),
    P(maxThreadsPerMultiProcessor, MAX_THREADS_PER_MULTIPROCESSOR),
    P(streamPrioritiesSupported, STREAM_PRIORITIES_SUPPORTED),
    P(globalL1CacheSupported, GLOBAL_L1_CACHE_SUPPORTED),
    P(localL1CacheSupported, LOCAL_L1_CACHE_SUPPORTED),
    P(sharedMemPerMultiprocessor, MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
    P(regsPerMultiprocessor, MAX_REGISTERS_PER_MULTIPROCESSOR),
    P(managedMemory, MANAGED_MEMORY),
    P(isMultiGpuBoard, MULTI_GPU_BOARD),
    P(multiGpuBoardGroupID, MULTI_GPU_BOARD_GROUP_ID),
    P(hostNativeAtomicSupported, HOST_NATIVE_ATOMIC_SUPPORTED),
    P(pageableMemoryAccess, PAGEABLE_MEMORY_ACCESS),
    P(concurrentManagedAccess, CONCURRENT_MANAGED_ACCESS),
    P(computePreemptionSupported, COMPUTE_PREEMPTION_SUPPORTED),
    P(canUseHostPointerForRegisteredMem, CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM),
    P(cooperativeLaunch, COOPERATIVE_LAUNCH),
    P(sharedMemPerBlockOptin, MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    P(pageableMemoryAccessUsesHostPageTables, PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES),
    P(directManagedMemAccessFromHost, DIRECT_MANAGED_MEM_ACCESS_FROM_HOST),
    P(maxBlocksPerMultiProcessor, MAX_BLOCKS_PER_MULTIPROCESSOR),
    P(accessPolicyMaxWindowSize, MAX_ACCESS_POLICY_WINDOW_SIZE),
    P(reservedSharedMemPerBlock, RESERVED_SHARED_MEMORY_PER_BLOCK),
    P(hostRegisterSupported, HOST_REGISTER_SUPPORTED),
    P(sparseCudaArraySupported, SPARSE_CUDA_ARRAY_SUPPORTED),
    P(hostRegisterReadOnlySupported, READ_ONLY_HOST_REGISTER_SUPPORTED),
    P(timelineSemaphoreInteropSupported, TIMELINE_SEMAPHORE_INTEROP_SUPPORTED),
    P(memoryPoolsSupported, MEMORY_POOLS_SUPPORTED),
    P(gpuDirectRDMASupported, GPU_DIRECT_RDMA_SUPPORTED),
    P(gpuDirectRDMAFlushWritesOptions, GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS),
    P(gpuDirectRDMAWritesOrdering, GPU_DIRECT_RDMA_WRITES_ORDERING),
    P(memoryPoolSupportedHandleTypes, MEMPOOL_SUPPORTED_HANDLE_TYPES),
    P(deferredMappingCudaArraySupported, DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED),
    P(ipcEventSupported, IPC_EVENT_SUPPORTED),
    P(clusterLaunch, CLUSTER_LAUNCH),
    P(unifiedFunctionPointers, UNIFIED_FUNCTION_POINTERS),
    P(deviceNumaConfig, NUMA_CONFIG),
    P(deviceNumaId, NUMA_ID),
    P(mpsEnabled, MPS_ENABLED),
    P(hostNumaId, HOST_NUMA_ID),
    P(gpuPciDeviceID, GPU_PCI_DEVICE_ID),
    P(gpuPciSubsystemID, GPU_PCI_SUBSYSTEM_ID),
    P(hostNumaMultinodeIpcSupported, HOST_NUMA_MULTINODE_IPC_SUPPORTED),
};

static void put_value(struct cudaDeviceProp *p, const struct prop_attr *e, int v)
{
    char *dst = (char *)p + e->offset;
    if (e->size == sizeof(size_t)) {
        size_t s = (size_t)v;
        memcpy(dst, &s, sizeof s);
    } else {
        memcpy(dst, &v, sizeof v);
    }
}

CUresult flyt_cuda_device_props(flyt_backend *base, struct cudaDeviceProp *out)
{
    struct flyt_cuda_backend *b = (struct flyt_cuda_backend *)base;
    if (!b || !out)
        return CUDA_ERROR_INVALID_VALUE;
    struct cudaDeviceProp p;
    memset(&p, 0, sizeof p);

    CUresult r = b->cu.cuDeviceGetName(p.name, (int)sizeof p.name, b->dev);
    if (r != CUDA_SUCCESS)
        return r;
    p.name[sizeof p.name - 1] = '\0';

    size_t total = 0;
    if ((r = b->cu.cuDeviceTotalMem(&total, b->dev)) != CUDA_SUCCESS)
        return r;
    p.totalGlobalMem = total;

    CUuuid uuid;
    if ((r = b->cu.cuDeviceGetUuid(&uuid, b->dev)) != CUDA_SUCCESS)
        return r;
    static_assert(sizeof p.uuid == sizeof uuid, "uuid size");
    memcpy(&p.uuid, &uuid, sizeof uuid);

    /* Only meaningful on Windows; on Linux the driver refuses: leave zeros. */
    unsigned int mask = 0;
    if (b->cu.cuDeviceGetLuid(p.luid, &mask, b->dev) == CUDA_SUCCESS)
        p.luidDeviceNodeMask = mask;
    else
        memset(p.luid, 0, sizeof p.luid);

    for (size_t i = 0; i < sizeof prop_attrs / sizeof prop_attrs[0]; i++) {
        const struct prop_attr *e = &prop_attrs[i];
        int v = 0;
        r = b->cu.cuDeviceGetAttribute(&v, (CUdevice_attribute)e->attr, b->dev);
        if (r == CUDA_ERROR_INVALID_VALUE) {
            /* an attribute this driver does not know: report 0 */
            flyt_debug("cuda backend: device attribute %u unsupported by the driver", e->attr);
            v = 0;
        } else if (r != CUDA_SUCCESS) {
            return r;
        }
        put_value(&p, e, v);
    }
    if (b->share_sms > 0) /* the tenant sees its share of the SMs */
        p.multiProcessorCount = b->share_sms;

    *out = p;
    return CUDA_SUCCESS;
}

// The CUDA driver API, loaded at run time (dlopen of libcuda.so.1) so that kevolve
// starts on machines with no NVIDIA driver. Entry points are resolved through
// cuGetProcAddress at the header's CUDA_VERSION, so each has the prototype of cuda.h.
#pragma once

#include <cuda.h>

#include <string>
#include <vector>

#include "kevolve/core/status.h"

namespace kevolve {

#define KEVOLVE_CUDA_DRIVER_FUNCS(X)                                                        \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)     \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDeviceGetUuid)                            \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)               \
  X(cuCtxSynchronize) X(cuCtxResetPersistingL2Cache) X(cuCtxGetLimit)                       \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                              \
  X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuLaunchKernelEx)         \
  X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemcpyHtoD) X(cuMemcpyDtoH)                \
  X(cuMemcpyDtoD) X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD32) X(cuMemsetD8Async)      \
  X(cuMemsetD32Async) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)           \
  X(cuStreamQuery) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                      \
  X(cuEventSynchronize) X(cuEventQuery) X(cuEventElapsedTime) X(cuGetErrorString)           \
  X(cuGetErrorName) X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuOccupancyMaxActiveClusters)

struct CudaDriver {
#define KEVOLVE_DECLARE(name) decltype(&::name) name = nullptr;
  KEVOLVE_CUDA_DRIVER_FUNCS(KEVOLVE_DECLARE)
#undef KEVOLVE_DECLARE

  // Loads libcuda once per process and calls cuInit(0). Errors say what is missing.
  static Result<const CudaDriver*> Get();

  // "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" or ok.
  Status Check(CUresult r, const char* call) const;
};

struct GpuInfo {
  int ordinal = 0;
  std::string name;
  std::string uuid;          // "GPU-xxxxxxxx-..."
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t mem_bytes = 0;
  int64_t smem_per_block_optin = 0;
  int clock_khz = 0, mem_clock_khz = 0, mem_bus_bits = 0;
  std::string Arch() const;  // "sm_90a" on an H100/H200, else "sm_XY"
};

// The GPUs this process can see (CUDA_VISIBLE_DEVICES applies). An error when the
// driver is absent or reports no device.
Result<std::vector<GpuInfo>> ListGpus();

// The arch to compile for: the first GPU's own, else sm_90.
std::string DefaultArch();

// One line for commands that need a GPU and found none.
std::string NoGpuMessage(const std::string& reason);

}  // namespace kevolve

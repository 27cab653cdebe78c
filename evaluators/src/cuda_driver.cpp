#include "kevolve/evaluators/cuda_driver.h"

#include <dlfcn.h>

#include <cudaTypedefs.h>

#include <cstdio>
#include <cstring>
#include <type_traits>

namespace kevolve {

namespace {

// cuGetProcAddress returns the newest ABI at the requested version, which is not always
// the prototype cuda.h declares: CUDA 13 added cuCtxSynchronize(CUcontext) while cuda.h
// still declares cuCtxSynchronize(void). Such entries are pinned to the ABI of the header.
static_assert(std::is_same_v<decltype(&::cuCtxSynchronize), PFN_cuCtxSynchronize_v2000>,
              "cuda.h changed cuCtxSynchronize: update AbiVersion");
int AbiVersion(const char* name) {
  if (std::strcmp(name, "cuCtxSynchronize") == 0) return 2000;
  return CUDA_VERSION;
}

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

Result<const CudaDriver*> Load() {
  static CudaDriver driver;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return Status::Error("libcuda.so.1 could not be loaded (no NVIDIA driver installed)");
  auto gpa = reinterpret_cast<GetProcAddressFn>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!gpa) return Status::Error("libcuda.so.1 is too old: no cuGetProcAddress_v2 (need a CUDA 12+ driver)");
  std::string missing;
#define KEVOLVE_RESOLVE(name)                                                                     \
  {                                                                                               \
    void* p = nullptr;                                                                            \
    CUdriverProcAddressQueryResult q{};                                                           \
    if (gpa(#name, &p, AbiVersion(#name), CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS && p)  \
      driver.name = reinterpret_cast<decltype(driver.name)>(p);                                   \
    else                                                                                          \
      missing += std::string(missing.empty() ? "" : ", ") + #name;                                \
  }
  KEVOLVE_CUDA_DRIVER_FUNCS(KEVOLVE_RESOLVE)
#undef KEVOLVE_RESOLVE
  if (!missing.empty())
    return Status::Error("the NVIDIA driver lacks " + missing + " (need a driver for CUDA " +
                         std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10) + ")");
  CUresult r = driver.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    driver.cuGetErrorName(r, &name);
    if (r == CUDA_ERROR_NO_DEVICE) return Status::Error("the NVIDIA driver reports no CUDA device");
    return Status::Error(std::string("cuInit failed: ") + (name ? name : "unknown error"));
  }
  return &driver;
}

}  // namespace

Result<const CudaDriver*> CudaDriver::Get() {
  static const Result<const CudaDriver*> loaded = Load();
  return loaded;
}

Status CudaDriver::Check(CUresult r, const char* call) const {
  if (r == CUDA_SUCCESS) return Status::Ok();
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName) cuGetErrorName(r, &name);
  if (cuGetErrorString) cuGetErrorString(r, &text);
  return Status::Error(std::string(call) + ": " + (name ? name : "CUDA error " + std::to_string(r)) +
                       (text ? std::string(" (") + text + ")" : ""));
}

// Kernels are compiled for the exact GPU they run on, so the arch-specific target
// (sm_90a: wgmma, setmaxnreg; sm_100a: tcgen05) costs nothing and unlocks those features.
std::string GpuInfo::Arch() const {
  std::string a = "sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  if ((cc_major == 9 || cc_major == 10) && cc_minor == 0) a += "a";
  return a;
}

Result<std::vector<GpuInfo>> ListGpus() {
  auto drv = CudaDriver::Get();
  if (!drv.ok()) return drv.status();
  const CudaDriver& d = **drv;
  int n = 0;
  if (Status s = d.Check(d.cuDeviceGetCount(&n), "cuDeviceGetCount"); !s.ok()) return s;
  if (n == 0) return Status::Error("the NVIDIA driver reports no CUDA device (check CUDA_VISIBLE_DEVICES)");
  std::vector<GpuInfo> out;
  for (int i = 0; i < n; ++i) {
    CUdevice dev;
    if (Status s = d.Check(d.cuDeviceGet(&dev, i), "cuDeviceGet"); !s.ok()) return s;
    GpuInfo g;
    g.ordinal = i;
    char name[256] = {};
    d.cuDeviceGetName(name, sizeof(name), dev);
    g.name = name;
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      d.cuDeviceGetAttribute(&v, a, dev);
      return v;
    };
    g.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    g.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    g.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    g.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    g.smem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    g.clock_khz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    g.mem_clock_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    g.mem_bus_bits = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    size_t mem = 0;
    d.cuDeviceTotalMem(&mem, dev);
    g.mem_bytes = static_cast<int64_t>(mem);
    CUuuid u{};
    if (d.cuDeviceGetUuid(&u, dev) == CUDA_SUCCESS) {
      char buf[64];
      const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
      std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                    b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
      g.uuid = buf;
    }
    out.push_back(g);
  }
  return out;
}

std::string DefaultArch() {
  auto gpus = ListGpus();
  if (gpus.ok() && !gpus->empty()) return gpus->front().Arch();
  return "sm_90a";
}

std::string NoGpuMessage(const std::string& reason) {
  return "no usable NVIDIA GPU: " + reason +
         ". This command needs one; without a GPU, 'kevolve compile', 'kevolve mutate', 'kevolve ops' and the "
         "database commands ('kevolve runs', 'kevolve show') still work.";
}

}  // namespace kevolve

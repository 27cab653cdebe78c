#include "harness.h"

#include "kevolve/evaluators/nvrtc_compiler.h"

namespace kevolve::gpu {

const char* kHarnessSource = R"(
__device__ __forceinline__ unsigned long long kv_mix(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ float kv_draw(long long i, unsigned long long seed, int normal) {
  unsigned long long h = kv_mix(seed ^ kv_mix((unsigned long long)i));
  float u1 = ((h >> 40) + 1) * (1.0f / 16777217.0f);          // (0, 1]
  float u2 = ((h & 0xffffffull)) * (1.0f / 16777216.0f);       // [0, 1)
  if (!normal) return 2.0f * u2 - 1.0f;
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}
template <typename U>
__device__ __forceinline__ void kv_fill(U* p, long long n, unsigned long long seed, float scale, float offset,
                                        int normal) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    p[i] = kv::from_float<U>(kv_draw(i, seed, normal) * scale + offset);
}
extern "C" __global__ void kv_fill_f32(float* p, long long n, unsigned long long seed, float scale, float offset,
                                       int normal) { kv_fill(p, n, seed, scale, offset, normal); }
extern "C" __global__ void kv_fill_f16(__half* p, long long n, unsigned long long seed, float scale, float offset,
                                       int normal) { kv_fill(p, n, seed, scale, offset, normal); }
extern "C" __global__ void kv_fill_bf16(__nv_bfloat16* p, long long n, unsigned long long seed, float scale,
                                        float offset, int normal) { kv_fill(p, n, seed, scale, offset, normal); }

extern "C" __global__ void kv_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

// Reads n 16-byte words through L2 (the "read" flush: the L2 ends up holding these clean
// lines, and the dirty ones it held are written back during this launch). The sink may
// point into src (the timing rung passes the flush buffer itself), so src is not __restrict__.
extern "C" __global__ void kv_read_sweep(const uint4* src, long long n, unsigned* sink) {
  unsigned s = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const uint4 v = __ldcg(src + i);
    s ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (s == 0x9e3779b9u) sink[0] = s;  // keeps the loads
}

extern "C" __global__ void kv_fma(float* out, int iters) {
  float a0 = threadIdx.x, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3, a4 = a0 + 4, a5 = a0 + 5, a6 = a0 + 6, a7 = a0 + 7;
  const float m = 0.999999f, c = 1e-7f;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      a0 = fmaf(a0, m, c); a1 = fmaf(a1, m, c); a2 = fmaf(a2, m, c); a3 = fmaf(a3, m, c);
      a4 = fmaf(a4, m, c); a5 = fmaf(a5, m, c); a6 = fmaf(a6, m, c); a7 = fmaf(a7, m, c);
    }
  }
  float s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
  if (s == 12345.678f) out[threadIdx.x] = s;  // keeps the chains alive
}
)";

}  // namespace kevolve::gpu

namespace kevolve {

CompileRequest HarnessCompileRequest(const std::string& arch) {
  CompileRequest req;
  req.name = "kevolve_harness.cu";
  req.source = std::string("// @kevolve launch kv_copy grid=1 block=1\n") + gpu::kHarnessSource + gpu::L2ProbeSource();
  req.dtype = DType::kF32;
  req.arch = arch;
  req.entries = {"kv_fill_f32", "kv_fill_f16", "kv_fill_bf16", "kv_copy", "kv_read_sweep", "kv_fma",
                 "kv_l2_warm", "kv_l2_probe", "kv_ticket_copy", "kv_l2_smids"};
  return req;
}

}  // namespace kevolve

namespace kevolve::gpu {

Result<std::unique_ptr<Harness>> Harness::Build(const Device& dev) {
  NvrtcCompiler nvrtc;
  CompileResult c = nvrtc.Compile(HarnessCompileRequest(dev.desc().arch));
  if (!c.ok) return Status::Error("compiling the worker's harness kernels failed:\n" + c.log);
  std::unique_ptr<Harness> h(new Harness(dev));
  auto m = dev.Load(c.cubin);
  if (!m.ok()) return m.status();
  h->module_ = std::move(*m);
  const char* names[] = {"kv_fill_f32", "kv_fill_f16", "kv_fill_bf16"};
  for (int i = 0; i < 3; ++i)
    if (Status s = dev.Check(dev.drv().cuModuleGetFunction(&h->fill_[i], h->module_.get(), names[i]),
                             "cuModuleGetFunction");
        !s.ok())
      return s;
  const std::pair<CUfunction*, const char*> more[] = {{&h->copy_, "kv_copy"},
                                                      {&h->read_sweep_, "kv_read_sweep"},
                                                      {&h->fma_, "kv_fma"},
                                                      {&h->l2_warm_, "kv_l2_warm"},
                                                      {&h->l2_probe_, "kv_l2_probe"},
                                                      {&h->ticket_copy_, "kv_ticket_copy"},
                                                      {&h->l2_smids_, "kv_l2_smids"}};
  for (const auto& [fn, name] : more)
    if (Status s = dev.Check(dev.drv().cuModuleGetFunction(fn, h->module_.get(), name), "cuModuleGetFunction"); !s.ok())
      return s;
  // The probes keep one block per SM by asking for more than half its shared memory. A
  // device where that cannot be set up still serves everything else; only the L2 part of
  // the calibration reports the reason.
  const int probe_smem = h->ProbeSmem();
  if (probe_smem < 1024) h->l2_error_ = "the device offers too little shared memory per block for the L2 probes";
  for (CUfunction f : {h->l2_warm_, h->l2_probe_, h->l2_smids_}) {
    if (!h->l2_error_.empty()) break;
    if (Status s = dev.Check(dev.drv().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, probe_smem),
                             "cuFuncSetAttribute");
        !s.ok())
      h->l2_error_ = "setting up the L2 probes: " + s.message();
  }
  return h;
}

Status Harness::Fill(CUdeviceptr p, int64_t n, DType dtype, uint64_t seed, bool normal, float scale,
                     float offset) const {
  int idx = dtype == DType::kF32 ? 0 : dtype == DType::kF16 ? 1 : dtype == DType::kBF16 ? 2 : -1;
  if (idx < 0) return Status::Error(std::string("no input generator for dtype ") + DTypeName(dtype));
  if (n == 0) return Status::Ok();
  long long nn = n;
  unsigned long long s = seed;
  int norm = normal ? 1 : 0;
  void* args[] = {&p, &nn, &s, &scale, &offset, &norm};
  int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t{dev_.desc().sm_count} * 16);
  return dev_.Check(dev_.drv().cuLaunchKernel(fill_[idx], static_cast<unsigned>(blocks), 1, 1, 256, 1, 1, 0,
                                              dev_.stream(), args, nullptr),
                    "cuLaunchKernel(kv_fill)");
}

Status Harness::Copy(CUdeviceptr src, CUdeviceptr dst, int64_t n16, int blocks) const {
  long long n = n16;
  void* args[] = {&src, &dst, &n};
  return dev_.Check(dev_.drv().cuLaunchKernel(copy_, blocks, 1, 1, 512, 1, 1, 0, dev_.stream(), args, nullptr),
                    "cuLaunchKernel(kv_copy)");
}

Status Harness::ReadSweep(CUdeviceptr src, int64_t n16, CUdeviceptr sink) const {
  long long n = n16;
  void* args[] = {&src, &n, &sink};
  return dev_.Check(dev_.drv().cuLaunchKernel(read_sweep_, dev_.desc().sm_count * 4, 1, 1, 512, 1, 1, 0,
                                              dev_.stream(), args, nullptr),
                    "cuLaunchKernel(kv_read_sweep)");
}

Status Harness::Fma(CUdeviceptr out, int iters, int blocks, int threads) const {
  void* args[] = {&out, &iters};
  return dev_.Check(dev_.drv().cuLaunchKernel(fma_, blocks, 1, 1, threads, 1, 1, 0, dev_.stream(), args, nullptr),
                    "cuLaunchKernel(kv_fma)");
}

}  // namespace kevolve::gpu

namespace kevolve::gpu {

Status Harness::L2Smids(CUdeviceptr seen) const {
  if (!l2_error_.empty()) return Status::Error(l2_error_);
  void* args[] = {&seen};
  const auto smem = static_cast<unsigned>(ProbeSmem());
  return dev_.Check(dev_.drv().cuLaunchKernel(l2_smids_, dev_.desc().sm_count * 4, 1, 1, 32, 1, 1, smem,
                                              dev_.stream(), args, nullptr),
                    "cuLaunchKernel(kv_l2_smids)");
}

Status Harness::L2Warm(CUdeviceptr base, CUdeviceptr off, int n, int sm, CUdeviceptr claim, CUdeviceptr sink) const {
  if (!l2_error_.empty()) return Status::Error(l2_error_);
  void* args[] = {&base, &off, &n, &sm, &claim, &sink};
  const auto smem = static_cast<unsigned>(ProbeSmem());
  return dev_.Check(dev_.drv().cuLaunchKernel(l2_warm_, dev_.desc().sm_count * 2, 1, 1, 1024, 1, 1, smem,
                                              dev_.stream(), args, nullptr),
                    "cuLaunchKernel(kv_l2_warm)");
}

Status Harness::L2Probe(CUdeviceptr base, CUdeviceptr off, int n, int sm, int warps, CUdeviceptr claim,
                        CUdeviceptr cycles, CUdeviceptr sink) const {
  if (!l2_error_.empty()) return Status::Error(l2_error_);
  void* args[] = {&base, &off, &n, &sm, &claim, &cycles, &sink};
  const auto smem = static_cast<unsigned>(ProbeSmem());
  return dev_.Check(dev_.drv().cuLaunchKernel(l2_probe_, dev_.desc().sm_count * 2, 1, 1, 32 * warps, 1, 1, smem,
                                              dev_.stream(), args, nullptr),
                    "cuLaunchKernel(kv_l2_probe)");
}

Status Harness::TicketCopy(CUdeviceptr src, CUdeviceptr dst, int chunk16, CUdeviceptr list0, CUdeviceptr list1,
                           int n0, int n1, CUdeviceptr side_of, CUdeviceptr tickets, int blocks) const {
  void* args[] = {&src, &dst, &chunk16, &list0, &list1, &n0, &n1, &side_of, &tickets};
  return dev_.Check(dev_.drv().cuLaunchKernel(ticket_copy_, blocks, 1, 1, 256, 1, 1, 0, dev_.stream(), args, nullptr),
                    "cuLaunchKernel(kv_ticket_copy)");
}

}  // namespace kevolve::gpu

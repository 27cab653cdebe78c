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

// L2 partition probes (l2_layout.h). One block per SM acts, the first that lands on SM
// `sm` (claim[sm]); the launch asks for enough shared memory that an SM holds one block.
__device__ __forceinline__ unsigned kv_smid() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned kv_ld_cg(const unsigned* p) {
  unsigned v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ bool kv_claim(int sm, int* claim) {
  __shared__ int mine;
  if (threadIdx.x == 0) mine = (int)kv_smid() == sm && atomicCAS(claim + sm, 0, 1) == 0;
  __syncthreads();
  return mine;
}
// The block on SM `sm` reads every listed line (byte offsets from base) into L2.
extern "C" __global__ void kv_l2_warm(const unsigned* base, const long long* off, int n, int sm, int* claim,
                                      unsigned* sink) {
  if (!kv_claim(sm, claim)) return;
  unsigned s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += kv_ld_cg(base + off[i] / 4);
  if (s == 0x9e3779b9u) sink[0] = s;
}
// Lane 0 of each warp of the block on SM `sm` times its share of the lines, one load at a
// time: the clock before the load and after a shared store of its value (issue is in order
// and the store waits for the load). The line's offset is stored first, so that its own
// load (an L2 access every 32 bytes of offsets, with the L1 given to shared memory) is
// over before the first clock read; on the H200 it otherwise added about 270 cycles to
// every fourth line.
__device__ __forceinline__ long long kv_clock() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) : : "memory");
  return t;
}
extern "C" __global__ void kv_l2_probe(const unsigned* base, const long long* off, int n, int sm, int* claim,
                                       unsigned* cycles, unsigned* sink) {
  __shared__ volatile long long where[32];
  __shared__ volatile unsigned keep[32];
  if (!kv_claim(sm, claim) || threadIdx.x % 32 != 0) return;
  const int warp = threadIdx.x / 32, nw = blockDim.x / 32;
  unsigned acc = 0;
  for (int i = warp; i < n; i += nw) {
    where[warp] = off[i];
    const unsigned* p = base + where[warp] / 4;
    const long long t0 = kv_clock();
    keep[warp] = kv_ld_cg(p);
    const long long t1 = kv_clock();
    acc += keep[warp];
    cycles[i] = (unsigned)(t1 - t0);
  }
  if (acc == 0x9e3779b9u) sink[1] = acc;
}
// A persistent copy in chunks of `chunk16` 16-byte words: a block takes 4 chunks per ticket
// from its list (list[side] with side = side_of[smid], or list0 for all when side_of is
// null), through tickets[side].
extern "C" __global__ void kv_ticket_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, int chunk16,
                                          const int* __restrict__ list0, const int* __restrict__ list1, int n0, int n1,
                                          const unsigned char* __restrict__ side_of, unsigned* tickets) {
  __shared__ unsigned t;
  const int side = side_of ? side_of[kv_smid()] : 0;
  const int* list = side ? list1 : list0;
  const int n = side ? n1 : n0;
  for (;;) {
    if (threadIdx.x == 0) t = atomicAdd(tickets + side, 1u);
    __syncthreads();
    const long long first = (long long)t * 4;
    __syncthreads();
    if (first >= n) break;
    for (int w = threadIdx.x; w < chunk16; w += blockDim.x) {
      uint4 v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (first + k < n) v[k] = __ldcg(src + (long long)list[first + k] * chunk16 + w);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (first + k < n) dst[(long long)list[first + k] * chunk16 + w] = v[k];
    }
  }
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
  req.source = std::string("// @kevolve launch kv_copy grid=1 block=1\n") + gpu::kHarnessSource;
  req.dtype = DType::kF32;
  req.arch = arch;
  req.entries = {"kv_fill_f32", "kv_fill_f16", "kv_fill_bf16", "kv_copy", "kv_fma",
                 "kv_l2_warm", "kv_l2_probe", "kv_ticket_copy"};
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
                                                      {&h->fma_, "kv_fma"},
                                                      {&h->l2_warm_, "kv_l2_warm"},
                                                      {&h->l2_probe_, "kv_l2_probe"},
                                                      {&h->ticket_copy_, "kv_ticket_copy"}};
  for (const auto& [fn, name] : more)
    if (Status s = dev.Check(dev.drv().cuModuleGetFunction(fn, h->module_.get(), name), "cuModuleGetFunction"); !s.ok())
      return s;
  // The probes keep one block per SM by asking for more than half its shared memory.
  const int probe_smem = h->ProbeSmem();
  for (CUfunction f : {h->l2_warm_, h->l2_probe_})
    if (Status s = dev.Check(dev.drv().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, probe_smem),
                             "cuFuncSetAttribute");
        !s.ok())
      return s;
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

Status Harness::Fma(CUdeviceptr out, int iters, int blocks, int threads) const {
  void* args[] = {&out, &iters};
  return dev_.Check(dev_.drv().cuLaunchKernel(fma_, blocks, 1, 1, threads, 1, 1, 0, dev_.stream(), args, nullptr),
                    "cuLaunchKernel(kv_fma)");
}

}  // namespace kevolve::gpu

namespace kevolve::gpu {

Status Harness::L2Warm(CUdeviceptr base, CUdeviceptr off, int n, int sm, CUdeviceptr claim, CUdeviceptr sink) const {
  void* args[] = {&base, &off, &n, &sm, &claim, &sink};
  const auto smem = static_cast<unsigned>(ProbeSmem());
  return dev_.Check(dev_.drv().cuLaunchKernel(l2_warm_, dev_.desc().sm_count * 2, 1, 1, 1024, 1, 1, smem,
                                              dev_.stream(), args, nullptr),
                    "cuLaunchKernel(kv_l2_warm)");
}

Status Harness::L2Probe(CUdeviceptr base, CUdeviceptr off, int n, int sm, int warps, CUdeviceptr claim,
                        CUdeviceptr cycles, CUdeviceptr sink) const {
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

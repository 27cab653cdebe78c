// Shared by scripts/l2_homes.cu and scripts/l2_aware_copy.cu (nvcc, outside the build):
// time single L2 hits from one chosen SM, to tell which L2 partition owns a line.
#pragma once
#include <cuda_runtime.h>
#include <cstdio>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)

__device__ __forceinline__ unsigned smid() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned ld_cg(const unsigned* p) {
  unsigned v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// One block per SM acts (claim[sm] picks the first block that lands there); the grid is
// launched with enough shared memory that an SM holds one block at a time.
__device__ __forceinline__ bool claim_sm(int want, int* claim) {
  __shared__ int mine;
  if (threadIdx.x == 0) mine = (int)smid() == want && atomicCAS(claim + want, 0, 1) == 0;
  __syncthreads();
  return mine;
}

// The block on SM w reads every listed line (byte offsets from base), so they sit in L2.
__global__ void k_warm(const unsigned* base, const long long* off, int n, int w, int* claim, unsigned* sink) {
  if (!claim_sm(w, claim)) return;
  unsigned s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += ld_cg(base + off[i] / 4);
  if (s == 0x9e3779b9u) sink[0] = s;
}

// Lane 0 of each warp of the block on SM `sm` times its share of the lines one at a time:
// clock64 before the load and after a shared store of its value (issue is in order, and
// the store waits for the load). The offset's own load may fall inside the window; built
// with nvcc and 115 KiB of shared memory it hit L1 and the data came out clean, but the
// worker's version (evaluators/src/harness.cpp, 226 KiB) had to finish it first.
__global__ void k_probe(const unsigned* base, const long long* off, int n, int sm, int* claim,
                        unsigned* lat, unsigned* sink) {
  __shared__ volatile unsigned keep[32];
  if (!claim_sm(sm, claim) || threadIdx.x % 32 != 0) return;
  const int warp = threadIdx.x / 32, nw = blockDim.x / 32;
  unsigned dep = 0;
  for (int i = warp; i < n; i += nw) {
    const unsigned* p = base + off[i] / 4;
    long long t0 = clock64();
    unsigned v = ld_cg(p);
    keep[warp] = v;
    long long t1 = clock64();
    dep += keep[warp];
    lat[i] = (unsigned)(t1 - t0);
  }
  if (dep == 0x9e3779b9u) sink[1] = dep;
}

struct ProbeCtx {
  unsigned* flush;  // 256 MiB, written to push everything else out of L2
  int* claim;       // 1024 ints
  unsigned* sink;
  int nsm;
  size_t smem;      // dynamic shared memory that keeps one block per SM
};

inline int probe_init(ProbeCtx& c) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  c.nsm = prop.multiProcessorCount;
  c.smem = prop.sharedMemPerMultiprocessor / 2 + 1024;
  CK(cudaFuncSetAttribute(k_warm, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c.smem));
  CK(cudaFuncSetAttribute(k_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c.smem));
  CK(cudaMalloc(&c.flush, 256u << 20));
  CK(cudaMalloc(&c.claim, sizeof(int) * 1024));
  CK(cudaMalloc(&c.sink, 64));
  return 0;
}

// Flush, warm the lines from SM w, time them from SM s with `warps` probing warps.
inline int run_probe(ProbeCtx& c, const unsigned* base, const long long* d_off, int n, int w, int s,
                     unsigned* d_lat, int warps = 1) {
  CK(cudaMemsetAsync(c.flush, 0x5a, 256u << 20));
  CK(cudaMemsetAsync(c.claim, 0, sizeof(int) * 1024));
  k_warm<<<c.nsm * 2, 1024, c.smem>>>(base, d_off, n, w, c.claim, c.sink);
  CK(cudaGetLastError());
  CK(cudaMemsetAsync(c.claim, 0, sizeof(int) * 1024));
  k_probe<<<c.nsm * 2, 32 * warps, c.smem>>>(base, d_off, n, s, c.claim, d_lat, c.sink);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return 0;
}

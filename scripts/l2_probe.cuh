// Shared by scripts/l2_homes.cu and scripts/l2_aware_copy.cu (nvcc, outside the build):
// time single L2 hits from one chosen SM, to tell which L2 partition owns a line, with the
// worker's own probe kernels (evaluators/device/l2_probe.cuh). The BENCHMARKS numbers of
// the twenty-fourth session came from commit 1d51fff's copies of those kernels, whose probe
// did not yet finish the offset's load before the first clock read (with nvcc and 115 KiB
// of shared memory that load hit L1, and the data came out clean).
#pragma once
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)

#include "../evaluators/device/l2_probe.cuh"  // kv_l2_warm, kv_l2_probe, kv_ticket_copy, kv_smid

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
  CK(cudaFuncSetAttribute(kv_l2_warm, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c.smem));
  CK(cudaFuncSetAttribute(kv_l2_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c.smem));
  CK(cudaMalloc(&c.flush, 256u << 20));
  CK(cudaMalloc(&c.claim, sizeof(int) * 1024));
  CK(cudaMalloc(&c.sink, 64));
  return 0;
}

// Offsets and latencies of up to n lines, on the host and on the device.
struct ProbeBufs {
  long long* d_off = nullptr;
  unsigned* d_lat = nullptr;
  std::vector<long long> off;
  std::vector<unsigned> lat;
};
inline int probe_bufs(ProbeBufs& b, int n) {
  CK(cudaMalloc(&b.d_off, sizeof(long long) * n));
  CK(cudaMalloc(&b.d_lat, sizeof(unsigned) * n));
  b.off.assign(n, 0);
  b.lat.assign(n, 0);
  return 0;
}

// Flush, warm the lines from SM w, time them from SM s with `warps` probing warps.
inline int run_probe(ProbeCtx& c, const unsigned* base, const long long* d_off, int n, int w, int s,
                     unsigned* d_lat, int warps = 1) {
  CK(cudaMemsetAsync(c.flush, 0x5a, 256u << 20));
  CK(cudaMemsetAsync(c.claim, 0, sizeof(int) * 1024));
  kv_l2_warm<<<c.nsm * 2, 1024, c.smem>>>(base, d_off, n, w, c.claim, c.sink);
  CK(cudaGetLastError());
  CK(cudaMemsetAsync(c.claim, 0, sizeof(int) * 1024));
  kv_l2_probe<<<c.nsm * 2, 32 * warps, c.smem>>>(base, d_off, n, s, c.claim, d_lat, c.sink);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return 0;
}

// Does a second read of x from L2 cost L2-fabric traffic less when the
// same SM (block) re-reads it? Micro-kernels over 256 MiB of x and y (bf16 1024x131072's
// size), 32 KiB chunks, 256 threads, every load ld.global.cg (L2, not L1):
//   copy  : y[c] = x[c]                                   (one read, one write)
//   same0 : block c reads x[c], then reads x[c] again and writes y[c]
//   same2 : block b reads x[2b], x[2b+1], then re-reads both and writes them
//   other : block i reads x[i]; re-reads x[i-K] (read by block i-K, K = 384 chunks =
//           12 MiB earlier, another SM in general) and writes y[i-K]  (split_row-like)
//   plocal/premote (and ...6): persistent blocks, described above k_persist
// Timed with events (L2 flushed before each of 20 reps, median); run under ncu for the
// fabric counters. Not part of the build (docs/BENCHMARKS.md, eleventh session):
//   nvcc -O3 -arch=sm_90a -o fabric_reread scripts/fabric_reread.cu && ./fabric_reread
//   M=gpu__time_duration.sum,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_sectors_srcunit_tex.sum
//   ncu --metrics $M,dram__bytes_read.sum -k 'regex:^k_' ./fabric_reread once
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>
#include <algorithm>

constexpr int kChunkU4 = 2048;  // 32 KiB of uint4
constexpr int kThreads = 256;
constexpr int kPer = kChunkU4 / kThreads;  // 8 uint4 per thread

__device__ __forceinline__ unsigned stats(const uint4* __restrict__ x, long c) {
  unsigned s = 0;
  uint4 v[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) v[k] = __ldcg(x + c * kChunkU4 + k * kThreads + threadIdx.x);
#pragma unroll
  for (int k = 0; k < kPer; ++k) s += v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  return s;
}
__device__ __forceinline__ void write(const uint4* __restrict__ x, uint4* __restrict__ y, long c, unsigned s) {
  uint4 v[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) v[k] = __ldcg(x + c * kChunkU4 + k * kThreads + threadIdx.x);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    v[k].x += s;
    y[c * kChunkU4 + k * kThreads + threadIdx.x] = v[k];
  }
}
__global__ void __launch_bounds__(kThreads) k_copy(const uint4* __restrict__ x, uint4* __restrict__ y, long n) {
  long c = blockIdx.x;
  uint4 v[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) v[k] = __ldcg(x + c * kChunkU4 + k * kThreads + threadIdx.x);
#pragma unroll
  for (int k = 0; k < kPer; ++k) y[c * kChunkU4 + k * kThreads + threadIdx.x] = v[k];
}
__global__ void __launch_bounds__(kThreads) k_same0(const uint4* __restrict__ x, uint4* __restrict__ y, long n) {
  long c = blockIdx.x;
  unsigned s = stats(x, c);
  s = __reduce_xor_sync(0xffffffffu, s);
  __syncthreads();
  write(x, y, c, s);
}
__global__ void __launch_bounds__(kThreads) k_same2(const uint4* __restrict__ x, uint4* __restrict__ y, long n) {
  long c = 2L * blockIdx.x;
  unsigned s0 = stats(x, c), s1 = stats(x, c + 1);
  s0 = __reduce_xor_sync(0xffffffffu, s0);
  s1 = __reduce_xor_sync(0xffffffffu, s1);
  __syncthreads();
  write(x, y, c, s0);
  write(x, y, c + 1, s1);
}
__global__ void __launch_bounds__(kThreads) k_other(const uint4* __restrict__ x, uint4* __restrict__ y, long n, int lag) {
  long i = blockIdx.x;
  unsigned s = 0;
  if (i < n) s = __reduce_xor_sync(0xffffffffu, stats(x, i));
  __syncthreads();
  if (i >= lag) write(x, y, i - lag, s);
}


// Persistent variants: G blocks, block b owns chunks of 16 KiB b, b + G, b + 2G, ...; at
// step k it reads its chunk k (L2 evict_last) and re-reads (L2 evict_first) and writes the
// chunk of step k - L: its own (plocal: same SM) or the one of block (b + G/2) % G
// (premote: another SM, the other partition about half the time). Same traffic, same
// latency chain; only where the re-read happens differs.
constexpr int kHalfU4 = 1024;  // 16 KiB of uint4
__device__ __forceinline__ uint4 ld_pol(const uint4* p, unsigned long long pol) {
  uint4 r;
  asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
  return r;
}
template <bool remote>
__global__ void __launch_bounds__(kThreads) k_persist(const uint4* __restrict__ x, uint4* __restrict__ y, long n, int L) {
  unsigned long long keep, drop;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(keep));
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(drop));
  const long G = gridDim.x, b = blockIdx.x;
  const long owner = remote ? (b + G / 2) % G : b;
  const long steps = (n + G - 1) / G;
  for (long k = 0; k < steps + L; ++k) {
    unsigned s = 0;
    const long c = b + k * G;
    if (k < steps && c < n) {
      uint4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = ld_pol(x + c * kHalfU4 + j * kThreads + threadIdx.x, keep);
#pragma unroll
      for (int j = 0; j < 4; ++j) s += v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
      s = __reduce_xor_sync(0xffffffffu, s);
    }
    const long w = owner + (k - L) * G;
    if (k >= L && w < n) {
      uint4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = ld_pol(x + w * kHalfU4 + j * kThreads + threadIdx.x, drop);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j].x += s;
        y[w * kHalfU4 + j * kThreads + threadIdx.x] = v[j];
      }
    }
  }
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? 2 : 21;  // any argument: one timed launch each (for ncu)
  const long n = 8192;  // chunks: 256 MiB
  const int lag = 384;
  uint4 *x, *y, *flush;
  cudaMalloc(&x, n * kChunkU4 * sizeof(uint4));
  cudaMalloc(&y, n * kChunkU4 * sizeof(uint4));
  cudaMalloc(&flush, 256 << 20);
  cudaMemset(x, 1, n * kChunkU4 * sizeof(uint4));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const char* names[] = {"copy", "same0", "same2", "other", "plocal", "premote", "plocal6", "premote6"};
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (int v = 0; v < 8; ++v) {
    std::vector<float> ms;
    for (int r = 0; r < reps; ++r) {
      cudaMemsetAsync(flush, r, 256 << 20);
      cudaEventRecord(a);
      if (v == 0) k_copy<<<n, kThreads>>>(x, y, n);
      if (v == 1) k_same0<<<n, kThreads>>>(x, y, n);
      if (v == 2) k_same2<<<n / 2, kThreads>>>(x, y, n);
      if (v == 3) k_other<<<n + lag, kThreads>>>(x, y, n, lag);
      if (v == 4) k_persist<false><<<sms * 4, kThreads>>>(x, y, 2 * n, 2);
      if (v == 5) k_persist<true><<<sms * 4, kThreads>>>(x, y, 2 * n, 2);
      if (v == 6) k_persist<false><<<sms * 6, kThreads>>>(x, y, 2 * n, 1);
      if (v == 7) k_persist<true><<<sms * 6, kThreads>>>(x, y, 2 * n, 1);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float t;
      cudaEventElapsedTime(&t, a, b);
      if (r > 0) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double us = ms[ms.size() / 2] * 1e3;
    std::printf("%-6s median %8.1f us  %6.0f GB/s (x + y = 512 MiB)\n", names[v], us, 512.0 * 1048576 / (us * 1e3));
  }
  cudaError_t e = cudaGetLastError();
  std::printf("status: %s\n", cudaGetErrorString(e));
  return 0;
}

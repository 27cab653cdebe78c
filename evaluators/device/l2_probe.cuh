// L2 partition probes and the owner-aware copy: the worker's harness compiles them with
// NVRTC (embedded by CMake, gpu::L2ProbeSource), and the nvcc experiments in scripts/
// include this file; it uses nothing from kevolve.h, so both can. The launches are in
// evaluators/src/l2_calibration.cpp (the "l2" part of the device calibration).
#ifndef KEVOLVE_L2_PROBE_CUH
#define KEVOLVE_L2_PROBE_CUH

// One block per SM acts, the first that lands on SM `sm` (claim[sm]); the launch asks for
// enough shared memory that an SM holds one block.
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
// Marks seen[id] for the SM id of every block (ids at or above 1024 as 1023); launched with
// the probes' shared memory, so that the blocks spread over every SM.
extern "C" __global__ void kv_l2_smids(unsigned* seen) {
  if (threadIdx.x == 0) seen[kv_smid() < 1024 ? kv_smid() : 1023] = 1;
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
// and the store waits for the load). The line's address is stored first, so that the load
// of its offset (an L2 access every 32 bytes of offsets, with the L1 given to shared
// memory) and the address arithmetic are over before the first clock read; on the H200 the
// offset's load otherwise added about 270 cycles to every fourth line.
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
    const unsigned* p = base + off[i] / 4;
    where[warp] = reinterpret_cast<long long>(p);  // waits for p
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

#endif  // KEVOLVE_L2_PROBE_CUH

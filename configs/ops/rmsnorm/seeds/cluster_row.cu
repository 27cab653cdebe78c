// rmsnorm seed for very long rows: a thread-block cluster of CS blocks per row.
// Block `rank` of a cluster owns a contiguous slice of its row (ceil(groups / CS)
// groups of VEC = VBYTES / sizeof_T elements, one 16-, 8- or 4-byte access each), holds
// it in registers (CHUNKS groups per thread), and reduces it to a partial sum of squares.
// The CS partials meet through distributed shared memory: each block publishes its
// partial in its own shared memory, cluster barrier, then every warp reads the CS
// partials (lane r reads rank r) and adds them in one fixed butterfly, so every block
// gets the same bits. x is read from DRAM once and y written once, even for a 1 MiB row
// (256 x 262144 f32: 8 blocks of 512 threads x 64 floats each), and rows x CS blocks
// keep the whole GPU busy where one block per row would leave most SMs idle.
// The launch adapts to the row: CS is the smallest power of two (at most CLUSTER) whose
// blocks of BLOCK threads hold the row in one tile, and the block the smallest power of
// two >= 64 threads that holds the slice; short rows get CS = 1 (no cluster traffic).
// Slices longer than a tile (rows > CLUSTER * BLOCK * CHUNKS * VEC) stream: tiles are
// loaded one after another for the partial, then re-read last tile first (from
// registers, then mostly from L2) to write. Empty slices contribute 0.
// WREG=1 loads w for the register tile before the reduction instead of after it.
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// No thread exits before the final cluster barrier: a block's shared memory must stay
// alive until the other blocks of its cluster have read it.
// @kevolve param   CLUSTER 8 4 2
// @kevolve param   BLOCK   512 1024 256
// @kevolve param   VBYTES  16 8 4
// @kevolve param   CHUNKS  16 8 4 2
// @kevolve param   WREG    0 1
// @kevolve param   STCS    0 1
// Presets (tried in generation 0): per-shape winners measured on the H200, eighth session.
//   bf16/f16 16384x4096 and 8192x8192: 70.0-70.9 us:
// @kevolve preset  BLOCK=512 CHUNKS=4 CLUSTER=8 WREG=1
//   f32 16384x4096, 8192x8192, 4096x32768: 134.0, 134.8, 277.7 us:
// @kevolve preset  BLOCK=1024 CHUNKS=16 CLUSTER=8 VBYTES=8
// @kevolve require VBYTES >= sizeof_T
// @kevolve require CHUNKS * VBYTES * (1 + WREG) <= 256
// @kevolve require CHUNKS * VBYTES * (1 + WREG) / 4 + 24 <= 65536 / BLOCK
// @kevolve entry   rmsnorm_cluster
// @kevolve grid    rows * min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T)))
// @kevolve block   min(BLOCK, max(64, pow2_ceil(ceil_div(ceil_div(cols, min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T)))), CHUNKS * VBYTES / sizeof_T))))
// @kevolve cluster min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T))), 1, 1
// @kevolve smem    0
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

#define VEC (VBYTES / KV_SIZEOF_T)
// A group of VEC elements as raw bits: one 16-, 8- or 4-byte access. 16-bit types are
// kept packed (two per 32-bit register) and converted with 32-bit operations.
typedef kv::Group<VBYTES> Vec;

// Block-wide sum; every thread gets the same value.
__device__ __forceinline__ float block_sum(float s) {
  __shared__ float red[BLOCK / 32];
  s = kv::reduce_sum<true>(s, nullptr);  // warp butterfly
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  s = 0.f;
  const int nw = blockDim.x / 32;
  for (int i = 0; i < nw; ++i) s += red[i];
  return s;
}

template <bool AL, int CH>
__device__ __forceinline__ void cluster_row(const T* __restrict__ xr, const T* __restrict__ w, T* __restrict__ yr,
                                            int cols, float eps, bool live) {
  __shared__ float part;  // this block's partial, read by the whole cluster
  cg::cluster_group cluster = cg::this_cluster();
  const int cs = (int)cluster.num_blocks();
  const int rank = (int)cluster.block_rank();
  const int nt = blockDim.x, tid = threadIdx.x;
  const int ngroups = (cols + VEC - 1) / VEC;
  const int gpb = (ngroups + cs - 1) / cs;  // groups per block
  const int g0 = min(ngroups, rank * gpb);
  const int g1 = live ? min(ngroups, g0 + gpb) : g0;  // this block's groups: [g0, g1)
  const int tile = nt * CH;
  const int ntiles = max(1, (g1 - g0 + tile - 1) / tile);
  Vec v[CH];
#if WREG
  Vec wv[CH];
#endif
  float ss = 0.f;
  for (int t = 0; t < ntiles; ++t) {
    const int gb = g0 + t * tile + tid;
#pragma unroll
    for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL, size_t>(xr, gb + c * nt, gb + c * nt < g1, cols);
#if WREG
    if (t == ntiles - 1) {
#pragma unroll
      for (int c = 0; c < CH; ++c) wv[c] = kv::load_group<VBYTES, AL, size_t>(w, gb + c * nt, gb + c * nt < g1, cols);
    }
#endif
    float s = 0.f;  // missing elements are zeros
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      float f[VEC];
      kv::unpack(v[c], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) s = fmaf(f[k], f[k], s);
      kv::launder(v[c]);
    }
    ss += s;
  }
  ss = block_sum(ss);
  if (cs > 1) {
    if (tid == 0) part = ss;
    cluster.sync();  // partials written and visible cluster-wide
    const int lane = tid % 32;
    float p = 0.f;
    if (lane < cs) p = *cluster.map_shared_rank(&part, lane);
    ss = kv::reduce_sum<true>(p, nullptr);
    cluster.barrier_arrive();  // done reading remote shared memory; waited for at the end
  }
  const float rstd = rsqrtf(ss / (float)cols + eps);

  for (int t = ntiles - 1; t >= 0; --t) {
    const int gb = g0 + t * tile + tid;
    if (t != ntiles - 1) {
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL, size_t>(xr, gb + c * nt, gb + c * nt < g1, cols);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int g = gb + c * nt;
      if (g >= g1) continue;
      float f[VEC], wf[VEC];
#if WREG
      kv::unpack(t == ntiles - 1 ? wv[c] : kv::load_group<VBYTES, AL, size_t>(w, g, true, cols), wf);
#else
      kv::unpack(kv::load_group<VBYTES, AL, size_t>(w, g, true, cols), wf);
#endif
      kv::unpack(v[c], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) f[k] = f[k] * rstd * wf[k];
      kv::store_group<VBYTES, AL, STCS, size_t>(yr, g, cols, kv::pack<VBYTES>(f));  // STCS: streaming store, y is not read again
    }
  }
  if (cs > 1) cluster.barrier_wait();  // keep `part` alive until every block has read it
}

// The unaligned path (scalar accesses), compiled apart and with half the chunks per tile:
// inlined next to the aligned path, or with all CHUNKS, it makes ptxas spill at 64
// registers. It is correct for any CHUNKS; rows longer than its tile stream.
__device__ __noinline__ void cluster_row_unaligned(const T* __restrict__ xr, const T* __restrict__ w, T* __restrict__ yr,
                                            int cols, float eps, bool live) {
  cluster_row<false, (CHUNKS > 1 ? CHUNKS / 2 : 1)>(xr, w, yr, cols, eps, live);
}

// Arguments: buffers (x, w, y), sizes (rows, cols), scalars (eps).
extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_cluster(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int cols, float eps) {
  const int cs = (int)cg::this_cluster().num_blocks();
  const int row = blockIdx.x / cs;
  const bool live = row < rows;  // always, with the launch above; a dead block still joins the barriers
  const size_t off = (size_t)(live ? row : 0) * cols;
  if (cols % VEC == 0) cluster_row<true, CHUNKS>(x + off, w, y + off, cols, eps, live);
  else cluster_row_unaligned(x + off, w, y + off, cols, eps, live);
}

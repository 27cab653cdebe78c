// layernorm seed for very long rows: a thread-block cluster of CS blocks per row.
// Block `rank` of a cluster owns a contiguous slice of its row (ceil(groups / CS)
// groups of VEC = VBYTES / sizeof_T elements, one 16-, 8- or 4-byte access each), holds
// it in registers (CHUNKS groups per thread), and reduces it to partial statistics.
// The CS partials meet through distributed shared memory: each block publishes its
// (count, mean, M2) in its own shared memory, cluster barrier, then every warp reads the
// CS partials (lane r reads rank r) and merges them in one fixed butterfly, so every
// block gets the same bits. x is read from DRAM once and y written once, even for a
// 1 MiB row (256 x 262144 f32: 8 blocks of 512 threads x 64 floats each), and rows x CS
// blocks keep the whole GPU busy where one block per row would leave most SMs idle.
// The launch adapts to the row: CS is the smallest power of two (at most CLUSTER) whose
// blocks of BLOCK threads hold the row in one tile, and the block the smallest power of
// two >= 64 threads that holds the slice; short rows get CS = 1 (no cluster traffic).
// Slices longer than a tile (rows > CLUSTER * BLOCK * CHUNKS * VEC) stream: tiles are
// loaded one after another for the statistics, then re-read last tile first (from
// registers, then mostly from L2) to write. Empty slices contribute count 0.
// WREG=1 loads w and b for the register tile before the reduction instead of after it.
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// Statistics in f32, robust to a large mean: each thread takes the exact two-pass mean
// and sum of squared deviations of its part of a tile (in registers); (count, mean, M2)
// triples are merged with Chan's formula over tiles, warps (butterfly, lower lane
// first), the block's warps in order, and the cluster's blocks. No E[x^2] - E[x]^2.
// No thread exits before the final cluster barrier: a block's shared memory must stay
// alive until the other blocks of its cluster have read it.
// @kevolve param   CLUSTER 8 4 2
// @kevolve param   BLOCK   512 1024 256
// @kevolve param   VBYTES  16 8 4
// @kevolve param   CHUNKS  16 8 4 2
// @kevolve param   WREG    0 1
// @kevolve param   STCS    0 1
// @kevolve require VBYTES >= sizeof_T
// @kevolve require CHUNKS * VBYTES * (1 + 2 * WREG) <= 256
// @kevolve require CHUNKS * VBYTES * (1 + 2 * WREG) / 4 + 24 <= 65536 / BLOCK
// @kevolve entry   layernorm_cluster
// @kevolve grid    rows * min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T)))
// @kevolve block   min(BLOCK, max(64, pow2_ceil(ceil_div(ceil_div(cols, min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T)))), CHUNKS * VBYTES / sizeof_T))))
// @kevolve cluster min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T))), 1, 1
// @kevolve smem    0
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

#define VEC (VBYTES / KV_SIZEOF_T)
// A group of VEC elements as raw bits (kv::Group): one 16-, 8- or 4-byte access. 16-bit
// types are kept packed (two per 32-bit register) and converted with 32-bit operations.
typedef kv::Group<VBYTES> Vec;

// Statistics of one thread's part of a tile (chunk c is group gb + c * stride), exact
// two-pass in registers: the mean of the part, then squared deviations from it.
template <bool AL, int CH>
__device__ __forceinline__ kv::Stats tile_stats(Vec (&v)[CH], int gb, int stride, int g1, int cols) {
  int cnt = 0;
  float s = 0.f;  // missing elements are zeros: they add nothing
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    cnt += kv::group_count<VBYTES, AL>(gb + c * stride, g1, cols);
    float f[VEC];
    kv::unpack(v[c], f);
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += f[k];
    kv::launder(v[c]);
  }
  const float mean = cnt > 0 ? s / (float)cnt : 0.f;
  float q = 0.f;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int nv = kv::group_count<VBYTES, AL>(gb + c * stride, g1, cols);
    float f[VEC];
    kv::unpack(v[c], f);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float d = f[k] - mean;
      if (AL ? nv > 0 : k < nv) q = fmaf(d, d, q);
    }
    kv::launder(v[c]);
  }
  return kv::Stats{(float)cnt, mean, q};
}

// y = (x - mean) * rstd * w + b for one group.
__device__ __forceinline__ Vec normalize(const Vec& x, const Vec& w, const Vec& b, float mean, float rstd) {
  float f[VEC], wf[VEC], bf[VEC];
  kv::unpack(x, f);
  kv::unpack(w, wf);
  kv::unpack(b, bf);
#pragma unroll
  for (int k = 0; k < VEC; ++k) f[k] = fmaf((f[k] - mean) * rstd, wf[k], bf[k]);
  return kv::pack<VBYTES>(f);
}

template <bool AL, int CH>
__device__ __forceinline__ void cluster_row(const T* __restrict__ xr, const T* __restrict__ w, const T* __restrict__ b,
                                            T* __restrict__ yr, int cols, float eps, bool live) {
  __shared__ kv::Stats part;  // this block's partial, read by the whole cluster
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
  Vec wv[CH], bv[CH];
#endif
  kv::Stats st{0.f, 0.f, 0.f};
  for (int t = 0; t < ntiles; ++t) {
    const int gb = g0 + t * tile + tid;
#pragma unroll
    for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL, size_t>(xr, gb + c * nt, gb + c * nt < g1, cols);
#if WREG
    if (t == ntiles - 1) {
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        wv[c] = kv::load_group<VBYTES, AL, size_t>(w, gb + c * nt, gb + c * nt < g1, cols);
        bv[c] = kv::load_group<VBYTES, AL, size_t>(b, gb + c * nt, gb + c * nt < g1, cols);
      }
    }
#endif
    st = kv::merge(st, tile_stats<AL, CH>(v, gb, nt, g1, cols));
  }
  st = kv::block_merge(st);
  if (cs > 1) {
    if (tid == 0) part = st;
    cluster.sync();  // partials written and visible cluster-wide
    const int lane = tid % 32;
    kv::Stats p{0.f, 0.f, 0.f};
    if (lane < cs) p = *cluster.map_shared_rank(&part, lane);
    st = kv::warp_merge(p);
    cluster.barrier_arrive();  // done reading remote shared memory; waited for at the end
  }
  const float mean = st.mean;
  const float rstd = rsqrtf(st.m2 / (float)cols + eps);

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
#if WREG
      const Vec wg = (t == ntiles - 1) ? wv[c] : kv::load_group<VBYTES, AL, size_t>(w, g, true, cols);
      const Vec bg = (t == ntiles - 1) ? bv[c] : kv::load_group<VBYTES, AL, size_t>(b, g, true, cols);
#else
      const Vec wg = kv::load_group<VBYTES, AL, size_t>(w, g, true, cols);
      const Vec bg = kv::load_group<VBYTES, AL, size_t>(b, g, true, cols);
#endif
      // STCS: streaming stores (y is not read again).
      kv::store_group<VBYTES, AL, STCS, size_t>(yr, g, cols, normalize(v[c], wg, bg, mean, rstd));
    }
  }
  if (cs > 1) cluster.barrier_wait();  // keep `part` alive until every block has read it
}

// The unaligned path (scalar accesses), compiled apart and with half the chunks per tile:
// inlined next to the aligned path, or with all CHUNKS, it makes ptxas spill at 64
// registers. It is correct for any CHUNKS; rows longer than its tile stream.
__device__ __noinline__ void cluster_row_unaligned(const T* __restrict__ xr, const T* __restrict__ w, const T* __restrict__ b,
                                            T* __restrict__ yr, int cols, float eps, bool live) {
  cluster_row<false, (CHUNKS > 1 ? CHUNKS / 2 : 1)>(xr, w, b, yr, cols, eps, live);
}

// Arguments: buffers (x, w, b, y), sizes (rows, cols), scalars (eps).
extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_cluster(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                  int rows, int cols, float eps) {
  const int cs = (int)cg::this_cluster().num_blocks();
  const int row = blockIdx.x / cs;
  const bool live = row < rows;  // always, with the launch above; a dead block still joins the barriers
  const size_t off = (size_t)(live ? row : 0) * cols;
  if (cols % VEC == 0) cluster_row<true, CHUNKS>(x + off, w, b, y + off, cols, eps, live);
  else cluster_row_unaligned(x + off, w, b, y + off, cols, eps, live);
}

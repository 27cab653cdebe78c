// softmax seed for very long rows: a thread-block cluster of CS blocks per row.
// Block `rank` of a cluster owns a contiguous slice of its row (ceil(groups / CS) groups
// of VEC = VBYTES / sizeof_T elements, one 16-, 8- or 4-byte access each) and holds it
// in registers (CHUNKS groups per thread), so x is read from DRAM once and y written
// once even for a 1 MiB row, and rows x CS blocks keep the whole GPU busy.
// Register path (slice <= one tile): all loads first (missing elements read as -inf);
// packed max (max.bf16x2 / max.f16x2) -> block max mb; e = ex2(x*log2e - mb*log2e), one
// FFMA + one MUFU.EX2 per element, kept in registers as floats; block sum sb. The CS
// pairs (mb, sb) meet through distributed shared memory: each block publishes its pair,
// cluster barrier, then every warp reads the CS pairs (lane r reads rank r) and reduces
// them in one fixed butterfly (max M, then sum S of sb * 2^((mb - M) * log2e)), so every
// block gets the same bits. y = e * (2^((mb - M) * log2e) / S): one FMUL per element.
// The launch adapts to the row: CS is the smallest power of two (at most CLUSTER) whose
// blocks of BLOCK threads hold the row in one tile, and the block the smallest power of
// two >= 64 threads that holds the slice; short rows get CS = 1 (no cluster traffic).
// Slices longer than a tile (rows > CLUSTER * BLOCK * CHUNKS * VEC) stream: per thread a
// running (max, sum) over the tiles, then the same block and cluster reductions, then a
// write pass that re-reads the slice (last tile first, from registers; the rest mostly
// from L2) and recomputes exp. Empty slices contribute (-inf, 0).
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// No thread exits before the final cluster barrier: a block's shared memory must stay
// alive until the other blocks of its cluster have read it.
// @kevolve param   CLUSTER 8 4 2
// @kevolve param   BLOCK   256 512 128 1024
// @kevolve param   VBYTES  16 8 4
// @kevolve param   CHUNKS  8 4 16 2
// @kevolve param   STCS    0 1
// @kevolve require VBYTES >= sizeof_T
// @kevolve require CHUNKS * VBYTES / sizeof_T <= 64
// @kevolve require CHUNKS * VBYTES / sizeof_T + 2 * CHUNKS + 24 <= 65536 / BLOCK
// @kevolve entry   softmax_cluster
// @kevolve grid    rows * min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T)))
// @kevolve block   min(BLOCK, max(64, pow2_ceil(ceil_div(ceil_div(cols, min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T)))), CHUNKS * VBYTES / sizeof_T))))
// @kevolve cluster min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T))), 1, 1
// @kevolve smem    0
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

#define VEC (VBYTES / KV_SIZEOF_T)
#define NWORD (VBYTES / 4)
// A group of VEC elements as raw bits: one 16-, 8- or 4-byte access. 16-bit types are
// kept packed (two per 32-bit word) and converted with 32-bit operations. Groups are
// loaded with kv::load_group, missing elements (past cols, or the whole group when !ok)
// read as -inf (fill KV_NEG_INF_WORD); AL: the row is VBYTES-aligned and cols % VEC == 0,
// so a group is whole or absent; otherwise the accesses are scalar.
typedef kv::Group<VBYTES> Vec;
#define LOG2E 1.4426950408889634f

// Folds a group into a running word max (a tree inside the group, for ILP).
__device__ __forceinline__ unsigned int max_group(unsigned int acc, const Vec& u) {
#if NWORD == 4
  return kv::word_max2(acc, kv::word_max2(kv::word_max2(u.w[0], u.w[1]), kv::word_max2(u.w[2], u.w[3])));
#elif NWORD == 2
  return kv::word_max2(acc, kv::word_max2(u.w[0], u.w[1]));
#else
  return kv::word_max2(acc, u.w[0]);
#endif
}

// e = 2^(x*log2e + nml) for a group (nml = -max*log2e), and the group's sum (a tree).
__device__ __forceinline__ float exp_group(const Vec& u, float nml, float (&e)[VEC]) {
  float f[VEC];
  kv::unpack(u, f);
#pragma unroll
  for (int k = 0; k < VEC; ++k) e[k] = kv::ex2(fmaf(f[k], LOG2E, nml));
  float t[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) t[k] = e[k];
#pragma unroll
  for (int h = VEC / 2; h > 0; h /= 2)
#pragma unroll
    for (int k = 0; k < h; ++k) t[k] += t[k + h];
  return t[0];
}

// Block-wide max and sum; every thread gets the same bits. blockDim.x is a power of two
// >= 64 (the launch makes it so). Separate arrays: no barrier between the two.
__device__ __forceinline__ float block_max(float v) {
  __shared__ float red[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int nw = blockDim.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = red[lane & (nw - 1)];
  for (int o = nw / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float block_sum(float v) {
  __shared__ float red[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int nw = blockDim.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = red[lane & (nw - 1)];
  for (int o = nw / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A block's partial: its max and the sum of 2^((x - max) * log2e) over its slice.
struct Stats {
  float m, s;
};

// Reduces the CS partials of the cluster to (M, S); every thread of the cluster gets the
// same bits. cs is a power of two <= 32: lane l reads rank l & (cs - 1), then a butterfly.
__device__ __forceinline__ Stats cluster_reduce(cg::cluster_group& cluster, Stats* part, int cs) {
  const int lane = threadIdx.x % 32;
  const Stats p = *cluster.map_shared_rank(part, lane & (cs - 1));
  float M = p.m;
  for (int o = cs / 2; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  float S = p.s * kv::ex2((p.m - M) * LOG2E);  // an empty slice: 0 * ex2(-inf) = 0
  for (int o = cs / 2; o > 0; o >>= 1) S += __shfl_xor_sync(0xffffffffu, S, o);
  return Stats{M, S};
}

template <bool AL, int CH>
__device__ __forceinline__ void cluster_row(const T* __restrict__ xr, T* __restrict__ yr, int cols, bool live) {
  __shared__ Stats part;  // this block's partial, read by the whole cluster
  cg::cluster_group cluster = cg::this_cluster();
  const int cs = (int)cluster.num_blocks();
  const int rank = (int)cluster.block_rank();
  const int nt = blockDim.x, tid = threadIdx.x;
  const int ngroups = (cols + VEC - 1) / VEC;
  const int gpb = (ngroups + cs - 1) / cs;  // groups per block
  const int g0 = min(ngroups, rank * gpb);
  const int g1 = live ? min(ngroups, g0 + gpb) : g0;  // this block's groups: [g0, g1)
  const int n = g1 - g0;
  const int tile = nt * CH;
  const T* xs = xr + g0 * VEC;  // the slice (g0 * VEC < cols: the offset fits an int)
  T* ys = yr + g0 * VEC;
  // Aligned slices start on a group boundary, so group indices below are slice-relative.
  const int ntiles = max(1, (n + tile - 1) / tile);
  Vec v[CH];

  if (ntiles == 1) {
    // Register path. Chunk c (groups c*nt .. c*nt+nt-1) exists iff c * nt < n, the same
    // for the whole block.
    const bool full = AL && n == tile;
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int g = tid + c * nt;
      if (full || (c + 1) * nt <= n) v[c] = kv::load_group<VBYTES, AL>(xs, g, true, cols - g0 * VEC, KV_NEG_INF_WORD);
      else if (c * nt < n) v[c] = kv::load_group<VBYTES, AL>(xs, g, g < n, cols - g0 * VEC, KV_NEG_INF_WORD);
    }
    unsigned int macc = KV_NEG_INF_WORD;
#pragma unroll
    for (int c = 0; c < CH; ++c)
      if (full || c * nt < n) macc = max_group(macc, v[c]);
    const float mb = block_max(kv::word_max(macc));  // -inf only for an empty slice
    const float nml = mb == kv::neg_inf() ? 0.f : -mb * LOG2E;
    float e[CH][VEC];
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < CH; ++c)
      if (full || c * nt < n) s += exp_group(v[c], nml, e[c]);
    const float sb = block_sum(s);
    float scale = kv::rcp(sb);
    if (cs > 1) {
      if (tid == 0) part = Stats{mb, sb};
      cluster.sync();  // partials written and visible cluster-wide
      const Stats t = cluster_reduce(cluster, &part, cs);
      cluster.barrier_arrive();  // done reading remote shared memory; waited for at the end
      scale = kv::ex2((mb - t.m) * LOG2E) * kv::rcp(t.s);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int g = tid + c * nt;
      if (full || (c * nt < n && g < n)) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) e[c][k] *= scale;
        kv::store_group<VBYTES, AL, STCS>(ys, g, cols - g0 * VEC, kv::pack<VBYTES>(e[c]));
      }
    }
    if (cs > 1) cluster.barrier_wait();  // keep `part` alive until every block has read it
    return;
  }

  // Streaming path: per thread, m = running max, s = sum of 2^((x - m) * log2e).
  float m = kv::neg_inf(), s = 0.f;
  for (int t = 0; t < ntiles; ++t) {
    const int gb = t * tile + tid;
    if (AL && (t + 1) * tile <= n) {  // a whole tile: no checks
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL>(xs, gb + c * nt, true, cols - g0 * VEC, KV_NEG_INF_WORD);
    } else {
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL>(xs, gb + c * nt, gb + c * nt < n, cols - g0 * VEC, KV_NEG_INF_WORD);
    }
    unsigned int macc = KV_NEG_INF_WORD;
#pragma unroll
    for (int c = 0; c < CH; ++c) macc = max_group(macc, v[c]);
    const float mt = kv::word_max(macc);
    if (mt != kv::neg_inf()) {  // else this thread has no element in this tile
      const float mn = fmaxf(m, mt);
      const float nml = -mn * LOG2E;
      float st = 0.f;
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        float e[VEC];
        st += exp_group(v[c], nml, e);
      }
      s = s * kv::ex2((m - mn) * LOG2E) + st;  // m = -inf: s = 0, ex2(-inf) = 0
      m = mn;
    }
  }
  Stats st;
  st.m = block_max(m);  // a streaming slice is never empty: finite
  st.s = block_sum(s * kv::ex2((m - st.m) * LOG2E));
  if (cs > 1) {
    if (tid == 0) part = st;
    cluster.sync();
    st = cluster_reduce(cluster, &part, cs);
    cluster.barrier_arrive();
  }
  const float inv = kv::rcp(st.s);
  const float nml = -st.m * LOG2E;
  for (int t = ntiles - 1; t >= 0; --t) {
    const int gb = t * tile + tid;
    if (t != ntiles - 1) {  // a whole tile
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL>(xs, gb + c * nt, true, cols - g0 * VEC, KV_NEG_INF_WORD);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int g = gb + c * nt;
      if (g >= n) continue;
      float e[VEC];
      exp_group(v[c], nml, e);
#pragma unroll
      for (int k = 0; k < VEC; ++k) e[k] *= inv;
      kv::store_group<VBYTES, AL, STCS>(ys, g, cols - g0 * VEC, kv::pack<VBYTES>(e));
    }
  }
  if (cs > 1) cluster.barrier_wait();
}

// The unaligned path (scalar accesses), compiled apart with a quarter of the chunks per
// tile so that it does not raise the register count of the aligned path; longer slices
// stream. None of the tuning shapes takes it.
__device__ __noinline__ void cluster_row_unaligned(const T* __restrict__ xr, T* __restrict__ yr, int cols, bool live) {
  cluster_row<false, (CHUNKS > 4 ? CHUNKS / 4 : 1)>(xr, yr, cols, live);
}

// Register cap, as in block_row.cu: the tile's floats, 2 per chunk, 20 more (a quarter
// more for f32), at most what a block of BLOCK threads may use.
#define TILE_F (CHUNKS * VEC)
#define REG_CAP0 (((TILE_F + 2 * CHUNKS + 20 + (KV_SIZEOF_T == 4 ? TILE_F / 4 : 0) + 7) / 8) * 8)
#define REG_CAP1 (REG_CAP0 < 65536 / BLOCK ? REG_CAP0 : 65536 / BLOCK)
#define REG_CAP (REG_CAP1 > 255 ? 255 : REG_CAP1)

// Arguments: buffers (x, y), sizes (rows, cols).
extern "C" __global__ void __maxnreg__(REG_CAP)
softmax_cluster(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  const int cs = (int)cg::this_cluster().num_blocks();
  const int row = blockIdx.x / cs;
  const bool live = row < rows;  // always, with the launch above; a dead block still joins the barriers
  const size_t off = (size_t)(live ? row : 0) * cols;
  if (cols % VEC == 0) cluster_row<true, CHUNKS>(x + off, y + off, cols, live);
  else cluster_row_unaligned(x + off, y + off, cols, live);
}

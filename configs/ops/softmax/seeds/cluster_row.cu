// softmax seed for very long rows: a thread-block cluster of CS blocks per row.
// Block `rank` of a cluster owns a contiguous slice of its row (ceil(groups / CS)
// groups of VEC = VBYTES / sizeof_T elements, one 16-, 8- or 4-byte access each), holds
// it in registers (CHUNKS groups per thread), and reduces it to a partial (max, sum of
// exp(x - max)). The CS partials meet through distributed shared memory: each block
// publishes its pair in its own shared memory, cluster barrier, then every warp reads
// the CS pairs (lane r reads rank r) and merges them online in one fixed butterfly, so
// every block gets the same bits. x is read from DRAM once and y written once, even for
// a 1 MiB row (256 x 262144 f32: 8 blocks of 512 threads x 64 floats each), and
// rows x CS blocks keep the whole GPU busy where one block per row would leave most
// SMs idle (or re-read the row).
// The launch adapts to the row: CS is the smallest power of two (at most CLUSTER) whose
// blocks of BLOCK threads hold the row in one tile, and the block the smallest power of
// two >= 64 threads that holds the slice; short rows get CS = 1 (no cluster traffic).
// Slices longer than a tile (rows > CLUSTER * BLOCK * CHUNKS * VEC) stream: tiles are
// loaded one after another for the partial, then re-read last tile first (from
// registers, then mostly from L2) to write. Empty slices contribute (-inf, 0).
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// No thread exits before the final cluster barrier: a block's shared memory must stay
// alive until the other blocks of its cluster have read it.
// @kevolve param   CLUSTER 8 4 2
// @kevolve param   BLOCK   512 1024 256
// @kevolve param   VBYTES  16 8 4
// @kevolve param   CHUNKS  16 8 4 2
// @kevolve param   STCS    0 1
// @kevolve require VBYTES >= sizeof_T
// @kevolve require CHUNKS * VBYTES <= 256
// @kevolve require CHUNKS * VBYTES / 4 + 24 <= 65536 / BLOCK
// @kevolve entry   softmax_cluster
// @kevolve grid    rows * min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T)))
// @kevolve block   min(BLOCK, max(64, pow2_ceil(ceil_div(ceil_div(cols, min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T)))), CHUNKS * VBYTES / sizeof_T))))
// @kevolve cluster min(CLUSTER, pow2_ceil(ceil_div(cols, BLOCK * CHUNKS * VBYTES / sizeof_T))), 1, 1
// @kevolve smem    0
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

#define VEC (VBYTES / KV_SIZEOF_T)
#if VBYTES == 16
typedef uint4 Raw;
#elif VBYTES == 8
typedef uint2 Raw;
#else
typedef unsigned int Raw;
#endif
// A group of VEC elements as raw bits: one 16-, 8- or 4-byte access. 16-bit types are
// kept packed (two per 32-bit register) and converted with 32-bit operations.
union Vec {
  Raw r;
  unsigned int w[VBYTES / 4];
  T v[VEC];
};

// Group g (elements g*VEC .. g*VEC+VEC-1) of a row, or zeros when !ok. AL: the row is
// VBYTES-aligned and cols % VEC == 0, so a group is either whole or absent; otherwise
// the accesses are scalar and stop at cols.
template <bool AL>
__device__ __forceinline__ Vec load_group(const T* __restrict__ p, int g, bool ok, int cols) {
  Vec u;
  u.r = Raw{};
  if (AL) {
    if (ok) u.r = *reinterpret_cast<const Raw*>(p + (size_t)g * VEC);
  } else if (ok) {
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (g * VEC + k < cols) u.v[k] = p[(size_t)g * VEC + k];
  }
  return u;
}

template <bool AL>
__device__ __forceinline__ void store_group(T* __restrict__ p, int g, int cols, const Vec& u) {
  if (AL) {
    Raw* q = reinterpret_cast<Raw*>(p + (size_t)g * VEC);
    if (STCS) __stcs(q, u.r);  // streaming store: y is not read again
    else *q = u.r;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (g * VEC + k < cols) p[(size_t)g * VEC + k] = u.v[k];
  }
}

__device__ __forceinline__ void unpack(const Vec& u, float (&f)[VEC]) {
#if defined(KV_DTYPE_F32)
#pragma unroll
  for (int k = 0; k < VEC; ++k) f[k] = u.v[k];
#elif defined(KV_DTYPE_BF16)
#pragma unroll
  for (int j = 0; j < VEC / 2; ++j) {
    f[2 * j] = __uint_as_float(u.w[j] << 16);
    f[2 * j + 1] = __uint_as_float(u.w[j] & 0xffff0000u);
  }
#else
#pragma unroll
  for (int j = 0; j < VEC / 2; ++j) {
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&u.w[j]));
    f[2 * j] = p.x;
    f[2 * j + 1] = p.y;
  }
#endif
}

// Rounds to nearest even, two elements per conversion for 16-bit types.
__device__ __forceinline__ Vec pack(const float (&f)[VEC]) {
  Vec u;
#if defined(KV_DTYPE_F32)
#pragma unroll
  for (int k = 0; k < VEC; ++k) u.v[k] = f[k];
#elif defined(KV_DTYPE_BF16)
#pragma unroll
  for (int j = 0; j < VEC / 2; ++j) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    u.w[j] = *reinterpret_cast<const unsigned int*>(&h);
  }
#else
#pragma unroll
  for (int j = 0; j < VEC / 2; ++j) {
    const __half2 h = __floats2half2_rn(f[2 * j], f[2 * j + 1]);
    u.w[j] = *reinterpret_cast<const unsigned int*>(&h);
  }
#endif
  return u;
}

// An identity byte permute that the compilers cannot see through: floats converted from
// u before it are not kept alive across it (they are converted again, which is cheap),
// so a tile lives in registers once, as raw bits, not also as floats. (An empty asm is
// not enough: ptxas looks through it and keeps f16 conversions alive, then spills.)
__device__ __forceinline__ void launder(Vec& u) {
#pragma unroll
  for (int j = 0; j < VBYTES / 4; ++j) asm volatile("prmt.b32 %0, %0, 0, 0x3210;" : "+r"(u.w[j]));
}

// Elements of group g that exist: 0 at or past g1, fewer than VEC only for the last
// group of an unaligned row.
template <bool AL>
__device__ __forceinline__ int group_count(int g, int g1, int cols) {
  if (g >= g1) return 0;
  return AL ? VEC : min(VEC, cols - g * VEC);
}

// A running maximum m and s = sum of exp(x - m) over the elements seen.
struct Stats {
  float m, s;
};

// Online merge; symmetric in its bits (max and + commute), so any order of the two
// operands gives the same result.
__device__ __forceinline__ Stats merge(const Stats& a, const Stats& b) {
  const float m = fmaxf(a.m, b.m);
  if (m == kv::neg_inf()) return a;
  const float sa = a.m == kv::neg_inf() ? 0.f : a.s * __expf(a.m - m);
  const float sb = b.m == kv::neg_inf() ? 0.f : b.s * __expf(b.m - m);
  return Stats{m, sa + sb};
}

__device__ __forceinline__ Stats warp_merge(Stats s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Stats p;
    p.m = __shfl_xor_sync(0xffffffffu, s.m, o);
    p.s = __shfl_xor_sync(0xffffffffu, s.s, o);
    s = merge(s, p);
  }
  return s;
}

// Block-wide merge; every thread gets the same value.
__device__ __forceinline__ Stats block_merge(Stats s) {
  __shared__ Stats red[BLOCK / 32];
  s = warp_merge(s);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  s = red[0];
  const int nw = blockDim.x / 32;
  for (int i = 1; i < nw; ++i) s = merge(s, red[i]);
  return s;
}

// (max, sum of exp(x - max)) of one thread's part of a tile; missing elements excluded.
template <bool AL, int CH>
__device__ __forceinline__ Stats tile_stats(Vec (&v)[CH], int gb, int stride, int g1, int cols) {
  float m = kv::neg_inf();
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int nv = group_count<AL>(gb + c * stride, g1, cols);
    float f[VEC];
    unpack(v[c], f);
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (AL ? nv > 0 : k < nv) m = fmaxf(m, f[k]);
    launder(v[c]);
  }
  float s = 0.f;
  if (m != kv::neg_inf()) {
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int nv = group_count<AL>(gb + c * stride, g1, cols);
      float f[VEC];
      unpack(v[c], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k)
        if (AL ? nv > 0 : k < nv) s += __expf(f[k] - m);
      launder(v[c]);
    }
  }
  return Stats{m, s};
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
  const int tile = nt * CH;
  const int ntiles = max(1, (g1 - g0 + tile - 1) / tile);
  Vec v[CH];
  Stats st{kv::neg_inf(), 0.f};
  for (int t = 0; t < ntiles; ++t) {
    const int gb = g0 + t * tile + tid;
#pragma unroll
    for (int c = 0; c < CH; ++c) v[c] = load_group<AL>(xr, gb + c * nt, gb + c * nt < g1, cols);
    st = merge(st, tile_stats<AL, CH>(v, gb, nt, g1, cols));
  }
  st = block_merge(st);
  if (cs > 1) {
    if (tid == 0) part = st;
    cluster.sync();  // partials written and visible cluster-wide
    const int lane = tid % 32;
    Stats p{kv::neg_inf(), 0.f};
    if (lane < cs) p = *cluster.map_shared_rank(&part, lane);
    st = warp_merge(p);
    cluster.barrier_arrive();  // done reading remote shared memory; waited for at the end
  }
  const float mx = st.m;
  const float inv = 1.f / st.s;

  for (int t = ntiles - 1; t >= 0; --t) {
    const int gb = g0 + t * tile + tid;
    if (t != ntiles - 1) {
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = load_group<AL>(xr, gb + c * nt, gb + c * nt < g1, cols);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int g = gb + c * nt;
      if (g >= g1) continue;
      float f[VEC];
      unpack(v[c], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) f[k] = __expf(f[k] - mx) * inv;
      store_group<AL>(yr, g, cols, pack(f));
    }
  }
  if (cs > 1) cluster.barrier_wait();  // keep `part` alive until every block has read it
}

// The unaligned path (scalar accesses), compiled apart and with half the chunks per tile:
// inlined next to the aligned path, or with all CHUNKS, it makes ptxas spill at 64
// registers. It is correct for any CHUNKS; rows longer than its tile stream.
__device__ __noinline__ void cluster_row_unaligned(const T* __restrict__ xr, T* __restrict__ yr, int cols, bool live) {
  cluster_row<false, (CHUNKS > 1 ? CHUNKS / 2 : 1)>(xr, yr, cols, live);
}

// Arguments: buffers (x, y), sizes (rows, cols).
extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_cluster(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  const int cs = (int)cg::this_cluster().num_blocks();
  const int row = blockIdx.x / cs;
  const bool live = row < rows;  // always, with the launch above; a dead block still joins the barriers
  const size_t off = (size_t)(live ? row : 0) * cols;
  if (cols % VEC == 0) cluster_row<true, CHUNKS>(x + off, y + off, cols, live);
  else cluster_row_unaligned(x + off, y + off, cols, live);
}

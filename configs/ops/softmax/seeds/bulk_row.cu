// softmax seed that stages rows in shared memory with the Hopper bulk-copy engine
// (cp.async.bulk, completion counted on an mbarrier): one thread asks for a whole tile,
// so a block keeps up to SLICE KiB in flight with no registers held for it, and the SM's
// blocks overlap one another's load, reduce and store phases. It covers every regime:
// - short rows: a tile of R rows (R = ROWS, fewer if they exceed SLICE KiB); when R is at
//   least the number of warps, each warp reduces whole rows from shared memory;
// - medium rows: the whole block reduces each row of the tile in turn;
// - a block may take TILES consecutive tiles, double-buffered: the bulk copy of tile i+1
//   runs while tile i is reduced and written (fewer, longer-lived blocks);
// - long rows: a cluster of CS blocks per row (CS the smallest power of two, at most
//   CLUSTER, whose slices fit in SLICE KiB; when even CLUSTER blocks cannot, the
//   slices grow past SLICE), each block stages
//   one slice; the CS partials (max, sum) meet through distributed shared memory.
// Per row: max from shared memory (packed max.bf16x2 / max.f16x2), then
// e = 2^(x*log2e - m*log2e) summed (f32 writes e back in place), then the cluster
// combine, then y = e * scale written with 16-byte stores. x is read from DRAM once.
// Rows whose width is no multiple of 16 bytes (or unaligned buffers) are staged by
// ordinary loads and padded with -inf; the stores are then scalar.
// Cluster sizes above 8 are non-portable; the harness allows them on the kernel.
// @kevolve param   SLICE   64 32 16 96 128 192
// @kevolve param   CLUSTER 16 8
// @kevolve param   ROWS    8 1 2 4 16 32
// @kevolve param   TILES   1 2 4
// @kevolve param   BLOCK   256 128 512
// @kevolve param   STCS    0 1
// @kevolve entry   softmax_bulk
// @kevolve cluster min(CLUSTER, pow2_ceil(ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, SLICE * 1024))), 1, 1
// @kevolve grid    min(CLUSTER, pow2_ceil(ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, SLICE * 1024))) == 1 ? ceil_div(ceil_div(rows, (min(CLUSTER, pow2_ceil(ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, SLICE * 1024))) == 1 ? max(1, min(ROWS, SLICE * 1024 / (align_up(cols, 16 / sizeof_T) * sizeof_T))) : 1)), TILES) : ceil_div(rows, TILES) * min(CLUSTER, pow2_ceil(ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, SLICE * 1024)))
// @kevolve block   BLOCK
// @kevolve smem    (TILES > 1 && 2 * (min(CLUSTER, pow2_ceil(ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, SLICE * 1024))) == 1 ? max(1, min(ROWS, SLICE * 1024 / (align_up(cols, 16 / sizeof_T) * sizeof_T))) : 1) * align_up(ceil_div(cols, min(CLUSTER, pow2_ceil(ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, SLICE * 1024)))), 16 / sizeof_T) * sizeof_T <= 229376 ? 2 : 1) * (min(CLUSTER, pow2_ceil(ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, SLICE * 1024))) == 1 ? max(1, min(ROWS, SLICE * 1024 / (align_up(cols, 16 / sizeof_T) * sizeof_T))) : 1) * align_up(ceil_div(cols, min(CLUSTER, pow2_ceil(ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, SLICE * 1024)))), 16 / sizeof_T) * sizeof_T
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

#define VEC (16 / KV_SIZEOF_T)  // elements per 16-byte group
typedef kv::Group<16> Vec;
#define LOG2E 1.4426950408889634f

// ---- max over a warp (WARP) or over the block (blockDim.x a multiple of 32), as kv::reduce_sum ----
template <bool WARP>
__device__ __forceinline__ float reduce_max(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (WARP) return v;
  const int nw = blockDim.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : kv::neg_inf();
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

struct Stats {
  float m, s;
};

// One row's slice in shared memory (ng groups, padded with -inf) -> y. Threads `t` of
// `nt` (a warp when WARP, else the block; then a cluster of cs blocks shares the row).
template <bool WARP, bool AL>
__device__ __forceinline__ void softmax_slice(T* srow, T* __restrict__ yrow, int n, int t, int nt, float* red0,
                                              float* red1, Stats* part, int cs) {
  const int ng = (n + VEC - 1) / VEC;
  Vec* sv = reinterpret_cast<Vec*>(srow);
  unsigned int macc = KV_NEG_INF_WORD;
#pragma unroll 4
  for (int g = t; g < ng; g += nt) {
    const Vec u = sv[g];
    macc = kv::word_max2(macc, kv::word_max2(kv::word_max2(u.w[0], u.w[1]), kv::word_max2(u.w[2], u.w[3])));
  }
  const float mb = reduce_max<WARP>(kv::word_max(macc), red0);  // -inf only for an empty slice
  const float nml = mb == kv::neg_inf() ? 0.f : -mb * LOG2E;
  float s = 0.f;
#pragma unroll 4
  for (int g = t; g < ng; g += nt) {
    float f[VEC];
    kv::unpack(sv[g], f);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      f[k] = kv::ex2(fmaf(f[k], LOG2E, nml));
      s += f[k];
    }
#if defined(KV_DTYPE_F32)
    sv[g] = kv::pack<16>(f);  // keep e: the write pass only scales it
#endif
  }
  const float sb = kv::reduce_sum<WARP>(s, red1);
  float scale = kv::rcp(sb);
  if (!WARP && cs > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) *part = Stats{mb, sb};
    cluster.sync();
    const int lane = threadIdx.x % 32;
    const Stats p = *cluster.map_shared_rank(part, lane & (cs - 1));
    float M = p.m;
    for (int o = cs / 2; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    float S = p.s * kv::ex2((p.m - M) * LOG2E);  // an empty slice: 0 * 2^-inf = 0
    for (int o = cs / 2; o > 0; o >>= 1) S += __shfl_xor_sync(0xffffffffu, S, o);
    scale = kv::ex2((mb - M) * LOG2E) * kv::rcp(S);
  }
#if !defined(KV_DTYPE_F32)
  const float nml2 = nml;
#endif
#pragma unroll 4
  for (int g = t; g < ng; g += nt) {
    float f[VEC];
    kv::unpack(sv[g], f);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
#if defined(KV_DTYPE_F32)
      f[k] *= scale;
#else
      f[k] = kv::ex2(fmaf(f[k], LOG2E, nml2)) * scale;
#endif
    }
    kv::store_group<16, AL, STCS>(yrow, g, n, kv::pack<16>(f));
  }
}

// Arguments: buffers (x, y), sizes (rows, cols).
extern "C" __global__ void __launch_bounds__(BLOCK, 1280 / BLOCK) softmax_bulk(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  extern __shared__ __align__(128) unsigned char dsm[];
  __shared__ __align__(8) unsigned long long bar[2];
  __shared__ float red0[32], red1[32];
  __shared__ Stats part[2];  // by row parity: one cluster barrier per row
  T* const st = reinterpret_cast<T*>(dsm);
  const int cs = (int)cg::this_cluster().num_blocks();
  const int rank = (int)cg::this_cluster().block_rank();
  const int tid = threadIdx.x, nw = blockDim.x / 32;
  const int rowb = ((cols + VEC - 1) / VEC) * VEC * KV_SIZEOF_T;  // padded row bytes
  const int sl = ((((cols + cs - 1) / cs) + VEC - 1) / VEC) * VEC;  // slice elements (and smem row stride)
  const int R = cs == 1 ? max(1, min(ROWS, SLICE * 1024 / rowb)) : 1;  // rows per tile
  const int ntiles = (rows + R - 1) / R;
  const int tt = TILES;  // tiles (rows, for a cluster) per block
  const int t0 = (blockIdx.x / cs) * tt;
  const int mine = min(tt, ntiles - t0);  // >= 1 with the launch above
  const int c0 = rank * sl;
  const int n = max(0, min(sl, cols - c0));  // this block's columns of each row
  const bool al = cols % VEC == 0 && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y)) & 15) == 0;
  const bool warp_mode = cs == 1 && R >= nw;  // enough rows for every warp: one row per warp at a time
  // Two stages (the next tile loads while this one is reduced and written) when they fit
  // in 224 KiB (a block may have 227, static included); the launch's smem follows the same rule.
  const int stages = tt > 1 && 2 * R * sl * KV_SIZEOF_T <= 229376 ? 2 : 1;

  // Tile i of this block goes to stage i & 1. Aligned rows: sl == cols when cs == 1, so a
  // tile's rows are one contiguous run and one bulk copy fetches it.
  auto issue = [&](int i, int s) {
    const int row0 = (t0 + i) * R, nr = min(R, rows - row0);
    const unsigned bytes = (unsigned)(nr * n * KV_SIZEOF_T);
    kv::mbar_expect(&bar[s], bytes);
    if (bytes > 0) kv::bulk_load(st + s * R * sl, x + (size_t)row0 * cols + c0, bytes, &bar[s]);
  };
  if (al) {
    if (tid == 0) {
      kv::mbar_init(&bar[0]);
      kv::mbar_init(&bar[1]);
      issue(0, 0);
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them
  }
  for (int i = 0; i < mine; ++i) {
    const int row0 = (t0 + i) * R, nr = min(R, rows - row0);
    const int s = stages == 2 ? (i & 1) : 0;
    const unsigned parity = stages == 2 ? (i >> 1) & 1 : i & 1;  // uses of stage s so far, mod 2
    T* const sb = st + s * R * sl;
    if (al) {
      if (tid == 0 && stages == 2 && i + 1 < mine) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // our writes to that stage, before the copy's
        issue(i + 1, (i + 1) & 1);  // its stage was released by the barrier that ended tile i - 1
      }
      kv::mbar_wait(&bar[s], parity);
    } else {
      const T neg = kv::from_float<T>(kv::neg_inf());
      const T* xs = x + (size_t)row0 * cols + c0;
      for (int k = tid; k < nr * sl; k += blockDim.x) {
        const int r = k / sl, c = k - r * sl;
        sb[k] = c < n ? xs[(size_t)r * cols + c] : neg;
      }
      __syncthreads();
    }
    T* ys = y + (size_t)row0 * cols + c0;
    if (warp_mode) {
      const int warp = tid / 32, lane = tid % 32;
      for (int r = warp; r < nr; r += nw) {
        if (al) softmax_slice<true, true>(sb + r * sl, ys + (size_t)r * cols, n, lane, 32, red0, red1, part, 1);
        else softmax_slice<true, false>(sb + r * sl, ys + (size_t)r * cols, n, lane, 32, red0, red1, part, 1);
      }
    } else {
      for (int r = 0; r < nr; ++r) {
        if (al) softmax_slice<false, true>(sb + r * sl, ys + (size_t)r * cols, n, tid, blockDim.x, red0, red1, part + (i & 1), cs);
        else softmax_slice<false, false>(sb + r * sl, ys + (size_t)r * cols, n, tid, blockDim.x, red0, red1, part + (i & 1), cs);
        __syncthreads();  // the reduction scratch is reused by the next row
      }
    }
    __syncthreads();  // this stage is free for the tile after next
    if (al && stages == 1 && tid == 0 && i + 1 < mine) {  // one stage: refill it now
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue(i + 1, 0);
    }
  }
  if (cs > 1) cg::this_cluster().sync();  // keep `part` alive until the cluster has read it
}

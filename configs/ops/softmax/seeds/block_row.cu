// softmax seed for medium rows: one block per row.
// A row is cut into groups of VEC = VBYTES / sizeof_T elements (one 16-, 8- or 4-byte
// access each); thread t takes groups t, t + nt, ... (nt threads). A tile is the
// nt * CHUNKS groups the block holds in registers. The launch sizes the block to the
// row: the smallest power of two >= 64 threads that holds it in one tile, at most BLOCK.
// Register path (row <= one tile), x read from DRAM once:
//   all loads first (missing elements read as -inf); packed max (max.bf16x2 / max.f16x2:
//   one op per two elements) -> block max m (finite); e = ex2(x*log2e - m*log2e), one
//   FFMA + one MUFU.EX2 per element, kept in registers as floats (-inf pads give 0, so
//   no per-element checks); block sum s; y = e * (1/s), packed back two elements per
//   cvt, one 16-byte store per group.
// Longer rows stream: per thread a running (max, sum) over the tiles, then the block max,
// each thread's sum rescaled to it, the block sum, and a write pass that re-reads the row
// (last tile first, from registers; the rest mostly from L2) and recomputes exp.
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// Reductions in f32 in a fixed order (per thread, warp butterfly, butterfly over the
// warps' values): deterministic, and every thread gets the same bits.
// @kevolve param   BLOCK  512 256 1024 128
// @kevolve param   VBYTES 16 8 4
// @kevolve param   CHUNKS 8 4 2 16 1
// @kevolve param   STCS   0 1
// Presets (tried in generation 0): per-shape winners measured on the H200, eighth session.
//   bf16 16384x4096: 68.0 us:
// @kevolve preset  BLOCK=256 CHUNKS=2
//   bf16 8192x8192: 68.9 us:
// @kevolve preset  BLOCK=512 CHUNKS=4
//   bf16 16384x16384: 262.4 us:
// @kevolve preset  BLOCK=256 CHUNKS=16 VBYTES=8
// @kevolve require VBYTES >= sizeof_T
// @kevolve require CHUNKS * VBYTES / sizeof_T <= 64
// @kevolve require CHUNKS * VBYTES / sizeof_T + 2 * CHUNKS + 24 <= 65536 / BLOCK
// @kevolve launch  softmax_block grid=rows block=min(BLOCK, max(64, pow2_ceil(ceil_div(cols, CHUNKS * VBYTES / sizeof_T)))) smem=0

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

// Register path: the row is at most one tile. Chunk c (groups c*nt .. c*nt+nt-1) exists
// iff c * nt < ngroups, the same for the whole block; FULL: ngroups == nt * CH, every
// chunk whole, no checks at all.
template <bool AL, int CH, bool FULL>
__device__ __forceinline__ void reg_row(const T* __restrict__ xr, T* __restrict__ yr, int cols, int ngroups) {
  const int nt = blockDim.x, tid = threadIdx.x;
  Vec v[CH];
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int g = tid + c * nt;
    if (FULL || (c + 1) * nt <= ngroups) v[c] = kv::load_group<VBYTES, AL>(xr, g, true, cols, KV_NEG_INF_WORD);
    else if (c * nt < ngroups) v[c] = kv::load_group<VBYTES, AL>(xr, g, g < ngroups, cols, KV_NEG_INF_WORD);
  }
  unsigned int macc = KV_NEG_INF_WORD;
#pragma unroll
  for (int c = 0; c < CH; ++c)
    if (FULL || c * nt < ngroups) macc = max_group(macc, v[c]);
  const float m = block_max(kv::word_max(macc));  // finite: the row has an element
  const float nml = -m * LOG2E;
  float e[CH][VEC];
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < CH; ++c)
    if (FULL || c * nt < ngroups) s += exp_group(v[c], nml, e[c]);
  const float inv = kv::rcp(block_sum(s));  // the sum >= 1: it includes the max element's e = 1
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int g = tid + c * nt;
    if (FULL || (c * nt < ngroups && g < ngroups)) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) e[c][k] *= inv;
      kv::store_group<VBYTES, AL, STCS>(yr, g, cols, kv::pack<VBYTES>(e[c]));
    }
  }
}

template <bool AL, int CH>
__device__ __forceinline__ void block_row(const T* __restrict__ xr, T* __restrict__ yr, int cols) {
  const int nt = blockDim.x, tid = threadIdx.x;
  const int ngroups = (cols + VEC - 1) / VEC;
  const int tile = nt * CH;
  if (AL && ngroups == tile) return reg_row<AL, CH, true>(xr, yr, cols, ngroups);
  if (ngroups <= tile) return reg_row<AL, CH, false>(xr, yr, cols, ngroups);

  // Streaming path: per thread, m = running max, s = sum of 2^((x - m) * log2e).
  const int ntiles = (ngroups + tile - 1) / tile;
  Vec v[CH];
  float m = kv::neg_inf(), s = 0.f;
  for (int t = 0; t < ntiles; ++t) {
    const int gb = t * tile + tid;
    if (AL && (t + 1) * tile <= ngroups) {  // a whole tile: no checks
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL>(xr, gb + c * nt, true, cols, KV_NEG_INF_WORD);
    } else {
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL>(xr, gb + c * nt, gb + c * nt < ngroups, cols, KV_NEG_INF_WORD);
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
  const float M = block_max(m);
  const float inv = kv::rcp(block_sum(s * kv::ex2((m - M) * LOG2E)));
  const float nml = -M * LOG2E;

  for (int t = ntiles - 1; t >= 0; --t) {
    const int gb = t * tile + tid;
    if (t != ntiles - 1) {  // a whole tile
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL>(xr, gb + c * nt, true, cols, KV_NEG_INF_WORD);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int g = gb + c * nt;
      if (g >= ngroups) continue;
      float e[VEC];
      exp_group(v[c], nml, e);
#pragma unroll
      for (int k = 0; k < VEC; ++k) e[k] *= inv;
      kv::store_group<VBYTES, AL, STCS>(yr, g, cols, kv::pack<VBYTES>(e));
    }
  }
}

// The unaligned path (scalar accesses), compiled apart so that it does not raise the
// register count of the aligned path; a quarter of the chunks per tile (longer rows
// stream). None of the tuning shapes takes it.
__device__ __noinline__ void block_row_unaligned(const T* __restrict__ xr, T* __restrict__ yr, int cols) {
  block_row<false, (CHUNKS > 4 ? CHUNKS / 4 : 1)>(xr, yr, cols);
}

// Register cap: the tile's floats, 2 per chunk, 20 more (and a quarter more for f32,
// whose raw tile is as large as its floats), at most what a block of BLOCK threads may
// use. Without it ptxas spends registers on ILP in the streaming and partial-tile paths
// (about 120 for the bf16 default) while the hot path needs about E + 20. Measured with
// ptxas: no spills at any assignment.
#define TILE_F (CHUNKS * VEC)
#define REG_CAP0 (((TILE_F + 2 * CHUNKS + 20 + (KV_SIZEOF_T == 4 ? TILE_F / 4 : 0) + 7) / 8) * 8)
#define REG_CAP1 (REG_CAP0 < 65536 / BLOCK ? REG_CAP0 : 65536 / BLOCK)
#define REG_CAP (REG_CAP1 > 255 ? 255 : REG_CAP1)

// Arguments: buffers (x, y), sizes (rows, cols).
extern "C" __global__ void __maxnreg__(REG_CAP)
softmax_block(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  (void)rows;
  const size_t off = (size_t)blockIdx.x * cols;
  if (cols % VEC == 0) block_row<true, CHUNKS>(x + off, y + off, cols);
  else block_row_unaligned(x + off, y + off, cols);
}

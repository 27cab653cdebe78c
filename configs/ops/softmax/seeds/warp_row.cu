// softmax seed for short rows: one warp per row, ROWS rows per warp processed together
// (all their loads in flight at once), WARPS warps per block.
// A row is cut into groups of VEC = VBYTES / sizeof_T elements (one 16-, 8- or 4-byte
// access each); lane l takes groups l, l + 32, ... A tile is the 32 * CHUNKS groups the
// warp holds in registers per row.
// Register path (row <= one tile), x read from DRAM once: the loads of all ROWS rows
// first (missing elements read as -inf); packed max (max.bf16x2 / max.f16x2: one op per
// two elements), warp butterflies for the ROWS rows interleaved -> row max m (finite);
// e = ex2(x*log2e - m*log2e), one FFMA + one MUFU.EX2 per element, kept in registers as
// floats (-inf pads give 0: no per-element checks); warp sums; y = e * (1/s), packed
// back two elements per cvt, one 16-byte store per group.
// Longer rows stream, one row at a time: per lane a running (max, sum) over the tiles,
// then the warp max, each lane's sum rescaled to it, the warp sum, and a write pass that
// re-reads the row (last tile first, from registers; the rest mostly from L2).
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// Reductions in f32 in a fixed order (per lane, then a butterfly): deterministic.
// @kevolve param   WARPS  4 2 8 1
// @kevolve param   ROWS   2 1 4 8
// @kevolve param   VBYTES 16 8 4
// @kevolve param   CHUNKS 2 1 4 8 16
// @kevolve param   STCS   0 1
// Presets (tried in generation 0): per-shape winners measured on the H200, eighth session.
//   bf16 65536x256: 21.5 us:
// @kevolve preset  WARPS=1 ROWS=4 VBYTES=4 CHUNKS=4
// @kevolve require VBYTES >= sizeof_T
// @kevolve require ROWS * CHUNKS * VBYTES / sizeof_T <= 64
// @kevolve launch  softmax_warp grid=ceil_div(rows, WARPS * ROWS) block=32*WARPS smem=0

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

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Register path for ROWS rows (row0 + r, those < rows). Chunk c (groups 32c .. 32c+31)
// exists iff 32c < ngroups, the same for the whole warp; FULL: ngroups == 32 * CHUNKS.
template <bool AL, bool FULL>
__device__ __forceinline__ void reg_rows(const T* __restrict__ x, T* __restrict__ y, int rows, int cols,
                                         int row0, int ngroups) {
  const int lane = threadIdx.x % 32;
  Vec v[ROWS][CHUNKS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (row0 + r >= rows) continue;
    const T* xr = x + (size_t)(row0 + r) * cols;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int g = lane + 32 * c;
      if (FULL || 32 * (c + 1) <= ngroups) v[r][c] = kv::load_group<VBYTES, AL>(xr, g, true, cols, KV_NEG_INF_WORD);
      else if (32 * c < ngroups) v[r][c] = kv::load_group<VBYTES, AL>(xr, g, g < ngroups, cols, KV_NEG_INF_WORD);
    }
  }
  float m[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    unsigned int macc = KV_NEG_INF_WORD;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
      if (row0 + r < rows && (FULL || 32 * c < ngroups)) macc = max_group(macc, v[r][c]);
    m[r] = kv::word_max(macc);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], o));
  float e[ROWS][CHUNKS][VEC];
  float s[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    s[r] = 0.f;
    if (row0 + r >= rows) continue;
    const float nml = -m[r] * LOG2E;  // m[r] finite: the row has an element
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
      if (FULL || 32 * c < ngroups) s[r] += exp_group(v[r][c], nml, e[r][c]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) s[r] += __shfl_xor_sync(0xffffffffu, s[r], o);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (row0 + r >= rows) continue;
    const float inv = kv::rcp(s[r]);  // s >= 1: the sum includes the max element's e = 1
    T* yr = y + (size_t)(row0 + r) * cols;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int g = lane + 32 * c;
      if (FULL || (32 * c < ngroups && g < ngroups)) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) e[r][c][k] *= inv;
        kv::store_group<VBYTES, AL, STCS>(yr, g, cols, kv::pack<VBYTES>(e[r][c]));
      }
    }
  }
}

// Streaming path for one row longer than a tile.
template <bool AL, int CH>
__device__ __forceinline__ void stream_row(const T* __restrict__ xr, T* __restrict__ yr, int cols, int ngroups) {
  const int lane = threadIdx.x % 32;
  const int tile = 32 * CH;
  const int ntiles = (ngroups + tile - 1) / tile;
  Vec v[CH];
  float m = kv::neg_inf(), s = 0.f;  // s = sum of 2^((x - m) * log2e)
  for (int t = 0; t < ntiles; ++t) {
    const int gb = t * tile + lane;
    if (AL && (t + 1) * tile <= ngroups) {  // a whole tile: no checks
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL>(xr, gb + 32 * c, true, cols, KV_NEG_INF_WORD);
    } else {
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL>(xr, gb + 32 * c, gb + 32 * c < ngroups, cols, KV_NEG_INF_WORD);
    }
    unsigned int macc = KV_NEG_INF_WORD;
#pragma unroll
    for (int c = 0; c < CH; ++c) macc = max_group(macc, v[c]);
    const float mt = kv::word_max(macc);
    if (mt != kv::neg_inf()) {  // else this lane has no element in this tile
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
  const float M = warp_max(m);
  const float inv = kv::rcp(kv::reduce_sum<true>(s * kv::ex2((m - M) * LOG2E), nullptr));
  const float nml = -M * LOG2E;
  for (int t = ntiles - 1; t >= 0; --t) {
    const int gb = t * tile + lane;
    if (t != ntiles - 1) {  // a whole tile
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL>(xr, gb + 32 * c, true, cols, KV_NEG_INF_WORD);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int g = gb + 32 * c;
      if (g >= ngroups) continue;
      float e[VEC];
      exp_group(v[c], nml, e);
#pragma unroll
      for (int k = 0; k < VEC; ++k) e[k] *= inv;
      kv::store_group<VBYTES, AL, STCS>(yr, g, cols, kv::pack<VBYTES>(e));
    }
  }
}

template <bool AL>
__device__ __forceinline__ void warp_rows(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  const int row0 = (blockIdx.x * WARPS + threadIdx.x / 32) * ROWS;
  const int ngroups = (cols + VEC - 1) / VEC;
  if (AL && ngroups == 32 * CHUNKS) return reg_rows<AL, true>(x, y, rows, cols, row0, ngroups);
  if (ngroups <= 32 * CHUNKS) return reg_rows<AL, false>(x, y, rows, cols, row0, ngroups);
  // Chunks per streaming tile: at most 32 elements per lane (more only raises registers).
  constexpr int SCH = ROWS * CHUNKS * VEC > 32 ? (VEC >= 32 ? 1 : 32 / VEC) : ROWS * CHUNKS;
  for (int r = 0; r < ROWS; ++r) {
    if (row0 + r >= rows) break;
    const size_t off = (size_t)(row0 + r) * cols;
    stream_row<AL, SCH>(x + off, y + off, cols, ngroups);
  }
}

// The unaligned path (scalar accesses); none of the tuning shapes takes it. Inlined: as a
// separate (noinline) function it makes ptxas spill a few bytes in the caller.
__device__ __forceinline__ void warp_rows_unaligned(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  warp_rows<false>(x, y, rows, cols);
}

// Register cap instead of __launch_bounds__ (with which ptxas picks 64, 80 or 96 and
// spills in some assignments): the tile's floats, 2 per chunk, 24 more (and a quarter
// more for f32, whose raw tile is as large as its floats). Blocks are at most 256 threads.
#define TILE_F (ROWS * CHUNKS * VEC)
#define REG_CAP0 (((TILE_F + 2 * ROWS * CHUNKS + 24 + (KV_SIZEOF_T == 4 ? TILE_F / 4 : 0) + 7) / 8) * 8)
#define REG_CAP (REG_CAP0 > 255 ? 255 : REG_CAP0)

// Arguments: buffers (x, y), sizes (rows, cols).
extern "C" __global__ void __maxnreg__(REG_CAP)
softmax_warp(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  if (cols % VEC == 0) warp_rows<true>(x, y, rows, cols);
  else warp_rows_unaligned(x, y, rows, cols);
}

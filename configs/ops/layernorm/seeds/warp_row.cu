// layernorm seed for short rows: one warp per row, ROWS rows per warp processed together
// (their loads are all in flight at once), WARPS warps per block.
// A row is cut into groups of VEC = VBYTES / sizeof_T elements (one 16-, 8- or 4-byte
// access each); lane l takes groups l, l + 32, ... A tile is the 32 * CHUNKS groups the
// warp holds in registers: rows of at most one tile are read from DRAM exactly once.
// Longer rows stream: tiles are loaded one after another for the statistics, then
// re-read (last tile first, from registers; the rest mostly from L2) to write.
// w and b are loaded once per warp and tile and used for all ROWS rows.
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// Statistics in f32, robust to a large mean. A row of one tile (the short rows this seed
// is for) is exact two-pass over the warp: butterfly sum -> mean, then the butterfly sum
// of squared deviations; no divisions. Longer rows: each lane takes the exact two-pass
// mean and sum of squared deviations of its part of a tile (in registers), then
// (count, mean, M2) triples are merged with Chan's formula, over tiles and over a warp
// butterfly. A merge always takes the lower lane first, so both partners get the same
// bits: deterministic, and every lane of a warp normalises with identical statistics.
// No E[x^2] - E[x]^2.
// @kevolve param   WARPS  4 2 8 16 1
// @kevolve param   ROWS   2 1 4 8
// @kevolve param   VBYTES 16 8 4
// @kevolve param   CHUNKS 4 2 8 1 16
// @kevolve param   STCS   0 1
// Presets (tried in generation 0): per-shape winners measured on the H200, eighth session.
//   bf16/f16 65536x256: 24.3, 24.2 us:
// @kevolve preset  WARPS=2 ROWS=2 VBYTES=8 CHUNKS=2
// @kevolve require VBYTES >= sizeof_T
// @kevolve require ROWS * CHUNKS * VBYTES <= 256
// @kevolve launch  layernorm_warp grid=ceil_div(rows, WARPS * ROWS) block=32*WARPS smem=0

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
__device__ __forceinline__ void warp_rows(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                          T* __restrict__ y, int rows, int cols, float eps) {
  const int lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * WARPS + threadIdx.x / 32) * ROWS;
  const int ngroups = (cols + VEC - 1) / VEC;
  const int ntiles = (ngroups + 32 * CH - 1) / (32 * CH);
  const T* xr[ROWS];
  T* yr[ROWS];
  bool live[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    live[r] = row0 + r < rows;
    const size_t off = (size_t)(live[r] ? row0 + r : 0) * cols;
    xr[r] = x + off;
    yr[r] = y + off;
  }

  Vec v[ROWS][CH];
  float mean[ROWS], rstd[ROWS];
  if (ntiles == 1) {
    // The whole row is in the warp's registers: exact two-pass over the warp, with no
    // divisions (a Chan merge divides; five levels of them per row made this kernel
    // instruction-bound at 65536x256): the row sum -> mean = sum / cols, then the sum of
    // squared deviations -> var. Butterfly sums give every lane the same bits.
    const float inv = 1.f / (float)cols;
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int c = 0; c < CH; ++c) v[r][c] = kv::load_group<VBYTES, AL, size_t>(xr[r], lane + 32 * c, live[r] && lane + 32 * c < ngroups, cols);
    float s[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      s[r] = 0.f;  // missing elements are zeros: they add nothing
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        float f[VEC];
        kv::unpack(v[r][c], f);
#pragma unroll
        for (int k = 0; k < VEC; ++k) s[r] += f[k];
        kv::launder(v[r][c]);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) s[r] += __shfl_xor_sync(0xffffffffu, s[r], o);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      mean[r] = s[r] * inv;
      float q = 0.f;
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const int g = lane + 32 * c;
        const int nv = kv::group_count<VBYTES, AL>(g, ngroups, cols);
        float f[VEC];
        kv::unpack(v[r][c], f);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float d = f[k] - mean[r];
          if (AL ? nv > 0 : k < nv) q = fmaf(d, d, q);
        }
        kv::launder(v[r][c]);
      }
      s[r] = q;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) s[r] += __shfl_xor_sync(0xffffffffu, s[r], o);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) rstd[r] = rsqrtf(s[r] * inv + eps);
  } else {
    kv::Stats st[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) st[r] = kv::Stats{0.f, 0.f, 0.f};
    for (int t = 0; t < ntiles; ++t) {
      const int gb = t * 32 * CH + lane;
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int c = 0; c < CH; ++c) v[r][c] = kv::load_group<VBYTES, AL, size_t>(xr[r], gb + 32 * c, live[r] && gb + 32 * c < ngroups, cols);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) st[r] = kv::merge(st[r], tile_stats<AL, CH>(v[r], gb, 32, ngroups, cols));
    }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        kv::Stats p;
        p.n = __shfl_xor_sync(0xffffffffu, st[r].n, o);
        p.mean = __shfl_xor_sync(0xffffffffu, st[r].mean, o);
        p.m2 = __shfl_xor_sync(0xffffffffu, st[r].m2, o);
        st[r] = (lane & o) ? kv::merge(p, st[r]) : kv::merge(st[r], p);
      }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      mean[r] = st[r].mean;
      rstd[r] = rsqrtf(st[r].m2 / (float)cols + eps);
    }
  }

  for (int t = ntiles - 1; t >= 0; --t) {
    const int gb = t * 32 * CH + lane;
    if (t != ntiles - 1) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int c = 0; c < CH; ++c)
          v[r][c] = kv::load_group<VBYTES, AL, size_t>(xr[r], gb + 32 * c, live[r] && gb + 32 * c < ngroups, cols);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int g = gb + 32 * c;
      if (g >= ngroups) continue;
      const Vec wv = kv::load_group<VBYTES, AL, size_t>(w, g, true, cols);  // shared by the warp's rows
      const Vec bv = kv::load_group<VBYTES, AL, size_t>(b, g, true, cols);
      // STCS: streaming stores (y is not read again).
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        if (live[r]) kv::store_group<VBYTES, AL, STCS, size_t>(yr[r], g, cols, normalize(v[r][c], wv, bv, mean[r], rstd[r]));
    }
  }
}

// The unaligned path (scalar accesses), compiled apart and with half the chunks per tile:
// inlined next to the aligned path, or with all CHUNKS, it makes ptxas spill at 64
// registers. It is correct for any CHUNKS; rows longer than its tile stream.
__device__ __noinline__ void warp_rows_unaligned(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                          T* __restrict__ y, int rows, int cols, float eps) {
  warp_rows<false, (CHUNKS > 1 ? CHUNKS / 2 : 1)>(x, w, b, y, rows, cols, eps);
}

// Arguments: buffers (x, w, b, y), sizes (rows, cols), scalars (eps).
extern "C" __global__ void __launch_bounds__(32 * WARPS)
layernorm_warp(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y, int rows,
               int cols, float eps) {
  if (cols % VEC == 0) warp_rows<true, CHUNKS>(x, w, b, y, rows, cols, eps);
  else warp_rows_unaligned(x, w, b, y, rows, cols, eps);
}

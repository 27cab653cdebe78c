// rmsnorm seed for short rows: one warp per row, ROWS rows per warp processed together
// (their loads are all in flight at once), WARPS warps per block.
// A row is cut into groups of VEC = VBYTES / sizeof_T elements (one 16-, 8- or 4-byte
// access each); lane l takes groups l, l + 32, ... A tile is the 32 * CHUNKS groups the
// warp holds in registers: rows of at most one tile are read from DRAM exactly once.
// Longer rows stream: tiles are loaded one after another to sum the squares, then
// re-read (last tile first, from registers; the rest mostly from L2) to write.
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// Sum of squares in f32 (low-precision inputs too), x^2 accumulated per lane, then a
// butterfly over the warp: the order is fixed, so the result is deterministic.
// Raw element bits stay in registers (a bf16 pair per 32-bit register), converted on use.
// @kevolve param   WARPS  4 2 8 16 1
// @kevolve param   ROWS   2 1 4 8
// @kevolve param   VBYTES 16 8 4
// @kevolve param   CHUNKS 4 2 8 1 16
// @kevolve param   STCS   0 1
// @kevolve require VBYTES >= sizeof_T
// @kevolve require ROWS * CHUNKS * VBYTES <= 256
// @kevolve launch  rmsnorm_warp grid=ceil_div(rows, WARPS * ROWS) block=32*WARPS smem=0

#define VEC (VBYTES / KV_SIZEOF_T)
#if VBYTES == 16
typedef uint4 Raw;
#elif VBYTES == 8
typedef uint2 Raw;
#else
typedef unsigned int Raw;
#endif
union Vec {
  Raw r;
  T v[VEC];
};

// Group g (elements g*VEC .. g*VEC+VEC-1) of a row, or zeros when !ok. AL: the row is
// VBYTES-aligned and cols % VEC == 0, so a group is either whole or absent.
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
    if (STCS) __stcs(q, u.r);
    else *q = u.r;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (g * VEC + k < cols) p[(size_t)g * VEC + k] = u.v[k];
  }
}

template <bool AL>
__device__ __forceinline__ void warp_rows(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                          int rows, int cols, float eps) {
  const int lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * WARPS + threadIdx.x / 32) * ROWS;
  const int ngroups = (cols + VEC - 1) / VEC;
  const int ntiles = (ngroups + 32 * CHUNKS - 1) / (32 * CHUNKS);
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

  Vec v[ROWS][CHUNKS];
  float ss[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) ss[r] = 0.f;
  for (int t = 0; t < ntiles; ++t) {
    const int gb = t * 32 * CHUNKS + lane;
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) v[r][c] = load_group<AL>(xr[r], gb + 32 * c, live[r] && gb + 32 * c < ngroups, cols);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float s = 0.f;
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float f = kv::to_float(v[r][c].v[k]);
          s = fmaf(f, f, s);
        }
      ss[r] += s;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) ss[r] += __shfl_xor_sync(0xffffffffu, ss[r], o);
  float rstd[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) rstd[r] = rsqrtf(ss[r] / (float)cols + eps);

  for (int t = ntiles - 1; t >= 0; --t) {
    const int gb = t * 32 * CHUNKS + lane;
    if (t != ntiles - 1) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c)
          v[r][c] = load_group<AL>(xr[r], gb + 32 * c, live[r] && gb + 32 * c < ngroups, cols);
    }
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int g = gb + 32 * c;
      if (g >= ngroups) continue;
      const Vec wv = load_group<AL>(w, g, true, cols);  // shared by the warp's rows
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        if (!live[r]) continue;
        Vec o;
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          o.v[k] = kv::from_float<T>(kv::to_float(v[r][c].v[k]) * rstd[r] * kv::to_float(wv.v[k]));
        store_group<AL>(yr[r], g, cols, o);
      }
    }
  }
}

// Arguments: buffers (x, w, y), sizes (rows, cols), scalars (eps).
extern "C" __global__ void __launch_bounds__(32 * WARPS)
rmsnorm_warp(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int cols, float eps) {
  if (cols % VEC == 0) warp_rows<true>(x, w, y, rows, cols, eps);
  else warp_rows<false>(x, w, y, rows, cols, eps);
}

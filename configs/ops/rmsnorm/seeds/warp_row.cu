// rmsnorm seed for short rows: one warp per row, ROWS rows per warp processed together
// (their loads are all in flight at once), WARPS warps per block.
// A row is cut into groups of VEC = VBYTES / sizeof_T elements (one 16-, 8- or 4-byte
// access each); lane l takes groups l, l + 32, ... A tile is the 32 * CHUNKS groups the
// warp holds in registers: rows of at most one tile are read from DRAM exactly once.
// Longer rows stream: tiles are loaded one after another to sum the squares, then
// re-read (last tile first, from registers; the rest mostly from L2) to write.
// w is loaded once per warp and tile and used for all ROWS rows.
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// Sum of squares in f32 (low-precision inputs too), per lane, then a butterfly over the
// warp: the order is fixed, so the result is deterministic.
// @kevolve param   WARPS  4 2 8 16 1
// @kevolve param   ROWS   2 1 4 8
// @kevolve param   VBYTES 16 8 4
// @kevolve param   CHUNKS 4 2 8 1 16
// @kevolve param   STCS   0 1
// Presets (tried in generation 0): per-shape winners measured on the H200, eighth session.
//   bf16/f16 65536x256: 22.0, 22.1 us:
// @kevolve preset  WARPS=2 ROWS=2 VBYTES=8 CHUNKS=2
// @kevolve require VBYTES >= sizeof_T
// @kevolve require ROWS * CHUNKS * VBYTES <= 256
// @kevolve launch  rmsnorm_warp grid=ceil_div(rows, WARPS * ROWS) block=32*WARPS smem=0

#define VEC (VBYTES / KV_SIZEOF_T)
// A group of VEC elements as raw bits: one 16-, 8- or 4-byte access. 16-bit types are
// kept packed (two per 32-bit register) and converted with 32-bit operations.
typedef kv::Group<VBYTES> Vec;

template <bool AL, int CH>
__device__ __forceinline__ void warp_rows(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                          int rows, int cols, float eps) {
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
  float ss[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) ss[r] = 0.f;
  for (int t = 0; t < ntiles; ++t) {
    const int gb = t * 32 * CH + lane;
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int c = 0; c < CH; ++c) v[r][c] = kv::load_group<VBYTES, AL, size_t>(xr[r], gb + 32 * c, live[r] && gb + 32 * c < ngroups, cols);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float s = 0.f;  // missing elements are zeros
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        float f[VEC];
        kv::unpack(v[r][c], f);
#pragma unroll
        for (int k = 0; k < VEC; ++k) s = fmaf(f[k], f[k], s);
        kv::launder(v[r][c]);
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
      float wf[VEC];
      kv::unpack(kv::load_group<VBYTES, AL, size_t>(w, g, true, cols), wf);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        if (!live[r]) continue;
        float f[VEC];
        kv::unpack(v[r][c], f);
#pragma unroll
        for (int k = 0; k < VEC; ++k) f[k] = f[k] * rstd[r] * wf[k];
        kv::store_group<VBYTES, AL, STCS, size_t>(yr[r], g, cols, kv::pack<VBYTES>(f));  // STCS: streaming store, y is not read again
      }
    }
  }
}

// The unaligned path (scalar accesses), compiled apart and with half the chunks per tile:
// inlined next to the aligned path, or with all CHUNKS, it makes ptxas spill at 64
// registers. It is correct for any CHUNKS; rows longer than its tile stream.
__device__ __noinline__ void warp_rows_unaligned(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                          int rows, int cols, float eps) {
  warp_rows<false, (CHUNKS > 1 ? CHUNKS / 2 : 1)>(x, w, y, rows, cols, eps);
}

// Arguments: buffers (x, w, y), sizes (rows, cols), scalars (eps).
extern "C" __global__ void __launch_bounds__(32 * WARPS)
rmsnorm_warp(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int cols, float eps) {
  if (cols % VEC == 0) warp_rows<true, CHUNKS>(x, w, y, rows, cols, eps);
  else warp_rows_unaligned(x, w, y, rows, cols, eps);
}

// rmsnorm seed for medium rows: one block per row.
// A row is cut into groups of VEC = VBYTES / sizeof_T elements (one 16-, 8- or 4-byte
// access each); thread t takes groups t, t + nt, ... (nt threads). A tile is the
// nt * CHUNKS groups the block holds in registers. The launch sizes the block to the
// row: the smallest power of two >= 64 threads that holds it in one tile, at most BLOCK,
// so rows up to BLOCK * CHUNKS * VEC elements are read from DRAM exactly once: all
// loads first (many 16-byte loads in flight per thread), then the reduction.
// Longer rows stream: tiles are loaded one after another to sum the squares, then
// re-read (last tile first, from registers; the rest mostly from L2) to write.
// WREG=1 loads w for the register tile before the reduction instead of after it.
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// Sums in f32 in a fixed order (per thread, warp butterfly, warps in order): deterministic.
// Raw element bits stay in registers (a bf16 pair per 32-bit register), converted on use.
// @kevolve param   BLOCK  1024 512 256 128
// @kevolve param   VBYTES 16 8 4
// @kevolve param   CHUNKS 8 4 16 2
// @kevolve param   WREG   0 1
// @kevolve param   STCS   0 1
// @kevolve require VBYTES >= sizeof_T
// @kevolve require CHUNKS * VBYTES * (1 + WREG) <= 256
// @kevolve require CHUNKS * VBYTES * (1 + WREG) / 4 + 24 <= 65536 / BLOCK
// @kevolve launch  rmsnorm_block grid=rows block=min(BLOCK, max(64, pow2_ceil(ceil_div(cols, CHUNKS * VBYTES / sizeof_T)))) smem=0

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

// Block-wide sum; every thread gets the same value.
__device__ __forceinline__ float block_sum(float s) {
  __shared__ float red[BLOCK / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  s = 0.f;
  const int nw = blockDim.x / 32;
  for (int i = 0; i < nw; ++i) s += red[i];
  return s;
}

template <bool AL>
__device__ __forceinline__ void block_row(const T* __restrict__ xr, const T* __restrict__ w, T* __restrict__ yr,
                                          int cols, float eps) {
  const int nt = blockDim.x, tid = threadIdx.x;
  const int ngroups = (cols + VEC - 1) / VEC;
  const int tile = nt * CHUNKS;
  const int ntiles = (ngroups + tile - 1) / tile;
  Vec v[CHUNKS];
#if WREG
  Vec wv[CHUNKS];
#endif
  float ss = 0.f;
  for (int t = 0; t < ntiles; ++t) {
    const int gb = t * tile + tid;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) v[c] = load_group<AL>(xr, gb + c * nt, gb + c * nt < ngroups, cols);
#if WREG
    if (t == ntiles - 1) {
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) wv[c] = load_group<AL>(w, gb + c * nt, gb + c * nt < ngroups, cols);
    }
#endif
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float f = kv::to_float(v[c].v[k]);
        s = fmaf(f, f, s);
      }
    ss += s;
  }
  ss = block_sum(ss);
  const float rstd = rsqrtf(ss / (float)cols + eps);

  for (int t = ntiles - 1; t >= 0; --t) {
    const int gb = t * tile + tid;
    if (t != ntiles - 1) {
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) v[c] = load_group<AL>(xr, gb + c * nt, gb + c * nt < ngroups, cols);
    }
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int g = gb + c * nt;
      if (g >= ngroups) continue;
#if WREG
      const Vec wg = (t == ntiles - 1) ? wv[c] : load_group<AL>(w, g, true, cols);
#else
      const Vec wg = load_group<AL>(w, g, true, cols);
#endif
      Vec o;
#pragma unroll
      for (int k = 0; k < VEC; ++k) o.v[k] = kv::from_float<T>(kv::to_float(v[c].v[k]) * rstd * kv::to_float(wg.v[k]));
      store_group<AL>(yr, g, cols, o);
    }
  }
}

// Arguments: buffers (x, w, y), sizes (rows, cols), scalars (eps).
extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_block(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int cols, float eps) {
  (void)rows;
  const size_t off = (size_t)blockIdx.x * cols;
  if (cols % VEC == 0) block_row<true>(x + off, w, y + off, cols, eps);
  else block_row<false>(x + off, w, y + off, cols, eps);
}

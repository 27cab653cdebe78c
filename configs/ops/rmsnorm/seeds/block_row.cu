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

template <bool AL, int CH>
__device__ __forceinline__ void block_row(const T* __restrict__ xr, const T* __restrict__ w, T* __restrict__ yr,
                                          int cols, float eps) {
  const int nt = blockDim.x, tid = threadIdx.x;
  const int ngroups = (cols + VEC - 1) / VEC;
  const int tile = nt * CH;
  const int ntiles = (ngroups + tile - 1) / tile;
  Vec v[CH];
#if WREG
  Vec wv[CH];
#endif
  float ss = 0.f;
  for (int t = 0; t < ntiles; ++t) {
    const int gb = t * tile + tid;
#pragma unroll
    for (int c = 0; c < CH; ++c) v[c] = load_group<AL>(xr, gb + c * nt, gb + c * nt < ngroups, cols);
#if WREG
    if (t == ntiles - 1) {
#pragma unroll
      for (int c = 0; c < CH; ++c) wv[c] = load_group<AL>(w, gb + c * nt, gb + c * nt < ngroups, cols);
    }
#endif
    float s = 0.f;  // missing elements are zeros
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      float f[VEC];
      unpack(v[c], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) s = fmaf(f[k], f[k], s);
      launder(v[c]);
    }
    ss += s;
  }
  ss = block_sum(ss);
  const float rstd = rsqrtf(ss / (float)cols + eps);

  for (int t = ntiles - 1; t >= 0; --t) {
    const int gb = t * tile + tid;
    if (t != ntiles - 1) {
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = load_group<AL>(xr, gb + c * nt, gb + c * nt < ngroups, cols);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int g = gb + c * nt;
      if (g >= ngroups) continue;
      float f[VEC], wf[VEC];
#if WREG
      unpack(t == ntiles - 1 ? wv[c] : load_group<AL>(w, g, true, cols), wf);
#else
      unpack(load_group<AL>(w, g, true, cols), wf);
#endif
      unpack(v[c], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) f[k] = f[k] * rstd * wf[k];
      store_group<AL>(yr, g, cols, pack(f));
    }
  }
}

// The unaligned path (scalar accesses), compiled apart and with half the chunks per tile:
// inlined next to the aligned path, or with all CHUNKS, it makes ptxas spill at 64
// registers. It is correct for any CHUNKS; rows longer than its tile stream.
__device__ __noinline__ void block_row_unaligned(const T* __restrict__ xr, const T* __restrict__ w, T* __restrict__ yr,
                                          int cols, float eps) {
  block_row<false, (CHUNKS > 1 ? CHUNKS / 2 : 1)>(xr, w, yr, cols, eps);
}

// Arguments: buffers (x, w, y), sizes (rows, cols), scalars (eps).
extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_block(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int cols, float eps) {
  (void)rows;
  const size_t off = (size_t)blockIdx.x * cols;
  if (cols % VEC == 0) block_row<true, CHUNKS>(x + off, w, y + off, cols, eps);
  else block_row_unaligned(x + off, w, y + off, cols, eps);
}

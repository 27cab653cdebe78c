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
// @kevolve require VBYTES >= sizeof_T
// @kevolve require CHUNKS * VBYTES / sizeof_T <= 64
// @kevolve require CHUNKS * VBYTES / sizeof_T + 2 * CHUNKS + 24 <= 65536 / BLOCK
// @kevolve launch  softmax_block grid=rows block=min(BLOCK, max(64, pow2_ceil(ceil_div(cols, CHUNKS * VBYTES / sizeof_T)))) smem=0

#define VEC (VBYTES / KV_SIZEOF_T)
#define NWORD (VBYTES / 4)
#if VBYTES == 16
typedef uint4 Raw;
#elif VBYTES == 8
typedef uint2 Raw;
#else
typedef unsigned int Raw;
#endif
// A group of VEC elements as raw bits: one 16-, 8- or 4-byte access. 16-bit types are
// kept packed (two per 32-bit word) and converted with 32-bit operations.
union Vec {
  Raw r;
  unsigned int w[NWORD];
  T v[VEC];
};

// A 32-bit word of -inf elements.
#if defined(KV_DTYPE_F32)
#define NEG_WORD 0xff800000u
#elif defined(KV_DTYPE_BF16)
#define NEG_WORD 0xff80ff80u
#else
#define NEG_WORD 0xfc00fc00u
#endif
#define LOG2E 1.4426950408889634f

// 2^x in one MUFU.EX2 (flushes denormal results to zero; 2^-inf = +0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1/x, within an ulp (x >= 1 here: the sum includes the max element's e = 1).
__device__ __forceinline__ float rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Group g (elements g*VEC .. g*VEC+VEC-1) of a row; the whole group when !ok, and
// elements at or past cols, read as -inf. AL: the row is VBYTES-aligned and
// cols % VEC == 0, so a group is whole or absent; otherwise the accesses are scalar.
template <bool AL>
__device__ __forceinline__ Vec load_group(const T* __restrict__ p, int g, bool ok, int cols) {
  Vec u;
#pragma unroll
  for (int j = 0; j < NWORD; ++j) u.w[j] = NEG_WORD;
  if (AL) {
    if (ok) u.r = *reinterpret_cast<const Raw*>(p + g * VEC);
  } else if (ok) {
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (g * VEC + k < cols) u.v[k] = p[g * VEC + k];
  }
  return u;
}

template <bool AL>
__device__ __forceinline__ void store_group(T* __restrict__ p, int g, int cols, const Vec& u) {
  if (AL) {
    Raw* q = reinterpret_cast<Raw*>(p + g * VEC);
    if (STCS) __stcs(q, u.r);  // streaming store: y is not read again
    else *q = u.r;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (g * VEC + k < cols) p[g * VEC + k] = u.v[k];
  }
}

// Elementwise max of two words (one f32, or two packed 16-bit values).
__device__ __forceinline__ unsigned int wmax(unsigned int a, unsigned int b) {
#if defined(KV_DTYPE_F32)
  return __float_as_uint(fmaxf(__uint_as_float(a), __uint_as_float(b)));
#else
  unsigned int d;
#if defined(KV_DTYPE_BF16)
  asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
  asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#endif
  return d;
#endif
}

// Folds a group into a running word max (a tree inside the group, for ILP).
__device__ __forceinline__ unsigned int max_group(unsigned int acc, const Vec& u) {
#if NWORD == 4
  return wmax(acc, wmax(wmax(u.w[0], u.w[1]), wmax(u.w[2], u.w[3])));
#elif NWORD == 2
  return wmax(acc, wmax(u.w[0], u.w[1]));
#else
  return wmax(acc, u.w[0]);
#endif
}

// The max of the elements of a word, as a float.
__device__ __forceinline__ float word_max(unsigned int a) {
#if defined(KV_DTYPE_F32)
  return __uint_as_float(a);
#elif defined(KV_DTYPE_BF16)
  return fmaxf(__uint_as_float(a << 16), __uint_as_float(a & 0xffff0000u));
#else
  const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&a));
  return fmaxf(p.x, p.y);
#endif
}

__device__ __forceinline__ void unpack(const Vec& u, float (&f)[VEC]) {
#if defined(KV_DTYPE_F32)
#pragma unroll
  for (int k = 0; k < VEC; ++k) f[k] = __uint_as_float(u.w[k]);
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
  for (int k = 0; k < VEC; ++k) u.w[k] = __float_as_uint(f[k]);
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

// e = 2^(x*log2e + nml) for a group (nml = -max*log2e), and the group's sum (a tree).
__device__ __forceinline__ float exp_group(const Vec& u, float nml, float (&e)[VEC]) {
  float f[VEC];
  unpack(u, f);
#pragma unroll
  for (int k = 0; k < VEC; ++k) e[k] = ex2(fmaf(f[k], LOG2E, nml));
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
    if (FULL || (c + 1) * nt <= ngroups) v[c] = load_group<AL>(xr, g, true, cols);
    else if (c * nt < ngroups) v[c] = load_group<AL>(xr, g, g < ngroups, cols);
  }
  unsigned int macc = NEG_WORD;
#pragma unroll
  for (int c = 0; c < CH; ++c)
    if (FULL || c * nt < ngroups) macc = max_group(macc, v[c]);
  const float m = block_max(word_max(macc));  // finite: the row has an element
  const float nml = -m * LOG2E;
  float e[CH][VEC];
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < CH; ++c)
    if (FULL || c * nt < ngroups) s += exp_group(v[c], nml, e[c]);
  const float inv = rcp(block_sum(s));
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int g = tid + c * nt;
    if (FULL || (c * nt < ngroups && g < ngroups)) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) e[c][k] *= inv;
      store_group<AL>(yr, g, cols, pack(e[c]));
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
      for (int c = 0; c < CH; ++c) v[c] = load_group<AL>(xr, gb + c * nt, true, cols);
    } else {
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = load_group<AL>(xr, gb + c * nt, gb + c * nt < ngroups, cols);
    }
    unsigned int macc = NEG_WORD;
#pragma unroll
    for (int c = 0; c < CH; ++c) macc = max_group(macc, v[c]);
    const float mt = word_max(macc);
    if (mt != kv::neg_inf()) {  // else this thread has no element in this tile
      const float mn = fmaxf(m, mt);
      const float nml = -mn * LOG2E;
      float st = 0.f;
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        float e[VEC];
        st += exp_group(v[c], nml, e);
      }
      s = s * ex2((m - mn) * LOG2E) + st;  // m = -inf: s = 0, ex2(-inf) = 0
      m = mn;
    }
  }
  const float M = block_max(m);
  const float inv = rcp(block_sum(s * ex2((m - M) * LOG2E)));
  const float nml = -M * LOG2E;

  for (int t = ntiles - 1; t >= 0; --t) {
    const int gb = t * tile + tid;
    if (t != ntiles - 1) {  // a whole tile
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = load_group<AL>(xr, gb + c * nt, true, cols);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int g = gb + c * nt;
      if (g >= ngroups) continue;
      float e[VEC];
      exp_group(v[c], nml, e);
#pragma unroll
      for (int k = 0; k < VEC; ++k) e[k] *= inv;
      store_group<AL>(yr, g, cols, pack(e));
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

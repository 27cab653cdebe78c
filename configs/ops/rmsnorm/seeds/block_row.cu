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
// XNA=1 reads x without allocating in L1 and WEL=1 asks L1 to keep w, so that the w of the
// previous rows on the SM is still there (aligned rows only: ignored when cols % VEC != 0).
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// Sums in f32 in a fixed order (per thread, warp butterfly, warps in order): deterministic.
// @kevolve param   BLOCK  1024 512 256 128
// @kevolve param   VBYTES 16 8 4
// @kevolve param   CHUNKS 8 4 16 2
// @kevolve param   WREG   0 1
// @kevolve param   STCS   0 1
// @kevolve param   XNA    0 1
// @kevolve param   WEL    0 1
// Presets (tried in generation 0), measured on the H200:
//   f32 4096x32768, eleventh session: 270.7 us against 281.9 with w at L1's default policy:
// @kevolve preset  BLOCK=1024 CHUNKS=8 STCS=1 WEL=1
// @kevolve require VBYTES >= sizeof_T
// @kevolve require CHUNKS * VBYTES * (1 + WREG) <= 256
// @kevolve require CHUNKS * VBYTES * (1 + WREG) / 4 + 24 <= 65536 / BLOCK
// @kevolve launch  rmsnorm_block grid=rows block=min(BLOCK, max(64, pow2_ceil(ceil_div(cols, CHUNKS * VBYTES / sizeof_T)))) smem=0

#define VEC (VBYTES / KV_SIZEOF_T)
#define X_L1 (XNA ? kv::kL1NoAllocate : kv::kL1Default)
#define W_L1 (WEL ? kv::kL1EvictLast : kv::kL1Default)
// A group of VEC elements as raw bits: one 16-, 8- or 4-byte access. 16-bit types are
// kept packed (two per 32-bit register) and converted with 32-bit operations.
typedef kv::Group<VBYTES> Vec;

// Block-wide sum; every thread gets the same value.
__device__ __forceinline__ float block_sum(float s) {
  __shared__ float red[BLOCK / 32];
  s = kv::reduce_sum<true>(s, nullptr);  // warp butterfly
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
    for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL, size_t, X_L1>(xr, gb + c * nt, gb + c * nt < ngroups, cols);
#if WREG
    if (t == ntiles - 1) {
#pragma unroll
      for (int c = 0; c < CH; ++c) wv[c] = kv::load_group<VBYTES, AL, size_t, W_L1>(w, gb + c * nt, gb + c * nt < ngroups, cols);
    }
#endif
    float s = 0.f;  // missing elements are zeros
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      float f[VEC];
      kv::unpack(v[c], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) s = fmaf(f[k], f[k], s);
      kv::launder(v[c]);
    }
    ss += s;
  }
  ss = block_sum(ss);
  const float rstd = rsqrtf(ss / (float)cols + eps);

  for (int t = ntiles - 1; t >= 0; --t) {
    const int gb = t * tile + tid;
    if (t != ntiles - 1) {
#pragma unroll
      for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL, size_t, X_L1>(xr, gb + c * nt, gb + c * nt < ngroups, cols);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const int g = gb + c * nt;
      if (g >= ngroups) continue;
      float f[VEC], wf[VEC];
#if WREG
      kv::unpack(t == ntiles - 1 ? wv[c] : kv::load_group<VBYTES, AL, size_t, W_L1>(w, g, true, cols), wf);
#else
      kv::unpack(kv::load_group<VBYTES, AL, size_t, W_L1>(w, g, true, cols), wf);
#endif
      kv::unpack(v[c], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) f[k] = f[k] * rstd * wf[k];
      kv::store_group<VBYTES, AL, STCS, size_t>(yr, g, cols, kv::pack<VBYTES>(f));  // STCS: streaming store, y is not read again
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

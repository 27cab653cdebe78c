// layernorm seed for medium rows: one block per row.
// A row is cut into groups of VEC = VBYTES / sizeof_T elements (one 16-, 8- or 4-byte
// access each); thread t takes groups t, t + nt, ... (nt threads). A tile is the
// nt * CHUNKS groups the block holds in registers. The launch sizes the block to the
// row: the smallest power of two >= 64 threads that holds it in one tile, at most BLOCK,
// so rows up to BLOCK * CHUNKS * VEC elements are read from DRAM exactly once: all
// loads first (many 16-byte loads in flight per thread), then the reduction.
// Longer rows stream: tiles are loaded one after another for the statistics, then
// re-read (last tile first, from registers; the rest mostly from L2) to write.
// PERSIST=1 makes the blocks persistent: G blocks (about BPS * BLOCK threads per SM, G
// chosen so that every block gets the same number of rows, give or take one), block i
// takes rows i, i + G, ..., and while it reduces and writes one row, the next is already
// on its way into shared memory (cp.async, each thread its own groups). It is for rows of
// one tile that fill the register file, where a block per row leaves each SM idle between
// its last load and its next block's first one: f32 4096x32768 ran 288.9-290.3 us against
// 310.5-311.5 for the preset below (H200, fourteenth session, same calls). Unaligned rows
// take the fallback path in a loop, where ptxas spills a few hundred bytes at that preset.
// WREG=1 loads w and b for the register tile before the reduction instead of after it;
// with PERSIST, a block loads its groups of w and b once, before its first row, and keeps
// them in registers for all its rows (no w and b traffic per row from L1 or L2).
// WSM=1 (with PERSIST, without WREG) copies a persistent block's groups of w and b into
// shared memory once, after the tile's staging area, when the launch gave it room (the
// launch asks for it only for rows of one tile, and only when the grid's blocks per SM,
// BPS * BLOCK / block, each with its tile, w, b and 2 KiB for the per-block reserve and
// the static arrays, fit the SM's 228 KiB; the kernel reads %dynamic_smem_size and falls
// back to reading w and b per row otherwise).
// Each thread copies only the groups it later reads, so no barrier is needed. It is for
// rows too wide for WREG's registers (bf16/f16 4096x32768 at 1024 x 4: 128 KiB of w and b
// a row, which otherwise cross L1 or L2 again for every row). Measured (H200, twenty-third
// session, us, 4096x32768 / 16384x16384 / 8192x8192, WSM 0 -> 1): f16 512 x 8 156.4 / 289.7 /
// 84.5 -> 146.9 / 289.6 / 77.5, but 1024 x 4 142.6 / 281.2 / 79.2 -> 144.2 / 288.7 / 78.4 (bf16
// 143.8 / 282.5 / 80.1 -> 144.1 / 287.6 / 78.6), and one block per row of 1024 x 8 stays the
// pick at 4096x32768 (140.4-140.8): a parameter, not a preset. (Those runs' launch counted
// BPS blocks per SM where the grid holds BPS * BLOCK / block: 1024 x 8 got the room and ran
// in two waves; it no longer gets it.)
// XNA=1 reads x without allocating in L1 and WEL=1 asks L1 to keep w and b, so that the w
// and b of the previous rows on the SM are still there (aligned rows only: ignored when cols % VEC != 0).
// When cols % VEC != 0 the rows are not VBYTES-aligned, and every access is scalar.
// Statistics in f32, robust to a large mean, deterministic, and identical in every
// thread; no E[x^2] - E[x]^2. A row that fits one tile takes the exact two-pass over the
// block from registers (block sums of x, then of (x - mean)^2). A longer row: each thread
// takes the exact two-pass mean and sum of squared deviations of its part of a tile;
// (count, mean, M2) triples are merged with Chan's formula over tiles, warps (butterfly,
// lower lane first) and the block's warps in order.
// SHIFT=1 (a row of one tile, and the persistent rows) takes the statistics in one pass
// instead: sums of d = x - k and d^2 over the row, one block reduction of the pair, then
// mean = k + S1 / cols and var = S2 / cols - (S1 / cols)^2, k the median of the row's
// elements at columns 0, cols / 2 (rounded down to a group) and the last group's first
// (slice_row explains the choice; precondition: at most one of those three is a far
// outlier of its row, else SHIFT=0). It saves one block barrier and one dependent chain
// of shuffles per row. Rows of more than one tile keep the merges above. Against SHIFT=0
// in the same calls (H200, seventeenth session, us): 1024 x 4 bf16 at 8192x8192 76.3 ->
// 73.1 and at 4096x32768 196.9 -> 175.5, 512 x 2 at 16384x4096 88.8 -> 81.4, f32 at
// 8192x8192 142.5 -> 138.8: it pays where the reduction weighs most, with 1-4 blocks per
// SM or 2 chunks per thread. With 8-10 blocks per SM (128 x 4, 256 x 4 at 4096 columns)
// and with PERSIST, within 1% either way.
// @kevolve param   BLOCK  1024 512 256 128
// @kevolve param   VBYTES 16 8 4
// @kevolve param   CHUNKS 8 4 16 2
// @kevolve param   WREG   0 1
// @kevolve param   STCS   0 1
// @kevolve param   XNA    0 1
// @kevolve param   WEL    0 1
// @kevolve param   PERSIST 0 1
// @kevolve param   BPS    1 2
// @kevolve param   WSM    0 1
// @kevolve param   SHIFT  1 0
// Presets (tried in generation 0): per-shape winners measured on the H200, eighth session.
//   bf16 16384x4096: 70.2 us in a hand-picked sweep:
// @kevolve preset  BLOCK=128 CHUNKS=4
//   bf16 8192x8192: 71.2 us in a hand-picked sweep:
// @kevolve preset  BLOCK=256 CHUNKS=4
//   every dtype at 16384x4096 and 32768x4096 in the benchmark:
// @kevolve preset  BLOCK=1024 CHUNKS=4
//   f32 4096x32768, eleventh session: 313.1 us against 326.5 with x through L1 (same call):
// @kevolve preset  BLOCK=1024 CHUNKS=8 STCS=1 XNA=1
//   the same row with persistent blocks, fourteenth session: 288.9-290.3 us:
// @kevolve preset  BLOCK=1024 CHUNKS=8 PERSIST=1
// @kevolve require VBYTES >= sizeof_T
// @kevolve require CHUNKS * VBYTES * (1 + 2 * WREG) <= 256
// @kevolve require CHUNKS * VBYTES * (1 + 2 * WREG) / 4 + 24 <= 65536 / BLOCK
// PERSIST stages a tile of 16-byte groups, and BPS blocks must fit the SM's shared memory:
// @kevolve require PERSIST == 0 || VBYTES == 16
// BPS only counts with PERSIST (kept to one value otherwise, no near-duplicate kernels).
// @kevolve require PERSIST == 1 || BPS == 1
// WSM only counts with PERSIST, and WREG already holds w and b in registers:
// @kevolve require WSM == 0 || (PERSIST == 1 && WREG == 0)
// __launch_bounds__(BLOCK, BPS) caps the registers at 65536 / (BLOCK * BPS):
// @kevolve require PERSIST == 0 || CHUNKS * VBYTES * (1 + 2 * WREG) / 4 + 24 <= 65536 / (BLOCK * BPS)
// @kevolve require PERSIST == 0 || BPS * BLOCK * CHUNKS * 16 <= 229376
// @kevolve launch  layernorm_block grid=PERSIST ? ceil_div(rows, ceil_div(rows, num_sms * BPS * BLOCK / min(BLOCK, max(64, pow2_ceil(ceil_div(cols, CHUNKS * VBYTES / sizeof_T)))))) : rows block=min(BLOCK, max(64, pow2_ceil(ceil_div(cols, CHUNKS * VBYTES / sizeof_T)))) smem=PERSIST ? min(BLOCK, max(64, pow2_ceil(ceil_div(cols, CHUNKS * VBYTES / sizeof_T)))) * CHUNKS * 16 + (WSM && cols % (16 / sizeof_T) == 0 && cols * sizeof_T <= min(BLOCK, max(64, pow2_ceil(ceil_div(cols, CHUNKS * VBYTES / sizeof_T)))) * CHUNKS * 16 && BPS * BLOCK / min(BLOCK, max(64, pow2_ceil(ceil_div(cols, CHUNKS * VBYTES / sizeof_T)))) * (min(BLOCK, max(64, pow2_ceil(ceil_div(cols, CHUNKS * VBYTES / sizeof_T)))) * CHUNKS * 16 + 2 * cols * sizeof_T + 2048) <= 233472 ? 2 * cols * sizeof_T : 0) : 0

#define VEC (VBYTES / KV_SIZEOF_T)
#define X_L1 (XNA ? kv::kL1NoAllocate : kv::kL1Default)
#define W_L1 (WEL ? kv::kL1EvictLast : kv::kL1Default)
// A group of VEC elements as raw bits (kv::Group): one 16-, 8- or 4-byte access. 16-bit
// types are kept packed (two per 32-bit register) and converted with 32-bit operations.
typedef kv::Group<VBYTES> Vec;

// The sum of one thread's part of a tile (missing elements are zeros: they add nothing).
template <int CH>
__device__ __forceinline__ float part_sum(Vec (&v)[CH]) {
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    float f[VEC];
    kv::unpack(v[c], f);
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += f[k];
    kv::launder(v[c]);
  }
  return s;
}

// The sums of d = x - k and d^2 over the elements of one thread's part of a tile that exist
// (chunk c is group gb + c * stride).
template <bool AL, int CH>
__device__ __forceinline__ float2 part_shift_sums(Vec (&v)[CH], int gb, int stride, int g1, int cols, float k0) {
  float q1 = 0.f, q2 = 0.f;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int nv = kv::group_count<VBYTES, AL>(gb + c * stride, g1, cols);
    float f[VEC];
    kv::unpack(v[c], f);
    if (AL) {
      // A group of an aligned row is all there or all missing: its sums are taken
      // unconditionally and added under one test. A test per element compiled to a branch
      // around every element (PTX). Same time within the call's spread (H200, bf16/f16
      // 16384x4096 and 8192x8192, twenty-second session), fewer spills in the PERSIST
      // fallback (bf16 28 -> 20 bytes).
      float s1 = 0.f, s2 = 0.f;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = f[k] - k0;
        s1 += d;
        s2 = fmaf(d, d, s2);
      }
      if (nv > 0) {
        q1 += s1;
        q2 += s2;
      }
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = f[k] - k0;
        if (k < nv) {
          q1 += d;
          q2 = fmaf(d, d, q2);
        }
      }
    }
    kv::launder(v[c]);
  }
  return make_float2(q1, q2);
}

// The sum of squared deviations from `mean` of one thread's part of a tile (the sum of d
// is dead code then, and compiled away).
template <bool AL, int CH>
__device__ __forceinline__ float part_sq_dev(Vec (&v)[CH], int gb, int stride, int g1, int cols, float mean) {
  return part_shift_sums<AL, CH>(v, gb, stride, g1, cols, mean).y;
}

// Statistics of one thread's part of a tile, exact two-pass in registers: the mean of
// the part, then squared deviations from it.
template <bool AL, int CH>
__device__ __forceinline__ kv::Stats tile_stats(Vec (&v)[CH], int gb, int stride, int g1, int cols) {
  int cnt = 0;
#pragma unroll
  for (int c = 0; c < CH; ++c) cnt += kv::group_count<VBYTES, AL>(gb + c * stride, g1, cols);
  const float s = part_sum<CH>(v);
  const float mean = cnt > 0 ? s / (float)cnt : 0.f;
  return kv::Stats{(float)cnt, mean, part_sq_dev<AL, CH>(v, gb, stride, g1, cols, mean)};
}

#if SHIFT
// The row's shift k: the median of its elements at columns 0, cols / 2 (rounded down to a
// group) and the last group's first. Every thread reads the same three (broadcast loads).
__device__ __forceinline__ float row_shift(const T* __restrict__ xr, int cols) {
  const float a = kv::to_float(xr[0]);
  const float b = kv::to_float(xr[cols / 2 / VEC * VEC]);
  const float c = kv::to_float(xr[max(cols - VEC, 0)]);
  return fmaxf(fminf(a, b), fminf(fmaxf(a, b), c));
}

// A float2 sum over the block, like block_sum: every thread gets the same bits. `red`
// holds BLOCK / 32 pairs and must not be reused before another __syncthreads.
__device__ __forceinline__ float2 block_sum2(float2 v, float2* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float2 s = make_float2(0.f, 0.f);
  const int nw = blockDim.x / 32;
  for (int i = 0; i < nw; ++i) {
    s.x += red[i].x;
    s.y += red[i].y;
  }
  return s;
}

// The row's (S1, S2) to mean and rstd.
__device__ __forceinline__ void shift_stats(float2 s, float k0, float inv, float eps, float& mean, float& rstd) {
  const float md = s.x * inv;
  mean = k0 + md;
  rstd = rsqrtf(fmaxf(fmaf(s.y, inv, -md * md), 0.f) + eps);
}
#endif

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

// A float sum over the block: a butterfly in each warp, then every thread adds the warps'
// sums in warp order, so every thread gets the same bits. `red` holds BLOCK / 32 floats
// and must not be reused before another __syncthreads.
__device__ __forceinline__ float block_sum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0.f;
  const int nw = blockDim.x / 32;
  for (int i = 0; i < nw; ++i) s += red[i];
  return s;
}

template <bool AL, int CH>
__device__ __forceinline__ void block_row(const T* __restrict__ xr, const T* __restrict__ w, const T* __restrict__ b,
                                          T* __restrict__ yr, int cols, float eps) {
  const int nt = blockDim.x, tid = threadIdx.x;
  const int ngroups = (cols + VEC - 1) / VEC;
  const int tile = nt * CH;
  const int ntiles = (ngroups + tile - 1) / tile;
  Vec v[CH];
#if WREG
  Vec wv[CH], bv[CH];
#endif
  kv::Stats st{0.f, 0.f, 0.f};
  for (int t = 0; t < ntiles; ++t) {
    const int gb = t * tile + tid;
#pragma unroll
    for (int c = 0; c < CH; ++c) v[c] = kv::load_group<VBYTES, AL, size_t, X_L1>(xr, gb + c * nt, gb + c * nt < ngroups, cols);
#if WREG
    if (t == ntiles - 1) {
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        wv[c] = kv::load_group<VBYTES, AL, size_t, W_L1>(w, gb + c * nt, gb + c * nt < ngroups, cols);
        bv[c] = kv::load_group<VBYTES, AL, size_t, W_L1>(b, gb + c * nt, gb + c * nt < ngroups, cols);
      }
    }
#endif
    if (ntiles > 1) st = kv::merge(st, tile_stats<AL, CH>(v, gb, nt, ngroups, cols));
  }
  float mean, rstd;
  if (ntiles == 1) {
    // The row is in registers: the exact two-pass over the block, with float sums and no
    // divisions (each Chan merge divides, and block_merge chains one per warp: about a
    // thousand cycles of latency per row at 512 threads). The row sum gives the mean;
    // the sum of squared deviations from it gives the variance.
#if SHIFT
    const float k0 = row_shift(xr, cols);  // read after the tile's loads: before them it costs 13 registers in bf16
    __shared__ float2 red2[BLOCK / 32];
    shift_stats(block_sum2(part_shift_sums<AL, CH>(v, tid, nt, ngroups, cols, k0), red2), k0, 1.f / (float)cols, eps,
                mean, rstd);
#else
    __shared__ float red0[BLOCK / 32], red1[BLOCK / 32];
    mean = block_sum(part_sum<CH>(v), red0) * (1.f / (float)cols);
    rstd = rsqrtf(block_sum(part_sq_dev<AL, CH>(v, tid, nt, ngroups, cols, mean), red1) * (1.f / (float)cols) + eps);
#endif
  } else {
    st = kv::block_merge(st);
    mean = st.mean;
    rstd = rsqrtf(st.m2 / (float)cols + eps);
  }

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
#if WREG
      const Vec wg = (t == ntiles - 1) ? wv[c] : kv::load_group<VBYTES, AL, size_t, W_L1>(w, g, true, cols);
      const Vec bg = (t == ntiles - 1) ? bv[c] : kv::load_group<VBYTES, AL, size_t, W_L1>(b, g, true, cols);
#else
      const Vec wg = kv::load_group<VBYTES, AL, size_t, W_L1>(w, g, true, cols);
      const Vec bg = kv::load_group<VBYTES, AL, size_t, W_L1>(b, g, true, cols);
#endif
      // STCS: streaming stores (y is not read again).
      kv::store_group<VBYTES, AL, STCS, size_t>(yr, g, cols, normalize(v[c], wg, bg, mean, rstd));
    }
  }
}

// The unaligned path (scalar accesses), compiled apart and with half the chunks per tile:
// inlined next to the aligned path, or with all CHUNKS, it makes ptxas spill at 64
// registers. It is correct for any CHUNKS; rows longer than its tile stream.
__device__ __noinline__ void block_row_unaligned(const T* __restrict__ xr, const T* __restrict__ w, const T* __restrict__ b,
                                          T* __restrict__ yr, int cols, float eps) {
  block_row<false, (CHUNKS > 1 ? CHUNKS / 2 : 1)>(xr, w, b, yr, cols, eps);
}

#if PERSIST
// Thread tid stages its own groups of a row (tid + c * nt, at the same places in shared
// memory), so it reads back only what it copied itself: cp.async.wait_all, no barrier.
__device__ __forceinline__ void stage_tile(unsigned char* stage, const T* __restrict__ xr, int ngroups) {
  const int nt = blockDim.x, tid = threadIdx.x;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int g = tid + c * nt;
    if (g < ngroups) kv::cp_async16(kv::smem_addr(stage + (size_t)g * 16), xr + (size_t)g * VEC, 16);
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void unstage_tile(Vec (&v)[CHUNKS], const unsigned char* stage, int ngroups) {
  const int nt = blockDim.x, tid = threadIdx.x;
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int g = tid + c * nt;
    v[c].r = g < ngroups ? *reinterpret_cast<const uint4*>(stage + (size_t)g * 16) : make_uint4(0u, 0u, 0u, 0u);
  }
}

// Rows of one tile, aligned, in a persistent block: the row in registers is reduced and
// written while the next one is staged.
__device__ __forceinline__ void persist_rows(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                             T* __restrict__ y, int rows, int cols, float eps) {
  extern __shared__ __align__(16) unsigned char stage[];
  // red0 and red1 alternate: a row's red0 is written again only after every thread has
  // passed that row's red1 barrier, which it reaches after reading red0 (and likewise).
#if SHIFT
  // One reduction per row: rows alternate between two buffers, so a row's buffer is
  // written again only after every thread has passed the next row's barrier.
  __shared__ float2 red2[2][BLOCK / 32];
  int par = 0;
#else
  __shared__ float red0[BLOCK / 32], red1[BLOCK / 32];
#endif
  const int nt = blockDim.x, tid = threadIdx.x, step = gridDim.x;
  const int ngroups = cols / VEC;
  const float inv = 1.f / (float)cols;
  Vec v[CHUNKS];
  int r = blockIdx.x;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
    v[c] = kv::load_group<VBYTES, true, size_t, X_L1>(x + (size_t)r * cols, tid + c * nt, tid + c * nt < ngroups, cols);
#if WSM
  // w and b in shared memory after the staging area, when the launch made room for them.
  unsigned dyn;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  const size_t wb_at = (size_t)nt * CHUNKS * 16;
  const bool wsm = dyn >= wb_at + 2u * (size_t)ngroups * 16u;
  uint4* const wsv = reinterpret_cast<uint4*>(stage + wb_at);  // group g of w at g, of b at ngroups + g
  if (wsm) {
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int g = tid + c * nt;
      if (g < ngroups) {
        wsv[g] = kv::load_group<VBYTES, true, size_t, W_L1>(w, g, true, cols).r;
        wsv[ngroups + g] = kv::load_group<VBYTES, true, size_t, W_L1>(b, g, true, cols).r;
      }
    }
  }
#endif
#if WREG
  // w and b for all of this block's rows, loaded once (after the first row's x, whose
  // loads are already on their way).
  Vec wk[CHUNKS], bk[CHUNKS];
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    wk[c] = kv::load_group<VBYTES, true, size_t, W_L1>(w, tid + c * nt, tid + c * nt < ngroups, cols);
    bk[c] = kv::load_group<VBYTES, true, size_t, W_L1>(b, tid + c * nt, tid + c * nt < ngroups, cols);
  }
#endif
#if SHIFT
  float k0 = row_shift(x + (size_t)r * cols, cols);
#endif
  if (r + step < rows) stage_tile(stage, x + (size_t)(r + step) * cols, ngroups);
  for (; r < rows; r += step) {
#if SHIFT
    float mean, rstd;
    shift_stats(block_sum2(part_shift_sums<true, CHUNKS>(v, tid, nt, ngroups, cols, k0), red2[par]), k0, inv, eps, mean,
                rstd);
    par ^= 1;
#else
    const float mean = block_sum(part_sum<CHUNKS>(v), red0) * inv;
    const float rstd = rsqrtf(block_sum(part_sq_dev<true, CHUNKS>(v, tid, nt, ngroups, cols, mean), red1) * inv + eps);
#endif
    T* __restrict__ yr = y + (size_t)r * cols;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int g = tid + c * nt;
      if (g >= ngroups) continue;
#if WREG
      const Vec& wg = wk[c];
      const Vec& bg = bk[c];
#elif WSM
      Vec wg, bg;
      if (wsm) {
        wg.r = wsv[g];
        bg.r = wsv[ngroups + g];
      } else {
        wg = kv::load_group<VBYTES, true, size_t, W_L1>(w, g, true, cols);
        bg = kv::load_group<VBYTES, true, size_t, W_L1>(b, g, true, cols);
      }
#else
      const Vec wg = kv::load_group<VBYTES, true, size_t, W_L1>(w, g, true, cols);
      const Vec bg = kv::load_group<VBYTES, true, size_t, W_L1>(b, g, true, cols);
#endif
      kv::store_group<VBYTES, true, STCS, size_t>(yr, g, cols, normalize(v[c], wg, bg, mean, rstd));
    }
    if (r + step < rows) {
#if SHIFT
      // the next row's shift, read here rather than before the loop above: held across the
      // w and b loads it makes ptxas spill at BLOCK=1024 CHUNKS=8
      k0 = row_shift(x + (size_t)(r + step) * cols, cols);
#endif
      unstage_tile(v, stage, ngroups);
      if (r + 2 * step < rows) stage_tile(stage, x + (size_t)(r + 2 * step) * cols, ngroups);
    }
  }
}

// Other rows in the persistent grid, one after another (the aligned path compiled apart
// too, so that its registers do not add to persist_rows').
__device__ __noinline__ void block_row_aligned(const T* __restrict__ xr, const T* __restrict__ w, const T* __restrict__ b,
                                               T* __restrict__ yr, int cols, float eps) {
  block_row<true, CHUNKS>(xr, w, b, yr, cols, eps);
}
#endif

// Arguments: buffers (x, w, b, y), sizes (rows, cols), scalars (eps).
#if PERSIST
#define BOUNDS __launch_bounds__(BLOCK, BPS)
#else
#define BOUNDS __launch_bounds__(BLOCK)
#endif
extern "C" __global__ void BOUNDS
layernorm_block(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y, int rows,
                int cols, float eps) {
  (void)rows;
#if PERSIST
  if (cols % VEC == 0 && cols / VEC <= (int)blockDim.x * CHUNKS) {
    persist_rows(x, w, b, y, rows, cols, eps);
    return;
  }
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const size_t off = (size_t)r * cols;
    if (cols % VEC == 0) block_row_aligned(x + off, w, b, y + off, cols, eps);
    else block_row_unaligned(x + off, w, b, y + off, cols, eps);
    __syncthreads();  // block_merge's and block_sum's shared memory is reused by the next row
  }
#else
  const size_t off = (size_t)blockIdx.x * cols;
  if (cols % VEC == 0) block_row<true, CHUNKS>(x + off, w, b, y + off, cols, eps);
  else block_row_unaligned(x + off, w, b, y + off, cols, eps);
#endif
}

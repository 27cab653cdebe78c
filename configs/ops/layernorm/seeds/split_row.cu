// layernorm seed for long rows without clusters: each row is cut into C chunks (C the
// number of CHUNK KiB pieces the row needs, at most num_sms), and every (row, chunk) is
// one block. A block stages its chunk in shared memory with one Hopper bulk copy
// (cp.async.bulk on an mbarrier) and takes its exact two-pass statistics from shared
// memory (as bulk_row: sum -> m, then the sums of d = x - m and d^2 over the valid
// elements, giving the chunk's mean and M2). Warp 0 publishes (mean, M2) in a scratch
// buffer, reads the row's C pairs until all are in, and merges them with Chan's formula
// in chunk order (every chunk of a row gets the same bits); then the block writes
// y = (x - mean) * rsqrt(M2 / cols + eps) * w + b from shared memory, w and b read with
// 16-byte loads through the read-only path. x is read from DRAM once and y written once.
// Why not a cluster: a cluster's blocks must all fit in one GPC at once, and they move
// in lock step (ncu showed DRAM at 58-66% for the cluster seeds on these rows); here a
// row's chunks are ordinary blocks, placed wherever a slot is free, and an SM holds
// several blocks at different stages (loading, waiting, writing).
// Forward progress: blocks take work items in ticket order (an atomic counter), so a
// waiting block only ever waits for items that are running or next to be taken; with at
// least C blocks resident (C <= num_sms guarantees it) the grid cannot deadlock, whatever
// order the hardware dispatches blocks in.
// The scratch buffer `sync` holds a 64-bit ticket counter, then two banks of 64-bit
// (row, chunk) slots. Tickets are never reset: ticket t is position t % G (G blocks) of
// launch e = t / G (with LAG, positions map to statistics and write items, below), and
// launch e uses bank e & 1. A block zeroes its own slot in the other bank when it
// publishes, so the next launch finds that bank all zero. The scratch therefore needs
// zeroing once, at allocation (one buffer per shape), and nothing is reset at the end,
// so no reset has to be ordered after other blocks' slot reads. (An earlier version
// counted readers per row and had the last one clear the slots; ordering that count
// after the reads with an acq_rel atomic cost 8-11% at the long rows.)
// LAG (MiB; 0 = off), as in softmax's split_row: rows of 4 chunks or more get a
// statistics item per chunk that publishes and exits, and a write item about LAG MiB later
// in ticket order that re-reads the chunk from L2 (kept there with evict_last) and writes.
// Rows of one chunk (C = 1) skip the scratch: a block per row. softmax's split_row
// explains the design choices and what was tried.
// Rows whose width is no multiple of 16 bytes (or unaligned buffers) are staged by
// ordinary loads and padded with 0; w, b and y are then accessed element by element.
// @kevolve param   CHUNK   32 16 24 48 64
// @kevolve param   BLOCK   256 128 512
// @kevolve param   OCC     1280 1024 1536 2048
// @kevolve param   STCS    0 1
// @kevolve param   LAG     12 0 8 16
// @kevolve entry   layernorm_split
// @kevolve grid    rows * min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024)) * (LAG > 0 && min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024)) >= 4 ? 2 : 1)
// @kevolve block   BLOCK
// @kevolve smem    align_up(ceil_div(cols, min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024))), 16 / sizeof_T) * sizeof_T
// @kevolve scratch sync (4 + 4 * rows * min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024))) * 4 zeroed
#define VEC (16 / KV_SIZEOF_T)  // elements per 16-byte group
union Vec {
  uint4 r;
  unsigned int w[4];
  float f[4];
  T v[VEC];
};

// ---- bulk copy and mbarrier (PTX ISA 8.0, sm_90) ----
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred p;\n"
      "W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra W;\n}" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) into this block's
// shared memory; completion is counted on `bar`.
// kind 1 (statistics, re-read later) asks L2 to keep the bytes (evict_last), kind 2 (the
// re-read) to drop them first; kind 0 gives no hint (evict_first there measured 4% slower).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar,
                                          int kind) {
  if (kind != 0) {
    unsigned long long pol;
    if (kind == 1) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    else asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
        "%4;" ::"r"(smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(pol)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
  }
}

// ---- element helpers ----
__device__ __forceinline__ void unpack(const Vec& u, float (&f)[VEC]) {
#if defined(KV_DTYPE_F32)
#pragma unroll
  for (int k = 0; k < VEC; ++k) f[k] = u.f[k];
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
  for (int k = 0; k < VEC; ++k) u.f[k] = f[k];
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

// ---- reductions: over a warp (WARP) or over the block (blockDim.x a multiple of 32).
// Butterflies, so every lane (and every thread of the block) gets the same bits.
template <bool WARP>
__device__ __forceinline__ float reduce_sum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (WARP) return v;
  const int nw = blockDim.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <bool WARP>
__device__ __forceinline__ void reduce_sum2(float& a, float& b, float* ra, float* rb) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if (WARP) return;
  const int nw = blockDim.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    ra[threadIdx.x / 32] = a;
    rb[threadIdx.x / 32] = b;
  }
  __syncthreads();
  a = lane < nw ? ra[lane] : 0.f;
  b = lane < nw ? rb[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
}

// Count, mean, and sum of squared deviations from the mean.
struct Stats {
  float n, mean, m2;
};

// Chan et al.'s pairwise merge. Not symmetric in its bits: callers pass the lower part
// first. Empty parts (n == 0) leave the other unchanged and never divide by zero.
__device__ __forceinline__ Stats merge(const Stats& a, const Stats& b) {
  // An empty side leaves the other unchanged; this also keeps d * d * a.n * f from
  // inf * 0 when |mean| > 1.8e19.
  if (a.n == 0.f) return b;
  if (b.n == 0.f) return a;
  const float n = a.n + b.n;
  if (n == 0.f) return a;
  const float f = b.n / n;
  const float d = b.mean - a.mean;
  Stats r;
  r.n = n;
  r.mean = fmaf(d, f, a.mean);
  r.m2 = a.m2 + b.m2 + d * d * a.n * f;
  return r;
}

// Group g of a global vector (w or b from this chunk's first column): one 16-byte
// read-only load when aligned, else the elements below n (zeros past it).
__device__ __forceinline__ Vec load_param(const T* __restrict__ p, int g, int n, bool al) {
  Vec u;
  if (al) {
    u.r = __ldg(reinterpret_cast<const uint4*>(p) + g);
  } else {
    u.r = make_uint4(0u, 0u, 0u, 0u);
    for (int k = 0; k < VEC; ++k)
      if (g * VEC + k < n) u.v[k] = p[g * VEC + k];
  }
  return u;
}

// ---- cross-block signalling through global memory ----
// A row's partials live in 64-bit slots, each written and read whole (single-copy
// atomic), so a slot is its own flag: all-zero bits mean "not yet". The second word is
// stored with its sign bit set (a nonnegative value, or a marker), so no partial has
// all-zero bits. Publishing is one store, waiting is reading the slots: one round trip
// to L2 each, where a counter would add two more.
__device__ __forceinline__ void put_pair(float2* p, float2 v) {
  const unsigned long long b = (unsigned long long)__float_as_uint(v.y) << 32 | __float_as_uint(v.x);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(b) : "memory");
}
__device__ __forceinline__ unsigned long long get_bits(const float2* p) {
  unsigned long long b;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(b) : "l"(p) : "memory");
  return b;
}
__device__ __forceinline__ float2 as_pair(unsigned long long b) {
  return make_float2(__uint_as_float((unsigned)b), __uint_as_float((unsigned)(b >> 32)));
}

// Arguments: buffers (x, w, b, y), sizes (rows, cols), scalars (eps), then scratch (sync).
extern "C" __global__ void __launch_bounds__(BLOCK, OCC / BLOCK)
    layernorm_split(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                    int rows, int cols, float eps, unsigned* __restrict__ sync) {
  extern __shared__ __align__(128) unsigned char dsm[];
  __shared__ __align__(8) unsigned long long bar;
  __shared__ float red0[32], red1[32], red2[32];
  __shared__ float fin[2];
  __shared__ int item_s, bank_s, kind_s;
  T* const st = reinterpret_cast<T*>(dsm);
  const Vec* const sv = reinterpret_cast<const Vec*>(dsm);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // Chunks per row. With LAG, rows of 4 chunks or more get two items per chunk, so the grid
  // is 2 * rows * C; fewer chunks than 4 keep one (and then gridDim.x / rows < 4).
  const bool lag = LAG > 0 && gridDim.x / (unsigned)rows >= 8u;
  const int C = gridDim.x / (lag ? 2 * rows : rows);
  const int ce = (((cols + C - 1) / C) + VEC - 1) / VEC * VEC;  // chunk elements (the smem size)
  float2* part = reinterpret_cast<float2*>(sync + 4);  // bank 0 of [rows][C], then bank 1
  float2* other = part + (size_t)rows * C;
  int item = blockIdx.x, kind = 0;  // kind 0: reduce, wait, write; 1: reduce, publish; 2: wait, write
  if (C > 1) {
    if (tid == 0) {
      const unsigned long long t = atomicAdd(reinterpret_cast<unsigned long long*>(sync), 1ull);
      const int pos = (int)(t % gridDim.x);
      bank_s = (int)(t / gridDim.x) & 1;
      item_s = pos;
      kind_s = 0;
      if (lag) {
        // Ticket order: L statistics items, then write i and statistics L + i alternating,
        // then the last L writes. L >= C puts all of a row's statistics before its writes.
        const int G = rows * C;
        const int L = (int)min((long long)G, max((long long)C, ((long long)LAG << 20) / ((long long)ce * KV_SIZEOF_T)));
        const int q = pos - L;
        if (q < 0) kind_s = 1;
        else if (q < 2 * (G - L)) {
          kind_s = (q & 1) ? 1 : 2;
          item_s = (q & 1) ? L + q / 2 : q / 2;
        } else {
          kind_s = 2;
          item_s = G - L + (q - 2 * (G - L));
        }
      }
    }
    __syncthreads();
    item = item_s;
    kind = kind_s;
    if (bank_s) {
      other = part;
      part += (size_t)rows * C;
    }
  }
  const int row = item / C, chunk = item - row * C;
  const int c0 = chunk * ce;
  const int n = max(0, min(ce, cols - c0));
  const int ng = (n + VEC - 1) / VEC;
  const bool al = cols % VEC == 0 && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y) | reinterpret_cast<size_t>(w) | reinterpret_cast<size_t>(b)) & 15) == 0;
  const T* const xs = x + (size_t)row * cols + c0;
  T* const ys = y + (size_t)row * cols + c0;

  if (al) {
    if (tid == 0) {
      mbar_init(&bar);
      mbar_expect(&bar, (unsigned)(n * KV_SIZEOF_T));
      if (n > 0) bulk_load(st, xs, (unsigned)(n * KV_SIZEOF_T), &bar, kind);
    }
    __syncthreads();
    mbar_wait(&bar, 0);
  } else {
    for (int k = tid; k < ng * VEC; k += BLOCK) st[k] = k < n ? xs[k] : kv::from_float<T>(0.f);
    __syncthreads();
  }

  Stats mine{0.f, 0.f, 0.f};  // the chunk's (count, mean, M2) (kind 2 skips it)
  if (kind != 2) {
    // Pass 1: sum (padding zeros add nothing); each group is summed as a small tree.
    float s = 0.f;
#pragma unroll 4
    for (int g = tid; g < ng; g += BLOCK) {
      float f[VEC];
      unpack(sv[g], f);
#pragma unroll
      for (int h = VEC / 2; h > 0; h >>= 1)
#pragma unroll
        for (int k = 0; k < h; ++k) f[k] += f[k + h];
      s += f[0];
    }
    const float sb = reduce_sum<false>(s, red0);
    const float m = n > 0 ? sb / (float)n : 0.f;
    // Pass 2: deviations from m over the valid elements only.
    float sd = 0.f, q2 = 0.f;
#pragma unroll 4
    for (int g = tid; g < ng; g += BLOCK) {
      float f[VEC];
      unpack(sv[g], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = f[k] - m;
        if (g * VEC + k < n) {
          sd += d;
          q2 = fmaf(d, d, q2);
        }
      }
    }
    reduce_sum2<false>(sd, q2, red1, red2);
    const float cm = n > 0 ? sd / (float)n : 0.f;
    mine = Stats{(float)n, m + cm, fmaxf(q2 - sd * cm, 0.f)};
  }
  if (warp == 0) {
    Stats acc = mine;
    if (C > 1) {
      float2* const pr = part + (size_t)row * C;
      if (kind != 2 && lane == 0) {
        put_pair(pr + chunk, make_float2(mine.mean, -mine.m2 - 0.f));
        put_pair(other + (size_t)row * C + chunk, make_float2(0.f, 0.f));  // for launch e + 1
      }
      if (kind != 1) {
        acc = Stats{0.f, 0.f, 0.f};
        for (int k = lane; k < C; k += 32) {
          unsigned long long bits;
          for (int spins = 0; (bits = get_bits(pr + k)) == 0ull;)
            if (++spins > 8) __nanosleep(32);
          const float2 q = as_pair(bits);
          const Stats pk{(float)max(0, min(ce, cols - k * ce)), q.x, -q.y};
          acc = merge(acc, pk);
        }
        for (int o = 1; o < 32; o <<= 1) {
          Stats r;
          r.n = __shfl_xor_sync(0xffffffffu, acc.n, o);
          r.mean = __shfl_xor_sync(0xffffffffu, acc.mean, o);
          r.m2 = __shfl_xor_sync(0xffffffffu, acc.m2, o);
          acc = (lane & o) ? merge(r, acc) : merge(acc, r);  // lower lanes (earlier chunks) first
        }
      }
    }
    if (lane == 0) {
      fin[0] = acc.mean;
      fin[1] = rsqrtf(acc.m2 / (float)cols + eps);
    }
  }
  if (kind == 1) return;  // statistics only: a later block writes this chunk
  __syncthreads();
  const float mean = fin[0], rstd = fin[1];
  const T* const ws_w = w + c0;
  const T* const ws_b = b + c0;
  // y from shared memory.
#pragma unroll 2
  for (int g = tid; g < ng; g += BLOCK) {
    float f[VEC], wf[VEC], bf[VEC];
    unpack(sv[g], f);
    unpack(load_param(ws_w, g, n, al), wf);
    unpack(load_param(ws_b, g, n, al), bf);
#pragma unroll
    for (int k = 0; k < VEC; ++k) f[k] = fmaf((f[k] - mean) * rstd, wf[k], bf[k]);
    const Vec u = pack(f);
    if (al) {
      uint4* q = reinterpret_cast<uint4*>(ys + g * VEC);
      if (STCS) __stcs(q, u.r);  // streaming store: y is not read again
      else *q = u.r;
    } else {
      for (int k = 0; k < VEC; ++k)
        if (g * VEC + k < n) ys[g * VEC + k] = u.v[k];
    }
  }
}

// kevolve.h: pre-included into every candidate and reference that kevolve compiles, and
// written next to every exported kernel.cu. It defines the element type T from the dtype
// macro (KV_DTYPE_F32, KV_DTYPE_BF16, KV_DTYPE_F16 or KV_DTYPE_F64; KV_SIZEOF_T is its
// size) and the kv:: device helpers that the shipped seeds share. Every helper is a
// __forceinline__ function or a template, so a kernel that does not call one carries no
// code for it. T is a typedef, not a macro, so CUDA headers with template parameters
// named T still compile. Template and function parameters below are lower case (bytes_,
// aligned_, n_el, window, ...) and the types mixed case (Group, Stats, SplitItem, ...): a
// candidate's parameters are macros (-DNAME=value), usually upper case, and one named like
// an identifier here would rewrite it.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#if defined(KV_DTYPE_F32)
typedef float T;
#elif defined(KV_DTYPE_F16)
typedef __half T;
#elif defined(KV_DTYPE_BF16)
typedef __nv_bfloat16 T;
#elif defined(KV_DTYPE_F64)
typedef double T;
#endif

namespace kv {

// ---- conversions ----
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ double to_double(float x) { return (double)x; }
__device__ __forceinline__ double to_double(double x) { return x; }
__device__ __forceinline__ double to_double(__half x) { return (double)__half2float(x); }
__device__ __forceinline__ double to_double(__nv_bfloat16 x) { return (double)__bfloat162float(x); }
// Rounds to nearest even.
template <typename out_t> __device__ __forceinline__ out_t from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
// NVRTC has no math.h: INFINITY is not defined.
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

#if defined(KV_SIZEOF_T) && !defined(KV_DTYPE_F64)
// ---- groups: bytes_ = 16, 8 or 4 bytes of consecutive elements, moved by one access ----
// 16-bit types stay packed, two per 32-bit word, and are converted with 32-bit operations.
template <int bytes_> struct RawOf;
template <> struct RawOf<16> { typedef uint4 type; };
template <> struct RawOf<8> { typedef uint2 type; };
template <> struct RawOf<4> { typedef unsigned int type; };
template <int bytes_>
union Group {
  typename RawOf<bytes_>::type r;
  unsigned int w[bytes_ / 4];
  T v[bytes_ / KV_SIZEOF_T];
};

// A 32-bit word of -inf elements (one f32, or two packed 16-bit values).
#if defined(KV_DTYPE_F32)
#define KV_NEG_INF_WORD 0xff800000u
#elif defined(KV_DTYPE_BF16)
#define KV_NEG_INF_WORD 0xff80ff80u
#else
#define KV_NEG_INF_WORD 0xfc00fc00u
#endif

// The group's elements as floats (exact).
template <int bytes_>
__device__ __forceinline__ void unpack(const Group<bytes_>& u, float (&f)[bytes_ / KV_SIZEOF_T]) {
#if defined(KV_DTYPE_F32)
#pragma unroll
  for (int k = 0; k < bytes_ / 4; ++k) f[k] = u.v[k];
#elif defined(KV_DTYPE_BF16)
#pragma unroll
  for (int j = 0; j < bytes_ / 4; ++j) {
    f[2 * j] = __uint_as_float(u.w[j] << 16);
    f[2 * j + 1] = __uint_as_float(u.w[j] & 0xffff0000u);
  }
#else
#pragma unroll
  for (int j = 0; j < bytes_ / 4; ++j) {
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&u.w[j]));
    f[2 * j] = p.x;
    f[2 * j + 1] = p.y;
  }
#endif
}

// Floats to a group, rounding to nearest even (two elements per conversion for 16-bit types).
template <int bytes_>
__device__ __forceinline__ Group<bytes_> pack(const float (&f)[bytes_ / KV_SIZEOF_T]) {
  Group<bytes_> u;
#if defined(KV_DTYPE_F32)
#pragma unroll
  for (int k = 0; k < bytes_ / 4; ++k) u.v[k] = f[k];
#elif defined(KV_DTYPE_BF16)
#pragma unroll
  for (int j = 0; j < bytes_ / 4; ++j) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    u.w[j] = *reinterpret_cast<const unsigned int*>(&h);
  }
#else
#pragma unroll
  for (int j = 0; j < bytes_ / 4; ++j) {
    const __half2 h = __floats2half2_rn(f[2 * j], f[2 * j + 1]);
    u.w[j] = *reinterpret_cast<const unsigned int*>(&h);
  }
#endif
  return u;
}

// L1 policy of a load of data the kernel never writes (ld.global.nc with an L1 eviction
// priority): kL1NoAllocate leaves L1 to other data (a row streamed once, so that w and b
// read for every row stay there), kL1EvictLast asks L1 to keep the line, kL1EvictFirst to
// drop it first. kL1Default is a plain load.
enum L1Hint { kL1Default = 0, kL1NoAllocate = 1, kL1EvictFirst = 2, kL1EvictLast = 3 };

// One aligned access of bytes_ bytes at p, under L1 policy l1_. p must point to global
// memory (the policies use ld.global, which reads a generic pointer as a global address).
template <int bytes_, int l1_>
__device__ __forceinline__ typename RawOf<bytes_>::type load_raw(const void* p) {
  static_assert(bytes_ == 16 || bytes_ == 8 || bytes_ == 4, "load_raw: bytes_ must be 16, 8 or 4");
  static_assert(l1_ >= kL1Default && l1_ <= kL1EvictLast, "load_raw: l1_ must be a kv::L1Hint");
  typename RawOf<bytes_>::type r;
  if constexpr (l1_ == kL1Default) {
    r = *reinterpret_cast<const typename RawOf<bytes_>::type*>(p);
  } else {
#define KV_LOAD_NC(policy)                                                                         \
  if constexpr (bytes_ == 16)                                                                       \
    asm("ld.global.nc" policy ".v4.u32 {%0, %1, %2, %3}, [%4];"                                    \
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));                                    \
  else if constexpr (bytes_ == 8)                                                                   \
    asm("ld.global.nc" policy ".v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));          \
  else                                                                                              \
    asm("ld.global.nc" policy ".u32 %0, [%1];" : "=r"(r) : "l"(p));
    if constexpr (l1_ == kL1NoAllocate) {
      KV_LOAD_NC(".L1::no_allocate")
    } else if constexpr (l1_ == kL1EvictFirst) {
      KV_LOAD_NC(".L1::evict_first")
    } else {
      KV_LOAD_NC(".L1::evict_last")
    }
#undef KV_LOAD_NC
  }
  return r;
}

// Group g (elements g*n_el .. g*n_el+n_el-1, n_el = bytes_ / sizeof(T)) of the row at p, every word
// `fill` (0: zeros; KV_NEG_INF_WORD: -inf) when !ok. aligned_: p is bytes_-aligned and the row
// holds whole groups, so a group is read with one access (under L1 policy l1_); otherwise
// the elements are read one by one and those at or past cols keep the fill. index_t is the
// type the element index g * n_el is computed in (int, or size_t for 64-bit address
// arithmetic; both are exact, since g * n_el < cols + n_el, but they compile differently).
template <int bytes_, bool aligned_, typename index_t = int, int l1_ = kL1Default>
__device__ __forceinline__ Group<bytes_> load_group(const T* __restrict__ p, int g, bool ok, int cols,
                                                   unsigned int fill = 0u) {
  constexpr int n_el = bytes_ / KV_SIZEOF_T;
  Group<bytes_> u;
  if (fill == 0u) {
    u.r = typename RawOf<bytes_>::type{};
  } else {
#pragma unroll
    for (int j = 0; j < bytes_ / 4; ++j) u.w[j] = fill;
  }
  if (aligned_) {
    if (ok) u.r = load_raw<bytes_, l1_>(p + (index_t)g * n_el);
  } else if (ok) {
#pragma unroll
    for (int k = 0; k < n_el; ++k)
      if (g * n_el + k < cols) u.v[k] = p[(index_t)g * n_el + k];
  }
  return u;
}

// Stores group g of the row at p (aligned_ as for load_group: one access, else the elements
// below cols). stream_ uses a streaming store (st.global.cs) for data not read again.
template <int bytes_, bool aligned_, bool stream_, typename index_t = int>
__device__ __forceinline__ void store_group(T* __restrict__ p, int g, int cols, const Group<bytes_>& u) {
  constexpr int n_el = bytes_ / KV_SIZEOF_T;
  if (aligned_) {
    typename RawOf<bytes_>::type* q = reinterpret_cast<typename RawOf<bytes_>::type*>(p + (index_t)g * n_el);
    if (stream_) __stcs(q, u.r);
    else *q = u.r;
  } else {
#pragma unroll
    for (int k = 0; k < n_el; ++k)
      if (g * n_el + k < cols) p[(index_t)g * n_el + k] = u.v[k];
  }
}

// A 16-byte group stored one way or the other by a runtime flag: one aligned access when
// al, else element by element below cols (the seeds whose rows may be unaligned stage
// them in shared memory and decide per launch).
template <bool stream_>
__device__ __forceinline__ void store16(T* __restrict__ p, int g, int cols, const Group<16>& u, bool al) {
  if (al) store_group<16, true, stream_>(p, g, cols, u);
  else store_group<16, false, stream_>(p, g, cols, u);
}

// Elements of group g that exist: 0 at or past g1 (the row's group count), fewer than n_el
// only for the last group of an unaligned row.
template <int bytes_, bool aligned_>
__device__ __forceinline__ int group_count(int g, int g1, int cols) {
  constexpr int n_el = bytes_ / KV_SIZEOF_T;
  if (g >= g1) return 0;
  return aligned_ ? n_el : min(n_el, cols - g * n_el);
}

// An identity byte permute that the compilers cannot see through: floats converted from
// u before it are not kept alive across it (they are converted again, which is cheap), so
// a tile of groups lives in registers once, as raw bits, not also as floats. (An empty asm
// is not enough: ptxas looks through it, keeps f16 conversions alive, then spills.)
template <int bytes_>
__device__ __forceinline__ void launder(Group<bytes_>& u) {
#pragma unroll
  for (int j = 0; j < bytes_ / 4; ++j) asm volatile("prmt.b32 %0, %0, 0, 0x3210;" : "+r"(u.w[j]));
}

// Elementwise max of two words (one f32, or two packed 16-bit values).
__device__ __forceinline__ unsigned int word_max2(unsigned int a, unsigned int b) {
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

// The largest element of a word, as a float.
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
#endif  // KV_SIZEOF_T

// ---- fast math ----
// 2^x in one MUFU.EX2 (flushes denormal results to zero; 2^-inf = +0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// 1/x within an ulp for normal x (MUFU.RCP, denormals flushed).
__device__ __forceinline__ float rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax pairs (max, sum of 2^((x - max) log2 e)): two merged (an empty side is
// (-inf, 0); two empty sides stay empty), and a warp's pairs merged by a butterfly (every
// lane gets the same bits).
__device__ __forceinline__ float2 online_merge(float2 a, float2 b) {
  constexpr float log2e = 1.4426950408889634f;
  const float m = fmaxf(a.x, b.x);
  if (m == neg_inf()) return make_float2(m, 0.f);
  return make_float2(m, a.y * ex2((a.x - m) * log2e) + b.y * ex2((b.x - m) * log2e));
}
__device__ __forceinline__ float2 online_warp_merge(float2 p) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    p = online_merge(p, make_float2(__shfl_xor_sync(0xffffffffu, p.x, o), __shfl_xor_sync(0xffffffffu, p.y, o)));
  return p;
}

#if defined(KV_SIZEOF_T) && !defined(KV_DTYPE_F64)
// Online softmax: adds one 16-byte group u to a running (max, sum of 2^((x - max) log2 e))
// pair p. The group's max comes from packed compares; when it raises p.x the old sum is
// rescaled (to 0 while p.x is still -inf). Elements that are -inf (masks) add 0, and a
// group of them leaves p as it was.
__device__ __forceinline__ void online_add16(float2& p, const Group<16>& u) {
  constexpr float log2e = 1.4426950408889634f;
  const float vm = word_max(word_max2(word_max2(u.w[0], u.w[1]), word_max2(u.w[2], u.w[3])));
  if (vm > p.x) {
    p.y *= ex2((p.x - vm) * log2e);
    p.x = vm;
  }
  float f[16 / KV_SIZEOF_T];
  unpack(u, f);
  const float nml = p.x == neg_inf() ? 0.f : -p.x * log2e;
#pragma unroll
  for (int k = 0; k < 16 / KV_SIZEOF_T; ++k) p.y += ex2(fmaf(f[k], log2e, nml));
}
#endif  // KV_SIZEOF_T

// ---- reductions: butterflies, so every lane gets the same bits ----
// Over a warp (warp_) or over the block (blockDim.x a multiple of 32; red: 32 floats of
// shared memory; the block syncs once, and red may be reused after the next sync).
template <bool warp_>
__device__ __forceinline__ float reduce_sum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (warp_) return v;
  const int nw = blockDim.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Two sums at once (one sync).
template <bool warp_>
__device__ __forceinline__ void reduce_sum2(float& a, float& b, float* ra, float* rb) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if (warp_) return;
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

// ---- count, mean and sum of squared deviations (M2), merged with Chan et al.'s formula ----
struct Stats {
  float n, mean, m2;
};
// Not symmetric in its bits: pass the lower part first. An empty side (n == 0) leaves the
// other unchanged, which also keeps d * d * a.n * f from inf * 0 when |mean| > 1.8e19.
__device__ __forceinline__ Stats merge(const Stats& a, const Stats& b) {
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

// Over a warp: a butterfly, lower lane first, so every lane ends with the same bits.
__device__ __forceinline__ Stats warp_merge(Stats s) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    Stats p;
    p.n = __shfl_xor_sync(0xffffffffu, s.n, o);
    p.mean = __shfl_xor_sync(0xffffffffu, s.mean, o);
    p.m2 = __shfl_xor_sync(0xffffffffu, s.m2, o);
    s = (lane & o) ? merge(p, s) : merge(s, p);
  }
  return s;
}
// Over a warp, with one division where warp_merge takes five: the count-weighted mean
// (a butterfly of n and n * mean), then M2 = the sum of M2_i + n_i (mean_i - mean)^2 (a
// second butterfly). A lane with n == 0 adds nothing when its mean is finite (0 for an
// empty lane: unlike kv::merge, an inf or NaN mean there is not guarded). Every lane
// gets the same bits.
__device__ __forceinline__ Stats merge_lanes(const Stats& s) {
  float n = s.n, sum = s.n * s.mean;
  reduce_sum2<true>(n, sum, nullptr, nullptr);
  const float mean = n > 0.f ? sum / n : 0.f, d = s.mean - mean;
  const float m2 = reduce_sum<true>(s.n > 0.f ? fmaf(d * s.n, d, s.m2) : 0.f, nullptr);
  return Stats{n, mean, m2};
}
// Over the block (blockDim.x a multiple of 32): the warps' results merged in warp order;
// every thread gets the same value. Syncs once; call it again only after another sync.
__device__ __forceinline__ Stats block_merge(Stats s) {
  __shared__ Stats red_s[32];
  s = warp_merge(s);
  if (threadIdx.x % 32 == 0) red_s[threadIdx.x / 32] = s;
  __syncthreads();
  s = red_s[0];
  const int nw = blockDim.x / 32;
  for (int i = 1; i < nw; ++i) s = merge(s, red_s[i]);
  return s;
}

// ---- shared-memory addresses, cp.async, Hopper bulk copies and mbarriers (sm_90) ----
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, asynchronously (sm_80); src_bytes < 16 zero-fills the rest.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// An mbarrier expecting `count` arrivals per phase, not yet visible to the async proxy:
// several are set up this way, then made visible with one mbar_init_fence().
__device__ __forceinline__ void mbar_init_only(unsigned long long* bar, unsigned count = 1) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
// Makes this thread's mbar_init_only calls visible to the async proxy (and to the cluster).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// An mbarrier expecting `count` arrivals per phase, visible to the async proxy.
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count = 1) {
  mbar_init_only(bar, count);
  mbar_init_fence();
}
// One arrival on bar (release: this thread's earlier shared-memory writes are visible to a
// thread whose mbar_wait sees the phase complete).
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Arrives on bar and adds `bytes` to the transaction count it waits for.
__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Spins until phase `parity` of bar has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred p;\n"
      "W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra W;\n}" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// L2 policy for bulk_load: none, keep (evict_last: read again soon), or drop first
// (evict_first: last read).
enum L2Hint { kL2None = 0, kL2EvictLast = 1, kL2EvictFirst = 2 };
// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory into
// this block's shared memory with one cp.async.bulk; completion is counted on bar.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar,
                                          int hint = kL2None) {
  if (hint != kL2None) {
    unsigned long long pol;
    if (hint == kL2EvictLast) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
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
// The other direction: `bytes` (a multiple of 16, both addresses 16-byte aligned) of this
// block's shared memory to global memory with one cp.async.bulk, in the issuing thread's
// open bulk group (bulk_commit closes it). The threads that wrote src must have run
// fence_async_smem() before the issuing thread learned of it (through an mbarrier or a
// barrier). evict_first (stream_) is the bulk form of a streaming store.
template <bool stream_ = false>
__device__ __forceinline__ void bulk_store(void* dst, const void* src, unsigned bytes) {
  if (stream_) {
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(dst),
                 "r"(smem_addr(src)), "r"(bytes), "l"(pol)
                 : "memory");
  } else {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_addr(src)),
                 "r"(bytes)
                 : "memory");
  }
}
// Closes the issuing thread's bulk group (an empty one when it issued no bulk_store).
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most n of this thread's bulk groups still read their shared memory (the
// source may then be overwritten; the global writes may still be in flight).
template <int n>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(n) : "memory");
}
// Waits until at most n of this thread's bulk groups are still in flight at all.
template <int n>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(n) : "memory");
}
// Makes this thread's earlier generic-proxy shared-memory writes visible to the async
// proxy (a later bulk_store of them).
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
#endif

// Group g of a per-column vector (a norm's w or b, from a chunk's first column) as 16
// bytes: one read-only load when aligned, else the elements below n (zeros past it). The
// scalar loop is left to the compiler (load_group<16, false> unrolls it, which changes the
// split_row seeds' code).
__device__ __forceinline__ Group<16> load_param16(const T* __restrict__ p, int g, int n, bool al) {
  Group<16> u;
  if (al) {
    u.r = __ldg(reinterpret_cast<const uint4*>(p) + g);
  } else {
    u.r = make_uint4(0u, 0u, 0u, 0u);
    for (int k = 0; k < 16 / KV_SIZEOF_T; ++k)
      if (g * (16 / KV_SIZEOF_T) + k < n) u.v[k] = p[g * (16 / KV_SIZEOF_T) + k];
  }
  return u;
}

// ---- cross-block slots in global memory ----
// A 64-bit slot written and read whole (single-copy atomic) is its own flag: all-zero bits
// mean "not yet", so a published value must never be all-zero bits (store one half with its
// sign bit set). Publishing is one store, waiting is reading the slot: one L2 round trip each.
__device__ __forceinline__ void slot_put(float2* p, float2 v) {
  const unsigned long long b = (unsigned long long)__float_as_uint(v.y) << 32 | __float_as_uint(v.x);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(b) : "memory");
}
__device__ __forceinline__ unsigned long long slot_bits(const float2* p) {
  unsigned long long b;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(b) : "l"(p) : "memory");
  return b;
}
__device__ __forceinline__ float2 slot_value(unsigned long long b) {
  return make_float2(__uint_as_float((unsigned)b), __uint_as_float((unsigned)(b >> 32)));
}

// ---- the lagged ticket order of the split_row seeds ----
// A launch has g_items = rows * chunks (row, chunk) items, each taken twice: a statistics item (kind
// 1: load the chunk, reduce, publish, exit) and a write item (kind 2: re-read the chunk,
// wait for the row, write). The window is the number of items that fit in lag_mib MiB of
// chunks, clamped to chunks <= window <= g_items: every statistics item of a row then comes before the
// row's writes, and a block only ever waits on items already taken.
__device__ __forceinline__ int lag_window(int g_items, int chunks, long long chunk_bytes, int lag_mib) {
  return (int)min((long long)g_items, max((long long)chunks, ((long long)lag_mib << 20) / chunk_bytes));
}
// Ticket position pos (0 <= pos < 2 * g_items) -> item and kind: window statistics items, then write i
// and statistics window + i alternating, then the last window writes.
__device__ __forceinline__ void lag_order(int pos, int g_items, int window, int& item, int& kind) {
  const int q = pos - window;
  if (q < 0) {
    kind = 1;
    item = pos;
  } else if (q < 2 * (g_items - window)) {
    kind = (q & 1) ? 1 : 2;
    item = (q & 1) ? window + q / 2 : q / 2;
  } else {
    kind = 2;
    item = g_items - window + (q - 2 * (g_items - window));
  }
}

// ---- the split_row seeds' work items ----
// The grid is rows * chunks blocks, or twice that with lag (rows of 4 chunks or more); the
// kernel infers both from gridDim.x. Scratch `sync`: a 64-bit ticket counter, then two
// banks of rows * chunks 64-bit slots. A block takes ticket t: position t % gridDim.x of
// launch t / gridDim.x, which uses bank (t / gridDim.x) & 1, so a block may zero its own
// slot in the other bank for the next launch and nothing is ever reset. With lag the
// position maps through lag_order (window: lag_mib MiB of chunks of chunk_elems elements).
struct SplitItem {
  int chunks;       // chunks per row
  int chunk_elems;  // elements per chunk (a multiple of vec_elems; the shared-memory size)
  int row, chunk;
  int kind;         // 0: reduce, wait, write; 1: reduce, publish, exit; 2: wait, write
  float2* part;     // this launch's bank of [rows][chunks] slots
  float2* other;    // the other bank, to be zeroed for the next launch
};
// Called once per block, by every thread (it syncs once when a row has several chunks).
// The grid must be rows * chunks blocks, or 2 * rows * chunks when lag_mib > 0 and a row
// has 4 chunks or more (the split_row seeds' @kevolve grid), or the inferred chunks and
// lag are wrong.
__device__ __forceinline__ SplitItem split_take(unsigned* sync, int rows, int cols, int vec_elems, int lag_mib) {
  __shared__ int take_s[3];  // item, kind, bank
  SplitItem s;
  const bool lag = lag_mib > 0 && gridDim.x / (unsigned)rows >= 8u;
  s.chunks = gridDim.x / (lag ? 2 * rows : rows);
  s.chunk_elems = (((cols + s.chunks - 1) / s.chunks) + vec_elems - 1) / vec_elems * vec_elems;
  s.part = reinterpret_cast<float2*>(sync + 4);
  s.other = s.part + (size_t)rows * s.chunks;
  int item = blockIdx.x;
  s.kind = 0;
  if (s.chunks > 1) {
    if (threadIdx.x == 0) {
      const unsigned long long t = atomicAdd(reinterpret_cast<unsigned long long*>(sync), 1ull);
      const int pos = (int)(t % gridDim.x);
      take_s[2] = (int)(t / gridDim.x) & 1;
      take_s[0] = pos;
      take_s[1] = 0;
      if (lag) {
        const int g_items = rows * s.chunks;
        const int window = lag_window(g_items, s.chunks, (long long)s.chunk_elems * KV_SIZEOF_T, lag_mib);
        lag_order(pos, g_items, window, take_s[0], take_s[1]);
      }
    }
    __syncthreads();
    item = take_s[0];
    s.kind = take_s[1];
    if (take_s[2]) {
      s.other = s.part;
      s.part += (size_t)rows * s.chunks;
    }
  }
  s.row = item / s.chunks;
  s.chunk = item - s.row * s.chunks;
  return s;
}

// ---- the slice_row seeds' static slices ----
// A persistent grid of G blocks (all resident) over rows cut into `parts` slices each of
// `slice_elems` elements (a multiple of vec_elems; the last slice of a row may be shorter
// or empty); rows and cols are at least 1. Slice j = row * parts + part belongs to block
// j % G, at its step j / G, so when parts <= G a row's slices fall in at most two
// consecutive steps of different blocks; a longer row spans up to slice_span extra steps,
// and a block may then hold several of its slices. Scratch `sync`: a 64-bit launch counter
// and 8 bytes of padding, then two banks of rows * parts 64-bit slots; launch e (the
// counter / G) publishes in bank e & 1 and zeroes its slot in the other bank for e + 1.
// Rows that fit a slot min_pack times or more are packed instead: a slice is `pack` whole
// consecutive rows (slot_elems / the row's length rounded up to vec_elems), and needs no
// exchange.
struct SliceGrid {
  int parts;        // slices per row
  int slice_elems;  // elements per slice (at most slot_elems)
  int steps;        // this block's slices
  int pack;         // rows per slice when min_pack rows or more fit one slot, else 0
  float2* part;     // this launch's bank of [rows][parts] slots
  float2* other;    // the other bank
};
// Extra steps a row's slices can span: 1 when parts <= G (0 for one slice per row).
__device__ __forceinline__ int slice_span(const SliceGrid& g) { return (g.parts + (int)gridDim.x - 2) / (int)gridDim.x; }
// A row whose slices can span more than glag extra steps (slice_span > glag, that is
// parts > G * glag + 1: rows longer than about G * glag slots) could make a gather wait for
// a slice its own block has not published yet: such a launch traps instead of hanging (the
// bound takes the worst-placed row, so it may trap a launch that would have finished).
__device__ __forceinline__ void slice_guard(const SliceGrid& g, int glag) {
  if (slice_span(g) > glag) __trap();
}
// Called once per block, by every thread (syncs once; mbarriers set up before the call are
// then visible to the whole block). With defer_bank the launch counter is not touched and
// part / other are bank 0 / bank 1 until one warp of the block calls kv::slice_bank (every
// block must, once per launch): the launch then does not wait for the counter's atomic
// round trip before its first copies. Without it (the default) the bank is taken here.
__device__ __forceinline__ SliceGrid slice_grid(unsigned* sync, int rows, int cols, int vec_elems, int slot_elems,
                                                int min_pack = 1, bool defer_bank = false) {
  __shared__ int bank_s;
  SliceGrid g{};
  const int cols_v = (cols + vec_elems - 1) / vec_elems * vec_elems;
  g.parts = (cols_v + slot_elems - 1) / slot_elems;
  g.slice_elems = ((cols + g.parts - 1) / g.parts + vec_elems - 1) / vec_elems * vec_elems;
  const int fit = slot_elems / max(cols_v, 1);
  g.pack = fit >= max(min_pack, 1) ? fit : 0;
  const long long n = g.pack ? ((long long)rows + g.pack - 1) / g.pack : (long long)rows * g.parts;
  g.steps = (long long)blockIdx.x < n ? (int)((n - 1 - blockIdx.x) / gridDim.x + 1) : 0;
  if (threadIdx.x == 0 && !defer_bank) {
    const unsigned long long t = atomicAdd(reinterpret_cast<unsigned long long*>(sync), 1ull);
    bank_s = (int)(t / gridDim.x) & 1;
  }
  __syncthreads();
  g.part = reinterpret_cast<float2*>(sync + 4);
  g.other = g.part + (size_t)rows * g.parts;
  if (!defer_bank && bank_s) {
    float2* t = g.part;
    g.part = g.other;
    g.other = t;
  }
  return g;
}
// The launch's bank for a grid taken with defer_bank: called by every lane of one warp of
// each block, once per launch (blocks with no steps too, or the counter's launch number is
// wrong); only that warp's copy of g gets the bank.
__device__ __forceinline__ void slice_bank(SliceGrid& g, unsigned* sync) {
  unsigned long long t = 0;
  if (threadIdx.x % 32 == 0) t = atomicAdd(reinterpret_cast<unsigned long long*>(sync), 1ull);
  if (__shfl_sync(0xffffffffu, (int)(t / gridDim.x) & 1, 0)) {
    float2* p = g.part;
    g.part = g.other;
    g.other = p;
  }
}
// This block's packed slice at step s (g.pack > 0): its first row r0 and row count nr.
__device__ __forceinline__ void slice_rows(const SliceGrid& g, int s, int rows, int& r0, int& nr) {
  const long long j = (long long)s * gridDim.x + blockIdx.x;
  r0 = (int)(j * g.pack);
  nr = min(g.pack, rows - r0);
}
// Slice j (row j / parts, part j % parts; g.pack == 0): its row, first column c0 and
// element count n (n may be 0).
__device__ __forceinline__ void slice_of(const SliceGrid& g, long long j, int& row, int& c0, int& n, int cols) {
  row = (int)(j / g.parts);
  c0 = (int)(j - (long long)row * g.parts) * g.slice_elems;
  n = max(0, min(g.slice_elems, cols - c0));
}
// This block's slice at step s (g.pack == 0): its row, first column c0 and element count n
// (n may be 0).
__device__ __forceinline__ void slice_at(const SliceGrid& g, int s, int& row, int& c0, int& n, int cols) {
  slice_of(g, (long long)s * gridDim.x + blockIdx.x, row, c0, n, cols);
}
// The first two of this lane's slots (parts lane and lane + 32) of the row of this block's
// slice t in bank g.part, read once without waiting (0: not yet published), so that a
// gather's round trip can overlap other work. Called by every lane of one warp.
__device__ __forceinline__ void slice_ask(const SliceGrid& g, int t, int cols, unsigned long long& pre0,
                                          unsigned long long& pre1) {
  const int lane = threadIdx.x % 32;
  int row, c0, n;
  slice_at(g, t, row, c0, n, cols);
  const float2* pr = g.part + (size_t)row * g.parts;
  pre0 = lane < g.parts ? slot_bits(pr + lane) : 0ull;
  pre1 = lane + 32 < g.parts ? slot_bits(pr + lane + 32) : 0ull;
}
// The slice_row seeds' drain (their TAIL): the rows of this block's last n_rows slices
// (steps - n_rows .. steps - 1, those >= 0) are asked for at once (kv::slice_ask), then
// gather(t, pre0, pre1) runs for each in order, so the drain waits for one round trip
// instead of n_rows. Called by every lane of one warp.
template <int n_rows, typename Gather>
__device__ __forceinline__ void slice_tail(const SliceGrid& g, int steps, int cols, Gather&& gather) {
  unsigned long long pre0[n_rows], pre1[n_rows];
#pragma unroll
  for (int r = 0; r < n_rows; ++r) {
    pre0[r] = pre1[r] = 0ull;
    if (steps - n_rows + r >= 0) slice_ask(g, steps - n_rows + r, cols, pre0[r], pre1[r]);
  }
#pragma unroll
  for (int r = 0; r < n_rows; ++r) {
    if (steps - n_rows + r >= 0) gather(steps - n_rows + r, pre0[r], pre1[r]);
  }
}
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// The slice_row seeds' ring of mbarriers, one of each per slot, set up by thread 0: full
// (the slot's bulk copy, 1 arrival), empty and statd (the cw consumer warps: slot written,
// statistics in) and finr (the control warp: the row's statistics in).
__device__ __forceinline__ void slice_ring_init(unsigned long long* full, unsigned long long* empty,
                                                unsigned long long* statd, unsigned long long* finr, int slots,
                                                int cw) {
  if (threadIdx.x != 0) return;
  for (int k = 0; k < slots; ++k) {
    mbar_init_only(&full[k], 1);
    mbar_init_only(&empty[k], cw);
    mbar_init_only(&statd[k], cw);
    mbar_init_only(&finr[k], 1);
  }
  // One fence for all of them: a fence per barrier (24 at 6 slots) delayed the first copy by
  // about 0.7 us (H200, twentieth session, traced; softmax bf16's fixed cost 10.9 -> 9.8 us).
  mbar_init_fence();
}
// The slice_row seeds' staging of slice j (g.pack == 0) of x in slot st,
// completing the mbarrier bar: one bulk copy issued by lane 0 when al (16-byte aligned rows
// and buffers; bar gets the byte count), else ordinary loads by the whole warp padded with
// pad to whole groups of vec_elems, then one arrive. Called by every lane of one warp.
template <typename T>
__device__ __forceinline__ void slice_fill_j(const SliceGrid& g, long long j, const T* x, int cols, int vec_elems,
                                             T* st, unsigned long long* bar, bool al, T pad) {
  const int lane = threadIdx.x % 32;
  int row, c0, n;
  slice_of(g, j, row, c0, n, cols);
  const T* const xs = x + (size_t)row * cols + c0;
  if (al) {
    if (lane == 0) {
      mbar_expect(bar, (unsigned)(n * sizeof(T)));
      if (n > 0) bulk_load(st, xs, (unsigned)(n * sizeof(T)), bar);
    }
  } else {
    const int ng = (n + vec_elems - 1) / vec_elems;
    for (int k = lane; k < ng * vec_elems; k += 32) st[k] = k < n ? xs[k] : pad;
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  }
}
// The same for this block's slice at step s (slice s * G + blockIdx.x).
template <typename T>
__device__ __forceinline__ void slice_fill(const SliceGrid& g, int s, const T* x, int cols, int vec_elems, T* st,
                                           unsigned long long* bar, bool al, T pad) {
  slice_fill_j(g, (long long)s * gridDim.x + blockIdx.x, x, cols, vec_elems, st, bar, al, pad);
}
// The same for a packed slice (g.pack > 0): the block's whole rows at step s
// (kv::slice_rows), row i at i * rs in the slot (rs: cols when al, else cols rounded up to
// a whole group), padded with pad.
template <typename T>
__device__ __forceinline__ void slice_fill_rows(const SliceGrid& g, int s, const T* x, int rows, int cols, int rs,
                                                T* st, unsigned long long* bar, bool al, T pad) {
  const int lane = threadIdx.x % 32;
  int r0, nr;
  slice_rows(g, s, rows, r0, nr);
  if (al) {
    if (lane == 0) {
      const unsigned bytes = (unsigned)((size_t)nr * cols * sizeof(T));
      mbar_expect(bar, bytes);
      bulk_load(st, x + (size_t)r0 * cols, bytes, bar);
    }
  } else {
    for (int k = lane; k < nr * rs; k += 32) {
      const int i = k / rs, c = k - i * rs;
      st[k] = c < cols ? x[(size_t)(r0 + i) * cols + c] : pad;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  }
}
#endif

}  // namespace kv

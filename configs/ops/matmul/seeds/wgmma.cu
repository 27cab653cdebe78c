// matmul seed for Hopper (sm_90a): C[M,N] = A[M,K] * B[K,N], row-major bf16, f32 accumulation
// with warpgroup MMA (wgmma.mma_async), both operands read from shared memory through
// 64-bit matrix descriptors.
//
// - A block of WGS warpgroups (128 threads each) computes a BM x BN tile of C. Warpgroup w
//   owns rows [w*BM/WGS, (w+1)*BM/WGS): MT = BM / (64*WGS) accumulators of m64 x BN, each
//   BN/2 f32 registers per thread, updated by wgmma.m64nBNk16 (BK = 64: 4 per k-tile).
// - Every thread also loads: A and B tiles of BK = 64 stream through a STAGES-deep ring
//   filled by 16-byte cp.async.cg (src-size 0 zero-fills outside the matrices), one commit
//   group per k-tile, one __syncthreads per k-tile (LATE_LOAD=1: two, for a deeper prefetch).
//   The loader's row/column predicates and swizzled offsets are computed once per block.
// - wgmma runs asynchronously: the k-tile's wgmmas are committed as one group and the loop
//   waits with wgmma.wait_group 1, so the tensor cores always have the next group queued.
//
// Shared memory layout (per stage, stage base aligned to 1024 bytes), all 128-byte swizzle
// ("Swizzle<3,4,3>": byte-address bits [4:6] ^= bits [7:9], atoms of 8 rows x 128 bytes):
//   A tile (BM x 64, K contiguous = "K-major"): row r at byte r*128; its 16-byte chunk c
//     (k = 8c..8c+7) at chunk position c ^ (r % 8). Descriptor for warpgroup rows m0..m0+63
//     and k16 slice kk: start = A + m0*128 + kk*32, LBO = 16 (ignored for swizzled K-major),
//     SBO = 1024 (the next 8-row core-matrix group), swizzle mode 1 (128B). The +32-byte step
//     inside the 128-byte row works because the hardware applies the XOR to the final address
//     bits and every atom starts on a 1024-byte boundary (base offset 0).
//   B tile (64 x BN, N contiguous = "MN-major", imm-trans-b = 1): split into BN/64 blocks of
//     64 columns; block j at byte j*8192, k row r of it at +r*128, its 16-byte chunk c
//     (n = 64j + 8c..8c+7) at chunk position c ^ (r % 8). Descriptor for k16 slice kk:
//     start = B + kk*16*128, LBO = 8192 (the next 64-column block along N), SBO = 1024 (the
//     next 8 k rows), swizzle mode 1.
//   Descriptor bits: start>>4 in [0,14), LBO>>4 in [16,30), SBO>>4 in [32,46), base offset 0
//   in [49,52), swizzle mode in [62,64) (1 = 128B).
//
// Ordering: cp.async writes are generic-proxy writes and wgmma reads shared memory through
// the async proxy, so every thread runs cp.async.wait_group, then fence.proxy.async
// (PROXY_FENCE=1; always on the st.shared path), then the block barrier, before any
// warpgroup issues wgmma on that stage. A stage is refilled only after a barrier that
// follows every warpgroup's wgmma.wait_group covering its last reader: LATE_LOAD=0 refills
// stage (kt-2) right after issuing tile kt's wgmmas (prefetch distance STAGES-2);
// LATE_LOAD=1 waits for wgmma kt-1, takes a second barrier and refills stage (kt-1)
// (distance STAGES-1).
//
// Rows of A or B that are not 16-byte aligned (K % 8 != 0 or N % 8 != 0) take a second
// instantiation of the main loop that fills the same swizzled layout with guarded 2-byte
// loads and st.shared (slow, correct; only for awkward shapes).
//
// @kevolve param   BM        128 256 64
// @kevolve param   BN        256 128
// @kevolve param   WGS       2 1 4
// @kevolve param   STAGES    4 3 5 6
// @kevolve param   GROUP_M   8 1 4 16
// @kevolve param   LATE_LOAD 0 1
// PROXY_FENCE=1 runs fence.proxy.async between cp.async completion and the barrier, as the
// PTX ISA asks for generic-proxy smem writes read by wgmma; 0 omits it (CUTLASS's and
// FlashAttention-3's cp.async + GMMA mainloops do not fence either).
// @kevolve param   PROXY_FENCE 1 0
// @kevolve require BM % (64 * WGS) == 0
// accumulators: at most 128 f32 registers per thread
// @kevolve require (BM / (64 * WGS)) * BN / 2 <= 128
// register file (64K per SM): accumulators plus ~56 registers
// @kevolve require 128 * WGS * ((BM / (64 * WGS)) * BN / 2 + 56) <= 65536
// @kevolve require STAGES * (BM * 64 + 64 * BN) * 2 + 1024 <= 232448
// @kevolve launch  matmul_wgmma grid=ceil_div(M, BM) * ceil_div(N, BN) block=128 * WGS smem=max(STAGES * (BM * 64 + 64 * BN) * 2, BM * (BN + 8) * 2) + 1024

#include <cuda_bf16.h>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "this kernel needs sm_90a (wgmma.mma_async): compile with --arch sm_90a"
#endif

#define BK 64
#define NTHREADS (WGS * 128)
#define MT (BM / (64 * WGS))   // m64 accumulator tiles per warpgroup
#define NACC (BN / 2)          // f32 accumulators per thread per m64 tile
#define A_BYTES (BM * BK * 2)
#define B_BYTES (BK * BN * 2)
#define STAGE_BYTES (A_BYTES + B_BYTES)
#define EPI_PITCH (BN + 8)     // elements per row of the staged C tile (16 B of padding)

static_assert(BN == 64 || BN == 128 || BN == 256, "B is stored in 64-column swizzle blocks; wgmma_tile exists for these N");
static_assert(BM % (64 * WGS) == 0, "each warpgroup owns whole m64 tiles");
static_assert(STAGES >= 2 + (1 - LATE_LOAD), "pipeline depth");

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Shared-memory matrix descriptor: `hi` holds LBO, SBO and the swizzle mode; the start
// address (shared window, 16-byte units) goes in bits [0,14).
__device__ __forceinline__ unsigned long long make_desc(unsigned addr, unsigned long long hi) {
  return hi | (unsigned long long)((addr & 0x3FFFFu) >> 4);
}
#define DESC_SW128 (1ull << 62)
#define DESC_HI_A (DESC_SW128 | ((unsigned long long)(1024 >> 4) << 32) | ((unsigned long long)(16 >> 4) << 16))
#define DESC_HI_B (DESC_SW128 | ((unsigned long long)(1024 >> 4) << 32) | ((unsigned long long)((BK * 128) >> 4) << 16))

#if BN == 64
// D[64 x 64] += A(desc) * B(desc); trans-a 0 (A K-major), trans-b 1 (B N-major).
__device__ __forceinline__ void wgmma_tile(float (&d)[32], unsigned long long da, unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(1));
}
// Compiler-level fence: the accumulators are live (written asynchronously) across it.
__device__ __forceinline__ void fence_acc(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#endif
#if BN == 128
// D[64 x 128] += A(desc) * B(desc); trans-a 0 (A K-major), trans-b 1 (B N-major).
__device__ __forceinline__ void wgmma_tile(float (&d)[64], unsigned long long da, unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(1));
}
// Compiler-level fence: the accumulators are live (written asynchronously) across it.
__device__ __forceinline__ void fence_acc(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#endif
#if BN == 256
// D[64 x 256] += A(desc) * B(desc); trans-a 0 (A K-major), trans-b 1 (B N-major).
__device__ __forceinline__ void wgmma_tile(float (&d)[128], unsigned long long da, unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(1));
}
// Compiler-level fence: the accumulators are live (written asynchronously) across it.
__device__ __forceinline__ void fence_acc(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#endif

// Eight consecutive elements of a row starting at src, where only the first `valid` exist
// (0..8); missing ones are zero. 2-byte loads: src need not be aligned.
__device__ __forceinline__ uint4 load8_guarded(const unsigned short* src, int valid) {
  unsigned w[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    unsigned lo = (2 * e < valid) ? src[2 * e] : 0u;
    unsigned hi = (2 * e + 1 < valid) ? src[2 * e + 1] : 0u;
    w[e] = lo | (hi << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Fills one stage (A tile rows [bm, bm+BM) x k [k0, k0+64), B tile k [k0, k0+64) x
// cols [bn, bn+BN)) in the swizzled layouts described at the top. Out of range -> zero.
// Aligned path: thread tid always copies A chunk column ca = tid % 8 of rows
// ra0 + i * (NTHREADS / 8), and B chunk column cb = tid % (BN / 8) of k rows
// kb0 + i * (NTHREADS / (BN / 8)); row/column validity is computed once, so a stage costs
// a pointer add, a compare and a cp.async per chunk.
struct Loader {
  static constexpr int kA = BM * 8 / NTHREADS;                 // A chunks per thread
  static constexpr int kRowStepA = NTHREADS / 8;               // A rows between them
  static constexpr int kB = BK * (BN / 8) / NTHREADS;          // B chunks per thread
  static constexpr int kRowStepB = NTHREADS / (BN / 8);        // B k rows between them
  const T* a;          // &A[bm + ra0][ca * 8] (as an offset; only dereferenced when valid)
  const T* b;          // &B[kb0][bn + cb * 8]
  size_t a_step;       // kRowStepA rows of A, in elements
  size_t b_step;       // kRowStepB rows of B, in elements
  unsigned a_rows_ok;  // bit i: row ra0 + i * kRowStepA < M - bm
  bool b_col_ok;       // bn + cb * 8 < N
  int ca8, kb0;
  unsigned a_off, b_off;  // byte offsets of chunk 0 inside a stage

  __device__ __forceinline__ void init(const T* A, const T* B, int M, int N, int K, int bm, int bn, int tid) {
    const int ra0 = tid / 8, ca = tid % 8;
    const int cb = tid % (BN / 8);
    kb0 = tid / (BN / 8);
    ca8 = ca * 8;
    a = A + ((size_t)(bm + ra0) * K + ca8);
    b = B + ((size_t)kb0 * N + bn + cb * 8);
    a_step = (size_t)kRowStepA * K;
    b_step = (size_t)kRowStepB * N;
    a_rows_ok = 0;
#pragma unroll
    for (int i = 0; i < kA; ++i) a_rows_ok |= (bm + ra0 + i * kRowStepA < M ? 1u : 0u) << i;
    b_col_ok = bn + cb * 8 < N;
    // (ra0 + i * kRowStepA) % 8 == ra0 % 8 since kRowStepA is a multiple of 8.
    a_off = ra0 * 128 + ((ca ^ (ra0 & 7)) << 4);
    b_off = A_BYTES + (cb / 8) * (BK * 128) + kb0 * 128;
  }

  __device__ __forceinline__ void load(unsigned s, const T* A, const T* B, int K, int k0) const {
    const bool k_ok = ca8 + k0 < K;
#pragma unroll
    for (int i = 0; i < kA; ++i) {
      const bool ok = k_ok && ((a_rows_ok >> i) & 1u);
      kv::cp_async16(s + a_off + i * (kRowStepA * 128), ok ? a + (i * a_step + k0) : A, ok ? 16 : 0);
    }
    const T* bk = b + (size_t)k0 * (b_step / kRowStepB);
    const int cb7 = (threadIdx.x % (BN / 8)) % 8;
#pragma unroll
    for (int i = 0; i < kB; ++i) {
      const int r = kb0 + i * kRowStepB;  // k row inside the tile
      const bool ok = b_col_ok && k0 + r < K;
      kv::cp_async16(s + b_off + i * (kRowStepB * 128) + ((cb7 ^ (r & 7)) << 4), ok ? bk + i * b_step : B, ok ? 16 : 0);
    }
  }
};
static_assert(BM * 8 % NTHREADS == 0 && BK * (BN / 8) % NTHREADS == 0, "whole chunks per thread");
static_assert((NTHREADS / 8) % 8 == 0, "A rows per step keep the swizzle phase");
static_assert(NTHREADS % (BN / 8) == 0, "each thread keeps one B chunk column");

// Unaligned rows (K % 8 != 0 or N % 8 != 0): guarded 2-byte loads, same layout, st.shared.
__device__ __forceinline__ void load_stage_slow(unsigned char* sp, const T* __restrict__ A, const T* __restrict__ B,
                                                int M, int N, int K, int bm, int bn, int k0, int tid) {
  for (int q = tid; q < BM * 8; q += NTHREADS) {
    const int r = q / 8, c = q % 8;
    const int gm = bm + r, gk = k0 + c * 8;
    const int valid = gm < M ? min(max(K - gk, 0), 8) : 0;
    const unsigned short* src = reinterpret_cast<const unsigned short*>(A) + (valid > 0 ? (size_t)gm * K + gk : 0);
    *reinterpret_cast<uint4*>(sp + r * 128 + ((c ^ (r & 7)) << 4)) = load8_guarded(src, valid);
  }
  for (int q = tid; q < BK * (BN / 8); q += NTHREADS) {
    const int r = q / (BN / 8), cn = q % (BN / 8);
    const int gk = k0 + r, gn = bn + cn * 8;
    const int valid = gk < K ? min(max(N - gn, 0), 8) : 0;
    const unsigned short* src = reinterpret_cast<const unsigned short*>(B) + (valid > 0 ? (size_t)gk * N + gn : 0);
    *reinterpret_cast<uint4*>(sp + A_BYTES + (cn / 8) * (BK * 128) + r * 128 + (((cn % 8) ^ (r & 7)) << 4)) =
        load8_guarded(src, valid);
  }
}

template <bool ALIGNED>
__device__ __forceinline__ void load_stage(const Loader& ld, unsigned s, unsigned char* sp, const T* __restrict__ A,
                                           const T* __restrict__ B, int M, int N, int K, int bm, int bn, int k0,
                                           int tid) {
  if (ALIGNED) ld.load(s, A, B, K, k0);
  else load_stage_slow(sp, A, B, M, N, K, bm, bn, k0, tid);
}

#if LATE_LOAD
#define PREFETCH (STAGES - 1)  // tiles in flight ahead of the one being multiplied
#else
#define PREFETCH (STAGES - 2)
#endif

template <bool ALIGNED>
__device__ __forceinline__ void mainloop(float (&acc)[MT][NACC], unsigned s0, unsigned char* sp0,
                                         const T* __restrict__ A, const T* __restrict__ B, int M, int N, int K,
                                         int bm, int bn) {
  const int tid = threadIdx.x, wg = tid / 128;
  const int ktiles = (K + BK - 1) / BK;
  Loader ld;
  if (ALIGNED) ld.init(A, B, M, N, K, bm, bn, tid);

#pragma unroll
  for (int s = 0; s < PREFETCH; ++s) {
    if (s < ktiles) load_stage<ALIGNED>(ld, s0 + s * STAGE_BYTES, sp0 + s * STAGE_BYTES, A, B, M, N, K, bm, bn, s * BK, tid);
    cp_async_commit();
  }

  int stage = 0;
  for (int kt = 0; kt < ktiles; ++kt) {
    // Committed groups cover tiles 0 .. kt + PREFETCH - 1: at most PREFETCH - 1 pending
    // means tile kt has landed (this thread's part of it).
    cp_async_wait<PREFETCH - 1>();
    // This thread's generic-proxy smem writes -> visible to wgmma (the async proxy). The
    // st.shared of the unaligned path always needs it; cp.async only with PROXY_FENCE.
    if (PROXY_FENCE || !ALIGNED) fence_proxy_async();
    __syncthreads();      // everyone's part of tile kt is in; (LATE_LOAD=0) wgmma kt-2 retired

    const unsigned sa = s0 + stage * STAGE_BYTES + wg * (MT * 64 * 128);
    const unsigned sb = s0 + stage * STAGE_BYTES + A_BYTES;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      const unsigned long long db = make_desc(sb + kk * (16 * 128), DESC_HI_B);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) wgmma_tile(acc[mt], make_desc(sa + mt * (64 * 128) + kk * 32, DESC_HI_A), db);
    }
    wgmma_commit();

#if LATE_LOAD
    wgmma_wait<1>();  // this warpgroup's wgmmas of tile kt-1 are done ...
    __syncthreads();  // ... and every warpgroup's: stage (kt-1) % STAGES is free
    {
      const int kn = kt + STAGES - 1;
      const int ws = stage == 0 ? STAGES - 1 : stage - 1;
      if (kn < ktiles)
        load_stage<ALIGNED>(ld, s0 + ws * STAGE_BYTES, sp0 + ws * STAGE_BYTES, A, B, M, N, K, bm, bn, kn * BK, tid);
      cp_async_commit();
    }
#else
    {
      // Stage (kt-2) % STAGES: its last reader, wgmma kt-2, retired before every thread's
      // wgmma.wait_group 1 of the previous iteration, which all precede the barrier above.
      const int kn = kt + STAGES - 2;
      const int ws = stage >= 2 ? stage - 2 : stage + STAGES - 2;
      if (kn < ktiles)
        load_stage<ALIGNED>(ld, s0 + ws * STAGE_BYTES, sp0 + ws * STAGE_BYTES, A, B, M, N, K, bm, bn, kn * BK, tid);
      cp_async_commit();
    }
    wgmma_wait<1>();
#endif
    stage = stage == STAGES - 1 ? 0 : stage + 1;
  }
  wgmma_wait<0>();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) fence_acc(acc[mt]);
  cp_async_wait<0>();  // only empty groups can be pending here
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
matmul_wgmma(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // Swizzle atoms must start on 1024-byte boundaries (the launch asks for 1024 spare bytes).
  const unsigned raw = kv::smem_addr(smem_raw);
  const unsigned pad = (1024u - (raw & 1023u)) & 1023u;
  unsigned char* sp0 = smem_raw + pad;
  const unsigned s0 = raw + pad;

  // Grouped rasterisation: GROUP_M block-rows are walked column by column (L2 reuse).
  const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
  const int pid = blockIdx.x;
  const int width = GROUP_M * grid_n;
  const int first_m = (pid / width) * GROUP_M;
  const int group_rows = min(grid_m - first_m, GROUP_M);
  const int pm = first_m + (pid % width) % group_rows;
  const int pn = (pid % width) / group_rows;
  const int bm = pm * BM, bn = pn * BN;

  float acc[MT][NACC];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[mt][i] = 0.f;

  const bool aligned = (K % 8 == 0) && (N % 8 == 0);
  if (aligned) mainloop<true>(acc, s0, sp0, A, B, M, N, K, bm, bn);
  else mainloop<false>(acc, s0, sp0, A, B, M, N, K, bm, bn);

  // Epilogue: stage the bf16 tile in shared memory, then write whole 16-byte chunks.
  // Accumulator layout of m64nN (f32): warp w of the warpgroup holds rows 16w..16w+15; for
  // n8 block j, d[4j+0..1] = (row 16w + lane/4, cols 8j + 2*(lane%4) + 0..1), d[4j+2..3] the
  // same columns 8 rows further down.
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  __syncthreads();  // every warpgroup is done with the pipeline's shared memory
  __nv_bfloat162* sc = reinterpret_cast<__nv_bfloat162*>(sp0);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int r = (wg * MT + mt) * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int c = j * 8 + 2 * (lane % 4);
      sc[(r * EPI_PITCH + c) / 2] = __floats2bfloat162_rn(acc[mt][4 * j], acc[mt][4 * j + 1]);
      sc[((r + 8) * EPI_PITCH + c) / 2] = __floats2bfloat162_rn(acc[mt][4 * j + 2], acc[mt][4 * j + 3]);
    }
  }
  __syncthreads();
  const T* st = reinterpret_cast<const T*>(sp0);
  const bool vec_ok = (N % 8) == 0;
#pragma unroll 4
  for (int q = tid; q < BM * (BN / 8); q += NTHREADS) {
    const int r = q / (BN / 8), c = (q % (BN / 8)) * 8;
    const int gm = bm + r, gn = bn + c;
    if (gm >= M || gn >= N) continue;
    const T* src = st + r * EPI_PITCH + c;
    T* dst = C + (size_t)gm * N + gn;
    if (vec_ok && gn + 8 <= N) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && gn + e < N; ++e) dst[e] = src[e];
    }
  }
}

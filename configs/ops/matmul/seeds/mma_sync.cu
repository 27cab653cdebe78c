// matmul seed (Ampere-style, runs on sm_80+): C[M,N] = A[M,K] * B[K,N], row-major bf16,
// f32 accumulation in registers.
//
// - One block computes a BM x BN tile of C with (BM/WM) x (BN/WN) warps; each warp owns a
//   WM x WN sub-tile made of (WM/16) x (WN/8) mma.sync.m16n8k16 accumulators.
// - A and B tiles of BK columns/rows stream through a STAGES-deep ring in shared memory,
//   filled by 16-byte cp.async.cg (src-size 0 zero-fills everything outside the matrices)
//   with one commit group per k-tile and one __syncthreads per k-tile.
// - Shared tiles are stored in 16-byte chunks with an XOR swizzle (see swz()) so that the
//   8 row addresses of every ldmatrix 8x8 matrix fall into 8 different bank groups.
//   A fragments come from ldmatrix.x4, B fragments from ldmatrix.x4.trans (B is K x N
//   row-major, i.e. the "col" operand of mma is stored k-major: .trans transposes it).
// - Blocks are rasterised in groups of GROUP_M block-rows so that co-resident blocks share
//   A and B panels in L2.
// - EPI_SMEM=1 stages the bf16 tile in shared memory and writes C with 16-byte stores;
//   EPI_SMEM=0 writes bf16x2 pairs straight from the accumulators.
// - When K % 8 != 0 or N % 8 != 0, rows of A or B are not 16-byte aligned: a second
//   instantiation of the main loop fills the tiles with guarded 2-byte loads instead of
//   cp.async (slow, correct; only for awkward shapes).
//
// @kevolve param   BM       128 256
// @kevolve param   BN       256 128
// @kevolve param   BK       64 32
// @kevolve param   WM       64 32 128
// @kevolve param   WN       64 32 128
// @kevolve param   STAGES   4 3 5
// @kevolve param   GROUP_M  8 1 4 16
// @kevolve param   EPI_SMEM 1 0
// accumulators: at most 128 f32 registers per thread
// @kevolve require WM * WN <= 4096
// 32x128 / 128x32 warp tiles with BK=64 keep too many fragments live (ptxas spills)
// @kevolve require WM * WN < 4096 || WM == WN || BK == 32
// @kevolve require (BM / WM) * (BN / WN) * 32 <= 1024
// register file (64K per SM): accumulators plus ~72 registers of fragments and addresses
// @kevolve require (BM / WM) * (BN / WN) * 32 * (WM * WN / 32 + 72) <= 65536
// @kevolve require STAGES * (BM * BK + BK * BN) * 2 <= 232448
// @kevolve require EPI_SMEM * BM * (BN + 8) * 2 <= 232448
// @kevolve launch  matmul_mma grid=ceil_div(M, BM) * ceil_div(N, BN) block=(BM / WM) * (BN / WN) * 32 smem=max(STAGES * (BM * BK + BK * BN) * 2, EPI_SMEM * BM * (BN + 8) * 2)

#include <cuda_bf16.h>

#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define NTHREADS (WARPS_M * WARPS_N * 32)
#define CPR_A (BK / 8)         // 16-byte chunks per row of an A tile (BM rows)
#define CPR_B (BN / 8)         // 16-byte chunks per row of a B tile (BK rows)
#define A_ELEMS (BM * BK)      // elements per stage
#define B_ELEMS (BK * BN)
#define MI (WM / 16)           // m16 tiles per warp
#define NI (WN / 8)            // n8 tiles per warp
#define EPI_PITCH (BN + 8)     // elements per row of the staged C tile (16 B of padding)

static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must divide the block tile");
static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "mma and ldmatrix granularity");
static_assert(CPR_A == 4 || CPR_A % 8 == 0, "swizzle needs 4 or a multiple of 8 chunks per row");
static_assert(CPR_B % 8 == 0, "swizzle needs a multiple of 8 chunks per B row");

// Physical 16-byte chunk of logical chunk `idx` in a tile with `cpr` chunks per row.
// XORs the chunk's position inside its 128-byte line (8 chunks = all 32 banks) with the
// line's row (cpr >= 8: line = row) or with the line index (cpr = 4: two rows per line).
// Either way 8 consecutive rows at one logical chunk column land in 8 different chunks of
// a line: ldmatrix and the epilogue are bank-conflict free, and the map is a permutation
// inside each 128-byte line, so cp.async writes stay conflict-free too.
template <int CPR>
__device__ __forceinline__ int swz(int idx) {
  constexpr int kLine = CPR >= 8 ? CPR : 8;
  return idx ^ ((idx / kLine) & 7);
}


__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");  // ordered against the barriers and cp.async around it
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                                  unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

// d += a * b for one m16n8k16 tile (bf16 inputs, f32 accumulators).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

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

// Aligned path (K % 8 == 0 and N % 8 == 0): thread tid always copies chunk column
// tid % CPR of rows tid / CPR + i * (NTHREADS / CPR). Row/column validity and the swizzled
// shared offset are computed once (adding NTHREADS chunks moves by whole groups of 8
// 128-byte lines, which leaves the swizzle phase unchanged), so a chunk costs a pointer
// add, a compare and a cp.async.
struct Loader {
  static constexpr int kA = BM * CPR_A / NTHREADS, kRowStepA = NTHREADS / CPR_A;
  static constexpr int kB = BK * CPR_B / NTHREADS, kRowStepB = NTHREADS / CPR_B;
  const T* a;          // &A[bm + ra0][ca * 8]  (only dereferenced when valid)
  const T* b;          // &B[kb0][bn + cb * 8]
  size_t a_step, b_step;  // kRowStep rows, in elements
  unsigned a_rows_ok;  // bit i: row ra0 + i * kRowStepA of the tile exists
  bool b_col_ok;
  int ca8, kb0;
  unsigned a_off, b_off;  // byte offsets of chunk 0 inside a stage's A / B tile

  __device__ __forceinline__ void init(const T* A, const T* B, int M, int N, int K, int bm, int bn, int tid) {
    const int ra0 = tid / CPR_A, ca = tid % CPR_A;
    const int cb = tid % CPR_B;
    kb0 = tid / CPR_B;
    ca8 = ca * 8;
    a = A + ((size_t)(bm + ra0) * K + ca8);
    b = B + ((size_t)kb0 * N + bn + cb * 8);
    a_step = (size_t)kRowStepA * K;
    b_step = (size_t)kRowStepB * N;
    a_rows_ok = 0;
#pragma unroll
    for (int i = 0; i < kA; ++i) a_rows_ok |= (bm + ra0 + i * kRowStepA < M ? 1u : 0u) << i;
    b_col_ok = bn + cb * 8 < N;
    a_off = swz<CPR_A>(tid) * 16;
    b_off = swz<CPR_B>(tid) * 16;
  }

  __device__ __forceinline__ void load(unsigned sa, unsigned sb, const T* A, const T* B, int N, int K, int k0) const {
    const bool k_ok = ca8 + k0 < K;
#pragma unroll
    for (int i = 0; i < kA; ++i) {
      const bool ok = k_ok && ((a_rows_ok >> i) & 1u);
      kv::cp_async16(sa + a_off + i * (NTHREADS * 16), ok ? a + (i * a_step + k0) : A, ok ? 16 : 0);
    }
    const T* bk = b + (size_t)k0 * N;
#pragma unroll
    for (int i = 0; i < kB; ++i) {
      const bool ok = b_col_ok && k0 + kb0 + i * kRowStepB < K;
      kv::cp_async16(sb + b_off + i * (NTHREADS * 16), ok ? bk + i * b_step : B, ok ? 16 : 0);
    }
  }
};
static_assert(BM * CPR_A % NTHREADS == 0 && BK * CPR_B % NTHREADS == 0, "whole chunks per thread");
static_assert(NTHREADS % (8 * (CPR_A >= 8 ? CPR_A : 8)) == 0 && NTHREADS % (8 * CPR_B) == 0,
              "a step of NTHREADS chunks must keep the swizzle phase");

// Unaligned rows: guarded 2-byte loads into the same swizzled layout (st.shared).
__device__ __forceinline__ void load_stage_slow(T* sa_ptr, T* sb_ptr, const T* __restrict__ A, const T* __restrict__ B,
                                                int M, int N, int K, int bm, int bn, int k0, int tid) {
  for (int q = tid; q < BM * CPR_A; q += NTHREADS) {
    const int r = q / CPR_A, c = q % CPR_A;
    const int gm = bm + r, gk = k0 + c * 8;
    const int valid = gm < M ? min(max(K - gk, 0), 8) : 0;
    const unsigned short* src = reinterpret_cast<const unsigned short*>(A) + (valid > 0 ? (size_t)gm * K + gk : 0);
    reinterpret_cast<uint4*>(sa_ptr)[swz<CPR_A>(q)] = load8_guarded(src, valid);
  }
  for (int q = tid; q < BK * CPR_B; q += NTHREADS) {
    const int r = q / CPR_B, c = q % CPR_B;
    const int gk = k0 + r, gn = bn + c * 8;
    const int valid = gk < K ? min(max(N - gn, 0), 8) : 0;
    const unsigned short* src = reinterpret_cast<const unsigned short*>(B) + (valid > 0 ? (size_t)gk * N + gn : 0);
    reinterpret_cast<uint4*>(sb_ptr)[swz<CPR_B>(q)] = load8_guarded(src, valid);
  }
}

// Fills one stage: the A tile rows [bm, bm+BM) x cols [k0, k0+BK) and the B tile rows
// [k0, k0+BK) x cols [bn, bn+BN). Out-of-range elements become zero.
template <bool ALIGNED>
__device__ __forceinline__ void load_stage(const Loader& ld, unsigned sa, unsigned sb, T* sa_ptr, T* sb_ptr,
                                           const T* __restrict__ A, const T* __restrict__ B, int M, int N, int K,
                                           int bm, int bn, int k0, int tid) {
  if (ALIGNED) ld.load(sa, sb, A, B, N, K, k0);
  else load_stage_slow(sa_ptr, sb_ptr, A, B, M, N, K, bm, bn, k0, tid);
}

// The main loop: fills acc with this block's tile of A*B.
template <bool ALIGNED>
__device__ __forceinline__ void mainloop(float (&acc)[MI][NI][4], T* smem, const T* __restrict__ A,
                                         const T* __restrict__ B, int M, int N, int K, int bm, int bn) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  T* sA = smem;
  T* sB = smem + STAGES * A_ELEMS;
  const unsigned sa0 = kv::smem_addr(sA), sb0 = kv::smem_addr(sB);
  const int ktiles = (K + BK - 1) / BK;
  Loader ld;
  if (ALIGNED) ld.init(A, B, M, N, K, bm, bn, tid);

  // Per-thread ldmatrix byte offsets inside a stage (see the fragment notes below).
  // A: lane l addresses row (l % 16) of a 16-row slab, chunk 2*kk + l / 16. Adding 16 rows
  // leaves the swizzle unchanged (16 is a multiple of 8 rows, and of 2 * 8 for CPR_A = 4).
  unsigned offA[BK / 16];
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk)
    offA[kk] = swz<CPR_A>((wm * WM + lane % 16) * CPR_A + kk * 2 + lane / 16) * 16;
  // B: lane l addresses k row (l % 16) of a 16-row slab, chunk (n0 / 8) + l / 16 where n0
  // is the warp's column of the pair of n8 tiles. Adding 16 k rows keeps the swizzle.
  unsigned offB[WN / 16];
#pragma unroll
  for (int nj = 0; nj < WN / 16; ++nj)
    offB[nj] = swz<CPR_B>((lane % 16) * CPR_B + (wn * WN + nj * 16) / 8 + lane / 16) * 16;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles)
      load_stage<ALIGNED>(ld, sa0 + s * A_ELEMS * 2, sb0 + s * B_ELEMS * 2, sA + s * A_ELEMS, sB + s * B_ELEMS, A, B, M, N,
                          K, bm, bn, s * BK, tid);
    cp_async_commit();
  }

  int read_stage = 0, write_stage = STAGES - 1;
  for (int kt = 0; kt < ktiles; ++kt) {
    // Groups committed so far cover tiles 0 .. kt + STAGES - 2; waiting until at most
    // STAGES - 2 are pending means tile kt has landed (for this thread's copies); the
    // barrier publishes everyone's copies and also guarantees that all warps finished
    // reading stage (kt - 1) % STAGES, which is the one refilled just below.
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    {
      const int kn = kt + STAGES - 1;
      if (kn < ktiles)
        load_stage<ALIGNED>(ld, sa0 + write_stage * A_ELEMS * 2, sb0 + write_stage * B_ELEMS * 2,
                            sA + write_stage * A_ELEMS, sB + write_stage * B_ELEMS, A, B, M, N, K, bm, bn, kn * BK,
                            tid);
      cp_async_commit();  // possibly empty: keeps the group count in step with kt
      write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
    }
    const unsigned sa = sa0 + read_stage * A_ELEMS * 2, sb = sb0 + read_stage * B_ELEMS * 2;
    read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      // a[mi]: regs {A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]} of the 16x16
      // slab at rows wm*WM + 16*mi, cols 16*kk (g = lane/4, t = lane%4): ldmatrix matrices
      // 0..3 = (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
      unsigned a[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) ldmatrix_x4(a[mi], sa + offA[kk] + mi * 16 * BK * 2);
      // b[ni]: regs {B[k=2t..2t+1][n=g], B[k=2t+8..2t+9][n=g]}; .trans of the stored
      // (k rows, n columns) 8x8 matrices gives exactly that. Matrices 0..3 = (k 0-7, n 0-7),
      // (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15) -> b[2nj], b[2nj+1].
      unsigned b[NI][2];
#pragma unroll
      for (int nj = 0; nj < WN / 16; ++nj)
        ldmatrix_x4_trans(b[2 * nj][0], b[2 * nj][1], b[2 * nj + 1][0], b[2 * nj + 1][1],
                          sb + offB[nj] + kk * 16 * BN * 2);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          // Serpentine order over ni reuses the B fragment across consecutive mmas.
          const int nn = (mi & 1) ? NI - 1 - ni : ni;
          mma_bf16(acc[mi][nn], a[mi], b[nn]);
        }
    }
  }
  cp_async_wait<0>();  // only empty groups can be pending here, but be explicit
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
matmul_mma(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);

  // Grouped rasterisation: GROUP_M block-rows are walked column by column.
  const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
  const int pid = blockIdx.x;
  const int width = GROUP_M * grid_n;
  const int first_m = (pid / width) * GROUP_M;
  const int group_rows = min(grid_m - first_m, GROUP_M);
  const int pm = first_m + (pid % width) % group_rows;
  const int pn = (pid % width) / group_rows;
  const int bm = pm * BM, bn = pn * BN;

  float acc[MI][NI][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;

  const bool aligned = (K % 8 == 0) && (N % 8 == 0);
  if (aligned) mainloop<true>(acc, smem, A, B, M, N, K, bm, bn);
  else mainloop<false>(acc, smem, A, B, M, N, K, bm, bn);

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int g = lane / 4, t = lane % 4;

#if EPI_SMEM
  // Stage the bf16 tile (row pitch BN + 8: the 8 rows of a bf16x2 store hit 8 different
  // 4-bank groups), then write whole 16-byte chunks of C.
  __syncthreads();  // every warp is done with the pipeline's shared memory
  __nv_bfloat162* sc = reinterpret_cast<__nv_bfloat162*>(smem);
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const int r = wm * WM + mi * 16 + g, c = wn * WN + ni * 8 + 2 * t;
      sc[(r * EPI_PITCH + c) / 2] = __floats2bfloat162_rn(acc[mi][ni][0], acc[mi][ni][1]);
      sc[((r + 8) * EPI_PITCH + c) / 2] = __floats2bfloat162_rn(acc[mi][ni][2], acc[mi][ni][3]);
    }
  __syncthreads();
  const bool vec_ok = (N % 8) == 0;
#pragma unroll 4
  for (int q = tid; q < BM * (BN / 8); q += NTHREADS) {
    const int r = q / (BN / 8), c = (q % (BN / 8)) * 8;
    const int gm = bm + r, gn = bn + c;
    if (gm >= M || gn >= N) continue;
    const T* src = smem + r * EPI_PITCH + c;
    T* dst = C + (size_t)gm * N + gn;
    if (vec_ok && gn + 8 <= N) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && gn + e < N; ++e) dst[e] = src[e];
    }
  }
#else
  const bool pair_ok = (N % 2) == 0;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const int gn = bn + wn * WN + ni * 8 + 2 * t;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int gm = bm + wm * WM + mi * 16 + g + 8 * h;
        if (gm >= M || gn >= N) continue;
        T* dst = C + (size_t)gm * N + gn;
        const float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
        if (pair_ok && gn + 1 < N) {
          *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v0, v1);
        } else {
          dst[0] = __float2bfloat16_rn(v0);
          if (gn + 1 < N) dst[1] = __float2bfloat16_rn(v1);
        }
      }
    }
#endif
}

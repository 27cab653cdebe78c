// layernorm seed for long rows without clusters: each row is cut into C chunks (C the
// number of CHUNK KiB pieces the row needs, at most num_sms), and every (row, chunk) is
// one block. A block stages its chunk in shared memory with one Hopper bulk copy
// (cp.async.bulk on an mbarrier) and takes its statistics from shared memory: with
// SHIFT=0, two-pass (sum -> m, then the sum of (x - m)^2 over the valid elements, giving
// the chunk's mean and M2; SHIFT=1, the default, is described below). Warp 0 publishes (mean, M2) in a scratch buffer, reads the row's C pairs until
// all are in (lane k takes chunks k, k + 32, ... in order, with Chan's formula) and merges
// the lanes with kv::merge_lanes (every chunk of a row gets the same bits); then the block writes
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
// explains the design choices and what was tried. A write item reads the row's slots
// while its chunk is still being copied in (both are L2 round trips): 1.4-2.2% faster at
// 1024x131072 and bf16 256x262144 on the H200, 1.2% slower at f32 256x262144; rmsnorm
// lost up to 1.6% and softmax moved within 0.6%, so they keep the plain order.
// Rows whose width is no multiple of 16 bytes (or unaligned buffers) are staged by
// ordinary loads and padded with 0; w, b and y are then accessed element by element.
// Pass 2 tests for padding only in the last group (it used to test every element): same
// sums, same bits, and 0.8-3.4% faster for bf16 and f16 at 4096x32768 and the longer rows
// on the H200 (same call, seed defaults; f32 within 0.8%).
// The gather used to merge the lanes with five levels of Chan's pairwise merge (a division
// each, on the write item's chain) and pass 2 also summed x - m to correct m: with
// kv::merge_lanes and without that sum, at the 128 x 16 KiB preset (H200, fifteenth
// session, same call, us, 1024x131072 / 256x262144 / 4096x32768): bf16 178.1-178.2 /
// 94.1-95.1 / 178.0-178.3 against 184.8-185.4 / 96.6-96.9 / 182.1-182.8; f16 182.0-182.8 /
// 96.6-96.8 / 179.9-180.0 against 194.2-195.0 / 101.0-101.1 / 190.4-191.0; f32 (256 x 32
// KiB) 335.8-337.3 / 173.1-173.2 / 336.8-338.1 against 343.3-343.9 / 177.8-178.8 /
// 341.8-342.4. kv::merge_lanes alone gave about two thirds of the bf16/f16 gain.
// SHIFT=1 (the default) takes the chunk's statistics in one pass of sums of d = x - k and
// d^2, k the median of three of the row's elements (slice_row explains the choice and its
// precondition; SHIFT=0 keeps the two-pass statistics): one pass and one block reduction
// instead of two, and the gather adds the row's pairs with no Chan merges. Same call
// (H200, sixteenth session, us, 1024x131072 / 256x262144 / 4096x32768): bf16 128 x 16 KiB
// 177.0 / 93.6 / 172.1 against 177.4 / 94.4 / 176.9; f16 182.1 / 96.4 / 178.3 against
// 182.2 / 96.8 / 180.2; f32 128 x 32 KiB 342.0 / 174.0 / 323.0 against 343.2 / 176.0 /
// 338.2; the gate's f32 max_abs 5.0e-6 against 1.0e-5. (With SHIFT the fields mean and m2
// of mine and acc carry S1 and S2 until the conversion after the gather. The three reads
// of k come before the first barrier, so a write item pays that L2 round trip before it
// reads the row's slots; k is needed only after the gather, a possible reordering.)
// @kevolve param   CHUNK   32 16 24 48 64
// @kevolve param   BLOCK   256 128 512
// @kevolve param   OCC     1280 1024 1536 2048
// @kevolve param   STCS    0 1
// @kevolve param   LAG     12 0 8 16
// @kevolve param   SHIFT   1 0
// Presets (tried in generation 0): per-shape winners measured on the H200. f32 1024x131072
// and 256x262144: 343.0, 176.6 us with OCC 1024 (eighth session); 341.5, 176.4 us with OCC
// 1280 (ninth session; the old kernel at the old preset: 341.3, 176.6). OCC 1280, since at 1024
// ptxas gives bf16 and f16 53-56 registers (4 blocks of 256 per SM instead of 5), 4-14%
// slower there:
// @kevolve preset  BLOCK=256 CHUNK=32 LAG=12 OCC=1280 STCS=1
//   the tenth session's bf16 benchmark picks, tried in every dtype (same call, us, against
//   the preset above): 128 threads and 16 KiB chunks, f16 1024x131072 194.4 (198.8) and
//   256x262144 100.7 (106.6), bf16 256x262144 98.3 (101.3); 128 threads and 32 KiB chunks,
//   bf16 1024x131072 184.3 (189.3), f32 1024x131072 336.0 (343.2):
// @kevolve preset  BLOCK=128 CHUNK=16 LAG=12 OCC=1280 STCS=0
// @kevolve preset  BLOCK=128 CHUNK=32 LAG=12 OCC=1280 STCS=1
// @kevolve entry   layernorm_split
// @kevolve grid    rows * min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024)) * (LAG > 0 && min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024)) >= 4 ? 2 : 1)
// @kevolve block   BLOCK
// @kevolve smem    align_up(ceil_div(cols, min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024))), 16 / sizeof_T) * sizeof_T
// @kevolve scratch sync (4 + 4 * rows * min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024))) * 4 zeroed
#define VEC (16 / KV_SIZEOF_T)  // elements per 16-byte group
typedef kv::Group<16> Vec;

// Arguments: buffers (x, w, b, y), sizes (rows, cols), scalars (eps), then scratch (sync).
extern "C" __global__ void __launch_bounds__(BLOCK, OCC / BLOCK)
    layernorm_split(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                    int rows, int cols, float eps, unsigned* __restrict__ sync) {
  extern __shared__ __align__(128) unsigned char dsm[];
  __shared__ __align__(8) unsigned long long bar;
  __shared__ float red0[32], red1[32];
  __shared__ float fin[2];
  T* const st = reinterpret_cast<T*>(dsm);
  const Vec* const sv = reinterpret_cast<const Vec*>(dsm);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // The block's work item (kv::split_take): its (row, chunk) and kind, the chunk count C
  // and size ce (both inferred from the grid: rows * C blocks, twice that with LAG when a
  // row has 4 chunks or more), and this launch's bank of slots (part) and the other one.
  const kv::SplitItem it = kv::split_take(sync, rows, cols, VEC, LAG);
  const int C = it.chunks, ce = it.chunk_elems, row = it.row, chunk = it.chunk, kind = it.kind;
  float2* const part = it.part;
  float2* const other = it.other;
  const int c0 = chunk * ce;
  const int n = max(0, min(ce, cols - c0));
  const int ng = (n + VEC - 1) / VEC;
  const bool al = cols % VEC == 0 && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y) | reinterpret_cast<size_t>(w) | reinterpret_cast<size_t>(b)) & 15) == 0;
  const T* const xs = x + (size_t)row * cols + c0;
  T* const ys = y + (size_t)row * cols + c0;
#if SHIFT
  // SHIFT: the row's shift k, the median of its elements at columns 0, cols / 2 (rounded
  // down to a group) and the last group's first (slice_row's choice), read while the chunk
  // is copied in.
  __shared__ float ksh[3];
  if (tid < 3) {
    const int kc = tid == 0 ? 0 : tid == 1 ? cols / 2 / VEC * VEC : max(cols - VEC, 0);
    ksh[tid] = kv::to_float(x[(size_t)row * cols + kc]);
  }
#endif

  if (al) {
    if (tid == 0) {
      kv::mbar_init(&bar);
      kv::mbar_expect(&bar, (unsigned)(n * KV_SIZEOF_T));
      // kind 1 (statistics, re-read later) asks L2 to keep the bytes (kv::kL2EvictLast), kind 2
      // (the re-read) to drop them first (kv::kL2EvictFirst); kind 0 gives no hint (evict_first
      // there measured 4% slower).
      if (n > 0) kv::bulk_load(st, xs, (unsigned)(n * KV_SIZEOF_T), &bar, kind);
    }
    __syncthreads();
    // A write item (kind 2) waits for its copy only after warp 0 has read the row's slots
    // (below), so that the two L2 round trips overlap.
    if (kind != 2) kv::mbar_wait(&bar, 0);
  } else {
    for (int k = tid; k < ng * VEC; k += BLOCK) st[k] = k < n ? xs[k] : kv::from_float<T>(0.f);
    __syncthreads();
  }

  kv::Stats mine{0.f, 0.f, 0.f};  // the chunk's (count, mean, M2) (kind 2 skips it)
#if SHIFT
  // SHIFT: the chunk's sums of d = x - k and d^2 in one pass (mine = {n, S1, S2}); the
  // row's sums add up, mean = k + S1 / cols and M2 = S2 - S1^2 / cols.
  const float k0 = fmaxf(fminf(ksh[0], ksh[1]), fminf(fmaxf(ksh[0], ksh[1]), ksh[2]));
  if (kind != 2) {
    float q1 = 0.f, q2 = 0.f;
    const int nfull = n / VEC;
#pragma unroll 4
    for (int g = tid; g < nfull; g += BLOCK) {
      float f[VEC];
      kv::unpack(sv[g], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = f[k] - k0;
        q1 += d;
        q2 = fmaf(d, d, q2);
      }
    }
    if (nfull < ng && tid == nfull % BLOCK) {
      float f[VEC];
      kv::unpack(sv[nfull], f);
      for (int k = 0; k < n - nfull * VEC; ++k) {
        const float d = f[k] - k0;
        q1 += d;
        q2 = fmaf(d, d, q2);
      }
    }
    kv::reduce_sum2<false>(q1, q2, red0, red1);
    mine = kv::Stats{(float)n, q1, q2};
  }
#else
  if (kind != 2) {
    // Pass 1: sum (padding zeros add nothing); each group is summed as a small tree.
    float s = 0.f;
#pragma unroll 4
    for (int g = tid; g < ng; g += BLOCK) {
      float f[VEC];
      kv::unpack(sv[g], f);
#pragma unroll
      for (int h = VEC / 2; h > 0; h >>= 1)
#pragma unroll
        for (int k = 0; k < h; ++k) f[k] += f[k + h];
      s += f[0];
    }
    const float sb = kv::reduce_sum<false>(s, red0);
    const float m = n > 0 ? sb / (float)n : 0.f;
    // Pass 2: squared deviations from m over the valid elements only. The groups below
    // n / VEC have no padding and skip the per-element test; the padded last group (only
    // when cols is no multiple of VEC) is the last group its thread adds, as in one loop, so
    // the sums keep their order and bits. (The sum of d = x - m, which would correct m,
    // is left out as in slice_row: it changes M2 by n (u m)^2, about 1e-11 of it at the
    // op's mean-to-spread ratio of 60.)
    float q2 = 0.f;
    const int nfull = n / VEC;
#pragma unroll 4
    for (int g = tid; g < nfull; g += BLOCK) {
      float f[VEC];
      kv::unpack(sv[g], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = f[k] - m;
        q2 = fmaf(d, d, q2);
      }
    }
    if (nfull < ng && tid == nfull % BLOCK) {
      float f[VEC];
      kv::unpack(sv[nfull], f);
      for (int k = 0; k < n - nfull * VEC; ++k) {
        const float d = f[k] - m;
        q2 = fmaf(d, d, q2);
      }
    }
    mine = kv::Stats{(float)n, m, kv::reduce_sum<false>(q2, red1)};
  }
#endif
  if (warp == 0) {
    kv::Stats acc = mine;
    if (C > 1) {
      float2* const pr = part + (size_t)row * C;
      // A row's partials live in 64-bit slots (kv::slot_put): all-zero bits mean "not yet", and
      // the second word is stored with its sign bit set (-M2 - 0), so no partial has all-zero
      // bits. Publishing is one store, waiting is reading the slots: one round trip to L2
      // each, where a counter would add two more.
      if (kind != 2 && lane == 0) {
        kv::slot_put(pr + chunk, make_float2(mine.mean, -mine.m2 - 0.f));
        kv::slot_put(other + (size_t)row * C + chunk, make_float2(0.f, 0.f));  // for launch e + 1
      }
#if SHIFT
      if (kind != 1) {
        float s1 = 0.f, s2 = 0.f;
        for (int k = lane; k < C; k += 32) {
          unsigned long long bits;
          for (int spins = 0; (bits = kv::slot_bits(pr + k)) == 0ull;)
            if (++spins > 8) __nanosleep(32);
          const float2 q = kv::slot_value(bits);
          s1 += q.x;
          s2 -= q.y;
        }
        kv::reduce_sum2<true>(s1, s2, nullptr, nullptr);
        acc = kv::Stats{(float)cols, s1, s2};
      }
#else
      if (kind != 1) {
        acc = kv::Stats{0.f, 0.f, 0.f};
        for (int k = lane; k < C; k += 32) {
          unsigned long long bits;
          for (int spins = 0; (bits = kv::slot_bits(pr + k)) == 0ull;)
            if (++spins > 8) __nanosleep(32);
          const float2 q = kv::slot_value(bits);
          const kv::Stats pk{(float)max(0, min(ce, cols - k * ce)), q.x, -q.y};
          acc = kv::merge(acc, pk);
        }
        acc = kv::merge_lanes(acc);  // two butterflies and one division, where Chan's pairwise merge takes five
      }
#endif
    }
#if SHIFT
    {  // the row's sums (S1, S2) to (k + S1 / cols, S2 - S1^2 / cols)
      const float md = acc.mean / (float)cols;
      acc = kv::Stats{(float)cols, k0 + md, fmaxf(fmaf(-md, acc.mean, acc.m2), 0.f)};
    }
#endif
    if (lane == 0) {
      fin[0] = acc.mean;
      fin[1] = rsqrtf(acc.m2 / (float)cols + eps);
    }
  }
  if (kind == 1) return;  // statistics only: a later block writes this chunk
  if (kind == 2 && al) kv::mbar_wait(&bar, 0);
  __syncthreads();
  const float mean = fin[0], rstd = fin[1];
  const T* const ws_w = w + c0;
  const T* const ws_b = b + c0;
  // y from shared memory.
#pragma unroll 2
  for (int g = tid; g < ng; g += BLOCK) {
    float f[VEC], wf[VEC], bf[VEC];
    kv::unpack(sv[g], f);
    kv::unpack(kv::load_param16(ws_w, g, n, al), wf);
    kv::unpack(kv::load_param16(ws_b, g, n, al), bf);
#pragma unroll
    for (int k = 0; k < VEC; ++k) f[k] = fmaf((f[k] - mean) * rstd, wf[k], bf[k]);
    kv::store16<STCS>(ys, g, n, kv::pack<16>(f), al);  // STCS: streaming, y is not read again
  }
}

// layernorm seed for long rows that reads x once, without clusters: softmax's slice_row
// (see there for the design, the barriers and the forward-progress argument) with
// per-slice statistics: one pass of shifted sums (SHIFT=1, the default; below) or two-pass
// (count, mean, M2) (SHIFT=0). A persistent grid (BPS blocks per SM, all
// resident); rows are cut into P slices of at most SLOT KiB (kv::slice_grid), slice
// j = row * P + part belonging to block j % G at its step j / G.
// SHIFT=0, as first built:
// Warps 1..CW (consumers) load their share of slice s from shared memory into registers
// once (at most MAXG 16-byte groups a lane) and take its two-pass statistics there: the
// share's sum and count, m = sum / count, then the sum of (x - m)^2, giving (count, m, M2).
// (split_row also adds up x - m to correct m; in f32 that correction changes M2 by
// count * (u m)^2, about 1e-11 of it at the op's mean-to-spread ratio of 60, and leaving
// it out was 1-3% faster.)
// Warp 0 (control; two warps with LW, below) bulk-copies slices into a ring of SLOTS shared-memory slots, merges the
// consumers' triples (kv::merge_lanes) and publishes the slice's (mean, M2), then gathers the
// row of the slice GLAG steps back (its P pairs, each lane its parts in order with Chan's
// formula, then kv::merge_lanes: every slice of a row gets the same bits) and hands
// (mean, rstd) to the consumers, who write their share of slice s - LAGS from shared
// memory, w and b read with 16-byte loads through the read-only path. x is read from DRAM
// once, never from L2 again.
// LW=1 (the default): warp 0 only loads (refilling each slot as soon as the consumers release
// it), warp 1 is the control warp and the consumers are warps 2..CW + 1, as in softmax's
// slice_row (see there for why). Layernorm gains most of the three: its consumers take
// about twice rmsnorm's instructions per element, so its step was the longest chain.
// Measured (H200, eighteenth session, kevolve eval --sweep LW=0,1, us, 1024x131072 /
// 256x262144 / 4096x32768): bf16 STAY 193.6 / 93.0 / 187.1 -> 168.8 / 90.8 / 162.4, bf16 3 x 8
// warps 186.7 / 94.3 / 187.7 -> 170.7 / 91.8 / 173.9, f16 STAY 192.2 / 91.4 / 186.3 -> 168.8 /
// 91.0 / 163.3, f32 STAY 291.4 / 151.7 / 305.8 -> 289.4 / 148.1 / 293.7.
// Measured (kevolve eval, H200, thirteenth session, us, 1024x131072 / 256x262144;
// split_row's BLOCK 128 CHUNK 16 preset in the same calls: f32 345.2-347.0 / 179.4-180.2,
// bf16 184.1-185.3 / 96.7-97.5, f16 194.2-194.4 / 100.6): this seed at its first preset,
// f32 304.6-304.8 / 163.4-163.6; at its second, bf16 224.0-224.4 / 97.7-97.9 (f16 was level
// with bf16 in the calls before). split_row stays ahead in bf16 and f16, where the
// consumers' instructions per element, about twice rmsnorm's, bound the step (rmsnorm's
// slice_row runs bf16 at 158.9 / 85.7).
// What made the difference: the merges on the control warp's chain. With Chan's pairwise
// kv::warp_merge (five levels, a division each) for the slice and for the gathered row,
// f32 ran 453.5 / 241.5 and bf16 303.6 / 135.0 (12 consumer warps); kv::merge_lanes (two
// butterflies, one division) brought that to 323.4-326.0 / 171.1-172.7 and 247.2-247.7 /
// 103.1-103.5. A first version (twelfth session) also took both passes of the statistics
// from shared memory: 30-60% slower than split_row. PF 1 (w and b loaded before the
// statistics, so that their L2 latency overlaps them) helps f32 (308.9-310.0 against
// 323.4) and costs bf16/f16 at 256x262144 (111.9 against 103.1); with 8 consumer warps at
// 2 blocks per SM it spills and runs 50% slower. Dropping the deviations' sum then gave
// the numbers above (from 308.9-309.4 / 167.5-168.0 and 231.1-232.4 / 100.5-101.4).
// STAY=1 sizes the grid to a multiple of P (G = floor(num_sms * BPS / P) * P where P <= that),
// so that block i gets part i % P of every row it works on: each consumer lane loads its
// groups of w and b once and keeps them packed in registers, and w and b stop crossing
// L2 for every row (1024 rows x 2 x 512 KiB in f32 at 1024x131072). Same calls, f32 at
// the first preset: 295.2-298.9 / 158.7-159.4 us against 304.8-305.7 / 163.3-163.4 (H200,
// fourteenth session). In bf16 it spills at 2 blocks of 12 consumer warps and cannot run
// at the second preset (4 groups a lane): 245 / 102 and, at 1 block of 16 warps, 436 / 130.
// SHIFT=1 (the default) takes the statistics in one pass of shifted sums instead: each
// consumer warp adds up d = x - k and d^2 over its share, the control warp adds the warps'
// pairs and publishes them, and the gather adds the row's P pairs (no Chan merges):
// mean = k + S1 / cols, var = S2 / cols - (S1 / cols)^2. k is the same for every slice of
// a row: the median of three of its elements (columns 0, cols / 2 rounded down to a group,
// and the last group's first), bulk-copied into the slot's three 16-byte groups with each
// slice. Without the shift the one-pass formula loses up to 12 bits in f32 on this op's
// inputs (means of up to 30 spreads; op.json); with it the loss is about
// (1 + (k - mean)^2 / var) times f32's rounding, small when k is within a few spreads of
// the mean, which the median of three keeps true unless two of the three sampled columns
// are far outliers (then use SHIFT=0: since (k - mean)^2 <= (cols - 1) var, the factor can
// reach the row length; in a CPU f32 model of a 262144-element row of spread 0.5 with two
// sampled columns at 30, the variance was off by 1e-4 relative, 5x f32's rtol). The gate's f32 max_abs was 5.0e-6 against 9.6e-6
// two-pass. The share is read once (no registers held between two passes), which also lets
// STAY keep w and b in registers in bf16/f16 without spilling. Measured (H200, sixteenth
// session, kevolve eval, two runs each, us, 1024x131072 / 256x262144 / 4096x32768):
//   f32 BPS=2 CW=12 STAY: 289.7-290.0 / 152.6-152.8 / 300.1-300.3 against 295.9-296.7 /
//     161.2-161.6 / 422.9-423.3 two-pass;
//   bf16 the same: 186.5-186.6 / 91.4-92.1 / 180.4-181.2 against 245.3-245.4 / 102.1 /
//     238.1-238.3; BPS=3 CW=8 SLOTS=4 LAGS=2 GLAG=1: 184.7-186.0 / 93.5-94.1 / 186.0-186.2
//     against 223.6-223.8 / 97.6-97.7 / 223.7-224.2 (split_row 128 x 16 KiB, same call:
//     177.4 / 94.7 / 178.0);
//   f16 BPS=2 CW=12 STAY: 185.9-186.0 / 88.9-89.4 / 179.7-180.0 against 247.7-248.0 /
//     103.0-103.2 / 240.7 (split_row 181.3 / 96.4 / 179.1).
// (Those were timed with k = the row's first element. With the median of three, two more
// 16-byte bulk copies per slice and four min/max per lane and step, the next call gave f32
// STAY 287.4 / 150.8 / 304.4, bf16 STAY 193.9 / 93.3 / 187.3, bf16 3 x 8 warps 186.0 / 93.1
// / 187.8, f16 STAY 191.9 / 91.7 / 185.3, f16 3 x 8 warps 182.8 / 92.4 / 183.4.)
// Rows that fit a slot CW times or more are packed instead, as in softmax's slice_row (a
// slice is whole rows, one consumer warp takes each row's statistics and writes it,
// nothing is exchanged).
// Rows whose width is no multiple of 16 bytes (or unaligned buffers) are staged by the
// control warp with ordinary loads, padded with 0; w, b and y are then accessed element
// by element.
// TAIL=1 (the default): the drain's last GLAG gathers are asked for at once, as in
// softmax's slice_row (see there; about 1 us).
// @kevolve param   CW     12 8 16 4
// @kevolve param   SLOT   16 32 24 48
// @kevolve param   SLOTS  6 3 4 5 8
// @kevolve param   LAGS   3 2 4 1
// @kevolve param   GLAG   2 1 3
// @kevolve param   STCS   1 0
// @kevolve param   BPS    2 1 3
// @kevolve param   PF     0 1
// @kevolve param   STAY   0 1
// @kevolve param   SHIFT  1 0
// @kevolve param   LW     1 0
// @kevolve param   TAIL   1 0
// Presets (tried in generation 0): f32 1024x131072 two-pass (thirteenth session), and the
// sixteenth session's SHIFT picks (every dtype with STAY; bf16/f16 at 1024x131072):
// @kevolve preset  BPS=2 CW=12 SLOT=16 SLOTS=6 PF=1 SHIFT=0
// @kevolve preset  BPS=2 CW=12 SLOT=16 SLOTS=6 STAY=1 SHIFT=1
// @kevolve preset  BPS=3 CW=8 SLOT=16 SLOTS=4 LAGS=2 GLAG=1 PF=0 SHIFT=1
//   one step more slack for the writes and the gather (nineteenth session, bf16, us,
//   1024x131072 / 256x262144: 168.6 / 88.5 against 170.4 / 91.7 at LAGS=3 GLAG=2):
// @kevolve preset  BPS=2 CW=12 SLOT=16 SLOTS=6 STAY=1 SHIFT=1 LAGS=4 GLAG=3
// @kevolve require SLOTS * SLOT * BPS <= 208
// @kevolve require (CW + 1 + LW) * 32 * BPS <= 1024
// @kevolve require LAGS + 1 < SLOTS
// @kevolve require GLAG <= LAGS
// @kevolve require SLOT <= CW * 8
// PF holds 2 * MAXG groups of w and b across the statistics: only up to 3 groups a lane
// (with 4, at 8 consumer warps, ptxas spilled and the kernel ran 50% slower).
// @kevolve require PF == 0 || SLOT * 2 <= CW * 3
// STAY holds the same 2 * MAXG groups for the whole launch, and makes PF's loads dead code:
// @kevolve require STAY == 0 || SLOT * 2 <= CW * 3
// @kevolve require STAY == 0 || PF == 0
// @kevolve entry   layernorm_slice
// @kevolve grid    STAY && ceil_div(align_up(cols, 16 / sizeof_T), SLOT * 1024 / sizeof_T) <= num_sms * BPS ? num_sms * BPS / ceil_div(align_up(cols, 16 / sizeof_T), SLOT * 1024 / sizeof_T) * ceil_div(align_up(cols, 16 / sizeof_T), SLOT * 1024 / sizeof_T) : num_sms * BPS
// @kevolve block   (CW + 1 + LW) * 32
// @kevolve smem    SLOTS * SLOT * 1024
// @kevolve scratch sync (4 + 4 * rows * ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, SLOT * 1024)) * 4 zeroed
#define VEC (16 / KV_SIZEOF_T)  // elements per 16-byte group
typedef kv::Group<16> Vec;
#define NT ((CW + 1 + LW) * 32)
// The write loop's unroll: 2 in f32; in bf16/f16 (x, w and b unpacked to 24 floats a group)
// an unroll of 2 spilled at the 72-register cap of 2 blocks of 416 threads.
#define WUNROLL (KV_SIZEOF_T == 4 ? 2 : 1)
// The most groups a lane holds: a slot's SLOT * 64 groups over CW * 32 lanes (a packed
// row has at most SLOT * 64 / CW groups, over 32 lanes: the same bound).
#define MAXG ((SLOT * 64 + CW * 32 - 1) / (CW * 32))

// Two-pass (count, mean, M2) of the groups first + j * step (j < MAXG, below ng) of sv, whose
// valid elements end at n (only a last, unaligned group is padded, with zeros): one read
// of shared memory into registers, then the two passes there (the mean, then the squared
// deviations from it). Every lane of the warp
// gets the same bits.
__device__ __forceinline__ kv::Stats share_stats(const Vec* sv, int first, int step, int ng, int n) {
  Vec r[MAXG];
  float sum = 0.f;
  int cnt = 0;
#pragma unroll
  for (int j = 0; j < MAXG; ++j) {
    const int g = first + j * step;
    if (g < ng) {
      r[j] = sv[g];
      float f[VEC];
      kv::unpack(r[j], f);
      for (int h = VEC / 2; h > 0; h >>= 1)
#pragma unroll
        for (int k = 0; k < h; ++k) f[k] += f[k + h];
      sum += f[0];
      cnt += min(VEC, n - g * VEC);
    }
  }
  sum = kv::reduce_sum<true>(sum, nullptr);
  cnt = (int)__reduce_add_sync(0xffffffffu, (unsigned)cnt);
  const float fc = (float)cnt, m = cnt > 0 ? sum / fc : 0.f;
  float q2 = 0.f;
#pragma unroll
  for (int j = 0; j < MAXG; ++j) {
    const int g = first + j * step;
    if (g < ng) {
      float f[VEC];
      kv::unpack(r[j], f);
      const int nv = n - g * VEC;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = f[k] - m;
        if (nv >= VEC || k < nv) q2 = fmaf(d, d, q2);
      }
    }
  }
  q2 = kv::reduce_sum<true>(q2, nullptr);
  return kv::Stats{fc, m, q2};
}

#if SHIFT
// SHIFT: one pass over the same groups, giving the warp's sums of d = x - k and of d^2,
// k being the row's shift (kshift: the same for every slice of the row, so the slices'
// sums add up). Every lane of the warp gets the same bits.
__device__ __forceinline__ float2 share_sums(const Vec* sv, int first, int step, int ng, int n, float k0) {
  float q1 = 0.f, q2 = 0.f;
#pragma unroll
  for (int j = 0; j < MAXG; ++j) {
    const int g = first + j * step;
    if (g < ng) {
      float f[VEC];
      kv::unpack(sv[g], f);
      const int nv = n - g * VEC;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = f[k] - k0;
        if (nv >= VEC || k < nv) {
          q1 += d;
          q2 = fmaf(d, d, q2);
        }
      }
    }
  }
  kv::reduce_sum2<true>(q1, q2, nullptr, nullptr);
  return make_float2(q1, q2);
}
#endif

// A lane's groups first + j * CW * 32 (j < MAXG) of w and b for a slice of n elements whose
// first column w and b point at (PF and STAY hold them in registers).
__device__ __forceinline__ void load_wb(Vec (&wv)[MAXG], Vec (&bv)[MAXG], const T* __restrict__ w,
                                        const T* __restrict__ b, int n, int first, bool al) {
  const int ng = (n + VEC - 1) / VEC;
#pragma unroll
  for (int j = 0; j < MAXG; ++j) {
    const int g = first + j * CW * 32;
    if (g < ng) {
      wv[j] = kv::load_param16(w, g, n, al);
      bv[j] = kv::load_param16(b, g, n, al);
    }
  }
}

// Arguments: buffers (x, w, b, y), sizes (rows, cols), scalars (eps), then scratch (sync).
extern "C" __global__ void __launch_bounds__(NT, BPS)
    layernorm_slice(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                    int rows, int cols, float eps, unsigned* __restrict__ sync) {
  extern __shared__ __align__(128) unsigned char dsm[];
  __shared__ __align__(8) unsigned long long full[SLOTS], empty[SLOTS], statd[SLOTS], finr[SLOTS];
  __shared__ kv::Stats red[SLOTS][CW];  // SHIFT=0: the consumer warps' (count, mean, M2) of the slice in each slot
  __shared__ float2 fin[SLOTS];         // (mean, rstd) of the row of each slot's slice (SHIFT: (mean - k, rstd))
#if SHIFT
  // SHIFT: three 16-byte groups of each slot's row, bulk-copied with the slice (kshift takes
  // the median of their first elements), the consumer warps' (sum d, sum d^2) of each slot's
  // slice, and fin holds (mean - k, rstd).
  __shared__ __align__(16) Vec kgrp[SLOTS][3];
  __shared__ float2 red2[SLOTS][CW];
  const int kc1 = cols / 2 / VEC * VEC, kc2 = max(cols - VEC, 0);  // the groups' first columns: 0, kc1, kc2
  auto kshift = [&](int slot) {
    const float a = kv::to_float(kgrp[slot][0].v[0]), b = kv::to_float(kgrp[slot][1].v[0]),
                c = kv::to_float(kgrp[slot][2].v[0]);
    return fmaxf(fminf(a, b), fminf(fmaxf(a, b), c));
  };
#endif
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  kv::slice_ring_init(full, empty, statd, finr, SLOTS, CW);
  // Rows that fit a slot CW times or more are packed (a row per consumer warp and more).
  // Syncs; the launch's bank is taken later, by the control warp (kv::slice_bank), so the
  // first copies need not wait for the launch counter's atomic.
  kv::SliceGrid sg = kv::slice_grid(sync, rows, cols, VEC, SLOT * 1024 / KV_SIZEOF_T, CW, true);
  const int P = sg.parts, steps = sg.steps;
  kv::slice_guard(sg, GLAG);  // traps on rows longer than about G * GLAG slots, rather than risk a hang
  const bool al = cols % VEC == 0 &&
                  ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y) | reinterpret_cast<size_t>(w) |
                    reinterpret_cast<size_t>(b)) & 15) == 0;
  auto slot_ptr = [&](int s) { return reinterpret_cast<T*>(dsm + (size_t)(s % SLOTS) * SLOT * 1024); };
  auto phase = [](int s) { return (unsigned)(s / SLOTS) & 1u; };

  if (sg.pack) {
    // Rows that fit one slot: a slice is sg.pack whole consecutive rows (row i at i * rs in
    // the slot), each reduced and written by one consumer warp; nothing is exchanged.
    const int rs = al ? cols : (cols + VEC - 1) / VEC * VEC;  // the rows' stride in the slot
    const int ngr = (cols + VEC - 1) / VEC;
    if (warp == 0) {
      auto fill = [&](int s) {
        kv::slice_fill_rows(sg, s, x, rows, cols, rs, slot_ptr(s), &full[s % SLOTS], al, kv::from_float<T>(0.f));
      };
      for (int s = 0; s < min(SLOTS, steps); ++s) fill(s);
      kv::slice_bank(sg, sync);  // no bank is used here, but every launch counts
      for (int s = 0; s + SLOTS < steps; ++s) {
        kv::mbar_wait(&empty[s % SLOTS], phase(s));
        fill(s + SLOTS);
      }
    } else if (warp > LW) {
      const int cw = warp - 1 - LW;
      for (int s = 0; s < steps; ++s) {
        int r0, nr;
        kv::slice_rows(sg, s, rows, r0, nr);
        kv::mbar_wait(&full[s % SLOTS], phase(s));
        for (int i = cw; i < nr; i += CW) {
          const Vec* sv = reinterpret_cast<const Vec*>(slot_ptr(s) + (size_t)i * rs);
          T* const ys = y + (size_t)(r0 + i) * cols;
          const kv::Stats st = share_stats(sv, lane, 32, ngr, cols);
          const float mean = st.mean, rstd = rsqrtf(st.m2 / (float)cols + eps);
          for (int g = lane; g < ngr; g += 32) {
            float f[VEC], wf[VEC], bf[VEC];
            kv::unpack(sv[g], f);
            kv::unpack(kv::load_param16(w, g, cols, al), wf);
            kv::unpack(kv::load_param16(b, g, cols, al), bf);
#pragma unroll
            for (int k = 0; k < VEC; ++k) f[k] = fmaf((f[k] - mean) * rstd, wf[k], bf[k]);
            kv::store16<STCS>(ys, g, cols, kv::pack<16>(f), al);
          }
        }
        __syncwarp();
        if (lane == 0) kv::mbar_arrive(&empty[s % SLOTS]);
      }
    }
    return;
  }

  // Stage slice s in its slot (kv::slice_fill): one bulk copy (lane 0), or ordinary loads padded with 0.
  auto fill = [&](int s) {
#if SHIFT
    int row, c0, n;
    kv::slice_at(sg, s, row, c0, n, cols);
    const T* const xr = x + (size_t)row * cols;
    if (al) {  // the slice and the shift's three groups, on one mbarrier
      if (lane == 0) {
        unsigned long long* bar = &full[s % SLOTS];
        kv::mbar_expect(bar, (unsigned)(n * sizeof(T)) + 48u);
        if (n > 0) kv::bulk_load(slot_ptr(s), xr + c0, (unsigned)(n * sizeof(T)), bar);
        kv::bulk_load(&kgrp[s % SLOTS][0], xr, 16u, bar);
        kv::bulk_load(&kgrp[s % SLOTS][1], xr + kc1, 16u, bar);
        kv::bulk_load(&kgrp[s % SLOTS][2], xr + kc2, 16u, bar);
      }
      return;
    }
    if (lane < 3) kgrp[s % SLOTS][lane].v[0] = xr[lane == 0 ? 0 : lane == 1 ? kc1 : kc2];  // released by slice_fill's arrive
#endif
    kv::slice_fill(sg, s, x, cols, VEC, slot_ptr(s), &full[s % SLOTS], al, kv::from_float<T>(0.f));
  };
#if LW
  if (warp == 0) {
    // ---- loader warp (LW): refills each slot as soon as the consumers have released it ----
    for (int s = 0; s < steps; ++s) {
      if (s >= SLOTS) kv::mbar_wait(&empty[s % SLOTS], phase(s - SLOTS));
      fill(s);
    }
  } else if (warp == 1) {
    // ---- control warp: the statistics exchange (LW: no fills) ----
#else
  if (warp == 0) {
    // ---- control warp ----
    for (int s = 0; s < min(SLOTS, steps); ++s) fill(s);
#endif
    kv::slice_bank(sg, sync);  // this warp's copy of sg gets the launch's bank
    // The gather of the row of slice t: the row's P pairs added (SHIFT), or merged, each lane
    // its parts in order (Chan), then the lanes. pre0 and pre1 are this lane's first two
    // slots, asked for earlier (0: not yet published).
    auto gather_row = [&](int t, unsigned long long pre0, unsigned long long pre1) {
      int trow, tc0, tn;
      kv::slice_at(sg, t, trow, tc0, tn, cols);
      const float2* pr = sg.part + (size_t)trow * P;
#if SHIFT
      // The sums add up: mean - k = S1 / cols, variance = S2 / cols - (mean - k)^2.
      float s1 = 0.f, s2 = 0.f;
      for (int k = lane; k < P; k += 32) {
        unsigned long long bits = k == lane ? pre0 : k == lane + 32 ? pre1 : 0ull;
        for (int spins = 0; bits == 0ull && (bits = kv::slot_bits(pr + k)) == 0ull;)
          if (++spins > 8) __nanosleep(64);
        const float2 q = kv::slot_value(bits);
        s1 += q.x;
        s2 -= q.y;
      }
      kv::reduce_sum2<true>(s1, s2, nullptr, nullptr);
      const float md = s1 / (float)cols;
      const kv::Stats acc{(float)cols, md, fmaxf(fmaf(-md * (float)cols, md, s2), 0.f)};
#else
      kv::Stats acc{0.f, 0.f, 0.f};
      for (int k = lane; k < P; k += 32) {
        unsigned long long bits = k == lane ? pre0 : k == lane + 32 ? pre1 : 0ull;
        for (int spins = 0; bits == 0ull && (bits = kv::slot_bits(pr + k)) == 0ull;)
          if (++spins > 8) __nanosleep(64);
        const float2 q = kv::slot_value(bits);
        acc = kv::merge(acc, kv::Stats{(float)max(0, min(sg.slice_elems, cols - k * sg.slice_elems)), q.x, -q.y});
      }
      acc = kv::merge_lanes(acc);
#endif
      if (lane == 0) {
        fin[t % SLOTS] = make_float2(acc.mean, rsqrtf(acc.m2 / (float)cols + eps));
        kv::mbar_arrive(&finr[t % SLOTS]);
      }
    };
    for (int s = 0; s < (TAIL ? steps : steps + LAGS); ++s) {
      // The row of slice t = s - GLAG: its slots are asked for first, so the round trip
      // overlaps the merge of slice s.
      const int t = s - GLAG;
      const bool gather = t >= 0 && t < steps;
      unsigned long long pre0 = 0ull, pre1 = 0ull;
      if (gather) kv::slice_ask(sg, t, cols, pre0, pre1);
      if (s < steps) {  // publish slice s's (mean, M2), or with SHIFT its (S1, S2) in the same fields; the second
                        // stored as -x - 0 (x >= +0: the sign bit keeps the slot nonzero)
        int row, c0, n;
        kv::slice_at(sg, s, row, c0, n, cols);
        kv::mbar_wait(&statd[s % SLOTS], phase(s));
#if SHIFT
        // (sum d, -sum d^2 - 0): the sign bit keeps the slot nonzero
        float2 q = lane < CW ? red2[s % SLOTS][lane] : make_float2(0.f, 0.f);
        kv::reduce_sum2<true>(q.x, q.y, nullptr, nullptr);
        const kv::Stats st{0.f, q.x, q.y};
#else
        const kv::Stats st = kv::merge_lanes(lane < CW ? red[s % SLOTS][lane] : kv::Stats{0.f, 0.f, 0.f});
#endif
        if (lane == 0) {
          const int c = c0 / sg.slice_elems;
          kv::slot_put(sg.part + (size_t)row * P + c, make_float2(st.mean, -st.m2 - 0.f));
          kv::slot_put(sg.other + (size_t)row * P + c, make_float2(0.f, 0.f));  // for launch e + 1
        }
      }
      if (gather) gather_row(t, pre0, pre1);
#if !LW
      // Refill the slot the consumers wrote one step earlier (most likely done by now).
      const int u = s - LAGS - 1;
      if (u >= 0 && u + SLOTS < steps) {
        kv::mbar_wait(&empty[u % SLOTS], phase(u));
        fill(u + SLOTS);
      }
#endif
    }
#if TAIL
    kv::slice_tail<GLAG>(sg, steps, cols, gather_row);  // the last GLAG rows' slots asked for at once
#endif
  } else {
    // ---- consumer warps: groups cw * 32 + lane, step CW * 32, of each slice ----
    const int cw = warp - 1 - LW;
#if STAY
    // STAY: with G a multiple of P (the launch makes it so where it can), every slice of
    // this block is part blockIdx.x % P of its row, so this lane's groups of w and b are
    // the same at every step: loaded once, here, and kept packed in registers.
    Vec wv[MAXG], bv[MAXG];
    const bool stay = al && (int)gridDim.x % P == 0;
    if (stay) {
      const int c0 = ((int)blockIdx.x % P) * sg.slice_elems;
      load_wb(wv, bv, w + c0, b + c0, max(0, min(sg.slice_elems, cols - c0)), cw * 32 + lane, al);
    }
#endif
    for (int s = 0; s < steps + LAGS; ++s) {
#if PF || STAY
      // PF: this lane's groups of w and b for slice s - LAGS, loaded before the statistics
      // of slice s so that their L2 latency overlaps them.
#if STAY
      if (s >= LAGS && !stay) {
#else
      Vec wv[MAXG], bv[MAXG];
      if (s >= LAGS) {
#endif
        int row, c0, n;
        kv::slice_at(sg, s - LAGS, row, c0, n, cols);
        load_wb(wv, bv, w + c0, b + c0, n, cw * 32 + lane, al);
      }
#endif
      if (s < steps) {  // this warp's share of slice s: (S1, S2) with SHIFT, else two-pass (count, mean, M2)
        int row, c0, n;
        kv::slice_at(sg, s, row, c0, n, cols);
        const int ng = (n + VEC - 1) / VEC;
        kv::mbar_wait(&full[s % SLOTS], phase(s));
#if SHIFT
        const float2 st = share_sums(reinterpret_cast<const Vec*>(slot_ptr(s)), cw * 32 + lane, CW * 32, ng, n,
                                     kshift(s % SLOTS));
        if (lane == 0) {
          red2[s % SLOTS][cw] = st;
          kv::mbar_arrive(&statd[s % SLOTS]);
        }
#else
        const kv::Stats st = share_stats(reinterpret_cast<const Vec*>(slot_ptr(s)), cw * 32 + lane, CW * 32, ng, n);
        if (lane == 0) {
          red[s % SLOTS][cw] = st;
          kv::mbar_arrive(&statd[s % SLOTS]);
        }
#endif
      }
      if (s >= LAGS) {  // y = (x - mean) * rstd * w + b for this warp's share of slice s - LAGS
        const int t = s - LAGS;
        int row, c0, n;
        kv::slice_at(sg, t, row, c0, n, cols);
        const int ng = (n + VEC - 1) / VEC;
        kv::mbar_wait(&finr[t % SLOTS], phase(t));
#if SHIFT
        const float2 mr = make_float2(fin[t % SLOTS].x + kshift(t % SLOTS), fin[t % SLOTS].y);
#else
        const float2 mr = fin[t % SLOTS];
#endif
        const Vec* sv = reinterpret_cast<const Vec*>(slot_ptr(t));
        T* const ys = y + (size_t)row * cols + c0;
        const T* const wc = w + c0;
        const T* const bc = b + c0;
#if PF || STAY
#pragma unroll
        for (int j = 0; j < MAXG; ++j) {
          const int g = cw * 32 + lane + j * CW * 32;
          if (g < ng) {
            float f[VEC], wf[VEC], bf[VEC];
            kv::unpack(sv[g], f);
            kv::unpack(wv[j], wf);
            kv::unpack(bv[j], bf);
#pragma unroll
            for (int k = 0; k < VEC; ++k) f[k] = fmaf((f[k] - mr.x) * mr.y, wf[k], bf[k]);
            kv::store16<STCS>(ys, g, n, kv::pack<16>(f), al);
#if STAY
            kv::launder(wv[j]);  // keeps them packed: their floats are not hoisted out of the step loop
            kv::launder(bv[j]);
#endif
          }
        }
#else
#pragma unroll WUNROLL
        for (int g = cw * 32 + lane; g < ng; g += CW * 32) {
          float f[VEC], wf[VEC], bf[VEC];
          kv::unpack(sv[g], f);
          kv::unpack(kv::load_param16(wc, g, n, al), wf);
          kv::unpack(kv::load_param16(bc, g, n, al), bf);
#pragma unroll
          for (int k = 0; k < VEC; ++k) f[k] = fmaf((f[k] - mr.x) * mr.y, wf[k], bf[k]);
          kv::store16<STCS>(ys, g, n, kv::pack<16>(f), al);
        }
#endif
        __syncwarp();
        if (lane == 0) kv::mbar_arrive(&empty[t % SLOTS]);
      }
    }
  }
}

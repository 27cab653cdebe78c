// softmax seed for long rows that reads x once, without clusters: a persistent grid
// (BPS blocks per SM, all resident) with warp-specialised blocks and no block-wide barrier
// in its loop. Rows are cut into P slices of at most SLOT KiB (kv::slice_grid); slice
// j = row * P + part belongs to block j % G at its step j / G. Each block keeps a ring of
// SLOTS slices in shared memory, filled by bulk copies (cp.async.bulk on mbarriers).
// Warp 0 (control; two warps with LW, below) issues the copies, merges the consumer warps' (max, sum) pairs of each
// slice into the slice's pair and publishes it (a self-flagging 64-bit slot, as in
// split_row), then gathers the row of the slice GLAG steps back (its P slots, in part
// order, so every slice of a row gets the same bits) and hands (max, 1/sum) to the
// consumers. Warps 1..CW (consumers) reduce their share of slice s, then write their share
// of slice s - LAGS from shared memory; with GLAG < LAGS its row is normally in already.
// They meet only through mbarriers: full (the copy landed), statd (the consumers' pairs are
// in), finr (the row is gathered), empty (the slice is written; the slot may be refilled).
// x is read from DRAM once, never from L2 again, and y is written once.
// LW=1 (the default) splits warp 0's work in two: warp 0 only loads (it refills each slot as
// soon as the consumers release it), warp 1 is the control warp, and the consumers are warps
// 2..CW + 1. With one warp doing both, a refill waited behind the statistics exchange (the
// gather's L2 round trip) and the exchange behind a refill's wait for the slot's writes;
// Nsight Compute on layernorm's slice_row (bf16 1024x131072) put 22% of the warps' stall
// samples on the consumers' wait for a slice to land and 12% on the wait for its row, and
// halving SLOT (twice the slices, the same bytes) made all three ops 30-45% slower: the
// chain per slice, not the bytes in flight, bounds the step. Measured (H200, eighteenth
// session, kevolve eval --sweep LW=0,1 at the preset, us, 1024x131072 / 256x262144 /
// 4096x32768): bf16 160.2 / 83.0 / 159.3 -> 152.2 / 81.7 / 151.8, f16 158.3 / 83.2 / 159.8 ->
// 151.5 / 81.7 / 151.9, f32 285.9 / 147.9 / 295.2 -> 285.3 / 146.0 / 294.3.
// TAIL=1 (the default): after its last publication the control warp asks for the last GLAG
// rows' slots at once, then merges them in order (one L2 round trip in the drain instead
// of GLAG). Worth about 1 us or less (nineteenth session, bf16, us, 512x131072 / 1024x131072
// / 256x262144: 84.06 / 154.0 / 81.57 -> 83.5 / 154.1 / 81.3; layernorm 92.96 / 175.0 /
// 89.18 -> 92.14 / 173.1 / 88.18). The same session measured where the long rows' time
// goes: at 512, 1024 and 2048 rows of 131072 (81.57, 152.2, 292.9 us) the steady state
// moves 3.81 TB/s, 90.5% of the copy, and about 11.5 us per launch is ramp and drain
// (a copy's is about 4 us). Releasing each slot right after the reduction (the slice
// kept in registers for the write) was correct and no faster (docs/BENCHMARKS.md).
// The launch's bank is taken by the control warp (kv::slice_grid with defer_bank, then
// kv::slice_bank), so the first copies no longer wait for the launch counter's atomic and
// the block-wide barrier after it; the drain's requests are kv::slice_tail. Measured (H200,
// twentieth session, kevolve eval, same call, preset, bf16, us, 512 / 1024 / 2048 x 131072
// and 256x262144): 83.66 / 154.3 / 296.5 / 79.26 before, 82.21 / 152.3 / 293.8 / 78.58
// after; the [scaling] fit's fixed cost went from 10.5 to 9.1 us per launch (steady state
// 0.90 of the roofline both). (rmsnorm 80.11 / 152.3 / 291.3 / 79.12 -> 79.81 / 149.8 / 291.0 /
// 79.3, fixed cost 12.6 -> 11.5 us; layernorm 92.13 / 171.7 / 338.4 / 88.42 -> 90.98 / 170.1 /
// 334.5 / 86.99.)
// Not shipped (twentieth session, docs/BENCHMARKS.md; the code is in commit 6b9c45b): SPLIT,
// a publisher warp and a gatherer warp instead of one control warp, and consumers that
// write each slice as soon as its row is in (no fixed lag), and TICKET, slices taken from a
// counter in the scratch (a compact window of memory in flight, which lifts a plain ring
// copy from 3.84 to 3.97 TB/s). Both correct, both slower: preset 152.8 us at bf16
// 1024x131072, SPLIT 159.8, SPLIT + TICKET 159.2.
// Not shipped: a grid of a multiple of P blocks (as STAY does in layernorm and rmsnorm), so
// that every step is full (bf16 1024x131072: 256 blocks, 64 full steps, instead of 264
// blocks, 62 full steps and one of 16 blocks). Slower at every shape (same call, us: 82.91 /
// 154.4 / 298.5 / 80.18 against 81.55 / 152.4 / 294.2 / 78.5): a step takes as long with 256
// blocks as with 264, so the step is bounded by each block's chain, not by DRAM.
// Why: split_row re-reads each chunk from L2, and on the H200 that second read crosses the
// fabric between the two L2 partitions when the re-reading SM is on the other side (the
// fabric is the busiest unit even for a copy; docs/BENCHMARKS.md). Holding the slice in
// shared memory for LAGS steps avoids the re-read; the cost is that a row advances at the
// pace of its slowest slice's block, with LAGS - GLAG steps of slack.
// Measured (kevolve eval, H200, twelfth session, same call as split_row's preset):
// softmax f32 1024x131072 281.8 us against 296.7, 256x262144 146.6 against 152.6 (BPS 2,
// CW 4, 16 KiB x 6); bf16 161.1 against 152.1 (split_row stays ahead in bf16/f16).
// EX1 = 1 takes exp once per element: the consumers take their share's max first (a packed
// max over the words, no MUFU), then e = 2^((x - m_w) log2e) with that warp max, add it up
// and store e back into the slot, in T; the write multiplies e by 2^((m_w - M) log2e) / S,
// one ex2 per warp instead of one per element. In bf16 and f16 e is rounded to T before
// the multiply, so the result carries two roundings of T instead of one: at most 2^-7
// relative in bf16 (the gate's rtol is 8e-3), 2^-10 in f16; f32 is unchanged. EX1 = 0
// keeps the single rounding (exp taken again in the write). Measured (thirteenth session,
// kevolve eval, H200, same call, us, 1024x131072 / 256x262144, the preset): bf16 158.7-158.8
// / 82.7-83.0 against 169.8-170.8 / 89.7-90.0 with EX1 = 0; f16 157.9-158.3 / 82.1-82.6
// against 169.8-170.8 / 89.4-90.1; f32 283.0-285.1 / 146.5-146.6 against 283.1-283.6 /
// 146.4-146.8; the gate's max_rel in bf16 7.6e-3 against 3.9e-3.
// Forward progress: with all G blocks resident, by induction on the step. The control
// warp publishes slice s before it gathers the row of slice s - GLAG, and publishing s
// waits only on its own block's copy and consumers, which wait on gathers of steps before
// s. A row's slices fall in at most two consecutive steps when P <= G, so the gather of
// step s waits on publications of steps <= s - GLAG + 1 <= s, all issued before any
// gather of step s. (Rows of more than G slices span more steps, and a block may hold
// several slices of one row: the kernel traps when kv::slice_span exceeds GLAG.)
// Rows that fit a slot CW times or more are packed instead (kv::slice_grid's pack): a
// slice is as many whole consecutive rows as the slot holds, one consumer warp reduces and
// writes each row, and nothing is exchanged (at 4096x1024 bf16 a slice is 16 rows). (With
// fewer rows per slot than consumer warps, packing left warps idle: bf16 16384x16384, one
// 32 KiB row per slot, ran 1429 us packed.)
// Rows whose width is no multiple of 16 bytes (or unaligned buffers) are staged by the
// control warp with ordinary loads, padded with -inf; the stores are then scalar.
// @kevolve param   CW     8 4 12 16
// @kevolve param   SLOT   32 16 24 48
// @kevolve param   SLOTS  6 3 4 5 8
// @kevolve param   LAGS   3 2 4 1
// @kevolve param   GLAG   2 1 3
// @kevolve param   STCS   1 0
// @kevolve param   BPS    1 2 3
// @kevolve param   EX1    1 0
// @kevolve param   LW     1 0
// @kevolve param   TAIL   1 0
// Presets (tried in generation 0): f32 1024x131072 and 256x262144, twelfth session:
// @kevolve preset  BPS=2 CW=4 SLOT=16 SLOTS=6
//   one step more slack for the writes and the gather (nineteenth session, bf16, us,
//   1024x131072 / 256x262144: 152.4 / 79.7 against 151.9 / 81.1 at CW=4 LAGS=3 GLAG=2):
// @kevolve preset  BPS=2 CW=8 SLOT=16 SLOTS=6 LAGS=4 GLAG=3
// @kevolve require SLOTS * SLOT * BPS <= 208
// @kevolve require (CW + 1 + LW) * 32 * BPS <= 1024
// @kevolve require LAGS + 1 < SLOTS
// @kevolve require GLAG <= LAGS
// @kevolve entry   softmax_slice
// @kevolve grid    num_sms * BPS
// @kevolve block   (CW + 1 + LW) * 32
// @kevolve smem    SLOTS * SLOT * 1024
// @kevolve scratch sync (4 + 4 * rows * ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, SLOT * 1024)) * 4 zeroed
#define VEC (16 / KV_SIZEOF_T)  // elements per 16-byte group
typedef kv::Group<16> Vec;
#define LOG2E 1.4426950408889634f
#define NT ((CW + 1 + LW) * 32)

// (max, sum of 2^((x - max) * log2e)) pairs are merged by kv::online_merge and kv::online_warp_merge.

// Arguments: buffers (x, y), sizes (rows, cols), then scratch (sync).
extern "C" __global__ void __launch_bounds__(NT, BPS)
    softmax_slice(const T* __restrict__ x, T* __restrict__ y, int rows, int cols, unsigned* __restrict__ sync) {
  extern __shared__ __align__(128) unsigned char dsm[];
  __shared__ __align__(8) unsigned long long full[SLOTS], empty[SLOTS], statd[SLOTS], finr[SLOTS];
  __shared__ float2 red[SLOTS][CW];  // the consumer warps' pairs of the slice in each slot
  __shared__ float2 fin[SLOTS];      // (-max * log2e, 1 / sum) of the row of each slot's slice
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  kv::slice_ring_init(full, empty, statd, finr, SLOTS, CW);
  // Rows that fit a slot CW times or more are packed (a row per consumer warp and more).
  // Syncs; the launch's bank is taken later, by the control warp (kv::slice_bank), so the
  // first copies need not wait for the launch counter's atomic.
  kv::SliceGrid sg = kv::slice_grid(sync, rows, cols, VEC, SLOT * 1024 / KV_SIZEOF_T, CW, true);
  const int P = sg.parts, steps = sg.steps;
  kv::slice_guard(sg, GLAG);  // traps on rows longer than about G * GLAG slots, rather than risk a hang
  const bool al = cols % VEC == 0 && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y)) & 15) == 0;
  auto slot_ptr = [&](int s) { return reinterpret_cast<T*>(dsm + (size_t)(s % SLOTS) * SLOT * 1024); };
  auto phase = [](int s) { return (unsigned)(s / SLOTS) & 1u; };

  if (sg.pack) {
    // Rows that fit one slot: a slice is sg.pack whole consecutive rows (row i at i * rs in
    // the slot), each reduced and written by one consumer warp; nothing is exchanged.
    const int rs = al ? cols : (cols + VEC - 1) / VEC * VEC;  // the rows' stride in the slot
    const int ngr = (cols + VEC - 1) / VEC;
    if (warp == 0) {
      auto fill = [&](int s) {
        kv::slice_fill_rows(sg, s, x, rows, cols, rs, slot_ptr(s), &full[s % SLOTS], al,
                            kv::from_float<T>(kv::neg_inf()));
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
          float2 p = make_float2(kv::neg_inf(), 0.f);
          for (int g = lane; g < ngr; g += 32) {
            kv::online_add16(p, sv[g]);  // -inf inputs (masks) add 0
          }
          p = kv::online_warp_merge(p);
          const float nml = -p.x * LOG2E, inv = kv::rcp(p.y);
          for (int g = lane; g < ngr; g += 32) {
            float f[VEC];
            kv::unpack(sv[g], f);
#pragma unroll
            for (int k = 0; k < VEC; ++k) f[k] = kv::ex2(fmaf(f[k], LOG2E, nml)) * inv;
            kv::store16<STCS>(ys, g, cols, kv::pack<16>(f), al);
          }
        }
        __syncwarp();
        if (lane == 0) kv::mbar_arrive(&empty[s % SLOTS]);
      }
    }
    return;
  }

  // Stage slice s in its slot (kv::slice_fill): one bulk copy (lane 0), or ordinary loads padded with -inf.
  auto fill = [&](int s) {
    kv::slice_fill(sg, s, x, cols, VEC, slot_ptr(s), &full[s % SLOTS], al, kv::from_float<T>(kv::neg_inf()));
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
    // The gather of the row of slice t: the row's P pairs merged in part order. pre0 and pre1
    // are this lane's first two slots, asked for earlier (0: not yet published).
    auto gather_row = [&](int t, unsigned long long pre0, unsigned long long pre1) {
      int trow, tc0, tn;
      kv::slice_at(sg, t, trow, tc0, tn, cols);
      const float2* pr = sg.part + (size_t)trow * P;
      float2 p = make_float2(kv::neg_inf(), 0.f);
      for (int k = lane; k < P; k += 32) {
        unsigned long long bits = k == lane ? pre0 : k == lane + 32 ? pre1 : 0ull;
        for (int spins = 0; bits == 0ull && (bits = kv::slot_bits(pr + k)) == 0ull;)
          if (++spins > 8) __nanosleep(64);
        p = kv::online_merge(p, kv::slot_value(bits));
      }
      p = kv::online_warp_merge(p);
      if (lane == 0) {
        fin[t % SLOTS] = make_float2(-p.x * LOG2E, kv::rcp(p.y));
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
      if (s < steps) {  // publish slice s's pair
        int row, c0, n;
        kv::slice_at(sg, s, row, c0, n, cols);
        kv::mbar_wait(&statd[s % SLOTS], phase(s));
        float2 p = lane < CW ? red[s % SLOTS][lane] : make_float2(kv::neg_inf(), 0.f);
        p = kv::online_warp_merge(p);
        if (lane == 0) {
          const int c = c0 / sg.slice_elems;
          kv::slot_put(sg.part + (size_t)row * P + c, p);
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
    for (int s = 0; s < steps + LAGS; ++s) {
      if (s < steps) {  // (max, sum) of this warp's share of slice s
        int row, c0, n;
        kv::slice_at(sg, s, row, c0, n, cols);
        const int ng = (n + VEC - 1) / VEC;
        kv::mbar_wait(&full[s % SLOTS], phase(s));
        float2 p = make_float2(kv::neg_inf(), 0.f);
#if EX1
        Vec* sw = reinterpret_cast<Vec*>(slot_ptr(s));
        float m = kv::neg_inf();
#pragma unroll 4
        for (int g = cw * 32 + lane; g < ng; g += CW * 32) {
          const Vec u = sw[g];
          m = fmaxf(m, kv::word_max(kv::word_max2(kv::word_max2(u.w[0], u.w[1]), kv::word_max2(u.w[2], u.w[3]))));
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float nml = m == kv::neg_inf() ? 0.f : -m * LOG2E;
        float s0 = 0.f, s1 = 0.f;
#pragma unroll 2
        for (int g = cw * 32 + lane; g < ng; g += CW * 32) {
          float f[VEC];
          kv::unpack(sw[g], f);
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            f[k] = kv::ex2(fmaf(f[k], LOG2E, nml));
            if (k & 1) s1 += f[k];
            else s0 += f[k];
          }
          sw[g] = kv::pack<16>(f);  // e in place, for the write pass
        }
        p = make_float2(m, kv::reduce_sum<true>(s0 + s1, nullptr));
        __syncwarp();
#else
        const Vec* sv = reinterpret_cast<const Vec*>(slot_ptr(s));
#pragma unroll 2
        for (int g = cw * 32 + lane; g < ng; g += CW * 32) {
          kv::online_add16(p, sv[g]);  // -inf inputs (masks) add 0
        }
        p = kv::online_warp_merge(p);
#endif
        if (lane == 0) {
          red[s % SLOTS][cw] = p;
          kv::mbar_arrive(&statd[s % SLOTS]);
        }
      }
      if (s >= LAGS) {  // y = 2^(x*log2e - M*log2e) / S for this warp's share of slice s - LAGS
        const int t = s - LAGS;
        int row, c0, n;
        kv::slice_at(sg, t, row, c0, n, cols);
        const int ng = (n + VEC - 1) / VEC;
        kv::mbar_wait(&finr[t % SLOTS], phase(t));
        const float2 fv = fin[t % SLOTS];
        const Vec* sv = reinterpret_cast<const Vec*>(slot_ptr(t));
        T* const ys = y + (size_t)row * cols + c0;
#if EX1
        // The slot holds e = 2^((x - m_w) log2e); red still holds this warp's m_w (the slot's
        // red entries are rewritten only after the slot is refilled).
        const float mw = red[t % SLOTS][cw].x;
        const float scale = mw == kv::neg_inf() ? 0.f : kv::ex2(fmaf(mw, LOG2E, fv.x)) * fv.y;
#endif
#pragma unroll 2
        for (int g = cw * 32 + lane; g < ng; g += CW * 32) {
          float f[VEC];
          kv::unpack(sv[g], f);
#if EX1
#pragma unroll
          for (int k = 0; k < VEC; ++k) f[k] *= scale;
#else
#pragma unroll
          for (int k = 0; k < VEC; ++k) f[k] = kv::ex2(fmaf(f[k], LOG2E, fv.x)) * fv.y;
#endif
          kv::store16<STCS>(ys, g, n, kv::pack<16>(f), al);
        }
#if EX1
        // This thread wrote e into the slot (generic proxy); the refill is a bulk copy (async
        // proxy): order the two before the slot is released.
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
        __syncwarp();
        if (lane == 0) kv::mbar_arrive(&empty[t % SLOTS]);
      }
    }
  }
}

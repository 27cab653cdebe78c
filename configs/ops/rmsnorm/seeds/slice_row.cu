// rmsnorm seed for long rows that reads x once, without clusters: softmax's slice_row
// (see there for the design, the barriers and the forward-progress argument) with a sum
// of squares per slice. A persistent grid (BPS blocks per SM, all resident); rows are cut
// into P slices of at most SLOT KiB (kv::slice_grid), slice j = row * P + part belonging
// to block j % G at its step j / G. Warp 0 (control; two warps with LW, below) bulk-copies slices into a ring of
// SLOTS shared-memory slots, adds the consumer warps' sums of squares of each slice and
// publishes the slice's sum, then gathers the row of the slice GLAG steps back (its P
// sums, in part order: every slice of a row gets the same bits) and hands rsqrt(sum / cols
// + eps) to the consumers. Warps 1..CW (consumers) reduce their share of slice s, then
// write their share of slice s - LAGS from shared memory, w read with 16-byte loads
// through the read-only path. x is read from DRAM once, never from L2 again.
// LW=1 (the default): warp 0 only loads (refilling each slot as soon as the consumers release
// it), warp 1 is the control warp and the consumers are warps 2..CW + 1, as in softmax's
// slice_row (see there for why). Measured (H200, eighteenth session, kevolve eval --sweep
// LW=0,1 at the STAY preset, us, 1024x131072 / 256x262144 / 4096x32768): bf16 154.7 / 81.3 /
// 156.4 -> 153.2 / 79.9 / 153.9, f16 154.1 / 81.2 / 156.0 -> 153.0 / 80.3 / 156.2, f32 289.8 /
// 148.5 / 296.6 -> 286.6 / 147.7 / 293.6 (rmsnorm's consumers do the least per element, so
// it gains least).
// Measured (kevolve eval, H200, twelfth session; split_row's preset in the calls before and
// after): rmsnorm f32 1024x131072 292.5 us against 312.0-312.1, 256x262144 152.8 against
// 163.3-163.5, bf16 157.3 and 85.0 against 163.3-163.5 and 87.8-89.0 (BPS 2, CW 12,
// 16 KiB x 6).
// Tried: w bulk-copied once per block into shared memory (P a divisor of G, so a block
// always takes the same part): no faster, and its slot cost loads in flight.
// Rows that fit a slot CW times or more are packed instead, as in softmax's slice_row (one
// consumer warp per row, nothing exchanged).
// Rows whose width is no multiple of 16 bytes (or unaligned buffers) are staged by the
// control warp with ordinary loads, padded with 0; w and y are then accessed element by
// element.
// TAIL=1 (the default): the drain's last GLAG gathers are asked for at once, as in
// softmax's slice_row (see there; about 1 us).
// @kevolve param   CW     8 4 12 16
// @kevolve param   SLOT   32 16 24 48
// @kevolve param   SLOTS  6 3 4 5 8
// @kevolve param   LAGS   3 2 4 1
// @kevolve param   GLAG   2 1 3
// @kevolve param   STCS   1 0
// @kevolve param   BPS    1 2 3
// @kevolve param   STAY   0 1
// @kevolve param   LW     1 0
// @kevolve param   TAIL   1 0
// Presets (tried in generation 0): the long-row winners of the twelfth session:
// @kevolve preset  BPS=2 CW=12 SLOT=16 SLOTS=6
// @kevolve preset  BPS=2 CW=8 SLOT=16 SLOTS=6
//   w kept in registers (fourteenth session: f32 286.4-287.0 / 146.8-147.7 us, bf16
//   151.9-152.3 / 79.0-79.1, against 291.0-291.4 / 154.4 and 158.1-159.1 / 84.8-85.7):
// @kevolve preset  BPS=2 CW=12 SLOT=16 SLOTS=6 STAY=1
//   one step more slack (nineteenth session, bf16, us, 1024x131072 / 256x262144: 150.4 /
//   79.4 against 150.9 / 80.1 at LAGS=3 GLAG=2):
// @kevolve preset  BPS=2 CW=12 SLOT=16 SLOTS=6 STAY=1 LAGS=4 GLAG=3
// @kevolve require SLOTS * SLOT * BPS <= 208
// @kevolve require (CW + 1 + LW) * 32 * BPS <= 1024
// @kevolve require LAGS + 1 < SLOTS
// @kevolve require GLAG <= LAGS
// STAY holds MAXG groups of w a lane for the whole launch (at most 4):
// @kevolve require STAY == 0 || SLOT * 2 <= CW * 4
// @kevolve entry   rmsnorm_slice
// @kevolve grid    STAY && ceil_div(align_up(cols, 16 / sizeof_T), SLOT * 1024 / sizeof_T) <= num_sms * BPS ? num_sms * BPS / ceil_div(align_up(cols, 16 / sizeof_T), SLOT * 1024 / sizeof_T) * ceil_div(align_up(cols, 16 / sizeof_T), SLOT * 1024 / sizeof_T) : num_sms * BPS
// @kevolve block   (CW + 1 + LW) * 32
// @kevolve smem    SLOTS * SLOT * 1024
// @kevolve scratch sync (4 + 4 * rows * ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, SLOT * 1024)) * 4 zeroed
#define VEC (16 / KV_SIZEOF_T)  // elements per 16-byte group
typedef kv::Group<16> Vec;
#define NT ((CW + 1 + LW) * 32)
#if STAY
// The most groups a lane holds: a slot's SLOT * 64 groups over CW * 32 lanes.
#define MAXG ((SLOT * 64 + CW * 32 - 1) / (CW * 32))
#endif

// Arguments: buffers (x, w, y), sizes (rows, cols), scalars (eps), then scratch (sync).
extern "C" __global__ void __launch_bounds__(NT, BPS)
    rmsnorm_slice(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int cols, float eps,
                  unsigned* __restrict__ sync) {
  extern __shared__ __align__(128) unsigned char dsm[];
  __shared__ __align__(8) unsigned long long full[SLOTS], empty[SLOTS], statd[SLOTS], finr[SLOTS];
  __shared__ float red[SLOTS][CW];  // the consumer warps' sums of squares of the slice in each slot
  __shared__ float fin[SLOTS];      // rsqrt(mean square + eps) of the row of each slot's slice
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  kv::slice_ring_init(full, empty, statd, finr, SLOTS, CW);
  // Rows that fit a slot CW times or more are packed (a row per consumer warp and more).
  // Syncs; the launch's bank is taken later, by the control warp (kv::slice_bank), so the
  // first copies need not wait for the launch counter's atomic.
  kv::SliceGrid sg = kv::slice_grid(sync, rows, cols, VEC, SLOT * 1024 / KV_SIZEOF_T, CW, true);
  const int P = sg.parts, steps = sg.steps;
  kv::slice_guard(sg, GLAG);  // traps on rows longer than about G * GLAG slots, rather than risk a hang
  const bool al = cols % VEC == 0 &&
                  ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y) | reinterpret_cast<size_t>(w)) & 15) == 0;
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
          float q = 0.f;
          for (int g = lane; g < ngr; g += 32) {
            float f[VEC];
            kv::unpack(sv[g], f);
#pragma unroll
            for (int k = 0; k < VEC; ++k) q = fmaf(f[k], f[k], q);
          }
          const float rstd = rsqrtf(kv::reduce_sum<true>(q, nullptr) / (float)cols + eps);
          for (int g = lane; g < ngr; g += 32) {
            float f[VEC], wf[VEC];
            kv::unpack(sv[g], f);
            kv::unpack(kv::load_param16(w, g, cols, al), wf);
#pragma unroll
            for (int k = 0; k < VEC; ++k) f[k] = f[k] * rstd * wf[k];
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
    // The gather of the row of slice t: the row's P sums added in part order. pre0 and pre1
    // are this lane's first two slots, asked for earlier (0: not yet published).
    auto gather_row = [&](int t, unsigned long long pre0, unsigned long long pre1) {
      int trow, tc0, tn;
      kv::slice_at(sg, t, trow, tc0, tn, cols);
      const float2* pr = sg.part + (size_t)trow * P;
      float tot = 0.f;
      for (int k = lane; k < P; k += 32) {
        unsigned long long bits = k == lane ? pre0 : k == lane + 32 ? pre1 : 0ull;
        for (int spins = 0; bits == 0ull && (bits = kv::slot_bits(pr + k)) == 0ull;)
          if (++spins > 8) __nanosleep(64);
        tot += kv::slot_value(bits).x;
      }
      tot = kv::reduce_sum<true>(tot, nullptr);
      if (lane == 0) {
        fin[t % SLOTS] = rsqrtf(tot / (float)cols + eps);
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
      if (s < steps) {  // publish slice s's sum of squares (the marker -0 keeps the slot nonzero)
        int row, c0, n;
        kv::slice_at(sg, s, row, c0, n, cols);
        kv::mbar_wait(&statd[s % SLOTS], phase(s));
        const float ss = kv::reduce_sum<true>(lane < CW ? red[s % SLOTS][lane] : 0.f, nullptr);
        if (lane == 0) {
          const int c = c0 / sg.slice_elems;
          kv::slot_put(sg.part + (size_t)row * P + c, make_float2(ss, -0.f));
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
    // this block is part blockIdx.x % P of its row, so this lane's groups of w are the same
    // at every step: loaded once, here, and kept packed in registers.
    Vec wv[MAXG];
    const bool stay = al && (int)gridDim.x % P == 0;
    if (stay) {
      const int c0 = ((int)blockIdx.x % P) * sg.slice_elems, n = max(0, min(sg.slice_elems, cols - c0));
      const int ng = (n + VEC - 1) / VEC;
#pragma unroll
      for (int j = 0; j < MAXG; ++j) {
        const int g = cw * 32 + lane + j * CW * 32;
        if (g < ng) wv[j] = kv::load_param16(w + c0, g, n, al);
      }
    }
#endif
    for (int s = 0; s < steps + LAGS; ++s) {
      if (s < steps) {  // the sum of squares of this warp's share of slice s
        int row, c0, n;
        kv::slice_at(sg, s, row, c0, n, cols);
        const int ng = (n + VEC - 1) / VEC;
        kv::mbar_wait(&full[s % SLOTS], phase(s));
        const Vec* sv = reinterpret_cast<const Vec*>(slot_ptr(s));
        float q = 0.f;
#pragma unroll 2
        for (int g = cw * 32 + lane; g < ng; g += CW * 32) {
          float f[VEC];
          kv::unpack(sv[g], f);
#pragma unroll
          for (int k = 0; k < VEC; ++k) q = fmaf(f[k], f[k], q);
        }
        q = kv::reduce_sum<true>(q, nullptr);
        if (lane == 0) {
          red[s % SLOTS][cw] = q;
          kv::mbar_arrive(&statd[s % SLOTS]);
        }
      }
      if (s >= LAGS) {  // y = x * rstd * w for this warp's share of slice s - LAGS
        const int t = s - LAGS;
        int row, c0, n;
        kv::slice_at(sg, t, row, c0, n, cols);
        const int ng = (n + VEC - 1) / VEC;
        kv::mbar_wait(&finr[t % SLOTS], phase(t));
        const float rstd = fin[t % SLOTS];
        const Vec* sv = reinterpret_cast<const Vec*>(slot_ptr(t));
        T* const ys = y + (size_t)row * cols + c0;
        const T* const wc = w + c0;
#if STAY
        if (stay) {
#pragma unroll
          for (int j = 0; j < MAXG; ++j) {
            const int g = cw * 32 + lane + j * CW * 32;
            if (g < ng) {
              float f[VEC], wf[VEC];
              kv::unpack(sv[g], f);
              kv::unpack(wv[j], wf);
#pragma unroll
              for (int k = 0; k < VEC; ++k) f[k] = f[k] * rstd * wf[k];
              kv::store_group<16, true, STCS>(ys, g, n, kv::pack<16>(f));
              kv::launder(wv[j]);  // keeps it packed: its floats are not hoisted out of the step loop
            }
          }
        } else
#endif
#pragma unroll 2
        for (int g = cw * 32 + lane; g < ng; g += CW * 32) {
          float f[VEC], wf[VEC];
          kv::unpack(sv[g], f);
          kv::unpack(kv::load_param16(wc, g, n, al), wf);
#pragma unroll
          for (int k = 0; k < VEC; ++k) f[k] = f[k] * rstd * wf[k];
          kv::store16<STCS>(ys, g, n, kv::pack<16>(f), al);
        }
        __syncwarp();
        if (lane == 0) kv::mbar_arrive(&empty[t % SLOTS]);
      }
    }
  }
}

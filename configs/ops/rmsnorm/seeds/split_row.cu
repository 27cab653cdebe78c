// rmsnorm seed for long rows without clusters: each row is cut into C chunks (C the
// number of CHUNK KiB pieces the row needs, at most num_sms), and every (row, chunk) is
// one block. A block stages its chunk in shared memory with one Hopper bulk copy
// (cp.async.bulk on an mbarrier) and sums its squares in f32; warp 0 publishes the sum in
// a scratch buffer, reads the row's C sums until all are in, and adds them in chunk order
// (every chunk of a row gets the same bits); then the block writes
// y = x * rsqrt(sum / cols + eps) * w from shared memory, w read with 16-byte loads
// through the read-only path. x is read from DRAM once and y written once.
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
// ordinary loads and padded with 0; w and y are then accessed element by element.
// @kevolve param   CHUNK   32 16 24 48 64
// @kevolve param   BLOCK   256 128 512
// @kevolve param   OCC     1536 2048 1024
// @kevolve param   STCS    0 1
// @kevolve param   LAG     12 0 8 16
// Presets (tried in generation 0): per-shape winners measured on the H200, eighth session.
//   bf16 1024x131072: 162.7 us, f32 256x262144: 163.4 us:
// @kevolve preset  BLOCK=128 CHUNK=32 LAG=8 OCC=1024 STCS=1
// @kevolve entry   rmsnorm_split
// @kevolve grid    rows * min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024)) * (LAG > 0 && min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024)) >= 4 ? 2 : 1)
// @kevolve block   BLOCK
// @kevolve smem    align_up(ceil_div(cols, min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024))), 16 / sizeof_T) * sizeof_T
// @kevolve scratch sync (4 + 4 * rows * min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024))) * 4 zeroed
#define VEC (16 / KV_SIZEOF_T)  // elements per 16-byte group
// A 16-byte group as raw bits; 16-bit types stay packed two per word (kv::unpack and
// kv::pack convert them with 32-bit operations).
typedef kv::Group<16> Vec;

// Cross-block signalling: a row's partials live in 64-bit slots (kv::slot_put,
// kv::slot_bits), each written and read whole, so a slot is its own flag: all-zero bits
// mean "not yet". The second word is stored with its sign bit set (a nonnegative value,
// or a marker), so no partial has all-zero bits. Publishing is one store, waiting is
// reading the slots: one round trip to L2 each, where a counter would add two more.

// Arguments: buffers (x, w, y), sizes (rows, cols), scalars (eps), then scratch (sync).
extern "C" __global__ void __launch_bounds__(BLOCK, OCC / BLOCK)
    rmsnorm_split(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows, int cols, float eps,
                  unsigned* __restrict__ sync) {
  extern __shared__ __align__(128) unsigned char dsm[];
  __shared__ __align__(8) unsigned long long bar;
  __shared__ float red0[32];
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
  const bool al = cols % VEC == 0 && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y) | reinterpret_cast<size_t>(w)) & 15) == 0;
  const T* const xs = x + (size_t)row * cols + c0;
  T* const ys = y + (size_t)row * cols + c0;

  if (al) {
    if (tid == 0) {
      kv::mbar_init(&bar);
      kv::mbar_expect(&bar, (unsigned)(n * KV_SIZEOF_T));
      // The L2 hint is the kind (kv::kL2None 0, kL2EvictLast 1, kL2EvictFirst 2): kind 1
      // (statistics, re-read later) asks L2 to keep the bytes (evict_last), kind 2 (the
      // re-read) to drop them first; kind 0 gives no hint (evict_first there measured 4% slower).
      if (n > 0) kv::bulk_load(st, xs, (unsigned)(n * KV_SIZEOF_T), &bar, kind);
    }
    __syncthreads();
    kv::mbar_wait(&bar, 0);
  } else {
    for (int k = tid; k < ng * VEC; k += BLOCK) st[k] = k < n ? xs[k] : kv::from_float<T>(0.f);
    __syncthreads();
  }

  float ss = 0.f;  // the chunk's sum of squares (kind 2 skips it)
  if (kind != 2) {
    float s = 0.f;
#pragma unroll 4
    for (int g = tid; g < ng; g += BLOCK) {
      float f[VEC];
      kv::unpack(sv[g], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) s = fmaf(f[k], f[k], s);
    }
    ss = kv::reduce_sum<false>(s, red0);  // every thread; 0 for an empty chunk
  }
  if (warp == 0) {
    float tot = ss;
    if (C > 1) {
      float2* const pr = part + (size_t)row * C;
      if (kind != 2 && lane == 0) {
        kv::slot_put(pr + chunk, make_float2(ss, -0.f));
        kv::slot_put(other + (size_t)row * C + chunk, make_float2(0.f, 0.f));  // for launch e + 1
      }
      if (kind != 1) {
        tot = 0.f;
        for (int k = lane; k < C; k += 32) {
          unsigned long long bits;
          for (int spins = 0; (bits = kv::slot_bits(pr + k)) == 0ull;)
            if (++spins > 8) __nanosleep(32);
          tot += kv::slot_value(bits).x;
        }
        tot = kv::reduce_sum<true>(tot, nullptr);
      }
    }
    if (lane == 0) fin[0] = rsqrtf(tot / (float)cols + eps);
  }
  if (kind == 1) return;  // statistics only: a later block writes this chunk
  __syncthreads();
  const float rstd = fin[0];
  const T* const ws_w = w + c0;
  // y from shared memory.
#pragma unroll 2
  for (int g = tid; g < ng; g += BLOCK) {
    float f[VEC], wf[VEC];
    kv::unpack(sv[g], f);
    kv::unpack(kv::load_param16(ws_w, g, n, al), wf);
#pragma unroll
    for (int k = 0; k < VEC; ++k) f[k] = f[k] * rstd * wf[k];
    kv::store16<STCS>(ys, g, n, kv::pack<16>(f), al);  // STCS: streaming store, y is not read again
  }
}

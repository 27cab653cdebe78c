// softmax seed for long rows without clusters: each row is cut into C chunks (C the
// number of CHUNK KiB pieces the row needs, at most num_sms), and every (row, chunk) is
// one block. A block stages its chunk in shared memory with one Hopper bulk copy
// (cp.async.bulk on an mbarrier) and reduces it in one pass to (max, sum of exp): each
// thread keeps a running pair, rescaling its sum when its max grows. Warp 0 publishes
// the block's pair in a scratch buffer, reads the row's C pairs until all are in, and
// combines them (in chunk order, so every chunk of a row gets the same bits); then
// the block writes y = 2^(x*log2e - M*log2e) / S from shared memory. x is read from DRAM
// once and y written once; a block syncs twice.
// Why not a cluster: a cluster's blocks must all fit in one GPC at once, and they move
// in lock step (ncu showed DRAM at 58-66% for cluster_row/bulk_row on these rows); here
// a row's chunks are ordinary blocks, placed wherever a slot is free, and an SM holds
// several blocks at different stages (loading, waiting, writing).
// Forward progress: blocks take work items in ticket order (an atomic counter), so a
// waiting block only ever waits for items that are running or next to be taken; with at
// least C blocks resident (C <= num_sms guarantees it) the grid cannot deadlock, whatever
// order the hardware dispatches blocks in. (blockIdx order measured 3-4% faster at the
// longest rows before LAG, since no atomic precedes the load; with LAG, 0-2% (H200, tenth
// session). It deadlocks if the hardware ever dispatches out of order, which CUDA does not
// promise; not offered.)
// Tried and measured slower: a persistent grid taking tickets with the next chunk
// prefetched into a second stage (a chunk taken as "next" is published only after its
// block's current row completes, which chains the rows: 6x slower); a counter per row
// instead of self-flagging slots, and two smem passes (max, then sum) instead of one:
// within 1-2%.
// The scratch buffer `sync` holds a 64-bit ticket counter, then two banks of 64-bit
// (row, chunk) slots. Tickets are never reset: ticket t is position t % G (G blocks) of
// launch e = t / G (with LAG, positions map to statistics and write items, below), and
// launch e uses bank e & 1. A block zeroes its own slot in the other bank when it
// publishes, so the next launch finds that bank all zero. The scratch therefore needs
// zeroing once, at allocation (one buffer per shape), and nothing is reset at the end,
// so no reset has to be ordered after other blocks' slot reads. (An earlier version
// counted readers per row and had the last one clear the slots; ordering that count
// after the reads with an acq_rel atomic cost 8-11% at the long rows.)
// LAG (MiB; 0 = off) splits each item of a row of 4 chunks or more in two, and doubles the
// grid: a statistics item loads its chunk, reduces and publishes it, and exits without
// waiting; the write item for the same chunk comes about LAG MiB of x later in ticket
// order, re-reads the chunk (from L2: the first load asks L2 to keep it, evict_last, the
// second to drop it) and finds the row's pairs in. A block no longer holds its shared
// memory while the row's slowest chunk arrives, at the price of an L2 re-read. The order
// is L statistics items, then write i and statistics L + i alternating, then the last L
// writes (L = LAG MiB in chunks, at least C, at most G): every statistics item of a row
// precedes the row's writes, so a waiting block still only waits on running items.
// Measured (kevolve eval, H200, same call, LAG 12 against 0): softmax f32 1024x131072
// 313.7 -> 306.3 us (295.7 with STCS), 256x262144 161.9 -> 158.2 (153.2); bf16 160.1 ->
// 158.7 (153.7), 88.3 -> 85.0 (82.8). LAG 16 and more re-read partly from DRAM (slower),
// LAG 2-6 waits longer; two chunks per row (16384x16384 f32) were 2-3% slower, so rows
// of fewer than 4 chunks keep one item per chunk.
// Rows of one chunk (C = 1) skip the scratch: a block per row.
// Rows whose width is no multiple of 16 bytes (or unaligned buffers) are staged by
// ordinary loads and padded with -inf; the stores are then scalar.
// @kevolve param   CHUNK   32 16 24 48 64
// @kevolve param   BLOCK   256 128 512
// @kevolve param   OCC     2048 1536 1024
// @kevolve param   STCS    0 1
// @kevolve param   LAG     12 0 8 16
// Presets (tried in generation 0): per-shape winners measured on the H200, eighth session.
//   every dtype at 1024x131072 and 256x262144 (f32: 296.4, 153.2 us):
// @kevolve preset  BLOCK=128 CHUNK=32 LAG=12 OCC=1024 STCS=1
//   bf16/f16 4096x32768 and 16384x16384 (bf16: 138.6, 264.1 us):
// @kevolve preset  BLOCK=256 CHUNK=64 LAG=12 OCC=1024
// @kevolve entry   softmax_split
// @kevolve grid    rows * min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024)) * (LAG > 0 && min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024)) >= 4 ? 2 : 1)
// @kevolve block   BLOCK
// @kevolve smem    align_up(ceil_div(cols, min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024))), 16 / sizeof_T) * sizeof_T
// @kevolve scratch sync (4 + 4 * rows * min(num_sms, ceil_div(align_up(cols, 16 / sizeof_T) * sizeof_T, CHUNK * 1024))) * 4 zeroed
#define VEC (16 / KV_SIZEOF_T)  // elements per 16-byte group
typedef kv::Group<16> Vec;
#define LOG2E 1.4426950408889634f

// ---- cross-block signalling through global memory ----
// A row's pairs live in 64-bit slots (kv::slot_put / kv::slot_bits), each written and read
// whole, so a slot is its own flag: all-zero bits mean "not yet", and no pair has them (a
// chunk's sum is >= 1, an empty chunk's pair is (-inf, 0)). Publishing is one store,
// waiting is reading the slots: one round trip to L2 each, where a counter would add two more.

// (max, sum of 2^((x - max) * log2e)) pairs are merged by kv::online_merge and kv::online_warp_merge.

// Arguments: buffers (x, y), sizes (rows, cols), then scratch (sync).
extern "C" __global__ void __launch_bounds__(BLOCK, OCC / BLOCK)
    softmax_split(const T* __restrict__ x, T* __restrict__ y, int rows, int cols, unsigned* __restrict__ sync) {
  extern __shared__ __align__(128) unsigned char dsm[];
  __shared__ __align__(8) unsigned long long bar;
  __shared__ float2 red[32];
  __shared__ float fin[2];  // -M * log2e and 1 / S for this row
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
  const bool al = cols % VEC == 0 && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y)) & 15) == 0;
  const T* const xs = x + (size_t)row * cols + c0;
  T* const ys = y + (size_t)row * cols + c0;

  if (al) {
    if (tid == 0) {
      kv::mbar_init(&bar);
      kv::mbar_expect(&bar, (unsigned)(n * KV_SIZEOF_T));
      // The L2 hint is the kind (kv::L2Hint): kind 1 (statistics, re-read later) asks L2 to
      // keep the bytes (evict_last), kind 2 (the re-read) to drop them first; kind 0 gives
      // no hint (evict_first there measured 4% slower).
      if (n > 0) kv::bulk_load(st, xs, (unsigned)(n * KV_SIZEOF_T), &bar, kind);
    }
    __syncthreads();
    kv::mbar_wait(&bar, 0);
  } else {
    const T neg = kv::from_float<T>(kv::neg_inf());
    for (int k = tid; k < ng * VEC; k += BLOCK) st[k] = k < n ? xs[k] : neg;
    __syncthreads();
  }

  // One pass: each thread's running (max, sum), then the block's.
  float2 p = make_float2(kv::neg_inf(), 0.f);
  if (kind != 2) {
#pragma unroll 4
    for (int g = tid; g < ng; g += BLOCK) {
      kv::online_add16(p, sv[g]);  // -inf inputs (masks) add 0
    }
    p = kv::online_warp_merge(p);
    if (lane == 0) red[warp] = p;
    __syncthreads();
  }
  if (warp == 0) {
    if (kind != 2) {
      p = lane < BLOCK / 32 ? red[lane] : make_float2(kv::neg_inf(), 0.f);
      p = kv::online_warp_merge(p);  // the block's pair, in every lane
    }
    if (C > 1) {
      // Publish it; read the row's C slots until all are in, merging in chunk order.
      float2* const pr = part + (size_t)row * C;
      if (kind != 2 && lane == 0) {
        kv::slot_put(pr + chunk, p);
        kv::slot_put(other + (size_t)row * C + chunk, make_float2(0.f, 0.f));  // for launch e + 1
      }
      if (kind != 1) {
        p = make_float2(kv::neg_inf(), 0.f);
        for (int k = lane; k < C; k += 32) {
          unsigned long long b;
          for (int spins = 0; (b = kv::slot_bits(pr + k)) == 0ull;)
            if (++spins > 8) __nanosleep(32);
          p = kv::online_merge(p, kv::slot_value(b));
        }
        p = kv::online_warp_merge(p);
      }
    }
    if (lane == 0) {
      fin[0] = -p.x * LOG2E;
      fin[1] = kv::rcp(p.y);
    }
  }
  if (kind == 1) return;  // statistics only: a later block writes this chunk
  __syncthreads();
  const float nml = fin[0], inv = fin[1];

  // y = 2^(x*log2e - M*log2e) / S, from shared memory.
#pragma unroll 4
  for (int g = tid; g < ng; g += BLOCK) {
    float f[VEC];
    kv::unpack(sv[g], f);
#pragma unroll
    for (int k = 0; k < VEC; ++k) f[k] = kv::ex2(fmaf(f[k], LOG2E, nml)) * inv;
    kv::store16<STCS>(ys, g, n, kv::pack<16>(f), al);
  }
}

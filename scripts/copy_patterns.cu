// Copy ceilings of access patterns on the GPU (a developer tool, not part of kevolve): plain
// 16-byte copies (a persistent grid-stride grid, and one thread per 16 bytes as PyTorch's
// copy launches), warps taking 8 KiB chunks in static or ticket order, and slice_row's
// pattern without its statistics (a persistent grid, bulk copies into a ring of 16 KiB
// shared-memory slots, consumer warps storing 16 bytes a lane, right away or LAG steps
// behind), its slices in static order (slice s * G + block) or taken from a global ticket
// counter; and a block per chunk, not persistent, that holds its chunk in shared memory
// until every chunk of its row is in (rowwait). Median of 25 launches, L2 flushed by a 512 MiB memset before each.
//   nvcc -O3 -std=c++17 -arch=sm_90a -I evaluators/device -include kevolve.h -DKV_DTYPE_F32 \
//     -DKV_SIZEOF_T=4 -o exp/copy_patterns scripts/copy_patterns.cu
//   (device) exp/copy_patterns 256; exp/copy_patterns 512     # MiB read (as many written)
// Twentieth session, H200: see docs/BENCHMARKS.md ("persistent grids and the copy ceiling").
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

__global__ void plain_copy(const uint4* __restrict__ x, uint4* __restrict__ y, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] = x[i];
}
__global__ void plain_copy4(const uint4* __restrict__ x, uint4* __restrict__ y, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = x[i], b = x[i + stride], c = x[i + 2 * stride], d = x[i + 3 * stride];
    y[i] = a; y[i + stride] = b; y[i + 2 * stride] = c; y[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) y[i] = x[i];
}
// Ring: slices of SLOT KiB, slice j = s * G + blockIdx.x at step s; warp 0 loads (bulk copies),
// warps 1..cw store, each writing slice s - lag after landing slice s (lag 0: right away).
template <int SLOTS>
__global__ void ring_copy(const uint4* __restrict__ x, uint4* __restrict__ y, long long nslices, int slice_bytes,
                          int cw, int lag, int stcs) {
  extern __shared__ __align__(128) unsigned char dsm[];
  __shared__ __align__(8) unsigned long long full[SLOTS], empty[SLOTS];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0)
    for (int k = 0; k < SLOTS; ++k) { kv::mbar_init(&full[k], 1); kv::mbar_init(&empty[k], cw); }
  __syncthreads();
  const long long G = gridDim.x;
  const int steps = blockIdx.x < nslices ? (int)((nslices - 1 - blockIdx.x) / G + 1) : 0;
  auto slot = [&](int s) { return dsm + (size_t)(s % SLOTS) * slice_bytes; };
  auto phase = [](int s) { return (unsigned)(s / SLOTS) & 1u; };
  if (warp == 0) {
    for (int s = 0; s < steps; ++s) {
      if (s >= SLOTS) kv::mbar_wait(&empty[s % SLOTS], phase(s - SLOTS));
      if (lane == 0) {
        const long long j = s * G + blockIdx.x;
        kv::mbar_expect(&full[s % SLOTS], (unsigned)slice_bytes);
        kv::bulk_load(slot(s), reinterpret_cast<const char*>(x) + j * slice_bytes, (unsigned)slice_bytes, &full[s % SLOTS]);
      }
    }
  } else if (warp <= cw) {
    const int c = warp - 1, ng = slice_bytes / 16;
    for (int s = 0; s < steps + lag; ++s) {
      if (s < steps) kv::mbar_wait(&full[s % SLOTS], phase(s));
      const int t = s - lag;
      if (t >= 0 && t < steps) {
        if (lag) kv::mbar_wait(&full[t % SLOTS], phase(t));
        const uint4* sv = reinterpret_cast<const uint4*>(slot(t));
        uint4* yt = reinterpret_cast<uint4*>(reinterpret_cast<char*>(y) + (t * G + blockIdx.x) * (long long)slice_bytes);
        for (int g = c * 32 + lane; g < ng; g += cw * 32) {
          if (stcs) __stcs(yt + g, sv[g]);
          else yt[g] = sv[g];
        }
        __syncwarp();
        if (lane == 0) kv::mbar_arrive(&empty[t % SLOTS]);
      }
    }
  }
}
// One warp copies 8 KiB chunk t: 16 loads of 16 bytes a lane in flight, then the stores.
__device__ __forceinline__ void copy_chunk(const uint4* __restrict__ x, uint4* __restrict__ y, long long t, int lane) {
  const uint4* xs = x + t * 512;
  uint4* ys = y + t * 512;
  uint4 v[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) v[k] = xs[k * 32 + lane];
#pragma unroll
  for (int k = 0; k < 16; ++k) ys[k * 32 + lane] = v[k];
}
// Persistent copy, chunks taken in ticket order: each warp takes 8 KiB chunks from a global counter.
__global__ void ticket_copy(const uint4* __restrict__ x, uint4* __restrict__ y, long long nchunks, unsigned long long* ctr) {
  const int lane = threadIdx.x % 32;
  for (;;) {
    unsigned long long t = 0;
    if (lane == 0) t = atomicAdd(ctr, 1ull);
    t = __shfl_sync(0xffffffffu, t, 0);
    if ((long long)t >= nchunks) return;
    copy_chunk(x, y, (long long)t, lane);
  }
}
// The same chunks in static order (chunk k * warps + warp): the ticket's effect alone.
__global__ void static_copy(const uint4* __restrict__ x, uint4* __restrict__ y, long long nchunks) {
  const int lane = threadIdx.x % 32;
  const long long nw = (long long)gridDim.x * (blockDim.x / 32), gw = blockIdx.x * (long long)(blockDim.x / 32) + threadIdx.x / 32;
  for (long long t = gw; t < nchunks; t += nw) {
    copy_chunk(x, y, t, lane);
  }
}
// The ring, slices taken in ticket order by the loader (the next ticket asked for while a slice loads).
template <int SLOTS>
__global__ void ring_ticket(const uint4* __restrict__ x, uint4* __restrict__ y, long long nslices, int slice_bytes,
                            int cw, unsigned long long* ctr) {
  extern __shared__ __align__(128) unsigned char dsm[];
  __shared__ __align__(8) unsigned long long full[SLOTS], empty[SLOTS];
  __shared__ long long idx[SLOTS];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0)
    for (int k = 0; k < SLOTS; ++k) { kv::mbar_init(&full[k], 1); kv::mbar_init(&empty[k], cw); }
  __syncthreads();
  auto slot = [&](int s) { return dsm + (size_t)(s % SLOTS) * slice_bytes; };
  auto phase = [](int s) { return (unsigned)(s / SLOTS) & 1u; };
  if (warp == 0) {
    if (lane == 0) {
      long long nxt = (long long)atomicAdd(ctr, 1ull);
      for (int s = 0;; ++s) {
        if (s >= SLOTS) kv::mbar_wait(&empty[s % SLOTS], phase(s - SLOTS));
        const long long j = nxt;
        idx[s % SLOTS] = j;
        if (j >= nslices) { kv::mbar_arrive(&full[s % SLOTS]); break; }
        kv::mbar_expect(&full[s % SLOTS], (unsigned)slice_bytes);
        kv::bulk_load(slot(s), reinterpret_cast<const char*>(x) + j * slice_bytes, (unsigned)slice_bytes, &full[s % SLOTS]);
        nxt = (long long)atomicAdd(ctr, 1ull);
      }
    }
  } else if (warp <= cw) {
    const int c = warp - 1, ng = slice_bytes / 16;
    for (int s = 0;; ++s) {
      kv::mbar_wait(&full[s % SLOTS], phase(s));
      const long long j = idx[s % SLOTS];
      if (j >= nslices) break;
      const uint4* sv = reinterpret_cast<const uint4*>(slot(s));
      uint4* yt = reinterpret_cast<uint4*>(reinterpret_cast<char*>(y) + j * (long long)slice_bytes);
      for (int g = c * 32 + lane; g < ng; g += cw * 32) __stcs(yt + g, sv[g]);
      __syncwarp();
      if (lane == 0) kv::mbar_arrive(&empty[s % SLOTS]);
    }
  }
}
// A block per chunk of cb bytes, not persistent, chunks taken in ticket order (a block takes
// its ticket when it starts). Chunk t belongs to row t / P. The block bulk-copies its chunk
// into shared memory, reduces it (as a row op's statistics would), counts itself in on the
// row's counter, waits until all P chunks of its row are in, then writes the chunk from
// shared memory: the copy ceiling of a non-persistent design that holds each slice on-chip
// until its row's statistics are known. Deadlock-free while P blocks fit on the GPU at
// once: the unfinished block with the lowest ticket starts its row, and every block up to
// its row's end has started once P blocks are resident. The counters are never reset:
// launch number `epoch` (1, 2, ...) waits for P * epoch.
__global__ void rowwait_copy(const uint4* __restrict__ x, uint4* __restrict__ y, long long nchunks, int cb, int P,
                             unsigned epoch, unsigned long long* ctr, unsigned* rowctr, int stcs, unsigned* sink) {
  extern __shared__ __align__(128) unsigned char dsm[];
  __shared__ __align__(8) unsigned long long full;
  __shared__ long long tk;
  __shared__ unsigned red[32];
  if (threadIdx.x == 0) {
    kv::mbar_init(&full, 1);
    tk = (long long)atomicAdd(ctr, 1ull);
  }
  __syncthreads();
  const long long t = tk;
  if (t >= nchunks) return;
  if (threadIdx.x == 0) {
    kv::mbar_expect(&full, (unsigned)cb);
    kv::bulk_load(dsm, reinterpret_cast<const char*>(x) + t * cb, (unsigned)cb, &full);
  }
  kv::mbar_wait(&full, 0);
  const uint4* sv = reinterpret_cast<const uint4*>(dsm);
  const int ng = cb / 16;
  unsigned acc = 0;
  for (int g = threadIdx.x; g < ng; g += blockDim.x) {
    const uint4 v = sv[g];
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned sum = 0;
    for (int i = 0; i < (int)blockDim.x / 32; ++i) sum += red[i];
    if (sum == 0x9e3779b9u) *sink = sum;  // keeps the reduction alive
    unsigned* rc = rowctr + t / P;
    atomicAdd(rc, 1u);
    const unsigned want = (unsigned)P * epoch;
    for (;;) {
      unsigned c;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(c) : "l"(rc) : "memory");
      if (c >= want) break;
      __nanosleep(32);
    }
  }
  __syncthreads();
  uint4* yt = y + t * ng;
  for (int g = threadIdx.x; g < ng; g += blockDim.x) {
    if (stcs) __stcs(yt + g, sv[g]);
    else yt[g] = sv[g];
  }
}
int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? atol(argv[1]) : 256;  // bytes read (the same written)
  const size_t bytes = mib << 20, n = bytes / 16;
  int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint4 *x, *y; char* flush;
  CK(cudaMalloc(&x, bytes)); CK(cudaMalloc(&y, bytes)); CK(cudaMemset(x, 1, bytes));
  const size_t fl = 512u << 20; CK(cudaMalloc(&flush, fl));
  unsigned long long* ctr; CK(cudaMalloc(&ctr, 8));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  auto time = [&](const char* name, auto&& launch) {
    for (int i = 0; i < 3; ++i) { CK(cudaMemsetAsync(ctr, 0, 8)); launch(); }
    CK(cudaDeviceSynchronize());
    std::vector<float> us;
    for (int i = 0; i < 25; ++i) {
      CK(cudaMemsetAsync(flush, i, fl));
      CK(cudaMemsetAsync(ctr, 0, 8));
      CK(cudaEventRecord(a)); launch(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
      float m; CK(cudaEventElapsedTime(&m, a, b)); us.push_back(m * 1000.f);
    }
    CK(cudaGetLastError());
    std::sort(us.begin(), us.end());
    const float med = us[us.size() / 2];
    printf("%-44s %4zu MiB read: median %8.2f us  %6.0f GB/s (read + written)\n", name, mib, med, 2.0 * bytes / med / 1e3);
  };
  time("static copy (warps, 8 KiB), 264 x 1024", [&] { static_copy<<<sms * 2, 1024>>>(x, y, (long long)(bytes / 8192)); });
  time("ticket copy (warps, 8 KiB), 264 x 1024", [&] { ticket_copy<<<sms * 2, 1024>>>(x, y, (long long)(bytes / 8192), ctr); });
  time("ticket copy (warps, 8 KiB), 132 x 8 x 256", [&] { ticket_copy<<<sms * 8, 256>>>(x, y, (long long)(bytes / 8192), ctr); });
  for (int cw : {8, 12}) {
    const int sb = 16384, smem = sb * 6;
    char name[96];
    snprintf(name, sizeof name, "ring 16 KiB x 6 ticket order, %d warps, 2/SM", cw);
    CK(cudaFuncSetAttribute(ring_ticket<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    time(name, [&] { ring_ticket<6><<<sms * 2, (cw + 1) * 32, smem>>>(x, y, (long long)(bytes / sb), sb, cw, ctr); });
  }
  time("plain copy, 264 x 1024 threads", [&] { plain_copy<<<sms * 2, 1024>>>(x, y, n); });
  time("plain copy, 8 x 132 x 256, grid-stride", [&] { plain_copy<<<sms * 8, 256>>>(x, y, n); });
  time("plain copy unroll 4, 8 x 132 x 256", [&] { plain_copy4<<<sms * 8, 256>>>(x, y, n); });
  time("plain copy, one thread per 16 B", [&] { plain_copy<<<(unsigned)((n + 255) / 256), 256>>>(x, y, n); });
  // rowwait: rows of row_kib KiB (P = row_kib / chunk_kib chunks), a block of 256 threads per chunk.
  {
    const size_t max_rows = bytes / (16 * 1024);
    unsigned* rowctr; CK(cudaMalloc(&rowctr, max_rows * 4));
    unsigned* sink; CK(cudaMalloc(&sink, 4));
    struct RW { int chunk_kib, row_kib, stcs; };
    const RW rws[] = {{16, 16, 1}, {32, 32, 1}, {16, 256, 1}, {32, 256, 1}, {32, 256, 0}, {16, 512, 1}, {32, 512, 1}, {64, 512, 1}};
    for (const RW& c : rws) {
      const int cb = c.chunk_kib * 1024, P = c.row_kib / c.chunk_kib;
      CK(cudaMemset(rowctr, 0, max_rows * 4));
      unsigned epoch = 0;
      CK(cudaFuncSetAttribute(rowwait_copy, cudaFuncAttributeMaxDynamicSharedMemorySize, cb));
      const long long nchunks = (long long)(bytes / cb);
      char name[96];
      snprintf(name, sizeof name, "rowwait %2d KiB chunks, rows of %3d KiB%s", c.chunk_kib, c.row_kib, c.stcs ? ", .cs" : "");
      time(name, [&] {
        ++epoch;
        rowwait_copy<<<(unsigned)nchunks, 256, cb>>>(x, y, nchunks, cb, P, epoch, ctr, rowctr, c.stcs, sink);
      });
    }
  }
  struct Cfg { int slot_kib, slots, cw, bps, lag, stcs; };
  const Cfg cfgs[] = {{16, 6, 8, 2, 0, 1}, {16, 6, 8, 2, 4, 1}};
  for (const Cfg& c : cfgs) {
    const int sb = c.slot_kib * 1024, smem = sb * c.slots;
    const long long ns = (long long)(bytes / sb);
    char name[96];
    snprintf(name, sizeof name, "ring %2d KiB x %2d, %d stores warps, %d/SM, lag %d%s", c.slot_kib, c.slots, c.cw, c.bps, c.lag, c.stcs ? ", .cs" : "");
    if (c.slots == 6) {
      CK(cudaFuncSetAttribute(ring_copy<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      time(name, [&] { ring_copy<6><<<sms * c.bps, (c.cw + 1) * 32, smem>>>(x, y, ns, sb, c.cw, c.lag, c.stcs); });
    } else if (c.slots == 3) {
      CK(cudaFuncSetAttribute(ring_copy<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      time(name, [&] { ring_copy<3><<<sms * c.bps, (c.cw + 1) * 32, smem>>>(x, y, ns, sb, c.cw, c.lag, c.stcs); });
    } else {
      CK(cudaFuncSetAttribute(ring_copy<12>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      time(name, [&] { ring_copy<12><<<sms * c.bps, (c.cw + 1) * 32, smem>>>(x, y, ns, sb, c.cw, c.lag, c.stcs); });
    }
  }
  return 0;
}

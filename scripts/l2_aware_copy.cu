// Does a copy get faster when each SM moves only the 4 KiB chunks that the L2 partition
// beside it owns? scripts/l2_homes.cu found (H200, twenty-fourth session) that the owner
// changes every 4 KiB (the parity of address bits 12, 13, 15, 17, 19 and of physical
// page bits), that 66 SMs sit beside each partition, and that a far line costs about 450
// cycles against 280. A plain copy sends half of x and half of y across the fabric, which
// ncu puts at 89% busy while DRAM is at 80% (eleventh session).
// Here the owners of every 4 KiB chunk of x and of y are measured first (probe), then:
//   memcpy   : cudaMemcpyAsync device to device
//   plain    : one block per 32 KiB, 256 threads, 16-byte loads then stores
//   tickets  : persistent (BPS blocks per SM), each block takes 16 KiB (4 chunks) per
//              ticket from one counter, in address order (kv_ticket_copy, the worker's
//              copy from evaluators/device/l2_probe.cuh; the BENCHMARKS table came from
//              commit 1d51fff's own copy of it, which kept a chunk's four loads in flight
//              together)
//   aware    : the same, but a block takes its chunks from its own side's list (the
//              chunks whose x the partition beside it owns), from that side's counter
//   aware_y  : the same with the lists made by y's owner
// Timed with events around the kernel, L2 flushed before each of 20 repetitions, median.
//   nvcc -O3 -arch=sm_90 -o l2_aware_copy scripts/l2_aware_copy.cu && ./l2_aware_copy MiB [DIR [REPS]]
//   ncu --metrics M -k 'regex:^[^k]|k_plain|kv_ticket_copy' ./l2_aware_copy 256 . 1   (one launch each)
#include "l2_probe.cuh"
#include <algorithm>
#include <vector>
#include <string>

constexpr int kChunk = 4096;           // bytes, the ownership granularity
constexpr int kThreads = 256;          // 256 x 16 bytes = one chunk per pass

__global__ void __launch_bounds__(kThreads) k_plain(const uint4* __restrict__ x, uint4* __restrict__ y) {
  const long c = blockIdx.x * 2048L;  // 32 KiB
  uint4 v[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = __ldcg(x + c + k * kThreads + threadIdx.x);
#pragma unroll
  for (int k = 0; k < 8; ++k) y[c + k * kThreads + threadIdx.x] = v[k];
}

// Owner of each chunk of buf (1 = the partition beside SM `warm`): flush, warm one line per
// chunk from SM `warm`, time it from SM `far` (on the other side); high latency = owned
// beside `warm`.
static int owners(ProbeCtx& c, const unsigned* buf, long nchunks, int warm, int far, std::vector<unsigned char>& own,
                  std::vector<unsigned>& lats) {
  const int batch = 65536;
  ProbeBufs pb;
  if (probe_bufs(pb, batch)) return 1;
  auto& [d_off, d_lat, off, lat] = pb;
  own.assign(nchunks, 0);
  lats.assign(nchunks, 0);
  for (long b0 = 0; b0 < nchunks; b0 += batch) {
    const int n = (int)std::min<long>(batch, nchunks - b0);
    for (int i = 0; i < n; ++i) off[i] = (b0 + i) * kChunk + 128 * ((b0 + i) % 32);
    CK(cudaMemcpy(d_off, off.data(), sizeof(long long) * n, cudaMemcpyHostToDevice));
    if (run_probe(c, buf, d_off, n, warm, far, d_lat, 8)) return 1;
    CK(cudaMemcpy(lat.data(), d_lat, sizeof(unsigned) * n, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
      lats[b0 + i] = lat[i];
      own[b0 + i] = lat[i] > 370;
    }
  }
  CK(cudaFree(d_off));
  CK(cudaFree(d_lat));
  return 0;
}

int main(int argc, char** argv) {
  const long mib = argc > 1 ? std::atol(argv[1]) : 256;
  const std::string dir = argc > 2 ? argv[2] : ".";
  const int reps = argc > 3 ? std::atoi(argv[3]) : 20;  // 1 under ncu
  const size_t bytes = size_t(mib) << 20;
  const long nchunks = bytes / kChunk;
  ProbeCtx c{};
  if (probe_init(c)) return 1;
  unsigned *x, *y;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&y, bytes));
  CK(cudaMemset(x, 1, bytes));
  CK(cudaMemset(y, 2, bytes));

  // SM sides: 64 lines warmed from SM 0, timed from every SM; split latencies = other side.
  std::vector<unsigned char> side(1024, 0);
  {
    const int n = 64;
    std::vector<long long> off(n);
    for (int i = 0; i < n; ++i) off[i] = (long long)i * kChunk;
    long long* d_off;
    unsigned* d_lat;
    CK(cudaMalloc(&d_off, sizeof(long long) * n));
    CK(cudaMalloc(&d_lat, sizeof(unsigned) * n));
    CK(cudaMemcpy(d_off, off.data(), sizeof(long long) * n, cudaMemcpyHostToDevice));
    std::vector<unsigned> lat(n);
    int ones = 0;
    for (int s = 0; s < c.nsm; ++s) {
      CK(cudaMemset(d_lat, 0, sizeof(unsigned) * n));
      if (run_probe(c, x, d_off, n, 0, s, d_lat)) return 1;
      CK(cudaMemcpy(lat.data(), d_lat, sizeof(unsigned) * n, cudaMemcpyDeviceToHost));
      int hi = 0;
      for (unsigned v : lat) hi += v > 370;
      side[s] = hi > n / 4;
      ones += side[s];
    }
    std::printf("SMs beside SM 0's partition: %d, beside the other: %d\n", c.nsm - ones, ones);
  }
  int far = 0;
  while (far < c.nsm && !side[far]) ++far;
  // own = 1: owned by side 0 (SM 0's partition). List for side s: chunks owned by side s.
  std::vector<unsigned char> ox, oy;
  std::vector<unsigned> lx, ly;
  if (owners(c, x, nchunks, 0, far, ox, lx) || owners(c, y, nchunks, 0, far, oy, ly)) return 1;
  long ax = 0, ay = 0, same = 0;
  for (long i = 0; i < nchunks; ++i) {
    ax += ox[i];
    ay += oy[i];
    same += ox[i] == oy[i];
  }
  std::printf("%ld MiB: chunks %ld, x owned beside SM 0 %.3f, y %.3f, x and y same owner %.3f\n", mib, nchunks,
              double(ax) / nchunks, double(ay) / nchunks, double(same) / nchunks);
  {
    FILE* f = std::fopen((dir + "/owners_" + std::to_string(mib) + ".txt").c_str(), "w");
    std::fprintf(f, "x %p y %p\n", (void*)x, (void*)y);
    for (long i = 0; i < nchunks; ++i) std::fprintf(f, "%ld %u %u\n", i, lx[i], ly[i]);
    std::fclose(f);
  }

  auto make_lists = [&](const std::vector<unsigned char>& o, std::vector<int>& l0, std::vector<int>& l1) {
    l0.clear();
    l1.clear();
    for (long i = 0; i < nchunks; ++i) (o[i] ? l0 : l1).push_back((int)i);  // side 0 takes what its partition owns
  };
  std::vector<int> all(nchunks);
  for (long i = 0; i < nchunks; ++i) all[i] = (int)i;
  int *d_all, *d_a0, *d_a1, *d_b0, *d_b1;
  unsigned char* d_side;
  unsigned* d_t;
  std::vector<int> a0, a1, b0, b1;
  make_lists(ox, a0, a1);
  make_lists(oy, b0, b1);
  CK(cudaMalloc(&d_all, sizeof(int) * nchunks));
  CK(cudaMalloc(&d_a0, sizeof(int) * nchunks));
  CK(cudaMalloc(&d_a1, sizeof(int) * nchunks));
  CK(cudaMalloc(&d_b0, sizeof(int) * nchunks));
  CK(cudaMalloc(&d_b1, sizeof(int) * nchunks));
  CK(cudaMalloc(&d_side, 1024));
  CK(cudaMalloc(&d_t, 64));
  CK(cudaMemcpy(d_all, all.data(), sizeof(int) * nchunks, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_a0, a0.data(), sizeof(int) * a0.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_a1, a1.data(), sizeof(int) * a1.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_b0, b0.data(), sizeof(int) * b0.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_b1, b1.data(), sizeof(int) * b1.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_side, side.data(), 1024, cudaMemcpyHostToDevice));

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto timeit = [&](const char* name, auto&& launch) -> int {
    std::vector<float> ms;
    const int warm = reps > 1 ? 2 : 0;
    for (int r = 0; r < reps + warm; ++r) {
      CK(cudaMemsetAsync(c.flush, r, 256u << 20));
      CK(cudaMemsetAsync(d_t, 0, 64));
      CK(cudaMemsetAsync(y, 0, 4096));
      CK(cudaEventRecord(e0));
      launch();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float t;
      CK(cudaEventElapsedTime(&t, e0, e1));
      if (r >= warm) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double us = ms[ms.size() / 2] * 1e3;
    // check: y equals x (memset patterns differ)
    std::vector<unsigned> hx(1024), hy(1024);
    const size_t probe_at = bytes / 2 + 12345 * 4;
    CK(cudaMemcpy(hy.data(), (char*)y + probe_at, 4096, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hx.data(), (char*)x + probe_at, 4096, cudaMemcpyDeviceToHost));
    const bool ok = hx == hy;
    std::printf("%-22s %8.1f us  %6.0f GB/s  (min %.1f, max %.1f)%s\n", name, us, 2.0 * bytes / us / 1e3,
                ms.front() * 1e3, ms.back() * 1e3, ok ? "" : "  WRONG");
    CK(cudaMemset(y, 2, bytes));
    return 0;
  };
  if (timeit("memcpy", [&] { cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice); })) return 1;
  if (timeit("plain 32 KiB blocks", [&] { k_plain<<<bytes / 32768, kThreads>>>((const uint4*)x, (uint4*)y); })) return 1;
  struct Variant {
    const char* name;
    const int *l0, *l1;
    long n0, n1;
    const unsigned char* side;
  };
  const Variant variants[] = {
      {"tickets", d_all, d_all, nchunks, 0, nullptr},
      {"aware(x)", d_a0, d_a1, (long)a0.size(), (long)a1.size(), d_side},
      {"aware(y)", d_b0, d_b1, (long)b0.size(), (long)b1.size(), d_side},
      {"anti(x)", d_a1, d_a0, (long)a1.size(), (long)a0.size(), d_side},  // every x read crosses
  };
  // The shared kv_ticket_copy takes more registers than this script's own copy did (40
  // against 32 under nvcc -O3): 8 blocks of 256 may not fit an SM. Say so, and skip them.
  int fit = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kv_ticket_copy, kThreads, 0));
  std::printf("kv_ticket_copy: %d blocks of %d threads fit an SM\n", fit, kThreads);
  for (int bps : {4, 8})
    for (const Variant& v : variants) {
      if (bps > fit) break;
      const std::string s = std::string(v.name) + " bps " + std::to_string(bps);
      if (timeit(s.c_str(), [&] {
            kv_ticket_copy<<<c.nsm * bps, kThreads>>>((const uint4*)x, (uint4*)y, kChunk / 16, v.l0, v.l1, (int)v.n0,
                                                      (int)v.n1, v.side, d_t);
          }))
        return 1;
    }
  return 0;
}

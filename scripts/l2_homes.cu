// Which L2 partition owns a line, and which partition does each SM sit beside?
// The H200's L2 is two partitions joined by a fabric; a line is owned by one of them, and
// an SM's access to a line owned by the other crosses the fabric (docs/BENCHMARKS.md,
// eleventh session: a copy sends half its sectors across and keeps the fabric at 89%).
// This probe times single L2 hits, one at a time, from one chosen SM:
//   1. flush the L2 (write 256 MiB);
//   2. a block on SM w reads the probe lines (ld.global.cg), so they sit in L2;
//   3. thread 0 of a block on SM s loads each line once (ld.global.cg) and records the
//      cycles from issue to use (clock64 around a load and a shared store of its value).
// Phase A: 1024 lines (one per 4 KiB) probed from every SM in turn, w fixed: an SM whose
// latencies split into two groups sits on the other side from w (or the partition keeps
// no copy of far lines); one whose latencies are all low shares w's partition.
// Phase B: from one SM of each side, every 128-byte line of the first 4 MiB of a buffer
// and one line per 64 KiB over 1 GiB, so the owner can be fitted as a function of the
// address (a hash of address bits).
// Not part of the build:
//   nvcc -O3 -arch=sm_90 -o l2_homes scripts/l2_homes.cu && ./l2_homes OUTDIR
#include "l2_probe.cuh"
#include <cstdint>
#include <vector>
#include <string>
#include <algorithm>

__global__ void k_where(unsigned* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = kv_smid();
}

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : ".";
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  ProbeCtx c{};
  if (probe_init(c)) return 1;
  unsigned* buf;
  const size_t big = size_t(1) << 30;
  CK(cudaMalloc(&buf, big + (4u << 20)));
  CK(cudaMemset(buf, 1, big + (4u << 20)));
  unsigned* y;  // a second buffer, as y would be
  CK(cudaMalloc(&y, 64u << 20));
  CK(cudaMemset(y, 1, 64u << 20));
  std::printf("device %s, %d SMs, buffer at %p, second buffer at %p\n", prop.name, c.nsm, (void*)buf, (void*)y);

  // Which SMs exist (smid values can be sparse).
  unsigned* d_where;
  CK(cudaMalloc(&d_where, sizeof(unsigned) * 4096));
  k_where<<<c.nsm * 4, 32>>>(d_where);
  CK(cudaDeviceSynchronize());
  std::vector<unsigned> where(c.nsm * 4);
  CK(cudaMemcpy(where.data(), d_where, sizeof(unsigned) * where.size(), cudaMemcpyDeviceToHost));
  unsigned maxsm = 0;
  for (unsigned v : where) maxsm = v > maxsm ? v : maxsm;
  std::printf("largest smid %u\n", maxsm);

  const int maxn = 1 << 16;
  ProbeBufs pb;
  if (probe_bufs(pb, maxn)) return 1;
  auto& [d_off, d_lat, off, lat] = pb;

  // Phase A.
  const int na = 1024;
  for (int i = 0; i < na; ++i) off[i] = (long long)i * 4096;
  CK(cudaMemcpy(d_off, off.data(), sizeof(long long) * na, cudaMemcpyHostToDevice));
  const int w = 0;
  FILE* fa = std::fopen((dir + "/phase_a.txt").c_str(), "w");
  std::vector<double> split(maxsm + 1, 0);
  for (unsigned s = 0; s <= maxsm; ++s) {
    CK(cudaMemset(d_lat, 0, sizeof(unsigned) * na));
    if (run_probe(c, buf, d_off, na, w, (int)s, d_lat)) return 1;
    CK(cudaMemcpy(lat.data(), d_lat, sizeof(unsigned) * na, cudaMemcpyDeviceToHost));
    std::fprintf(fa, "%u", s);
    for (int i = 0; i < na; ++i) std::fprintf(fa, " %u", lat[i]);
    std::fprintf(fa, "\n");
    std::vector<unsigned> v(lat.begin(), lat.begin() + na);
    std::sort(v.begin(), v.end());
    std::printf("sm %3u: p10 %u p50 %u p90 %u\n", s, v[na / 10], v[na / 2], v[na * 9 / 10]);
    if (v[na - 1] > 0) split[s] = 1.0 + v[na * 9 / 10] - v[na / 10];
  }
  std::fclose(fa);

  // Phase B: pick, from phase A, the SMs whose latencies spread most (the other side from
  // w) and least (w's side), and probe from them.
  std::vector<std::pair<double, unsigned>> order;
  for (unsigned s = 0; s <= maxsm; ++s) if (split[s] > 0) order.push_back({split[s], s});
  std::sort(order.begin(), order.end());
  int same = order.size() > 1 ? (int)order[order.front().second == 0 ? 1 : 0].second : 0;
  int far1 = (int)order.back().second, far2 = order.size() > 2 ? (int)order[order.size() - 2].second : far1;
  std::printf("phase B: w %d, same side %d, other side %d and %d\n", w, same, far1, far2);
  const int nd = 32768;  // 4 MiB of 128-byte lines
  for (int i = 0; i < nd; ++i) off[i] = (long long)i * 128;
  const int ns = 16384;  // one line per 64 KiB over 1 GiB
  for (int i = 0; i < ns; ++i) off[nd + i] = (long long)i * 65536 + 4096 * 3;
  const int nb = nd + ns;
  CK(cudaMemcpy(d_off, off.data(), sizeof(long long) * nb, cudaMemcpyHostToDevice));
  FILE* fb = std::fopen((dir + "/phase_b.txt").c_str(), "w");
  int probes[][2] = {{w, far1}, {w, far2}, {w, same}, {far1, w}, {far1, same}, {same, far1}};
  for (auto& pr : probes) {
    if (pr[0] > (int)maxsm || pr[1] > (int)maxsm) continue;
    if (run_probe(c, buf, d_off, nb, pr[0], pr[1], d_lat)) return 1;
    CK(cudaMemcpy(lat.data(), d_lat, sizeof(unsigned) * nb, cudaMemcpyDeviceToHost));
    std::fprintf(fb, "warm %d probe %d base %p\n", pr[0], pr[1], (void*)buf);
    for (int i = 0; i < nb; ++i) std::fprintf(fb, "%lld %u\n", off[i], lat[i]);
  }
  // The second buffer: its first 4 MiB, densely, from the same pairs as the first two.
  for (int i = 0; i < nd; ++i) off[i] = (long long)i * 128;
  CK(cudaMemcpy(d_off, off.data(), sizeof(long long) * nd, cudaMemcpyHostToDevice));
  for (int k = 0; k < 3; ++k) {
    auto& pr = probes[k];
    if (run_probe(c, y, d_off, nd, pr[0], pr[1], d_lat)) return 1;
    CK(cudaMemcpy(lat.data(), d_lat, sizeof(unsigned) * nd, cudaMemcpyDeviceToHost));
    std::fprintf(fb, "warm %d probe %d base %p (second buffer)\n", pr[0], pr[1], (void*)y);
    for (int i = 0; i < nd; ++i) std::fprintf(fb, "%lld %u\n", off[i], lat[i]);
  }
  std::fclose(fb);
  std::printf("done\n");
  return 0;
}

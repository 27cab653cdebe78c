#include "l2_calibration.h"

#include <algorithm>
#include <vector>

#include "kevolve/evaluators/l2_layout.h"
#include "kevolve/evaluators/metrics.h"

namespace kevolve::gpu {

namespace {

constexpr int kBatch = 65536;        // lines per probe launch
constexpr long long kLine = 128;     // bytes
constexpr int kSideLines = 64;       // lines per SM in the side probe
constexpr int kDenseLines = 512;     // 64 KiB of lines for the granule

class Prober {
 public:
  Prober(const Device& dev, const Harness& h, CUdeviceptr flush, size_t flush_bytes)
      : dev_(dev), h_(h), flush_(flush), flush_bytes_(flush_bytes) {}

  Status Init() {
    for (auto [buf, bytes] : {std::pair{&off_, sizeof(long long) * kBatch}, std::pair{&cyc_, sizeof(unsigned) * kBatch},
                              std::pair{&claim_, sizeof(int) * 4096}, std::pair{&sink_, size_t{64}}}) {
      auto b = dev_.Alloc(bytes);
      if (!b.ok()) return b.status();
      *buf = std::move(*b);
    }
    return Status::Ok();
  }

  // Flush, warm the lines at base + offsets from SM `warm`, time them from SM `probe`.
  // Empty when SM `probe` ran no block (no such SM id); an error when SM `warm` ran none.
  Result<std::vector<double>> Run(CUdeviceptr base, const std::vector<long long>& offsets, int warm, int probe,
                                  int warps) {
    const auto& d = dev_.drv();
    const int n = static_cast<int>(offsets.size());
    CUstream st = dev_.stream();
    if (Status s = dev_.Check(d.cuStreamSynchronize(st), "cuStreamSynchronize"); !s.ok()) return s;
    if (Status s = dev_.Check(d.cuMemcpyHtoD(off_.ptr(), offsets.data(), sizeof(long long) * offsets.size()),
                              "cuMemcpyHtoD");
        !s.ok())
      return s;
    d.cuMemsetD8Async(cyc_.ptr(), 0, sizeof(unsigned) * offsets.size(), st);
    d.cuMemsetD8Async(flush_, 0x5a, flush_bytes_, st);
    // The warm and the probe claim their SM in separate halves of claim_, so that both
    // claims can be checked afterwards.
    const CUdeviceptr warm_claim = claim_.ptr(), probe_claim = claim_.ptr() + sizeof(int) * 2048;
    d.cuMemsetD8Async(claim_.ptr(), 0, sizeof(int) * 4096, st);
    if (Status s = h_.L2Warm(base, off_.ptr(), n, warm, warm_claim, sink_.ptr()); !s.ok()) return s;
    if (Status s = h_.L2Probe(base, off_.ptr(), n, probe, warps, probe_claim, cyc_.ptr(), sink_.ptr()); !s.ok())
      return s;
    if (Status s = dev_.Check(d.cuStreamSynchronize(st), "cuStreamSynchronize(L2 probe)"); !s.ok()) return s;
    int claimed[2] = {0, 0};
    if (Status s = dev_.Check(d.cuMemcpyDtoH(&claimed[0], warm_claim + sizeof(int) * warm, sizeof(int)), "cuMemcpyDtoH");
        !s.ok())
      return s;
    if (Status s = dev_.Check(d.cuMemcpyDtoH(&claimed[1], probe_claim + sizeof(int) * probe, sizeof(int)), "cuMemcpyDtoH");
        !s.ok())
      return s;
    if (!claimed[0]) return Status::Error("no block of the L2 warm-up ran on SM " + std::to_string(warm));
    if (!claimed[1]) return std::vector<double>{};
    std::vector<unsigned> raw(offsets.size());
    if (Status s = dev_.Check(d.cuMemcpyDtoH(raw.data(), cyc_.ptr(), sizeof(unsigned) * raw.size()), "cuMemcpyDtoH");
        !s.ok())
      return s;
    return std::vector<double>(raw.begin(), raw.end());
  }

 private:
  const Device& dev_;
  const Harness& h_;
  CUdeviceptr flush_;
  size_t flush_bytes_;
  Buffer off_, cyc_, claim_, sink_;
};

// The faster of each pair of loads (two lines of one place).
std::vector<double> PairMin(const std::vector<double>& c) {
  std::vector<double> m(c.size() / 2);
  for (size_t i = 0; i < m.size(); ++i) m[i] = std::min(c[2 * i], c[2 * i + 1]);
  return m;
}

Result<Buffer> Upload(const Device& dev, const void* data, size_t bytes) {
  auto b = dev.Alloc(std::max<size_t>(bytes, 16));
  if (!b.ok()) return b.status();
  if (bytes)
    if (Status s = dev.Check(dev.drv().cuMemcpyHtoD(b->ptr(), data, bytes), "cuMemcpyHtoD"); !s.ok()) return s;
  return b;
}

}  // namespace

Result<nlohmann::json> MeasureL2Layout(const Device& dev, const Harness& h, CUdeviceptr src, CUdeviceptr dst,
                                       size_t bytes, const EnqueueTimer& time) {
  const int nsm = dev.desc().sm_count;
  const size_t flush_bytes = std::min(bytes, static_cast<size_t>(std::max<int64_t>(dev.desc().l2_bytes, 1 << 20)) * 4);
  Prober pr(dev, h, dst, flush_bytes);
  if (Status s = pr.Init(); !s.ok()) return s;
  // The SM ids that run blocks (PTX does not promise 0 .. count - 1).
  std::vector<int> smids;
  {
    auto seen = dev.Alloc(sizeof(unsigned) * 1024);
    if (!seen.ok()) return seen.status();
    dev.drv().cuMemsetD8Async(seen->ptr(), 0, sizeof(unsigned) * 1024, dev.stream());
    if (Status s = h.L2Smids(seen->ptr()); !s.ok()) return s;
    if (Status s = dev.Check(dev.drv().cuStreamSynchronize(dev.stream()), "cuStreamSynchronize"); !s.ok()) return s;
    std::vector<unsigned> v(1024);
    if (Status s = dev.Check(dev.drv().cuMemcpyDtoH(v.data(), seen->ptr(), sizeof(unsigned) * 1024), "cuMemcpyDtoH");
        !s.ok())
      return s;
    for (int i = 0; i < 1024; ++i)
      if (v[static_cast<size_t>(i)]) smids.push_back(i);
  }
  if (smids.empty() || smids.back() == 1023)
    return Status::Error("SM ids outside 0..1022, which the L2 probes do not handle");
  if (static_cast<int>(smids.size()) != nsm)
    return Status::Error("the L2 probes reached " + std::to_string(smids.size()) + " of " + std::to_string(nsm) +
                         " SMs (another process holding shared memory?)");
  const int ref = smids.front();

  // Which side each SM is on: 64 places 4 KiB apart, read by the reference SM (the lowest
  // id), timed from each SM. Each
  // place is two lines of the same 4 KiB, and counts the faster: a load is sometimes slow
  // for reasons of its own, never fast across the fabric.
  std::vector<long long> offs(2 * kSideLines);
  for (int i = 0; i < kSideLines; ++i)
    for (int k = 0; k < 2; ++k) offs[2 * i + k] = i * 4096LL + kLine * ((i + 16 * k) % 32);
  std::vector<L2SideProbe> probes;
  for (int sm : smids) {
    auto c = pr.Run(src, offs, ref, sm, 1);
    if (!c.ok()) return c.status();
    probes.push_back({sm, PairMin(*c)});
  }
  const L2Sides sides = ClassifyL2Sides(probes);
  nlohmann::json out = {{"reference_sm", ref}, {"near_hit_cycles", sides.near_cycles}};
  if (!sides.split) {
    // Say what the probes saw: each SM's 10th, 50th and 90th percentile.
    nlohmann::json seen = nlohmann::json::array();
    for (auto& p : probes) {
      if (p.cycles.empty()) continue;
      std::sort(p.cycles.begin(), p.cycles.end());
      const size_t n = p.cycles.size();
      seen.push_back({p.sm, p.cycles[n / 10], p.cycles[n / 2], p.cycles[n * 9 / 10]});
    }
    out["partitions"] = 1;
    out["threshold_cycles"] = sides.threshold;
    out["sm_p10_p50_p90"] = seen;
    return out;
  }
  int other = 0;
  while (sides.side[static_cast<size_t>(other)] != 1) ++other;
  out["partitions"] = 2;
  out["sms_per_partition"] = {sides.count[0], sides.count[1]};
  out["far_hit_cycles"] = sides.far_cycles;
  out["side_of_sm"] = sides.side;

  // The granule: every line of 64 KiB, timed from the other side.
  offs.resize(kDenseLines);
  for (int i = 0; i < kDenseLines; ++i) offs[i] = i * kLine;
  auto dense = pr.Run(src, offs, ref, other, 1);
  if (!dense.ok()) return dense.status();
  const long long granule = L2OwnerGranule(*dense, kLine, sides.threshold);
  out["owner_granule_bytes"] = granule;
  if (granule < 512 || granule > (1 << 20) || bytes % static_cast<size_t>(granule) != 0) {
    out["dense_cycles"] = *dense;  // what the granule was read from
    out["threshold_cycles"] = sides.threshold;
    return out;
  }

  // The owner of every granule of src: one line each, timed from the other side.
  const long long chunks = static_cast<long long>(bytes) / granule;
  std::vector<int> lists[2];
  const long long per = granule / kLine;  // lines per granule
  for (long long b0 = 0; b0 < chunks; b0 += kBatch / 2) {
    const int n = static_cast<int>(std::min<long long>(kBatch / 2, chunks - b0));
    offs.resize(2 * static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < 2; ++k) offs[2 * i + k] = (b0 + i) * granule + kLine * ((b0 + i + k * per / 2) % per);
    auto c = pr.Run(src, offs, ref, other, 1);
    if (!c.ok()) return c.status();
    if (c->empty()) return Status::Error("the L2 owner probe found no block on SM " + std::to_string(other));
    const std::vector<double> m = PairMin(*c);
    // Slow from the other side: owned by the reference side.
    for (int i = 0; i < n; ++i) lists[m[i] > sides.threshold ? 0 : 1].push_back(static_cast<int>(b0 + i));
  }
  out["reference_side_owns"] = static_cast<double>(lists[0].size()) / static_cast<double>(chunks);

  // The same persistent copy two ways: every block from one list in address order, or each
  // block from its own side's list.
  std::vector<int> all(static_cast<size_t>(chunks));
  for (long long i = 0; i < chunks; ++i) all[static_cast<size_t>(i)] = static_cast<int>(i);
  std::vector<unsigned char> side_of(1024, 0);
  for (size_t sm = 0; sm < sides.side.size() && sm < side_of.size(); ++sm)
    side_of[sm] = static_cast<unsigned char>(sides.side[sm] == 1);
  auto d_all = Upload(dev, all.data(), sizeof(int) * all.size());
  auto d_l0 = Upload(dev, lists[0].data(), sizeof(int) * lists[0].size());
  auto d_l1 = Upload(dev, lists[1].data(), sizeof(int) * lists[1].size());
  auto d_side = Upload(dev, side_of.data(), side_of.size());
  auto d_t = dev.Alloc(64);
  for (const auto* r : {&d_all, &d_l0, &d_l1, &d_side})
    if (!r->ok()) return r->status();
  if (!d_t.ok()) return d_t.status();
  const int chunk16 = static_cast<int>(granule / 16), blocks = nsm * 4;
  const auto& d = dev.drv();
  CUstream st = dev.stream();
  auto copy = [&](bool aware) {
    d.cuMemsetD8Async(d_t->ptr(), 0, 64, st);
    if (!aware)
      return h.TicketCopy(src, dst, chunk16, d_all->ptr(), d_all->ptr(), static_cast<int>(chunks), 0, 0, d_t->ptr(),
                          blocks);
    return h.TicketCopy(src, dst, chunk16, d_l0->ptr(), d_l1->ptr(), static_cast<int>(lists[0].size()),
                        static_cast<int>(lists[1].size()), d_side->ptr(), d_t->ptr(), blocks);
  };
  // The two copies take turns, so that a drift of the clocks falls on both.
  std::vector<double> ms[2];
  for (int round = 0; round < 10; ++round)
    for (int aware = 0; aware < 2; ++aware) {
      auto t = time([&] { return copy(aware == 1); }, 1);
      if (!t.ok()) return t.status();
      ms[aware].push_back(*t);
    }
  // The owner-aware copy must copy everything, on its own: src gets data that differs
  // everywhere, dst zeros, then one aware copy; every side must have taken all its tickets
  // and the first and last granule of each list (and three more places) must match.
  if (Status s = h.Fill(src, static_cast<int64_t>(bytes / 4), DType::kF32, 0x5eed, true, 1.0f, 0.0f); !s.ok()) return s;
  d.cuMemsetD8Async(dst, 0, bytes, st);
  if (Status s = copy(true); !s.ok()) return s;
  if (Status s = dev.Check(d.cuStreamSynchronize(st), "cuStreamSynchronize(owner-aware copy)"); !s.ok()) return s;
  unsigned taken[2] = {0, 0};
  if (Status s = dev.Check(d.cuMemcpyDtoH(taken, d_t->ptr(), sizeof taken), "cuMemcpyDtoH"); !s.ok()) return s;
  for (int side = 0; side < 2; ++side)
    if (taken[side] < (lists[side].size() + 3) / 4)
      return Status::Error("the owner-aware copy's side " + std::to_string(side) + " took " +
                           std::to_string(taken[side]) + " tickets of " + std::to_string((lists[side].size() + 3) / 4));
  std::vector<size_t> places = {0, bytes / 3 / static_cast<size_t>(granule), bytes / static_cast<size_t>(granule) - 1};
  for (const auto& l : lists)
    if (!l.empty()) places.insert(places.end(), {static_cast<size_t>(l.front()), static_cast<size_t>(l.back())});
  for (size_t g : places) {
    const size_t at = g * static_cast<size_t>(granule);
    std::vector<unsigned char> a(static_cast<size_t>(granule)), b(static_cast<size_t>(granule));
    if (Status s = dev.Check(d.cuMemcpyDtoH(a.data(), src + at, a.size()), "cuMemcpyDtoH"); !s.ok()) return s;
    if (Status s = dev.Check(d.cuMemcpyDtoH(b.data(), dst + at, b.size()), "cuMemcpyDtoH"); !s.ok()) return s;
    if (a != b) return Status::Error("the owner-aware copy left the granule at " + std::to_string(at) + " uncopied");
  }
  const double plain_ms = Summarize(ms[0]).median, aware_ms = Summarize(ms[1]).median;
  out["ticket_copy_gbps"] = 2.0 * static_cast<double>(bytes) / (plain_ms * 1e-3) / 1e9;
  out["owner_aware_copy_gbps"] = 2.0 * static_cast<double>(bytes) / (aware_ms * 1e-3) / 1e9;
  out["copy_blocks"] = blocks;
  return out;
}

}  // namespace kevolve::gpu

#include "kevolve/evaluators/l2_layout.h"

#include <algorithm>

namespace kevolve {

namespace {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

L2Sides ClassifyL2Sides(const std::vector<L2SideProbe>& probes) {
  L2Sides out;
  int max_sm = -1;
  for (const auto& p : probes) max_sm = std::max(max_sm, p.sm);
  out.side.assign(static_cast<size_t>(max_sm + 1), -1);
  // Every SM sees some lines near (all of them beside the reference, about half across), so
  // the typical fast tenth is a near hit; a far hit is about 1.6 times that on the H200.
  std::vector<double> fast;
  for (const auto& p : probes)
    if (p.sm >= 0 && !p.cycles.empty()) fast.push_back(Quantile(p.cycles, 0.1));
  if (fast.empty()) return out;
  out.threshold = 1.3 * Quantile(fast, 0.5);
  // Each SM's share of slow loads; the two sides are the two groups either side of the
  // widest gap in those shares (beside the reference about 0-0.3, across about 0.5-0.8:
  // some of the reference side's copies of far lines are gone by the time they are timed).
  std::vector<std::pair<double, int>> frac;
  for (const auto& p : probes) {
    if (p.sm < 0 || p.cycles.empty()) continue;
    const auto n_slow = std::count_if(p.cycles.begin(), p.cycles.end(), [&](double c) { return c > out.threshold; });
    frac.push_back({static_cast<double>(n_slow) / static_cast<double>(p.cycles.size()), p.sm});
  }
  // Across the fabric about half the lines are far; an SM with nearly every load slow shows
  // no owner pattern, sits on neither side, and is left out of the gap search (its share
  // would make the widest gap).
  std::vector<std::pair<double, int>> kept;
  for (const auto& [f, sm] : frac)
    if (f <= 0.9) kept.push_back({f, sm});
  std::sort(kept.begin(), kept.end());
  double gap = 0, cut = 2;
  for (size_t i = 1; i < kept.size(); ++i)
    if (kept[i].first - kept[i - 1].first > gap) gap = kept[i].first - kept[i - 1].first, cut = kept[i].first;
  if (gap < 0.15) cut = 2;  // one group
  std::vector<double> near, slow;
  for (const auto& [f, sm] : kept) {
    const int side = f >= cut ? 1 : 0;
    out.side[static_cast<size_t>(sm)] = side;
    ++out.count[side];
  }
  for (const auto& p : probes) {
    if (p.sm < 0 || p.cycles.empty() || out.side[static_cast<size_t>(p.sm)] < 0) continue;
    for (double c : p.cycles)
      if (c <= out.threshold) near.push_back(c);
      else if (out.side[static_cast<size_t>(p.sm)] == 1) slow.push_back(c);
  }
  out.split = out.count[0] > 0 && out.count[1] > 0;
  out.near_cycles = Quantile(near, 0.5);
  out.far_cycles = Quantile(slow, 0.5);
  return out;
}

long long L2OwnerGranule(const std::vector<double>& cycles, long long line_bytes, double threshold) {
  std::vector<int> far(cycles.size());
  for (size_t i = 0; i < cycles.size(); ++i) far[i] = cycles[i] > threshold;
  // A single line against both neighbours is an outlier, not an owner change.
  for (size_t i = 1; i + 1 < far.size(); ++i)
    if (far[i] != far[i - 1] && far[i - 1] == far[i + 1]) far[i] = far[i - 1];
  std::vector<size_t> changes;  // line indices where the owner differs from the line before
  for (size_t i = 1; i < far.size(); ++i)
    if (far[i] != far[i - 1]) changes.push_back(i);
  if (changes.size() < 4) return 0;
  // The owner changes on granule boundaries: the largest power of two (in lines) that
  // three in four changes fall on.
  for (size_t g = size_t{1} << 20; g > 1; g /= 2) {
    if (g > far.size() / 4) continue;
    const auto on = std::count_if(changes.begin(), changes.end(), [&](size_t i) { return i % g == 0; });
    if (on >= 4 && static_cast<double>(on) >= 0.75 * static_cast<double>(changes.size())) return static_cast<long long>(g) * line_bytes;
  }
  return line_bytes;
}

}  // namespace kevolve

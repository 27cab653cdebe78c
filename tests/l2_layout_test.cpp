// The L2 layout analysis (kevolve/evaluators/l2_layout.h) on synthetic probe latencies
// shaped like the H200's (near hits about 280 cycles, far about 450, owners every 4 KiB).
#include <catch2/catch.hpp>

#include "kevolve/evaluators/l2_layout.h"

using kevolve::ClassifyL2Sides;
using kevolve::L2OwnerGranule;
using kevolve::L2SideProbe;

namespace {

// Lines 4 KiB apart whose owner alternates in pairs (0, 1, 1, 0, ...), as bits 12 and 13 of
// the address give on the H200; `other` SMs see the reference side's lines as far.
L2SideProbe Probe(int sm, bool other, int lines = 64) {
  L2SideProbe p{sm, {}};
  for (int i = 0; i < lines; ++i) {
    const bool ref_owned = ((i & 1) ^ ((i >> 1) & 1)) == 0;
    p.cycles.push_back((other && ref_owned ? 450.0 : 280.0) + (i * 7 % 23));
  }
  return p;
}

// 132 probes, `other(sm)` deciding the side, each passed through `edit(sm, probe)`.
template <typename Other, typename Edit>
std::vector<L2SideProbe> Probes132(Other other, Edit edit) {
  std::vector<L2SideProbe> probes;
  for (int sm = 0; sm < 132; ++sm) {
    L2SideProbe p = Probe(sm, other(sm));
    edit(sm, p);
    probes.push_back(p);
  }
  return probes;
}

// The classification of `probes` must find 66 SMs on each side.
kevolve::L2Sides Split66(const std::vector<L2SideProbe>& probes) {
  const auto s = ClassifyL2Sides(probes);
  REQUIRE(s.split);
  CHECK(s.count[0] == 66);
  CHECK(s.count[1] == 66);
  return s;
}

// As measured on an H200 in the calibration (twenty-fourth session): beside the reference
// 10-30% of the loads slow, across 55-70% (SMs 2, 3 of every 4 across).
bool AcrossEveryOther2(int sm) { return sm % 4 >= 2; }
void SlowAnyway(int sm, L2SideProbe& p) {
  const int extra = sm % 4 >= 2 ? 6 : 6 + sm % 13;
  for (int i = 0, k = 0; i < 64 && k < extra; ++i)
    if (p.cycles[i] < 400) p.cycles[i] = 600, ++k;
}

}  // namespace

TEST_CASE("L2 sides: SMs that see half the lines slow sit across the fabric from the reference", "[l2]") {
  std::vector<L2SideProbe> probes;
  for (int sm = 0; sm < 132; ++sm) probes.push_back(Probe(sm, (sm / 2) % 3 == 1));
  probes.push_back({132, {}});  // an SM id that ran no block
  const auto s = ClassifyL2Sides(probes);
  REQUIRE(s.split);
  CHECK(s.count[0] + s.count[1] == 132);
  CHECK(s.count[1] == 44);
  CHECK(s.side[0] == 0);
  CHECK(s.side[2] == 1);
  CHECK(s.side[3] == 1);
  CHECK(s.side[4] == 0);
  CHECK(s.side[132] == -1);
  CHECK(s.near_cycles == Approx(291).margin(12));
  CHECK(s.far_cycles == Approx(461).margin(12));
  CHECK(s.threshold > 320);
  CHECK(s.threshold < 420);
}

TEST_CASE("L2 sides: latencies scaled by a faster SM clock and a wide near spread still split", "[l2]") {
  // Near hits spread 340-420 cycles (the reference side's p90/p10 above 1.2), far ones 545+.
  const auto s = Split66(Probes132([](int sm) { return sm % 2 == 1; }, [](int, L2SideProbe& p) {
    for (double& c : p.cycles) c = c < 400 ? 340 + (c - 280) * 3.5 : c * 1.22;
  }));
  CHECK(s.side[1] == 1);
  CHECK(s.far_cycles > 1.4 * s.near_cycles);
}

TEST_CASE("L2 sides: a reference side that sees some far lines slow still splits at the gap", "[l2]") {
  const auto s = Split66(Probes132(AcrossEveryOther2, SlowAnyway));
  CHECK(s.side[0] == 0);
  CHECK(s.side[2] == 1);
}

TEST_CASE("L2 sides: an SM with every load slow neither takes a side nor hides the split", "[l2]") {
  auto probes = Probes132(AcrossEveryOther2, SlowAnyway);
  probes.push_back({132, std::vector<double>(64, 900.0)});
  CHECK(Split66(probes).side[132] == -1);
}

TEST_CASE("L2 sides: one partition, or a uniformly slow SM, is no split", "[l2]") {
  std::vector<L2SideProbe> probes;
  for (int sm = 0; sm < 16; ++sm) probes.push_back(Probe(sm, false));
  auto s = ClassifyL2Sides(probes);
  CHECK_FALSE(s.split);
  CHECK(s.count[0] == 16);
  CHECK(s.far_cycles == 0);
  // Every line slow from one SM (a slow path, not an owner pattern) is on neither side.
  L2SideProbe slow{16, std::vector<double>(64, 900.0)};
  probes.push_back(slow);
  s = ClassifyL2Sides(probes);
  CHECK_FALSE(s.split);
  CHECK(s.side[16] == -1);
  CHECK(s.count[0] == 16);
}

TEST_CASE("L2 owner granule: the power of two the owner changes fall on, outliers ignored", "[l2]") {
  // 128-byte lines; the owner of 4 KiB granule g is the parity of its bits 0, 1 and 3 (the
  // address bits 12, 13 and 15 the H200 uses): runs of one and two granules.
  std::vector<double> c;
  for (int i = 0; i < 512; ++i) {
    const int g = i / 32;
    c.push_back(((g & 1) ^ ((g >> 1) & 1) ^ ((g >> 3) & 1)) ? 450 : 280);
  }
  CHECK(L2OwnerGranule(c, 128, 365) == 4096);
  // Near lines delayed once each, inside near granules (0, 3, 4, 7, 10, 13): twelve changes
  // off the boundaries against nine on them, so this holds only because a single line
  // against both neighbours is taken for an outlier.
  for (int i : {5, 100, 140, 230, 330, 430}) c[i] = 520;
  CHECK(L2OwnerGranule(c, 128, 365) == 4096);
  // A two-line burst of slow near loads is two changes off the boundaries: nine in eleven
  // still fall on them.
  c[300] = c[301] = 700;
  CHECK(L2OwnerGranule(c, 128, 365) == 4096);
  // Owners every 8 KiB.
  std::vector<double> c8;
  for (int i = 0; i < 512; ++i) c8.push_back(((i / 64) ^ (i / 128)) & 1 ? 450 : 280);
  CHECK(L2OwnerGranule(c8, 128, 365) == 8192);
  // No owner change at all.
  CHECK(L2OwnerGranule(std::vector<double>(100, 280), 128, 365) == 0);
  // Noise with no boundaries: every change misaligned gives one line, not a granule.
  std::vector<double> noise;
  for (int i = 0; i < 512; ++i) noise.push_back((i * 37 % 11) < 5 ? 450 : 280);
  CHECK(L2OwnerGranule(noise, 128, 365) <= 256);
}

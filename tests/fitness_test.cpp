// Tests for the fitness rung (evaluators/fitness.h): roofline per shape, memory- and
// compute-bound fractions, the geometric mean, and the suspect flag below 0.9x roofline.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kevolve/evaluators/fitness.h"

namespace kevolve {
namespace {

// 1000 GB/s copy and 50 TFLOP/s fp32.
Calibration Cal() {
  Calibration c;
  c.uuid = "GPU-test";
  c.copy_gbps = 1000;
  c.fp32_gflops = 50000;
  return c;
}

ShapeTiming Timing(const std::string& shape, double median_us, double bytes, double flops) {
  ShapeTiming t;
  t.shape = shape;
  t.median_us = median_us;
  t.bytes = bytes;
  t.flops = flops;
  return t;
}

TEST_CASE("fitness: memory- and compute-bound shapes and their geometric mean", "[fitness]") {
  // Memory: 1e9 bytes at 1e12 B/s = 1000 us (flops: 1e9 / 5e13 = 20 us). Median 2000: 0.5.
  // Compute: 1e12 flops at 5e13 = 20000 us (bytes: 1 us). Median 25000: 0.8.
  std::vector<ShapeTiming> t = {Timing("mem", 2000, 1e9, 1e9), Timing("comp", 25000, 1e6, 1e12)};
  auto f = ComputeFitness(t, Cal());
  REQUIRE(f.shapes.size() == 2);
  CHECK(f.shapes[0].shape == "mem");
  CHECK(f.shapes[0].roofline_us == Approx(1000));
  CHECK(f.shapes[0].median_us == 2000);
  CHECK(f.shapes[0].fraction == Approx(0.5));
  CHECK(f.shapes[0].bound == "memory");
  CHECK(f.shapes[1].roofline_us == Approx(20000));
  CHECK(f.shapes[1].fraction == Approx(0.8));
  CHECK(f.shapes[1].bound == "compute");
  CHECK(f.fitness == Approx(std::sqrt(0.5 * 0.8)));
  CHECK_FALSE(f.suspect);
  CHECK(f.suspect_shape.empty());

  auto r = FitnessRung(f);
  CHECK(r.name == "fitness");
  CHECK(r.ok);
  CHECK(r.metrics["fitness"].get<double>() == Approx(std::sqrt(0.4)));
  CHECK(r.metrics["min_fraction"].get<double>() == Approx(0.5));
  CHECK(r.metrics["max_fraction"].get<double>() == Approx(0.8));
  REQUIRE(r.metrics["shapes"].size() == 2);
  CHECK(r.metrics["shapes"][1]["shape"] == "comp");
  CHECK(r.metrics["shapes"][1]["bound"] == "compute");
  CHECK(r.metrics["shapes"][1]["roofline_us"].get<double>() == Approx(20000));
  CHECK(r.metrics["shapes"][1]["median_us"].get<double>() == 25000);
  CHECK(r.metrics["shapes"][1]["fraction"].get<double>() == Approx(0.8));
}

TEST_CASE("fitness: three shapes, geometric mean by hand", "[fitness]") {
  // Fractions 0.25, 0.5, 1.0 -> (0.125)^(1/3) = 0.5.
  std::vector<ShapeTiming> t = {Timing("a", 4000, 1e9, 0), Timing("b", 2000, 1e9, 0), Timing("c", 1000, 1e9, 0)};
  auto f = ComputeFitness(t, Cal());
  CHECK(f.fitness == Approx(0.5));
  CHECK(f.shapes[2].fraction == Approx(1.0));
  CHECK_FALSE(f.suspect);
}

TEST_CASE("fitness: terms with a zero ceiling or numerator are skipped", "[fitness]") {
  Calibration no_peak = Cal();
  no_peak.fp32_gflops = 0;
  auto f = ComputeFitness({Timing("x", 2000, 1e9, 1e15)}, no_peak);
  CHECK(f.shapes[0].roofline_us == Approx(1000));
  CHECK(f.shapes[0].bound == "memory");
  // No cost model at all: roofline 0, fraction 0, fitness 0.
  auto g = ComputeFitness({Timing("x", 2000, 1e9, 0), Timing("y", 100, 0, 0)}, Cal());
  CHECK(g.shapes[1].roofline_us == 0);
  CHECK(g.shapes[1].fraction == 0);
  CHECK(g.fitness == 0);
  CHECK_FALSE(g.suspect);
  // A median of zero has fraction 0 and is impossible: suspect.
  auto z = ComputeFitness({Timing("z", 0, 1e9, 0)}, Cal());
  CHECK(z.shapes[0].fraction == 0);
  CHECK(z.fitness == 0);
  CHECK(z.suspect);
}

TEST_CASE("fitness: a time below 0.9x roofline is suspect, 0.95x is not", "[fitness]") {
  // Roofline 1000 us.
  auto fine = ComputeFitness({Timing("ok", 2000, 1e9, 0), Timing("fast", 950, 1e9, 0)}, Cal());
  CHECK_FALSE(fine.suspect);
  CHECK(fine.shapes[1].fraction == Approx(1000.0 / 950));
  CHECK(FitnessRung(fine).ok);

  auto bad = ComputeFitness({Timing("ok", 2000, 1e9, 0), Timing("cheat", 890, 1e9, 0), Timing("c2", 10, 1e9, 0)},
                            Cal());
  CHECK(bad.suspect);
  CHECK(bad.suspect_shape == "cheat");
  auto r = FitnessRung(bad);
  CHECK_FALSE(r.ok);
  CHECK(r.reason == "suspect");
  CHECK(r.log.find("cheat") != std::string::npos);
  CHECK(r.log.find("890") != std::string::npos);
  CHECK(r.log.find("1000") != std::string::npos);
  CHECK(r.log.find("physically impossible") != std::string::npos);
  CHECK(r.metrics.contains("fitness"));
  CHECK(r.metrics["shapes"].size() == 3);

  // The ratio is a parameter.
  CHECK(ComputeFitness({Timing("x", 960, 1e9, 0)}, Cal(), 0.97).suspect);
}

TEST_CASE("fitness: no timings", "[fitness]") {
  auto f = ComputeFitness({}, Cal());
  CHECK(f.fitness == 0);
  CHECK(f.shapes.empty());
  CHECK_FALSE(f.suspect);
  auto r = FitnessRung(f);
  CHECK(r.name == "fitness");
  CHECK_FALSE(r.ok);
  CHECK(r.reason == "no_timings");
  CHECK(r.metrics["fitness"] == 0.0);
  CHECK(r.metrics["shapes"].empty());
}

TEST_CASE("scaling fits: fixed cost and steady state over shapes that differ in one size", "[fitness]") {
  // 1000 GB/s: 1 MB = 1 us of roofline. The kernel takes 10 us + 1.25 us per roofline us
  // (80% of the roofline in steady state) at 512, 1024 and 2048 rows of 131072 columns.
  std::vector<ShapeTiming> ts;
  for (int rows : {512, 1024, 2048}) {
    const double bytes = rows * 1e6 / 512.0 * 60;  // 60, 120, 240 us of roofline
    ts.push_back(Timing(std::to_string(rows) + "x131072", 10 + 1.25 * bytes / 1e6, bytes, 0));
  }
  // A shape of another width (its own family along rows has one member; along cols it
  // pairs with 1024x131072, whose line is also returned) and one with a label that is no size list.
  ts.push_back(Timing("1024x65536", 10 + 1.25 * 60, 60e6, 0));
  ts.push_back(Timing("odd", 5, 1e6, 0));
  const auto fits = ScalingFits(ComputeFitness(ts, Cal()));
  REQUIRE(fits.size() == 2);
  CHECK(fits[0].varies == 0);
  CHECK(fits[0].shapes == std::vector<std::string>{"512x131072", "1024x131072", "2048x131072"});
  CHECK(fits[0].steady == Approx(0.8));
  CHECK(fits[0].fixed_us == Approx(10));
  CHECK(fits[0].max_residual_us == Approx(0).margin(1e-9));
  CHECK(fits[0].bound == "memory");
  CHECK(fits[1].varies == 1);
  CHECK(fits[1].shapes == std::vector<std::string>{"1024x131072", "1024x65536"});
  CHECK(fits[1].steady == Approx(0.8));
  CHECK(fits[1].fixed_us == Approx(10));
}

TEST_CASE("scaling fits: the residual of a bent line, and families without a rising line are left out", "[fitness]") {
  std::vector<ShapeTiming> ts = {Timing("1x100", 20, 10e6, 0), Timing("2x100", 30, 20e6, 0),
                                 Timing("4x100", 70, 40e6, 0)};  // 10, 20, 40 us of roofline
  auto fits = ScalingFits(ComputeFitness(ts, Cal()));
  REQUIRE(fits.size() == 1);
  // Least squares through (10, 20), (20, 30), (40, 70): slope 12/7, intercept 0, and a worst miss of 30/7 at x = 20.
  const double slope = 1.0 / fits[0].steady, fixed = fits[0].fixed_us;
  double worst = 0;
  for (auto [x, y] : {std::pair{10.0, 20.0}, {20.0, 30.0}, {40.0, 70.0}}) worst = std::max(worst, std::abs(y - fixed - slope * x));
  CHECK(slope == Approx(12.0 / 7.0));
  CHECK(fits[0].max_residual_us == Approx(worst));
  CHECK(fits[0].fixed_us == Approx(0).margin(1e-9));
  CHECK(fits[0].max_residual_us == Approx(30.0 / 7.0));
  // A larger shape that runs faster: no fit. One shape: no fit.
  CHECK(ScalingFits(ComputeFitness({Timing("1x100", 30, 10e6, 0), Timing("2x100", 20, 20e6, 0)}, Cal())).empty());
  CHECK(ScalingFits(ComputeFitness({Timing("1x100", 30, 10e6, 0)}, Cal())).empty());
  // Different bounds do not mix: a compute-bound shape is not fitted with memory-bound ones.
  CHECK(ScalingFits(ComputeFitness({Timing("1x100", 30, 10e6, 0), Timing("2x100", 60, 1, 1e9)}, Cal())).empty());
}

}  // namespace
}  // namespace kevolve

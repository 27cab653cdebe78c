// Tests for the host-side judgement (evaluators/metrics.h): element conversions, output
// comparison (errors, poison, non-finite, tolerances, cosine), merging, guard zones,
// hashing, sample statistics and the timing stop rule.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <tbb/task_arena.h>

#include "kevolve/evaluators/metrics.h"

namespace kevolve {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

uint16_t Bits16(double v, DType t) {
  uint16_t h = 0;
  StoreFromDouble(v, &h, t);
  return h;
}

double From16(uint16_t h, DType t) { return LoadAsDouble(&h, t); }

// `values` encoded as `dtype`, as raw bytes.
std::vector<unsigned char> Encode(const std::vector<double>& values, DType dtype) {
  const int sz = DTypeSize(dtype);
  std::vector<unsigned char> bytes(values.size() * static_cast<size_t>(sz));
  for (size_t i = 0; i < values.size(); ++i) StoreFromDouble(values[i], bytes.data() + i * sz, dtype);
  return bytes;
}

// Values exactly representable in `dtype` (so a faithful output compares exactly).
std::vector<double> Representable(std::vector<double> values, DType dtype) {
  unsigned char buf[8];
  for (double& v : values) {
    StoreFromDouble(v, buf, dtype);
    v = LoadAsDouble(buf, dtype);
  }
  return values;
}

std::vector<double> Normal(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

void Poison(std::vector<unsigned char>* bytes, size_t index, DType dtype) {
  const auto sz = static_cast<size_t>(DTypeSize(dtype));
  std::memset(bytes->data() + index * sz, kPoisonByte, sz);
}

Tolerances Tol(double atol, double rtol, double min_cossim = 0, int64_t max_mismatch = 0) {
  Tolerances t;
  t.atol = atol;
  t.rtol = rtol;
  t.min_cossim = min_cossim;
  t.max_mismatch = max_mismatch;
  return t;
}

TEST_CASE("f32 and f64 conversions round-trip", "[metrics]") {
  for (DType t : {DType::kF32, DType::kF64}) {
    for (double v : {1.0, -2.5, 0.0, -0.0, static_cast<double>(std::numeric_limits<float>::max()),
                      std::ldexp(1.0, -149), kInf, -kInf}) {
      unsigned char buf[8];
      StoreFromDouble(v, buf, t);
      CHECK(LoadAsDouble(buf, t) == v);
    }
    unsigned char buf[8];
    StoreFromDouble(kNaN, buf, t);
    CHECK(std::isnan(LoadAsDouble(buf, t)));
  }
  float f = 0;
  StoreFromDouble(1.0, &f, DType::kF32);
  CHECK(f == 1.0f);
  // Rounds to nearest, and values past the range become infinity.
  StoreFromDouble(0.1, &f, DType::kF32);
  CHECK(f == 0.1f);
  StoreFromDouble(1e300, &f, DType::kF32);
  CHECK(std::isinf(f));
  StoreFromDouble(-1e300, &f, DType::kF32);
  CHECK((std::isinf(f) && f < 0));
}

TEST_CASE("f16 conversions: normal, limits, subnormal, inf, nan, ties to even", "[metrics]") {
  const DType h = DType::kF16;
  CHECK(Bits16(1.0, h) == 0x3C00);
  CHECK(Bits16(-2.5, h) == 0xC100);
  CHECK(Bits16(65504.0, h) == 0x7BFF);
  CHECK(From16(0x3C00, h) == 1.0);
  CHECK(From16(0xC100, h) == -2.5);
  CHECK(From16(0x7BFF, h) == 65504.0);
  // Smallest subnormal 2^-24 and the smallest normal 2^-14.
  CHECK(Bits16(std::ldexp(1.0, -24), h) == 0x0001);
  CHECK(From16(0x0001, h) == std::ldexp(1.0, -24));
  CHECK(From16(0x03FF, h) == std::ldexp(1023.0, -24));
  CHECK(Bits16(std::ldexp(1.0, -14), h) == 0x0400);
  CHECK(From16(0x0400, h) == std::ldexp(1.0, -14));
  // Subnormal ties to even: 2^-25 -> 0, 3*2^-25 -> 2*2^-24; just above half rounds up.
  CHECK(Bits16(std::ldexp(1.0, -25), h) == 0x0000);
  CHECK(Bits16(std::ldexp(3.0, -25), h) == 0x0002);
  CHECK(Bits16(std::ldexp(1.0, -25) * 1.0001, h) == 0x0001);
  // The largest subnormal rounds up into the smallest normal.
  CHECK(Bits16(std::ldexp(1023.75, -24), h) == 0x0400);
  // Normal ties to even: 1 + 2^-11 -> 1, 1 + 3*2^-11 -> 1 + 2^-9.
  CHECK(Bits16(1.0 + std::ldexp(1.0, -11), h) == 0x3C00);
  CHECK(Bits16(1.0 + std::ldexp(3.0, -11), h) == 0x3C02);
  // Overflow: 65519 rounds down to 65504, 65520 (the tie) to infinity.
  CHECK(Bits16(65519.0, h) == 0x7BFF);
  CHECK(Bits16(65520.0, h) == 0x7C00);
  CHECK(Bits16(1e10, h) == 0x7C00);
  CHECK(Bits16(kInf, h) == 0x7C00);
  CHECK(Bits16(-kInf, h) == 0xFC00);
  CHECK(From16(0x7C00, h) == kInf);
  CHECK(From16(0xFC00, h) == -kInf);
  CHECK(Bits16(-0.0, h) == 0x8000);
  CHECK(std::signbit(From16(0x8000, h)));
  const uint16_t nan_bits = Bits16(kNaN, h);
  CHECK((nan_bits & 0x7C00) == 0x7C00);
  CHECK((nan_bits & 0x03FF) != 0);
  CHECK(std::isnan(From16(nan_bits, h)));
  CHECK(std::isnan(From16(0xFFFF, h)));  // the poison pattern
}

TEST_CASE("bf16 conversions: round to nearest even, inf, nan preserved", "[metrics]") {
  const DType b = DType::kBF16;
  CHECK(Bits16(1.0, b) == 0x3F80);
  CHECK(Bits16(-2.5, b) == 0xC020);
  CHECK(From16(0x3F80, b) == 1.0);
  CHECK(From16(0xC020, b) == -2.5);
  // 1 + 2^-8 is half an ulp above 1: ties to the even 1.0; 1 + 3*2^-8 ties up to 1 + 2^-6.
  CHECK(Bits16(1.0 + std::ldexp(1.0, -8), b) == 0x3F80);
  CHECK(Bits16(1.0 + std::ldexp(3.0, -8), b) == 0x3F82);
  // Just above the tie rounds up: no double rounding through f32.
  CHECK(Bits16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), b) == 0x3F81);
  CHECK(Bits16(kInf, b) == 0x7F80);
  CHECK(Bits16(-kInf, b) == 0xFF80);
  CHECK(From16(0x7F80, b) == kInf);
  CHECK(Bits16(1e39, b) == 0x7F80);  // past the bf16 range
  const uint16_t nan_bits = Bits16(kNaN, b);
  CHECK(std::isnan(From16(nan_bits, b)));
  CHECK(std::isnan(From16(Bits16(-kNaN, b), b)));
  CHECK(std::isnan(From16(0xFFFF, b)));  // the poison pattern
  // Subnormals survive.
  CHECK(From16(Bits16(std::ldexp(1.0, -133), b), b) == std::ldexp(1.0, -133));
}

TEST_CASE("identical outputs match exactly", "[metrics]") {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    auto ref = Representable(Normal(1000, 1), t);
    auto out = Encode(ref, t);
    auto m = CompareOutputs(out.data(), t, ref.data(), static_cast<int64_t>(ref.size()), Tol(0, 0, 0.9999));
    CHECK(m.elements == 1000);
    CHECK(m.mismatches == 0);
    CHECK(m.unwritten == 0);
    CHECK(m.nonfinite == 0);
    CHECK(m.max_abs == 0);
    CHECK(m.max_rel == 0);
    CHECK(m.rmse == 0);
    CHECK(m.psnr == 999);
    CHECK(m.cossim == Approx(1.0).epsilon(1e-12));
    CHECK(m.pass);
  }
}

TEST_CASE("a single bad element is counted and located", "[metrics]") {
  auto ref = Representable(Normal(5000, 2), DType::kF32);
  std::vector<double> vals = ref;
  vals[1234] += 0.5;
  vals[4000] += 1e-4;  // within tolerance
  auto out = Encode(vals, DType::kF32);
  auto m = CompareOutputs(out.data(), DType::kF32, ref.data(), 5000, Tol(1e-3, 1e-3));
  CHECK(m.mismatches == 1);
  CHECK(m.unwritten == 0);
  CHECK(m.worst_index == 1234);
  CHECK(m.worst_ref == ref[1234]);
  CHECK(m.worst_out == Approx(ref[1234] + 0.5).epsilon(1e-6));
  CHECK(m.max_abs == Approx(0.5).epsilon(1e-5));
  CHECK(m.rmse == Approx(std::sqrt((0.25 + 1e-8) / 5000)).epsilon(1e-4));
  CHECK_FALSE(m.pass);
  auto j = m.ToJson();
  CHECK(j["worst"]["index"] == 1234);
  CHECK(j["mismatches"] == 1);
  CHECK(j["pass"] == false);
}

TEST_CASE("poisoned elements count as unwritten", "[metrics]") {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    auto ref = Representable(Normal(100, 3), t);
    auto out = Encode(ref, t);
    Poison(&out, 10, t);
    Poison(&out, 20, t);
    Poison(&out, 99, t);
    auto m = CompareOutputs(out.data(), t, ref.data(), 100, Tol(1e-2, 1e-2, 0, 5));
    CHECK(m.unwritten == 3);
    CHECK(m.mismatches == 3);
    CHECK(m.nonfinite == 0);
    CHECK(m.max_abs == 0);  // excluded from the error sums
    CHECK(m.rmse == 0);
    CHECK(m.worst_index == 10);
    CHECK(std::isnan(m.worst_out));
    CHECK_FALSE(m.pass);  // even though mismatches <= max_mismatch
    // ToJson stays valid JSON: NaN becomes a string.
    auto j = m.ToJson();
    CHECK(j["worst"]["out"] == "nan");
    CHECK(nlohmann::json::parse(j.dump()) == j);
  }
}

TEST_CASE("NaN or Inf written where the reference is finite counts as nonfinite", "[metrics]") {
  auto ref = Representable(Normal(64, 4), DType::kF32);
  auto vals = ref;
  vals[5] = kNaN;
  vals[9] = -kInf;
  auto out = Encode(vals, DType::kF32);
  auto m = CompareOutputs(out.data(), DType::kF32, ref.data(), 64, Tol(1e-2, 1e-2, 0, 10));
  CHECK(m.nonfinite == 2);
  CHECK(m.unwritten == 0);
  CHECK(m.mismatches == 2);
  CHECK(m.worst_index == 5);
  CHECK(std::isfinite(m.rmse));
  CHECK(m.max_abs == 0);
  CHECK_FALSE(m.pass);
  // A non-finite reference matches the same value.
  std::vector<double> r2 = {kNaN, kInf, 1.0};
  auto o2 = Encode(r2, DType::kF32);
  auto m2 = CompareOutputs(o2.data(), DType::kF32, r2.data(), 3, Tol(0, 0));
  CHECK(m2.mismatches == 0);
  CHECK(m2.pass);
}

TEST_CASE("tolerance edge: just inside and just outside atol + rtol*|ref|", "[metrics]") {
  const auto tol = Tol(1e-3, 1e-2);  // allowed at ref 2: 0.021
  std::vector<double> ref = {2.0, -2.0};
  {
    std::vector<double> out = {2.0 + 0.0209, -2.0 - 0.0209};
    auto m = CompareOutputs(out.data(), DType::kF64, ref.data(), 2, tol);
    CHECK(m.mismatches == 0);
    CHECK(m.pass);
    CHECK(m.max_abs == Approx(0.0209));
    CHECK(m.max_rel == Approx(0.0209 / 2));
  }
  {
    std::vector<double> out = {2.0 + 0.0211, -2.0 - 0.0209};
    auto m = CompareOutputs(out.data(), DType::kF64, ref.data(), 2, tol);
    CHECK(m.mismatches == 1);
    CHECK(m.worst_index == 0);
    CHECK_FALSE(m.pass);
  }
  {
    // At |ref| == 0 only atol counts, and rel is the abs error.
    std::vector<double> r0 = {0.0, 0.0};
    std::vector<double> out = {0.0009, -0.0011};
    auto m = CompareOutputs(out.data(), DType::kF64, r0.data(), 2, tol);
    CHECK(m.mismatches == 1);
    CHECK(m.worst_index == 1);
    CHECK(m.max_rel == Approx(0.0011));
    CHECK(m.psnr == 0);  // max|ref| == 0 with an error
    CHECK(m.cossim == 0);  // one norm zero
  }
}

TEST_CASE("worst_index ranks by the tolerance ratio, not the raw error", "[metrics]") {
  const auto tol = Tol(1e-3, 1e-2);
  std::vector<double> ref = {1000.0, 0.0};
  std::vector<double> out = {1005.0, 0.01};  // ratio 5/10.001 < 0.01/0.001
  auto m = CompareOutputs(out.data(), DType::kF64, ref.data(), 2, tol);
  CHECK(m.worst_index == 1);
  CHECK(m.max_abs == 5.0);
  CHECK(m.mismatches == 1);
}

TEST_CASE("max_mismatch allows a number of mismatches", "[metrics]") {
  auto ref = Representable(Normal(200, 5), DType::kF32);
  auto vals = ref;
  for (int i : {3, 50, 150}) vals[static_cast<size_t>(i)] += 1.0;
  auto out = Encode(vals, DType::kF32);
  auto ok = CompareOutputs(out.data(), DType::kF32, ref.data(), 200, Tol(1e-3, 1e-3, 0.9, 3));
  CHECK(ok.mismatches == 3);
  CHECK(ok.pass);
  auto bad = CompareOutputs(out.data(), DType::kF32, ref.data(), 200, Tol(1e-3, 1e-3, 0.9, 2));
  CHECK_FALSE(bad.pass);
}

TEST_CASE("min_cossim fails an output that is in tolerance but points elsewhere", "[metrics]") {
  auto ref = Normal(500, 6);
  std::vector<double> out(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) out[i] = -ref[i];
  auto m = CompareOutputs(out.data(), DType::kF64, ref.data(), 500, Tol(100, 0, 0.99));
  CHECK(m.mismatches == 0);
  CHECK(m.cossim == Approx(-1.0));
  CHECK_FALSE(m.pass);
  auto loose = CompareOutputs(out.data(), DType::kF64, ref.data(), 500, Tol(100, 0, -1.0));
  CHECK(loose.pass);
}

TEST_CASE("a constant output that ignores its input fails", "[metrics]") {
  auto ref = Normal(4096, 7);
  for (double& v : ref) v = v * 3.0 + 1.0;
  std::vector<double> vals(ref.size(), 1.0);  // the mean, right on average
  auto out = Encode(vals, DType::kF32);
  auto m = CompareOutputs(out.data(), DType::kF32, ref.data(), 4096, Tol(1e-2, 1e-2, 0.99, 10));
  CHECK(m.mismatches > 4000);
  CHECK(m.cossim < 0.5);
  CHECK(m.psnr < 20);
  CHECK_FALSE(m.pass);
}

TEST_CASE("bf16 rounding passes a bf16 tolerance and fails an f32 one", "[metrics]") {
  auto ref = Normal(10000, 8);
  auto out = Encode(ref, DType::kBF16);  // the exact result, rounded to bf16
  auto bf16 = CompareOutputs(out.data(), DType::kBF16, ref.data(), 10000, Tol(1e-5, 8e-3, 0.9999));
  CHECK(bf16.mismatches == 0);
  CHECK(bf16.max_rel <= std::ldexp(1.0, -8));
  CHECK(bf16.pass);
  auto f32 = CompareOutputs(out.data(), DType::kBF16, ref.data(), 10000, Tol(1e-5, 1e-5, 0.9999));
  CHECK(f32.mismatches > 1000);
  CHECK_FALSE(f32.pass);
}

TEST_CASE("large comparisons (the parallel path) agree with known counts", "[metrics]") {
  const size_t n = (size_t{1} << 21) + 12345;
  std::vector<double> ref(n);
  for (size_t i = 0; i < n; ++i) ref[i] = static_cast<double>(i % 1000) - 500.0;
  auto out = Encode(ref, DType::kF32);
  Poison(&out, n - 7, DType::kF32);
  Poison(&out, 1500000, DType::kF32);
  float bad = 12345.0f;
  std::memcpy(out.data() + 4 * 777777, &bad, 4);
  auto m = CompareOutputs(out.data(), DType::kF32, ref.data(), static_cast<int64_t>(n), Tol(0, 0));
  CHECK(m.elements == static_cast<int64_t>(n));
  CHECK(m.unwritten == 2);
  CHECK(m.mismatches == 3);
  CHECK(m.worst_index == 1500000);  // the first unwritten
  CHECK(m.max_abs == std::fabs(12345.0 - ref[777777]));
}

TEST_CASE("merging metrics", "[metrics]") {
  auto ref = Representable(Normal(100, 9), DType::kF32);
  auto good_out = Encode(ref, DType::kF32);
  auto vals = ref;
  vals[42] += 2.0;
  auto bad_out = Encode(vals, DType::kF32);
  const auto tol = Tol(1e-3, 1e-3, 0.9);
  auto good = CompareOutputs(good_out.data(), DType::kF32, ref.data(), 100, tol);
  auto bad = CompareOutputs(bad_out.data(), DType::kF32, ref.data(), 100, tol);
  CompareMetrics acc;  // empty: the identity
  MergeMetrics(&acc, good);
  CHECK(acc.pass);
  CHECK(acc.elements == 100);
  MergeMetrics(&acc, bad);
  CHECK(acc.elements == 200);
  CHECK(acc.mismatches == 1);
  CHECK(acc.max_abs == bad.max_abs);
  CHECK(acc.rmse == Approx(std::sqrt(bad.rmse * bad.rmse / 2)));
  CHECK(acc.psnr == bad.psnr);
  CHECK(acc.cossim == bad.cossim);
  CHECK(acc.worst_index == 42);
  CHECK_FALSE(acc.pass);
  MergeMetrics(&acc, good);  // a better part does not take over the worst element
  CHECK(acc.worst_index == 42);
  CHECK(acc.elements == 300);
}

TEST_CASE("guard violations count changed bytes", "[metrics]") {
  std::vector<uint8_t> guard(static_cast<size_t>(kGuardBytes), kGuardByte);
  CHECK(GuardViolations(guard.data(), kGuardBytes) == 0);
  guard[0] = 0;
  guard[100] = 0xA4;
  guard[4095] = 0xFF;
  CHECK(GuardViolations(guard.data(), kGuardBytes) == 3);
}

TEST_CASE("HashBytes sees any single byte change, at every length and position", "[metrics]") {
  // Lengths around the 8- and 32-byte steps and the 1 MiB pieces (several pieces are
  // hashed in parallel); a flipped bit in the first, a middle, a piece-boundary and the
  // last byte must change the hash, and the same bytes must give the same hash.
  const size_t mib = size_t{1} << 20;
  for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{31}, size_t{33}, size_t{1000}, mib - 1, mib, mib + 1,
                   3 * mib + 13}) {
    std::vector<unsigned char> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<unsigned char>(i * 7 + (i >> 11));
    const uint64_t h = HashBytes(data.data(), n);
    CHECK(HashBytes(data.data(), n) == h);
    for (size_t at : {size_t{0}, n / 2, std::min(n - 1, mib - 1), std::min(n - 1, mib), n - 1}) {
      data[at] ^= 0x10;
      CHECK(HashBytes(data.data(), n) != h);
      data[at] ^= 0x10;
    }
    CHECK(HashBytes(data.data(), n) == h);
  }
  // Two buffers that differ only in length (trailing zeros) hash differently.
  std::vector<unsigned char> z(64, 0);
  CHECK(HashBytes(z.data(), 32) != HashBytes(z.data(), 64));
  CHECK(HashBytes(z.data(), 0) != HashBytes(z.data(), 1));
}

TEST_CASE("HashBytes gives the same value on one thread as on many", "[metrics]") {
  std::vector<unsigned char> data(5 * (size_t{1} << 20) + 77);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  const uint64_t many = HashBytes(data.data(), data.size());
  uint64_t one = 0;
  tbb::task_arena arena(1);
  arena.execute([&] { one = HashBytes(data.data(), data.size()); });
  CHECK(one == many);
}

TEST_CASE("CountDifferentElements compares per element", "[metrics]") {
  std::vector<float> a(100000, 1.0f), b = a;
  CHECK(CountDifferentElements(a.data(), b.data(), 100000, 4) == 0);
  b[2] = 2.0f;
  b[3] = 2.0f;
  b[99999] = -0.0f;
  b[50000] = 1.0000001f;
  CHECK(CountDifferentElements(a.data(), b.data(), 100000, 4) == 4);
  // Floats 2 and 3 lie in the same 8-byte element: it counts once.
  CHECK(CountDifferentElements(a.data(), b.data(), 50000, 8) == 3);
  CHECK(CountDifferentElements(a.data(), b.data(), 0, 4) == 0);
}

TEST_CASE("Summarize: percentiles, mean, stddev, rse", "[metrics]") {
  std::vector<double> v = {7, 3, 10, 1, 5, 9, 2, 8, 6, 4};  // 1..10, shuffled
  auto s = Summarize(v);
  CHECK(s.n == 10);
  CHECK(s.median == Approx(5.5));
  CHECK(s.p10 == Approx(1.9));
  CHECK(s.p90 == Approx(9.1));
  CHECK(s.mean == Approx(5.5));
  CHECK(s.stddev == Approx(std::sqrt(82.5 / 9)));
  CHECK(s.min == 1);
  CHECK(s.max == 10);
  CHECK(s.rse == Approx(std::sqrt(82.5 / 9) / std::sqrt(10.0) / 5.5));

  auto odd = Summarize({5, 1, 3});
  CHECK(odd.median == 3);
  CHECK(odd.p10 == Approx(1.4));
  CHECK(odd.p90 == Approx(4.6));

  auto one = Summarize({42});
  CHECK(one.n == 1);
  CHECK(one.median == 42);
  CHECK(one.p10 == 42);
  CHECK(one.p90 == 42);
  CHECK(one.stddev == 0);
  CHECK(one.rse == 0);

  auto none = Summarize({});
  CHECK(none.n == 0);
  CHECK(none.median == 0);
  CHECK(none.mean == 0);
  CHECK(none.rse == 0);
}

TEST_CASE("ShouldStopTiming: rse, max_reps, time_cap", "[metrics]") {
  TimingProtocol p;
  p.min_reps = 10;
  p.max_reps = 50;
  p.target_rse = 0.01;
  p.max_ms_per_shape = 1000;
  std::string why;

  // Tight samples, but fewer than min_reps: keep going.
  std::vector<double> tight(5, 100.0);
  CHECK_FALSE(ShouldStopTiming(Summarize(tight), p, 10, &why));
  tight.resize(10, 100.0);
  tight[0] = 100.5;
  CHECK(ShouldStopTiming(Summarize(tight), p, 10, &why));
  CHECK(why == "rse");

  // Noisy samples: stop only at max_reps.
  std::vector<double> noisy;
  for (int i = 0; i < 49; ++i) noisy.push_back(i % 2 ? 10.0 : 100.0);
  CHECK_FALSE(ShouldStopTiming(Summarize(noisy), p, 10, &why));
  noisy.push_back(10.0);
  why.clear();
  CHECK(ShouldStopTiming(Summarize(noisy), p, 10, &why));
  CHECK(why == "max_reps");

  // Noisy and slow: the time cap.
  noisy.resize(20);
  why.clear();
  CHECK(ShouldStopTiming(Summarize(noisy), p, 1000, &why));
  CHECK(why == "time_cap");
  CHECK(ShouldStopTiming(Summarize(noisy), p, 1000, nullptr));
  CHECK_FALSE(ShouldStopTiming(Summarize(noisy), p, 999, nullptr));
}

TEST_CASE("ToJson has every key and stays JSON-safe", "[metrics]") {
  CompareMetrics m;
  m.elements = 4;
  m.worst_out = kInf;
  m.worst_ref = -kInf;
  m.max_abs = 0.25;
  auto j = m.ToJson();
  for (const char* k : {"elements", "mismatches", "unwritten", "nonfinite", "max_abs", "max_rel", "rmse", "psnr",
                        "cossim", "worst", "pass"}) {
    CHECK(j.contains(k));
  }
  CHECK(j["worst"].contains("index"));
  CHECK(j["worst"]["out"] == "inf");
  CHECK(j["worst"]["ref"] == "-inf");
  CHECK(j["max_abs"] == 0.25);
  CHECK(nlohmann::json::parse(j.dump()) == j);
}

}  // namespace
}  // namespace kevolve

// Host-side judgement of one launch: element conversions, output comparison, guard and
// input checks, and timing statistics.
//
// Conventions worth knowing (the header leaves them open):
//   - JSON has no NaN/Inf: CompareMetrics::ToJson writes a non-finite double as the
//     string "nan", "inf" or "-inf" (never a bare NaN, which nlohmann would print as null
//     and other readers reject). Finite values stay numbers.
//   - An element whose reference is itself NaN/Inf matches an identical output (NaN for
//     NaN, the same infinity) and is a mismatch otherwise; it is never in the error sums.
//   - worst_index is the element with the largest abs / (atol + rtol*|ref|); unwritten and
//     non-finite elements rank above every finite one (the first such wins). With a zero
//     tolerance the ratio of any nonzero error is infinite and ties break on the abs error.
//     For an exact match it is 0 (the first element), or -1 when n == 0.
//   - Sums use double within fixed blocks and long double across blocks, combined in a
//     fixed order, so the result does not depend on the thread count.
#include "kevolve/evaluators/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace kevolve {

namespace {

// ---------------------------------------------------------------------------------------
// Conversions.

inline uint16_t Load16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return h;
}

inline double HalfToDouble(uint16_t h) {
  const int sign = h >> 15;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), -24);  // zero or subnormal
  } else if (exp == 31) {
    v = mant == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
  }
  return sign ? -v : v;
}

inline double BF16ToDouble(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return static_cast<double>(f);
}

inline double F32ToDouble(const void* p) {
  float f;
  std::memcpy(&f, p, sizeof(f));
  return static_cast<double>(f);
}

inline double F64ToDouble(const void* p) {
  double d;
  std::memcpy(&d, p, sizeof(d));
  return d;
}

inline double I32ToDouble(const void* p) {
  int32_t i;
  std::memcpy(&i, p, sizeof(i));
  return static_cast<double>(i);
}

// Rounds a finite or infinite non-NaN |v| (sign handled by the caller) to a binary format
// with `mant_bits` stored significand bits and `exp_bits` exponent bits, to nearest even,
// in one step straight from the double (no double rounding through f32). Returns the
// magnitude bits (exponent and significand fields).
uint64_t RoundMagnitude(double a, int mant_bits, int exp_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int emin = 1 - bias;
  const int emax = bias;
  const uint64_t inf_bits = static_cast<uint64_t>((1 << exp_bits) - 1) << mant_bits;
  if (std::isinf(a)) return inf_bits;
  // Halfway between the largest finite value and 2^(emax+1): at or above it, overflow.
  const double overflow = std::ldexp(2.0 - std::ldexp(1.0, -(mant_bits + 1)), emax);
  if (a >= overflow) return inf_bits;
  if (a < std::ldexp(1.0, emin)) {
    // Subnormal (or zero): a multiple of 2^(emin - mant_bits). Exact scaling, one rounding;
    // a result of 2^mant_bits is the smallest normal, whose bits are the same integer.
    return static_cast<uint64_t>(std::nearbyint(std::ldexp(a, mant_bits - emin)));
  }
  int ex = 0;
  const double f = std::frexp(a, &ex);  // a = f * 2^ex, f in [0.5, 1)
  int e = ex - 1;                        // a = (2f) * 2^e
  auto m = static_cast<uint64_t>(std::nearbyint(std::ldexp(f, mant_bits + 1)));
  const uint64_t hidden = uint64_t{1} << mant_bits;
  if (m == 2 * hidden) {
    m = hidden;
    ++e;
  }
  if (e > emax) return inf_bits;
  return (static_cast<uint64_t>(e + bias) << mant_bits) | (m - hidden);
}

uint16_t DoubleToHalf(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return static_cast<uint16_t>(sign | 0x7E00);
  return static_cast<uint16_t>(sign | RoundMagnitude(std::fabs(v), 10, 5));
}

uint16_t DoubleToBF16(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) {
    // Keep the sign and the top payload bits, and force the quiet bit so it stays a NaN.
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    const auto payload = static_cast<uint16_t>((bits >> (52 - 7)) & 0x7F);
    return static_cast<uint16_t>(sign | 0x7F80 | 0x40 | payload);
  }
  return static_cast<uint16_t>(sign | RoundMagnitude(std::fabs(v), 7, 8));
}

float DoubleToFloat(double v) {
  if (std::isnan(v) || std::fabs(v) <= static_cast<double>(std::numeric_limits<float>::max())) {
    return static_cast<float>(v);  // in range: the conversion rounds to nearest even
  }
  // Out of range (a plain cast would be undefined): round by hand, which gives inf or FLT_MAX.
  auto bits = static_cast<uint32_t>(RoundMagnitude(std::fabs(v), 23, 8));
  if (std::signbit(v)) bits |= 0x80000000u;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

int32_t DoubleToI32(double v) {
  if (std::isnan(v)) return 0;
  const double r = std::nearbyint(v);
  if (r >= 2147483647.0) return std::numeric_limits<int32_t>::max();
  if (r <= -2147483648.0) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(r);
}

// ---------------------------------------------------------------------------------------
// Comparison.

// The ranking of one element for worst_index: unwritten/non-finite above everything,
// then the tolerance ratio, then the abs error. Ties keep the earlier element.
struct WorstKey {
  int cls = -1;  // -1: none yet, 0: finite, 1: unwritten / non-finite / non-finite ref mismatch
  double ratio = 0;
  double abs = 0;
  bool Beats(const WorstKey& o) const {
    if (cls != o.cls) return cls > o.cls;
    if (cls == 1) return false;  // first such wins
    if (ratio != o.ratio) return ratio > o.ratio;
    return abs > o.abs;
  }
};

// One block's partial results.
struct Partial {
  int64_t mismatches = 0, unwritten = 0, nonfinite = 0, compared = 0;
  double max_abs = 0, max_rel = 0, max_ref = 0;
  double sum_sq = 0, dot = 0, norm_out = 0, norm_ref = 0;
  WorstKey worst;
  int64_t worst_index = -1;
  double worst_out = 0, worst_ref = 0;
};

constexpr int64_t kBlock = 1 << 14;             // elements per partial
constexpr int64_t kParallelThreshold = 1 << 20;  // below this, one thread
constexpr double kShrink = 1 - 1e-12;           // slack for the pre-tests' rounding

template <int kBytes>
inline bool AllPoison(const unsigned char* p) {
  for (int i = 0; i < kBytes; ++i) {
    if (p[i] != kPoisonByte) return false;
  }
  return true;
}

template <int kBytes, typename Load>
void CompareBlock(const unsigned char* out, const double* ref, int64_t begin, int64_t end, const Tolerances& tol,
                  Load load, Partial* part) {
  Partial p;
  for (int64_t i = begin; i < end; ++i) {
    const unsigned char* e = out + i * kBytes;
    const double r = ref[i];
    WorstKey key;
    double o;
    if (AllPoison<kBytes>(e)) {
      ++p.unwritten;
      ++p.mismatches;
      o = load(e);
      key.cls = 1;
    } else {
      o = load(e);
      const bool out_finite = std::isfinite(o);
      const bool ref_finite = std::isfinite(r);
      if (!ref_finite) {
        // A non-finite reference matches only the same value.
        const bool same = (std::isnan(r) && std::isnan(o)) || (!std::isnan(r) && o == r);
        if (same) continue;
        ++p.mismatches;
        key.cls = 1;
      } else if (!out_finite) {
        ++p.nonfinite;
        ++p.mismatches;
        key.cls = 1;
      } else {
        const double a = std::fabs(o - r);
        const double ar = std::fabs(r);
        const double allowed = tol.atol + tol.rtol * ar;
        if (a > allowed) ++p.mismatches;
        if (a > p.max_abs) p.max_abs = a;
        if (ar > p.max_ref) p.max_ref = ar;
        const double d = o - r;
        p.sum_sq += d * d;
        p.dot += o * r;
        p.norm_out += o * o;
        p.norm_ref += r * r;
        ++p.compared;
        // Divisions only for candidates: a cheap, slightly generous pre-test first.
        if (a > 0 && a >= (ar > 0 ? p.max_rel * ar : p.max_rel) * kShrink) {
          p.max_rel = std::max(p.max_rel, ar > 0 ? a / ar : a);
        }
        if (p.worst.cls == 1) continue;
        if (p.worst.cls == 0 && !(a > 0 && (allowed <= 0 || a >= p.worst.ratio * allowed * kShrink))) continue;
        key.cls = 0;
        key.abs = a;
        if (allowed > 0) key.ratio = a / allowed;
        else key.ratio = a > 0 ? std::numeric_limits<double>::infinity() : 0.0;
      }
    }
    if (key.Beats(p.worst)) {
      p.worst = key;
      p.worst_index = i;
      p.worst_out = o;
      p.worst_ref = r;
    }
  }
  *part = p;
}

template <int kBytes, typename Load>
CompareMetrics CompareTyped(const void* out_v, const double* ref, int64_t n, const Tolerances& tol, Load load) {
  const auto* out = static_cast<const unsigned char*>(out_v);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<Partial> parts(static_cast<size_t>(blocks));
  auto run = [&](int64_t b) {
    const int64_t begin = b * kBlock;
    const int64_t end = std::min(n, begin + kBlock);
    CompareBlock<kBytes>(out, ref, begin, end, tol, load, &parts[static_cast<size_t>(b)]);
  };
  if (n >= kParallelThreshold) {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, blocks), [&](const tbb::blocked_range<int64_t>& range) {
      for (int64_t b = range.begin(); b != range.end(); ++b) run(b);
    });
  } else {
    for (int64_t b = 0; b < blocks; ++b) run(b);
  }

  // Combine in block order: deterministic, and "first such" stays first.
  CompareMetrics m;
  m.elements = n;
  long double sum_sq = 0, dot = 0, norm_out = 0, norm_ref = 0;
  int64_t compared = 0;
  double max_ref = 0;
  WorstKey worst;
  for (const Partial& p : parts) {
    m.mismatches += p.mismatches;
    m.unwritten += p.unwritten;
    m.nonfinite += p.nonfinite;
    compared += p.compared;
    m.max_abs = std::max(m.max_abs, p.max_abs);
    m.max_rel = std::max(m.max_rel, p.max_rel);
    max_ref = std::max(max_ref, p.max_ref);
    sum_sq += p.sum_sq;
    dot += p.dot;
    norm_out += p.norm_out;
    norm_ref += p.norm_ref;
    if (p.worst_index >= 0 && p.worst.Beats(worst)) {
      worst = p.worst;
      m.worst_index = p.worst_index;
      m.worst_out = p.worst_out;
      m.worst_ref = p.worst_ref;
    }
  }
  m.rmse = compared > 0 ? static_cast<double>(std::sqrt(sum_sq / static_cast<long double>(compared))) : 0.0;
  if (m.rmse == 0) m.psnr = 999;
  else if (max_ref == 0) m.psnr = 0;
  else m.psnr = std::min(999.0, 20.0 * std::log10(max_ref / m.rmse));
  const bool zero_out = norm_out == 0, zero_ref = norm_ref == 0;
  if (zero_out && zero_ref) m.cossim = 1;
  else if (zero_out || zero_ref) m.cossim = 0;
  else m.cossim = static_cast<double>(dot / (std::sqrt(norm_out) * std::sqrt(norm_ref)));
  m.pass = m.unwritten == 0 && m.nonfinite == 0 && m.mismatches <= tol.max_mismatch && m.cossim >= tol.min_cossim;
  return m;
}

// A JSON-safe double: non-finite values become "nan", "inf" or "-inf".
nlohmann::json JsonNumber(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

}  // namespace

double LoadAsDouble(const void* p, DType dtype) {
  switch (dtype) {
    case DType::kF32: return F32ToDouble(p);
    case DType::kF16: return HalfToDouble(Load16(p));
    case DType::kBF16: return BF16ToDouble(Load16(p));
    case DType::kF64: return F64ToDouble(p);
    case DType::kI32: return I32ToDouble(p);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

void StoreFromDouble(double v, void* p, DType dtype) {
  switch (dtype) {
    case DType::kF32: {
      const float f = DoubleToFloat(v);
      std::memcpy(p, &f, sizeof(f));
      return;
    }
    case DType::kF16: {
      const uint16_t h = DoubleToHalf(v);
      std::memcpy(p, &h, sizeof(h));
      return;
    }
    case DType::kBF16: {
      const uint16_t h = DoubleToBF16(v);
      std::memcpy(p, &h, sizeof(h));
      return;
    }
    case DType::kF64: std::memcpy(p, &v, sizeof(v)); return;
    case DType::kI32: {
      const int32_t i = DoubleToI32(v);
      std::memcpy(p, &i, sizeof(i));
      return;
    }
  }
}

nlohmann::json CompareMetrics::ToJson() const {
  return nlohmann::json{
      {"elements", elements},
      {"mismatches", mismatches},
      {"unwritten", unwritten},
      {"nonfinite", nonfinite},
      {"max_abs", JsonNumber(max_abs)},
      {"max_rel", JsonNumber(max_rel)},
      {"rmse", JsonNumber(rmse)},
      {"psnr", JsonNumber(psnr)},
      {"cossim", JsonNumber(cossim)},
      {"worst", {{"index", worst_index}, {"out", JsonNumber(worst_out)}, {"ref", JsonNumber(worst_ref)}}},
      {"pass", pass},
  };
}

CompareMetrics CompareOutputs(const void* out, DType dtype, const double* ref, int64_t n, const Tolerances& tol) {
  if (n <= 0) {
    CompareMetrics m;
    m.psnr = 999;
    m.pass = 0 <= tol.max_mismatch && m.cossim >= tol.min_cossim;
    return m;
  }
  switch (dtype) {
    case DType::kF32: return CompareTyped<4>(out, ref, n, tol, [](const unsigned char* e) { return F32ToDouble(e); });
    case DType::kF16:
      return CompareTyped<2>(out, ref, n, tol, [](const unsigned char* e) { return HalfToDouble(Load16(e)); });
    case DType::kBF16:
      return CompareTyped<2>(out, ref, n, tol, [](const unsigned char* e) { return BF16ToDouble(Load16(e)); });
    case DType::kF64: return CompareTyped<8>(out, ref, n, tol, [](const unsigned char* e) { return F64ToDouble(e); });
    case DType::kI32: return CompareTyped<4>(out, ref, n, tol, [](const unsigned char* e) { return I32ToDouble(e); });
  }
  return CompareMetrics{};
}

// Merging: an empty side (elements == 0, e.g. a default-constructed accumulator) is the
// identity. rmse combines the mean squares weighted by the elements that entered them
// (elements - unwritten - nonfinite). The struct has no room for the worst element's
// tolerance ratio, so `worst` comes from the side ranked worse by: unwritten/non-finite
// present, then any mismatch, then the larger max_abs; ties keep `into`'s. Its index is
// the index within that side's own comparison.
void MergeMetrics(CompareMetrics* into, const CompareMetrics& m) {
  if (m.elements == 0) return;
  if (into->elements == 0) {
    *into = m;
    return;
  }
  auto weight = [](const CompareMetrics& c) {
    return static_cast<double>(std::max<int64_t>(0, c.elements - c.unwritten - c.nonfinite));
  };
  const double wa = weight(*into), wb = weight(m);
  double rmse;
  if (wa + wb > 0) {
    rmse = std::sqrt((into->rmse * into->rmse * wa + m.rmse * m.rmse * wb) / (wa + wb));
  } else {
    rmse = std::max(into->rmse, m.rmse);
  }
  auto rank = [](const CompareMetrics& c) {
    return std::make_tuple(c.unwritten + c.nonfinite > 0, c.mismatches > 0, c.max_abs);
  };
  if (rank(m) > rank(*into) || into->worst_index < 0) {
    into->worst_index = m.worst_index;
    into->worst_out = m.worst_out;
    into->worst_ref = m.worst_ref;
  }
  into->elements += m.elements;
  into->mismatches += m.mismatches;
  into->unwritten += m.unwritten;
  into->nonfinite += m.nonfinite;
  into->max_abs = std::max(into->max_abs, m.max_abs);
  into->max_rel = std::max(into->max_rel, m.max_rel);
  into->rmse = rmse;
  into->psnr = std::min(into->psnr, m.psnr);
  into->cossim = std::min(into->cossim, m.cossim);
  into->pass = into->pass && m.pass;
}

int64_t GuardViolations(const uint8_t* guard, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += guard[i] != kGuardByte;
  return bad;
}

namespace {

// HashBytes: each 1 MiB piece is hashed on its own (in parallel for large buffers), four
// independent 64-bit lanes of multiply-rotate rounds over 8-byte words, then the pieces'
// hashes are folded in order, so the result does not depend on the thread count. A round
// is a bijection of its lane for a fixed word and of the word for a fixed lane, so one
// changed byte changes its lane for good. The byte-wise FNV-1a this replaces ran at about
// 0.9 GB/s, one multiply's latency per byte: seconds per check of a 128M-element shape.
constexpr uint64_t kHashM1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kHashM2 = 0xC2B2AE3D27D4EB4Full;
constexpr size_t kHashPiece = size_t{1} << 20;

inline uint64_t Rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t HashRound(uint64_t acc, uint64_t word) { return Rotl64(acc + word * kHashM2, 31) * kHashM1; }
inline uint64_t HashFinal(uint64_t h) {
  h ^= h >> 33;
  h *= kHashM2;
  h ^= h >> 29;
  h *= kHashM1;
  return h ^ (h >> 32);
}
inline uint64_t Load64(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

uint64_t HashPiece(const unsigned char* p, size_t n, uint64_t seed) {
  uint64_t a0 = seed + kHashM1, a1 = seed ^ kHashM2, a2 = seed + 1, a3 = seed - kHashM1;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = HashRound(a0, Load64(p + i));
    a1 = HashRound(a1, Load64(p + i + 8));
    a2 = HashRound(a2, Load64(p + i + 16));
    a3 = HashRound(a3, Load64(p + i + 24));
  }
  uint64_t h = Rotl64(a0, 1) + Rotl64(a1, 7) + Rotl64(a2, 12) + Rotl64(a3, 18) + n;
  for (; i + 8 <= n; i += 8) h = HashRound(h, Load64(p + i));
  for (; i < n; ++i) h = HashRound(h, p[i]);
  return HashFinal(h);
}

}  // namespace

uint64_t HashBytes(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  const size_t pieces = (n + kHashPiece - 1) / kHashPiece;
  if (pieces <= 1) return HashFinal(HashPiece(p, n, 0) ^ n);
  std::vector<uint64_t> hs(pieces);
  auto run = [&](size_t k) { hs[k] = HashPiece(p + k * kHashPiece, std::min(kHashPiece, n - k * kHashPiece), k); };
  tbb::parallel_for(tbb::blocked_range<size_t>(0, pieces), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t k = r.begin(); k != r.end(); ++k) run(k);
  });
  uint64_t h = n;
  for (uint64_t x : hs) h = HashRound(h, x);
  return HashFinal(h);
}

// Returns the number of elements (of elem_bytes each) whose bytes differ.
int64_t CountDifferentElements(const void* a, const void* b, int64_t n, int elem_bytes) {
  if (n <= 0 || elem_bytes <= 0) return 0;
  const auto* pa = static_cast<const unsigned char*>(a);
  const auto* pb = static_cast<const unsigned char*>(b);
  const auto eb = static_cast<size_t>(elem_bytes);
  int64_t diff = 0;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    const size_t off = static_cast<size_t>(begin) * eb;
    const size_t len = static_cast<size_t>(end - begin) * eb;
    if (std::memcmp(pa + off, pb + off, len) == 0) continue;  // the common case, fast
    for (int64_t i = begin; i < end; ++i) {
      const size_t o = static_cast<size_t>(i) * eb;
      diff += std::memcmp(pa + o, pb + o, eb) != 0;
    }
  }
  return diff;
}

// NaN samples are dropped (they would break the ordering); n counts the rest.
SampleStats Summarize(std::vector<double> samples) {
  samples.erase(std::remove_if(samples.begin(), samples.end(), [](double v) { return std::isnan(v); }),
                samples.end());
  SampleStats s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const auto n = static_cast<int64_t>(samples.size());
  s.n = n;
  s.min = samples.front();
  s.max = samples.back();
  // numpy's default "linear": h = (n-1) q, interpolate between floor(h) and floor(h)+1.
  auto quantile = [&](double q) {
    const double h = static_cast<double>(n - 1) * q;
    const auto lo = static_cast<int64_t>(std::floor(h));
    if (lo >= n - 1) return samples.back();
    const double frac = h - static_cast<double>(lo);
    const double a = samples[static_cast<size_t>(lo)], b = samples[static_cast<size_t>(lo + 1)];
    return a + frac * (b - a);
  };
  s.median = quantile(0.5);
  s.p10 = quantile(0.1);
  s.p90 = quantile(0.9);
  long double sum = 0;
  for (double v : samples) sum += v;
  const long double mean = sum / static_cast<long double>(n);
  s.mean = static_cast<double>(mean);
  if (n >= 2) {
    long double ss = 0;
    for (double v : samples) {
      const long double d = static_cast<long double>(v) - mean;
      ss += d * d;
    }
    s.stddev = static_cast<double>(std::sqrt(ss / static_cast<long double>(n - 1)));
    if (s.mean != 0) s.rse = s.stddev / std::sqrt(static_cast<double>(n)) / std::fabs(s.mean);
    else s.rse = s.stddev > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  }
  return s;
}

// The rse rule needs at least two samples (with one, rse is 0 by convention, not a
// measurement of spread), whatever min_reps says.
bool ShouldStopTiming(const SampleStats& s, const TimingProtocol& p, double elapsed_ms, std::string* why) {
  const char* reason = nullptr;
  if (s.n >= std::max<int64_t>(p.min_reps, 2) && s.rse < p.target_rse) reason = "rse";
  else if (s.n >= p.max_reps) reason = "max_reps";
  else if (elapsed_ms >= p.max_ms_per_shape) reason = "time_cap";
  if (reason == nullptr) return false;
  if (why != nullptr) *why = reason;
  return true;
}

}  // namespace kevolve

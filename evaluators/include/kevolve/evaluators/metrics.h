// Host-side judgement of one launch: output against reference, poison, guard zones,
// input hashing, and the statistics of timing samples. Pure functions on host buffers,
// tested without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kevolve/core/dtype.h"
#include "kevolve/evaluators/protocol.h"

namespace kevolve {

// Outputs (and scratch) are filled with kPoisonByte before every launch: 0xFF bytes are
// a NaN in f32, f16 and bf16, so an element left unwritten is both counted and wrong.
constexpr uint8_t kPoisonByte = 0xFF;
// Every buffer is followed by kGuardBytes of kGuardByte, checked after the launch.
constexpr uint8_t kGuardByte = 0xA5;
constexpr int64_t kGuardBytes = 4096;

// Decodes one element of `dtype` at `p` into a double (f32, f16, bf16, f64).
double LoadAsDouble(const void* p, DType dtype);
// Encodes a double into `dtype` at `p`, rounding to nearest even.
void StoreFromDouble(double v, void* p, DType dtype);

struct CompareMetrics {
  int64_t elements = 0;
  int64_t mismatches = 0;   // outside atol + rtol*|ref|, non-finite, or unwritten
  int64_t unwritten = 0;    // still the poison pattern
  int64_t nonfinite = 0;    // NaN/Inf written where the reference is finite
  double max_abs = 0, max_rel = 0, rmse = 0;
  double psnr = 0;          // 20 log10(max|ref| / rmse); capped at 999 for an exact match
  double cossim = 1;
  int64_t worst_index = -1; // the element furthest outside its tolerance (or largest error)
  double worst_out = 0, worst_ref = 0;
  bool pass = false;        // under `tol`: mismatches <= max, cossim >= min, nothing unwritten
  nlohmann::json ToJson() const;
};

// Compares `n` elements of `out` (raw bytes of `dtype`) with `ref` (double).
CompareMetrics CompareOutputs(const void* out, DType dtype, const double* ref, int64_t n, const Tolerances& tol);

// Merges per-draw/per-shape metrics: counts add, maxima max, cossim/psnr take the worst.
void MergeMetrics(CompareMetrics* into, const CompareMetrics& m);

// Number of guard bytes that no longer hold kGuardByte.
int64_t GuardViolations(const uint8_t* guard, int64_t n);

// A 64-bit hash of the bytes (multi-lane, parallel over 1 MiB pieces, the same value on any
// thread count); for telling whether an input buffer changed. Not for adversaries.
uint64_t HashBytes(const void* data, size_t n);

// True when the two byte ranges differ (bit-for-bit determinism check).
int64_t CountDifferentElements(const void* a, const void* b, int64_t n, int elem_bytes);

struct SampleStats {
  int64_t n = 0;
  double median = 0, p10 = 0, p90 = 0, mean = 0, stddev = 0, min = 0, max = 0;
  double rse = 0;           // stddev / sqrt(n) / mean
};

// Percentiles by linear interpolation between order statistics.
SampleStats Summarize(std::vector<double> samples);

// The adaptive stopping rule of the timing rung: stop when n >= min_reps and
// rse < target_rse, or n >= max_reps, or elapsed_ms >= max_ms_per_shape. `why` says which.
bool ShouldStopTiming(const SampleStats& s, const TimingProtocol& p, double elapsed_ms, std::string* why);

}  // namespace kevolve

// The ladder for a batch of candidates: static and compile on the CPU pool, then launch,
// correctness and timing on every GPU at once, then fitness. Used by `kevolve eval` and
// by the search loop.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kevolve/core/candidate.h"
#include "kevolve/core/op_spec.h"
#include "kevolve/db/store.h"
#include "kevolve/evaluators/compiler.h"
#include "kevolve/evaluators/executor.h"
#include "kevolve/evaluators/fitness.h"
#include "kevolve/evaluators/request_builder.h"
#include "kevolve/evaluators/rungs.h"

namespace kevolve {

struct CandidateInput {
  std::string name;   // file name shown in logs
  std::string text;
  Assignment params;
};

// Everything one candidate went through.
struct Ladder {
  CandidateInput input;
  CandidateSource parsed;
  std::string hash;   // candidate identity (the compile request's hash)
  std::vector<RungResult> rungs;
  std::vector<ShapeTiming> timings;
  std::optional<FitnessResult> fitness;
  std::string device_uuid;
  CompileResult compiled;
  int64_t threads = 0;  // threads per block of the first launch at the first tune shape

  bool ok() const;              // every rung passed
  std::string status() const;   // "ok", or "failed_<rung>" / the fault ("timeout", "crashed", "suspect")
  const RungResult* Find(const std::string& rung) const;
  nlohmann::json Features() const;  // params, registers, smem, threads: for diversity
};

// The fastest ladder at each timed shape, among those that passed every rung (a fast
// kernel that failed a rung is never a pick). Shapes in the order the ladders timed them;
// `fraction` is the roofline fraction from that ladder's fitness (0 without one).
struct ShapeBest {
  std::string shape;
  double median_us = 0;
  double fraction = 0;
  size_t ladder = 0;  // index into the ladders given
};
std::vector<ShapeBest> FastestPerShape(const std::vector<Ladder>& ladders);

// Every candidate's median at every timed shape: a text table with one row per ladder and
// one column per shape (in the order first timed), values in us, the fastest median of
// each column among the ladders that passed every rung marked '*' (every one of them, on
// a tie). A ladder that failed shows its status() instead, after its medians when it
// failed after timing. Rows are labelled by the file name, plus the parameters whose
// values differ between the ladders of that file (so a sweep reads as its swept values),
// numbered "#1", "#2" where two rows would read the same. "" when nothing was timed.
std::string MediansTable(const std::vector<Ladder>& ladders);

struct PipelineOptions {
  std::string arch;             // default: the first device's, else sm_90
  EvalOptions eval;
  bool compile_only = false;
  double suspect_ratio = 0.9;
  int compile_threads = 0;      // 0: all cores
};

class Pipeline {
 public:
  // `executor` may be null for compile-only use; `calibration` maps device uuid to its
  // measured ceilings. The reference is compiled once here.
  static Result<std::unique_ptr<Pipeline>> Create(const OpSpec& op, DType dtype, GpuExecutor* executor,
                                                  std::map<std::string, Calibration> calibration,
                                                  std::shared_ptr<Compiler> compiler, PipelineOptions options);

  // Runs the ladder for every candidate. `check`/`tune` default to the op's sets.
  // When *cancel becomes true, candidates whose evaluation has not started come back
  // with no rungs at all.
  // `on_done` (optional) gets each finished ladder as it lands, from the thread that
  // finished it, one at a time (calls are serialised).
  std::vector<Ladder> Run(const std::vector<CandidateInput>& cands,
                          const std::vector<Shape>* check = nullptr, const std::vector<Shape>* tune = nullptr,
                          const std::atomic<bool>* cancel = nullptr,
                          const std::function<void(size_t, Ladder&)>& on_done = {});

  // The worker request for a compiled ladder (for the profiler and for re-checks).
  Result<EvalRequest> Request(const Ladder& l, const std::vector<Shape>* check = nullptr,
                              const std::vector<Shape>* tune = nullptr) const;

  const std::string& arch() const { return options_.arch; }
  const OpSpec& op() const { return op_; }
  DType dtype() const { return dtype_; }
  // SM count of the first device (0 without an executor): the value of num_sms in launch expressions.
  int num_sms() const { return num_sms_; }

 private:
  Pipeline(const OpSpec& op, DType dtype) : op_(op), dtype_(dtype) {}
  OpSpec op_;
  DType dtype_;
  GpuExecutor* executor_ = nullptr;
  std::map<std::string, Calibration> calibration_;
  std::shared_ptr<Compiler> compiler_;
  PipelineOptions options_;
  CandidateSource ref_source_;
  CompileResult ref_binary_;
  int num_sms_ = 0;
};

// Stores a ladder: the source (deduplicated), the candidate (deduplicated by hash), its
// rungs, timings, fitness and artifacts, in one transaction for the evaluation.
struct RecordContext {
  std::string op, dtype, arch, origin = "user", op_name = "user";
  std::optional<int64_t> run_id;
  int generation = 0, island = 0;
  std::vector<int64_t> parents;
};
Result<int64_t> RecordLadder(db::Store& store, const Ladder& l, const RecordContext& ctx);

}  // namespace kevolve

namespace kevolve {

// The ceilings of every device of `ex`: from the store's cache (keyed by UUID) unless
// `recalibrate`, else measured by the worker and written back. `store` may be null.
Result<std::map<std::string, Calibration>> LoadOrCalibrate(GpuExecutor& ex, db::Store* store, bool recalibrate,
                                                           bool verbose);

}  // namespace kevolve

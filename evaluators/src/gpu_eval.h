// The worker's evaluation of one request on its device: launch, correctness and timing
// rungs, plus calibration. Internal to evaluators/ (used by worker_main.cpp).
#pragma once

#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpu_runtime.h"
#include "harness.h"
#include "kevolve/evaluators/metrics.h"
#include "kevolve/evaluators/protocol.h"

namespace kevolve::gpu {

// A loaded module with its entry functions.
struct Loaded {
  Module module;
  std::map<std::string, CUfunction> fns;  // entry -> function
  // The dynamic shared memory limit raised so far per entry: shapes differ in their smem,
  // and the limit must cover the largest of them, whatever order they are checked in.
  mutable std::map<std::string, int64_t> smem_limit;
};

// Kernel arguments with stable storage (cuLaunchKernel reads them through pointers).
class ArgPack {
 public:
  ArgPack() { storage_.reserve(kMax); }
  template <typename V>
  void Add(V v) {
    static_assert(sizeof(V) <= 8, "argument too large");
    storage_.push_back(0);
    std::memcpy(&storage_.back(), &v, sizeof(V));
  }
  void** ptrs() {
    ptrs_.clear();
    for (auto& s : storage_) ptrs_.push_back(&s);
    return ptrs_.data();
  }

 private:
  static constexpr size_t kMax = 64;
  std::vector<uint64_t> storage_;
  std::vector<void*> ptrs_;
};

// What went wrong in a launch sequence, if anything.
struct Fault {
  CUresult code = CUDA_SUCCESS;
  std::string reason;  // FaultReason(code)
  std::string log;
  bool sticky = false;
  bool ok() const { return code == CUDA_SUCCESS; }
};

class Evaluator {
 public:
  Evaluator(const Device& dev, const Harness& harness) : dev_(dev), harness_(harness) {}
  // Never throws; faults come back as failed rungs (and context_lost when sticky).
  EvalResult Run(const EvalRequest& req);
  Result<Calibration> Calibrate();  // marks the context lost when a failure left it broken
  // Runs every tune shape's launch sequence `reps` times with no timing of its own, for
  // an external profiler (ncu) to observe. Stops at the first fault.
  Status Replay(const EvalRequest& req, int reps);

 private:
  Result<Calibration> CalibrateOnce();
  Result<std::shared_ptr<Loaded>> Load(const ModuleImage& img);
  // Enqueues the sequence on the stream; an error here is a launch-time failure
  // (resources, bad geometry) that leaves the context usable.
  Fault Enqueue(const Loaded& mod, const std::vector<LaunchDesc>& launches, ArgPack& args);
  // Enqueue + wait (watchdog); returns the elapsed ms in *ms when given.
  Fault RunSequence(const Loaded& mod, const std::vector<LaunchDesc>& launches, ArgPack& args, double timeout_ms,
                    double* ms);
  nlohmann::json Occupancy(const Loaded& mod, const std::vector<LaunchDesc>& launches);
  Fault CheckResources(const Loaded& mod, const std::vector<LaunchDesc>& launches);

  // Correctness on one check shape; merges into *metrics, fills per-shape JSON.
  Fault CheckShape(const EvalRequest& req, size_t shape_index, const Loaded& cand, const Loaded& ref,
                   CompareMetrics* metrics, nlohmann::json* shape_json, double* ref_ms);
  // Timing on one tune shape.
  Fault TimeShape(const EvalRequest& req, const ShapeJob& shape, const Loaded& cand, ShapeTiming* out);
  Result<CUdeviceptr> FlushBuffer();

  // Timing inputs are cached across candidates: generating gigabytes per candidate
  // would dominate the evaluation.
  struct InputSet {
    std::vector<std::vector<Buffer>> sets;  // [set][input buffer]
    std::vector<Buffer> outputs;
    size_t bytes = 0;
  };
  Result<InputSet*> TimingInputs(const EvalRequest& req, const ShapeJob& shape);

  const Device& dev_;
  const Harness& harness_;
  std::map<std::string, std::shared_ptr<Loaded>> ref_cache_;  // by module hash
  std::list<std::pair<std::string, InputSet>> inputs_;        // LRU, most recent first
  size_t input_bytes_ = 0;
  Buffer flush_;
};

}  // namespace kevolve::gpu

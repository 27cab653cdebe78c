// The GPU-executor boundary: whatever runs evaluation requests on GPUs. The real one is
// WorkerPool (one `kevolve worker` process per GPU); tests substitute their own.
#pragma once

#include <atomic>
#include <functional>
#include <vector>

#include "kevolve/core/status.h"
#include "kevolve/evaluators/protocol.h"

namespace kevolve {

class GpuExecutor {
 public:
  virtual ~GpuExecutor() = default;
  // The devices evaluations may run on.
  virtual std::vector<DeviceDesc> Devices() const = 0;
  // Runs one request on whichever device is free; blocks until done. Thread-safe: call
  // it from as many threads as there are devices to keep them all busy. A candidate
  // that crashes or hangs its worker comes back as a failed rung, not an error; errors
  // are for the executor itself failing (no worker could be started).
  virtual Result<EvalResult> Evaluate(const EvalRequest& req) = 0;
  virtual Result<Calibration> Calibrate(int device_index) = 0;
};

}  // namespace kevolve

namespace kevolve {

// Runs every request, keeping every device busy (one thread per device). Results are in
// request order. `on_done` (optional) is called from the worker threads as each finishes,
// under an internal lock.
// When *cancel becomes true, requests not yet started are skipped (their result is the
// error "cancelled").
std::vector<Result<EvalResult>> EvaluateAll(GpuExecutor& ex, const std::vector<EvalRequest>& reqs,
                                            const std::function<void(size_t, const Result<EvalResult>&)>& on_done = {},
                                            const std::atomic<bool>* cancel = nullptr);

}  // namespace kevolve

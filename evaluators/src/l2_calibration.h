// The L2 partition part of the device calibration (kevolve devices --calibrate): which SMs
// sit beside which partition, the near and far hit latencies, how often the owner of an
// address changes, and what a copy gains when every SM reads only lines its own partition
// owns. Reported in the calibration's details under "l2"; nothing else depends on it yet.
#pragma once

#include <functional>

#include <nlohmann/json.hpp>

#include "gpu_runtime.h"
#include "harness.h"

namespace kevolve::gpu {

// Times `enqueue` (median ms of `reps` event-timed runs after warm-ups).
using EnqueueTimer = std::function<Result<double>(const std::function<Status()>& enqueue, int reps)>;

// src and dst: `bytes` each (dst is also written to push lines out of L2, src is filled
// with test data at the end). The copy timings use `time`. When the SMs do not split into
// two groups (one partition, or a partition that keeps no copy of the far lines its SMs
// read), the result is {"partitions": 1} with each SM's latency percentiles.
Result<nlohmann::json> MeasureL2Layout(const Device& dev, const Harness& h, CUdeviceptr src, CUdeviceptr dst,
                                       size_t bytes, const EnqueueTimer& time);

}  // namespace kevolve::gpu

// Kernel durations from CUPTI activity records (the `--timer cupti` option). One per
// process: CUPTI's activity buffers are process-wide.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kevolve/core/status.h"

namespace kevolve::gpu {

struct KernelRecord {
  uint64_t start_ns = 0, end_ns = 0;
  std::string name;
};

class CuptiTimer {
 public:
  // Enables concurrent-kernel activity records; an error when CUPTI is unavailable.
  static Result<CuptiTimer*> Get();
  // Flushes CUPTI's buffers and returns the kernel records completed since the last call,
  // ordered by start time.
  std::vector<KernelRecord> Collect();

 private:
  CuptiTimer() = default;
};

}  // namespace kevolve::gpu

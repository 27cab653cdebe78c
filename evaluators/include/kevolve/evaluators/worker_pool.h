// One `kevolve worker --device N` process per visible GPU, spawned with posix_spawn
// (fork alone cannot initialise CUDA in the child). A worker that dies, or that passes
// its watchdog deadline, is killed and replaced; the evaluation it held is recorded as
// crashed or timeout.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kevolve/evaluators/channel.h"
#include "kevolve/evaluators/executor.h"

namespace kevolve {

struct WorkerPoolOptions {
  std::string exe;                    // the kevolve binary; default /proc/self/exe
  std::vector<std::string> extra_args;  // appended to "worker --device N"
  std::vector<int> devices;           // ordinals; default: every visible GPU
  double start_timeout_ms = 60000;    // hello round trip
  double min_deadline_ms = 30000;     // watchdog floor per evaluation
};

// A spawned worker process and its channel.
struct WorkerProcess {
  int device = 0;
  pid_t pid = -1;
  std::unique_ptr<PipeChannel> channel;
  DeviceDesc desc;
  std::string stderr_path;            // the worker's stderr, kept for crash reports
};

class WorkerPool : public GpuExecutor {
 public:
  // Starts every worker and waits for its hello. An error when none could start.
  static Result<std::unique_ptr<WorkerPool>> Start(const WorkerPoolOptions& options);
  ~WorkerPool() override;

  std::vector<DeviceDesc> Devices() const override;
  Result<EvalResult> Evaluate(const EvalRequest& req) override;
  Result<Calibration> Calibrate(int device_index) override;
  int restarts() const;

  // The deadline the watchdog gives a request (generous: every launch sequence at its
  // own limit, plus the timing budget).
  static double DeadlineMs(const EvalRequest& req, double floor_ms);

 private:
  explicit WorkerPool(WorkerPoolOptions options) : options_(std::move(options)) {}
  Result<std::unique_ptr<WorkerProcess>> Spawn(int device);
  // Takes a free worker (blocking), returns it afterwards.
  size_t Acquire();
  void Release(size_t slot);
  // Kills and respawns the worker in `slot`. REQUIRES: the caller holds the slot.
  void Replace(size_t slot);
  // Closes the worker's channel, waits up to a grace period for it to exit (after a lost
  // context it does so by itself), kills and reaps it, then Replace.
  void RetireAndReplace(size_t slot);

  WorkerPoolOptions options_;
  mutable std::mutex mu_;
  std::condition_variable free_cv_;
  std::vector<std::unique_ptr<WorkerProcess>> workers_;  // slot -> worker; GUARDED_BY(mu_) for swaps
  std::vector<bool> busy_;                                // GUARDED_BY(mu_)
  int restarts_ = 0;                                      // GUARDED_BY(mu_)
};

// Kills `pid` with SIGKILL and reaps it.
void KillAndReap(pid_t pid);

}  // namespace kevolve

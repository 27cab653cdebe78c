#include "kevolve/evaluators/executor.h"

#include <atomic>
#include <mutex>
#include <thread>

namespace kevolve {

std::vector<Result<EvalResult>> EvaluateAll(GpuExecutor& ex, const std::vector<EvalRequest>& reqs,
                                            const std::function<void(size_t, const Result<EvalResult>&)>& on_done,
                                            const std::atomic<bool>* cancel) {
  std::vector<Result<EvalResult>> out(reqs.size(), Result<EvalResult>(Status::Error("not run")));
  std::atomic<size_t> next{0};
  std::mutex mu;  // guards on_done calls
  size_t threads = std::max<size_t>(1, std::min(ex.Devices().size(), reqs.size()));
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < reqs.size();) {
        if (cancel && cancel->load()) {
          out[i] = Status::Error("cancelled");
          continue;
        }
        out[i] = ex.Evaluate(reqs[i]);
        if (on_done) {
          std::lock_guard<std::mutex> lock(mu);
          on_done(i, out[i]);
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  return out;
}

}  // namespace kevolve

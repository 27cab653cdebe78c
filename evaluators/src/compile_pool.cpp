#include "kevolve/evaluators/compile_pool.h"

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <memory>

namespace kevolve {

std::vector<CompileResult> CompileAll(Compiler& compiler, const std::vector<CompileRequest>& reqs,
                                      int max_threads) {
  std::vector<CompileResult> out(reqs.size());
  std::unique_ptr<tbb::global_control> limit;
  if (max_threads > 0)
    limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                  static_cast<size_t>(max_threads));
  // One request per task: compiles take tens of milliseconds, far above TBB's overhead.
  tbb::parallel_for(size_t{0}, reqs.size(), [&](size_t i) { out[i] = compiler.Compile(reqs[i]); });
  return out;
}

}  // namespace kevolve

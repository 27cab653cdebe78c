// Compiles many candidates at once on all cores (TBB).
#pragma once

#include <vector>

#include "kevolve/evaluators/compiler.h"

namespace kevolve {

// Results are in request order. `max_threads` <= 0 means all cores.
std::vector<CompileResult> CompileAll(Compiler& compiler, const std::vector<CompileRequest>& reqs,
                                      int max_threads = 0);

}  // namespace kevolve

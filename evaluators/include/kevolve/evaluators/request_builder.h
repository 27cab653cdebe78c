// Builds a worker request from an op spec, a compiled candidate and the compiled
// reference: every expression is resolved here, so workers see only numbers.
#pragma once

#include <vector>

#include "kevolve/core/candidate.h"
#include "kevolve/core/op_spec.h"
#include "kevolve/evaluators/compiler.h"
#include "kevolve/evaluators/protocol.h"

namespace kevolve {

struct EvalOptions {
  uint64_t seed = 1;
  int draws = 2;
  TimingProtocol timing;
  double launch_timeout_ms = 2000;
  double timeout_factor = 50;
  bool skip_timing = false;
};

struct CompiledKernel {
  const CandidateSource* source = nullptr;
  Assignment params;
  const CompileResult* binary = nullptr;
};

// `check` and `tune` are the shape sets to use (normally op.check and op.tune; export
// passes op.heldout as check). `num_sms` feeds the num_sms variable of launch expressions.
Result<EvalRequest> BuildEvalRequest(const OpSpec& op, DType dtype, const CompiledKernel& candidate,
                                     const CompiledKernel& reference, const std::vector<Shape>& check,
                                     const std::vector<Shape>& tune, int num_sms, const EvalOptions& options);

}  // namespace kevolve

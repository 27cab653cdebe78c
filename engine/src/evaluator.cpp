#include "kevolve/engine/evaluator.h"

namespace kevolve {

std::vector<Ladder> PipelineEvaluator::Evaluate(const std::vector<CandidateInput>& inputs,
                                                const std::atomic<bool>* cancel) {
  return p_->Run(inputs, nullptr, nullptr, cancel);
}

std::string PipelineEvaluator::Hash(const CandidateSource& parsed, const Assignment& params) const {
  return MakeCompileRequest(parsed, params, p_->dtype(), p_->arch()).Hash();
}

}  // namespace kevolve

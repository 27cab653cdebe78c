#include "kevolve/engine/evaluator.h"

namespace kevolve {

std::vector<Ladder> PipelineEvaluator::Evaluate(const std::vector<CandidateInput>& inputs,
                                                const std::atomic<bool>* cancel,
                                                const std::function<void(size_t, Ladder&)>& on_done) {
  return p_->Run(inputs, nullptr, nullptr, cancel, on_done);
}

std::string PipelineEvaluator::Hash(const CandidateSource& parsed, const Assignment& params) const {
  return MakeCompileRequest(parsed, params, p_->dtype(), p_->arch()).Hash();
}

}  // namespace kevolve

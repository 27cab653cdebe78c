// The evaluation boundary of the search loop: a batch of candidates in, their ladders
// out. The real one runs the Pipeline (NVRTC + GPU workers); tests use a deterministic
// in-process landscape.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "kevolve/engine/pipeline.h"

namespace kevolve {

class CandidateEvaluator {
 public:
  virtual ~CandidateEvaluator() = default;
  // One ladder per input, in order. When *cancel becomes true, inputs not yet started
  // come back with no rungs (status "pending"): the caller records only finished ones.
  // `on_done` gets each finished ladder as soon as it is finished (serialised calls), so
  // the caller can commit it before the rest of the batch.
  virtual std::vector<Ladder> Evaluate(const std::vector<CandidateInput>& inputs, const std::atomic<bool>* cancel,
                                       const std::function<void(size_t, Ladder&)>& on_done) = 0;
  // The identity of a candidate: what dedupe and resume key on.
  virtual std::string Hash(const CandidateSource& parsed, const Assignment& params) const = 0;
  virtual std::string arch() const = 0;
};

class PipelineEvaluator : public CandidateEvaluator {
 public:
  explicit PipelineEvaluator(Pipeline* p) : p_(p) {}
  std::vector<Ladder> Evaluate(const std::vector<CandidateInput>& inputs, const std::atomic<bool>* cancel,
                               const std::function<void(size_t, Ladder&)>& on_done) override;
  std::string Hash(const CandidateSource& parsed, const Assignment& params) const override;
  std::string arch() const override { return p_->arch(); }

 private:
  Pipeline* p_;
};

}  // namespace kevolve

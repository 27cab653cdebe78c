// Parameter operators: param_tweak (neighbouring or random allowed values) and
// crossover (parameters of two parents that share a source).
#pragma once

#include "kevolve/operators/operator.h"

namespace kevolve {

class ParamTweak : public Operator {
 public:
  // Each parameter changes with probability `rate` (at least one always changes).
  explicit ParamTweak(double rate = 0.3) : rate_(rate) {}
  std::string name() const override { return "param_tweak"; }
  int arity() const override { return 1; }
  Result<Proposal> Apply(const std::vector<ParentView>& parents, std::mt19937_64& rng) override;

 private:
  double rate_;
};

class Crossover : public Operator {
 public:
  std::string name() const override { return "crossover"; }
  int arity() const override { return 2; }
  // REQUIRES: both parents share a source. Uniform crossover of the assignment.
  Result<Proposal> Apply(const std::vector<ParentView>& parents, std::mt19937_64& rng) override;
};

// A uniformly random valid assignment (requirements on parameters honoured); tries up to
// `attempts` draws.
Result<Assignment> SampleAssignment(const CandidateSource& c, std::mt19937_64& rng, const Env& constants = {},
                                    int attempts = 1000);

}  // namespace kevolve

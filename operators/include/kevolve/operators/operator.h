// The mutation-operator interface: turns parents into children. param_tweak and
// crossover (this folder) and the LLM operators implement it.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kevolve/core/candidate.h"
#include "kevolve/core/status.h"

namespace kevolve {

// A parent as operators see it: its source, the parsed directives and its assignment.
struct ParentView {
  int64_t id = 0;
  const CandidateSource* source = nullptr;
  Assignment params;
  double fitness = 0.0;
  Env constants;  // sizeof_T etc., for requirements that read them
};

// A proposed child; the engine dedupes, records and evaluates it.
struct Proposal {
  std::string source_text;   // same as the parent's for parameter operators
  std::string source_name;
  Assignment params;
  std::vector<int64_t> parents;
  std::string op_name;
};

class Operator {
 public:
  virtual ~Operator() = default;
  virtual std::string name() const = 0;
  // How many parents it takes (1 or 2).
  virtual int arity() const = 0;
  // Deterministic given `rng`'s state: the search loop is reproducible from its seed.
  virtual Result<Proposal> Apply(const std::vector<ParentView>& parents, std::mt19937_64& rng) = 0;
};

}  // namespace kevolve

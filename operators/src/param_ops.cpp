#include "kevolve/operators/param_ops.h"

#include <algorithm>

namespace kevolve {

namespace {

template <typename T>
const T& Pick(const std::vector<T>& v, std::mt19937_64& rng) {
  return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}

// Moves one parameter: to a neighbouring allowed value (2/3) or any other value (1/3).
int64_t Mutate(const ParamSpec& p, int64_t current, std::mt19937_64& rng) {
  if (p.values.size() < 2) return current;
  auto it = std::find(p.values.begin(), p.values.end(), current);
  size_t idx = it == p.values.end() ? 0 : static_cast<size_t>(it - p.values.begin());
  if (std::uniform_int_distribution<int>(0, 2)(rng) < 2) {
    bool up = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    if (idx == 0) up = true;
    if (idx + 1 == p.values.size()) up = false;
    return p.values[up ? idx + 1 : idx - 1];
  }
  std::vector<int64_t> others;
  for (int64_t v : p.values)
    if (v != current) others.push_back(v);
  return Pick(others, rng);
}

constexpr int kAttempts = 64;

}  // namespace

Result<Assignment> SampleAssignment(const CandidateSource& c, std::mt19937_64& rng, const Env& constants,
                                    int attempts) {
  for (int i = 0; i < attempts; ++i) {
    Assignment a;
    for (const auto& p : c.params) a[p.name] = Pick(p.values, rng);
    if (ValidateAssignment(c, a, constants).ok()) return a;
  }
  return Status::Error(c.name + ": no valid parameter assignment found in " + std::to_string(attempts) +
                       " random draws (are the 'require' directives satisfiable?)");
}

Result<Proposal> ParamTweak::Apply(const std::vector<ParentView>& parents, std::mt19937_64& rng) {
  if (parents.size() != 1 || !parents[0].source) return Status::Error("param_tweak takes one parent");
  const ParentView& p = parents[0];
  std::vector<const ParamSpec*> tunable;
  for (const auto& s : p.source->params)
    if (s.values.size() > 1) tunable.push_back(&s);
  if (tunable.empty()) return Status::Error("param_tweak: " + p.source->name + " has no tunable parameter");
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    Assignment a = p.params;
    const ParamSpec* forced = Pick(tunable, rng);
    for (const ParamSpec* s : tunable) {
      if (s == forced || std::uniform_real_distribution<double>(0, 1)(rng) < rate_)
        a[s->name] = Mutate(*s, a[s->name], rng);
    }
    if (a != p.params && ValidateAssignment(*p.source, a, p.constants).ok())
      return Proposal{p.source->text, p.source->name, a, {p.id}, name()};
  }
  return Status::Error("param_tweak: no valid neighbour of " + AssignmentString(p.params));
}

Result<Proposal> Crossover::Apply(const std::vector<ParentView>& parents, std::mt19937_64& rng) {
  if (parents.size() != 2 || !parents[0].source || !parents[1].source)
    return Status::Error("crossover takes two parents");
  const ParentView& a = parents[0];
  const ParentView& b = parents[1];
  if (a.source->text != b.source->text) return Status::Error("crossover: parents do not share a source");
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    Assignment child;
    for (const auto& s : a.source->params) {
      bool from_a = std::uniform_int_distribution<int>(0, 1)(rng) == 0;
      child[s.name] = (from_a ? a.params : b.params).at(s.name);
    }
    if (child != a.params && child != b.params && ValidateAssignment(*a.source, child, a.constants).ok())
      return Proposal{a.source->text, a.source->name, child, {a.id, b.id}, name()};
  }
  return Status::Error("crossover: parents " + std::to_string(a.id) + " and " + std::to_string(b.id) +
                       " give no new valid child");
}

}  // namespace kevolve

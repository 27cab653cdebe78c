#include "assignments.h"

#include <random>
#include <set>

#include "kevolve/operators/param_ops.h"

namespace kevolve::cli {

namespace {

Result<Assignment> ApplyOverrides(Assignment a, const std::vector<std::string>& overrides) {
  for (const auto& kv : overrides) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return Status::Error("--param expects NAME=VALUE, got '" + kv + "'");
    try {
      size_t used = 0;
      int64_t v = std::stoll(kv.substr(eq + 1), &used);
      if (used != kv.size() - eq - 1) throw std::invalid_argument(kv);
      a[kv.substr(0, eq)] = v;
    } catch (const std::exception&) {
      return Status::Error("--param " + kv + ": the value is not an integer");
    }
  }
  return a;
}

// `first`, then distinct random valid ones, up to n in all.
std::vector<Assignment> Variants(const CandidateSource& c, const Assignment& first, int n, DType dtype,
                                 uint64_t seed) {
  std::vector<Assignment> out = {first};
  std::set<Assignment> seen = {first};
  std::mt19937_64 rng(seed);
  Env constants = {{"sizeof_T", DTypeSize(dtype)}};
  for (int tries = 0; static_cast<int>(out.size()) < n && tries < 50 * n; ++tries) {
    auto a = SampleAssignment(c, rng, constants);
    if (!a.ok()) break;
    if (seen.insert(*a).second) out.push_back(*a);
  }
  return out;
}

Result<std::vector<ParamSweep>> ParseSweeps(const AssignmentFlags& f) {
  std::vector<ParamSweep> sweeps;
  for (const auto& text : f.sweeps) {
    auto sw = ParseParamSweep(text);
    if (!sw.ok()) return Status::Error("--sweep " + sw.error());
    for (const auto& kv : f.params)
      if (kv.substr(0, kv.find('=')) == sw->name)
        return Status::Error("--sweep " + sw->name + ": also set by --param " + kv + "; give one of the two");
    sweeps.push_back(*sw);
  }
  return sweeps;
}

}  // namespace

Status CheckAssignmentFlags(const AssignmentFlags& f) {
  auto sweeps = ParseSweeps(f);
  if (!sweeps.ok()) return sweeps.status();
  if (!sweeps->empty() && f.variants > 1)
    return Status::Error("--sweep and --variants cannot be combined: --sweep chooses the assignments");
  auto product = ExpandSweeps({}, *sweeps, kMaxSweepAssignments);
  if (!product.ok()) return Status::Error("--sweep: " + product.error());
  return Status::Ok();
}

Result<std::vector<Assignment>> FileAssignments(const std::string& name, const Result<CandidateSource>& parsed,
                                                const AssignmentFlags& f, DType dtype) {
  if (Status s = CheckAssignmentFlags(f); !s.ok()) return s;
  auto sweeps = ParseSweeps(f);
  auto base = ApplyOverrides(parsed.ok() ? parsed->DefaultAssignment() : Assignment{}, f.params);
  if (!base.ok()) return base.status();
  if (parsed.ok()) {
    for (const auto& kv : f.params) {
      const std::string k = kv.substr(0, kv.find('='));
      if (!parsed->FindParam(k)) return Status::Error("--param " + k + ": " + name + " has no parameter '" + k + "'");
    }
    for (const auto& sw : *sweeps)
      if (!parsed->FindParam(sw.name))
        return Status::Error("--sweep " + sw.name + ": " + name + " has no parameter '" + sw.name + "'");
  }
  // A file whose directives do not parse fails its static rung once, not once per value.
  if (!parsed.ok()) return std::vector<Assignment>{*base};
  if (!sweeps->empty()) return ExpandSweeps(*base, *sweeps, kMaxSweepAssignments);
  if (f.variants > 1) return Variants(*parsed, *base, f.variants, dtype, f.seed);
  return std::vector<Assignment>{*base};
}

}  // namespace kevolve::cli

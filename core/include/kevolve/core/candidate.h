// The candidate format: one CUDA C++ file of device code with `@kevolve` directives in
// comments. See README "Candidate format" for the full grammar and an example.
//
//   // @kevolve param   BLOCK 128 256 512
//   // @kevolve require BLOCK % 32 == 0
//   // @kevolve scratch partial  rows * 8 * sizeof_T
//   // @kevolve launch  softmax_rows  grid=ceil_div(rows, 4)  block=BLOCK  smem=0
//   // @kevolve entry   other_kernel      (then: grid ..., block ..., smem ..., cluster ...)
//   // @kevolve preset  BLOCK=256 VEC=4   (an assignment the search's generation 0 tries)
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kevolve/core/expr.h"
#include "kevolve/core/status.h"

namespace kevolve {

using Assignment = std::map<std::string, int64_t>;

struct ParamSpec {
  std::string name;
  std::vector<int64_t> values;  // allowed values, in the file's order
  int line = 0;
};

struct LaunchSpec {
  std::string entry;
  std::array<Expr, 3> grid;     // missing dimensions are "1"
  std::array<Expr, 3> block;
  Expr smem;                    // dynamic shared memory bytes; "0" by default
  std::optional<std::array<Expr, 3>> cluster;  // thread-block cluster (sm_90)
  int line = 0;
};

struct ScratchSpec {
  std::string name;
  Expr bytes;
  bool zeroed = false;          // memset to 0 once, at allocation; the kernel leaves it reusable
  int line = 0;
};

struct Requirement {
  Expr expr;                    // must be non-zero for an assignment to be valid
  int line = 0;
};

struct CandidateSource {
  std::string name;             // file name, used in compile logs
  std::string text;
  std::vector<ParamSpec> params;
  std::vector<LaunchSpec> launches;
  std::vector<ScratchSpec> scratch;
  std::vector<Requirement> requires_;
  // Known-good assignments (`@kevolve preset NAME=VALUE ...`, the others at their
  // defaults), tried in generation 0 after the default and before random samples.
  std::vector<Assignment> presets;

  // Parses the directives of `text`. Errors read "NAME:LINE: what is wrong".
  static Result<CandidateSource> Parse(const std::string& text, const std::string& name);

  const ParamSpec* FindParam(const std::string& name) const;
  // Each parameter at its first listed value.
  Assignment DefaultAssignment() const;
  // Number of assignments in the full cross product (saturates at INT64_MAX).
  int64_t SpaceSize() const;
};

// The keyword of a directive line ("param", "preset", ...) as Parse reads it; "" when the
// line is no directive.
std::string DirectiveKeyword(const std::string& line);
// `text` without its `@kevolve preset` lines (presets matter only to a seed's generation 0).
std::string WithoutPresets(const std::string& text);

// Values allowed, every parameter assigned, requirements hold (those that read only
// parameters and `constants`, such as sizeof_T; size-dependent ones are checked per
// shape at launch).
Status ValidateAssignment(const CandidateSource& c, const Assignment& a, const Env& constants = {});

// Launch geometry of every launch at one shape.
struct LaunchConfig {
  std::string entry;
  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> block{1, 1, 1};
  int64_t smem = 0;
  std::array<int64_t, 3> cluster{0, 0, 0};  // 0 = no cluster
};

// Evaluates launches and scratch sizes with `env` (sizes, sizeof_T) plus the assignment.
Result<std::vector<LaunchConfig>> ResolveLaunches(const CandidateSource& c, const Assignment& a,
                                                  const Env& env);
Result<std::vector<int64_t>> ResolveScratch(const CandidateSource& c, const Assignment& a,
                                            const Env& env);
// Checks requirements that read sizes; an unmet one means "this shape is not supported".
Status CheckRequirements(const CandidateSource& c, const Assignment& a, const Env& env);

// "BLOCK=256,VEC=4" in name order (stable, used in hashes and logs).
std::string AssignmentString(const Assignment& a);

// A parameter sweep, as `kevolve eval --sweep NAME=V1,V2,...` takes it.
struct ParamSweep {
  std::string name;
  std::vector<int64_t> values;  // in the order given, no repeats
};
// Parses "NAME=V1,V2,...": integer values, at least one, none repeated. Errors say what is
// wrong with the text.
Result<ParamSweep> ParseParamSweep(const std::string& text);
// `base` with each sweep's parameter set to each of its values: the cross product, the
// first sweep varying slowest and the last fastest. No sweeps give {base}. An error when
// the product has more than `max_assignments` assignments, or a name is swept twice.
Result<std::vector<Assignment>> ExpandSweeps(const Assignment& base, const std::vector<ParamSweep>& sweeps,
                                             size_t max_assignments);

}  // namespace kevolve

namespace kevolve {
// Every name in the candidate's expressions is a parameter, one of `size_names`, or a
// built-in (sizeof_T, num_sms). Errors name the line.
Status CheckCandidateNames(const CandidateSource& c, const std::vector<std::string>& size_names);
}  // namespace kevolve

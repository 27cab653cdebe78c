// The assignments `kevolve compile` and `kevolve eval` run of one candidate file: its
// defaults with every --param override, then the cross product of the --sweep values or
// --variants' distinct random valid assignments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kevolve/core/candidate.h"
#include "kevolve/core/dtype.h"
#include "kevolve/core/status.h"

namespace kevolve::cli {

struct AssignmentFlags {
  std::vector<std::string> params;  // --param NAME=VALUE
  std::vector<std::string> sweeps;  // --sweep NAME=V1,V2,...
  int variants = 0;                 // --variants N
  uint64_t seed = 1;                // the random draws of --variants
};

// The most assignments --sweep makes of one file.
constexpr size_t kMaxSweepAssignments = 256;

// Checks what does not depend on a file: the sweeps' syntax, a name both swept and set
// by --param, --sweep with --variants. The error is the one line to print.
Status CheckAssignmentFlags(const AssignmentFlags& f);

// The assignments of the file `name`, whose directives are `parsed` (when they do not
// parse, its static rung says why, and only the overrides are applied). Errors (an
// override or sweep of a parameter the file does not have, a value that is not an
// integer, too many sweep assignments) are the one line to print.
Result<std::vector<Assignment>> FileAssignments(const std::string& name, const Result<CandidateSource>& parsed,
                                                const AssignmentFlags& f, DType dtype);

}  // namespace kevolve::cli

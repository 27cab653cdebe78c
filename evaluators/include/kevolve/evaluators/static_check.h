// The static rung: checks that need no compiler. Includes are the main risk: an
// include that reaches host files would copy them into compile logs, which are later
// shown to an LLM, so only CUDA's own headers and the project's are allowed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kevolve/core/status.h"

namespace kevolve {

struct StaticLimits {
  int64_t max_bytes = 256 * 1024;  // source size limit
};

// Exact header names and folder prefixes a candidate may include.
const std::vector<std::string>& AllowedIncludes();
const std::vector<std::string>& AllowedIncludePrefixes();

// Size, allowed includes, no absolute or ".." paths, no include_next/import/__has_include
// of anything outside the allow list. Errors read "NAME:LINE: ...".
Status StaticCheck(const std::string& name, const std::string& source, const StaticLimits& limits = {});

}  // namespace kevolve

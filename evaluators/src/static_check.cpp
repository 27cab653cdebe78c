#include "kevolve/evaluators/static_check.h"

#include <algorithm>
#include <sstream>

namespace kevolve {

const std::vector<std::string>& AllowedIncludes() {
  static const std::vector<std::string> k = {
      "kevolve.h",          "cuda_fp16.h",       "cuda_bf16.h",        "cuda_fp8.h",
      "cuda_fp16.hpp",      "cuda_bf16.hpp",     "cooperative_groups.h", "cuda_pipeline.h",
      "cuda_pipeline_primitives.h", "cuda_awbarrier.h", "cuda_awbarrier_primitives.h",
      "mma.h",              "cuda/pipeline",     "cuda/barrier",       "cuda/atomic",
      "cuda/annotated_ptr", "cuda/ptx",          "vector_types.h",     "vector_functions.h",
      "math_constants.h",   "sm_90_rt.h",        "crt/math_functions.h",
  };
  return k;
}

const std::vector<std::string>& AllowedIncludePrefixes() {
  static const std::vector<std::string> k = {"cooperative_groups/", "cuda/std/", "cub/", "cute/"};
  return k;
}

namespace {

bool Allowed(const std::string& header) {
  if (header.empty() || header[0] == '/' || header.find("..") != std::string::npos ||
      header.find('\\') != std::string::npos || header.find("//") != std::string::npos)
    return false;
  const auto& exact = AllowedIncludes();
  if (std::find(exact.begin(), exact.end(), header) != exact.end()) return true;
  for (const auto& p : AllowedIncludePrefixes())
    if (header.rfind(p, 0) == 0 && header.size() > p.size()) return true;
  return false;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// Extracts the name between <> or "" at the start of `rest`; empty when neither.
std::string HeaderName(const std::string& rest, bool* bracketed) {
  if (rest.empty()) return "";
  char open = rest[0];
  char close = open == '<' ? '>' : open == '"' ? '"' : 0;
  if (!close) return "";
  size_t end = rest.find(close, 1);
  if (end == std::string::npos) return "";
  *bracketed = true;
  return rest.substr(1, end - 1);
}

}  // namespace

Status StaticCheck(const std::string& name, const std::string& source, const StaticLimits& limits) {
  if (static_cast<int64_t>(source.size()) > limits.max_bytes)
    return Status::Error(name + ": source is " + std::to_string(source.size()) + " bytes; the limit is " +
                         std::to_string(limits.max_bytes));
  if (source.find('\0') != std::string::npos) return Status::Error(name + ": source contains a NUL byte");
  std::istringstream in(source);
  std::string raw;
  int line = 0;
  auto where = [&] { return name + ":" + std::to_string(line) + ": "; };
  while (std::getline(in, raw)) {
    ++line;
    // __has_include probes the file system: allow it only for allowed names.
    for (size_t p = raw.find("__has_include"); p != std::string::npos; p = raw.find("__has_include", p + 1)) {
      size_t open = raw.find('(', p);
      bool ok = false;
      if (open != std::string::npos) {
        bool bracketed = false;
        std::string h = HeaderName(Trim(raw.substr(open + 1)), &bracketed);
        ok = bracketed && Allowed(h);
      }
      if (!ok) return Status::Error(where() + "__has_include of a header outside the allow list");
    }
    std::string t = Trim(raw);
    if (t.empty() || t[0] != '#') continue;
    std::string d = Trim(t.substr(1));
    if (d.rfind("include_next", 0) == 0 || d.rfind("import", 0) == 0 || d.rfind("embed", 0) == 0)
      return Status::Error(where() + "#" + d.substr(0, d.find_first_of(" \t<\"")) + " is not allowed");
    if (d.rfind("include", 0) != 0) continue;
    std::string rest = Trim(d.substr(7));
    bool bracketed = false;
    std::string h = HeaderName(rest, &bracketed);
    if (!bracketed)
      return Status::Error(where() + "#include must name a header as <...> or \"...\" (macros are not allowed)");
    if (!h.empty() && (h[0] == '/' || h.find("..") != std::string::npos))
      return Status::Error(where() + "#include \"" + h + "\": absolute and '..' paths are not allowed");
    if (!Allowed(h))
      return Status::Error(where() + "#include <" + h +
                           "> is not allowed: only CUDA's own headers (cuda_fp16.h, cuda_bf16.h, "
                           "cooperative_groups.h, cuda/pipeline, cuda/barrier, mma.h, ...) and \"kevolve.h\"");
  }
  return Status::Ok();
}

}  // namespace kevolve

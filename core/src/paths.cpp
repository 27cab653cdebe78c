#include "kevolve/core/paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace fs = std::filesystem;

namespace kevolve {

namespace {
bool HasConfigs(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p / "configs" / "ops", ec);
}
}  // namespace

std::string FindProjectRoot() {
  std::vector<fs::path> candidates;
  if (const char* home = std::getenv("KEVOLVE_HOME")) candidates.emplace_back(home);
  std::error_code ec;
  candidates.push_back(fs::current_path(ec));
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path p = exe.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path())
      candidates.push_back(p);
  }
  candidates.emplace_back(KEVOLVE_SOURCE_ROOT);
  for (const auto& c : candidates)
    if (HasConfigs(c)) return c.string();
  return "";
}

}  // namespace kevolve

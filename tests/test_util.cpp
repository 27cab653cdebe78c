#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kevolve/evaluators/cuda_driver.h"

namespace fs = std::filesystem;

namespace kevolve::testing {

// Both can be overridden for a build that runs elsewhere (the GPU machine).
fs::path SourceRoot() {
  const char* home = std::getenv("KEVOLVE_HOME");
  return fs::path(home ? home : KEVOLVE_SOURCE_ROOT);
}
fs::path KevolveBinary() {
  const char* bin = std::getenv("KEVOLVE_BIN");
  return fs::path(bin ? bin : KEVOLVE_BINARY);
}

fs::path MakeTempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  fs::path p = fs::temp_directory_path() /
               ("kevolve-test-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

bool GpuAvailable(std::string* why) {
  auto gpus = ListGpus();
  if (!gpus.ok()) {
    *why = gpus.error();
    return false;
  }
  return true;
}

int RunCommand(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  output->clear();
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace kevolve::testing

#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

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

namespace {

// The temp dirs this test process made, removed when it exits (by the process that made
// them, not by a forked child that exits), unless a test failed (KeepTempDirs) or
// KEVOLVE_KEEP_TEST_DIRS is set to anything but 0.
class TempDirs {
 public:
  void Add(const fs::path& p) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(p);
  }
  void Keep() { keep_ = true; }
  ~TempDirs() {
    const char* env = std::getenv("KEVOLVE_KEEP_TEST_DIRS");
    if (getpid() != owner_ || keep_ || (env && std::string(env) != "0")) return;
    std::error_code ec;
    for (const auto& d : dirs_) fs::remove_all(d, ec);
  }

 private:
  std::mutex mu_;
  std::vector<fs::path> dirs_;
  pid_t owner_ = getpid();
  bool keep_ = false;
};

TempDirs& MadeDirs() {
  static TempDirs dirs;
  return dirs;
}

}  // namespace

void KeepTempDirs() { MadeDirs().Keep(); }

fs::path MakeTempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  fs::path p = fs::temp_directory_path() /
               ("kevolve-test-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(p);
  fs::create_directories(p);
  MadeDirs().Add(p);
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

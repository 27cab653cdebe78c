// Catch2 main. When the run selects only [gpu] tests and no GPU is usable, it prints why
// and exits 77, which CTest reports as "Skipped". A fatal signal outside a test case (the
// H200 once showed SIGSEGV after "All tests passed", while the process exited) prints a
// backtrace first, naming the library it came from.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "test_util.h"

namespace {

std::atomic<bool> g_run_ended{false};

// Only async-signal-safe calls (write, backtrace_symbols_fd; backtrace is loaded beforehand).
void Say(const char* text) { (void)!write(2, text, std::strlen(text)); }

void OnFatalSignal(int sig) {
  const char num[3] = {static_cast<char>('0' + sig / 10 % 10), static_cast<char>('0' + sig % 10), '\0'};  // < 100
  Say("kevolve_tests: fatal signal ");
  Say(num);
  Say(g_run_ended.load() ? " after the test run ended (while exiting)" : " outside Catch2's handlers");
  Say("; backtrace:\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void InstallFatalSignalBacktrace() {
  void* warm[1];
  backtrace(warm, 1);  // loads what backtrace needs now, not inside the handler
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) std::signal(sig, OnFatalSignal);
}

}  // namespace

int main(int argc, char** argv) {
  InstallFatalSignalBacktrace();
  bool gpu_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "[gpu]") gpu_only = true;
  }
  if (gpu_only) {
    std::string why;
    if (!kevolve::testing::GpuAvailable(&why)) {
      std::printf("SKIPPED: [gpu] tests need an NVIDIA GPU: %s\n", why.c_str());
      return 77;
    }
  }
  const int rc = Catch::Session().run(argc, argv);
  g_run_ended = true;
  if (rc != 0) kevolve::testing::KeepTempDirs();  // a failure's paths stay readable
  return rc;
}

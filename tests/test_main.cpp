// Catch2 main. When the run selects only [gpu] tests and no GPU is usable, it prints why
// and exits 77, which CTest reports as "Skipped".
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "test_util.h"

int main(int argc, char** argv) {
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
  if (rc != 0) kevolve::testing::KeepTempDirs();  // a failure's paths stay readable
  return rc;
}

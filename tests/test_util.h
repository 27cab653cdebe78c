// Helpers shared by tests: paths into the source tree, temp dirs, the GPU probe.
#pragma once

#include <filesystem>
#include <string>

namespace kevolve::testing {

std::filesystem::path SourceRoot();           // the repository root
std::filesystem::path KevolveBinary();        // the built kevolve executable
// A fresh, unique directory under the temp dir, removed when the test process exits;
// kept when a test failed (KeepTempDirs, called by the test main) or with
// KEVOLVE_KEEP_TEST_DIRS=1.
std::filesystem::path MakeTempDir(const std::string& tag);
void KeepTempDirs();
std::string ReadFile(const std::filesystem::path& p);
void WriteFile(const std::filesystem::path& p, const std::string& text);

// True when libcuda loads and reports at least one device; else fills *why.
bool GpuAvailable(std::string* why);

// Runs a shell command, returns its exit status and captures stdout+stderr.
int RunCommand(const std::string& cmd, std::string* output);

}  // namespace kevolve::testing

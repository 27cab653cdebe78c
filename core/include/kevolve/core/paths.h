// Locating the shipped configuration (configs/ops, configs/run.json, context/).
#pragma once

#include <string>

namespace kevolve {

// The folder that holds configs/ and context/. Searched in order: $KEVOLVE_HOME, the
// current directory, the folders above the executable, and the source tree the binary
// was built from. Returns "" when none has configs/ops.
std::string FindProjectRoot();

}  // namespace kevolve

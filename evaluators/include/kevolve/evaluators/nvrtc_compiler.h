// NVRTC straight to CUBIN for a real architecture, keeping the PTX; resource usage from
// ptxas' verbose output. Parameters and the element type arrive as -D.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kevolve/evaluators/compiler.h"
#include "kevolve/evaluators/static_check.h"

namespace kevolve {

struct NvrtcOptions {
  std::string cuda_include_dir;  // toolkit include folder; found automatically when empty
  StaticLimits limits;
  bool line_info = true;         // -lineinfo, for profilers and SASS excerpts
};

class NvrtcCompiler : public Compiler {
 public:
  explicit NvrtcCompiler(NvrtcOptions options = {});
  CompileResult Compile(const CompileRequest& req) override;
  // NVRTC's own version, "13.0".
  static std::string Version();
  // Empty when NVRTC can compile for `arch` ("sm_90", "sm_90a", ...); else why not,
  // naming the architectures it supports.
  static std::string CheckArch(const std::string& arch);

 private:
  NvrtcOptions options_;
};

// Wraps a compiler with a cache keyed by CompileRequest::Hash(): nothing compiles twice.
// Thread-safe.
class CachingCompiler : public Compiler {
 public:
  explicit CachingCompiler(std::shared_ptr<Compiler> inner) : inner_(std::move(inner)) {}
  CompileResult Compile(const CompileRequest& req) override;
  size_t size() const;

 private:
  std::shared_ptr<Compiler> inner_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, CompileResult> cache_;  // GUARDED_BY(mu_)
};

// Parses ptxas -v lines ("Used 32 registers, ...") into per-function resources.
std::map<std::string, Resources> ParsePtxasInfo(const std::string& log);

// The toolkit's include folder (for cuda_fp16.h etc.): $CUDA_HOME/include, CUDAToolkit
// at build time, /usr/local/cuda/include.
std::string FindCudaIncludeDir();

// The built-in header every candidate can include as "kevolve.h" and which is
// pre-included: the element type T, dtype helpers and the kv:: device helpers
// (evaluators/device/kevolve.h, embedded at build time).
const std::string& KevolveHeader();

// The worker's own kernels (input generators, copy, FMA peak), as a compile request:
// built into every worker at start, and compiled by a CPU test so a broken harness
// shows up without a GPU.
CompileRequest HarnessCompileRequest(const std::string& arch);

}  // namespace kevolve

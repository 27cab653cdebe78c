// The compile rung's interface. The real implementation is NVRTC (nvrtc_compiler.h);
// tests may substitute their own.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kevolve/core/candidate.h"
#include "kevolve/core/dtype.h"

namespace kevolve {

struct CompileRequest {
  std::string name;                // file name shown in logs ("block_row.cu")
  std::string source;              // the candidate's full text
  Assignment params;
  DType dtype = DType::kF32;
  std::string arch = "sm_90";      // a real architecture: sm_90, sm_90a, sm_80, ...
  std::vector<std::string> entries;        // kernels to look up in the CUBIN
  std::vector<std::string> extra_options;  // more NVRTC options (canonical order kept)

  // Identity of the compile: source, params, dtype, arch and options.
  std::string Hash() const;
};

// Per-kernel resource usage, from ptxas' verbose output.
struct Resources {
  int registers = -1;
  int64_t smem_static = 0;   // bytes of static shared memory
  int64_t stack = 0;         // stack frame bytes
  int64_t spill_stores = 0;  // bytes
  int64_t spill_loads = 0;   // bytes
  int64_t cmem = 0;          // bytes of constant bank 0
  int barriers = 0;
};

struct CompileResult {
  bool ok = false;
  std::string rung;          // where it stopped: "static" or "compile" (or "" when ok)
  std::string log;           // diagnostics with the candidate's own line numbers
  std::string cubin;
  std::string ptx;
  std::map<std::string, std::string> lowered;      // entry -> symbol in the CUBIN
  std::map<std::string, Resources> resources;      // by entry
  double compile_ms = 0.0;
  bool cached = false;
  std::string hash;
};

class Compiler {
 public:
  virtual ~Compiler() = default;
  // Never throws for a bad candidate: failures come back as !ok with a log.
  // Thread-safe: the compile pool calls it from many threads.
  virtual CompileResult Compile(const CompileRequest& req) = 0;
};

// Summed view used by ladders and features: max registers, total smem/stack/spills.
Resources Aggregate(const CompileResult& r);

}  // namespace kevolve

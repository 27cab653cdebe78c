// The profile rung (finalists, `kevolve eval --profile`, exports): an Nsight Compute
// report of the candidate's kernels on every tune shape, replayed by a separate
// `kevolve worker --replay` process under `ncu --clock-control none`, plus SASS from
// cuobjdump. Tools that are missing are reported, never fatal.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kevolve/evaluators/compiler.h"
#include "kevolve/evaluators/protocol.h"
#include "kevolve/evaluators/rungs.h"

namespace kevolve {

struct ProfileOptions {
  std::string kevolve_exe;   // default /proc/self/exe
  int device = 0;
  std::string workdir;       // where the request, cubin and report are written
};

struct ProfileResult {
  RungResult rung;           // name "profile"
  std::string ncu_report;    // the .ncu-rep bytes ("" when ncu is absent or failed)
  std::string ncu_summary;   // readable table
  std::string sass;          // cuobjdump -sass output
};

// `timings` (from the timing rung) are compared with ncu's gpu__time_duration per shape.
ProfileResult Profile(const EvalRequest& req, const CompileResult& binary, const std::vector<ShapeTiming>& timings,
                      const ProfileOptions& options);

// Finds a tool on PATH, in /usr/local/cuda/bin, or (ncu) under /opt/nvidia/nsight-compute.
std::string FindTool(const std::string& name);

// Parses `ncu --csv --page raw` output: one map of metric -> value (converted to base
// units: ns, bytes, percent) per profiled kernel, in launch order, plus "Kernel Name".
std::vector<std::map<std::string, std::string>> ParseNcuRawCsv(const std::string& csv);
double NcuValueInBaseUnits(const std::string& value, const std::string& unit);

// The Nsight Compute options of the profile run: kevolve's own metrics, plus the options
// of KEVOLVE_NCU_ARGS (`extra`, split on whitespace). ncu takes `--metrics` once, so the
// metrics the user names there (`--metrics A,B` or `--metrics=A,B`, any number of times)
// are appended to kevolve's list; every other option is passed on as written. Returns
// the option string (" --metrics LIST ..."), or "" with *error set when `--metrics` has
// no value.
std::string NcuOptions(const std::string& base_metrics, const std::string& extra, std::string* error);

}  // namespace kevolve

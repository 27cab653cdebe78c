// The profile rung (finalists, `kevolve eval --profile`, exports): an Nsight Compute
// report of the candidate's kernels on every tune shape, replayed by a separate
// `kevolve worker --replay` process under `ncu --clock-control none`, plus SASS from
// cuobjdump. Tools that are missing are reported, never fatal.
#pragma once

#include <cstdint>
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

// Splits `text` into words with a POSIX shell's quoting rules: blanks separate words;
// '...' is literal; "..." keeps blanks, and in it a backslash escapes ", $, ` or a
// backslash; outside quotes a backslash escapes the next character. Nothing is expanded
// ($VARS, globs, commands). An unterminated quote sets *error.
std::vector<std::string> SplitShellWords(const std::string& text, std::string* error);

// The Nsight Compute options of the profile run: kevolve's own metrics, plus the options
// of KEVOLVE_NCU_ARGS (`extra`, split by SplitShellWords). ncu takes `--metrics` once,
// so the metrics the user names there (`--metrics A,B` or `--metrics=A,B`, any number of
// times) are appended to kevolve's list; every other word is passed on, each quoted for
// the shell. Returns the option string (" --metrics 'LIST' 'word' ..."), or "" with
// *error set for a `--metrics` without a list or an unterminated quote.
std::string NcuOptions(const std::string& base_metrics, const std::string& extra, std::string* error);

// The metric names of the `--metrics` lists in KEVOLVE_NCU_ARGS (`extra`, read as
// NcuOptions reads it), in order and once each. Entries with a ':' (breakdown:NAME,
// regex:..., group:...) are left out: they stand for many columns.
std::vector<std::string> NcuUserMetrics(const std::string& extra, std::string* error);

// The values of `names` over one shape's launches (rows of ParseNcuRawCsv): summed over
// the launches for a column ending in ".sum", the largest of the launches otherwise. A
// name that ncu reported under rollups instead (NAME.avg, NAME.max, NAME.min, NAME.sum
// columns) gives one entry per column. Names with no column are left out.
std::vector<std::pair<std::string, double>> UserMetricValues(
    const std::vector<std::map<std::string, std::string>>& launches, const std::vector<std::string>& names);

// Counts in `cuobjdump -sass` output: instructions, 128- or 256-bit global loads and
// stores whatever their cache modifiers (LDG.E.128, LDG.E.NA.128.CONSTANT, STG.E.EF.128,
// LDG.E.ENL2.256, ...), and local-memory loads and stores (LDL, STL: spills).
struct SassCounts {
  int64_t instructions = 0, ldg_wide = 0, stg_wide = 0, local = 0;
};
SassCounts CountSass(const std::string& sass);

}  // namespace kevolve

// Shared plumbing for the CLI commands: locating configs, loading an op, exit codes.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kevolve/core/dtype.h"
#include "kevolve/core/op_spec.h"
#include "kevolve/core/status.h"
#include "kevolve/db/store.h"
#include "kevolve/evaluators/worker_pool.h"

namespace kevolve::cli {

// Exit codes: the same across commands.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;     // a candidate failed a rung
constexpr int kExitUsage = 2;      // bad input: malformed spec, unknown op, bad flag
constexpr int kExitNoGpu = 3;      // the command needs a GPU and found none
constexpr int kExitInterrupted = 130;

// Prints "kevolve: error: MESSAGE" (each line of a multi-line message) to stderr.
void PrintError(const std::string& message);
// "kevolve: warning: ..." on stderr: something was skipped, and the command goes on.
void PrintWarning(const std::string& message);

// With --profile: false, with the error printed, when KEVOLVE_NCU_ARGS cannot be used
// (a --metrics without a list, an unterminated quote), so the command stops with exit 2
// before any candidate runs instead of failing every profile rung.
bool NcuArgsUsable();

// The configs/ops folder ("" when not found, with the error printed).
std::string OpsRoot();
// Loads op `name`, checking `dtype` against its variants. Errors are printed.
Result<OpSpec> LoadOp(const std::string& name);
Result<DType> ResolveDType(const OpSpec& op, const std::string& dtype);  // "" = first variant

// One worker process per visible GPU, with every device's calibration (from `store`'s
// cache unless `recalibrate`, else measured and written back). On failure prints the
// error and sets *exit_code.
struct GpuSession {
  std::unique_ptr<WorkerPool> pool;
  std::map<std::string, Calibration> calibration;
};
std::optional<GpuSession> StartGpus(db::Store* store, bool recalibrate, bool verbose, int* exit_code);

}  // namespace kevolve::cli

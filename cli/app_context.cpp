#include "app_context.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "kevolve/core/paths.h"
#include "kevolve/engine/pipeline.h"
#include "kevolve/engine/profiler.h"
#include "kevolve/evaluators/cuda_driver.h"

namespace fs = std::filesystem;

namespace kevolve::cli {

void PrintWarning(const std::string& message) { std::fprintf(stderr, "kevolve: warning: %s\n", message.c_str()); }

void PrintError(const std::string& message) {
  std::istringstream in(message);
  std::string line;
  while (std::getline(in, line)) std::fprintf(stderr, "kevolve: error: %s\n", line.c_str());
}

bool NcuArgsUsable() {
  const char* env = std::getenv("KEVOLVE_NCU_ARGS");
  if (!env) return true;
  std::string error;
  NcuOptions("", env, &error);
  if (error.empty()) return true;
  PrintError("KEVOLVE_NCU_ARGS: " + error);
  return false;
}

std::string OpsRoot() {
  std::string root = FindProjectRoot();
  if (root.empty()) return "";
  return (fs::path(root) / "configs" / "ops").string();
}

Result<OpSpec> LoadOp(const std::string& name) {
  std::string root = OpsRoot();
  if (root.empty()) return Status::Error("configs/ops not found: run from the kevolve checkout or set KEVOLVE_HOME");
  if (name.empty() || name.find('/') != std::string::npos || name.find("..") != std::string::npos)
    return Status::Error("bad op name '" + name + "'");
  fs::path dir = fs::path(root) / name;
  if (!fs::exists(dir / "op.json")) {
    std::string known;
    for (const auto& d : ListOpDirs(root)) known += (known.empty() ? "" : ", ") + fs::path(d).filename().string();
    return Status::Error("unknown op '" + name + "' (known: " + known + ")");
  }
  return LoadOpSpec(dir.string());
}

Result<DType> ResolveDType(const OpSpec& op, const std::string& dtype) {
  if (dtype.empty()) return op.dtypes.front();
  auto t = ParseDType(dtype);
  if (!t || !op.HasDType(*t)) {
    std::string known;
    for (DType d : op.dtypes) known += (known.empty() ? "" : ", ") + std::string(DTypeName(d));
    return Status::Error("op " + op.name + " has no dtype '" + dtype + "' (it has: " + known + ")");
  }
  return *t;
}

std::optional<GpuSession> StartGpus(db::Store* store, bool recalibrate, bool verbose, int* exit_code) {
  auto gpus = ListGpus();
  if (!gpus.ok()) {
    PrintError(NoGpuMessage(gpus.error()));
    *exit_code = kExitNoGpu;
    return std::nullopt;
  }
  WorkerPoolOptions wo;
  for (const auto& g : *gpus) wo.devices.push_back(g.ordinal);
  auto pool = WorkerPool::Start(wo);
  if (!pool.ok()) {
    PrintError(pool.error());
    *exit_code = kExitNoGpu;
    return std::nullopt;
  }
  auto cal = LoadOrCalibrate(**pool, store, recalibrate, verbose);
  if (!cal.ok()) {
    PrintError(cal.error());
    *exit_code = kExitFailed;
    return std::nullopt;
  }
  return GpuSession{std::move(*pool), std::move(*cal)};
}

}  // namespace kevolve::cli

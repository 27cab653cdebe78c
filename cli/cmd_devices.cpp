// kevolve devices: the visible GPUs, and (with --calibrate) their measured ceilings.
#include <cstdio>

#include "app_context.h"
#include "commands.h"
#include "kevolve/db/store.h"
#include "kevolve/engine/pipeline.h"
#include "kevolve/evaluators/cuda_driver.h"
#include "kevolve/evaluators/worker_pool.h"

namespace kevolve::cli {

namespace {

struct DevicesArgs {
  bool calibrate = false;
  std::string db;
};

int Run(const DevicesArgs& a) {
  auto gpus = ListGpus();
  if (!gpus.ok()) { PrintError(NoGpuMessage(gpus.error())); return kExitNoGpu; }
  for (const auto& g : *gpus)
    std::printf("GPU %d: %s %s  %d SMs  L2 %.0f MiB  %.0f GiB  smem/block %lld  %s\n", g.ordinal, g.name.c_str(),
                g.Arch().c_str(), g.sm_count, g.l2_bytes / 1048576.0, g.mem_bytes / 1073741824.0,
                static_cast<long long>(g.smem_per_block_optin), g.uuid.c_str());
  if (!a.calibrate) return kExitOk;
  std::unique_ptr<db::Store> store;
  if (!a.db.empty()) {
    auto s = db::OpenSqliteStore(a.db);
    if (!s.ok()) { PrintError(s.error()); return kExitUsage; }
    store = std::move(*s);
  }
  int rc = kExitOk;
  auto gpu = StartGpus(store.get(), true, false, &rc);
  if (!gpu) return rc;
  const auto* cal = &gpu->calibration;
  for (const auto& [uuid, c] : *cal)
    std::printf("%s: copy %.0f GB/s (read + written), fp32 FMA %.1f TFLOP/s  %s\n", uuid.c_str(), c.copy_gbps,
                c.fp32_gflops / 1000, c.details.dump().c_str());
  return kExitOk;
}

}  // namespace

Handler AddDevicesCommand(CLI::App& app) {
  auto a = std::make_shared<DevicesArgs>();
  CLI::App* sub = app.add_subcommand("devices", "List the visible GPUs; --calibrate measures their copy bandwidth and FMA peak.\n"
                                                "Examples:\n  kevolve devices\n  kevolve devices --calibrate --db kevolve.db");
  sub->add_flag("--calibrate", a->calibrate, "Measure the ceilings through a worker process per GPU");
  sub->add_option("--db", a->db, "Cache the calibration in this database");
  return [a] { return Run(*a); };
}

}  // namespace kevolve::cli

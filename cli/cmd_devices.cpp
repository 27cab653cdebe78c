// kevolve devices: the visible GPUs, and (with --calibrate) their measured ceilings.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "app_context.h"
#include "commands.h"
#include "kevolve/db/store.h"
#include "kevolve/engine/pipeline.h"
#include "kevolve/evaluators/cuda_driver.h"
#include "kevolve/evaluators/worker_pool.h"

namespace kevolve::cli {

namespace {

// One line for the calibration's "l2" details (evaluators/src/l2_calibration.h).
std::string DescribeL2(const nlohmann::json& l2) {
  char buf[512];
  if (l2.contains("error")) return "L2: not measured (" + l2["error"].get<std::string>() + ")";
  if (l2.value("partitions", 0) != 2) {
    std::vector<double> m;
    for (const auto& e : l2.value("sm_p10_p50_p90", nlohmann::json::array())) m.push_back(e[2].get<double>());
    std::sort(m.begin(), m.end());
    std::snprintf(buf, sizeof buf, "L2: no split of the SMs seen (%d SMs probed, median hit %.0f-%.0f cycles)",
                  static_cast<int>(m.size()), m.empty() ? 0.0 : m.front(), m.empty() ? 0.0 : m.back());
    return buf;
  }
  std::snprintf(buf, sizeof buf, "L2: 2 partitions (%d + %d SMs); a hit %.0f cycles near, %.0f across the fabric; owner changes every %lld bytes",
                l2["sms_per_partition"][0].get<int>(), l2["sms_per_partition"][1].get<int>(),
                l2.value("near_hit_cycles", 0.0), l2.value("far_hit_cycles", 0.0),
                l2.value("owner_granule_bytes", 0LL));
  std::string s = buf;
  if (!l2.contains("reference_side_owns")) {
    const long long g = l2.value("owner_granule_bytes", 0LL);
    s = s.substr(0, s.rfind(';')) +
        (g > 0 ? "; an owner granule of " + std::to_string(g) + " bytes, which the copy cannot use"
               : "; no owner granule found");
  }
  if (l2.contains("owner_aware_copy_gbps")) {
    std::snprintf(buf, sizeof buf, "; a copy whose SMs read only lines their partition owns: %.0f GB/s, in address order: %.0f GB/s",
                  l2.value("owner_aware_copy_gbps", 0.0), l2.value("ticket_copy_gbps", 0.0));
    s += buf;
  }
  return s;
}

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
  for (const auto& [uuid, c] : *cal) {
    nlohmann::json rest = c.details;
    rest.erase("l2");
    std::printf("%s: copy %.0f GB/s (read + written), fp32 FMA %.1f TFLOP/s  %s\n", uuid.c_str(), c.copy_gbps,
                c.fp32_gflops / 1000, rest.dump().c_str());
    if (c.details.contains("l2")) std::printf("  %s\n", DescribeL2(c.details["l2"]).c_str());
  }
  return kExitOk;
}

}  // namespace

Handler AddDevicesCommand(CLI::App& app) {
  auto a = std::make_shared<DevicesArgs>();
  CLI::App* sub = app.add_subcommand("devices", "List the visible GPUs; --calibrate measures their copy bandwidth, FMA peak and L2 partition layout.\n"
                                                "Examples:\n  kevolve devices\n  kevolve devices --calibrate --db kevolve.db");
  sub->add_flag("--calibrate", a->calibrate, "Measure the ceilings (copy, FMA) and the L2 partitions through a worker process per GPU");
  sub->add_option("--db", a->db, "Cache the calibration in this database");
  return [a] { return Run(*a); };
}

}  // namespace kevolve::cli

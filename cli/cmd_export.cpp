// kevolve export --run ID --top K --out DIR: the survivors of a run, each re-checked on
// the held-out shapes, with their artifacts.
#include <cstdio>
#include <filesystem>

#include "app_context.h"
#include "commands.h"
#include "kevolve/engine/export.h"
#include "kevolve/engine/run_config.h"
#include "kevolve/evaluators/cuda_driver.h"
#include "kevolve/evaluators/nvrtc_compiler.h"
#include "kevolve/evaluators/worker_pool.h"

namespace fs = std::filesystem;

namespace kevolve::cli {

namespace {

struct ExportArgs {
  std::string db = "kevolve.db", out;
  int64_t run = 0;
  int top = 3, confirm = 3;
  bool profile = false, per_shape = false, confirm_given = false;
};

int Run(const ExportArgs& a) {
  if (a.profile && !NcuArgsUsable()) return kExitUsage;
  if (!fs::exists(a.db)) { PrintError("no database at '" + a.db + "' (give one with --db)"); return kExitUsage; }
  auto store = db::OpenSqliteStore(a.db);
  if (!store.ok()) { PrintError(store.error()); return kExitUsage; }
  auto run = (*store)->GetRun(a.run);
  if (!run.ok()) { PrintError(run.error()); return kExitUsage; }
  auto op = LoadOp(run->op);
  if (!op.ok()) { PrintError(op.error()); return kExitUsage; }
  auto dtype = ResolveDType(*op, run->dtype);
  if (!dtype.ok()) { PrintError(dtype.error()); return kExitUsage; }
  if (auto gpus = ListGpus(); !gpus.ok()) {
    PrintError(NoGpuMessage(gpus.error() + " (export re-checks every survivor on the held-out shapes)"));
    return kExitNoGpu;
  }
  int rc = kExitOk;
  auto gpu = StartGpus(store->get(), false, true, &rc);
  if (!gpu) return rc;
  PipelineOptions po;
  if (run->config.contains("arch")) po.arch = run->config["arch"].get<std::string>();
  // The run's timer, L2 flush and input seed, so that re-timed medians (--confirm) are measured the
  // way the search measured the ones they are compared with.
  if (auto cfg = RunConfigFromJson(run->config); cfg.ok()) {
    po.eval.seed = cfg->seed;
    po.eval.timing.timer = cfg->timer;
    SetL2Flush(po.eval.timing, cfg->flush);
  }
  auto compiler = std::make_shared<CachingCompiler>(std::make_shared<NvrtcCompiler>());
  auto pipe = Pipeline::Create(*op, *dtype, gpu->pool.get(), gpu->calibration, compiler, po);
  if (!pipe.ok()) { PrintError(pipe.error()); return kExitFailed; }
  ExportOptions eo{a.run, a.top, a.out.empty() ? (fs::path("runs") / std::to_string(a.run) / "best").string() : a.out,
                   a.profile, a.per_shape, a.confirm};
  if (a.confirm_given && !a.per_shape) std::fprintf(stderr, "kevolve: note: --confirm has no effect without --per-shape\n");
  auto n = ExportRun(**store, **pipe, eo);
  if (!n.ok()) { PrintError(n.error()); return kExitFailed; }
  std::printf("exported %d survivor(s) of run %lld to %s\n", *n, static_cast<long long>(a.run), eo.out_dir.c_str());
  return *n > 0 ? kExitOk : kExitFailed;
}

}  // namespace

Handler AddExportCommand(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* sub = app.add_subcommand(
      "export",
      "Export a run's best survivors, each re-checked on the op's held-out shapes (needs a GPU), with kernel.cu,\n"
      "launch.json, PTX, CUBIN, SASS, resources, metrics, lineage and a README table.\n"
      "Examples:\n  kevolve export --run 1 --top 3 --out best/ --db kevolve.db\n  kevolve export --run 1 --top 1 --per-shape --out best/");
  sub->add_option("--run", a->run, "Run id (see 'kevolve runs')")->required();
  sub->add_option("--top", a->top, "How many survivors (default 3)");
  sub->add_option("--out", a->out, "Output folder (default runs/<id>/best)");
  sub->add_option("--db", a->db, "Database (default kevolve.db)");
  sub->add_flag("--profile", a->profile, "Add an Nsight Compute report per survivor (needs ncu)");
  sub->add_flag("--per-shape", a->per_shape,
                "Also export the fastest survivor of each tune shape and write dispatch.json (shape -> folder)");
  sub->add_option("--confirm", a->confirm,
                  "With --per-shape: time the N fastest candidates of each shape again and pick by the new medians "
                  "(default 3; 0 keeps the search's medians)")
      ->check(CLI::Range(0, 100));
  return [a, sub] {
    a->confirm_given = sub->count("--confirm") > 0;
    return Run(*a);
  };
}

}  // namespace kevolve::cli

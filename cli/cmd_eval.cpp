// kevolve eval: every rung on the GPU for candidate files; kevolve worker (internal).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include "app_context.h"
#include "assignments.h"
#include "commands.h"
#include "kevolve/core/json_file.h"
#include "kevolve/engine/pipeline.h"
#include "kevolve/engine/profiler.h"
#include "kevolve/engine/search.h"
#include "kevolve/evaluators/cuda_driver.h"
#include "kevolve/evaluators/nvrtc_compiler.h"
#include "kevolve/evaluators/worker.h"
#include "kevolve/evaluators/worker_pool.h"

namespace fs = std::filesystem;

namespace kevolve::cli {

namespace {

struct EvalArgs {
  std::string op, dtype, db, timer = "events", profile_dir, flush = "memset";
  std::vector<std::string> files, shapes;
  AssignmentFlags assign;  // --param, --sweep, --variants (--seed is the input draws' too)
  bool json = false, profile = false, recalibrate = false, no_timing = false;
  double launch_timeout_ms = 2000;
  double timeout_factor = 50;
};

std::string Num(double v, const char* fmt = "%.4g") {
  char b[64];
  std::snprintf(b, sizeof(b), fmt, v);
  return b;
}

// --shape with shapes that differ in one size: each family's fixed cost and steady state
// (kevolve::ScalingFits), on one line.
std::string ScalingLine(const ScalingFit& f, const std::vector<std::string>& size_names) {
  std::string shapes;
  for (const auto& s : f.shapes) shapes += (shapes.empty() ? "" : " ") + s;
  const std::string name = f.varies < size_names.size() ? size_names[f.varies] : "size " + std::to_string(f.varies);
  return "[scaling] " + name + " varies (" + shapes + "): steady state " + Num(f.steady, "%.3f") + " of the " +
         f.bound + " roofline, fixed cost " + Num(f.fixed_us, "%.3g") + " us per launch" +
         (f.shapes.size() > 2 ? ", worst residual " + Num(f.max_residual_us, "%.2g") + " us" : "");
}

nlohmann::json ScalingJson(const Ladder& l, const std::vector<std::string>& size_names) {
  nlohmann::json out = nlohmann::json::array();
  if (!l.fitness) return out;
  for (const auto& f : ScalingFits(*l.fitness))
    out.push_back({{"shapes", f.shapes},
                   {"varies", f.varies < size_names.size() ? size_names[f.varies] : std::to_string(f.varies)},
                   {"steady", f.steady},
                   {"fixed_us", f.fixed_us},
                   {"max_residual_us", f.max_residual_us},
                   {"bound", f.bound}});
  return out;
}

// `size_names`: the op's sizes, for the scaling lines printed after the rungs (only with
// --shape, where the shapes are the user's; empty: none).
void PrintLadder(const Ladder& l, const std::string& arch, const std::string& dtype,
                 const std::vector<std::string>& size_names) {
  std::printf("%s [%s] %s %s%s\n", l.input.name.c_str(), AssignmentString(l.input.params).c_str(), dtype.c_str(),
              arch.c_str(), l.device_uuid.empty() ? "" : (" on " + l.device_uuid).c_str());
  for (const auto& r : l.rungs) {
    if (r.name == "timing" && r.ok) {
      std::map<std::string, const ShapeFraction*> frac;
      if (l.fitness)
        for (const auto& s : l.fitness->shapes) frac[s.shape] = &s;
      for (const auto& t : l.timings) {
        std::string line = "[timing] ok " + t.shape + " median_us=" + Num(t.median_us) + " p10=" + Num(t.p10_us) +
                           " p90=" + Num(t.p90_us) + " n=" + std::to_string(t.n);
        if (auto it = frac.find(t.shape); it != frac.end())
          line += " frac=" + Num(it->second->fraction, "%.3f") + " roofline_us=" + Num(it->second->roofline_us) + " (" +
                  it->second->bound + ")";
        if (std::string occ = FormatOccupancy(t.protocol); !occ.empty()) line += " " + occ;
        if (t.protocol.contains("cupti_over_events"))
          line += " cupti/events=" + Num(t.protocol["cupti_over_events"].get<double>(), "%.3f");
        std::printf("  %s\n", line.c_str());
      }
      continue;
    }
    std::printf("  %s\n", FormatRung(r).c_str());
  }
  if (!size_names.empty() && l.ok() && l.fitness)
    for (const auto& f : ScalingFits(*l.fitness)) std::printf("  %s\n", ScalingLine(f, size_names).c_str());
}

// With several candidates: the fastest at each shape among those that passed every rung.
void PrintFastest(const std::vector<Ladder>& ladders, const std::string& dtype) {
  const std::vector<ShapeBest> best = FastestPerShape(ladders);
  if (best.empty()) return;
  size_t passed = 0;
  for (const auto& l : ladders) passed += l.ok();
  std::printf("fastest per shape (%s, of the %zu candidates that passed every rung):\n", dtype.c_str(), passed);
  for (const auto& b : best) {
    const Ladder& l = ladders[b.ladder];
    std::printf("  %-14s %10s us  frac %s  %s [%s]\n", b.shape.c_str(), Num(b.median_us).c_str(),
                Num(b.fraction, "%.3f").c_str(), l.input.name.c_str(), AssignmentString(l.input.params).c_str());
  }
}

nlohmann::json LadderJson(const Ladder& l) {
  nlohmann::json j = {{"file", l.input.name}, {"params", l.input.params}, {"hash", l.hash}, {"ok", l.ok()},
                      {"status", l.status()}, {"device", l.device_uuid}, {"rungs", nlohmann::json::array()},
                      {"timings", nlohmann::json::array()}};
  for (const auto& r : l.rungs)
    j["rungs"].push_back({{"name", r.name}, {"ok", r.ok}, {"reason", r.reason}, {"metrics", r.metrics},
                          {"log", r.log}, {"duration_ms", r.duration_ms}});
  for (const auto& t : l.timings)
    j["timings"].push_back({{"shape", t.shape}, {"median_us", t.median_us}, {"p10_us", t.p10_us},
                            {"p90_us", t.p90_us}, {"n", t.n}, {"protocol", t.protocol}});
  if (l.fitness) j["fitness"] = l.fitness->fitness;
  return j;
}

int Run(const EvalArgs& a) {
  auto op = LoadOp(a.op);
  if (!op.ok()) { PrintError(op.error()); return kExitUsage; }
  auto dtype = ResolveDType(*op, a.dtype);
  if (!dtype.ok()) { PrintError(dtype.error()); return kExitUsage; }
  if (a.timer != "events" && a.timer != "cupti") { PrintError("--timer must be events or cupti"); return kExitUsage; }
  TimingProtocol timing;
  timing.timer = a.timer;
  if (!SetL2Flush(timing, a.flush)) { PrintError("--flush must be memset, read or none"); return kExitUsage; }
  if (a.profile && !NcuArgsUsable()) return kExitUsage;
  // --shape: time (and profile) these shapes instead of the op's tune shapes, and check them
  // too. Fitness is then over these shapes only, so such a ladder is not recorded where a
  // search could reuse it.
  if (a.no_timing && !a.db.empty()) {
    // The record would replace a timed result of the same candidate with an untimed one.
    PrintError("--no-timing cannot be combined with --db: a database keeps timed results (kevolve compile --db "
               "records compile results)");
    return kExitUsage;
  }
  if (!a.shapes.empty()) {
    if (!a.db.empty()) {
      PrintError("--shape cannot be combined with --db: a database keeps ladders timed on the op's tune shapes");
      return kExitUsage;
    }
    std::vector<Shape> tune;
    for (const auto& text : a.shapes) {
      auto shape = ParseShapeLabel(*op, text);
      if (!shape.ok()) { PrintError("--shape: " + shape.error()); return kExitUsage; }
      bool seen = false;
      for (const auto& t : tune) seen |= t.label == shape->label;
      if (!seen) tune.push_back(*shape);  // a repeat would count twice in the fitness
    }
    // The shapes timed are also checked against the reference: a shape the check shapes do
    // not cover could otherwise report a fast time for wrong output.
    for (const auto& t : tune) {
      bool seen = false;
      for (const auto& c : op->check) seen |= c.label == t.label;
      if (!seen) op->check.push_back(t);
    }
    op->tune = std::move(tune);
  }
  // --sweep NAME=V1,V2,...: every file at every combination of the swept values (on top of
  // its defaults and --param), for A/B comparisons in one process (spread over the visible
  // GPUs like any candidates: CUDA_VISIBLE_DEVICES=0 keeps an A/B on one device).
  if (Status st = CheckAssignmentFlags(a.assign); !st.ok()) { PrintError(st.message()); return kExitUsage; }
  std::vector<CandidateInput> inputs;
  for (const auto& f : a.files) {
    auto text = ReadTextFile(f);
    if (!text.ok()) { PrintError(text.error()); return kExitUsage; }
    const std::string name = fs::path(f).filename().string();
    auto list = FileAssignments(name, CandidateSource::Parse(*text, name), a.assign, *dtype);
    if (!list.ok()) { PrintError(list.error()); return kExitUsage; }
    for (const auto& asg : *list) inputs.push_back({name, *text, asg});
  }
  // A database keeps medians of one timing protocol (kevolve --help: --flush): checked
  // before any GPU work.
  if (!a.db.empty() && fs::exists(a.db)) {
    auto s = db::OpenSqliteStore(a.db);
    if (!s.ok()) { PrintError(s.error()); return kExitUsage; }
    if (Status st = CheckTimingProtocol(**s, op->name, DTypeName(*dtype), timing.timer, L2FlushName(timing)); !st.ok()) {
      PrintError(a.db + ": " + st.message());
      return kExitUsage;
    }
  }
  if (auto gpus = ListGpus(); !gpus.ok()) { PrintError(NoGpuMessage(gpus.error())); return kExitNoGpu; }
  std::unique_ptr<db::Store> store;
  if (!a.db.empty()) {
    auto s = db::OpenSqliteStore(a.db);
    if (!s.ok()) { PrintError(s.error()); return kExitUsage; }
    store = std::move(*s);
  }
  int rc = kExitOk;
  auto gpu = StartGpus(store.get(), a.recalibrate, !a.json, &rc);
  if (!gpu) return rc;
  auto& pool = gpu->pool;
  auto& cal = gpu->calibration;
  PipelineOptions po;
  po.eval.seed = a.assign.seed;
  po.eval.timing = timing;
  po.eval.launch_timeout_ms = a.launch_timeout_ms;
  po.eval.timeout_factor = a.timeout_factor;
  po.eval.skip_timing = a.no_timing;
  auto compiler = std::make_shared<CachingCompiler>(std::make_shared<NvrtcCompiler>());
  auto pipe = Pipeline::Create(*op, *dtype, pool.get(), cal, compiler, po);
  if (!pipe.ok()) { PrintError(pipe.error()); return kExitFailed; }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Ladder> ladders = (*pipe)->Run(inputs);
  double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> profiles(ladders.size());
  std::vector<ProfileResult> profile_results(ladders.size());
  if (a.profile) {
    for (size_t i = 0; i < ladders.size(); ++i) {
      Ladder& l = ladders[i];
      if (!l.ok()) continue;
      auto req = (*pipe)->Request(l);
      if (!req.ok()) continue;
      ProfileOptions popt;
      for (const auto& d : pool->Devices())
        if (d.uuid == l.device_uuid) popt.device = d.ordinal;
      popt.workdir = (fs::temp_directory_path() / ("kevolve-profile-" + std::to_string(getpid()) + "-" + std::to_string(i))).string();
      ProfileResult pr = Profile(*req, l.compiled, l.timings, popt);
      l.rungs.push_back(pr.rung);
      profiles[i] = pr.ncu_summary;
      profile_results[i] = pr;
      if (!a.profile_dir.empty()) {
        fs::path dir = fs::path(a.profile_dir) / (fs::path(l.input.name).stem().string() + "-" + l.hash.substr(0, 12));
        fs::create_directories(dir);
        if (!pr.ncu_report.empty()) WriteTextFile((dir / "profile.ncu-rep").string(), pr.ncu_report);
        if (!pr.sass.empty()) WriteTextFile((dir / "kernel.sass").string(), pr.sass);
        WriteTextFile((dir / "ncu_summary.txt").string(), pr.ncu_summary);
      }
      std::error_code ec;
      fs::remove_all(popt.workdir, ec);
    }
  }
  int failed = 0, not_recorded = 0;
  nlohmann::json out = nlohmann::json::array();
  for (size_t li = 0; li < ladders.size(); ++li) {
    const Ladder& l = ladders[li];
    failed += !l.ok();
    if (store) {
      // One transaction per ladder: a record the store refuses (say, timings of another
      // protocol than the database's, written meanwhile by another process) leaves nothing.
      RecordContext ctx{op->name, DTypeName(*dtype), (*pipe)->arch()};
      Status st = store->Begin();
      if (st.ok()) {
        auto id = RecordLadder(*store, l, ctx);
        st = id.status();
        const ProfileResult& pr = profile_results[li];
        if (st.ok() && !pr.ncu_report.empty()) st = store->PutArtifact(*id, "ncu-rep", pr.ncu_report);
        if (st.ok() && !pr.sass.empty()) st = store->PutArtifact(*id, "sass", pr.sass);
        if (st.ok())
          st = store->Commit();
        else
          store->Rollback();
      }
      if (!st.ok()) {
        PrintError("not recorded in " + a.db + ": " + st.message());
        ++not_recorded;
      }
    }
    // Fits of fixed cost and steady state only over shapes the user chose (--shape): the
    // tune shapes differ in one size now and then, but across regimes a line does not fit.
    const std::vector<std::string> size_names = a.shapes.empty() ? std::vector<std::string>{} : op->sizes;
    if (a.json) {
      nlohmann::json j = LadderJson(l);
      if (!size_names.empty()) j["scaling"] = ScalingJson(l, size_names);
      out.push_back(std::move(j));
    } else {
      PrintLadder(l, (*pipe)->arch(), DTypeName(*dtype), size_names);
    }
    if (!a.json && !profiles[li].empty()) std::printf("%s", profiles[li].c_str());
  }
  if (a.json) std::printf("%s\n", out.dump(2).c_str());
  if (!a.json && ladders.size() > 1) {
    if (std::string table = MediansTable(ladders); !table.empty())
      std::printf("medians per shape (%s, us; * the fastest that passed every rung):\n%s", DTypeName(*dtype),
                  table.c_str());
    PrintFastest(ladders, DTypeName(*dtype));
  }
  if (!a.json && ladders.size() > 1)
    std::printf("%zu candidates (%d failed) in %.1f s on %zu GPU(s): %.0f candidates per GPU-minute\n", ladders.size(),
                failed, wall_s, pool->Devices().size(),
                ladders.size() / (wall_s / 60.0) / static_cast<double>(pool->Devices().size()));
  if (pool->restarts() > 0 && !a.json)
    std::printf("%d worker restart(s) after faulty candidates\n", pool->restarts());
  return failed || not_recorded ? kExitFailed : kExitOk;
}

struct WorkerArgs {
  int device = 0;
  std::string replay;
  int reps = 1;
};

}  // namespace

Handler AddEvalCommand(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand(
      "eval",
      "Run every rung (static, compile, launch, correctness, timing, fitness) on the GPU and print the ladder.\n"
      "Exit status: 0 only when every rung of every candidate passes; 1 when one fails; 2 for bad input;\n"
      "3 when no GPU is usable.\n"
      "Examples:\n"
      "  kevolve eval --op softmax configs/ops/softmax/seeds/warp_row.cu\n"
      "  kevolve eval --op softmax --dtype bf16 --param WARPS=8 --db kevolve.db my_kernel.cu\n"
      "  kevolve eval --op softmax --json --timer cupti configs/ops/softmax/seeds/*.cu\n"
      "  kevolve eval --op softmax --dtype bf16 --shape 1024x131072 --shape 256x262144 configs/ops/softmax/seeds/split_row.cu\n"
      "  kevolve eval --op layernorm --dtype bf16 --param BLOCK=256 --sweep SHIFT=0,1 --sweep CHUNKS=2,4 \\\n"
      "      configs/ops/layernorm/seeds/block_row.cu");
  sub->add_option("--op", a->op, "Op whose interface the candidates implement")->required();
  sub->add_option("--dtype", a->dtype, "Element type variant (default: the op's first)");
  // One value per use (CLI11 would otherwise take the candidate files that follow too).
  sub->add_option("--param", a->assign.params, "Override a parameter: NAME=VALUE (repeatable)")->allow_extra_args(false);
  sub->add_option("--sweep", a->assign.sweeps,
                  "Evaluate each file at every value of a parameter: NAME=V1,V2,... (repeatable: the cross "
                  "product, at most 256 per file); ends with a table of medians per shape")
      ->allow_extra_args(false);
  sub->add_option("--db", a->db, "Record candidates, rungs, timings and calibration in this database");
  sub->add_option("--seed", a->assign.seed, "Seed of the random input draws (and of --variants)");
  sub->add_option("--timer", a->timer, "events (CUDA events) or cupti (CUPTI kernel records)");
  sub->add_option("--flush", a->flush,
                  "How the L2 is emptied before each timed repetition: memset (default; writes a buffer twice "
                  "the L2, as triton's do_bench does, so the kernel also pays for writing those dirty lines back), "
                  "read (reads it: a cold L2 with no dirty lines) or none");
  sub->add_option("--launch-timeout-ms", a->launch_timeout_ms, "Watchdog floor per launch sequence (default 2000)");
  sub->add_option("--timeout-factor", a->timeout_factor, "Watchdog limit as a multiple of the reference's time (default 50)");
  sub->add_option("--variants", a->assign.variants, "Evaluate N assignments per file: the default one, then random valid ones")->check(CLI::NonNegativeNumber);
  sub->add_option("--shape", a->shapes,
                  "Time (and profile) this shape instead of the op's tune shapes, and check it too, e.g. "
                  "1024x131072 (the op's sizes in order; repeatable; not with --db). Shapes that differ in one size "
                  "also get a [scaling] line: steady-state fraction of the roofline and fixed cost per launch")
      ->allow_extra_args(false);
  sub->add_flag("--recalibrate", a->recalibrate, "Measure the device's copy bandwidth and FMA peak again");
  sub->add_flag("--no-timing", a->no_timing, "Stop after the correctness rung");
  sub->add_flag("--profile", a->profile, "Add the profile rung: Nsight Compute metrics per tune shape and SASS (needs ncu, cuobjdump; KEVOLVE_NCU_ARGS adds ncu options, e.g. --section WarpStateStats or --metrics NAMES)");
  sub->add_option("--profile-dir", a->profile_dir, "Keep each candidate's .ncu-rep, SASS and summary in this folder");
  sub->add_flag("--json", a->json, "Machine-readable output");
  sub->add_option("files", a->files, "Candidate .cu files")->required()->check(CLI::ExistingFile);
  return [a] { return Run(*a); };
}

Handler AddWorkerCommand(CLI::App& app) {
  auto a = std::make_shared<WorkerArgs>();
  CLI::App* sub = app.add_subcommand("worker", "Internal: one GPU worker process (speaks the protocol on stdin/stdout).");
  sub->group("");  // hidden from --help
  sub->add_option("--device", a->device, "GPU ordinal among the visible devices")->required();
  sub->add_option("--replay", a->replay, "Replay an encoded request's tune shapes (for ncu) instead of serving");
  sub->add_option("--reps", a->reps, "Repetitions per shape with --replay");
  return [a] { return a->replay.empty() ? RunWorker(a->device) : RunReplay(a->device, a->replay, a->reps); };
}

}  // namespace kevolve::cli

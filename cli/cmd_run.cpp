// The main job: kevolve --op OP [--dtype T] --gens N [--db PATH] [--seed S] ..., and
// kevolve --resume RUN_ID.
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <unistd.h>

#include "app_context.h"
#include "commands.h"
#include "kevolve/core/paths.h"
#include "kevolve/engine/export.h"
#include "kevolve/engine/llm_breeder.h"
#include "kevolve/engine/run_config.h"
#include "kevolve/engine/search.h"
#include "kevolve/operators/llm/provider.h"
#include "kevolve/evaluators/cuda_driver.h"
#include "kevolve/evaluators/nvrtc_compiler.h"
#include "kevolve/evaluators/worker_pool.h"

namespace fs = std::filesystem;

namespace kevolve::cli {

namespace {

struct RunArgs {
  std::string op, dtype, db = "kevolve.db", config, time, timer, flush, llm_config;
  std::vector<std::string> context_dirs;
  double max_cost = -1;
  int llm_in_flight = 8;
  int gens = -1, population = -1, islands = -1, top = 3;
  int64_t seed = -1, resume = 0;
  double target = -1;
  bool no_export = false, profile = false, per_shape = false;
};

std::atomic<bool> g_interrupt{false};

void OnSigint(int) {
  if (g_interrupt.exchange(true)) std::_Exit(kExitInterrupted);  // second Ctrl-C: leave now
  llm::CancelLlmCalls(true);  // a lock-free atomic store: safe in a signal handler
  const char msg[] =
      "\nkevolve: interrupted: finishing the evaluations in flight, cancelling LLM calls (Ctrl-C again to quit now)\n";
  ssize_t w = write(2, msg, sizeof(msg) - 1);
  (void)w;
}

void PrintSummary(db::Store& store, int64_t run_id, int top) {
  db::CandidateQuery q;
  q.run_id = run_id;
  q.only_ok = true;
  q.order_by_fitness = true;
  auto best = store.ListCandidates(q);
  if (!best.ok() || best->empty()) {
    std::printf("no candidate passed every rung\n");
    return;
  }
  // Each seed's default assignment (generation 0) is the baseline row.
  db::CandidateQuery s;
  s.run_id = run_id;
  auto all = store.ListCandidates(s);
  std::printf("\n%-6s %-16s %-8s %-34s %s\n", "id", "source", "fitness", "params", "origin");
  auto row = [&](const db::CandidateRecord& c, const std::string& origin) {
    auto src = store.GetSource(c.source_id);
    std::printf("%-6lld %-16s %-8.4f %-34s %s\n", static_cast<long long>(c.id), src.ok() ? src->name.c_str() : "?",
                c.fitness.value_or(0), c.params.dump().c_str(), origin.c_str());
  };
  for (int i = 0; i < top && i < static_cast<int>(best->size()); ++i)
    row((*best)[i], "#" + std::to_string(i + 1) + " " + (*best)[i].op_name + " gen " + std::to_string((*best)[i].generation));
  std::set<int64_t> shown;
  if (all.ok()) {
    for (const auto& c : *all) {
      if (c.op_name != "seed" || shown.count(c.source_id)) continue;
      shown.insert(c.source_id);  // the first sample of each seed is its default assignment
      bool listed = false;
      for (int i = 0; i < top && i < static_cast<int>(best->size()); ++i) listed = listed || (*best)[i].id == c.id;
      row(c, std::string("seed default (") + c.status + (listed ? ", also listed above" : "") + ")");
    }
  }
  // The fastest candidate of each tune shape (what export --per-shape re-times and picks
  // from), in the order of the best candidate's timings.
  std::vector<std::string> shapes;
  std::map<std::string, std::pair<double, const db::CandidateRecord*>> fastest;
  for (const auto& c : *best) {
    auto t = store.GetTimings(c.id);
    if (!t.ok()) continue;
    for (const auto& x : *t) {
      auto it = fastest.find(x.shape);
      if (it == fastest.end()) shapes.push_back(x.shape);
      if (it == fastest.end() || x.median_us < it->second.first) fastest[x.shape] = {x.median_us, &c};
    }
  }
  if (shapes.empty()) return;
  std::printf("\nfastest per tune shape (search medians):\n%-14s %-10s %-6s %-16s %s\n", "shape", "median_us", "id", "source",
              "params");
  for (const auto& sh : shapes) {
    const auto& [us, c] = fastest[sh];
    auto src = store.GetSource(c->source_id);
    std::printf("%-14s %-10.1f %-6lld %-16s %s\n", sh.c_str(), us, static_cast<long long>(c->id),
                src.ok() ? src->name.c_str() : "?", c->params.dump().c_str());
  }
}

int Run(CLI::App& app, RunArgs a) {
  if (a.op.empty() && a.resume == 0) {
    size_t given = 0;
    for (const CLI::Option* o : app.get_options()) given += o->count();
    if (given > 0) {  // search options without an op: a mistake, not a request for help
      PrintError("a search needs --op NAME (or --resume RUN_ID); see kevolve --help");
      return kExitUsage;
    }
    std::printf("%s", app.help().c_str());
    return kExitOk;
  }
  std::unique_ptr<db::Store> store;
  RunConfig cfg;
  if (a.resume) {
    if (!fs::exists(a.db)) { PrintError("no database at '" + a.db + "' (give the run's with --db)"); return kExitUsage; }
    auto s = db::OpenSqliteStore(a.db);
    if (!s.ok()) { PrintError(s.error()); return kExitUsage; }
    store = std::move(*s);
    auto run = store->GetRun(a.resume);
    if (!run.ok()) { PrintError(run.error()); return kExitUsage; }
    a.op = run->op;
    a.dtype = run->dtype;
    auto c = RunConfigFromJson(run->config);
    if (!c.ok()) { PrintError(c.error()); return kExitUsage; }
    cfg = *c;
  } else {
    std::string path = a.config.empty() ? (fs::path(FindProjectRoot()) / "configs" / "run.json").string() : a.config;
    auto c = LoadRunConfig(path);
    if (!c.ok()) { PrintError(c.error()); return kExitUsage; }
    cfg = *c;
  }
  auto op = LoadOp(a.op);
  if (!op.ok()) { PrintError(op.error()); return kExitUsage; }
  auto dtype = ResolveDType(*op, a.dtype);
  if (!dtype.ok()) { PrintError(dtype.error()); return kExitUsage; }
  if (a.gens >= 0) cfg.generations = a.gens;
  if (a.seed >= 0 && !a.resume) cfg.seed = static_cast<uint64_t>(a.seed);
  if (a.population > 0) cfg.population = a.population;
  if (a.islands > 0) cfg.islands = a.islands;
  if (a.target >= 0) cfg.target_fraction = a.target;
  // One run, one protocol: its medians are compared with each other.
  if (!a.timer.empty()) {
    if (a.resume && a.timer != cfg.timer) {
      PrintError("run " + std::to_string(a.resume) + " times with --timer " + cfg.timer + "; a resumed run keeps it");
      return kExitUsage;
    }
    cfg.timer = a.timer;
  }
  if (!a.flush.empty()) {
    if (a.resume && a.flush != cfg.flush) {
      PrintError("run " + std::to_string(a.resume) + " times with --flush " + cfg.flush + "; a resumed run keeps it");
      return kExitUsage;
    }
    cfg.flush = a.flush;
  }
  if (a.max_cost >= 0) cfg.max_cost_usd = a.max_cost;
  if (!a.time.empty()) {
    auto t = ParseDuration(a.time);
    if (!t.ok()) { PrintError(t.error()); return kExitUsage; }
    cfg.time_limit_s = *t;
  }
  if (Status s = ValidateRunConfig(cfg); !s.ok()) { PrintError(s.message()); return kExitUsage; }
  if (a.profile && !NcuArgsUsable()) return kExitUsage;
  // The LLM configuration is checked before any GPU work, so a broken file shows at once.
  std::string llm_path = a.llm_config.empty() ? (fs::path(FindProjectRoot()) / "configs" / "llm.json").string() : a.llm_config;
  if (!a.llm_config.empty() && !fs::exists(llm_path)) { PrintError("no LLM config at '" + llm_path + "'"); return kExitUsage; }
  auto providers = LoadProviders(llm_path);
  if (!providers.ok()) { PrintError(providers.error()); return kExitUsage; }
  // One database, one timing protocol: checked before any GPU work.
  if (!store && fs::exists(a.db)) {
    auto s = db::OpenSqliteStore(a.db);
    if (!s.ok()) { PrintError(s.error()); return kExitUsage; }
    store = std::move(*s);
  }
  if (store) {
    if (Status s = CheckTimingProtocol(*store, op->name, DTypeName(*dtype), cfg.timer, cfg.flush); !s.ok()) {
      PrintError(a.db + ": " + s.message());
      return kExitUsage;
    }
  }
  if (auto gpus = ListGpus(); !gpus.ok()) { PrintError(NoGpuMessage(gpus.error())); return kExitNoGpu; }
  if (!store) {
    auto s = db::OpenSqliteStore(a.db);
    if (!s.ok()) { PrintError(s.error()); return kExitUsage; }
    store = std::move(*s);
  }
  int rc = kExitOk;
  auto gpu = StartGpus(store.get(), false, true, &rc);
  if (!gpu) return rc;
  auto& pool = gpu->pool;
  PipelineOptions po;
  po.eval.seed = cfg.seed;
  po.eval.timing.timer = cfg.timer;
  SetL2Flush(po.eval.timing, cfg.flush);  // validated with the config
  auto compiler = std::make_shared<CachingCompiler>(std::make_shared<NvrtcCompiler>());
  auto pipe = Pipeline::Create(*op, *dtype, pool.get(), gpu->calibration, compiler, po);
  if (!pipe.ok()) { PrintError(pipe.error()); return kExitFailed; }
  PipelineEvaluator evaluator(pipe->get());
  SteadyClock clock;
  Search search(*op, *dtype, cfg, store.get(), &evaluator, &clock);

  // LLM operators: on when a provider is configured, else one line says how.
  std::unique_ptr<LlmBreeder> llm;
  std::unique_ptr<db::ContextIndex> index;
  double spent_before = 0;  // by earlier sessions of a resumed run
  if (providers->empty()) {
    std::fprintf(stderr, "kevolve: LLM operators off (no provider in %s): param_tweak and crossover only. To enable, "
                         "copy configs/llm.example.json to configs/llm.json and configure a provider.\n", llm_path.c_str());
  } else {
    size_t n = providers->size();
    // The budget covers the whole run: a resumed run has what earlier sessions left.
    double budget = cfg.max_cost_usd, spent = 0;
    if (a.resume) {
      if (auto calls = store->ListLlmCalls(a.resume); calls.ok())
        for (const auto& c : *calls) spent += c.cost_usd;
    }
    llm = std::make_unique<LlmBreeder>(*op, *dtype, std::move(*providers), budget, compiler, (*pipe)->arch(),
                                       llm::MutatorOptions{}, a.llm_in_flight);
    llm->AddSpent(spent);
    spent_before = spent;
    if (auto ix = db::ContextIndex::Open(a.db); ix.ok()) {
      index = std::move(*ix);
      std::vector<std::string> dirs = {(fs::path(FindProjectRoot()) / "context").string()};
      dirs.insert(dirs.end(), a.context_dirs.begin(), a.context_dirs.end());
      for (const auto& d : dirs)
        if (auto r = index->IndexFolder(d); !r.ok()) PrintWarning("context folder skipped: " + r.error());
    }
    search.EnableLlm(llm.get(), index.get());
    std::fprintf(stderr, "kevolve: LLM operators on: %zu provider(s) from %s%s\n", n, llm_path.c_str(),
                 budget > 0 ? (", budget $" + std::to_string(budget) + ", spent $" + std::to_string(spent)).c_str() : "");
  }

  std::signal(SIGINT, OnSigint);
  std::fprintf(stderr, "kevolve: %s %s on %zu GPU(s), %d generations of %d%s, %d islands, seed %llu, db %s%s\n",
               op->name.c_str(), DTypeName(*dtype), pool->Devices().size(), cfg.generations, cfg.population,
               OtherStops(cfg).c_str(), cfg.islands, static_cast<unsigned long long>(cfg.seed), a.db.c_str(),
               a.resume ? (", resuming run " + std::to_string(a.resume)).c_str() : "");
  auto result = search.Run(a.resume, &g_interrupt, [&](const GenerationReport& r) {
    std::printf("%s\n", FormatReport(r, cfg.generations).c_str());
    std::fflush(stdout);
    for (const auto& note : r.llm_notes) PrintWarning("an LLM request made no call: " + note);
  });
  std::signal(SIGINT, SIG_DFL);
  if (!result.ok()) { PrintError(result.error()); return kExitFailed; }
  if (auto run = store->GetRun(result->run_id); run.ok()) {
    run->cost_usd += llm ? llm->spent() - spent_before : 0.0;
    run->devices = nlohmann::json::array();
    for (const auto& d : pool->Devices()) run->devices.push_back({{"uuid", d.uuid}, {"name", d.name}, {"arch", d.arch}});
    store->UpdateRun(*run);
  }
  if (llm) std::printf("LLM spend: $%.4f this session, $%.4f for the run\n", llm->spent() - spent_before, llm->spent());
  std::printf("run %lld stopped (%s): %d generations done, %lld candidates evaluated\n",
              static_cast<long long>(result->run_id), result->stop_reason.c_str(), result->generations_done,
              static_cast<long long>(result->evaluated));
  PrintSummary(*store, result->run_id, a.top);
  if (std::string note = ShortRunNote(*result, cfg.generations, a.db); !note.empty()) std::fprintf(stderr, "\n%s\n", note.c_str());
  if (result->stop_reason == "interrupted") {
    std::printf("\nresume with: kevolve --resume %lld --db %s\n", static_cast<long long>(result->run_id), a.db.c_str());
    return kExitInterrupted;
  }
  if (a.no_export && a.per_shape) std::fprintf(stderr, "kevolve: note: --per-shape has no effect with --no-export\n");
  if (!a.no_export && result->best) {
    ExportOptions eo;
    eo.run_id = result->run_id;
    eo.top = a.top;
    eo.out_dir = (fs::path("runs") / std::to_string(result->run_id) / "best").string();
    eo.profile = a.profile;
    eo.per_shape = a.per_shape;
    auto ex = ExportRun(*store, **pipe, eo);
    if (!ex.ok()) PrintError("export: " + ex.error());
    else std::printf("\nexported %d survivor(s) to %s\n", *ex, eo.out_dir.c_str());
  }
  return result->best ? kExitOk : kExitFailed;
}

}  // namespace

Handler AddRunOptions(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("--op", a->op, "Op to search kernels for (see 'kevolve ops')");
  app.add_option("--dtype", a->dtype, "Element type variant (default: the op's first)");
  app.add_option("--gens", a->gens, "Generations to run (default: configs/run.json)")->check(CLI::Range(int64_t{0}, int64_t{1} << 62).description(""));
  app.add_option("--time", a->time, "Stop after this long: 90s, 30m, 2h, 1h30m");
  app.add_option("--target", a->target, "Stop once the best fitness (roofline fraction, 0 to 1.5) reaches this")
      ->check(CLI::Validator(
          [](std::string& v) {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            return end != v.c_str() && *end == '\0' && x >= 0 && x <= 1.5 ? std::string()
                                                                             : "'" + v + "' is no roofline fraction in [0, 1.5]";
          },
          "", "fraction"));
  app.add_option("--db", a->db, "Candidate database (default: kevolve.db)");
  app.add_option("--seed", a->seed, "Random seed of the search (default: configs/run.json)")->check(CLI::Range(int64_t{0}, int64_t{1} << 62).description(""));
  app.add_option("--population", a->population, "Children per generation, 1 or more (default: configs/run.json)")->check(CLI::Range(1, 1000000).description(""));
  app.add_option("--islands", a->islands, "Islands (default: configs/run.json)")->check(CLI::Range(1, 1000000).description(""));
  app.add_option("--timer", a->timer, "events or cupti");
  app.add_option("--flush", a->flush,
                 "L2 flush before each timed repetition: memset (default, as triton's do_bench), read (no dirty "
                 "lines left for the kernel to write back) or none");
  app.add_option("--config", a->config, "Run configuration file (default: configs/run.json)");
  app.add_option("--resume", a->resume, "Continue the run with this id (in --db)");
  app.add_option("--top", a->top, "Survivors to summarise and export (default 3)")->check(CLI::Range(1, 1000000).description(""));
  app.add_flag("--no-export", a->no_export, "Do not export the survivors to runs/<id>/best");
  app.add_flag("--per-shape", a->per_shape,
               "Also export the fastest survivor of each tune shape, with dispatch.json (shape -> folder)");
  app.add_option("--llm-config", a->llm_config, "LLM providers (default: configs/llm.json; absent = LLM operators off)");
  app.add_option("--max-cost", a->max_cost, "Stop LLM calls once the run has spent this many USD (kept across --resume)")
      ->check(CLI::Range(0.0, 1e9).description(""));
  app.add_option("--context-dir", a->context_dirs, "More folders for the LLM prompts' snippets (repeatable)");
  app.add_option("--llm-in-flight", a->llm_in_flight, "Concurrent LLM calls, 1 to 256 (default 8)")->check(CLI::Range(1, 256).description(""));
  app.add_flag("--profile", a->profile, "Add Nsight Compute reports to the export");
  return [a, &app] { return Run(app, *a); };
}

}  // namespace kevolve::cli

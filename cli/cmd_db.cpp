// Database commands: kevolve runs, kevolve show ID. They need no GPU.
#include <cstdio>
#include <filesystem>

#include "app_context.h"
#include "commands.h"
#include "kevolve/db/store.h"
#include "kevolve/evaluators/rungs.h"

namespace kevolve::cli {

namespace {

Result<std::unique_ptr<db::Store>> OpenExisting(const std::string& path) {
  if (!std::filesystem::exists(path))
    return Status::Error("no database at '" + path + "' (give one with --db)");
  // Read-write so that an older schema is migrated; WAL lets a running search go on.
  return db::OpenSqliteStore(path);
}

struct RunsArgs {
  std::string db = "kevolve.db";
};

int Runs(const RunsArgs& a) {
  auto store = OpenExisting(a.db);
  if (!store.ok()) { PrintError(store.error()); return kExitUsage; }
  auto runs = (*store)->ListRuns();
  if (!runs.ok()) { PrintError(runs.error()); return kExitFailed; }
  std::printf("%-5s %-12s %-6s %-12s %5s %-24s\n", "id", "op", "dtype", "status", "gens", "created");
  for (const auto& r : *runs)
    std::printf("%-5lld %-12s %-6s %-12s %5d %-24s\n", static_cast<long long>(r.id), r.op.c_str(), r.dtype.c_str(),
                r.status.c_str(), r.generations_done, r.created_at.c_str());
  db::CandidateQuery q;
  auto cands = (*store)->ListCandidates(q);
  if (cands.ok()) std::printf("%zu candidates in %s\n", cands->size(), a.db.c_str());
  return kExitOk;
}

struct ShowArgs {
  std::string db = "kevolve.db";
  int64_t id = 0;
  bool source = false;
};

int Show(const ShowArgs& a) {
  auto store = OpenExisting(a.db);
  if (!store.ok()) { PrintError(store.error()); return kExitUsage; }
  auto c = (*store)->GetCandidate(a.id);
  if (!c.ok()) { PrintError(c.error()); return kExitUsage; }
  auto src = (*store)->GetSource(c->source_id);
  std::printf("candidate %lld  %s %s %s  status=%s  operator=%s  generation=%d\n", static_cast<long long>(c->id),
              c->op.c_str(), c->dtype.c_str(), c->arch.c_str(), c->status.c_str(), c->op_name.c_str(), c->generation);
  std::printf("  source: %s  params: %s\n", src.ok() ? src->name.c_str() : "?", c->params.dump().c_str());
  if (c->fitness) std::printf("  fitness: %.4f\n", *c->fitness);
  if (c->run_id) std::printf("  run: %lld  island: %d\n", static_cast<long long>(*c->run_id), c->island);
  std::string parents;
  for (int64_t p : c->parents) parents += (parents.empty() ? "" : ", ") + std::to_string(p);
  std::printf("  parents: %s\n", parents.empty() ? "none" : parents.c_str());
  auto rungs = (*store)->GetRungs(a.id);
  if (rungs.ok()) {
    for (const auto& r : *rungs) {
      RungResult rr{r.name, r.ok, r.metrics.value("reason", ""), r.metrics, r.log, r.duration_ms};
      rr.metrics.erase("reason");
      std::printf("  %s\n", FormatRung(rr).c_str());
    }
  }
  auto timings = (*store)->GetTimings(a.id);
  if (timings.ok() && !timings->empty()) {
    std::printf("  %-14s %10s %10s %10s %5s %8s  %s\n", "shape", "median_us", "p10_us", "p90_us", "n", "fraction",
                "occupancy");
    for (const auto& t : *timings)
      std::printf("  %-14s %10.2f %10.2f %10.2f %5lld %8.3f  %s\n", t.shape.c_str(), t.median_us, t.p10_us, t.p90_us,
                  static_cast<long long>(t.n), t.fraction, FormatOccupancy(t.protocol).c_str());
  }
  if (a.source && src.ok()) std::printf("\n%s\n", src->text.c_str());
  return kExitOk;
}

}  // namespace

Handler AddRunsCommand(CLI::App& app) {
  auto a = std::make_shared<RunsArgs>();
  CLI::App* sub = app.add_subcommand("runs", "List the runs recorded in a database (no GPU needed).\n"
                                             "Example:\n  kevolve runs --db kevolve.db");
  sub->add_option("--db", a->db, "Database (default: kevolve.db)");
  return [a] { return Runs(*a); };
}

Handler AddShowCommand(CLI::App& app) {
  auto a = std::make_shared<ShowArgs>();
  CLI::App* sub = app.add_subcommand("show", "Show one candidate: its rungs, parameters and lineage (no GPU needed).\n"
                                             "Example:\n  kevolve show 42 --db kevolve.db --source");
  sub->add_option("id", a->id, "Candidate id")->required();
  sub->add_option("--db", a->db, "Database (default: kevolve.db)");
  sub->add_flag("--source", a->source, "Print the kernel source too");
  return [a] { return Show(*a); };
}

}  // namespace kevolve::cli

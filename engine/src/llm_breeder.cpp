#include "kevolve/engine/llm_breeder.h"

#include <filesystem>
#include <future>
#include <mutex>

#include "kevolve/core/hash.h"
#include "kevolve/evaluators/rungs.h"

namespace kevolve {

LlmBreeder::LlmBreeder(const OpSpec& op, DType dtype, std::vector<std::unique_ptr<llm::Provider>> providers,
                       double max_cost_usd, std::shared_ptr<Compiler> compiler, std::string arch,
                       llm::MutatorOptions options, int max_in_flight)
    : op_(op),
      dtype_(dtype),
      providers_(std::move(providers)),
      meter_(max_cost_usd),
      compiler_(std::move(compiler)),
      arch_(std::move(arch)),
      options_(options),
      max_in_flight_(std::max(1, max_in_flight)) {}

bool LlmBreeder::available() const {
  if (!meter_.Allow()) return false;
  for (const auto& p : providers_)
    if (!p->broken()) return true;
  return false;
}

std::string LlmBreeder::CompileLog(const std::string& name, const std::string& source) const {
  CandidateSource parsed;
  auto p0 = CandidateSource::Parse(source, name);
  Assignment params = p0.ok() ? p0->DefaultAssignment() : Assignment{};
  RungResult s = StaticRung(op_, dtype_, name, source, params, &parsed);
  if (!s.ok) return s.log;
  CompileResult c = compiler_->Compile(MakeCompileRequest(parsed, params, dtype_, arch_));
  return c.ok ? "" : c.log;
}

LlmBreeder::Prepared LlmBreeder::Prepare(const std::vector<LlmRequest>& reqs, db::Store* store,
                                         db::ContextIndex* index, std::optional<int64_t> run_id,
                                         std::mt19937_64& rng) {
  Prepared p;
  p.reqs = reqs;
  std::vector<double> weights;
  for (const auto& pr : providers_) weights.push_back(pr->broken() ? 0.0 : pr->config().weight);
  double total = 0;
  for (double w : weights) total += w;
  for (size_t i = 0; i < reqs.size(); ++i) {
    p.ctx.push_back(BuildMutationContext(op_, dtype_, reqs[i].parent, store, index, run_id));
    llm::Provider* chosen = nullptr;
    if (total > 0) chosen = providers_[std::discrete_distribution<size_t>(weights.begin(), weights.end())(rng)].get();
    p.chosen.push_back(chosen);
  }
  return p;
}

std::vector<LlmChild> LlmBreeder::Execute(const Prepared& p, Progress* progress) {
  std::vector<LlmChild> out(p.reqs.size());
  for (size_t i = 0; i < p.reqs.size(); ++i) out[i].request = p.reqs[i];
  std::mutex mu;  // guards `next`
  size_t next = 0;
  auto finished = [&](size_t i) {  // request i made all its calls: hand it to the caller's thread
    if (!progress) return;
    std::lock_guard<std::mutex> lock(progress->mu);
    progress->finished.emplace_back(i, out[i]);
  };
  auto worker = [&] {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (next >= p.reqs.size()) return;
        i = next++;
      }
      if (!p.chosen[i]) {
        out[i].outcome.error = "no LLM provider available";
        finished(i);
        continue;
      }
      llm::Mutator m(p.chosen[i], &meter_, options_);
      const LlmRequest& r = p.reqs[i];
      std::string name = "llm-" + std::to_string(i) + ".cu";
      auto check = [&](const std::string& src) { return CompileLog(name, src); };
      out[i].outcome = r.op_name == "repair" ? m.RepairCorrectness(p.ctx[i], r.repair_source, r.repair_report, check)
                                             : m.Mutate(p.ctx[i], r.op_name == "llm_diff", check);
      if (out[i].outcome.ok) out[i].name = "llm-" + Sha256Hex(out[i].outcome.child_source).substr(0, 10) + ".cu";
      finished(i);
    }
  };
  std::vector<std::future<void>> pool;
  for (int t = 0; t < max_in_flight_ && t < static_cast<int>(p.reqs.size()); ++t)
    pool.push_back(std::async(std::launch::async, worker));
  for (auto& f : pool) f.get();
  return out;
}

std::vector<LlmChild> LlmBreeder::Run(const std::vector<LlmRequest>& reqs, db::Store* store, db::ContextIndex* index,
                                      std::optional<int64_t> run_id, std::mt19937_64& rng) {
  return Execute(Prepare(reqs, store, index, run_id, rng));
}

Status LoadReplayReplies(llm::ProviderConfig* cfg) {
  if (cfg->kind != "replay" || cfg->replay_db.empty()) return Status::Ok();
  // Never create a database here: a mistyped path must be an error, not an empty file.
  if (!std::filesystem::is_regular_file(cfg->replay_db))
    return Status::Error("provider '" + cfg->name + "': replay_db '" + cfg->replay_db + "' is no database file");
  db::StoreOptions ro;
  ro.read_only = true;  // never migrate or convert someone's database
  auto store = db::OpenSqliteStore(cfg->replay_db, ro);
  if (!store.ok()) return Status::Error("provider '" + cfg->name + "': replay_db: " + store.error());
  auto calls = (*store)->ListLlmCalls(cfg->replay_run ? std::optional<int64_t>(cfg->replay_run) : std::nullopt);
  if (!calls.ok()) return Status::Error("provider '" + cfg->name + "': replay_db: " + calls.error());
  cfg->replay_replies.clear();
  // The replies that arrived: ok, or ok but unusable (parse_error); not the failed calls'
  // partial text (truncated, command_failed, ...), which would replay as successes.
  for (const auto& c : *calls)
    if (!c.response.empty() && (c.outcome == "ok" || c.outcome == "parse_error"))
      cfg->replay_replies.push_back({c.response, c.tokens_in, c.tokens_out});
  return Status::Ok();
}

Result<std::vector<std::unique_ptr<llm::Provider>>> LoadProviders(const std::string& config_path) {
  std::vector<std::unique_ptr<llm::Provider>> out;
  if (config_path.empty() || !std::filesystem::exists(config_path)) return out;
  auto cfgs = llm::LoadProviderConfigs(config_path);
  if (!cfgs.ok()) return cfgs.status();
  std::shared_ptr<llm::HttpTransport> transport = llm::MakeCurlTransport();
  for (auto c : *cfgs) {
    if (c.weight <= 0) continue;
    if (Status s = LoadReplayReplies(&c); !s.ok()) return Status::Error(config_path + ": " + s.message());
    auto p = llm::MakeProvider(c, transport);
    if (!p.ok()) return Status::Error(config_path + ": " + p.error());  // the error names the provider
    out.push_back(std::move(*p));
  }
  return out;
}

}  // namespace kevolve

// LLM children for the search loop: llm_rewrite / llm_diff mutations of chosen parents
// and one correctness-repair attempt for LLM children that failed the correctness rung.
// Calls run concurrently (at most max_in_flight at once), each with its compile repair
// loop on the CPU. Providers form a weighted ensemble; one whose circuit breaker opened
// is skipped; --max-cost stops all calls.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kevolve/core/op_spec.h"
#include "kevolve/db/context_index.h"
#include "kevolve/db/store.h"
#include "kevolve/engine/llm_context.h"
#include "kevolve/evaluators/compiler.h"
#include "kevolve/operators/llm/mutator.h"

namespace kevolve {

struct LlmRequest {
  ParentRef parent;
  std::string op_name;          // llm_rewrite | llm_diff | repair
  std::string repair_report;    // for repair: the failed correctness rung
  std::string repair_source;    // for repair: the child to fix
};

struct LlmChild {
  LlmRequest request;
  llm::MutationOutcome outcome;
  std::string name;             // a file name for the child ("llm-<hash>.cu")
};

class LlmBreeder {
 public:
  LlmBreeder(const OpSpec& op, DType dtype, std::vector<std::unique_ptr<llm::Provider>> providers,
             double max_cost_usd, std::shared_ptr<Compiler> compiler, std::string arch, llm::MutatorOptions options,
             int max_in_flight);

  // False once every provider is broken or the budget is spent.
  bool available() const;
  double spent() const { return meter_.spent(); }
  // Counts money spent before this process (a resumed run's earlier sessions).
  void AddSpent(double usd) { meter_.Add(usd); }

  // Runs every request; `store` and `index` (may be null) feed the prompts. Deterministic
  // provider choice given `rng`; the calls themselves run concurrently.
  std::vector<LlmChild> Run(const std::vector<LlmRequest>& reqs, db::Store* store, db::ContextIndex* index,
                            std::optional<int64_t> run_id, std::mt19937_64& rng);

  // Run in two halves, so the calls can go on while the GPUs evaluate: Prepare builds
  // the prompts and picks providers (caller's thread: it reads the store); Execute makes
  // the calls and touches neither the store nor the caller's state (any thread).
  struct Prepared {
    std::vector<LlmRequest> reqs;
    std::vector<llm::MutationContext> ctx;
    std::vector<llm::Provider*> chosen;
  };
  Prepared Prepare(const std::vector<LlmRequest>& reqs, db::Store* store, db::ContextIndex* index,
                   std::optional<int64_t> run_id, std::mt19937_64& rng);
  // The requests of a batch that have finished (all their calls made), by index, as they
  // finish: Execute adds each under the lock, and the caller takes them from its own
  // thread to record their calls before the whole batch is in.
  struct Progress {
    std::mutex mu;
    std::vector<std::pair<size_t, LlmChild>> finished;  // not yet taken
  };
  std::vector<LlmChild> Execute(const Prepared& prepared, Progress* progress = nullptr);

 private:
  std::string CompileLog(const std::string& name, const std::string& source) const;
  OpSpec op_;
  DType dtype_;
  std::vector<std::unique_ptr<llm::Provider>> providers_;
  mutable llm::CostMeter meter_;
  std::shared_ptr<Compiler> compiler_;
  std::string arch_;
  llm::MutatorOptions options_;
  int max_in_flight_;
};

// For a replay provider with replay_db: reads that database's recorded LLM responses
// (table llm_calls, by id; only run replay_run when it is set) into replay_replies.
// Other providers are left alone. The database is only read.
Status LoadReplayReplies(llm::ProviderConfig* cfg);

// Loads the providers of `config_path` with a weight above 0 (none when the file does not
// exist). Errors name the file and field.
Result<std::vector<std::unique_ptr<llm::Provider>>> LoadProviders(const std::string& config_path);

}  // namespace kevolve

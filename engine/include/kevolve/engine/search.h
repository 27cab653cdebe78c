// The search loop: generations of select -> operators -> dedupe -> compile + evaluate
// (through CandidateEvaluator) -> commit -> report. Single-threaded and deterministic
// for a given seed and evaluation results; parallelism lives in the evaluator. With LLM
// operators that holds for llm_wait_s = -1 and replayed replies; with the default 0, when
// an LLM batch returns also decides which generation it joins and how that generation
// is bred (a batch in flight turns the LLM slots into parameter operators).
//
// Durability: every evaluation is committed in its own transaction as it lands, and a
// generation counts as done only once all of it is committed. --resume replays the
// committed generations into the archive, re-proposes the unfinished generation (the
// same proposals, since the random stream is derived from seed and generation, as far
// as the parameter operators go) and evaluates only what is not yet recorded: nothing
// is duplicated or counted twice.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kevolve/core/op_spec.h"
#include "kevolve/db/store.h"
#include "kevolve/engine/archive.h"
#include "kevolve/engine/evaluator.h"
#include "kevolve/engine/llm_breeder.h"
#include "kevolve/engine/run_config.h"
#include "kevolve/operators/operator.h"

namespace kevolve {

// Wall time, replaceable in tests.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual double Seconds() = 0;  // monotonic
};
class SteadyClock : public Clock {
 public:
  double Seconds() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

struct GenerationReport {
  int generation = 0;
  int proposed = 0, evaluated = 0, reused = 0, duplicates = 0;
  std::map<std::string, int> failures;  // by status ("failed_correctness", "timeout", ...)
  double best_fitness = 0;
  std::vector<std::pair<std::string, double>> best_times_us;  // per tune shape, best candidate
  double candidates_per_minute = 0;
  double eta_s = -1;
  int archive_cells = 0;
  // LLM requests that ended without a call (a prompt budget that cannot hold the parent,
  // no provider left, ...): each distinct reason once per run, in the generation that met it.
  std::vector<std::string> llm_notes;
};

struct SearchResult {
  int64_t run_id = 0;
  std::string stop_reason;  // generations | time | target | interrupted | error
  int generations_done = 0;
  int64_t evaluated = 0;
  std::optional<Member> best;
};

class Search {
 public:
  Search(const OpSpec& op, DType dtype, RunConfig config, db::Store* store, CandidateEvaluator* evaluator,
         Clock* clock);
  // LLM calls still in flight (Run returned an error mid-generation) are cancelled and
  // waited for, about a second, instead of blocking on a slow model.
  ~Search();
  Search(const Search&) = delete;
  Search& operator=(const Search&) = delete;

  // Starts a new run (resume_run_id == 0) or continues one. `interrupt` is polled between
  // evaluations (Ctrl-C). `on_generation` receives each report.
  Result<SearchResult> Run(int64_t resume_run_id, const std::atomic<bool>* interrupt,
                           const std::function<void(const GenerationReport&)>& on_generation);

  const Archive& archive() const { return archive_; }

  // Turns on the llm_rewrite / llm_diff operators of the operator mix (and correctness
  // repairs of their children). `index` may be null. Without this they are skipped.
  void EnableLlm(LlmBreeder* llm, db::ContextIndex* index) {
    llm_ = llm;
    index_ = index;
  }

 private:
  struct Proposal2 {
    std::shared_ptr<const CandidateSource> source;
    Assignment params;
    std::vector<int64_t> parents;
    std::string op_name;
    int island = 0;
    std::string hash;
    bool adopt = false;  // recorded elsewhere, unevaluated: evaluate, then join this run
  };
  Status LoadSeeds();
  std::vector<Proposal2> SeedProposals(std::mt19937_64& rng);
  std::vector<Proposal2> Breed(std::mt19937_64& rng, bool last_generation);
  // Takes the LLM children asked for earlier, waiting at most `wait_s` (-1: until they
  // arrive; in 50 ms steps, recording the requests that finish meanwhile); false when they
  // are still in flight (they stay pending). Their calls are in llm_calls by then
  // (RecordFinishedLlmCalls); their children go to *out (when given) and to
  // pending_calls_, to be linked once evaluated.
  bool CollectLlmChildren(std::vector<Proposal2>* out, double wait_s);
  // Records in llm_calls the calls of the requests in flight that have finished since the
  // last look, so that a kill -9 while the rest of their batch is out keeps them and their
  // spend. Called after each committed evaluation and at each generation's start.
  void RecordFinishedLlmCalls();
  std::shared_ptr<const CandidateSource> Intern(const std::string& name, const std::string& text);
  Member ToMember(int64_t id, const std::shared_ptr<const CandidateSource>& src, const Assignment& a, double fitness,
                  int island, int generation, const nlohmann::json& features,
                  const std::map<std::string, double>& times) const;
  std::map<std::string, double> StoredTimes(int64_t id) const;  // its median per tune shape
  Status Replay(int64_t run_id, int generations_done);
  // LLM children of this generation whose recorded call waits for the child's candidate id.
  struct PendingCalls {
    std::string hash;  // the child's candidate hash
    int64_t call_id;   // the llm_calls row that produced it
  };
  // Links the pending calls whose child has this hash to its candidate (as the child is
  // committed), then, at the end of a generation, the rest to the candidates already
  // stored under their hash (children that duplicate an earlier candidate).
  void LinkLlmCalls(const std::string& hash, int64_t candidate_id);
  void LinkLlmCalls();

  OpSpec op_;
  DType dtype_;
  RunConfig cfg_;
  db::Store* store_;
  CandidateEvaluator* eval_;
  Clock* clock_;
  Archive archive_;
  std::vector<std::shared_ptr<const CandidateSource>> seeds_;
  std::map<std::string, std::shared_ptr<const CandidateSource>> sources_;  // by text
  std::map<std::string, int> source_evaluations_;                          // by text
  Env constants_;
  LlmBreeder* llm_ = nullptr;
  db::ContextIndex* index_ = nullptr;
  std::optional<int64_t> run_id_;
  std::vector<PendingCalls> pending_calls_;
  std::set<std::string> llm_noted_;        // reasons already reported
  std::vector<std::string> llm_notes_;     // for the next generation's report
  std::vector<LlmRequest> pending_repairs_;  // LLM children that failed correctness
  std::map<int64_t, int> member_gen_;        // candidate id -> generation it joined this run
  std::future<std::vector<LlmChild>> llm_future_;  // LLM calls in flight during an evaluation
  std::vector<int> llm_future_islands_;
  std::shared_ptr<LlmBreeder::Progress> llm_progress_;  // that batch's finished requests, not yet recorded
  std::map<size_t, std::optional<int64_t>> llm_recorded_;  // its requests recorded early -> the producing call
};

// One line per generation: "gen 3/50  eval 32 (+0 reused)  fail compile=1 correctness=2
// best 0.812  4096x1024 12.1us ...  41 cand/min  eta 12m".
std::string FormatReport(const GenerationReport& r, int total_generations);
// The time left to a run, from this process's pace: `elapsed_s` over the `done_here`
// generations it has run (a resumed run's earlier ones do not count), times the
// generations left, and with `time_limit_s` (0: none) no more generations than it takes
// to pass the limit (the run stops after the first generation that ends past it).
double EtaSeconds(double elapsed_s, int done_here, int gens_left, double time_limit_s);
// A note for a run that the time limit stopped before any generation was bred (only
// generation 0, the seeds' samples, ran, and more were asked for): no evolution happened,
// and how to continue it. Empty otherwise.
std::string ShortRunNote(const SearchResult& r, int total_generations, const std::string& db_path);
// A database keeps the medians of one timing protocol per op and dtype: a search adopts,
// ranks and exports the candidates of every run in it by their stored medians, so they must
// all have been measured alike. An error (naming what the database holds) when `store` has
// timings of the op's candidates in `dtype` taken with another timer or L2 flush than
// `timer` and `flush`; `kevolve eval --db` and the search check it before any GPU work, and
// Search::Run again.
Status CheckTimingProtocol(db::Store& store, const std::string& op, const std::string& dtype, const std::string& timer,
                           const std::string& flush);

}  // namespace kevolve

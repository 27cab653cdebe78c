#include "kevolve/engine/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <set>

#include "kevolve/core/json_file.h"
#include "kevolve/operators/llm/provider.h"
#include "kevolve/operators/param_ops.h"

namespace kevolve {

namespace {

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9e3779b97f4a7c15ull + b + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Both operators in this issue; LLM operators join this table later.
std::unique_ptr<Operator> MakeOperator(const std::string& name) {
  if (name == "param_tweak") return std::make_unique<ParamTweak>();
  if (name == "crossover") return std::make_unique<Crossover>();
  return nullptr;
}

Assignment FromJson(const nlohmann::json& j) {
  Assignment a;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it->is_number_integer()) a[it.key()] = it->get<int64_t>();
  return a;
}

}  // namespace

Search::Search(const OpSpec& op, DType dtype, RunConfig config, db::Store* store, CandidateEvaluator* evaluator,
               Clock* clock)
    : op_(op),
      dtype_(dtype),
      cfg_(std::move(config)),
      store_(store),
      eval_(evaluator),
      clock_(clock),
      archive_(cfg_.islands, cfg_.elite_per_island) {
  constants_ = {{"sizeof_T", DTypeSize(dtype)}};
}

Search::~Search() {
  if (!llm_future_.valid()) return;
  llm::CancelLlmCalls(true);
  llm_future_.wait();
  llm::CancelLlmCalls(false);  // this search's calls are done; lift it for the process
}

std::shared_ptr<const CandidateSource> Search::Intern(const std::string& name, const std::string& text) {
  auto it = sources_.find(text);
  if (it != sources_.end()) return it->second;
  auto parsed = CandidateSource::Parse(text, name);
  if (!parsed.ok()) return nullptr;
  auto p = std::make_shared<const CandidateSource>(std::move(*parsed));
  sources_[text] = p;
  return p;
}

Status Search::LoadSeeds() {
  for (const auto& path : op_.seeds) {
    auto text = ReadTextFile(path);
    if (!text.ok()) return text.status();
    std::string name = path.substr(path.find_last_of('/') + 1);
    auto src = Intern(name, *text);
    if (!src) return Status::Error("seed " + path + " does not parse: " + CandidateSource::Parse(*text, name).error());
    seeds_.push_back(src);
  }
  return Status::Ok();
}

Member Search::ToMember(int64_t id, const std::shared_ptr<const CandidateSource>& src, const Assignment& a,
                        double fitness, int island, int generation, const nlohmann::json& f,
                        const std::map<std::string, double>& times) const {
  Member m;
  m.times = times;
  m.id = id;
  m.source = src;
  m.params = a;
  m.fitness = fitness;
  m.island = island;
  m.generation = generation;
  m.cell = CellKey(src->name, f.value("threads", int64_t{0}), f.value("regs", 0), f.value("smem_static", int64_t{0}), a);
  return m;
}

std::map<std::string, double> Search::StoredTimes(int64_t id) const {
  std::map<std::string, double> times;
  if (auto t = store_->GetTimings(id); t.ok())
    for (const auto& x : *t) times[x.shape] = x.median_us;
  return times;
}

Status Search::Replay(int64_t run_id, int generations_done) {
  db::CandidateQuery q;
  q.run_id = run_id;
  auto own = store_->ListCandidates(q);
  if (!own.ok()) return own.status();
  // This run's members in the order they joined: its own candidates, and those it
  // adopted from elsewhere (run_members), each at the generation it joined.
  std::vector<db::CandidateRecord> cands = *own;
  for (auto& c : cands) member_gen_[c.id] = c.generation;
  auto adopted = store_->ListRunMembers(run_id);
  if (!adopted.ok()) return adopted.status();
  for (const auto& m : *adopted) {
    auto c = store_->GetCandidate(m.candidate_id);
    if (!c.ok()) return c.status();
    c->generation = m.generation;
    c->island = m.island;
    member_gen_[c->id] = m.generation;
    cands.push_back(std::move(*c));
  }
  std::stable_sort(cands.begin(), cands.end(),
                   [](const db::CandidateRecord& a, const db::CandidateRecord& b) { return a.id < b.id; });
  for (int g = 0; g < generations_done; ++g) {
    for (const auto& c : cands) {
      if (c.generation != g) continue;
      auto src = store_->GetSource(c.source_id);
      if (!src.ok()) return src.status();
      auto s = Intern(src->name, src->text);
      if (!s) continue;
      ++source_evaluations_[s->text];
      if (c.status == "ok" && c.fitness)
        archive_.Add(ToMember(c.id, s, FromJson(c.params), *c.fitness, c.island, g, c.features, StoredTimes(c.id)));
    }
    if ((g + 1) % cfg_.migration_interval == 0) archive_.Migrate(cfg_.migrants);
  }
  return Status::Ok();
}

std::vector<Search::Proposal2> Search::SeedProposals(std::mt19937_64& rng) {
  std::vector<Proposal2> out;
  int next_island = 0;
  for (const auto& s : seeds_) {
    std::set<Assignment> seen;
    Assignment first = s->DefaultAssignment();
    if (ValidateAssignment(*s, first, constants_).ok()) seen.insert(first);
    // The seed's presets (valid for this dtype), on top of its seed_samples.
    std::vector<Assignment> presets;
    for (const auto& p : s->presets)
      if (!seen.count(p) && ValidateAssignment(*s, p, constants_).ok()) {
        seen.insert(p);
        presets.push_back(p);
      }
    const int want = cfg_.seed_samples + static_cast<int>(presets.size());
    for (int tries = 0; static_cast<int>(seen.size()) < want && tries < 50 * cfg_.seed_samples; ++tries) {
      auto a = SampleAssignment(*s, rng, constants_);
      if (!a.ok()) break;
      seen.insert(*a);
    }
    // The default first, then the presets in file order, then the samples in a stable order.
    std::vector<Assignment> list;
    if (seen.count(first)) list.push_back(first);
    for (const auto& p : presets) list.push_back(p);
    for (const auto& a : seen)
      if (a != first && std::find(presets.begin(), presets.end(), a) == presets.end()) list.push_back(a);
    for (const auto& a : list) out.push_back({s, a, {}, "seed", next_island++ % cfg_.islands, ""});
  }
  return out;
}

std::vector<Search::Proposal2> Search::Breed(std::mt19937_64& rng, bool last_generation) {
  std::vector<Proposal2> out;
  // The children asked for during an earlier generation. Still in flight after the wait:
  // this generation goes ahead without them and asks for no new ones.
  bool llm_idle = CollectLlmChildren(&out, cfg_.llm_wait_s);
  std::vector<std::pair<std::string, double>> mix(cfg_.operator_mix.begin(), cfg_.operator_mix.end());
  bool param_ops = false;
  for (const auto& [name, w] : mix) param_ops = param_ops || (w > 0 && MakeOperator(name));
  if (!llm_idle && !param_ops) llm_idle = CollectLlmChildren(&out, -1);  // nothing else to do meanwhile
  bool llm_on = llm_ && llm_idle && llm_->available();
  auto is_llm = [](const std::string& n) { return n == "llm_rewrite" || n == "llm_diff"; };
  std::vector<double> weights;
  for (const auto& [name, w] : mix) weights.push_back(MakeOperator(name) || (llm_on && is_llm(name)) ? w : 0.0);
  double total = 0;
  for (double w : weights) total += w;
  if (total <= 0) return out;
  std::discrete_distribution<size_t> pick_op(weights.begin(), weights.end());
  ParamTweak tweak;

  auto view = [&](const Member& m) {
    ParentView v;
    v.id = m.id;
    v.source = m.source.get();
    v.params = m.params;
    v.fitness = m.fitness;
    v.constants = constants_;
    return v;
  };
  auto add = [&](const Proposal& p, int island) {
    auto src = Intern(p.source_name, p.source_text);
    if (src) out.push_back({src, p.params, p.parents, p.op_name, island, ""});
  };

  // Hybrid: a source with few evaluations gets parameter neighbours of its best first.
  for (const auto& [key, m] : archive_.cells()) {
    (void)key;
    int have = source_evaluations_[m.source->text];
    int want = 1 + cfg_.local_search;
    for (int k = have; k < want && static_cast<int>(out.size()) < cfg_.population; ++k) {
      auto p = tweak.Apply({view(m)}, rng);
      if (p.ok()) {
        p->op_name = "local_search";
        add(*p, m.island);
      }
    }
  }
  std::vector<LlmRequest> llm_reqs;
  std::vector<int> llm_islands;
  if (llm_on) {  // one correctness-repair attempt per failed LLM child (a few per generation)
    for (size_t k = 0; k < pending_repairs_.size() && k < 2; ++k) {
      llm_reqs.push_back(pending_repairs_[k]);
      llm_islands.push_back(static_cast<int>(k) % cfg_.islands);
    }
  }
  // While a batch is still in flight the failed children wait for a later generation
  // (the newest few); otherwise the ones not taken above are dropped.
  if (llm_idle) {
    pending_repairs_.clear();
  } else if (pending_repairs_.size() > 4) {
    pending_repairs_.erase(pending_repairs_.begin(), pending_repairs_.end() - 4);
  }
  for (int c = static_cast<int>(out.size() + llm_reqs.size()); c < cfg_.population; ++c) {
    int island = c % cfg_.islands;
    // A shape's champion (shape_parents), else a size-3 tournament among the island's
    // elites (80% of the rest), else a random MAP-Elites cell.
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    const Member* parent = u < cfg_.shape_parents                                   ? archive_.ShapeChampion(rng)
                           : u < cfg_.shape_parents + 0.8 * (1 - cfg_.shape_parents) ? archive_.Tournament(island, 3, rng)
                                                                                     : archive_.RandomCell(rng);
    if (!parent) parent = archive_.Tournament(island, 3, rng);  // no shape timed yet
    if (!parent) parent = archive_.RandomCell(rng);
    if (!parent) break;
    std::string name = mix[pick_op(rng)].first;
    if (is_llm(name)) {
      // Presets matter only to a seed's generation 0, and a child that changes the
      // parameters would have to keep them valid: the model sees the parent without them.
      ParentRef ref{parent->source->name, WithoutPresets(parent->source->text), parent->params, parent->id};
      llm_reqs.push_back({ref, name, "", ""});
      llm_islands.push_back(parent->island);
      continue;
    }
    std::unique_ptr<Operator> op = MakeOperator(name);
    Result<Proposal> p = Status::Error("none");
    if (op->arity() == 2) {
      const Member* partner = archive_.Partner(*parent, rng);
      if (partner) p = op->Apply({view(*parent), view(*partner)}, rng);
    } else {
      p = op->Apply({view(*parent)}, rng);
    }
    if (!p.ok()) p = tweak.Apply({view(*parent)}, rng);  // e.g. no crossover partner yet
    if (p.ok()) add(*p, parent->island);
  }
  // The LLM calls go on while this generation is compiled and evaluated; their children
  // join the next generation (see CollectLlmChildren). None are asked for in the last.
  if (!llm_reqs.empty() && (!last_generation || out.empty())) {
    auto prepared = std::make_shared<LlmBreeder::Prepared>(llm_->Prepare(llm_reqs, store_, index_, run_id_, rng));
    LlmBreeder* llm = llm_;
    auto progress = std::make_shared<LlmBreeder::Progress>();
    llm_future_ = std::async(std::launch::async,
                             [llm, prepared, progress] { return llm->Execute(*prepared, progress.get()); });
    llm_future_islands_ = llm_islands;
    llm_progress_ = progress;
    llm_recorded_.clear();
  }
  // Nothing else to evaluate (a mix of LLM operators only): this generation waits for
  // its own batch rather than ending the run for want of proposals.
  if (out.empty() && llm_future_.valid()) CollectLlmChildren(&out, -1);
  return out;
}

bool Search::CollectLlmChildren(std::vector<Proposal2>* out, double wait_s) {
  if (!llm_future_.valid()) return true;
  // Wait in short steps, recording the requests that finish meanwhile.
  const auto step = std::chrono::milliseconds(50);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(wait_s, 0.0));
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const auto wait = wait_s < 0 ? step : std::clamp(left, std::chrono::milliseconds(0), step);
    if (llm_future_.wait_for(wait) == std::future_status::ready) break;
    RecordFinishedLlmCalls();
    if (wait_s >= 0 && std::chrono::steady_clock::now() >= deadline) return false;
  }
  std::vector<LlmChild> kids = llm_future_.get();
  RecordFinishedLlmCalls();  // the ones that finished since the last look
  for (size_t k = 0; k < kids.size(); ++k) {
    auto early = llm_recorded_.find(k);
    std::optional<int64_t> producer =
        early != llm_recorded_.end()
            ? early->second
            : RecordCalls(*store_, kids[k].outcome, run_id_, kids[k].request.parent.id, std::nullopt);
    const llm::MutationOutcome& o = kids[k].outcome;
    if (!o.ok && o.calls.empty() && !o.error.empty() && llm_noted_.insert(o.error).second) llm_notes_.push_back(o.error);
    if (kids[k].outcome.ok && out) {
      auto src = Intern(kids[k].name, kids[k].outcome.child_source);
      if (src) {
        Assignment a = src->DefaultAssignment();
        std::vector<int64_t> parents;
        if (kids[k].request.parent.id) parents.push_back(*kids[k].request.parent.id);
        out->push_back({src, a, parents, kids[k].request.op_name, llm_future_islands_[k], "", false});
        if (producer) pending_calls_.push_back({eval_->Hash(*src, a), *producer});
      }
    }
  }
  llm_progress_.reset();
  llm_recorded_.clear();
  return true;
}

void Search::RecordFinishedLlmCalls() {
  if (!llm_progress_) return;
  std::vector<std::pair<size_t, LlmChild>> done;
  {
    std::lock_guard<std::mutex> lock(llm_progress_->mu);
    done.swap(llm_progress_->finished);
  }
  for (const auto& [k, kid] : done)
    llm_recorded_[k] = RecordCalls(*store_, kid.outcome, run_id_, kid.request.parent.id, std::nullopt);
}

void Search::LinkLlmCalls(const std::string& hash, int64_t candidate_id) {
  for (auto it = pending_calls_.begin(); it != pending_calls_.end();) {
    if (it->hash != hash) {
      ++it;
      continue;
    }
    store_->LinkLlmCall(it->call_id, candidate_id);  // a failed link leaves candidate_id NULL, nothing else
    it = pending_calls_.erase(it);
  }
}

void Search::LinkLlmCalls() {
  for (const auto& pc : pending_calls_)
    if (auto c = store_->FindCandidate(pc.hash); c.ok() && *c) store_->LinkLlmCall(pc.call_id, (*c)->id);
  pending_calls_.clear();
}

Result<SearchResult> Search::Run(int64_t resume_run_id, const std::atomic<bool>* interrupt,
                                 const std::function<void(const GenerationReport&)>& on_generation) {
  if (Status s = ValidateRunConfig(cfg_); !s.ok()) return s;
  if (Status s = LoadSeeds(); !s.ok()) return s;
  if (Status s = CheckTimingProtocol(*store_, op_.name, DTypeName(dtype_), cfg_.timer, cfg_.flush); !s.ok()) return s;
  llm::CancelLlmCalls(false);  // an earlier interrupted search in this process cancelled them
  db::RunRecord run;
  if (resume_run_id) {
    auto r = store_->GetRun(resume_run_id);
    if (!r.ok()) return r.status();
    run = *r;
    if (run.op != op_.name || run.dtype != DTypeName(dtype_))
      return Status::Error("run " + std::to_string(run.id) + " is " + run.op + "/" + run.dtype);
    if (Status s = Replay(run.id, run.generations_done); !s.ok()) return s;
  } else {
    run.op = op_.name;
    run.dtype = DTypeName(dtype_);
    run.seed = cfg_.seed;
    run.config = cfg_.ToJson();
    run.config["arch"] = eval_->arch();
    auto id = store_->CreateRun(run);
    if (!id.ok()) return id.status();
    run.id = *id;
  }
  run.status = "running";
  if (Status s = store_->UpdateRun(run); !s.ok()) return s;
  run_id_ = run.id;

  SearchResult result;
  result.run_id = run.id;
  result.stop_reason = "generations";
  double t0 = clock_->Seconds();
  int64_t evaluated_total = 0;
  const int first_gen = run.generations_done;
  for (int g = first_gen; g < cfg_.generations; ++g) {
    double tg = clock_->Seconds();
    RecordFinishedLlmCalls();
    std::mt19937_64 rng(Mix(cfg_.seed, static_cast<uint64_t>(g)));
    std::vector<Proposal2> props = g == 0 ? SeedProposals(rng) : Breed(rng, g + 1 == cfg_.generations);
    if (props.empty()) {
      result.stop_reason = archive_.empty() ? "no_parents" : "no_proposals";
      break;
    }
    GenerationReport rep;
    rep.generation = g;
    rep.proposed = static_cast<int>(props.size());
    // Dedupe: within the generation, against this run's earlier generations, and
    // against other runs. A candidate recorded by an interrupted attempt at this same
    // generation is reused as it stands.
    std::set<std::string> seen;
    std::vector<Proposal2> todo;
    for (auto& p : props) {
      p.hash = eval_->Hash(*p.source, p.params);
      if (!seen.insert(p.hash).second) {
        ++rep.duplicates;
        continue;
      }
      auto existing = store_->FindCandidate(p.hash);
      if (!existing.ok()) return existing.status();
      if (*existing) {
        const db::CandidateRecord& c = **existing;
        bool evaluated = c.status != "pending" && c.status != "compiled";
        auto member = member_gen_.find(c.id);
        bool own = c.run_id && *c.run_id == run.id;
        if ((member != member_gen_.end() && member->second < g) || (own && c.generation < g)) {
          ++rep.duplicates;  // already in this run
          continue;
        }
        if (evaluated) {
          // Recorded by an interrupted attempt at this generation, or elsewhere (another
          // run, `kevolve eval --db`): its result is reused, not measured again.
          if (!own) {
            if (Status st = store_->AddRunMember({run.id, c.id, g, p.island, p.op_name}); !st.ok()) return st;
          }
          member_gen_[c.id] = g;
          ++rep.reused;
          ++source_evaluations_[p.source->text];
          if (c.status == "ok" && c.fitness)
            archive_.Add(ToMember(c.id, p.source, p.params, *c.fitness, own ? c.island : p.island, g, c.features,
                                  StoredTimes(c.id)));
          continue;
        }
        p.adopt = !own;  // stored but never evaluated (`kevolve compile --db`): evaluate it now
      }
      todo.push_back(p);
    }
    std::vector<CandidateInput> inputs;
    for (const auto& p : todo) inputs.push_back({p.source->name, p.source->text, p.params});
    // Each evaluation is committed in its own transaction as soon as it lands.
    std::vector<std::optional<int64_t>> ids(todo.size());
    Status record_error = Status::Ok();
    auto record = [&](size_t i, Ladder& l) {
      if (l.rungs.empty() || !record_error.ok()) return;
      l.hash = todo[i].hash;
      RecordContext ctx{op_.name, DTypeName(dtype_), eval_->arch(), g == 0 ? "seed" : "evolved", todo[i].op_name,
                        run.id, g, todo[i].island, todo[i].parents};
      if (Status s = store_->Begin(); !s.ok()) {
        record_error = s;
        return;
      }
      auto id = RecordLadder(*store_, l, ctx);
      if (!id.ok()) {
        store_->Rollback();
        record_error = id.status();
        return;
      }
      if (todo[i].adopt) {
        if (Status s = store_->AddRunMember({run.id, *id, g, todo[i].island, todo[i].op_name}); !s.ok()) {
          store_->Rollback();
          record_error = s;
          return;
        }
      }
      LinkLlmCalls(todo[i].hash, *id);  // an LLM child: its call's link commits with it
      if (Status s = store_->Commit(); !s.ok()) {
        record_error = s;
        return;
      }
      ids[i] = *id;
      member_gen_[*id] = g;
      RecordFinishedLlmCalls();  // LLM calls that returned meanwhile, each in its own commit
    };
    std::vector<Ladder> ladders =
        inputs.empty() ? std::vector<Ladder>{} : eval_->Evaluate(inputs, interrupt, record);
    if (!record_error.ok()) {
      // What was recorded stays; the run can go on with --resume once the cause is fixed.
      run.status = "interrupted";
      store_->UpdateRun(run);
      return Status::Error("generation " + std::to_string(g) + ": an evaluation could not be recorded, so the run "
                           "stopped (resumable): " + record_error.message());
    }
    // Then the search's own state, in proposal order (deterministic).
    for (size_t i = 0; i < ladders.size(); ++i) {
      Ladder& l = ladders[i];
      if (!ids[i]) continue;  // cancelled before it started
      const std::optional<int64_t>& id = ids[i];
      ++rep.evaluated;
      ++evaluated_total;
      ++source_evaluations_[todo[i].source->text];
      std::string st = l.status();
      bool llm_child = todo[i].op_name == "llm_rewrite" || todo[i].op_name == "llm_diff";
      if (llm_child && st == "failed_correctness") {
        const RungResult* corr = l.Find("correctness");
        LlmRequest rr;
        rr.parent = {todo[i].source->name, todo[i].source->text, todo[i].params, *id};
        rr.op_name = "repair";
        rr.repair_source = todo[i].source->text;
        rr.repair_report = corr ? corr->log + "\n" + corr->metrics.dump() : st;
        pending_repairs_.push_back(std::move(rr));
      }
      if (st == "ok" && l.fitness) {
        std::map<std::string, double> times;
        for (const auto& t : l.timings) times[t.shape] = t.median_us;
        archive_.Add(ToMember(*id, todo[i].source, todo[i].params, l.fitness->fitness, todo[i].island, g, l.Features(),
                              times));
      } else {
        ++rep.failures[st];
      }
    }
    if (!pending_calls_.empty()) LinkLlmCalls();
    if (interrupt && interrupt->load()) {
      result.stop_reason = "interrupted";
      break;
    }
    if ((g + 1) % cfg_.migration_interval == 0) archive_.Migrate(cfg_.migrants);
    run.generations_done = g + 1;
    if (Status s = store_->UpdateRun(run); !s.ok()) return s;

    const Member* best = archive_.Best();
    rep.best_fitness = best ? best->fitness : 0;
    rep.archive_cells = static_cast<int>(archive_.size());
    if (best) {
      auto timings = store_->GetTimings(best->id);
      if (timings.ok())
        for (const auto& t : *timings) rep.best_times_us.push_back({t.shape, t.median_us});
    }
    double now = clock_->Seconds();
    double gen_s = std::max(now - tg, 1e-9);
    rep.candidates_per_minute = rep.evaluated / gen_s * 60.0;
    rep.eta_s = EtaSeconds(now - t0, g + 1 - first_gen, cfg_.generations - g - 1, cfg_.time_limit_s);
    rep.llm_notes = std::move(llm_notes_);
    llm_notes_.clear();
    if (on_generation) on_generation(rep);

    if (cfg_.time_limit_s > 0 && now - t0 >= cfg_.time_limit_s) {
      result.stop_reason = "time";
      break;
    }
    if (cfg_.target_fraction > 0 && best && best->fitness >= cfg_.target_fraction) {
      result.stop_reason = "target";
      break;
    }
  }
  // Calls still in flight are waited for and recorded (their children are not evaluated).
  // After Ctrl-C they are cancelled first, so that waiting takes about a second, not a
  // slow model's answer or a rate limit's backoff; they are recorded as "cancelled".
  if (llm_future_.valid()) {
    if (result.stop_reason == "interrupted") llm::CancelLlmCalls(true);
    CollectLlmChildren(nullptr, -1);  // records the calls; their children are not evaluated
  }
  run.status = result.stop_reason == "interrupted" ? "interrupted" : "finished";
  store_->UpdateRun(run);
  result.generations_done = run.generations_done;
  result.evaluated = evaluated_total;
  if (const Member* best = archive_.Best()) result.best = *best;
  return result;
}

std::string ShortRunNote(const SearchResult& r, int total_generations, const std::string& db_path) {
  if (r.stop_reason != "time" || r.generations_done != 1 || total_generations <= 1) return "";
  return "kevolve: note: the time limit ended run " + std::to_string(r.run_id) +
         " after generation 0, the seeds' samples, so nothing was bred; give it more time, or continue it with: "
         "kevolve --resume " + std::to_string(r.run_id) + " --db " + db_path + " --time 5m";
}

double EtaSeconds(double elapsed_s, int done_here, int gens_left, double time_limit_s) {
  const double per_gen = elapsed_s / std::max(1, done_here);
  double gens = std::max(0, gens_left);
  // The limit is checked after each generation: the run ends with the first one that
  // finishes past it.
  if (time_limit_s > 0 && per_gen > 0) gens = std::min(gens, std::ceil(std::max(0.0, time_limit_s - elapsed_s) / per_gen));
  return per_gen * gens;
}

std::string FormatReport(const GenerationReport& r, int total) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "gen %d/%d  eval %d", r.generation + 1, total, r.evaluated);
  std::string s = buf;
  if (r.reused) s += " (+" + std::to_string(r.reused) + " reused)";
  if (r.duplicates) s += " dup " + std::to_string(r.duplicates);
  if (!r.failures.empty()) {
    s += "  fail";
    for (const auto& [k, v] : r.failures) {
      std::string name = k.rfind("failed_", 0) == 0 ? k.substr(7) : k;
      s += " " + name + "=" + std::to_string(v);
    }
  }
  std::snprintf(buf, sizeof(buf), "  best %.3f  cells %d", r.best_fitness, r.archive_cells);
  s += buf;
  for (const auto& [shape, us] : r.best_times_us) {
    std::snprintf(buf, sizeof(buf), "  %s %.1fus", shape.c_str(), us);
    s += buf;
  }
  std::snprintf(buf, sizeof(buf), "  %.0f cand/min", r.candidates_per_minute);
  s += buf;
  if (r.eta_s >= 0) s += "  eta " + FormatDuration(r.eta_s);
  return s;
}

Status CheckTimingProtocol(db::Store& store, const std::string& op, const std::string& dtype, const std::string& timer,
                           const std::string& flush) {
  auto found = store.TimingProtocols(op, dtype);
  if (!found.ok()) return found.status();
  std::string held;
  bool other = false;
  for (const auto& [t, f] : *found) {
    other |= t != timer || f != flush;
    held += std::string(held.empty() ? "" : "; ") + "--timer " + t + " --flush " + f;
  }
  if (!other) return Status::Ok();
  const std::string what = "the database holds " + op + " " + dtype + " timings measured with ";
  if (found->size() > 1)  // written by a kevolve that did not check: no protocol can join them
    return Status::Error(what + held + " (" + std::to_string(found->size()) +
                         " ways), and its medians are compared across runs: give this one another --db");
  return Status::Error(what + held + ", and its medians are compared across runs: time with the same, or give this "
                       "one another --db (asked: --timer " + timer + " --flush " + flush + ")");
}

}  // namespace kevolve

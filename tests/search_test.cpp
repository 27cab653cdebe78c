// The search loop with a deterministic in-process evaluator: a known fitness landscape
// over the parameters of a synthetic candidate.
#include <catch2/catch.hpp>

#include <chrono>
#include <mutex>
#include <random>
#include <set>
#include <cmath>
#include <thread>

#include <sqlite3.h>

#include "kevolve/core/hash.h"
#include "kevolve/engine/archive.h"
#include "kevolve/engine/search.h"
#include "kevolve/evaluators/nvrtc_compiler.h"
#include "test_util.h"

using namespace kevolve;

namespace {

const char* kLandscape = R"(// @kevolve param A 1 2 3 4 5 6 7 8
// @kevolve param B 1 2 3 4 5 6 7 8
// @kevolve param C 0 1 2 3
// @kevolve launch k grid=rows block=32
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {}
)";

// Fitness peaks at A=6, B=3, C=2 (1.0); C=0 fails correctness. With `timed`, a passing
// candidate also has medians at two tune shapes: "fit" (1/fitness: fastest where the
// fitness peaks) and "odd" (fastest at A=1, B=8: a shape the best kernel is poor at).
class LandscapeEvaluator : public CandidateEvaluator {
 public:
  bool timed = false;
  std::string flush = "memset";  // recorded in the timings' protocol, as the GPU evaluator does
  std::vector<Ladder> Evaluate(const std::vector<CandidateInput>& in, const std::atomic<bool>* cancel,
                               const std::function<void(size_t, Ladder&)>& on_done) override {
    std::vector<Ladder> out;
    for (const auto& c : in) {
      Ladder l;
      l.input = c;
      if (cancel && cancel->load()) {
        out.push_back(l);
        continue;
      }
      ++calls;
      auto parsed = CandidateSource::Parse(c.text, c.name);
      l.parsed = *parsed;
      int64_t a = c.params.at("A"), b = c.params.at("B"), cc = c.params.at("C");
      l.rungs.push_back({"static", true, "", nlohmann::json::object(), "", 0});
      l.rungs.push_back({"compile", true, "", nlohmann::json::object(), "", 0});
      bool correct = cc != 0;
      l.rungs.push_back({"correctness", correct, correct ? "" : "mismatch", nlohmann::json::object(), "", 0});
      if (correct) {
        double f = std::exp(-0.1 * ((a - 6) * (a - 6) + (b - 3) * (b - 3) + (cc - 2) * (cc - 2)));
        FitnessResult fr;
        fr.fitness = f;
        l.fitness = fr;
        l.rungs.push_back({"fitness", true, "", {{"fitness", f}}, "", 0});
        if (timed) {
          ShapeTiming fit, odd;
          fit.shape = "fit";
          fit.median_us = 100.0 / f;
          odd.shape = "odd";
          odd.median_us = 100.0 + 10.0 * static_cast<double>((a - 1) * (a - 1) + (b - 8) * (b - 8));
          fit.protocol = odd.protocol = {{"timer", "events"}, {"flush_l2", flush != "none"}, {"flush", flush}};
          l.timings = {fit, odd};
        }
      }
      out.push_back(l);
    }
    for (size_t i = 0; i < out.size(); ++i)
      if (on_done && !out[i].rungs.empty()) on_done(i, out[i]);
    return out;
  }
  std::string Hash(const CandidateSource& p, const Assignment& a) const override {
    return Sha256Hex(p.text + AssignmentString(a));
  }
  std::string arch() const override { return "sm_90"; }
  int calls = 0;
};

class FakeClock : public Clock {
 public:
  double Seconds() override { return t += 1.0; }
  double t = 0;
};

struct World {
  std::filesystem::path dir = testing::MakeTempDir("search");
  OpSpec op;
  std::unique_ptr<db::Store> store;
  World() {
    testing::WriteFile(dir / "land.cu", kLandscape);
    op.name = "landscape";
    op.sizes = {"rows", "cols"};
    op.dtypes = {DType::kF32};
    op.seeds = {(dir / "land.cu").string()};
    auto s = db::OpenSqliteStore((dir / "k.db").string());
    REQUIRE(s.ok());
    store = std::move(*s);
  }
};

// An LLM breeder whose replay provider answers every call with the same edit of the
// landscape source (param C reordered).
LlmBreeder ReplayBreeder(const World& w) {
  testing::WriteFile(w.dir / "replies" / "r0.txt",
                     "<<<<<<< SEARCH\n// @kevolve param C 0 1 2 3\n=======\n// @kevolve param C 2 3 1 0\n>>>>>>> REPLACE\n");
  testing::WriteFile(w.dir / "llm.json", "{\"providers\": {\"rec\": {\"kind\": \"replay\", \"replay_dir\": \"" +
                                             (w.dir / "replies").string() + "\"}}}");
  auto providers = LoadProviders((w.dir / "llm.json").string());
  REQUIRE(providers.ok());
  REQUIRE(providers->size() == 1);
  return LlmBreeder(w.op, DType::kF32, std::move(*providers), 0, std::make_shared<NvrtcCompiler>(), "sm_90", {}, 2);
}

RunConfig Config(int gens, uint64_t seed) {
  RunConfig c;
  c.generations = gens;
  c.seed = seed;
  c.population = 12;
  c.islands = 3;
  c.migration_interval = 2;
  c.elite_per_island = 4;
  c.seed_samples = 6;
  c.local_search = 0;
  return c;
}

// Config(3, 8) with half of the slots asking for llm_diff children, and each generation
// waiting for its replies (deterministic given them).
RunConfig LlmDiffConfig() {
  RunConfig c = Config(3, 8);
  c.operator_mix = {{"param_tweak", 0.5}, {"llm_diff", 0.5}};
  c.llm_wait_s = -1;
  return c;
}

// Every candidate of a run (fails the test when the store cannot list them).
std::vector<db::CandidateRecord> RunCandidates(db::Store& s, int64_t run) {
  db::CandidateQuery q;
  q.run_id = run;
  auto c = s.ListCandidates(q);
  REQUIRE(c.ok());
  return *c;
}

std::vector<std::string> History(db::Store& s, int64_t run) {
  std::vector<std::string> out;
  for (const auto& r : RunCandidates(s, run)) out.push_back(std::to_string(r.generation) + ":" + r.params.dump() + ":" + r.op_name);
  return out;
}

}  // namespace

TEST_CASE("the search reaches the known optimum of the landscape", "[engine]") {
  World w;
  LandscapeEvaluator ev;
  FakeClock clock;
  Search s(w.op, DType::kF32, Config(25, 7), w.store.get(), &ev, &clock);
  auto r = s.Run(0, nullptr, {});
  REQUIRE(r.ok());
  REQUIRE(r->best);
  CHECK(r->best->fitness == Approx(1.0));
  CHECK(r->best->params == Assignment{{"A", 6}, {"B", 3}, {"C", 2}});
  CHECK(r->generations_done == 25);
  // Far fewer evaluations than the 256-point space.
  CHECK(ev.calls < 256);
}

TEST_CASE("each tune shape's champion is the archive member with the smallest median there", "[engine]") {
  auto src = std::make_shared<CandidateSource>(*CandidateSource::Parse(kLandscape, "land.cu"));
  auto member = [&](int64_t id, double fitness, double fit_us, double odd_us) {
    Member m;
    m.id = id;
    m.source = src;
    m.fitness = fitness;
    m.cell = "c" + std::to_string(id);
    m.times = {{"fit", fit_us}, {"odd", odd_us}};
    return m;
  };
  Archive a(1, 2);
  std::mt19937_64 rng(3);
  CHECK(a.ShapeChampion(rng) == nullptr);
  a.Add(member(1, 0.9, 10, 50));
  a.Add(member(3, 0.4, 25, 30));
  a.Add(member(2, 0.5, 20, 30));  // a tie at "odd" goes to the lower id, whatever the order
  REQUIRE(a.champions().size() == 2);
  CHECK(a.champions().at("fit").id == 1);
  CHECK(a.champions().at("odd").id == 2);
  // Member 2 is a champion but not among the best fitness; member 3 is neither.
  std::set<int64_t> drawn;
  for (int i = 0; i < 50; ++i) drawn.insert(a.ShapeChampion(rng)->id);
  CHECK(drawn == std::set<int64_t>{1, 2});
}

TEST_CASE("shape champions as parents improve the shapes the best kernel is poor at", "[engine]") {
  // Every bred child's parent is a shape's champion (shape_parents = 1): the search climbs
  // both shapes' landscapes, and finds the "odd" optimum the fitness alone never rewards.
  World w1, w2;
  LandscapeEvaluator e1, e2;
  e1.timed = e2.timed = true;
  FakeClock c1, c2;
  RunConfig on = Config(12, 5), off = Config(12, 5);
  on.shape_parents = 1.0;
  off.shape_parents = 0.0;
  REQUIRE(Search(w1.op, DType::kF32, on, w1.store.get(), &e1, &c1).Run(0, nullptr, {}).ok());
  REQUIRE(Search(w2.op, DType::kF32, off, w2.store.get(), &e2, &c2).Run(0, nullptr, {}).ok());
  auto best_at = [](db::Store& s, const std::string& shape) {
    double best = 1e30;
    for (const auto& c : RunCandidates(s, 1)) {
      auto t = s.GetTimings(c.id);
      REQUIRE(t.ok());
      for (const auto& x : *t)
        if (x.shape == shape) best = std::min(best, x.median_us);
    }
    return best;
  };
  CHECK(best_at(*w1.store, "odd") == Approx(100.0));  // A=1, B=8 found
  CHECK(best_at(*w1.store, "fit") == Approx(100.0));  // and the fitness optimum still
  CHECK(best_at(*w2.store, "odd") > best_at(*w1.store, "odd"));
}

TEST_CASE("a run the time limit stops after generation 0 says that nothing was bred, and how to go on", "[engine]") {
  World w;
  LandscapeEvaluator ev;
  FakeClock clock;  // one second per reading: a limit of 1 s ends the run after its first generation
  RunConfig c = Config(10, 3);
  c.time_limit_s = 1;
  auto r = Search(w.op, DType::kF32, c, w.store.get(), &ev, &clock).Run(0, nullptr, {});
  REQUIRE(r.ok());
  CHECK(r->stop_reason == "time");
  CHECK(r->generations_done == 1);
  const std::string note = ShortRunNote(*r, c.generations, "k.db");
  CHECK(note.find("after generation 0") != std::string::npos);
  CHECK(note.find("kevolve --resume " + std::to_string(r->run_id) + " --db k.db") != std::string::npos);
  // Past generation 0, or stopped for another reason: no note.
  SearchResult later = *r;
  later.generations_done = 2;
  CHECK(ShortRunNote(later, c.generations, "k.db").empty());
  SearchResult done = *r;
  done.stop_reason = "generations";
  CHECK(ShortRunNote(done, c.generations, "k.db").empty());
  CHECK(ShortRunNote(*r, 1, "k.db").empty());  // --gens 1: the run is complete, whatever the clock says
}

TEST_CASE("the generation line's eta follows this process's pace and stops at the time limit", "[engine]") {
  // 10 s over 2 generations, 8 left: 40 s; a 30 s limit leaves 4 generations, 20 s; a
  // passed limit 0. The run stops after the generation that ends past the limit: 40 s
  // generations under a 90 s limit, after the first, have 2 to go (80 s), not 50 s.
  CHECK(EtaSeconds(10, 2, 8, 0) == Approx(40));
  CHECK(EtaSeconds(10, 2, 8, 30) == Approx(20));
  CHECK(EtaSeconds(40, 2, 8, 30) == Approx(0));
  CHECK(EtaSeconds(10, 2, 0, 0) == Approx(0));
  CHECK(EtaSeconds(40, 1, 49, 90) == Approx(80));
  CHECK(EtaSeconds(40, 1, 1, 90) == Approx(40));
  // The generation line prints it as a duration.
  GenerationReport line;
  line.eta_s = 59.6;
  CHECK(FormatReport(line, 8).find("eta 1m") != std::string::npos);
  // Through the search: a run resumed at generation 4 of 8, one second per clock reading.
  World w;
  LandscapeEvaluator e1, e2;
  FakeClock c1, c2;
  RunConfig cfg = Config(8, 9);
  std::atomic<bool> stop{false};
  int seen = 0;
  auto part = Search(w.op, DType::kF32, cfg, w.store.get(), &e1, &c1).Run(0, &stop, [&](const GenerationReport&) {
    if (++seen == 4) stop = true;
  });
  REQUIRE(part.ok());
  std::vector<GenerationReport> reps;
  std::vector<double> now;  // the clock's last reading when each line was made
  auto resumed = Search(w.op, DType::kF32, cfg, w.store.get(), &e2, &c2).Run(part->run_id, nullptr, [&](const GenerationReport& r) {
    reps.push_back(r);
    now.push_back(c2.t);
  });
  REQUIRE(resumed.ok());
  REQUIRE(reps.size() == 4);
  // Generation 5 of 8 (the resumed run's first) leaves 3: eta = 3 x (now - t0) / 1, which
  // gives the run's start t0; every later line must agree with it (the old formula divided
  // by all 5 generations done, this process's or not, and does not).
  const double t0 = now[0] - reps[0].eta_s / 3;
  CHECK(t0 > 0);
  CHECK(t0 < now[0]);
  CHECK(reps[1].eta_s == Approx((now[1] - t0) / 2 * 2));
  CHECK(reps[2].eta_s == Approx((now[2] - t0) / 3 * 1));
  CHECK(reps[3].eta_s == Approx(0));
}

TEST_CASE("a seed's presets are tried in generation 0, after its default and before the samples", "[engine]") {
  World w;
  // The landscape's optimum as a preset: generation 0 alone finds it.
  std::string text = kLandscape;
  // The optimum; the default again (dropped); one its requirement rules out (skipped).
  text.insert(0, "// @kevolve preset A=6 B=3 C=2\n// @kevolve preset A=1\n// @kevolve preset A=7\n// @kevolve require A != 7\n");
  testing::WriteFile(w.dir / "land.cu", text);
  LandscapeEvaluator ev;
  FakeClock clock;
  RunConfig c = Config(1, 4);
  auto r = Search(w.op, DType::kF32, c, w.store.get(), &ev, &clock).Run(0, nullptr, {});
  REQUIRE(r.ok());
  REQUIRE(r->best);
  CHECK(r->best->params == Assignment{{"A", 6}, {"B", 3}, {"C", 2}});
  const auto all = RunCandidates(*w.store, r->run_id);
  REQUIRE(all.size() == static_cast<size_t>(c.seed_samples + 1));  // the preset comes on top of the samples
  CHECK(nlohmann::json::parse(all[1].params.dump()) == nlohmann::json({{"A", 6}, {"B", 3}, {"C", 2}}));
}

TEST_CASE("the same seed gives the same run; another seed another", "[engine]") {
  World w1, w2, w3;
  LandscapeEvaluator e1, e2, e3;
  FakeClock c1, c2, c3;
  auto r1 = Search(w1.op, DType::kF32, Config(6, 11), w1.store.get(), &e1, &c1).Run(0, nullptr, {});
  auto r2 = Search(w2.op, DType::kF32, Config(6, 11), w2.store.get(), &e2, &c2).Run(0, nullptr, {});
  auto r3 = Search(w3.op, DType::kF32, Config(6, 12), w3.store.get(), &e3, &c3).Run(0, nullptr, {});
  REQUIRE((r1.ok() && r2.ok() && r3.ok()));
  CHECK(History(*w1.store, r1->run_id) == History(*w2.store, r2->run_id));
  CHECK(History(*w1.store, r1->run_id) != History(*w3.store, r3->run_id));
}

TEST_CASE("only correct candidates become parents; failures are kept", "[engine]") {
  World w;
  LandscapeEvaluator ev;
  FakeClock clock;
  auto r = Search(w.op, DType::kF32, Config(6, 3), w.store.get(), &ev, &clock).Run(0, nullptr, {});
  REQUIRE(r.ok());
  const auto all = RunCandidates(*w.store, r->run_id);
  std::map<int64_t, std::string> status;
  int failed = 0;
  for (const auto& c : all) {
    status[c.id] = c.status;
    failed += c.status != "ok";
  }
  CHECK(failed > 0);
  for (const auto& c : all)
    for (int64_t p : c.parents) CHECK(status[p] == "ok");
}

TEST_CASE("dedupe: no candidate is stored twice", "[engine]") {
  World w;
  LandscapeEvaluator ev;
  FakeClock clock;
  auto r = Search(w.op, DType::kF32, Config(15, 5), w.store.get(), &ev, &clock).Run(0, nullptr, {});
  REQUIRE(r.ok());
  const auto all = RunCandidates(*w.store, r->run_id);
  std::set<std::string> params;
  for (const auto& c : all) CHECK(params.insert(c.params.dump()).second);
  CHECK(static_cast<int>(all.size()) == ev.calls);
}

TEST_CASE("resume after a crash loses nothing and duplicates nothing", "[engine]") {
  // Untimed, and timed (shape champions as parents, rebuilt from the stored timings on resume).
  for (bool timed : {false, true}) {
    INFO("timed " << timed);
    World crash, whole;
    LandscapeEvaluator e1, e2, e3;
    e1.timed = e2.timed = e3.timed = timed;
    FakeClock c1, c2, c3;
    RunConfig cfg = Config(8, 9);
    cfg.shape_parents = timed ? 0.5 : 0.25;
    // The reference: 8 generations straight.
    auto full = Search(whole.op, DType::kF32, cfg, whole.store.get(), &e1, &c1).Run(0, nullptr, {});
    REQUIRE(full.ok());
    // A run interrupted in generation 5, then resumed.
    std::atomic<bool> stop{false};
    int gens_seen = 0;
    auto part = Search(crash.op, DType::kF32, cfg, crash.store.get(), &e2, &c2).Run(0, &stop, [&](const GenerationReport&) {
      if (++gens_seen == 4) stop = true;  // interrupts during generation 5
    });
    REQUIRE(part.ok());
    CHECK(part->stop_reason == "interrupted");
    auto run = crash.store->GetRun(part->run_id);
    CHECK(run->generations_done == 4);
    CHECK(run->status == "interrupted");
    auto resumed = Search(crash.op, DType::kF32, cfg, crash.store.get(), &e3, &c3).Run(part->run_id, nullptr, {});
    REQUIRE(resumed.ok());
    CHECK(resumed->generations_done == 8);
    CHECK(History(*crash.store, part->run_id) == History(*whole.store, full->run_id));
    CHECK(e2.calls + e3.calls == e1.calls);
  }
}

TEST_CASE("islands and migration follow the configuration", "[engine]") {
  World w;
  LandscapeEvaluator ev;
  FakeClock clock;
  RunConfig cfg = Config(4, 21);
  cfg.islands = 3;
  cfg.elite_per_island = 2;
  Search s(w.op, DType::kF32, cfg, w.store.get(), &ev, &clock);
  auto r = s.Run(0, nullptr, {});
  REQUIRE(r.ok());
  REQUIRE(s.archive().islands() == 3);
  for (int i = 0; i < 3; ++i) CHECK(s.archive().island(i).size() <= 2);
  std::set<int> islands;
  const auto all = RunCandidates(*w.store, r->run_id);
  for (const auto& c : all) islands.insert(c.island);
  CHECK(islands == std::set<int>{0, 1, 2});

  Archive a(2, 3);
  auto src = std::make_shared<const CandidateSource>(*CandidateSource::Parse(kLandscape, "l.cu"));
  for (int i = 0; i < 3; ++i) a.Add({i + 1, src, {{"A", i}}, 0.1 * (i + 1), 0, 0, "c" + std::to_string(i)});
  CHECK(a.island(1).empty());
  a.Migrate(2);
  REQUIRE(a.island(1).size() == 2);
  CHECK(a.island(1)[0].fitness == Approx(0.3));
  CHECK(a.island(1)[1].fitness == Approx(0.2));
}

TEST_CASE("a second run in the same database adopts recorded results instead of measuring again", "[engine]") {
  World w;
  LandscapeEvaluator e1, e2, e3;
  FakeClock c1, c2, c3;
  auto r1 = Search(w.op, DType::kF32, Config(4, 4), w.store.get(), &e1, &c1).Run(0, nullptr, {});
  REQUIRE(r1.ok());
  auto r2 = Search(w.op, DType::kF32, Config(4, 4), w.store.get(), &e2, &c2).Run(0, nullptr, {});
  REQUIRE(r2.ok());
  CHECK(r2->stop_reason == "generations");
  REQUIRE(r2->best);
  CHECK(r2->best->fitness == Approx(r1->best->fitness));
  CHECK(e2.calls == 0);  // the same seed proposes the same candidates: all adopted
  auto members = w.store->ListRunMembers(r2->run_id);
  REQUIRE(members.ok());
  CHECK(!members->empty());
  // Resuming the second run with more generations replays the adopted members.
  auto r3 = Search(w.op, DType::kF32, Config(6, 4), w.store.get(), &e3, &c3).Run(r2->run_id, nullptr, {});
  REQUIRE(r3.ok());
  CHECK(r3->generations_done == 6);
  CHECK(r3->best->fitness >= r2->best->fitness);
}

TEST_CASE("a database keeps one timing protocol: a run with another L2 flush or timer stops before it starts", "[engine]") {
  World w;
  LandscapeEvaluator e1, e2, e3;
  e1.timed = e2.timed = e3.timed = true;
  FakeClock c1, c2, c3;
  auto r1 = Search(w.op, DType::kF32, Config(2, 4), w.store.get(), &e1, &c1).Run(0, nullptr, {});
  REQUIRE(r1.ok());
  auto runs_before = w.store->ListRuns();
  REQUIRE(runs_before.ok());
  // The read flush's medians would be ranked, adopted and exported beside the memset
  // ones: refused, with nothing recorded and nothing evaluated.
  RunConfig read = Config(2, 4);
  read.flush = "read";
  e2.flush = "read";
  auto r2 = Search(w.op, DType::kF32, read, w.store.get(), &e2, &c2).Run(0, nullptr, {});
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.error().find("--timer events --flush memset") != std::string::npos);
  CHECK(r2.error().find("another --db") != std::string::npos);
  CHECK(e2.calls == 0);
  auto runs_after = w.store->ListRuns();
  REQUIRE(runs_after.ok());
  CHECK(runs_after->size() == runs_before->size());
  RunConfig cupti = Config(2, 4);
  cupti.timer = "cupti";
  const std::string op = w.op.name;
  CHECK(CheckTimingProtocol(*w.store, op, "f32", "cupti", "memset").message().find("asked: --timer cupti") !=
        std::string::npos);
  CHECK_FALSE(Search(w.op, DType::kF32, cupti, w.store.get(), &e2, &c2).Run(0, nullptr, {}).ok());
  // The same protocol is accepted, and adopts what the first run measured.
  CHECK(CheckTimingProtocol(*w.store, op, "f32", "events", "memset").ok());
  // The protocol is per op and dtype: another dtype of the op has no timings yet.
  CHECK(CheckTimingProtocol(*w.store, op, "bf16", "cupti", "read").ok());
  auto r3 = Search(w.op, DType::kF32, Config(2, 4), w.store.get(), &e3, &c3).Run(0, nullptr, {});
  REQUIRE(r3.ok());
  CHECK(e3.calls == 0);
  // A database with no timings takes any protocol.
  World fresh;
  CHECK(CheckTimingProtocol(*fresh.store, op, "f32", "cupti", "read").ok());
  // An evaluation whose timings carry another protocol than the run's (an evaluator that
  // timed with the read flush under a memset run, which kevolve's own never does) is not
  // recorded: the store refuses it, and the run stops, resumable.
  {
    LandscapeEvaluator e4;
    e4.timed = true;
    e4.flush = "read";
    FakeClock c4;
    RunConfig other_seed = Config(2, 4);
    other_seed.seed = 7;  // other candidates than r1's, evaluated rather than adopted
    auto r4 = Search(w.op, DType::kF32, other_seed, w.store.get(), &e4, &c4).Run(0, nullptr, {});
    REQUIRE_FALSE(r4.ok());
    CHECK(r4.error().find("could not be recorded, so the run stopped (resumable)") != std::string::npos);
    CHECK(r4.error().find("measured more than one way") != std::string::npos);
    auto runs = w.store->ListRuns();
    REQUIRE(runs.ok());
    CHECK(runs->back().status == "interrupted");
    CHECK(CheckTimingProtocol(*w.store, op, "f32", "events", "memset").ok());  // nothing of it landed
  }
  // A database that an older kevolve filled with two protocols (made here by rewriting one
  // stored timing, as the store itself refuses to): no protocol can join it, and the error
  // says why.
  {
    sqlite3* h = nullptr;
    REQUIRE(sqlite3_open((w.dir / "k.db").string().c_str(), &h) == SQLITE_OK);
    CHECK(sqlite3_exec(h, "UPDATE timings SET protocol_json = json_set(protocol_json, '$.flush', 'read') "
                          "WHERE id = (SELECT min(id) FROM timings)", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(h);
  }
  for (const std::string flush : {"memset", "read"}) {
    const Status st = CheckTimingProtocol(*w.store, op, "f32", "events", flush);
    CHECK(st.message().find("(2 ways)") != std::string::npos);
    CHECK(st.message().find("--timer events --flush memset; --timer events --flush read") != std::string::npos);
  }
}

TEST_CASE("LLM children enter the search and every call is recorded", "[engine][llm]") {
  World w;
  // A preset in the seed: the model is shown its parents and the inspirations without it.
  testing::WriteFile(w.dir / "land.cu", std::string("// @kevolve preset A=2\n") + kLandscape);
  LlmBreeder llm = ReplayBreeder(w);
  LandscapeEvaluator ev;
  FakeClock clock;
  RunConfig cfg = LlmDiffConfig();  // waits for the replies: the children join the very next generation
  Search s(w.op, DType::kF32, cfg, w.store.get(), &ev, &clock);
  s.EnableLlm(&llm, nullptr);
  auto r = s.Run(0, nullptr, {});
  REQUIRE(r.ok());
  const auto all = RunCandidates(*w.store, r->run_id);
  int llm_children = 0;
  for (const auto& c : all) llm_children += c.op_name == "llm_diff";
  CHECK(llm_children >= 1);  // the same edit gives the same child: later ones are duplicates
  auto calls = w.store->ListLlmCalls(r->run_id);
  REQUIRE(calls.ok());
  REQUIRE(!calls->empty());
  int with_child = 0;
  for (const auto& c : *calls) {
    CHECK(c.provider == "rec");
    CHECK(c.parent_id.has_value());
    CHECK(c.prompt.find("param C 0 1 2 3") != std::string::npos);  // the parent's source is in the prompt
    CHECK(c.prompt.find("@kevolve preset") == std::string::npos);   // without its preset
    with_child += c.candidate_id.has_value();
  }
  CHECK(with_child >= 1);
}

TEST_CASE("LLM requests that make no call are reported once per reason, not silently dropped", "[engine][llm]") {
  World w;
  ReplayBreeder(w);  // writes llm.json and the replies
  auto providers = LoadProviders((w.dir / "llm.json").string());
  REQUIRE(providers.ok());
  // A prompt budget that cannot hold the parent: every request ends before its call.
  LlmBreeder llm(w.op, DType::kF32, std::move(*providers), 0, std::make_shared<NvrtcCompiler>(), "sm_90",
                 llm::MutatorOptions{200, 2}, 2);
  LandscapeEvaluator ev;
  FakeClock clock;
  RunConfig cfg = LlmDiffConfig();
  Search s(w.op, DType::kF32, cfg, w.store.get(), &ev, &clock);
  s.EnableLlm(&llm, nullptr);
  std::vector<std::string> notes;
  auto r = s.Run(0, nullptr, [&](const GenerationReport& rep) {
    notes.insert(notes.end(), rep.llm_notes.begin(), rep.llm_notes.end());
  });
  REQUIRE(r.ok());
  REQUIRE(notes.size() == 1);  // several requests, one reason, reported once
  CHECK(notes[0].find("prompt budget of 200 characters cannot hold") != std::string::npos);
  auto calls = w.store->ListLlmCalls(r->run_id);
  REQUIRE(calls.ok());
  CHECK(calls->empty());
}

namespace {

// Notes what llm_calls holds when the first batch with an LLM child (the replayed edit
// reorders param C) starts evaluating.
class CallWatchingEvaluator : public LandscapeEvaluator {
 public:
  explicit CallWatchingEvaluator(db::Store* store) : store_(store) {}
  std::vector<Ladder> Evaluate(const std::vector<CandidateInput>& in, const std::atomic<bool>* cancel,
                               const std::function<void(size_t, Ladder&)>& on_done) override {
    bool first = false;
    for (const auto& c : in)
      if (calls_at_child < 0 && c.text.find("param C 2 3 1 0") != std::string::npos) {
        first = true;
        auto listed = store_->ListLlmCalls(std::nullopt);
        REQUIRE(listed.ok());
        calls_at_child = static_cast<int>(listed->size());
        unlinked_at_child = 0;
        for (const auto& k : *listed) unlinked_at_child += !k.candidate_id.has_value();
      }
    auto out = LandscapeEvaluator::Evaluate(in, cancel, on_done);  // on_done commits each result
    if (first) {
      auto listed = store_->ListLlmCalls(std::nullopt);
      REQUIRE(listed.ok());
      linked_when_committed = 0;
      for (const auto& k : *listed) linked_when_committed += k.candidate_id.has_value();
    }
    return out;
  }
  int calls_at_child = -1, unlinked_at_child = -1, linked_when_committed = -1;

 private:
  db::Store* store_;
};

}  // namespace

TEST_CASE("LLM calls are recorded as they return, before their children are evaluated, then linked", "[engine][llm]") {
  // So a coordinator killed with kill -9 during a generation's evaluations keeps the
  // calls (and their spend) that produced it.
  World w;
  LlmBreeder llm = ReplayBreeder(w);
  CallWatchingEvaluator ev(w.store.get());
  FakeClock clock;
  RunConfig cfg = LlmDiffConfig();
  Search s(w.op, DType::kF32, cfg, w.store.get(), &ev, &clock);
  s.EnableLlm(&llm, nullptr);
  auto r = s.Run(0, nullptr, {});
  REQUIRE(r.ok());
  CHECK(ev.calls_at_child >= 1);     // the child's call is in the database before the child is measured
  CHECK(ev.unlinked_at_child >= 1);  // ... without its candidate id yet
  CHECK(ev.linked_when_committed >= 1);  // linked as the child is committed, not at the generation's end
  auto calls = w.store->ListLlmCalls(r->run_id);
  REQUIRE(calls.ok());
  const auto all = RunCandidates(*w.store, r->run_id);
  int linked = 0;
  for (const auto& c : *calls)
    if (c.candidate_id) {
      ++linked;
      bool found = false;
      for (const auto& k : all) found = found || k.id == *c.candidate_id;
      CHECK(found);  // linked to a candidate of this run
    }
  CHECK(linked >= 1);
  CHECK(w.store->LinkLlmCall(999999, 1).ToString().find("no such call") != std::string::npos);
}

namespace {

// Counts the evaluation batches (one per generation).
class BatchCountingEvaluator : public LandscapeEvaluator {
 public:
  std::vector<Ladder> Evaluate(const std::vector<CandidateInput>& in, const std::atomic<bool>* cancel,
                               const std::function<void(size_t, Ladder&)>& on_done) override {
    auto out = LandscapeEvaluator::Evaluate(in, cancel, on_done);
    ++batches;
    return out;
  }
  std::atomic<int> batches{0};
};

// A slow LLM: each call returns only once the GPUs have evaluated `release_after`
// generations, or after 20 s (which a search that waits for its LLM would need).
class GatedProvider : public llm::Provider {
 public:
  GatedProvider(const BatchCountingEvaluator& ev, int release_after) : ev_(ev), release_after_(release_after) {
    cfg_.name = "gated";
    cfg_.kind = "replay";
  }
  llm::Reply Complete(const std::vector<llm::Message>&) override {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (ev_.batches.load() < release_after_) {
      if (std::chrono::steady_clock::now() > until) {
        timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    llm::Reply r;
    r.text = "<<<<<<< SEARCH\n// @kevolve param C 0 1 2 3\n=======\n// @kevolve param C 2 3 1 0\n>>>>>>> REPLACE\n";
    return r;
  }
  const llm::ProviderConfig& config() const override { return cfg_; }
  bool broken() const override { return false; }
  std::atomic<bool> timed_out{false};

 private:
  const BatchCountingEvaluator& ev_;
  int release_after_;
  llm::ProviderConfig cfg_;
};

}  // namespace

TEST_CASE("a slow LLM never holds the GPUs: generations go on while its calls are in flight", "[engine][llm]") {
  World w;
  BatchCountingEvaluator ev;
  // Calls are asked for while generation 1 is bred, after generation 0 (batch 1). They
  // return only after batch 3, so generations 1 and 2 must run while they are in flight.
  auto gated = std::make_unique<GatedProvider>(ev, 3);
  GatedProvider* provider = gated.get();
  std::vector<std::unique_ptr<llm::Provider>> providers;
  providers.push_back(std::move(gated));
  auto compiler = std::make_shared<NvrtcCompiler>();
  LlmBreeder llm(w.op, DType::kF32, std::move(providers), 0, compiler, "sm_90", {}, 4);
  FakeClock clock;
  RunConfig cfg = Config(6, 3);
  cfg.operator_mix = {{"param_tweak", 0.5}, {"llm_diff", 0.5}};
  cfg.llm_wait_s = 0;
  Search s(w.op, DType::kF32, cfg, w.store.get(), &ev, &clock);
  s.EnableLlm(&llm, nullptr);
  auto r = s.Run(0, nullptr, {});
  REQUIRE(r.ok());
  CHECK(r->generations_done == 6);
  CHECK_FALSE(provider->timed_out.load());  // released by the GPUs' progress, not by waiting
  auto calls = w.store->ListLlmCalls(r->run_id);
  REQUIRE(calls.ok());
  CHECK(!calls->empty());  // recorded, at the latest when the run ends
  for (const auto& c : *calls) CHECK(c.provider == "gated");
}

namespace {

// A model that never answers: each call returns only once the LLM calls are cancelled
// (or after 20 s, which a search that does not cancel them would wait for).
class HangingProvider : public llm::Provider {
 public:
  HangingProvider() {
    cfg_.name = "hanging";
    cfg_.kind = "replay";
  }
  llm::Reply Complete(const std::vector<llm::Message>&) override {
    started = true;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!llm::LlmCallsCancelled()) {
      if (std::chrono::steady_clock::now() > until) {
        timed_out = true;
        llm::Reply r;
        r.text = "// @kevolve param C 0 1 2 3\n";
        return r;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    llm::Reply r;
    r.outcome = "cancelled";
    r.error = "cancelled";
    return r;
  }
  const llm::ProviderConfig& config() const override { return cfg_; }
  bool broken() const override { return false; }
  std::atomic<bool> started{false}, timed_out{false};

 private:
  llm::ProviderConfig cfg_;
};

}  // namespace

TEST_CASE("an interrupted search cancels its LLM calls in flight and records them", "[engine][llm]") {
  World w;
  auto hanging = std::make_unique<HangingProvider>();
  HangingProvider* provider = hanging.get();
  std::vector<std::unique_ptr<llm::Provider>> providers;
  providers.push_back(std::move(hanging));
  auto compiler = std::make_shared<NvrtcCompiler>();
  LlmBreeder llm(w.op, DType::kF32, std::move(providers), 0, compiler, "sm_90", {}, 4);
  LandscapeEvaluator ev;
  FakeClock clock;
  RunConfig cfg = Config(50, 3);
  cfg.operator_mix = {{"param_tweak", 0.5}, {"llm_diff", 0.5}};
  cfg.llm_wait_s = 0;
  Search s(w.op, DType::kF32, cfg, w.store.get(), &ev, &clock);
  s.EnableLlm(&llm, nullptr);
  std::atomic<bool> stop{false};
  int gens_seen = 0;
  auto r = s.Run(0, &stop, [&](const GenerationReport&) {
    if (++gens_seen == 3) stop = true;  // Ctrl-C, with the calls of generation 1 hanging
  });
  llm::CancelLlmCalls(false);  // process-wide: leave it lifted for the other tests
  REQUIRE(r.ok());
  CHECK(r->stop_reason == "interrupted");
  CHECK(provider->started.load());
  CHECK_FALSE(provider->timed_out.load());  // ended by the cancellation, not by waiting 20 s
  auto calls = w.store->ListLlmCalls(r->run_id);
  REQUIRE(calls.ok());
  REQUIRE(!calls->empty());
  for (const auto& c : *calls) {
    CHECK(c.outcome == "cancelled");
    CHECK_FALSE(c.candidate_id.has_value());
  }
}

namespace {

// The first call answers at once (a valid edit); every later one waits until another
// connection to the run's database (as a user would open it after a kill -9) sees a call
// in llm_calls, or until 5 s after the first wait (then timed_out, and none waits again).
class WaitForRecordProvider : public llm::Provider {
 public:
  explicit WaitForRecordProvider(std::string db_path) : db_path_(std::move(db_path)) {
    cfg_.name = "gated";
    cfg_.kind = "replay";
  }
  llm::Reply Complete(const std::vector<llm::Message>&) override {
    if (calls.fetch_add(1) > 0) {
      std::lock_guard<std::mutex> lock(mu_);  // one reader connection, one waiting call at a time
      if (!deadline_) deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      db::StoreOptions ro;
      ro.read_only = true;
      auto reader = db::OpenSqliteStore(db_path_, ro);
      while (!seen.load() && !timed_out.load() && reader.ok()) {
        auto rows = (*reader)->ListLlmCalls(std::nullopt);
        if (rows.ok() && !rows->empty()) seen = true;  // while this call is still out
        if (std::chrono::steady_clock::now() > *deadline_) timed_out = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (!reader.ok()) open_error = reader.error();
    }
    llm::Reply r;
    r.text = "<<<<<<< SEARCH\n// @kevolve param C 0 1 2 3\n=======\n// @kevolve param C 2 3 1 0\n>>>>>>> REPLACE\n";
    return r;
  }
  const llm::ProviderConfig& config() const override { return cfg_; }
  bool broken() const override { return false; }
  std::atomic<int> calls{0};
  std::atomic<bool> seen{false}, timed_out{false};
  std::string open_error;  // under mu_

 private:
  std::string db_path_;
  std::mutex mu_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  llm::ProviderConfig cfg_;
};

}  // namespace

namespace {

// Paces the generations while the provider's first call is answered and not yet seen in
// the database (20 ms a batch), so that the search's own looks between evaluations, not
// the wait at the end of the run, are what record it.
class PacedEvaluator : public LandscapeEvaluator {
 public:
  explicit PacedEvaluator(const WaitForRecordProvider* p) : p_(p) {}
  std::vector<Ladder> Evaluate(const std::vector<CandidateInput>& in, const std::atomic<bool>* cancel,
                               const std::function<void(size_t, Ladder&)>& on_done) override {
    if (p_->calls.load() > 0 && !p_->seen.load()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return LandscapeEvaluator::Evaluate(in, cancel, on_done);
  }

 private:
  const WaitForRecordProvider* p_;
};

}  // namespace

TEST_CASE("each LLM call is recorded as it returns, while the rest of its batch is in flight", "[engine][llm]") {
  // So a coordinator killed with kill -9 while a slow call is out keeps the calls (and
  // the spend) that came back before it. The requests of a batch are made one at a time.
  World w;
  auto owned = std::make_unique<WaitForRecordProvider>((w.dir / "k.db").string());
  WaitForRecordProvider* provider = owned.get();
  std::vector<std::unique_ptr<llm::Provider>> providers;
  providers.push_back(std::move(owned));
  LlmBreeder llm(w.op, DType::kF32, std::move(providers), 0, std::make_shared<NvrtcCompiler>(), "sm_90", {}, 1);
  PacedEvaluator ev(provider);
  FakeClock clock;
  RunConfig cfg = Config(2, 4);
  cfg.llm_wait_s = 0;
  int reports_after_seen = 0;
  bool children_evaluated = false;  // the run waits for its batch before it ends
  auto on_gen = [&](const GenerationReport&) { reports_after_seen += provider->seen.load(); };
  SECTION("LLM operators only: generation 1 waits for its own batch, recording as it waits") {
    cfg.operator_mix = {{"llm_diff", 1.0}};
    children_evaluated = true;
  }
  SECTION("with parameter operators: generations go on, and the search records between evaluations") {
    cfg.generations = 80;
    cfg.operator_mix = {{"param_tweak", 0.5}, {"llm_diff", 0.5}};
  }
  Search s(w.op, DType::kF32, cfg, w.store.get(), &ev, &clock);
  s.EnableLlm(&llm, nullptr);
  auto r = s.Run(0, nullptr, on_gen);
  REQUIRE(r.ok());
  INFO(provider->open_error);
  CHECK(provider->open_error.empty());
  CHECK(provider->calls.load() >= 2);
  CHECK(provider->seen.load());              // the first call was in the database while a later one was out
  CHECK_FALSE(provider->timed_out.load());   // ... before the 5 s deadline, so no call waited for it
  CHECK(reports_after_seen >= 1);            // ... during the run, not in its final wait
  auto calls = w.store->ListLlmCalls(r->run_id);
  REQUIRE(calls.ok());
  CHECK(static_cast<int>(calls->size()) == provider->calls.load());  // every call recorded, once
  int linked = 0;
  for (const auto& c : *calls) linked += c.candidate_id.has_value();
  if (children_evaluated) CHECK(linked >= 1);  // and their children linked to their candidates
}

TEST_CASE("a mix of LLM operators only runs every generation", "[engine][llm]") {
  World w;
  LlmBreeder llm = ReplayBreeder(w);
  LandscapeEvaluator ev;
  FakeClock clock;
  RunConfig cfg = Config(4, 5);
  cfg.operator_mix = {{"llm_diff", 1.0}};
  cfg.llm_wait_s = 0;
  Search s(w.op, DType::kF32, cfg, w.store.get(), &ev, &clock);
  s.EnableLlm(&llm, nullptr);
  auto r = s.Run(0, nullptr, {});
  REQUIRE(r.ok());
  auto calls = w.store->ListLlmCalls(r->run_id);
  REQUIRE(calls.ok());
  for (const auto& c : *calls) UNSCOPED_INFO("llm call: " << c.outcome << " " << c.error);
  CHECK(r->stop_reason == "generations");
  CHECK(r->generations_done == 4);
  const auto all = RunCandidates(*w.store, r->run_id);
  int llm_children = 0;
  for (const auto& c : all) llm_children += c.op_name == "llm_diff";
  CHECK(llm_children >= 1);
}

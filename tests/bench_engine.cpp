// Benchmark (not a test): the search loop's own bookkeeping per candidate (selection,
// operators, dedupe, SQLite commits), with an evaluator that costs nothing.
//   build/tests/kevolve_bench_engine [generations] [population]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "kevolve/core/hash.h"
#include "kevolve/core/json_file.h"
#include "kevolve/engine/search.h"

using namespace kevolve;

namespace {

const char* kSource = R"(// @kevolve param A 1..32
// @kevolve param B 1..32
// @kevolve param C 1..16
// @kevolve launch k grid=rows block=32
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {}
)";

class FreeEvaluator : public CandidateEvaluator {
 public:
  std::vector<Ladder> Evaluate(const std::vector<CandidateInput>& in, const std::atomic<bool>*,
                               const std::function<void(size_t, Ladder&)>& on_done) override {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Ladder> out;
    for (const auto& c : in) {
      Ladder l;
      l.input = c;
      l.parsed = *CandidateSource::Parse(c.text, c.name);
      double a = c.params.at("A"), b = c.params.at("B"), cc = c.params.at("C");
      FitnessResult f;
      f.fitness = std::exp(-0.01 * ((a - 20) * (a - 20) + (b - 7) * (b - 7) + (cc - 3) * (cc - 3)));
      l.fitness = f;
      for (const char* r : {"static", "compile", "launch", "correctness", "timing", "fitness"})
        l.rungs.push_back({r, true, "", {{"x", 1}}, "", 0});
      out.push_back(std::move(l));
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (size_t i = 0; i < out.size(); ++i)  // recording is bookkeeping: not counted as evaluation
      if (on_done) on_done(i, out[i]);
    return out;
  }
  std::string Hash(const CandidateSource& p, const Assignment& a) const override {
    return Sha256Hex(p.text + AssignmentString(a));
  }
  std::string arch() const override { return "sm_90"; }
  double seconds = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int gens = argc > 1 ? std::atoi(argv[1]) : 40;
  int pop = argc > 2 ? std::atoi(argv[2]) : 32;
  auto dir = std::filesystem::temp_directory_path() / "kevolve-bench-engine";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  WriteTextFile((dir / "k.cu").string(), kSource);
  OpSpec op;
  op.name = "bench";
  op.sizes = {"rows", "cols"};
  op.dtypes = {DType::kF32};
  op.seeds = {(dir / "k.cu").string()};
  auto store = db::OpenSqliteStore((dir / "k.db").string());
  if (!store.ok()) return 1;
  RunConfig cfg;
  cfg.generations = gens;
  cfg.population = pop;
  FreeEvaluator ev;
  SteadyClock clock;
  Search s(op, DType::kF32, cfg, store->get(), &ev, &clock);
  auto t0 = std::chrono::steady_clock::now();
  auto r = s.Run(0, nullptr, {});
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.error().c_str());
    return 1;
  }
  double per = (total - ev.seconds) / static_cast<double>(r->evaluated) * 1e3;
  std::printf("%d generations x %d: %lld candidates in %.3f s (evaluator %.3f s): %.3f ms bookkeeping per candidate\n",
              gens, pop, static_cast<long long>(r->evaluated), total, ev.seconds, per);
  return 0;
}

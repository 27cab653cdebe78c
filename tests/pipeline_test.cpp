// Tests for the ladder helpers of engine/pipeline.h that need no GPU: the per-shape
// summary `kevolve eval` prints after several candidates.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "kevolve/engine/pipeline.h"

namespace kevolve {
namespace {

// A ladder whose rungs all passed (or whose correctness rung failed) with these medians.
Ladder MakeLadder(const std::string& name, const std::vector<std::pair<std::string, double>>& medians,
                  bool correct = true) {
  Ladder l;
  l.input.name = name;
  for (const char* rung : {"static", "compile", "launch", "correctness", "timing", "fitness"}) {
    RungResult r;
    r.name = rung;
    r.ok = correct || std::string(rung) != "correctness";
    l.rungs.push_back(r);
  }
  FitnessResult f;
  for (const auto& [shape, us] : medians) {
    ShapeTiming t;
    t.shape = shape;
    t.median_us = us;
    l.timings.push_back(t);
    ShapeFraction s;
    s.shape = shape;
    s.median_us = us;
    s.roofline_us = 10.0;
    s.fraction = 10.0 / us;
    f.shapes.push_back(s);
  }
  l.fitness = f;
  return l;
}

TEST_CASE("FastestPerShape picks per shape among the ladders that passed every rung", "[engine]") {
  std::vector<Ladder> ls;
  ls.push_back(MakeLadder("a.cu", {{"64x64", 20.0}, {"128x128", 50.0}}));
  ls.push_back(MakeLadder("wrong.cu", {{"64x64", 1.0}, {"128x128", 1.0}}, false));  // fastest, but wrong
  ls.push_back(MakeLadder("b.cu", {{"64x64", 25.0}, {"128x128", 40.0}}));
  ls.push_back(MakeLadder("c.cu", {{"64x64", 20.0}, {"256x256", 80.0}}));  // ties a.cu at 64x64
  Ladder none;  // cancelled before any rung: not ok
  ls.push_back(none);

  const std::vector<ShapeBest> best = FastestPerShape(ls);
  REQUIRE(best.size() == 3);
  // Shapes in the order they were first timed.
  CHECK(best[0].shape == "64x64");
  CHECK(best[1].shape == "128x128");
  CHECK(best[2].shape == "256x256");
  // The wrong kernel is never a pick; a tie keeps the earlier ladder.
  CHECK(best[0].ladder == 0);
  CHECK(best[0].median_us == Approx(20.0));
  CHECK(best[0].fraction == Approx(0.5));
  CHECK(best[1].ladder == 2);
  CHECK(best[1].median_us == Approx(40.0));
  CHECK(best[1].fraction == Approx(0.25));
  CHECK(best[2].ladder == 3);
}

TEST_CASE("FastestPerShape is empty when no ladder passed", "[engine]") {
  std::vector<Ladder> ls;
  ls.push_back(MakeLadder("wrong.cu", {{"64x64", 1.0}}, false));
  ls.push_back(Ladder{});
  CHECK(FastestPerShape(ls).empty());
  // A passing ladder without a fitness rung result reports fraction 0.
  Ladder l = MakeLadder("nofit.cu", {{"64x64", 3.0}});
  l.fitness.reset();
  ls.push_back(l);
  const auto best = FastestPerShape(ls);
  REQUIRE(best.size() == 1);
  CHECK(best[0].ladder == 2);
  CHECK(best[0].fraction == 0.0);
}

TEST_CASE("MediansTable shows every candidate at every shape, the fastest marked, sweeps by their values", "[engine]") {
  std::vector<Ladder> ls;
  ls.push_back(MakeLadder("k.cu", {{"64x64", 20.0}, {"128x128", 50.25}}));
  ls.back().input.params = {{"BLOCK", 256}, {"SHIFT", 0}};
  ls.push_back(MakeLadder("k.cu", {{"64x64", 25.0}, {"128x128", 40.0}}));
  ls.back().input.params = {{"BLOCK", 256}, {"SHIFT", 1}};
  ls.push_back(MakeLadder("k.cu", {{"64x64", 1.0}}, false));  // fastest, but wrong
  ls.back().input.params = {{"BLOCK", 512}, {"SHIFT", 1}};
  ls.push_back(MakeLadder("other.cu", {{"256x256", 7.5}}));
  ls.back().input.params = {{"WARPS", 4}};

  const std::string t = MediansTable(ls);
  INFO(t);
  std::vector<std::string> lines;
  for (size_t a = 0, b; a < t.size(); a = b + 1) {
    b = t.find('\n', a);
    REQUIRE(b != std::string::npos);  // every line ends
    lines.push_back(t.substr(a, b - a));
  }
  REQUIRE(lines.size() == 5);
  // Columns in the order first timed.
  CHECK(lines[0].find("candidate") != std::string::npos);
  CHECK(lines[0].find("64x64") < lines[0].find("128x128"));
  CHECK(lines[0].find("128x128") < lines[0].find("256x256"));
  // k.cu's rows name the parameters that vary between them, and only those.
  CHECK(lines[1].find("k.cu [BLOCK=256,SHIFT=0]") != std::string::npos);
  CHECK(lines[2].find("k.cu [BLOCK=256,SHIFT=1]") != std::string::npos);
  CHECK(lines[3].find("k.cu [BLOCK=512,SHIFT=1]") != std::string::npos);
  CHECK(lines[4].find("other.cu ") != std::string::npos);
  CHECK(lines[4].find("WARPS") == std::string::npos);
  // The fastest passing median per shape carries the star; the failed row shows its status.
  CHECK(lines[1].find("20*") != std::string::npos);
  CHECK(lines[1].find("50.25 ") != std::string::npos);
  CHECK(lines[2].find("25 ") != std::string::npos);
  CHECK(lines[2].find("40*") != std::string::npos);
  CHECK(lines[3].find("failed_correctness") != std::string::npos);
  CHECK(lines[3].find('*') == std::string::npos);
  CHECK(lines[4].find("7.5*") != std::string::npos);
  // Shapes a row did not time show "-"; the numbers line up under their shape.
  CHECK(lines[1].find(" -") != std::string::npos);
  CHECK(lines[0].find("64x64") + 5 == lines[1].find("20*") + 2);
  CHECK(MediansTable({}).empty());
  CHECK(MediansTable({Ladder{}}).empty());
}

TEST_CASE("MediansTable stars every tie, numbers rows that read the same, keeps a late failure's medians", "[engine]") {
  std::vector<Ladder> ls;
  ls.push_back(MakeLadder("k.cu", {{"64x64", 20.0}}));
  ls.push_back(MakeLadder("k.cu", {{"64x64", 20.0}}));  // the same file twice, the same time
  ls.push_back(MakeLadder("k.cu", {{"64x64", 20.0004}}));  // prints as 20 too, but is slower
  Ladder late = MakeLadder("late.cu", {{"64x64", 5.0}});
  late.rungs.back().ok = false;  // failed after timing (here: the fitness rung)
  ls.push_back(late);
  const std::string t = MediansTable(ls);
  INFO(t);
  std::vector<std::string> lines;
  for (size_t a = 0, b; (b = t.find('\n', a)) != std::string::npos; a = b + 1) lines.push_back(t.substr(a, b - a));
  REQUIRE(lines.size() == 5);
  CHECK(lines[1].find("k.cu #1") != std::string::npos);
  CHECK(lines[2].find("k.cu #2") != std::string::npos);
  CHECK(lines[3].find("k.cu #3") != std::string::npos);
  CHECK(lines[1].find("20*") != std::string::npos);
  CHECK(lines[2].find("20*") != std::string::npos);
  CHECK(lines[3].find('*') == std::string::npos);
  // The late failure shows its median, no star (5 us is not a pick), then its status.
  CHECK(lines[4].find(" 5 ") != std::string::npos);
  CHECK(lines[4].find('*') == std::string::npos);
  CHECK(lines[4].find("failed_fitness") > lines[4].find(" 5 "));
}

}  // namespace
}  // namespace kevolve

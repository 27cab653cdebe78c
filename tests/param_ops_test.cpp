// Tests for the parameter operators (operators/param_ops.h): ParamTweak, Crossover and
// SampleAssignment honour allowed values and requirements and are reproducible.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kevolve/operators/param_ops.h"

namespace kevolve {
namespace {

using Catch::Matchers::Contains;

CandidateSource MustParse(const std::string& text, const std::string& name = "p.cu") {
  auto c = CandidateSource::Parse(text, name);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return *c;
}

// Three parameters, one of them fixed, and requirements that rule some values out.
const char* const kTunable =
    "// @kevolve param A 1 2 4 8\n"
    "// @kevolve param B 16 32 64 128\n"
    "// @kevolve param C 3\n"
    "// @kevolve require A * B <= 256\n"
    "// @kevolve require A * sizeof_T <= 16\n"
    "// @kevolve launch k grid=1 block=B\n";

// No requirements: every combination is valid.
const char* const kFree =
    "// @kevolve param P 1 2 3 4\n"
    "// @kevolve param Q 10 20 30 40\n"
    "// @kevolve param R 5 6 7\n"
    "// @kevolve param S 0 1\n"
    "// @kevolve launch k grid=1 block=32\n";

bool Allowed(const CandidateSource& c, const std::string& name, int64_t v) {
  const ParamSpec* p = c.FindParam(name);
  return p && std::find(p->values.begin(), p->values.end(), v) != p->values.end();
}

ParentView View(const CandidateSource& c, Assignment a, int64_t id, Env constants = {}) {
  ParentView v;
  v.id = id;
  v.source = &c;
  v.params = std::move(a);
  v.constants = std::move(constants);
  return v;
}

size_t Differences(const Assignment& a, const Assignment& b) {
  size_t n = 0;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end() || it->second != v) ++n;
  }
  return n;
}

TEST_CASE("ParamTweak: changes a parameter within allowed values and requirements", "[operators]") {
  CandidateSource c = MustParse(kTunable);
  const Env constants = {{"sizeof_T", 4}};
  Assignment start = {{"A", 2}, {"B", 64}, {"C", 3}};
  REQUIRE(ValidateAssignment(c, start, constants).ok());
  ParamTweak op;
  CHECK(op.name() == "param_tweak");
  CHECK(op.arity() == 1);

  std::set<Assignment> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    auto r = op.Apply({View(c, start, 42, constants)}, rng);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    const Proposal& p = *r;
    CHECK(p.params != start);
    CHECK(p.params.size() == 3);
    for (const auto& [k, v] : p.params) CHECK(Allowed(c, k, v));
    CHECK(p.params.at("C") == 3);
    CHECK(p.params.at("A") * p.params.at("B") <= 256);
    CHECK(p.params.at("A") * 4 <= 16);  // A=8 is ruled out by sizeof_T=4
    CHECK(ValidateAssignment(c, p.params, constants).ok());
    CHECK(p.source_text == c.text);
    CHECK(p.source_name == "p.cu");
    CHECK(p.parents == std::vector<int64_t>{42});
    CHECK(p.op_name == "param_tweak");
    seen.insert(p.params);
  }
  // It explores: more than one neighbour turns up, and both parameters move.
  CHECK(seen.size() >= 3);
  bool a_moved = false, b_moved = false;
  for (const auto& s : seen) {
    a_moved = a_moved || s.at("A") != 2;
    b_moved = b_moved || s.at("B") != 64;
  }
  CHECK(a_moved);
  CHECK(b_moved);
}

TEST_CASE("ParamTweak: rate 0 moves exactly one parameter, rate 1 moves all", "[operators]") {
  CandidateSource c = MustParse(kFree);
  Assignment start = c.DefaultAssignment();
  for (uint64_t seed = 0; seed < 50; ++seed) {
    INFO("seed " << seed);
    std::mt19937_64 r0(seed), r1(seed);
    auto one = ParamTweak(0.0).Apply({View(c, start, 1)}, r0);
    REQUIRE(one.ok());
    CHECK(Differences(one->params, start) == 1);
    auto all = ParamTweak(1.0).Apply({View(c, start, 1)}, r1);
    REQUIRE(all.ok());
    CHECK(Differences(all->params, start) == 4);
    for (const auto& [k, v] : all->params) CHECK(Allowed(c, k, v));
  }
}

TEST_CASE("ParamTweak: deterministic for the same rng seed", "[operators]") {
  CandidateSource c = MustParse(kFree);
  Assignment start = {{"P", 2}, {"Q", 20}, {"R", 6}, {"S", 0}};
  std::set<Assignment> distinct;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    ParamTweak op1, op2;
    std::mt19937_64 a(seed), b(seed);
    // A sequence of tweaks, each from the previous child, must match step for step.
    Assignment x = start, y = start;
    for (int step = 0; step < 5; ++step) {
      auto ra = op1.Apply({View(c, x, step)}, a);
      auto rb = op2.Apply({View(c, y, step)}, b);
      REQUIRE(ra.ok());
      REQUIRE(rb.ok());
      CHECK(ra->params == rb->params);
      x = ra->params;
      y = rb->params;
    }
    distinct.insert(x);
  }
  CHECK(distinct.size() > 1);  // the seed matters
}

TEST_CASE("ParamTweak: fails cleanly without a tunable parameter", "[operators]") {
  CandidateSource fixed = MustParse(
      "// @kevolve param C 3\n"
      "// @kevolve launch k grid=1 block=32\n",
      "fixed.cu");
  std::mt19937_64 rng(1);
  auto r = ParamTweak().Apply({View(fixed, fixed.DefaultAssignment(), 1)}, rng);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error(), Contains("fixed.cu") && Contains("no tunable parameter"));

  CandidateSource none = MustParse("// @kevolve launch k grid=1 block=32\n", "none.cu");
  auto r2 = ParamTweak().Apply({View(none, {}, 1)}, rng);
  REQUIRE_FALSE(r2.ok());
  CHECK_THAT(r2.error(), Contains("no tunable parameter"));

  // Wrong number of parents, or a parent without a source.
  CandidateSource c = MustParse(kFree);
  CHECK_FALSE(ParamTweak().Apply({}, rng).ok());
  CHECK_FALSE(ParamTweak().Apply({View(c, c.DefaultAssignment(), 1), View(c, c.DefaultAssignment(), 2)}, rng).ok());
  ParentView orphan;
  CHECK_FALSE(ParamTweak().Apply({orphan}, rng).ok());
}

TEST_CASE("ParamTweak: fails cleanly when no neighbour is valid", "[operators]") {
  CandidateSource c = MustParse(
      "// @kevolve param A 1 2 3\n"
      "// @kevolve require A == 1\n"
      "// @kevolve launch k grid=1 block=32\n");
  std::mt19937_64 rng(7);
  auto r = ParamTweak().Apply({View(c, {{"A", 1}}, 1)}, rng);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error(), Contains("A=1"));
}

TEST_CASE("Crossover: values come only from the parents, child is new", "[operators]") {
  CandidateSource c = MustParse(kFree);
  Assignment pa = {{"P", 1}, {"Q", 10}, {"R", 5}, {"S", 0}};
  Assignment pb = {{"P", 4}, {"Q", 40}, {"R", 7}, {"S", 1}};
  Crossover op;
  CHECK(op.name() == "crossover");
  CHECK(op.arity() == 2);
  std::set<Assignment> seen;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    auto r = op.Apply({View(c, pa, 11), View(c, pb, 22)}, rng);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    const Proposal& p = *r;
    REQUIRE(p.params.size() == 4);
    for (const auto& [k, v] : p.params) {
      INFO(k << "=" << v);
      CHECK((v == pa.at(k) || v == pb.at(k)));
    }
    CHECK(p.params != pa);
    CHECK(p.params != pb);
    CHECK(p.parents == std::vector<int64_t>{11, 22});
    CHECK(p.op_name == "crossover");
    CHECK(p.source_text == c.text);
    seen.insert(p.params);
  }
  CHECK(seen.size() > 4);  // 14 children are possible

  // Same seed, same child.
  std::mt19937_64 r1(5), r2(5);
  auto c1 = op.Apply({View(c, pa, 1), View(c, pb, 2)}, r1);
  auto c2 = op.Apply({View(c, pa, 1), View(c, pb, 2)}, r2);
  REQUIRE(c1.ok());
  REQUIRE(c2.ok());
  CHECK(c1->params == c2->params);
}

TEST_CASE("Crossover: children satisfy the requirements", "[operators]") {
  CandidateSource c = MustParse(kTunable);
  const Env constants = {{"sizeof_T", 4}};
  Assignment pa = {{"A", 1}, {"B", 128}, {"C", 3}};
  Assignment pb = {{"A", 4}, {"B", 16}, {"C", 3}};
  // Of the two mixed children only A=1,B=16 is valid (A=4,B=128 breaks A*B <= 256).
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::mt19937_64 rng(seed);
    auto r = Crossover().Apply({View(c, pa, 1, constants), View(c, pb, 2, constants)}, rng);
    REQUIRE(r.ok());
    CHECK(r->params == Assignment{{"A", 1}, {"B", 16}, {"C", 3}});
  }
}

TEST_CASE("Crossover: refuses parents that cannot give a new child", "[operators]") {
  CandidateSource c = MustParse(kFree);
  CandidateSource other = MustParse(std::string(kFree) + "// a different source\n");
  Assignment pa = {{"P", 1}, {"Q", 10}, {"R", 5}, {"S", 0}};
  Assignment pb = {{"P", 4}, {"Q", 40}, {"R", 7}, {"S", 1}};
  std::mt19937_64 rng(3);

  auto diff = Crossover().Apply({View(c, pa, 1), View(other, pb, 2)}, rng);
  REQUIRE_FALSE(diff.ok());
  CHECK_THAT(diff.error(), Contains("do not share a source"));

  auto same = Crossover().Apply({View(c, pa, 1), View(c, pa, 2)}, rng);
  REQUIRE_FALSE(same.ok());
  CHECK_THAT(same.error(), Contains("no new valid child"));

  // Parents one parameter apart: every mix is one of the parents.
  Assignment near = pa;
  near["S"] = 1;
  CHECK_FALSE(Crossover().Apply({View(c, pa, 1), View(c, near, 2)}, rng).ok());

  CHECK_FALSE(Crossover().Apply({View(c, pa, 1)}, rng).ok());
  ParentView orphan;
  CHECK_FALSE(Crossover().Apply({View(c, pa, 1), orphan}, rng).ok());
}

TEST_CASE("SampleAssignment: honours requirements", "[operators]") {
  CandidateSource c = MustParse(kTunable);
  const Env constants = {{"sizeof_T", 4}};
  std::set<Assignment> seen;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    std::mt19937_64 rng(seed);
    auto a = SampleAssignment(c, rng, constants);
    INFO(a.status().ToString());
    REQUIRE(a.ok());
    CHECK(a->size() == 3);
    CHECK(ValidateAssignment(c, *a, constants).ok());
    CHECK(a->at("A") <= 4);
    CHECK(a->at("A") * a->at("B") <= 256);
    seen.insert(*a);
  }
  // The valid set: A=1 and A=2 with all 4 values of B, A=4 with B <= 64; never A=8.
  CHECK(seen.size() == 11);

  // Reproducible from the seed.
  std::mt19937_64 r1(99), r2(99);
  auto s1 = SampleAssignment(c, r1, constants);
  auto s2 = SampleAssignment(c, r2, constants);
  REQUIRE(s1.ok());
  REQUIRE(s2.ok());
  CHECK(*s1 == *s2);
}

TEST_CASE("SampleAssignment: errors when requirements are unsatisfiable", "[operators]") {
  CandidateSource c = MustParse(
      "// @kevolve param A 1 2 4\n"
      "// @kevolve require A > 100\n"
      "// @kevolve launch k grid=1 block=32\n",
      "never.cu");
  std::mt19937_64 rng(1);
  auto a = SampleAssignment(c, rng, {}, 50);
  REQUIRE_FALSE(a.ok());
  CHECK_THAT(a.error(), Contains("never.cu") && Contains("50"));

  // A requirement on sizeof_T: unsatisfiable for f32, satisfiable (by V=8 only) for f16.
  CandidateSource t = MustParse(
      "// @kevolve param V 8 16\n"
      "// @kevolve require V * sizeof_T <= 16\n"
      "// @kevolve launch k grid=1 block=32\n");
  CHECK_FALSE(SampleAssignment(t, rng, {{"sizeof_T", 4}}).ok());
  auto ok = SampleAssignment(t, rng, {{"sizeof_T", 2}});
  REQUIRE(ok.ok());
  CHECK(ok->at("V") == 8);
}

}  // namespace
}  // namespace kevolve

// Tests for the candidate format (core/candidate.h): the @kevolve directives in both
// launch styles, parse errors that name the line, assignment validation, resolving
// launches and scratch at a shape, and the shipped softmax seeds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "kevolve/core/candidate.h"
#include "test_util.h"

namespace kevolve {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

CandidateSource MustParse(const std::string& text, const std::string& name = "t.cu") {
  auto c = CandidateSource::Parse(text, name);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return *c;
}

std::string ParseError(const std::string& text, const std::string& name = "t.cu") {
  auto c = CandidateSource::Parse(text, name);
  INFO("source:\n" << text);
  REQUIRE_FALSE(c.ok());
  return c.error();
}

int64_t EvalOrFail(const Expr& e, const Env& env) {
  auto v = e.Eval(env);
  INFO(e.text() << ": " << v.status().ToString());
  REQUIRE(v.ok());
  return *v;
}

// One-line launches; line numbers matter for the error tests below.
const char* const kLaunchStyle =
    "// A test candidate.\n"                                                          // 1
    "// @kevolve param   BLOCK 128 256 512\n"                                         // 2
    "// @kevolve param   VEC   1..4\n"                                                // 3
    "// @kevolve require BLOCK % 32 == 0\n"                                           // 4
    "// @kevolve require VEC * sizeof_T <= 8\n"                                       // 5
    "// @kevolve require cols % VEC == 0\n"                                           // 6
    "// @kevolve require BLOCK * VEC <= 1024\n"                                       // 7
    "// @kevolve scratch partial  rows * 8 * sizeof_T\n"                              // 8
    "// @kevolve scratch counters 4 * ceil_div(rows, 4) zeroed\n"                     // 9
    "// @kevolve launch  stage1 grid=(ceil_div(rows, 4), 2) block=BLOCK smem=BLOCK * sizeof_T\n"  // 10
    "// @kevolve launch  stage2 grid=rows block=(32, 4) smem=0\n"                     // 11
    "__global__ void stage1() {}\n"                                                   // 12
    "__global__ void stage2() {}\n";                                                  // 13

// Multi-line launches: entry, then geometry lines.
const char* const kEntryStyle =
    "// @kevolve param WARPS 4 1 2 8\n"          // 1
    "\n"                                         // 2
    "// @kevolve entry k1\n"                     // 3
    "// @kevolve grid  ceil_div(rows, WARPS)\n"  // 4
    "// @kevolve block 32 * WARPS\n"             // 5
    "// @kevolve smem  WARPS * 4\n"              // 6
    "// @kevolve cluster 2, 1, 1\n"              // 7
    "int not_a_directive;\n"                     // 8
    "  //   @kevolve   entry k2\n"               // 9
    "// @kevolve block 64\n"                     // 10
    "// @kevolve grid  (cols, rows)\n";          // 11

TEST_CASE("Candidate: one-line launch directives", "[core]") {
  CandidateSource c = MustParse(kLaunchStyle);
  CHECK(c.name == "t.cu");
  CHECK(c.text == kLaunchStyle);

  REQUIRE(c.params.size() == 2);
  CHECK(c.params[0].name == "BLOCK");
  CHECK(c.params[0].values == std::vector<int64_t>{128, 256, 512});
  CHECK(c.params[0].line == 2);
  CHECK(c.params[1].name == "VEC");
  CHECK(c.params[1].values == std::vector<int64_t>{1, 2, 3, 4});
  CHECK(c.params[1].line == 3);

  REQUIRE(c.requires_.size() == 4);
  CHECK(c.requires_[0].expr.text() == "BLOCK % 32 == 0");
  CHECK(c.requires_[0].line == 4);
  CHECK(c.requires_[3].line == 7);

  REQUIRE(c.scratch.size() == 2);
  CHECK(c.scratch[0].name == "partial");
  CHECK_FALSE(c.scratch[0].zeroed);
  CHECK(c.scratch[0].line == 8);
  CHECK(c.scratch[1].name == "counters");
  CHECK(c.scratch[1].zeroed);
  CHECK(c.scratch[1].bytes.text() == "4 * ceil_div(rows, 4)");  // "zeroed" is not part of it

  REQUIRE(c.launches.size() == 2);
  const LaunchSpec& l1 = c.launches[0];
  CHECK(l1.entry == "stage1");
  CHECK(l1.line == 10);
  CHECK(l1.grid[0].text() == "ceil_div(rows, 4)");
  CHECK(l1.grid[1].text() == "2");
  CHECK(l1.grid[2].text() == "1");
  CHECK_FALSE(l1.cluster.has_value());
  Env env = {{"rows", 10}, {"BLOCK", 256}, {"sizeof_T", 4}};
  CHECK(EvalOrFail(l1.grid[0], env) == 3);
  CHECK(EvalOrFail(l1.block[0], env) == 256);
  CHECK(EvalOrFail(l1.block[1], env) == 1);
  CHECK(EvalOrFail(l1.smem, env) == 1024);
  const LaunchSpec& l2 = c.launches[1];
  CHECK(l2.entry == "stage2");
  CHECK(l2.line == 11);
  CHECK(EvalOrFail(l2.block[0], env) == 32);
  CHECK(EvalOrFail(l2.block[1], env) == 4);
  CHECK(EvalOrFail(l2.smem, env) == 0);

  CHECK(c.FindParam("VEC") == &c.params[1]);
  CHECK(c.FindParam("NOPE") == nullptr);
}

TEST_CASE("Candidate: entry directive followed by geometry lines", "[core]") {
  CandidateSource c = MustParse(kEntryStyle, "e.cu");
  REQUIRE(c.params.size() == 1);
  CHECK(c.params[0].values == std::vector<int64_t>{4, 1, 2, 8});
  REQUIRE(c.launches.size() == 2);
  CHECK(c.launches[0].entry == "k1");
  CHECK(c.launches[0].line == 3);
  REQUIRE(c.launches[0].cluster.has_value());
  CHECK(c.launches[1].entry == "k2");
  CHECK(c.launches[1].line == 9);
  CHECK_FALSE(c.launches[1].cluster.has_value());

  auto r = ResolveLaunches(c, {{"WARPS", 4}}, {{"rows", 10}, {"cols", 7}});
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  const LaunchConfig& k1 = (*r)[0];
  CHECK(k1.entry == "k1");
  CHECK(k1.grid == std::array<int64_t, 3>{3, 1, 1});
  CHECK(k1.block == std::array<int64_t, 3>{128, 1, 1});
  CHECK(k1.smem == 16);
  CHECK(k1.cluster == std::array<int64_t, 3>{2, 1, 1});
  const LaunchConfig& k2 = (*r)[1];
  CHECK(k2.entry == "k2");
  CHECK(k2.grid == std::array<int64_t, 3>{7, 10, 1});
  CHECK(k2.block == std::array<int64_t, 3>{64, 1, 1});
  CHECK(k2.smem == 0);  // default
  CHECK(k2.cluster == std::array<int64_t, 3>{0, 0, 0});
}

TEST_CASE("Candidate: several launches run in file order", "[core]") {
  CandidateSource c = MustParse(
      "// @kevolve launch a grid=1 block=32\n"
      "// @kevolve entry  b\n"
      "// @kevolve grid   2\n"
      "// @kevolve block  64\n"
      "// @kevolve launch c grid=3 block=96 smem=128\n");
  auto r = ResolveLaunches(c, {}, {});
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r->size() == 3);
  CHECK((*r)[0].entry == "a");
  CHECK((*r)[0].grid[0] == 1);
  CHECK((*r)[0].block[0] == 32);
  CHECK((*r)[1].entry == "b");
  CHECK((*r)[1].grid[0] == 2);
  CHECK((*r)[1].block[0] == 64);
  CHECK((*r)[2].entry == "c");
  CHECK((*r)[2].grid[0] == 3);
  CHECK((*r)[2].block[0] == 96);
  CHECK((*r)[2].smem == 128);
  CHECK(c.params.empty());
  CHECK(c.SpaceSize() == 1);
  CHECK(c.DefaultAssignment().empty());
}

TEST_CASE("Candidate: launch values may contain spaces and nested calls", "[core]") {
  CandidateSource c = MustParse(
      "// @kevolve param W 2 4\n"
      "// @kevolve launch k grid=ceil_div(rows, W), min(cols, 8) block=32 * W smem=W * 4 cluster=(2, 1)\n");
  auto r = ResolveLaunches(c, {{"W", 4}}, {{"rows", 9}, {"cols", 100}});
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r->size() == 1);
  CHECK((*r)[0].grid == std::array<int64_t, 3>{3, 8, 1});
  CHECK((*r)[0].block == std::array<int64_t, 3>{128, 1, 1});
  CHECK((*r)[0].smem == 16);
  CHECK((*r)[0].cluster == std::array<int64_t, 3>{2, 1, 1});
}

TEST_CASE("Candidate: CRLF line endings are accepted", "[core]") {
  CandidateSource c = MustParse(
      "// @kevolve param B 32 64\r\n"
      "// @kevolve launch k grid=rows block=B\r\n");
  REQUIRE(c.params.size() == 1);
  CHECK(c.params[0].values == std::vector<int64_t>{32, 64});
  auto r = ResolveLaunches(c, {{"B", 64}}, {{"rows", 5}});
  REQUIRE(r.ok());
  CHECK((*r)[0].block[0] == 64);
}

TEST_CASE("Candidate: scratch with and without zeroed", "[core]") {
  CandidateSource c = MustParse(
      "// @kevolve scratch a 1024\n"
      "// @kevolve scratch b rows * sizeof_T zeroed\n"
      "// @kevolve scratch c (rows + 1) * 4\n"
      "// @kevolve launch k grid=1 block=1\n");
  REQUIRE(c.scratch.size() == 3);
  CHECK(c.scratch[0].name == "a");
  CHECK_FALSE(c.scratch[0].zeroed);
  CHECK(c.scratch[1].name == "b");
  CHECK(c.scratch[1].zeroed);
  CHECK(c.scratch[1].bytes.text() == "rows * sizeof_T");
  CHECK_FALSE(c.scratch[2].zeroed);
  auto r = ResolveScratch(c, {}, {{"rows", 100}, {"sizeof_T", 2}});
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(*r == std::vector<int64_t>{1024, 200, 404});
}

TEST_CASE("Candidate: params with lists and ranges", "[core]") {
  CandidateSource c = MustParse(
      "// @kevolve param A 8 16..18 4\n"
      "// @kevolve param B -2..2\n"
      "// @kevolve param C 7\n"
      "// @kevolve param D 5..5\n"
      "// @kevolve launch k grid=1 block=1\n");
  REQUIRE(c.params.size() == 4);
  CHECK(c.params[0].values == std::vector<int64_t>{8, 16, 17, 18, 4});  // file order kept
  CHECK(c.params[1].values == std::vector<int64_t>{-2, -1, 0, 1, 2});
  CHECK(c.params[2].values == std::vector<int64_t>{7});
  CHECK(c.params[3].values == std::vector<int64_t>{5});
  CHECK(c.SpaceSize() == 5 * 5 * 1 * 1);
  CHECK(c.DefaultAssignment() == Assignment{{"A", 8}, {"B", -2}, {"C", 7}, {"D", 5}});
}

TEST_CASE("Candidate: presets are whole assignments, the rest at defaults, checked against the params", "[core]") {
  CandidateSource c = MustParse(
      "// @kevolve preset B=4 A=16\n"   // before the params it names: presets are read last
      "// @kevolve param A 8 16 32\n"
      "// @kevolve param B 1 2 4\n"
      "// @kevolve param C 0 1\n"
      "// @kevolve preset C=1, A=32\n"  // commas are accepted too
      "// @kevolve launch k grid=1 block=1\n");
  REQUIRE(c.presets.size() == 2);
  CHECK(c.presets[0] == Assignment{{"A", 16}, {"B", 4}, {"C", 0}});
  CHECK(c.presets[1] == Assignment{{"A", 32}, {"B", 1}, {"C", 1}});
  const std::string params = "// @kevolve param A 8 16\n// @kevolve launch k grid=1 block=1\n";
  CHECK_THAT(ParseError("// @kevolve preset Z=1\n" + params), StartsWith("t.cu:1:") && Contains("'Z' is no declared param"));
  CHECK_THAT(ParseError("// @kevolve preset A=12\n" + params), Contains("A=12 is not one of A's values"));
  CHECK_THAT(ParseError("// @kevolve preset A\n" + params), Contains("'A' is not NAME=VALUE"));
  CHECK_THAT(ParseError("// @kevolve preset A=x\n" + params), Contains("needs an integer value"));
  CHECK_THAT(ParseError("// @kevolve preset A=8 A=16\n" + params), Contains("'A' given twice"));
  CHECK_THAT(ParseError("// @kevolve preset\n" + params), Contains("at least one NAME=VALUE"));
  // CRLF endings, tabs.
  CandidateSource crlf = MustParse("//\t@kevolve\tpreset\tA=16\r\n// @kevolve param A 8 16\r\n// @kevolve launch k grid=1 block=1\r\n");
  REQUIRE(crlf.presets.size() == 1);
  CHECK(crlf.presets[0] == Assignment{{"A", 16}});
  // Lines that are preset directives, as the parser reads them, and nothing else.
  CHECK(DirectiveKeyword("  //\t@kevolve   preset A=1\r") == "preset");
  CHECK(DirectiveKeyword("// @kevolve param X 1 2  // see preset") == "param");
  CHECK(DirectiveKeyword("/* @kevolve preset A=1 */").empty());
  CHECK(DirectiveKeyword("int x; // @kevolve preset A=1").empty());
  CHECK(WithoutPresets("a\n// @kevolve preset A=1\n// @kevolve param A 1\nb") == "a\n// @kevolve param A 1\nb");
  CHECK(WithoutPresets("a\n//\t@kevolve preset A=1\n") == "a\n");
}

TEST_CASE("Candidate: require directives", "[core]") {
  CandidateSource c = MustParse(
      "// @kevolve param X 1 2 3\n"
      "// @kevolve require X != 2\n"
      "// @kevolve require n % X == 0 || X == 1\n"
      "// @kevolve launch k grid=1 block=1\n");
  REQUIRE(c.requires_.size() == 2);
  CHECK(c.requires_[0].line == 2);
  CHECK(c.requires_[1].line == 3);
  CHECK(c.requires_[1].expr.Variables() == std::set<std::string>{"X", "n"});
  CHECK(ValidateAssignment(c, {{"X", 1}}).ok());
  CHECK(ValidateAssignment(c, {{"X", 3}}).ok());  // the size-dependent one is left for later
  Status s = ValidateAssignment(c, {{"X", 2}});
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.message(), StartsWith("t.cu:2:") && Contains("X != 2"));
  CHECK(CheckRequirements(c, {{"X", 3}}, {{"n", 9}}).ok());
  Status t = CheckRequirements(c, {{"X", 3}}, {{"n", 10}});
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.message(), StartsWith("t.cu:3:") && Contains("fails"));
}

TEST_CASE("Candidate: parse errors name the file and line", "[core]") {
  SECTION("unknown directive") {
    std::string e = ParseError(
        "// @kevolve param X 1\n"
        "// @kevolve parm Y 2\n"
        "// @kevolve launch k grid=1 block=1\n");
    CHECK_THAT(e, StartsWith("t.cu:2:") && Contains("unknown directive 'parm'"));
  }
  SECTION("duplicate param") {
    std::string e = ParseError(
        "// @kevolve param X 1 2\n"
        "// @kevolve launch k grid=1 block=1\n"
        "// @kevolve param X 3\n");
    CHECK_THAT(e, StartsWith("t.cu:3:") && Contains("'X'") && Contains("twice"));
  }
  SECTION("param with no values") {
    std::string e = ParseError(
        "\n"
        "// @kevolve param X\n"
        "// @kevolve launch k grid=1 block=1\n");
    CHECK_THAT(e, StartsWith("t.cu:2:") && Contains("X") && Contains("no values"));
  }
  SECTION("param value that is not an integer") {
    CHECK_THAT(ParseError("// @kevolve param X 1 abc\n// @kevolve launch k grid=1 block=1\n"),
               StartsWith("t.cu:1:") && Contains("'abc'"));
    CHECK_THAT(ParseError("// @kevolve launch k grid=1 block=1\n// @kevolve param X 1.5\n"),
               StartsWith("t.cu:2:") && Contains("'1.5'"));
    CHECK_THAT(ParseError("// @kevolve param X 12x\n// @kevolve launch k grid=1 block=1\n"),
               StartsWith("t.cu:1:") && Contains("'12x'"));
    CHECK_THAT(ParseError("// @kevolve param X 4..1\n// @kevolve launch k grid=1 block=1\n"),
               StartsWith("t.cu:1:") && Contains("'4..1'"));
    CHECK_THAT(ParseError("// @kevolve param X 1..\n// @kevolve launch k grid=1 block=1\n"),
               StartsWith("t.cu:1:") && Contains("'1..'"));
    CHECK_THAT(ParseError("// @kevolve param X 99999999999999999999\n// @kevolve launch k grid=1 block=1\n"),
               StartsWith("t.cu:1:"));
  }
  SECTION("param lists a value twice") {
    CHECK_THAT(ParseError("// @kevolve param X 1 2 1\n// @kevolve launch k grid=1 block=1\n"),
               StartsWith("t.cu:1:") && Contains("twice"));
    CHECK_THAT(ParseError("// @kevolve param X 1..3 2\n// @kevolve launch k grid=1 block=1\n"),
               StartsWith("t.cu:1:") && Contains("twice"));
  }
  SECTION("reserved param names") {
    CHECK_THAT(ParseError("// @kevolve param sizeof_T 1\n// @kevolve launch k grid=1 block=1\n"),
               StartsWith("t.cu:1:") && Contains("reserved"));
    CHECK_THAT(ParseError("// @kevolve param T 1\n// @kevolve launch k grid=1 block=1\n"),
               StartsWith("t.cu:1:") && Contains("reserved"));
  }
  SECTION("missing grid") {
    std::string e = ParseError(
        "// @kevolve param X 1\n"
        "// @kevolve launch k block=32\n");
    CHECK_THAT(e, StartsWith("t.cu:2:") && Contains("'k'") && Contains("no grid"));
    std::string f = ParseError(
        "// @kevolve launch a grid=1 block=1\n"
        "// @kevolve entry b\n"
        "// @kevolve block 32\n");
    CHECK_THAT(f, StartsWith("t.cu:2:") && Contains("'b'") && Contains("no grid"));
  }
  SECTION("missing block") {
    std::string e = ParseError(
        "// @kevolve entry b\n"
        "// @kevolve grid 4\n");
    CHECK_THAT(e, StartsWith("t.cu:1:") && Contains("no block"));
  }
  SECTION("geometry before any entry") {
    std::string e = ParseError(
        "// @kevolve param X 1\n"
        "// @kevolve grid 4\n"
        "// @kevolve entry k\n"
        "// @kevolve block 4\n");
    CHECK_THAT(e, StartsWith("t.cu:2:") && Contains("grid") && Contains("before"));
  }
  SECTION("bad expression") {
    std::string e = ParseError(
        "// @kevolve param X 1\n"
        "\n"
        "// @kevolve launch k grid=rows+ block=32\n");
    CHECK_THAT(e, StartsWith("t.cu:3:") && Contains("rows+") && Contains("at column"));
    CHECK_THAT(ParseError("// @kevolve require X >\n// @kevolve launch k grid=1 block=1\n"),
               StartsWith("t.cu:1:") && Contains("require"));
    CHECK_THAT(ParseError("// @kevolve launch k grid=1 block=1\n// @kevolve scratch s 4 * (rows\n"),
               StartsWith("t.cu:2:") && Contains("expected ')'"));
    CHECK_THAT(ParseError("// @kevolve entry k\n// @kevolve grid 1\n// @kevolve block foo(2)\n"),
               StartsWith("t.cu:3:") && Contains("unknown function 'foo'"));
  }
  SECTION("geometry given twice") {
    CHECK_THAT(ParseError("// @kevolve launch k grid=1 grid=2 block=1\n"),
               StartsWith("t.cu:1:") && Contains("twice"));
    CHECK_THAT(ParseError("// @kevolve launch k grid=1 block=1\n// @kevolve grid 2\n"),
               StartsWith("t.cu:2:") && Contains("twice"));
  }
  SECTION("malformed launch and entry lines") {
    CHECK_THAT(ParseError("// @kevolve launch k\n"), StartsWith("t.cu:1:"));
    CHECK_THAT(ParseError("// @kevolve launch k junk grid=1 block=1\n"), StartsWith("t.cu:1:"));
    CHECK_THAT(ParseError("// @kevolve launch grid=1 block=1\n"), StartsWith("t.cu:1:"));
    CHECK_THAT(ParseError("// @kevolve launch k grid=(1, 2, 3, 4) block=1\n"),
               StartsWith("t.cu:1:") && Contains("3 dimensions"));
    CHECK_THAT(ParseError("// @kevolve entry\n"), StartsWith("t.cu:1:"));
    CHECK_THAT(ParseError("// @kevolve entry a b\n"), StartsWith("t.cu:1:"));
    CHECK_THAT(ParseError("// @kevolve scratch\n// @kevolve launch k grid=1 block=1\n"), StartsWith("t.cu:1:"));
    CHECK_THAT(ParseError("// @kevolve launch k grid=1 block=1\n// @kevolve scratch s\n"),
               StartsWith("t.cu:2:") && Contains("missing expression"));
  }
  SECTION("no launch at all") {
    std::string e = ParseError(
        "// @kevolve param X 1 2\n"
        "__global__ void k() {}\n",
        "nolaunch.cu");
    CHECK_THAT(e, StartsWith("nolaunch.cu:") && Contains("launch"));
    CHECK_THAT(ParseError("", "empty.cu"), StartsWith("empty.cu:"));
  }
}

TEST_CASE("Candidate: ValidateAssignment", "[core]") {
  CandidateSource c = MustParse(kLaunchStyle);
  const Env f32 = {{"sizeof_T", 4}};
  const Env f16 = {{"sizeof_T", 2}};

  CHECK(ValidateAssignment(c, {{"BLOCK", 256}, {"VEC", 2}}, f32).ok());

  SECTION("value not allowed") {
    Status s = ValidateAssignment(c, {{"BLOCK", 100}, {"VEC", 2}}, f32);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Contains("BLOCK=100") && Contains("allowed"));
    CHECK_FALSE(ValidateAssignment(c, {{"BLOCK", 256}, {"VEC", 5}}, f32).ok());
    CHECK_FALSE(ValidateAssignment(c, {{"BLOCK", 256}, {"VEC", 0}}, f32).ok());
  }
  SECTION("missing param") {
    Status s = ValidateAssignment(c, {{"BLOCK", 256}}, f32);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Contains("VEC") && Contains("not assigned"));
    CHECK_FALSE(ValidateAssignment(c, {}, f32).ok());
  }
  SECTION("extra param") {
    Status s = ValidateAssignment(c, {{"BLOCK", 256}, {"VEC", 2}, {"EXTRA", 1}}, f32);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Contains("'EXTRA'") && Contains("not a parameter"));
  }
  SECTION("requirement on parameters fails") {
    Status s = ValidateAssignment(c, {{"BLOCK", 512}, {"VEC", 1}}, f16);
    CHECK(s.ok());
    s = ValidateAssignment(c, {{"BLOCK", 512}, {"VEC", 3}}, f16);  // 512*3 > 1024
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), StartsWith("t.cu:7:") && Contains("BLOCK * VEC <= 1024") &&
                                Contains("BLOCK=512,VEC=3"));
  }
  SECTION("requirement reading sizeof_T through constants") {
    Assignment vec4 = {{"BLOCK", 128}, {"VEC", 4}};
    Status s = ValidateAssignment(c, vec4, f32);  // 4 * 4 > 8
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), StartsWith("t.cu:5:") && Contains("sizeof_T"));
    CHECK(ValidateAssignment(c, vec4, f16).ok());  // 4 * 2 <= 8
    // Without sizeof_T the requirement cannot be judged yet and is left for later.
    CHECK(ValidateAssignment(c, vec4).ok());
    CHECK_FALSE(ValidateAssignment(c, {{"BLOCK", 128}, {"VEC", 3}}, f32).ok());
  }
}

TEST_CASE("Candidate: ResolveLaunches and ResolveScratch at a shape", "[core]") {
  CandidateSource c = MustParse(kLaunchStyle);
  Assignment a = {{"BLOCK", 256}, {"VEC", 2}};
  Env env = {{"rows", 10}, {"cols", 64}, {"sizeof_T", 4}};

  auto l = ResolveLaunches(c, a, env);
  INFO(l.status().ToString());
  REQUIRE(l.ok());
  REQUIRE(l->size() == 2);
  CHECK((*l)[0].entry == "stage1");
  CHECK((*l)[0].grid == std::array<int64_t, 3>{3, 2, 1});
  CHECK((*l)[0].block == std::array<int64_t, 3>{256, 1, 1});
  CHECK((*l)[0].smem == 1024);
  CHECK((*l)[0].cluster == std::array<int64_t, 3>{0, 0, 0});
  CHECK((*l)[1].entry == "stage2");
  CHECK((*l)[1].grid == std::array<int64_t, 3>{10, 1, 1});
  CHECK((*l)[1].block == std::array<int64_t, 3>{32, 4, 1});
  CHECK((*l)[1].smem == 0);

  auto s = ResolveScratch(c, a, env);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  CHECK(*s == std::vector<int64_t>{10 * 8 * 4, 4 * 3});

  // Another shape and type give other numbers from the same source.
  auto l2 = ResolveLaunches(c, {{"BLOCK", 128}, {"VEC", 1}}, {{"rows", 4096}, {"cols", 1024}, {"sizeof_T", 2}});
  REQUIRE(l2.ok());
  CHECK((*l2)[0].grid[0] == 1024);
  CHECK((*l2)[0].block[0] == 128);
  CHECK((*l2)[0].smem == 256);
  CHECK((*l2)[1].grid[0] == 4096);

  SECTION("a size missing from the env is an error naming the line and the name") {
    auto bad = ResolveLaunches(c, a, {{"cols", 64}, {"sizeof_T", 4}});
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.error(), StartsWith("t.cu:10:") && Contains("'rows'"));
    auto bs = ResolveScratch(c, a, {{"cols", 64}});
    REQUIRE_FALSE(bs.ok());
    CHECK_THAT(bs.error(), StartsWith("t.cu:8:") && Contains("partial"));
  }
  SECTION("a zero grid dimension is an error") {
    auto bad = ResolveLaunches(c, a, {{"rows", 0}, {"cols", 64}, {"sizeof_T", 4}});
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.error(), StartsWith("t.cu:10:") && Contains("non-positive"));
  }
  SECTION("negative smem and scratch sizes are errors") {
    CandidateSource n = MustParse(
        "// @kevolve scratch s rows - 10\n"
        "// @kevolve launch k grid=1 block=1 smem=rows - 10\n");
    auto ln = ResolveLaunches(n, {}, {{"rows", 5}});
    REQUIRE_FALSE(ln.ok());
    CHECK_THAT(ln.error(), StartsWith("t.cu:2:") && Contains("negative"));
    auto sn = ResolveScratch(n, {}, {{"rows", 5}});
    REQUIRE_FALSE(sn.ok());
    CHECK_THAT(sn.error(), StartsWith("t.cu:1:") && Contains("negative"));
    CHECK(ResolveScratch(n, {}, {{"rows", 10}}).ok());
  }
}

TEST_CASE("Candidate: CheckRequirements with sizes", "[core]") {
  CandidateSource c = MustParse(kLaunchStyle);
  Assignment a = {{"BLOCK", 256}, {"VEC", 4}};
  CHECK(CheckRequirements(c, a, {{"rows", 3}, {"cols", 1024}, {"sizeof_T", 2}}).ok());
  Status s = CheckRequirements(c, a, {{"rows", 3}, {"cols", 1022}, {"sizeof_T", 2}});
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.message(), StartsWith("t.cu:6:") && Contains("cols % VEC == 0"));
  // Parameter-only requirements are checked here, too.
  Status t = CheckRequirements(c, a, {{"rows", 3}, {"cols", 1024}, {"sizeof_T", 4}});
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.message(), StartsWith("t.cu:5:"));
  // A name the env does not have is an error, not a pass.
  Status u = CheckRequirements(c, a, {{"rows", 3}, {"sizeof_T", 2}});
  REQUIRE_FALSE(u.ok());
  CHECK_THAT(u.message(), Contains("'cols'"));
}

TEST_CASE("Candidate: CheckCandidateNames", "[core]") {
  CandidateSource c = MustParse(kLaunchStyle);
  CHECK(CheckCandidateNames(c, {"rows", "cols"}).ok());
  Status s = CheckCandidateNames(c, {"rows"});
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.message(), StartsWith("t.cu:6:") && Contains("unknown name 'cols'"));

  CandidateSource typo = MustParse(
      "// @kevolve param B 32 64\n"
      "// @kevolve launch k grid=ceil_div(rowz, 4) block=B\n");
  Status t = CheckCandidateNames(typo, {"rows", "cols"});
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.message(), StartsWith("t.cu:2:") && Contains("'rowz'") && Contains("grid"));

  CandidateSource builtins = MustParse(
      "// @kevolve scratch s num_sms * sizeof_T * n\n"
      "// @kevolve launch k grid=num_sms block=32\n");
  CHECK(CheckCandidateNames(builtins, {"n"}).ok());
  Status u = CheckCandidateNames(builtins, {"m"});
  REQUIRE_FALSE(u.ok());
  CHECK_THAT(u.message(), StartsWith("t.cu:1:") && Contains("'n'"));
}

TEST_CASE("Candidate: DefaultAssignment, SpaceSize and AssignmentString", "[core]") {
  CandidateSource c = MustParse(kLaunchStyle);
  CHECK(c.DefaultAssignment() == Assignment{{"BLOCK", 128}, {"VEC", 1}});
  CHECK(c.SpaceSize() == 3 * 4);
  CandidateSource e = MustParse(kEntryStyle);
  CHECK(e.DefaultAssignment() == Assignment{{"WARPS", 4}});
  CHECK(e.SpaceSize() == 4);

  // The product saturates instead of overflowing: 4096^6 = 2^72.
  std::string big;
  for (int i = 0; i < 6; ++i) big += "// @kevolve param P" + std::to_string(i) + " 0..4095\n";
  big += "// @kevolve launch k grid=1 block=1\n";
  CandidateSource b = MustParse(big);
  CHECK(b.params[0].values.size() == 4096);
  CHECK(b.SpaceSize() == std::numeric_limits<int64_t>::max());

  CHECK(AssignmentString({{"VEC", 4}, {"BLOCK", 256}}) == "BLOCK=256,VEC=4");
  CHECK(AssignmentString({{"X", -1}}) == "X=-1");
  CHECK(AssignmentString({}).empty());
}

TEST_CASE("Candidate: the shipped softmax seeds parse and validate", "[core]") {
  fs::path dir = testing::SourceRoot() / "configs" / "ops" / "softmax" / "seeds";
  REQUIRE(fs::is_directory(dir));
  std::vector<fs::path> seeds;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".cu") seeds.push_back(e.path());
  std::sort(seeds.begin(), seeds.end());
  REQUIRE(seeds.size() >= 2);
  for (const auto& p : seeds) {
    INFO("seed " << p.string());
    std::string text = testing::ReadFile(p);
    REQUIRE_FALSE(text.empty());
    auto c = CandidateSource::Parse(text, p.filename().string());
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    CHECK_FALSE(c->params.empty());
    CHECK_FALSE(c->launches.empty());
    CHECK(c->SpaceSize() > 1);
    CHECK(CheckCandidateNames(*c, {"rows", "cols"}).ok());
    Assignment def = c->DefaultAssignment();
    for (int64_t sz : {4, 2}) {
      INFO("sizeof_T=" << sz);
      Env constants = {{"sizeof_T", sz}};
      Status v = ValidateAssignment(*c, def, constants);
      INFO(v.ToString());
      CHECK(v.ok());
      Env env = {{"rows", 4096}, {"cols", 1024}, {"sizeof_T", sz}, {"num_sms", 132}};
      Status r = CheckRequirements(*c, def, env);
      INFO(r.ToString());
      CHECK(r.ok());
      auto l = ResolveLaunches(*c, def, env);
      INFO(l.status().ToString());
      REQUIRE(l.ok());
      for (const auto& lc : *l) {
        CHECK(lc.block[0] * lc.block[1] * lc.block[2] <= 1024);
        CHECK(lc.grid[0] >= 1);
      }
    }
  }
}

TEST_CASE("ParseParamSweep reads NAME=V1,V2,... and says what is wrong", "[candidate]") {
  auto sw = ParseParamSweep("BLOCK=128,256,-1");
  REQUIRE(sw.ok());
  CHECK(sw->name == "BLOCK");
  CHECK(sw->values == std::vector<int64_t>{128, 256, -1});
  auto one = ParseParamSweep("SHIFT=1");
  REQUIRE(one.ok());
  CHECK(one->values == std::vector<int64_t>{1});
  for (const char* bad : {"BLOCK", "=1,2", "BLOCK=", "BLOCK=1,,2", "BLOCK=1,2,", "BLOCK=1x", "BLOCK=1,2,1"}) {
    INFO(bad);
    auto r = ParseParamSweep(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().find(std::string("'") + bad + "'") == 0);  // the error quotes the text
  }
  CHECK(ParseParamSweep("BLOCK=1,2,1").error().find("the value 1 is given twice") != std::string::npos);
  CHECK(ParseParamSweep("BLOCK=1,x").error().find("'x' is not an integer value of BLOCK") != std::string::npos);
}

TEST_CASE("ExpandSweeps makes the cross product on top of the base, first sweep slowest", "[candidate]") {
  const Assignment base = {{"BLOCK", 256}, {"CHUNKS", 4}, {"VEC", 16}};
  auto none = ExpandSweeps(base, {}, 8);
  REQUIRE(none.ok());
  REQUIRE(none->size() == 1);
  CHECK((*none)[0] == base);

  auto two = ExpandSweeps(base, {{"SHIFT", {0, 1}}, {"CHUNKS", {2, 8, 4}}}, 6);
  REQUIRE(two.ok());
  REQUIRE(two->size() == 6);
  const std::vector<std::pair<int64_t, int64_t>> order = {{0, 2}, {0, 8}, {0, 4}, {1, 2}, {1, 8}, {1, 4}};
  for (size_t i = 0; i < order.size(); ++i) {
    INFO(i);
    const Assignment& a = (*two)[i];
    CHECK(a.at("SHIFT") == order[i].first);
    CHECK(a.at("CHUNKS") == order[i].second);  // the swept value replaces the base's 4
    CHECK(a.at("BLOCK") == 256);
    CHECK(a.at("VEC") == 16);
  }
  auto big = ExpandSweeps(base, {{"SHIFT", {0, 1}}, {"CHUNKS", {2, 8, 4}}}, 5);
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().find("more than 5 assignments") != std::string::npos);
  auto twice = ExpandSweeps(base, {{"SHIFT", {0}}, {"SHIFT", {1}}}, 8);
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.error() == "SHIFT is swept twice");
}

}  // namespace
}  // namespace kevolve

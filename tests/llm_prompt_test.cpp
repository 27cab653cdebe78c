// Tests for prompt assembly within a size budget (operators/src/llm/prompt.cpp).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "kevolve/operators/llm/prompt.h"

namespace kevolve::llm {
namespace {

// `n` numbered lines of about 40 characters each.
std::string Lines(const std::string& tag, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += tag + " line " + std::to_string(i) + " ...........................\n";
  return out;
}

bool Has(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v)
    if (x == s) return true;
  return false;
}

}  // namespace

TEST_CASE("sections render in order and fit untouched when within budget", "[llm]") {
  BuiltPrompt p = BuildPrompt("SYS", {{"A", "alpha", 1, true}, {"B", "beta\n", 5, false}}, 10000);
  CHECK(p.system == "SYS");
  CHECK(p.user == "## A\n\nalpha\n\n## B\n\nbeta\n\n");
  CHECK(p.dropped.empty());
  CHECK(p.chars() == 3 + p.user.size());
}

TEST_CASE("the lowest-priority sections are trimmed, then dropped, first", "[llm]") {
  std::string system = SystemPrompt(false);
  std::vector<PromptSection> sections = {
      {"Op", Lines("op", 20), 100, false},          {"Parent", Lines("parent", 60), 90, true},
      {"Inspiration", Lines("insp", 60), 10, true}, {"Snippets", Lines("snip", 60), 20, true},
      {"Failures", Lines("fail", 20), 5, false},
  };
  size_t full = BuildPrompt(system, sections, 1000000).chars();

  SECTION("a little over: only the lowest priority goes") {
    BuiltPrompt p = BuildPrompt(system, sections, full - 100);
    CHECK(p.chars() <= full - 100);
    CHECK(p.dropped == std::vector<std::string>{"Failures"});
    CHECK(p.user.find("## Failures") == std::string::npos);
    CHECK(p.user.find("## Inspiration") != std::string::npos);
  }
  SECTION("more: the next trimmable one is halved at a line boundary with a marker") {
    size_t budget = full - Lines("fail", 20).size() - 1000;
    BuiltPrompt p = BuildPrompt(system, sections, budget);
    CHECK(p.chars() <= budget);
    CHECK(p.dropped == std::vector<std::string>{"Failures", "Inspiration"});
    size_t at = p.user.find("## Inspiration\n\n");
    REQUIRE(at != std::string::npos);
    size_t marker = p.user.find("[... trimmed ", at);
    REQUIRE(marker != std::string::npos);
    CHECK(p.user[marker - 1] == '\n');
    CHECK(p.user.substr(marker).find(" lines]\n\n## Snippets") != std::string::npos);
    CHECK(p.user.find(Lines("parent", 60)) != std::string::npos);  // untouched
  }
  SECTION("tight: high priority survives, the system prompt is never cut") {
    size_t budget = system.size() + Lines("op", 20).size() + 400;
    BuiltPrompt p = BuildPrompt(system, sections, budget);
    CHECK(p.chars() <= budget);
    CHECK(p.system == system);
    CHECK(p.user.find(Lines("op", 20)) != std::string::npos);
    CHECK(Has(p.dropped, "Failures"));
    CHECK(Has(p.dropped, "Inspiration"));
    CHECK(Has(p.dropped, "Snippets"));
    CHECK(Has(p.dropped, "Parent"));
    CHECK(p.user.find("## Inspiration") == std::string::npos);
    CHECK(p.user.find("## Snippets") == std::string::npos);
    CHECK_FALSE(Has(p.dropped, "Op"));
  }
  SECTION("order of the survivors is kept") {
    BuiltPrompt p = BuildPrompt(system, sections, full - 100);
    size_t op = p.user.find("## Op"), parent = p.user.find("## Parent"), insp = p.user.find("## Inspiration"),
           snip = p.user.find("## Snippets");
    CHECK(op < parent);
    CHECK(parent < insp);
    CHECK(insp < snip);
  }
  SECTION("a system prompt larger than the budget is kept whole") {
    BuiltPrompt p = BuildPrompt(system, sections, 10);
    CHECK(p.system == system);
    CHECK(p.user.empty());
    CHECK(p.dropped.size() == sections.size());
  }
}

TEST_CASE("required sections are never cut; a budget they exceed gives fits = false", "[llm]") {
  const std::vector<PromptSection> sections = {
      {"Task", "do it", 100, false, true},
      {"Parent", Lines("parent", 50), 90, false, true},
      {"Notes", Lines("note", 50), 30, true},
  };
  const size_t full = BuildPrompt("SYS", sections, 1000000).chars();
  const size_t required = BuildPrompt("SYS", {sections[0], sections[1]}, 1000000).chars();
  SECTION("room for the required sections: the others go first, and it fits") {
    BuiltPrompt p = BuildPrompt("SYS", sections, required + 10);
    CHECK(p.fits);
    CHECK(p.user.find(Lines("parent", 50)) != std::string::npos);  // whole
    CHECK(p.user.find("## Notes") == std::string::npos);
    CHECK(Has(p.dropped, "Notes"));
  }
  SECTION("no room: the parent stays whole, everything else goes, and it does not fit") {
    BuiltPrompt p = BuildPrompt("SYS", sections, required / 2);
    CHECK_FALSE(p.fits);
    CHECK(p.user.find(Lines("parent", 50)) != std::string::npos);
    CHECK(p.user.find("## Task") != std::string::npos);
    CHECK(p.user.find("## Notes") == std::string::npos);
    CHECK(p.chars() == required);
  }
  CHECK(BuildPrompt("SYS", sections, full).fits);
}

TEST_CASE("a single long line is trimmed inside the line", "[llm]") {
  std::string body(5000, 'x');
  BuiltPrompt p = BuildPrompt("", {{"Log", body, 1, true}}, 3000);
  CHECK(p.chars() <= 3000);
  CHECK(p.user.find("[... trimmed 1 lines]") != std::string::npos);
  CHECK(p.dropped == std::vector<std::string>{"Log"});
}

TEST_CASE("trimming stops at the minimum, then drops the section", "[llm]") {
  BuiltPrompt p = BuildPrompt("", {{"Keep", "k", 9, false}, {"Log", Lines("log", 100), 1, true}}, 100);
  CHECK(p.chars() <= 100);
  CHECK(p.user == "## Keep\n\nk\n\n");
  CHECK(p.dropped == std::vector<std::string>{"Log"});
}

TEST_CASE("the system prompts state the rules and the output format", "[llm]") {
  std::string rewrite = SystemPrompt(false), diff = SystemPrompt(true);
  for (const std::string& s : {rewrite, diff}) {
    CHECK(s.find("@kevolve") != std::string::npos);
    CHECK(s.find("extern \"C\" __global__") != std::string::npos);
    CHECK(s.find("kv::to_float") != std::string::npos);
    CHECK(s.find("KV_DTYPE_") != std::string::npos);
    CHECK(s.find("printf") != std::string::npos);
    CHECK(s.find("guard") != std::string::npos);
  }
  CHECK(rewrite.find("```cuda") != std::string::npos);
  CHECK(rewrite.find("<<<<<<< SEARCH") == std::string::npos);
  CHECK(diff.find("<<<<<<< SEARCH\n") != std::string::npos);
  CHECK(diff.find("\n=======\n") != std::string::npos);
  CHECK(diff.find("\n>>>>>>> REPLACE\n") != std::string::npos);
}

}  // namespace kevolve::llm

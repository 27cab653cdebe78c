// Tests for reply parsing (operators/src/llm/response.cpp): code blocks among markdown
// noise, SEARCH/REPLACE edits with whitespace drift, and every way a reply can fail.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "kevolve/operators/llm/response.h"

namespace kevolve::llm {
namespace {

const std::string kParent =
    "// @kevolve param BLOCK 256 128\n"
    "// @kevolve launch k grid=rows block=BLOCK\n"
    "extern \"C\" __global__ void k(const T* x, T* y, int rows, int cols) {\n"
    "  int r = blockIdx.x;\n"
    "  if (r >= rows) return;\n"
    "  for (int c = threadIdx.x; c < cols; c += BLOCK) {\n"
    "    y[(size_t)r * cols + c] = x[(size_t)r * cols + c];\n"
    "  }\n"
    "}\n";

std::string Edit(const std::string& search, const std::string& replace) {
  return "<<<<<<< SEARCH\n" + search + "=======\n" + replace + ">>>>>>> REPLACE\n";
}

}  // namespace

TEST_CASE("ExtractCodeBlock finds the kernel among markdown noise", "[llm]") {
  std::string reply =
      "Sure! Here is an **improved** version.\n\n"
      "First, the idea in pseudo-code:\n"
      "```python\nfor row in rows:\n    y[row] = softmax(x[row])  # a long python line, longer than the kernel?\n"
      "    more = 'padding padding padding padding padding padding padding padding padding'\n```\n"
      "Then the kernel:\n\n"
      "```cuda\n"
      "// @kevolve launch k grid=rows block=256\n"
      "extern \"C\" __global__ void k(const T* x, T* y, int rows, int cols) {}\n"
      "```\n"
      "And a helper you might like:\n"
      "```cpp\n__device__ float twice(float v) { return 2 * v; }\n```\n"
      "Hope this helps!";
  Result<std::string> code = ExtractCodeBlock(reply);
  REQUIRE(code.ok());
  CHECK(*code ==
        "// @kevolve launch k grid=rows block=256\n"
        "extern \"C\" __global__ void k(const T* x, T* y, int rows, int cols) {}\n");
}

TEST_CASE("ExtractCodeBlock prefers the longest kernel block, then the longest block", "[llm]") {
  std::string small = "```cu\n__global__ void a() {}\n```\n";
  std::string large = "```c++\n__global__ void b() {\n  int i = 0;\n}\n```\n";
  std::string plain_long = "```\nint helper_function_with_a_very_long_name_and_no_kernel_at_all = 1;\n```\n";
  Result<std::string> code = ExtractCodeBlock(small + plain_long + large);
  REQUIRE(code.ok());
  CHECK(*code == "__global__ void b() {\n  int i = 0;\n}\n");

  // No block looks like a kernel: the longest code block wins.
  code = ExtractCodeBlock("```c\nint a;\n```\ntext\n```\nint bb = 2;\n```\n");
  REQUIRE(code.ok());
  CHECK(*code == "int bb = 2;\n");

  // Case and info strings after the language are tolerated; indented fences too.
  code = ExtractCodeBlock("  ```CUDA title=k.cu\n  __global__ void c() {}\n  ```\n");
  REQUIRE(code.ok());
  CHECK(*code == "__global__ void c() {}\n");
}

TEST_CASE("a reply with no code is an error, never a crash", "[llm]") {
  for (const std::string& reply :
       {std::string(), std::string("I can't help with that."), std::string("```python\nprint('__global__')\n```\n"),
        std::string("```\n```\n"), std::string("````"), std::string("```cuda"), std::string("\n\n\n"),
        std::string("<<<<<<< SEARCH\n"), std::string("=======\n>>>>>>> REPLACE\n")}) {
    INFO(reply);
    Result<std::string> code = ExtractCodeBlock(reply);
    REQUIRE_FALSE(code.ok());
    CHECK_THAT(code.error(), Catch::StartsWith("no usable code in the reply"));
    Result<ParsedReply> parsed = ParseReply(reply, kParent, false);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().find('\n') == std::string::npos);
    CHECK_NOTHROW(ParseReply(reply, kParent, true));
    CHECK_NOTHROW(ParseReply(reply, "", true));
  }
  Result<ParsedReply> refusal = ParseReply("I can't help with that.", kParent, true);
  REQUIRE_FALSE(refusal.ok());
  CHECK(refusal.error() == "no usable code in the reply");
}

TEST_CASE("a truncated code block is kept only when it has a kernel", "[llm]") {
  Result<std::string> code = ExtractCodeBlock(
      "Here it is:\n```cuda\n// @kevolve launch k grid=rows block=256\n"
      "extern \"C\" __global__ void k(const T* x) {\n  int i = 0;");
  REQUIRE(code.ok());
  CHECK(*code ==
        "// @kevolve launch k grid=rows block=256\n"
        "extern \"C\" __global__ void k(const T* x) {\n  int i = 0;\n");

  code = ExtractCodeBlock("Here it is:\n```cuda\n// @kevolve param BLOCK 256\n#define X 1\n");
  REQUIRE_FALSE(code.ok());
  CHECK_THAT(code.error(), Catch::Contains("cut off"));
}

TEST_CASE("ExtractEditBlocks tolerates fences, text and marker drift", "[llm]") {
  std::string reply =
      "I will widen the loop.\n\n"
      "```cuda\n"
      "<<<<<<< SEARCH\n"
      "  int r = blockIdx.x;\n"
      "=======\n"
      "  const int r = blockIdx.x;\n"
      ">>>>>>> REPLACE\n"
      "```\n"
      "and also:\n"
      "<<<<< SEARCH\n"  // five markers
      "  if (r >= rows) return;\n"
      "=========\n"  // nine
      ">>>>>>>>> REPLACE\n"
      "<<<<<<< SEARCH\n"  // an unfinished block at the end is dropped
      "  }\n";
  std::vector<EditBlock> edits = ExtractEditBlocks(reply);
  REQUIRE(edits.size() == 2);
  CHECK(edits[0].search == "  int r = blockIdx.x;\n");
  CHECK(edits[0].replace == "  const int r = blockIdx.x;\n");
  CHECK(edits[1].search == "  if (r >= rows) return;\n");
  CHECK(edits[1].replace.empty());

  CHECK(ExtractEditBlocks("").empty());
  CHECK(ExtractEditBlocks("<<<<<<<< SEARCH\nx\n>>>>>>> REPLACE\n").empty());          // no divider
  CHECK(ExtractEditBlocks("<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n").empty());  // 4 markers
  CHECK(ExtractEditBlocks("=======\n>>>>>>> REPLACE\n<<<<<<< SEARCH\n=======\n").empty());
}

TEST_CASE("ApplyEdits applies exact and whitespace-drifted edits", "[llm]") {
  SECTION("exact") {
    Result<std::string> child = ApplyEdits(kParent, {{"  int r = blockIdx.x;\n", "  const int r = blockIdx.x;\n"}});
    REQUIRE(child.ok());
    CHECK(child->find("  const int r = blockIdx.x;\n") != std::string::npos);
    CHECK(child->size() == kParent.size() + 6);
  }
  SECTION("trailing blanks and CRLF in the SEARCH") {
    Result<std::string> child =
        ApplyEdits(kParent, {{"  int r = blockIdx.x;   \r\n  if (r >= rows) return;\r\n", "  int r = blockIdx.y;\n"}});
    REQUIRE(child.ok());
    CHECK(child->find("  int r = blockIdx.y;\n  for (int c") != std::string::npos);
    CHECK(child->find("if (r >= rows)") == std::string::npos);
  }
  SECTION("lost indentation is restored in the replacement") {
    Result<std::string> child =
        ApplyEdits(kParent, {{"for (int c = threadIdx.x; c < cols; c += BLOCK) {\n  y[(size_t)r * cols + c] = "
                              "x[(size_t)r * cols + c];\n}\n",
                              "for (int c = threadIdx.x; c < cols; c += BLOCK) {\n  y[(size_t)r * cols + c] = "
                              "2 * x[(size_t)r * cols + c];\n}\n"}});
    REQUIRE(child.ok());
    CHECK(child->find("\n  for (int c = threadIdx.x; c < cols; c += BLOCK) {\n"
                      "    y[(size_t)r * cols + c] = 2 * x[(size_t)r * cols + c];\n  }\n}\n") != std::string::npos);
  }
  SECTION("a CRLF parent keeps its line endings") {
    std::string crlf = "a();\r\nb();\r\nc();\r\n";
    Result<std::string> child = ApplyEdits(crlf, {{"b();\n", "bb();\n"}});
    REQUIRE(child.ok());
    CHECK(*child == "a();\r\nbb();\r\nc();\r\n");
  }
  SECTION("several edits apply in order, each to the previous result") {
    Result<std::string> child =
        ApplyEdits(kParent, {{"  int r = blockIdx.x;\n", "  int r = blockIdx.x;\n  int twice = 2;\n"},
                             {"  int twice = 2;\n", "  int twice = 3;\n"},
                             {"// @kevolve param BLOCK 256 128\n", "// @kevolve param BLOCK 512 256 128\n"}});
    REQUIRE(child.ok());
    CHECK(child->find("int twice = 3;") != std::string::npos);
    CHECK(child->find("// @kevolve param BLOCK 512 256 128\n") == 0);
  }
  SECTION("an empty REPLACE deletes the lines") {
    Result<std::string> child = ApplyEdits(kParent, {{"  if (r >= rows) return;\n", ""}});
    REQUIRE(child.ok());
    CHECK(child->find("return;") == std::string::npos);
    CHECK(child->find("  int r = blockIdx.x;\n  for (") != std::string::npos);
  }
  SECTION("a SEARCH without its final newline matches whole lines") {
    Result<std::string> child = ApplyEdits(kParent, {{"  int r = blockIdx.x;", "  int r = 0;"}});
    REQUIRE(child.ok());
    CHECK(child->find("  int r = 0;\n  if") != std::string::npos);
  }
}

TEST_CASE("ApplyEdits rejects edits that do not apply, are ambiguous or change nothing", "[llm]") {
  SECTION("no match") {
    Result<std::string> child =
        ApplyEdits(kParent, {{"  int r = blockIdx.x;\n", "  int r = 1;\n"}, {"  float nothing = 0;\n", "x\n"}});
    REQUIRE_FALSE(child.ok());
    CHECK_THAT(child.error(), Catch::StartsWith("edit 2 does not apply: ") && Catch::Contains("float nothing = 0;"));
    CHECK(child.error().find('\n') == std::string::npos);
  }
  SECTION("a SEARCH matching part of a line only") {
    CHECK_FALSE(ApplyEdits(kParent, {{"r = blockIdx.x;\n", "r = 0;\n"}}).ok());
  }
  SECTION("ambiguous") {
    Result<std::string> child = ApplyEdits(kParent, {{"  }\n", "  } // end\n"}});
    REQUIRE(child.ok());
    // Exact matches count only at line starts: "}\n" is the last line alone.
    child = ApplyEdits(kParent, {{"}\n", "} // end\n"}});
    REQUIRE(child.ok());
    child = ApplyEdits("  a();\nb();\n    a();\n", {{" a();\n", " a(1);\n"}});
    REQUIRE_FALSE(child.ok());
    CHECK_THAT(child.error(), Catch::StartsWith("edit 1 does not apply: ") && Catch::Contains("ambiguous") &&
                                  Catch::Contains("whitespace"));
    child = ApplyEdits("x = 1;\ny = 2;\nx = 1;\n", {{"x = 1;\n", "x = 3;\n"}});
    REQUIRE_FALSE(child.ok());
    CHECK_THAT(child.error(), Catch::Contains("2 places") && Catch::Contains("ambiguous"));
  }
  SECTION("empty SEARCH") {
    Result<std::string> child = ApplyEdits(kParent, {{"", "int x;\n"}});
    REQUIRE_FALSE(child.ok());
    CHECK_THAT(child.error(), Catch::Contains("edit 1 does not apply") && Catch::Contains("empty"));
    CHECK_FALSE(ApplyEdits(kParent, {{"  \n\n", "int x;\n"}}).ok());
  }
  SECTION("changes nothing") {
    Result<std::string> child = ApplyEdits(kParent, {{"  int r = blockIdx.x;\n", "  int r = blockIdx.x;\n"}});
    REQUIRE_FALSE(child.ok());
    CHECK(child.error() == "the edit changes nothing");
    child = ApplyEdits(kParent, {{"  int r = blockIdx.x;\n", "  int r = blockIdx.x;   \n"}});
    REQUIRE_FALSE(child.ok());
    CHECK(child.error() == "the edit changes nothing");
    CHECK_FALSE(ApplyEdits(kParent, {}).ok());
  }
  SECTION("degenerate inputs") {
    CHECK_FALSE(ApplyEdits("", {{"a\n", "b\n"}}).ok());
    CHECK_NOTHROW(ApplyEdits("\n", {{"\n\n\n", ""}}));
    CHECK_NOTHROW(ApplyEdits("a", {{"a\nb\nc\n", ""}}));
  }
}

TEST_CASE("ParseReply chooses edits or a rewrite", "[llm]") {
  std::string edit = Edit("  int r = blockIdx.x;\n", "  const int r = blockIdx.x;\n");
  SECTION("diff") {
    Result<ParsedReply> parsed = ParseReply(
        "Two changes:\n```\n" + edit + "```\n" + Edit("  if (r >= rows) return;\n", "  if (r >= rows) { return; }\n"),
        kParent, true);
    REQUIRE(parsed.ok());
    CHECK(parsed->kind == "diff");
    CHECK(parsed->edits_applied == 2);
    CHECK(parsed->source.find("const int r") != std::string::npos);
    CHECK(parsed->source.find("{ return; }") != std::string::npos);
  }
  SECTION("a rewrite when diff is preferred but only a file came back") {
    Result<ParsedReply> parsed = ParseReply("```cuda\n__global__ void z() {}\n```", kParent, true);
    REQUIRE(parsed.ok());
    CHECK(parsed->kind == "rewrite");
    CHECK(parsed->source == "__global__ void z() {}\n");
    CHECK(parsed->edits_applied == 0);
  }
  SECTION("edits when a rewrite is preferred but only edits came back") {
    Result<ParsedReply> parsed = ParseReply(edit, kParent, false);
    REQUIRE(parsed.ok());
    CHECK(parsed->kind == "diff");
  }
  SECTION("a rewrite is preferred when asked for") {
    Result<ParsedReply> parsed =
        ParseReply(edit + "\nOr the whole file:\n```cuda\n__global__ void z() {}\n```\n", kParent, false);
    REQUIRE(parsed.ok());
    CHECK(parsed->kind == "rewrite");
  }
  SECTION("failures are reported, one line each") {
    Result<ParsedReply> parsed = ParseReply(edit + Edit("  nothing();\n", "x\n"), kParent, true);
    REQUIRE_FALSE(parsed.ok());
    CHECK_THAT(parsed.error(), Catch::StartsWith("edit 2 does not apply"));
    parsed = ParseReply(Edit("  int r = blockIdx.x;\n", "  int r = blockIdx.x;\n"), kParent, true);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error() == "the edit changes nothing");
    parsed = ParseReply("```cuda\n" + kParent + "```\n", kParent, false);
    REQUIRE_FALSE(parsed.ok());
    CHECK_THAT(parsed.error(), Catch::Contains("changes nothing"));
    parsed = ParseReply("<<<<<<< SEARCH\n  int r = blockIdx.x;\n=======\n  int", kParent, true);
    REQUIRE_FALSE(parsed.ok());
    CHECK_THAT(parsed.error(), Catch::StartsWith("no usable code in the reply") && Catch::Contains("truncated"));
  }
}

TEST_CASE("random mixtures of fences, markers and code never crash", "[llm]") {
  const std::vector<std::string> pieces = {"```",
                                           "```cuda",
                                           "```python",
                                           "````",
                                           "<<<<<<< SEARCH",
                                           "<<<<< SEARCH",
                                           "=======",
                                           "=====",
                                           ">>>>>>> REPLACE",
                                           ">>>>>>>>> REPLACE",
                                           "  int r = blockIdx.x;",
                                           "}",
                                           "",
                                           "   ",
                                           "\r",
                                           "__global__ void k() {}",
                                           "// @kevolve launch k grid=1 block=1",
                                           "text",
                                           "\xff\xfe",
                                           "`"};
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string reply;
    int n = static_cast<int>(rng() % 16);
    for (int i = 0; i < n; ++i) {
      reply += pieces[rng() % pieces.size()];
      if (rng() % 4 != 0) reply += "\n";
    }
    INFO(reply);
    for (bool diff : {false, true}) {
      Result<ParsedReply> parsed = ParseReply(reply, kParent, diff);
      if (!parsed.ok()) {
        CHECK(parsed.error().find('\n') == std::string::npos);
      } else {
        CHECK_FALSE(parsed->source.empty());
      }
    }
  }
}

}  // namespace kevolve::llm

// Tests for op specs (core/op_spec.h, core/json_file.h): loading the shipped softmax
// spec, and the errors for malformed specs, each of which must name the file and the
// field and never leak nlohmann's exception text.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kevolve/core/op_spec.h"
#include "test_util.h"

namespace kevolve {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;

fs::path SoftmaxDir() { return testing::SourceRoot() / "configs" / "ops" / "softmax"; }

OpSpec MustLoad(const fs::path& dir) {
  auto op = LoadOpSpec(dir.string());
  INFO(op.status().ToString());
  REQUIRE(op.ok());
  return *op;
}

int64_t EvalOrFail(const Expr& e, const Env& env) {
  auto v = e.Eval(env);
  INFO(e.text() << ": " << v.status().ToString());
  REQUIRE(v.ok());
  return *v;
}

// A small valid spec, with comments of both kinds. The tests below break one thing at a
// time by replacing a piece of it.
const char* const kGoodSpec = R"({
  // A test op: y = alpha * x.
  "name": "scale",
  "description": "y = alpha * x",
  /* sizes, in kernel order */
  "sizes": ["n", "m"],
  "scalars": [{"name": "alpha", "type": "f32", "value": 2.0}],
  "buffers": [
    {"name": "x", "role": "in", "shape": ["n", "m"]},
    {"name": "y", "role": "out", "dtype": "T", "shape": ["n", "m"]}
  ],
  "dtypes": ["f32", "bf16"],
  "deterministic": false,
  "inputs": {"x": {"dist": "uniform", "scale": [1.0, 2.0], "offset": 0.5}},
  "tolerance": {
    "f32": {"atol": 1e-6, "rtol": 1e-5},
    "bf16": {"atol": 1e-3, "rtol": 1e-2, "max_mismatch": 3, "min_cossim": 0.999}
  },
  "cost": {"bytes": "2 * n * m * sizeof_T", "flops": "n * m"},
  "reference": "reference.cu",
  "seeds": ["seeds/a.cu"],
  "shapes": {
    "tune": [[64, 32], {"n": 8, "m": 4}],
    "check": [[1, 1]]
  }
}
)";

const char* const kSeed =
    "// @kevolve param B 32 64\n"
    "// @kevolve launch scale_k grid=ceil_div(n * m, B) block=B\n"
    "extern \"C\" __global__ void scale_k() {}\n";

// `text` with the first `from` replaced by `to`; fails the test when `from` is absent.
std::string Replace(std::string text, const std::string& from, const std::string& to) {
  auto p = text.find(from);
  INFO("replacing '" << from << "'");
  REQUIRE(p != std::string::npos);
  return text.replace(p, from.size(), to);
}

// A fresh op folder holding `json` as op.json, plus a reference and a seed.
fs::path WriteSpec(const std::string& json) {
  fs::path dir = testing::MakeTempDir("opspec");
  testing::WriteFile(dir / "op.json", json);
  testing::WriteFile(dir / "reference.cu", "// @kevolve launch ref grid=n block=m\n");
  testing::WriteFile(dir / "seeds" / "a.cu", kSeed);
  return dir;
}

// Loads `json`, which must fail; the message must name the spec file and must not leak
// exception text.
std::string LoadError(const std::string& json) {
  fs::path dir = WriteSpec(json);
  auto op = LoadOpSpec(dir.string());
  INFO("spec:\n" << json);
  REQUIRE_FALSE(op.ok());
  const std::string& e = op.error();
  INFO("error: " << e);
  CHECK_THAT(e, Contains((dir / "op.json").string()));
  CHECK_THAT(e, !Contains("json.exception"));
  std::error_code ec;
  fs::remove_all(dir, ec);
  return e;
}

TEST_CASE("OpSpec: the shipped softmax spec loads", "[core]") {
  OpSpec op = MustLoad(SoftmaxDir());
  CHECK(op.name == "softmax");
  CHECK_FALSE(op.description.empty());
  CHECK(op.dir == SoftmaxDir().string());
  CHECK_THAT(op.file, EndsWith("op.json"));
  CHECK(op.sizes == std::vector<std::string>{"rows", "cols"});
  CHECK(op.scalars.empty());
  CHECK(op.deterministic);

  REQUIRE(op.buffers.size() == 2);
  CHECK(op.buffers[0].name == "x");
  CHECK(op.buffers[0].role == BufferRole::kIn);
  CHECK(op.buffers[0].dtype == "T");
  REQUIRE(op.buffers[0].shape.size() == 2);
  CHECK(op.buffers[0].shape[0].text() == "rows");
  CHECK(op.buffers[0].shape[1].text() == "cols");
  CHECK(op.buffers[0].dist.kind == "normal");
  CHECK(op.buffers[0].dist.scale_lo == Approx(0.5));
  CHECK(op.buffers[0].dist.scale_hi == Approx(8.0));
  CHECK(op.buffers[0].dist.offset_lo == Approx(-30.0));
  CHECK(op.buffers[0].dist.offset_hi == Approx(30.0));
  CHECK(op.buffers[1].name == "y");
  CHECK(op.buffers[1].role == BufferRole::kOut);

  CHECK(op.dtypes == std::vector<DType>{DType::kF32, DType::kBF16, DType::kF16});
  CHECK(op.HasDType(DType::kBF16));
  CHECK_FALSE(op.HasDType(DType::kF64));
  REQUIRE(op.tolerances.size() == 3);
  CHECK(op.tolerances.at(DType::kF32).atol == Approx(1e-7));
  CHECK(op.tolerances.at(DType::kF32).rtol == Approx(2e-5));
  CHECK(op.tolerances.at(DType::kF32).min_cossim == Approx(0.99999));
  CHECK(op.tolerances.at(DType::kF32).max_mismatch == 0);
  CHECK(op.tolerances.at(DType::kBF16).rtol == Approx(8e-3));
  CHECK(op.tolerances.at(DType::kF16).rtol == Approx(2e-3));

  REQUIRE(op.tune.size() == 9);
  CHECK(op.tune[0].label == "4096x1024");
  CHECK(op.tune[0].sizes == Env{{"rows", 4096}, {"cols", 1024}});
  CHECK(op.tune[1].label == "16384x4096");
  CHECK(op.tune[8].label == "256x262144");
  CHECK(op.check.size() == 10);
  CHECK(op.check[9].label == "150x65536");  // split_row's LAG interleaving
  CHECK(op.check[0].label == "1x1");
  CHECK(op.heldout.size() == 5);
  CHECK(op.heldout[0].label == "33x12345");

  // Cost models at 4096x1024.
  const Shape& s = op.tune[0];
  Env f32 = op.MakeEnv(s, DType::kF32);
  CHECK(f32.at("sizeof_T") == 4);
  CHECK(f32.at("rows") == 4096);
  CHECK(EvalOrFail(op.cost_bytes, f32) == int64_t{2} * 4096 * 1024 * 4);
  CHECK(EvalOrFail(op.cost_flops, f32) == int64_t{5} * 4096 * 1024);
  Env bf16 = op.MakeEnv(s, DType::kBF16);
  CHECK(EvalOrFail(op.cost_bytes, bf16) == int64_t{2} * 4096 * 1024 * 2);
  auto n = op.Elements(op.buffers[0], s, DType::kF32);
  REQUIRE(n.ok());
  CHECK(*n == int64_t{4096} * 1024);
  CHECK(op.BufferDType(op.buffers[1], DType::kF16) == DType::kF16);

  // Reference and seeds resolve to absolute paths of existing files.
  CHECK(fs::path(op.reference).is_absolute());
  CHECK(fs::is_regular_file(op.reference));
  CHECK(fs::path(op.reference).filename() == "reference.cu");
  REQUIRE(op.seeds.size() == 6);
  CHECK(fs::path(op.seeds[0]).filename() == "warp_row.cu");
  CHECK(fs::path(op.seeds[1]).filename() == "block_row.cu");
  CHECK(fs::path(op.seeds[2]).filename() == "cluster_row.cu");
  CHECK(fs::path(op.seeds[3]).filename() == "bulk_row.cu");
  CHECK(fs::path(op.seeds[4]).filename() == "split_row.cu");
  CHECK(fs::path(op.seeds[5]).filename() == "slice_row.cu");
  for (const auto& seed : op.seeds) {
    INFO(seed);
    CHECK(fs::path(seed).is_absolute());
    CHECK(fs::is_regular_file(seed));
  }
}

TEST_CASE("OpSpec: ListOpDirs finds the shipped ops", "[core]") {
  auto dirs = ListOpDirs((testing::SourceRoot() / "configs" / "ops").string());
  CHECK(std::find(dirs.begin(), dirs.end(), SoftmaxDir().string()) != dirs.end());
  CHECK(std::is_sorted(dirs.begin(), dirs.end()));
  CHECK(ListOpDirs((testing::SourceRoot() / "no-such-dir").string()).empty());
}

TEST_CASE("OpSpec: a shape label parses in the op's size order, and bad ones say what is expected", "[core]") {
  const OpSpec op = MustLoad(SoftmaxDir());
  auto s = ParseShapeLabel(op, "1024x131072");
  REQUIRE(s.ok());
  CHECK(s->sizes.at("rows") == 1024);
  CHECK(s->sizes.at("cols") == 131072);
  CHECK(s->label == "1024x131072");
  // An upper-case X reads the same and the label comes out canonical; the sizes need
  // not be tune shapes.
  s = ParseShapeLabel(op, "7X65537");
  REQUIRE(s.ok());
  CHECK(s->label == "7x65537");
  CHECK(s->sizes.at("cols") == 65537);
  for (const char* bad : {"", "1024", "1024x", "x131072", "1024x131072x2", "0x5", "-3x5", "+3x5", "4x2.5", "4x 5",
                          "4x5a", "99999999999999999999x5", "2147483648x5"}) {
    INFO(bad);
    auto r = ParseShapeLabel(op, bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error(), StartsWith(std::string("'") + bad + "': "));
    CHECK_THAT(r.error(), Contains("op 'softmax' takes rows x cols, e.g. 4096x1024"));
  }
  CHECK_THAT(ParseShapeLabel(op, "1024").error(), Contains("expected 2 sizes"));
  CHECK_THAT(ParseShapeLabel(op, "0x5").error(), Contains("rows '0' is not a positive integer"));
  // Kernels take sizes as int: the largest int parses, one more is refused as too large.
  s = ParseShapeLabel(op, "1x2147483647");
  REQUIRE(s.ok());
  CHECK(s->sizes.at("cols") == 2147483647);
  for (const char* big : {"2147483648x5", "5x99999999999999999999"}) {
    INFO(big);
    CHECK_THAT(ParseShapeLabel(op, big).error(), Contains("is too large (kernels take sizes as int: at most 2147483647)"));
  }
}

TEST_CASE("OpSpec: seeds are absolute even when the folder is given relative", "[core]") {
  // op_spec.h: "reference: absolute path of the reference kernel", "seeds: absolute paths".
  fs::path rel = fs::relative(SoftmaxDir(), fs::current_path());
  REQUIRE_FALSE(rel.empty());
  REQUIRE(rel.is_relative());
  OpSpec op = MustLoad(rel);
  CHECK(fs::path(op.reference).is_absolute());
  for (const auto& seed : op.seeds) {
    INFO(seed);
    CHECK(fs::path(seed).is_absolute());
  }
}

TEST_CASE("OpSpec: a small spec with comments loads", "[core]") {
  fs::path dir = WriteSpec(kGoodSpec);
  OpSpec op = MustLoad(dir);
  CHECK(op.name == "scale");
  CHECK(op.sizes == std::vector<std::string>{"n", "m"});
  REQUIRE(op.scalars.size() == 1);
  CHECK(op.scalars[0].name == "alpha");
  CHECK(op.scalars[0].type == DType::kF32);
  CHECK(op.scalars[0].value == Approx(2.0));
  CHECK_FALSE(op.deterministic);
  REQUIRE(op.buffers.size() == 2);
  CHECK(op.buffers[0].dtype == "T");  // the default
  CHECK(op.buffers[0].dist.kind == "uniform");
  CHECK(op.buffers[0].dist.scale_lo == Approx(1.0));
  CHECK(op.buffers[0].dist.scale_hi == Approx(2.0));
  CHECK(op.buffers[0].dist.offset_lo == Approx(0.5));
  CHECK(op.buffers[0].dist.offset_hi == Approx(0.5));
  CHECK(op.tolerances.at(DType::kBF16).max_mismatch == 3);
  CHECK(op.tolerances.at(DType::kBF16).min_cossim == Approx(0.999));
  CHECK(op.tolerances.at(DType::kF32).min_cossim == 0.0);
  REQUIRE(op.tune.size() == 2);
  CHECK(op.tune[0].label == "64x32");
  CHECK(op.tune[1].label == "8x4");  // object form, labelled in the order of "sizes"
  CHECK(op.tune[1].sizes == Env{{"n", 8}, {"m", 4}});
  CHECK(op.heldout.empty());         // optional
  CHECK(EvalOrFail(op.cost_bytes, op.MakeEnv(op.tune[0], DType::kBF16)) == 2 * 64 * 32 * 2);
  CHECK(op.reference == (dir / "reference.cu").lexically_normal().string());
  REQUIRE(op.seeds.size() == 1);
  CHECK(op.seeds[0] == (dir / "seeds" / "a.cu").lexically_normal().string());
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("OpSpec: a JSON syntax error says file, line and column", "[core]") {
  // Line 4 is `  "sizes": ,` and the ',' is in column 12.
  std::string json =
      "{\n"
      "  // comment\n"
      "  \"name\": \"x\",\n"
      "  \"sizes\": ,\n"
      "}\n";
  std::string e = LoadError(json);
  CHECK_THAT(e, Contains("op.json:4:12:"));
  CHECK_THAT(e, Contains("syntax error"));

  // A missing comma between fields of the good spec: the error is on the next key.
  std::string e2 = LoadError(Replace(kGoodSpec, "\"name\": \"scale\",", "\"name\": \"scale\""));
  CHECK_THAT(e2, Contains("op.json:4:"));

  std::string e3 = LoadError("");
  CHECK_THAT(e3, Contains("op.json:1:"));
}

TEST_CASE("OpSpec: a number too large for a double is an error, not an exception", "[core]") {
  // nlohmann reports this one as out_of_range.406, not as a parse_error.
  fs::path dir = WriteSpec(Replace(kGoodSpec, "\"atol\": 1e-6", "\"atol\": 1e500"));
  std::string err;
  bool threw = false;
  try {
    auto op = LoadOpSpec(dir.string());
    REQUIRE_FALSE(op.ok());
    err = op.error();
  } catch (const std::exception& e) {
    threw = true;
    err = e.what();
  }
  INFO("error: " << err);
  CHECK_FALSE(threw);
  CHECK_THAT(err, Contains((dir / "op.json").string()));
  CHECK_THAT(err, !Contains("json.exception"));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("OpSpec: a tolerance key that is no dtype (a typo) is rejected", "[core]") {
  // Every other object in the spec rejects unknown keys; "tolerance" accepts any.
  std::string json = Replace(kGoodSpec, "\"f32\": {\"atol\": 1e-6, \"rtol\": 1e-5}",
                             "\"f32\": {\"atol\": 1e-6, \"rtol\": 1e-5}, \"f61\": {\"atol\": 1, \"rtol\": 1}");
  fs::path dir = WriteSpec(json);
  auto op = LoadOpSpec(dir.string());
  CHECK_FALSE(op.ok());
  if (!op.ok()) CHECK_THAT(op.error(), Contains("field 'tolerance.f61'"));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("OpSpec: a missing op.json is an error naming it", "[core]") {
  fs::path dir = testing::MakeTempDir("opspec-empty");
  auto op = LoadOpSpec(dir.string());
  REQUIRE_FALSE(op.ok());
  CHECK_THAT(op.error(), Contains((dir / "op.json").string()));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("OpSpec: malformed specs name the file and the field", "[core]") {
  SECTION("missing required field") {
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"name\": \"scale\",", "")),
               Contains("field 'name'") && Contains("missing"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"reference\": \"reference.cu\",", "")),
               Contains("field 'reference'") && Contains("missing"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"check\": [[1, 1]]", "\"heldout\": [[1, 1]]")),
               Contains("field 'shapes.check'") && Contains("missing"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"atol\": 1e-6, ", "")),
               Contains("field 'tolerance.f32.atol'") && Contains("missing"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"bf16\": {\"atol\": 1e-3", "\"bf17\": {\"atol\": 1e-3")),
               Contains("field 'tolerance.bf16'") && Contains("missing"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "{\"name\": \"x\", \"role\": \"in\", ", "{\"role\": \"in\", ")),
               Contains("field 'buffers[0].name'") && Contains("missing"));
  }
  SECTION("wrong type") {
    std::string e = LoadError(Replace(kGoodSpec, "\"sizes\": [\"n\", \"m\"]", "\"sizes\": \"n\""));
    CHECK_THAT(e, Contains("field 'sizes'") && Contains("expected an array") && Contains("got a string"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"deterministic\": false", "\"deterministic\": \"no\"")),
               Contains("field 'deterministic'") && Contains("true or false"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"atol\": 1e-6", "\"atol\": \"1e-6\"")),
               Contains("field 'tolerance.f32.atol'") && Contains("expected a number"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"max_mismatch\": 3", "\"max_mismatch\": 3.5")),
               Contains("field 'tolerance.bf16.max_mismatch'") && Contains("integer"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "[[64, 32], {", "[[64, \"32\"], {")),
               Contains("field 'shapes.tune[0][1]'") && Contains("integer"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"name\": \"scale\"", "\"name\": 7")),
               Contains("field 'name'") && Contains("expected a string"));
    CHECK_THAT(LoadError("[1, 2]"), Contains("top level") && Contains("expected an object"));
  }
  SECTION("unknown field (a typo) is rejected") {
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"seeds\":", "\"seed\":")),
               Contains("field 'seed'") && Contains("unknown field"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"role\": \"out\", \"dtype\": \"T\", \"shape\"",
                                 "\"role\": \"out\", \"dtype\": \"T\", \"shap\"")),
               Contains("field 'buffers[1].shap'") && Contains("unknown field"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"rtol\": 1e-5", "\"rtol\": 1e-5, \"atoll\": 1")),
               Contains("field 'tolerance.f32.atoll'") && Contains("unknown field"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"bytes\":", "\"byte\":")),
               Contains("field 'cost.byte'") && Contains("unknown field"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "{\"n\": 8, \"m\": 4}", "{\"n\": 8, \"m\": 4, \"k\": 2}")),
               Contains("field 'shapes.tune[1].k'") && Contains("unknown field"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"dist\": \"uniform\"", "\"distribution\": \"uniform\"")),
               Contains("field 'inputs.x.distribution'") && Contains("unknown field"));
  }
  SECTION("bad dtype") {
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"dtypes\": [\"f32\", \"bf16\"]", "\"dtypes\": [\"f32\", \"f8\"]")),
               Contains("field 'dtypes[1]'"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"dtypes\": [\"f32\", \"bf16\"]", "\"dtypes\": [\"f64\"]")),
               Contains("field 'dtypes[0]'"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"dtypes\": [\"f32\", \"bf16\"]", "\"dtypes\": []")),
               Contains("field 'dtypes'"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"dtype\": \"T\"", "\"dtype\": \"float99\"")),
               Contains("field 'buffers[1].dtype'"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"type\": \"f32\"", "\"type\": \"bf16\"")),
               Contains("field 'scalars[0].type'"));
  }
  SECTION("bad role") {
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"role\": \"in\"", "\"role\": \"input\"")),
               Contains("field 'buffers[0].role'") && Contains("\"in\" or \"out\""));
  }
  SECTION("no out buffer") {
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"role\": \"out\"", "\"role\": \"in\"")),
               Contains("field 'buffers'") && Contains("\"out\""));
  }
  SECTION("cost expression using an unknown name") {
    std::string e = LoadError(Replace(kGoodSpec, "\"2 * n * m * sizeof_T\"", "\"2 * n * k * sizeof_T\""));
    CHECK_THAT(e, Contains("field 'cost.bytes'") && Contains("'k'"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"flops\": \"n * m\"", "\"flops\": \"n * num_sms\"")),
               Contains("field 'cost.flops'") && Contains("'num_sms'"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"flops\": \"n * m\"", "\"flops\": \"n *\"")),
               Contains("field 'cost.flops'") && Contains("at column"));
    // Buffer shapes may not use sizeof_T.
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"shape\": [\"n\", \"m\"]}", "\"shape\": [\"n\", \"sizeof_T\"]}")),
               Contains("field 'buffers[0].shape[1]'") && Contains("'sizeof_T'"));
  }
  SECTION("shape with a non-positive size") {
    CHECK_THAT(LoadError(Replace(kGoodSpec, "[[64, 32], {", "[[64, 0], {")),
               Contains("field 'shapes.tune[0].m'") && Contains("positive"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "{\"n\": 8, \"m\": 4}", "{\"n\": -8, \"m\": 4}")),
               Contains("field 'shapes.tune[1].n'") && Contains("positive"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"check\": [[1, 1]]", "\"check\": []")),
               Contains("field 'shapes.check'"));
  }
  SECTION("shape array with the wrong arity") {
    CHECK_THAT(LoadError(Replace(kGoodSpec, "[[64, 32], {", "[[64], {")),
               Contains("field 'shapes.tune[0]'") && Contains("expected 2 sizes"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"check\": [[1, 1]]", "\"check\": [[1, 1, 1]]")),
               Contains("field 'shapes.check[0]'") && Contains("expected 2 sizes"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"check\": [[1, 1]]", "\"check\": [7]")),
               Contains("field 'shapes.check[0]'"));
  }
  SECTION("reference or seed file missing") {
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"reference.cu\"", "\"missing_ref.cu\"")),
               Contains("field 'reference'") && Contains("missing_ref.cu") && Contains("does not exist"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"seeds/a.cu\"", "\"seeds/a.cu\", \"seeds/b.cu\"")),
               Contains("field 'seeds[1]'") && Contains("b.cu"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "[\"seeds/a.cu\"]", "[]")), Contains("field 'seeds'"));
  }
  SECTION("inputs that name no input buffer") {
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"inputs\": {\"x\":", "\"inputs\": {\"y\":")),
               Contains("field 'inputs.y'"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"scale\": [1.0, 2.0]", "\"scale\": [2.0, 1.0]")),
               Contains("field 'inputs.x.scale'"));
    CHECK_THAT(LoadError(Replace(kGoodSpec, "\"dist\": \"uniform\"", "\"dist\": \"cauchy\"")),
               Contains("field 'inputs.x.dist'"));
  }
  SECTION("every problem is reported, one per line") {
    std::string bad = Replace(kGoodSpec, "\"role\": \"in\"", "\"role\": \"input\"");
    bad = Replace(bad, "\"seeds\":", "\"sedes\":");
    std::string e = LoadError(bad);
    CHECK_THAT(e, Contains("field 'buffers[0].role'"));
    CHECK_THAT(e, Contains("field 'sedes'"));
    CHECK_THAT(e, Contains("field 'seeds'"));  // now missing
    CHECK(std::count(e.begin(), e.end(), '\n') >= 2);
  }
}

}  // namespace
}  // namespace kevolve

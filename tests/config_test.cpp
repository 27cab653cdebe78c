// Run configuration and the op spec's compute field.
#include <catch2/catch.hpp>

#include "kevolve/core/op_spec.h"
#include "kevolve/engine/run_config.h"
#include "test_util.h"

using namespace kevolve;

TEST_CASE("run config: defaults, overrides, durations and operator names", "[core]") {
  auto dir = testing::MakeTempDir("runcfg");
  auto shipped = LoadRunConfig((testing::SourceRoot() / "configs/run.json").string());
  REQUIRE(shipped.ok());
  CHECK(shipped->generations == 50);
  CHECK(shipped->operator_mix.count("llm_diff") == 1);
  testing::WriteFile(dir / "a.json", "// partial\n{\"population\": 5, \"islands\": 2}\n");
  auto partial = LoadRunConfig((dir / "a.json").string());
  REQUIRE(partial.ok());
  CHECK(partial->population == 5);
  CHECK(partial->generations == 50);  // the default
  auto back = RunConfigFromJson(partial->ToJson());
  REQUIRE(back.ok());
  CHECK(back->ToJson() == partial->ToJson());
  testing::WriteFile(dir / "b.json", "{\"operator_mix\": {\"llm_difff\": 1}}");
  auto typo = LoadRunConfig((dir / "b.json").string());
  REQUIRE_FALSE(typo.ok());
  CHECK(typo.error().find("operator_mix.llm_difff") != std::string::npos);
  testing::WriteFile(dir / "c.json", "{\"populaton\": 5}");
  auto unknown = LoadRunConfig((dir / "c.json").string());
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().find("field 'populaton': unknown field") != std::string::npos);
  CHECK(shipped->shape_parents == Approx(0.25));
  auto stored_before = partial->ToJson();  // a run stored before shape_parents existed resumes as it bred: 0
  stored_before.erase("shape_parents");
  auto old_run = RunConfigFromJson(stored_before);
  REQUIRE(old_run.ok());
  CHECK(old_run->shape_parents == 0);
  CHECK(RunConfigFromJson(partial->ToJson())->shape_parents == Approx(0.25));  // stored now: kept
  testing::WriteFile(dir / "d.json", "{\"shape_parents\": 1.5}");
  auto share = LoadRunConfig((dir / "d.json").string());
  REQUIRE_FALSE(share.ok());
  CHECK(share.error().find("shape_parents must be in [0, 1]") != std::string::npos);
  // The L2 flush: memset unless set (a run stored before the field existed timed with memset).
  CHECK(shipped->flush == "memset");
  auto no_flush = partial->ToJson();
  no_flush.erase("flush");
  CHECK(RunConfigFromJson(no_flush)->flush == "memset");
  testing::WriteFile(dir / "e.json", "{\"flush\": \"read\"}");
  CHECK(LoadRunConfig((dir / "e.json").string())->flush == "read");
  testing::WriteFile(dir / "f.json", "{\"flush\": \"clean\"}");
  auto bad_flush = LoadRunConfig((dir / "f.json").string());
  REQUIRE_FALSE(bad_flush.ok());
  CHECK(bad_flush.error().find("flush must be \"memset\", \"read\" or \"none\"") != std::string::npos);
  CHECK(*ParseDuration("90s") == 90);
  CHECK(*ParseDuration("1h30m") == 5400);
  CHECK(*ParseDuration("2h") == 7200);
  CHECK_FALSE(ParseDuration("soon").ok());
  CHECK(FormatDuration(90) == "1m30s");
  CHECK(FormatDuration(7200) == "2h");
  CHECK(FormatDuration(5405) == "1h30m5s");
  CHECK(FormatDuration(0) == "0s");
  for (double t : {1.0, 59.0, 61.0, 3599.0, 3601.0, 86400.0}) CHECK(*ParseDuration(FormatDuration(t)) == t);
  RunConfig stops;
  CHECK(OtherStops(stops).empty());
  stops.time_limit_s = 90;
  CHECK(OtherStops(stops) == " (or 1m30s)");
  stops.target_fraction = 0.9;
  CHECK(OtherStops(stops) == " (or 1m30s, or fitness 0.9)");
  stops.time_limit_s = 0;
  CHECK(OtherStops(stops) == " (or fitness 0.9)");
}

TEST_CASE("op spec: the compute field names a known peak", "[core]") {
  auto dir = testing::MakeTempDir("compute");
  std::string spec = testing::ReadFile(testing::SourceRoot() / "configs/ops/softmax/op.json");
  // The spec's reference and every seed it names, copied next to the edited op.json.
  const std::filesystem::path src = testing::SourceRoot() / "configs/ops/softmax";
  testing::WriteFile(dir / "reference.cu", testing::ReadFile(src / "reference.cu"));
  for (const auto& e : std::filesystem::directory_iterator(src / "seeds"))
    testing::WriteFile(dir / "seeds" / e.path().filename(), testing::ReadFile(e.path()));
  auto with = [&](const std::string& compute) {
    std::string s = spec;
    s.insert(s.find('{') + 1, "\"compute\": \"" + compute + "\",");
    testing::WriteFile(dir / "op.json", s);
    return LoadOpSpec(dir.string());
  };
  auto fp32 = LoadOpSpec((testing::SourceRoot() / "configs/ops/softmax").string());
  REQUIRE(fp32.ok());
  CHECK(fp32->compute == "fp32");
  auto tensor = with("bf16_tensor");
  REQUIRE(tensor.ok());
  CHECK(tensor->compute == "bf16_tensor");
  auto bad = with("bf17");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().find("field 'compute'") != std::string::npos);
}

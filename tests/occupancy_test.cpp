// Occupancy per timing (blocks per SM, and for cluster launches how many clusters the
// device holds at once): how it reads in `kevolve eval`/`show` and in an LLM prompt.
#include <catch2/catch.hpp>

#include "kevolve/core/op_spec.h"
#include "kevolve/db/store.h"
#include "kevolve/engine/llm_context.h"
#include "kevolve/evaluators/rungs.h"
#include "test_util.h"

namespace kevolve {
namespace {

nlohmann::json ClusterLaunch() {
  return {{"occupancy", {{{"entry", "softmax_bulk"}, {"blocks_per_sm", 3}, {"cluster_size", 16}, {"max_active_clusters", 21}}}}};
}

TEST_CASE("FormatOccupancy: one launch, several launches, none", "[engine]") {
  CHECK(FormatOccupancy(ClusterLaunch()) == "blocks/SM=3 clusters=21x16");
  nlohmann::json two = {{"occupancy",
                         {{{"entry", "row_stats"}, {"blocks_per_sm", 8}}, {{"entry", "row_write"}, {"blocks_per_sm", 4}}}}};
  CHECK(FormatOccupancy(two) == "row_stats:blocks/SM=8 row_write:blocks/SM=4");
  CHECK(FormatOccupancy(nlohmann::json::object()).empty());                       // recorded before occupancy existed
  CHECK(FormatOccupancy(nlohmann::json{{"occupancy", "garbage"}}).empty());        // never throws on odd data
}

TEST_CASE("an LLM prompt shows the parent's occupancy next to its timings", "[engine][llm]") {
  auto dir = testing::MakeTempDir("occupancy");
  auto store = db::OpenSqliteStore((dir / "k.db").string());
  REQUIRE(store.ok());
  db::SourceRecord src;
  src.hash = "h";
  src.name = "bulk_row.cu";
  src.text = "__global__ void k() {}";
  src.origin = "seed";
  auto sid = (*store)->PutSource(src);
  REQUIRE(sid.ok());
  db::CandidateRecord c;
  c.hash = "c";
  c.source_id = *sid;
  c.op = "softmax";
  c.dtype = "f32";
  c.arch = "sm_90a";
  c.op_name = "seed";
  auto put = (*store)->PutCandidate(c);
  REQUIRE(put.ok());
  db::EvaluationRecord e;
  e.candidate_id = put->first;
  e.status = "ok";
  e.fitness = 0.7;
  db::TimingRecord t;
  t.device_uuid = "GPU-1";
  t.shape = "256x262144";
  t.median_us = 190.8;
  t.n = 10;
  t.protocol = ClusterLaunch();
  t.roofline_us = 127.3;
  t.fraction = 0.667;
  e.timings = {t};
  REQUIRE((*store)->RecordEvaluation(e).ok());

  auto op = LoadOpSpec((testing::SourceRoot() / "configs/ops/softmax").string());
  REQUIRE(op.ok());
  ParentRef parent{"bulk_row.cu", src.text, {}, put->first};
  auto ctx = BuildMutationContext(*op, DType::kF32, parent, store->get(), nullptr, std::nullopt);
  INFO(ctx.parent_results);
  CHECK(ctx.parent_results.find("256x262144") != std::string::npos);
  CHECK(ctx.parent_results.find("blocks/SM=3 clusters=21x16") != std::string::npos);
}

}  // namespace
}  // namespace kevolve

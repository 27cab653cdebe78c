// An exported kernel outside kevolve, on the CPU: launch.json (engine/export.h:
// LaunchJson), what a user needs to launch the kernel, cluster dimensions included; and
// kernel.cu (BakeParameters), which must compile on its own next to kevolve.h.
#include <catch2/catch.hpp>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "kevolve/core/candidate.h"
#include "kevolve/core/json_file.h"
#include "kevolve/core/op_spec.h"
#include "kevolve/db/store.h"
#include "kevolve/engine/export.h"
#include "kevolve/engine/pipeline.h"
#include "kevolve/evaluators/executor.h"
#include "kevolve/evaluators/nvrtc_compiler.h"
#include "kevolve/evaluators/rungs.h"
#include "test_util.h"

namespace kevolve {
namespace {

TEST_CASE("launch.json carries each tune shape's grid, block, smem and cluster", "[engine]") {
  auto op = LoadOpSpec((testing::SourceRoot() / "configs/ops/softmax").string());
  REQUIRE(op.ok());
  const std::string text = testing::ReadFile(testing::SourceRoot() / "configs/ops/softmax/seeds/bulk_row.cu");
  auto src = CandidateSource::Parse(text, "bulk_row.cu");
  REQUIRE(src.ok());
  const Assignment params = src->DefaultAssignment();  // SLICE 64, CLUSTER 16, ROWS 8, TILES 1, BLOCK 256
  nlohmann::json j = LaunchJson(text, "bulk_row.cu", params, *op, DType::kF32, "sm_90a", 132);
  REQUIRE(j["entries"].size() == 1);
  CHECK(j["entries"][0]["entry"] == "softmax_bulk");
  CHECK(j["entries"][0].contains("cluster"));  // the expression, for other shapes
  CHECK(j["arch"] == "sm_90a");
  CHECK(j["launch_notes"].get<std::string>().find("NON_PORTABLE_CLUSTER_SIZE_ALLOWED") != std::string::npos);
  REQUIRE(j["shapes"].size() == op->tune.size());
  bool long_rows = false, short_rows = false;
  for (const auto& s : j["shapes"]) {
    const auto& l = s["launches"][0];
    if (s["shape"] == "256x262144") {
      // 1 MiB rows in 64 KiB slices: a cluster of 16 per row, 16 blocks per row.
      long_rows = true;
      CHECK(l["cluster"] == nlohmann::json::array({16, 1, 1}));
      CHECK(l["grid"][0] == 256 * 16);
      CHECK(l["smem"] == 65536);
    }
    if (s["shape"] == "65536x256") {
      // 1 KiB rows: no cluster beyond 1, 8 rows per block.
      short_rows = true;
      CHECK(l["cluster"] == nlohmann::json::array({1, 1, 1}));
      CHECK(l["grid"][0] == 65536 / 8);
      CHECK(l["smem"] == 8 * 1024);
    }
  }
  CHECK(long_rows);
  CHECK(short_rows);
}

TEST_CASE("launch.json has no cluster key for a launch without one", "[engine]") {
  auto op = LoadOpSpec((testing::SourceRoot() / "configs/ops/softmax").string());
  REQUIRE(op.ok());
  const std::string text = testing::ReadFile(testing::SourceRoot() / "configs/ops/softmax/seeds/warp_row.cu");
  auto src = CandidateSource::Parse(text, "warp_row.cu");
  REQUIRE(src.ok());
  nlohmann::json j = LaunchJson(text, "warp_row.cu", src->DefaultAssignment(), *op, DType::kBF16, "sm_90a", 132);
  CHECK_FALSE(j["entries"][0].contains("cluster"));
  REQUIRE(!j["shapes"].empty());
  CHECK_FALSE(j["shapes"][0]["launches"][0].contains("cluster"));
  CHECK(j["dtype"] == "bf16");
  CHECK(j["launch_notes"].get<std::string>().find("zeroed scratch") == std::string::npos);  // none here
}

TEST_CASE("launch.json resolves num_sms and scratch sizes per shape, and states the scratch contract", "[engine]") {
  auto op = LoadOpSpec((testing::SourceRoot() / "configs/ops/softmax").string());
  REQUIRE(op.ok());
  const std::string text = testing::ReadFile(testing::SourceRoot() / "configs/ops/softmax/seeds/split_row.cu");
  auto src = CandidateSource::Parse(text, "split_row.cu");
  REQUIRE(src.ok());
  Assignment params = src->DefaultAssignment();
  params["CHUNK"] = 32;
  params["LAG"] = 12;
  nlohmann::json j = LaunchJson(text, "split_row.cu", params, *op, DType::kBF16, "sm_90a", 132);
  CHECK(j["num_sms"] == 132);
  CHECK(j["launch_notes"].get<std::string>().find("zeroed scratch buffer is zeroed once") != std::string::npos);
  REQUIRE(j["shapes"].size() == op->tune.size());
  bool very_long = false, two_chunks = false;
  for (const auto& s : j["shapes"]) {
    INFO(s.dump());
    REQUIRE_FALSE(s.contains("error"));
    if (s["shape"] == "256x262144") {
      // 512 KiB bf16 rows in 32 KiB chunks: 16 per row, two items each with LAG.
      very_long = true;
      CHECK(s["launches"][0]["grid"][0] == 256 * 16 * 2);
      CHECK(s["scratch_bytes"] == nlohmann::json::array({(4 + 4 * 256 * 16) * 4}));
    }
    if (s["shape"] == "4096x32768") {
      // 64 KiB rows: 2 chunks, fewer than 4, so one item per chunk.
      two_chunks = true;
      CHECK(s["launches"][0]["grid"][0] == 4096 * 2);
    }
  }
  CHECK(very_long);
  CHECK(two_chunks);

  // Without a device the SM count is unknown: every shape says why it has no values.
  nlohmann::json none = LaunchJson(text, "split_row.cu", params, *op, DType::kBF16, "sm_90a", 0);
  REQUIRE(!none["shapes"].empty());
  CHECK(none["shapes"][0]["error"].get<std::string>().find("num_sms") != std::string::npos);
}

// nvcc from $CUDA_HOME or /usr/local/cuda, or empty.
std::string FindNvcc() {
  for (const char* home : {static_cast<const char*>(std::getenv("CUDA_HOME")), "/usr/local/cuda"}) {
    if (home == nullptr || *home == '\0') continue;
    std::filesystem::path p = std::filesystem::path(home) / "bin" / "nvcc";
    if (std::filesystem::exists(p)) return p.string();
  }
  return "";
}

TEST_CASE("BakeParameters fixes param lines and drops preset lines as the parser reads them", "[engine]") {
  const std::string text =
      "// @kevolve param X 1 2  // a preset would be nice\n"
      "//\t@kevolve\tpreset\tX=2\n"
      "// @kevolve preset X=1\n"
      "// @kevolve launch k grid=1 block=X\n"
      "extern \"C\" __global__ void k() {}\n";
  const std::string baked = BakeParameters(text, {{"X", 2}}, DType::kF32);
  CHECK(baked.find("preset\tX=2") == std::string::npos);
  CHECK(baked.find("@kevolve preset") == std::string::npos);
  CHECK(baked.find("// @kevolve param X 2\n") != std::string::npos);
  auto src = CandidateSource::Parse(baked, "k.cu");
  REQUIRE(src.ok());
  CHECK(src->DefaultAssignment() == Assignment{{"X", 2}});
  CHECK(src->presets.empty());
}

TEST_CASE("an exported kernel.cu compiles on its own next to kevolve.h, and still through kevolve", "[engine]") {
  struct Case {
    const char* op;
    const char* seed;
    DType dtype;
  };
  // Seeds that use the kv:: helpers of kevolve.h (groups, bulk copies, slots, cp.async).
  const Case cases[] = {{"softmax", "split_row.cu", DType::kF32},
                        {"rmsnorm", "block_row.cu", DType::kBF16},
                        {"layernorm", "warp_row.cu", DType::kF16},
                        {"matmul", "mma_sync.cu", DType::kBF16}};
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) WARN("nvcc not found (CUDA_HOME, /usr/local/cuda): the standalone compile is skipped");
  for (const Case& c : cases) {
    INFO(c.op << " " << c.seed << " " << DTypeName(c.dtype));
    const std::string text =
        testing::ReadFile(testing::SourceRoot() / "configs/ops" / c.op / "seeds" / c.seed);
    auto src = CandidateSource::Parse(text, c.seed);
    REQUIRE(src.ok());
    const std::string baked = BakeParameters(text, src->DefaultAssignment(), c.dtype);
    CHECK(baked.find("#include \"kevolve.h\"") != std::string::npos);
    CHECK(baked.find("@kevolve preset") == std::string::npos);  // presets name other values: dropped
    std::string macro = DTypeName(c.dtype);
    for (auto& ch : macro) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    CHECK(baked.find("#define KV_DTYPE_" + macro + " 1\n#define KV_SIZEOF_T " + std::to_string(DTypeSize(c.dtype))) !=
          std::string::npos);

    // Through kevolve: the baked file has one value per parameter and the same dtype.
    auto again = CandidateSource::Parse(baked, c.seed);
    REQUIRE(again.ok());
    NvrtcCompiler nvrtc;
    CompileResult r = nvrtc.Compile(MakeCompileRequest(*again, again->DefaultAssignment(), c.dtype, "sm_90a"));
    INFO(r.log);
    CHECK(r.ok);

    // On its own: nvcc with no kevolve option, the dtype and parameters from the file.
    if (nvcc.empty()) continue;
    auto dir = testing::MakeTempDir("standalone");
    WriteTextFile((dir / "kernel.cu").string(), baked);
    WriteTextFile((dir / "kevolve.h").string(), KevolveHeader());
    const std::string cmd = "cd '" + dir.string() + "' && '" + nvcc +
                            "' -arch=sm_90a -std=c++17 -cubin -I. kernel.cu -o kernel.cubin > nvcc.log 2>&1";
    const int rc = std::system(cmd.c_str());
    INFO(testing::ReadFile(dir / "nvcc.log"));
    CHECK(rc == 0);
    CHECK(std::filesystem::exists(dir / "kernel.cubin"));
  }
}

}  // namespace
}  // namespace kevolve

namespace kevolve {
namespace {

// An executor with scripted timings: candidate i (by the order its binary is first seen)
// runs at search[i] times the copy roofline on its first timed evaluation and again[i]
// times it on every later one, at every tune shape. Correctness always passes.
class ScriptedExecutor : public GpuExecutor {
 public:
  static constexpr double kCopyGbps = 4000;
  std::vector<double> search, again;
  int evaluations = 0;
  std::vector<DeviceDesc> Devices() const override {
    DeviceDesc d;
    d.uuid = "FAKE-0";
    d.name = "scripted";
    d.arch = "sm_90";
    d.sm_count = 132;
    return {d};
  }
  Result<EvalResult> Evaluate(const EvalRequest& req) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++evaluations;
    EvalResult r;
    r.id = req.id;
    r.device_uuid = "FAKE-0";
    r.rungs.push_back({"launch", true, "", nlohmann::json::object(), "", 0});
    r.rungs.push_back({"correctness", true, "", nlohmann::json::object(), "", 0});
    if (req.skip_timing || req.tune.empty()) return r;
    auto [it, fresh] = index_.try_emplace(req.candidate.hash, static_cast<int>(index_.size()));
    const int i = it->second;
    const double factor = (timed_[i]++ == 0 ? search : again).at(static_cast<size_t>(i));
    r.rungs.push_back({"timing", true, "", nlohmann::json::object(), "", 0});
    for (const auto& s : req.tune) {
      ShapeTiming t;
      t.shape = s.label;
      const double median = factor * s.bytes / (kCopyGbps * 1e3);
      t.median_us = t.p10_us = t.p90_us = median;
      t.n = 10;
      t.samples_us.assign(10, median);
      t.bytes = s.bytes;
      t.flops = s.flops;
      r.timings.push_back(t);
    }
    return r;
  }
  Result<Calibration> Calibrate(int) override {
    Calibration c;
    c.uuid = "FAKE-0";
    c.copy_gbps = kCopyGbps;
    c.fp32_gflops = 60000;
    return c;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> index_;
  std::map<int, int> timed_;
};

}  // namespace

TEST_CASE("per-shape export times the fastest candidates again and picks and reports by the new medians", "[engine]") {
  auto op = LoadOpSpec((testing::SourceRoot() / "configs/ops/softmax").string());
  REQUIRE(op.ok());
  ScriptedExecutor ex;
  // A is the search's fastest everywhere, B second, C third; timed again, C < B < A. With
  // confirm = 2 only A and B are timed again, so B wins every shape at its new median.
  ex.search = {1.10, 1.20, 1.30};
  ex.again = {1.40, 1.05, 1.02};
  Calibration cal = *ex.Calibrate(0);
  auto pipe = Pipeline::Create(*op, DType::kF32, &ex, {{"FAKE-0", cal}},
                               std::make_shared<CachingCompiler>(std::make_shared<NvrtcCompiler>()), PipelineOptions{});
  REQUIRE(pipe.ok());
  const auto dir = testing::MakeTempDir("confirm");
  auto store = db::OpenSqliteStore((dir / "k.db").string());
  REQUIRE(store.ok());
  db::RunRecord run;
  run.op = "softmax";
  run.dtype = "f32";
  auto run_id = (*store)->CreateRun(run);
  REQUIRE(run_id.ok());
  const std::string text = testing::ReadFile(testing::SourceRoot() / "configs/ops/softmax/seeds/warp_row.cu");
  std::vector<int64_t> ids;
  for (int warps : {4, 2, 8}) {  // A, B, C: one at a time, so the executor sees them in this order
    std::vector<Ladder> l = (*pipe)->Run({{"warp_row.cu", text, {{"WARPS", warps}, {"ROWS", 2}, {"VBYTES", 16}, {"CHUNKS", 2}, {"STCS", 0}}}});
    for (const auto& r : l[0].rungs) INFO(r.name << " " << r.ok << " " << r.log.substr(0, 300));
    INFO(l[0].status());
    REQUIRE(l[0].ok());
    RecordContext ctx;
    ctx.op = "softmax";
    ctx.dtype = "f32";
    ctx.arch = "sm_90";
    ctx.run_id = *run_id;
    auto id = RecordLadder(**store, l[0], ctx);
    REQUIRE(id.ok());
    ids.push_back(*id);
  }

  ExportOptions eo;
  eo.run_id = *run_id;
  eo.top = 1;
  eo.per_shape = true;
  eo.confirm = 2;
  eo.out_dir = (dir / "confirmed").string();
  const int before = ex.evaluations;
  auto n = ExportRun(**store, **pipe, eo);
  REQUIRE(n.ok());
  // One evaluation each for A and B, held-out gate and re-timing together; the top pick (A)
  // and the per-shape picks (B) reuse them.
  CHECK(ex.evaluations - before == 2);
  auto d = nlohmann::json::parse(testing::ReadFile(dir / "confirmed" / "dispatch.json"));
  CHECK(d["confirm"] == 2);
  for (const auto& s : op->tune) {
    INFO(s.label);
    const auto& e = d["shapes"][s.label];
    CHECK(e["candidate"] == ids[1]);
    CHECK(e["median_us"].get<double>() / e["search_median_us"].get<double>() == Approx(1.05 / 1.20));
    CHECK(e["retimed"] == true);
    CHECK(std::filesystem::exists(dir / "confirmed" / e["folder"].get<std::string>() / "kernel.cu"));
  }
  CHECK(testing::ReadFile(dir / "confirmed" / "README.md").find("timed again") != std::string::npos);

  // confirm = 0: the search's medians as they are; A everywhere.
  eo.confirm = 0;
  eo.out_dir = (dir / "as_searched").string();
  const int before0 = ex.evaluations;
  REQUIRE(ExportRun(**store, **pipe, eo).ok());
  CHECK(ex.evaluations - before0 == 1);  // A's held-out gate, once for both of its picks
  auto d0 = nlohmann::json::parse(testing::ReadFile(dir / "as_searched" / "dispatch.json"));
  for (const auto& s : op->tune) {
    INFO(s.label);
    CHECK(d0["shapes"][s.label]["candidate"] == ids[0]);
    CHECK(d0["shapes"][s.label]["median_us"].get<double>() / d["shapes"][s.label]["median_us"].get<double>() ==
          Approx(1.10 / 1.05));
    CHECK(d0["shapes"][s.label]["retimed"] == false);
  }
}

}  // namespace kevolve

// [gpu] tests: they need an NVIDIA GPU and are skipped (exit 77, with the reason) without one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "kevolve/core/json_file.h"
#include "kevolve/core/op_spec.h"
#include "kevolve/db/store.h"
#include "kevolve/core/paths.h"
#include "kevolve/engine/pipeline.h"
#include "kevolve/engine/profiler.h"
#include "kevolve/evaluators/cuda_driver.h"
#include "kevolve/evaluators/metrics.h"
#include "kevolve/evaluators/nvrtc_compiler.h"
#include "kevolve/evaluators/worker_pool.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace kevolve;

namespace {

// One worker pool for every [gpu] test in this process (starting workers costs seconds).
struct GpuFixture {
  std::unique_ptr<WorkerPool> pool;
  std::map<std::string, Calibration> cal;
  std::shared_ptr<Compiler> compiler = std::make_shared<CachingCompiler>(std::make_shared<NvrtcCompiler>());

  static GpuFixture& Get() {
    static GpuFixture f;
    return f;
  }

 private:
  GpuFixture() {
    auto gpus = ListGpus();
    REQUIRE(gpus.ok());
    WorkerPoolOptions o;
    o.exe = testing::KevolveBinary().string();
    for (const auto& g : *gpus) o.devices.push_back(g.ordinal);
    auto p = WorkerPool::Start(o);
    INFO((p.ok() ? "" : p.error()));
    REQUIRE(p.ok());
    pool = std::move(*p);
    auto c = LoadOrCalibrate(*pool, nullptr, true, true);
    REQUIRE(c.ok());
    cal = *c;
  }
};

OpSpec Op(const std::string& name) {
  auto op = LoadOpSpec((testing::SourceRoot() / "configs/ops" / name).string());
  REQUIRE(op.ok());
  return *op;
}

CandidateInput Input(const fs::path& file) {
  std::string text = testing::ReadFile(file);
  auto parsed = CandidateSource::Parse(text, file.filename().string());
  REQUIRE(parsed.ok());
  return {file.filename().string(), text, parsed->DefaultAssignment()};
}

std::unique_ptr<Pipeline> MakePipeline(const OpSpec& op, DType dt, bool skip_timing) {
  auto& f = GpuFixture::Get();
  PipelineOptions po;
  po.eval.skip_timing = skip_timing;
  po.eval.launch_timeout_ms = 1500;
  po.eval.timing.max_ms_per_shape = 200;
  auto p = Pipeline::Create(op, dt, f.pool.get(), f.cal, f.compiler, po);
  REQUIRE(p.ok());
  return std::move(*p);
}

// Softmax over each row in double on the CPU.
std::vector<double> CpuSoftmax(const std::vector<double>& x, int rows, int cols) {
  std::vector<double> y(x.size());
  for (int r = 0; r < rows; ++r) {
    const double* xr = &x[static_cast<size_t>(r) * cols];
    double m = -INFINITY, s = 0;
    for (int c = 0; c < cols; ++c) m = std::max(m, xr[c]);
    for (int c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
    for (int c = 0; c < cols; ++c) y[static_cast<size_t>(r) * cols + c] = std::exp(xr[c] - m) / s;
  }
  return y;
}

}  // namespace

TEST_CASE("the softmax reference matches a CPU double implementation", "[gpu]") {
  GpuFixture::Get();  // makes sure a GPU is there and the pool is up
  OpSpec op = Op("softmax");
  auto drv = CudaDriver::Get();
  REQUIRE(drv.ok());
  const CudaDriver& d = **drv;
  CUdevice dev;
  CUcontext ctx;
  REQUIRE(d.cuDeviceGet(&dev, 0) == CUDA_SUCCESS);
  REQUIRE(d.cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS);
  REQUIRE(d.cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  auto ref = CandidateSource::Parse(testing::ReadFile(op.reference), "reference.cu");
  REQUIRE(ref.ok());
  NvrtcCompiler nvrtc;
  std::mt19937_64 rng(7);
  for (DType dt : op.dtypes) {
    auto bin = nvrtc.Compile(MakeCompileRequest(*ref, {}, dt, DefaultArch()));
    REQUIRE(bin.ok);
    CUmodule mod;
    REQUIRE(d.cuModuleLoadData(&mod, bin.cubin.data()) == CUDA_SUCCESS);
    CUfunction fn;
    REQUIRE(d.cuModuleGetFunction(&fn, mod, bin.lowered.at("softmax_ref").c_str()) == CUDA_SUCCESS);
    for (auto [rows, cols] : {std::pair{3, 1000}, std::pair{1, 1}, std::pair{17, 4099}}) {
      size_t n = static_cast<size_t>(rows) * cols;
      std::vector<char> xraw(n * DTypeSize(dt));
      std::vector<double> x(n);
      std::normal_distribution<double> nd(0, 4);
      for (size_t i = 0; i < n; ++i) {
        StoreFromDouble(nd(rng) + 10, &xraw[i * DTypeSize(dt)], dt);
        x[i] = LoadAsDouble(&xraw[i * DTypeSize(dt)], dt);  // the value the GPU sees
      }
      CUdeviceptr dx, dy;
      REQUIRE(d.cuMemAlloc(&dx, xraw.size()) == CUDA_SUCCESS);
      REQUIRE(d.cuMemAlloc(&dy, n * sizeof(double)) == CUDA_SUCCESS);
      d.cuMemcpyHtoD(dx, xraw.data(), xraw.size());
      void* args[] = {&dx, &dy, &rows, &cols};
      REQUIRE(d.cuLaunchKernel(fn, rows, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr) == CUDA_SUCCESS);
      REQUIRE(d.cuCtxSynchronize() == CUDA_SUCCESS);
      std::vector<double> y(n);
      d.cuMemcpyDtoH(y.data(), dy, n * sizeof(double));
      auto want = CpuSoftmax(x, rows, cols);
      double worst = 0;
      for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(y[i] - want[i]) / std::max(want[i], 1e-300));
      INFO(DTypeName(dt) << " " << rows << "x" << cols);
      CHECK(worst < 1e-12);
      d.cuMemFree(dx);
      d.cuMemFree(dy);
    }
    d.cuModuleUnload(mod);
  }
  d.cuDevicePrimaryCtxRelease(dev);
}

TEST_CASE("softmax seeds pass every rung in every dtype", "[gpu]") {
  OpSpec op = Op("softmax");
  std::vector<Shape> tune = {op.tune[0], op.tune[6]};  // 4096x1024 and 65536x256: quick
  for (DType dt : op.dtypes) {
    auto p = MakePipeline(op, dt, false);
    std::vector<CandidateInput> in;
    for (const auto& s : op.seeds) in.push_back(Input(s));
    auto ladders = p->Run(in, nullptr, &tune);
    for (const auto& l : ladders) {
      INFO(DTypeName(dt) << " " << l.input.name);
      for (const auto& r : l.rungs) INFO(FormatRung(r));
      CHECK(l.ok());
      CHECK(l.timings.size() == tune.size());
      REQUIRE(l.fitness.has_value());
      CHECK(l.fitness->fitness > 0.05);
    }
  }
}

TEST_CASE("planted bad kernels fail at the right rung, and the worker serves the next", "[gpu]") {
  OpSpec op = Op("softmax");
  auto p = MakePipeline(op, DType::kF32, true);
  auto good = Input(op.seeds[0]);
  struct Case {
    const char* file;
    const char* rung;
    const char* reason;
  };
  const Case cases[] = {
      {"oob_write.cu", "correctness", "out_of_bounds"},  {"partial.cu", "correctness", "unwritten"},
      {"constant.cu", "correctness", "mismatch"},        {"stale.cu", "correctness", "mismatch"},
      {"input_write.cu", "correctness", "input_written"}, {"infinite_loop.cu", "launch", "timeout"},
      {"illegal_address.cu", "launch", "illegal_address"}, {"race.cu", "correctness", "nondeterministic"},
      {"too_many_threads.cu", "launch", "resources"},
  };
  for (const auto& c : cases) {
    auto ladders = p->Run({Input(testing::SourceRoot() / "tests/kernels" / c.file), good});
    const Ladder& bad = ladders[0];
    std::string ladder;
    for (const auto& r : bad.rungs) ladder += FormatRung(r) + "\n";
    INFO(c.file << "\n" << ladder);
    REQUIRE_FALSE(bad.ok());
    const RungResult* failed = nullptr;
    for (const auto& r : bad.rungs)
      if (!r.ok && !failed) failed = &r;
    REQUIRE(failed);
    CHECK(failed->name == c.rung);
    CHECK(failed->reason == c.reason);
    INFO("the next candidate on the same pool");
    CHECK(ladders[1].ok());
  }
}

TEST_CASE("a kernel faster than the roofline is flagged suspect", "[gpu]") {
  OpSpec op = Op("softmax");
  auto p = MakePipeline(op, DType::kF32, false);
  std::vector<Shape> tune = {op.tune[6], op.tune[8]};
  auto ladders = p->Run({Input(testing::SourceRoot() / "tests/kernels/too_fast.cu")}, nullptr, &tune);
  const Ladder& l = ladders[0];
  std::string ladder;
  for (const auto& r : l.rungs) ladder += FormatRung(r) + "\n";
  INFO(ladder);
  const RungResult* fit = l.Find("fitness");
  REQUIRE(fit);
  CHECK_FALSE(fit->ok);
  CHECK(fit->reason == "suspect");
  CHECK(l.status() == "suspect");
}

TEST_CASE("every GPU of the machine takes evaluations", "[gpu]") {
  auto& f = GpuFixture::Get();
  if (f.pool->Devices().size() < 2) {
    WARN("one GPU: the several-GPU dispatch is checked on a machine with two");
    return;
  }
  OpSpec op = Op("softmax");
  auto p = MakePipeline(op, DType::kF32, true);
  std::vector<CandidateInput> in;
  for (int i = 0; i < 8; ++i) {
    auto c = Input(op.seeds[i % 2]);
    in.push_back(c);
  }
  auto ladders = p->Run(in);
  std::set<std::string> used;
  for (const auto& l : ladders) {
    CHECK(l.ok());
    used.insert(l.device_uuid);
  }
  CHECK(used.size() >= 2);
}

TEST_CASE("kevolve --op softmax runs generations, then kevolve export writes every artifact", "[gpu]") {
  GpuFixture::Get();
  auto dir = testing::MakeTempDir("gpurun");
  std::string env = "cd '" + dir.string() + "' && KEVOLVE_HOME='" + testing::SourceRoot().string() + "' '" +
                    testing::KevolveBinary().string() + "' ";
  std::string out;
  int rc = testing::RunCommand(env + "--op softmax --gens 3 --population 6 --islands 2 --db k.db --no-export", &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("gen 3/3") != std::string::npos);
  rc = testing::RunCommand(env + "export --run 1 --top 2 --per-shape --out best --db k.db", &out);
  INFO(out);
  REQUIRE(rc == 0);
  int folders = 0;
  for (const auto& e : fs::directory_iterator(dir / "best")) {
    if (!e.is_directory()) continue;
    ++folders;
    for (const char* f : {"kernel.cu", "launch.json", "kernel.ptx", "kernel.cubin", "resources.json", "metrics.json",
                          "lineage.json", "README.md"}) {
      INFO(e.path() << " " << f);
      CHECK(fs::exists(e.path() / f));
      if (fs::exists(e.path() / f)) CHECK(fs::file_size(e.path() / f) > 0);
    }
    if (!FindTool("cuobjdump").empty()) CHECK(fs::file_size(e.path() / "kernel.sass") > 0);
  }
  CHECK(folders >= 2);  // the top 2, plus per-shape winners that are not among them
  CHECK(fs::file_size(dir / "best" / "README.md") > 0);
  // dispatch.json: every tune shape maps to an exported folder holding the fastest
  // candidate for that shape (no other candidate of the run has a smaller median there).
  auto dispatch = nlohmann::json::parse(testing::ReadFile(dir / "best" / "dispatch.json"));
  auto op = LoadOpSpec((testing::SourceRoot() / "configs" / "ops" / "softmax").string());
  REQUIRE(op.ok());
  auto store = db::OpenSqliteStore((dir / "k.db").string());
  REQUIRE(store.ok());
  db::CandidateQuery q;
  q.run_id = 1;
  q.only_ok = true;
  auto cands = (*store)->ListCandidates(q);
  REQUIRE(cands.ok());
  for (const auto& s : op->tune) {
    INFO(s.label);
    REQUIRE(dispatch["shapes"].contains(s.label));
    const auto& d = dispatch["shapes"][s.label];
    CHECK(fs::exists(dir / "best" / d["folder"].get<std::string>() / "kernel.cu"));
    double best = 1e30;
    for (const auto& c : *cands)
      for (const auto& t : *(*store)->GetTimings(c.id))
        if (t.shape == s.label) best = std::min(best, t.median_us);
    CHECK(d["median_us"].get<double>() == Approx(best));
  }
}

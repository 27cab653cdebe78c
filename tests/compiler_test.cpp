// The compile gate without a GPU: static checks, NVRTC to sm_90 CUBIN, resources, cache.
#include <catch2/catch.hpp>

#include <filesystem>

#include "kevolve/core/op_spec.h"
#include "kevolve/evaluators/compile_pool.h"
#include "kevolve/evaluators/nvrtc_compiler.h"
#include "kevolve/evaluators/rungs.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace kevolve;

namespace {

CompileResult CompileText(const std::string& text, DType dtype = DType::kF32, Assignment params = {},
                          const std::string& name = "k.cu") {
  auto c = CandidateSource::Parse(text, name);
  REQUIRE(c.ok());
  if (params.empty()) params = c->DefaultAssignment();
  NvrtcCompiler nvrtc;
  return nvrtc.Compile(MakeCompileRequest(*c, params, dtype, "sm_90"));
}

const char* kSmemKernel = R"(// @kevolve param BLOCK 256
// @kevolve launch k grid=rows block=BLOCK
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  __shared__ float buf[BLOCK];
  buf[threadIdx.x] = kv::to_float(x[blockIdx.x * cols + threadIdx.x]);
  __syncthreads();
  y[blockIdx.x * cols + threadIdx.x] = kv::from_float<T>(buf[(threadIdx.x + 1) % BLOCK]);
}
)";

// layernorm's block_row seed, parsed, for the tests of its parameters.
struct LayernormBlockRow {
  OpSpec op;
  std::string text;
  CandidateSource src;
  LayernormBlockRow() {
    const fs::path dir = testing::SourceRoot() / "configs" / "ops" / "layernorm";
    auto spec = LoadOpSpec(dir.string());
    REQUIRE(spec.ok());
    op = *spec;
    const fs::path f = dir / "seeds" / "block_row.cu";
    text = testing::ReadFile(f.string());
    auto parsed = CandidateSource::Parse(text, f.string());
    REQUIRE(parsed.ok());
    src = *parsed;
  }
  // The default assignment with `over` applied.
  Assignment With(const Assignment& over) const {
    Assignment a = src.DefaultAssignment();
    for (const auto& [k, v] : over) a[k] = v;
    return a;
  }
  // `a` passes the static rung and compiles for sm_90a in every dtype of the op.
  void CompilesInEveryDtype(const Assignment& a) const {
    NvrtcCompiler nvrtc;
    for (DType dt : op.dtypes) {
      CandidateSource parsed;
      RungResult s = StaticRung(op, dt, "block_row.cu", text, a, &parsed);
      INFO(DTypeName(dt) << ": " << s.log);
      REQUIRE(s.ok);
      CompileResult r = nvrtc.Compile(MakeCompileRequest(parsed, a, dt, "sm_90a"));
      INFO(r.log);
      CHECK(r.ok);
    }
  }
};

}  // namespace

TEST_CASE("every shipped seed and reference compiles for sm_90 in every dtype, and so does every preset", "[compile]") {
  std::vector<CompileRequest> reqs;
  std::vector<std::string> what;
  for (const auto& dir : ListOpDirs((testing::SourceRoot() / "configs" / "ops").string())) {
    auto op = LoadOpSpec(dir);
    REQUIRE(op.ok());
    std::vector<std::string> files = op->seeds;
    files.push_back(op->reference);
    for (DType dt : op->dtypes) {
      for (const auto& f : files) {
        CandidateSource parsed;
        RungResult s = StaticRung(*op, dt, fs::path(f).filename().string(), testing::ReadFile(f),
                                  CandidateSource::Parse(testing::ReadFile(f), f)->DefaultAssignment(), &parsed);
        INFO(f << " " << DTypeName(dt) << ": " << s.log);
        REQUIRE(s.ok);
        reqs.push_back(MakeCompileRequest(parsed, parsed.DefaultAssignment(), dt, "sm_90a"));
        what.push_back(f + " " + DTypeName(dt));
        // A preset that fails a requirement for a dtype would be skipped without a word:
        // every shipped preset must pass the static rung in every dtype of its op.
        for (const auto& p : parsed.presets) {
          CandidateSource again;
          RungResult ps = StaticRung(*op, dt, fs::path(f).filename().string(), testing::ReadFile(f), p, &again);
          INFO("preset " << AssignmentString(p) << ": " << ps.log);
          REQUIRE(ps.ok);
          reqs.push_back(MakeCompileRequest(again, p, dt, "sm_90a"));
          what.push_back(f + " " + DTypeName(dt) + " preset " + AssignmentString(p));
        }
      }
    }
  }
  NvrtcCompiler nvrtc;
  auto results = CompileAll(nvrtc, reqs);
  for (size_t i = 0; i < results.size(); ++i) {
    INFO(what[i] << "\n" << results[i].log);
    CHECK(results[i].ok);
    CHECK(!results[i].cubin.empty());
    CHECK(results[i].ptx.find(".target sm_90") != std::string::npos);
    CHECK(results[i].resources.size() == reqs[i].entries.size());
  }
}

TEST_CASE("layernorm block_row holds w and b in registers across persistent rows only where its register cap allows", "[compile]") {
  const LayernormBlockRow lb;
  const OpSpec& op = lb.op;
  const std::string& text = lb.text;
  auto with = [&](const Assignment& over) { return lb.With(over); };
  // 2 chunks of 16 bytes: x, w and b take 24 registers, under the 64 that
  // __launch_bounds__(512, 2) leaves.
  const Assignment fits = with({{"PERSIST", 1}, {"WREG", 1}, {"XNA", 1}, {"BLOCK", 512}, {"BPS", 2}, {"CHUNKS", 2}});
  lb.CompilesInEveryDtype(fits);
  // 4 chunks: 48 registers of x, w and b plus 24 where 512 x 2 threads leave 64; without
  // WREG the same launch fits (16 + 24).
  const Assignment over_cap = with({{"PERSIST", 1}, {"WREG", 1}, {"BLOCK", 512}, {"BPS", 2}, {"CHUNKS", 4}});
  CandidateSource parsed;
  RungResult s = StaticRung(op, DType::kBF16, "block_row.cu", text, over_cap, &parsed);
  INFO(s.log);
  CHECK_FALSE(s.ok);
  CHECK(s.log.find("65536 / (BLOCK * BPS)") != std::string::npos);
  Assignment no_wreg = over_cap;
  no_wreg["WREG"] = 0;
  CHECK(StaticRung(op, DType::kBF16, "block_row.cu", text, no_wreg, &parsed).ok);
}

TEST_CASE("layernorm block_row gives w and b shared memory only where they fit beside the persistent tile", "[compile]") {
  const LayernormBlockRow lb;
  const OpSpec& op = lb.op;
  const std::string& text = lb.text;
  const CandidateSource& src = lb.src;
  auto with = [&](const Assignment& over) { return lb.With(over); };
  auto smem = [&](const Assignment& a, int64_t cols, int64_t sizeof_t) {
    auto l = ResolveLaunches(src, a, {{"rows", 4096}, {"cols", cols}, {"sizeof_T", sizeof_t}, {"num_sms", 132}});
    REQUIRE(l.ok());
    REQUIRE(l->size() == 1);
    return (*l)[0].smem;
  };
  const Assignment wsm = with({{"PERSIST", 1}, {"WSM", 1}, {"BLOCK", 1024}, {"CHUNKS", 4}});
  Assignment plain = wsm;
  plain["WSM"] = 0;
  // bf16 32768 columns: the 1024 x 4 x 16-byte tile (64 KiB) plus 2 x 64 KiB of w and b.
  CHECK(smem(plain, 32768, 2) == 65536);
  CHECK(smem(wsm, 32768, 2) == 65536 + 2 * 32768 * 2);
  // f32: 256 KiB of w and b do not fit beside the tile, so the launch asks for the tile
  // alone and the kernel reads w and b per row.
  CHECK(smem(wsm, 32768, 4) == 65536);
  // Unaligned rows (no 16-byte groups) take the fallback path: no room for w and b.
  CHECK(smem(wsm, 32767, 2) == smem(plain, 32767, 2));
  // Two blocks per SM need twice the room: 16384 bf16 columns (512 x 4 tile, 32 KiB, plus
  // 64 KiB) fit twice; 32768 bf16 columns at 512 x 8 (64 KiB tile plus 128 KiB) do not.
  Assignment two = with({{"PERSIST", 1}, {"WSM", 1}, {"BLOCK", 512}, {"CHUNKS", 4}, {"BPS", 2}});
  CHECK(smem(two, 16384, 2) == 32768 + 65536);
  Assignment two8 = two;
  two8["CHUNKS"] = 8;
  CHECK(smem(two8, 32768, 2) == 65536);
  // A row longer than one tile takes the fallback path: no room for w and b.
  CHECK(smem(two, 32768, 2) == 32768);
  // The grid holds BPS * BLOCK / block blocks per SM: at 1024 x 8, a 32768-column bf16 row
  // gets blocks of 512 threads, two per SM, and two of (64 + 128 KiB) do not fit.
  Assignment wide = wsm;
  wide["CHUNKS"] = 8;
  CHECK(smem(wide, 32768, 2) == 65536);
  // Nor do 8192 columns there (blocks of 128, 8 per SM, 16 + 32 KiB each); at 1024 x 4 they
  // do (blocks of 256, 4 per SM, 16 + 32 KiB each), and so do 16384 (512, 2 per SM, 32 + 64).
  CHECK(smem(wide, 8192, 2) == 16384);
  CHECK(smem(wsm, 8192, 2) == 16384 + 32768);
  CHECK(smem(wsm, 16384, 2) == 32768 + 65536);
  // WSM needs the persistent grid and is pointless with WREG (w and b already in registers).
  lb.CompilesInEveryDtype(wsm);
  CandidateSource parsed;
  CHECK_FALSE(StaticRung(op, DType::kBF16, "block_row.cu", text, with({{"WSM", 1}}), &parsed).ok);
  CHECK_FALSE(StaticRung(op, DType::kBF16, "block_row.cu", text,
                         with({{"PERSIST", 1}, {"WSM", 1}, {"WREG", 1}, {"BLOCK", 512}, {"BPS", 2}, {"CHUNKS", 2}}),
                         &parsed)
                   .ok);
}

TEST_CASE("a compile error names the candidate's own line", "[compile]") {
  auto r = CompileText(R"(// @kevolve launch bad grid=rows block=32
extern "C" __global__ void bad(const T* x, T* y, int rows, int cols) {
  int i = threadIdx.x;

  y[i] = x[i] + not_declared_anywhere;
}
)", DType::kF32, {}, "bad.cu");
  CHECK_FALSE(r.ok);
  CHECK(r.rung == "compile");
  CHECK(r.log.find("bad.cu(5): error") != std::string::npos);
  CHECK(r.log.find("not_declared_anywhere") != std::string::npos);
}

TEST_CASE("resource usage comes from ptxas verbose output", "[compile]") {
  auto r = CompileText(kSmemKernel);
  REQUIRE(r.ok);
  REQUIRE(r.resources.count("k") == 1);
  const Resources& k = r.resources.at("k");
  CHECK(k.registers > 0);
  CHECK(k.smem_static == 256 * 4);  // float buf[BLOCK]
  CHECK(k.spill_stores == 0);
  CHECK(r.compile_ms > 0);

  auto parsed = ParsePtxasInfo(
      "ptxas info    : Compiling entry function 'foo' for 'sm_90'\n"
      "ptxas info    : Function properties for foo\n"
      "    24 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]\n");
  REQUIRE(parsed.count("foo") == 1);
  CHECK(parsed["foo"].registers == 255);
  CHECK(parsed["foo"].stack == 24);
  CHECK(parsed["foo"].spill_stores == 16);
  CHECK(parsed["foo"].spill_loads == 12);
  CHECK(parsed["foo"].smem_static == 4096);
  CHECK(parsed["foo"].cmem == 400);
  CHECK(parsed["foo"].barriers == 1);
}

TEST_CASE("parameters and the element type arrive as -D and a typedef", "[compile]") {
  const char* text = R"(// @kevolve param BLOCK 64 128
// @kevolve launch k grid=rows block=BLOCK
static_assert(sizeof(T) == KV_SIZEOF_T, "T matches KV_SIZEOF_T");
#if BLOCK == 128
#error "BLOCK is 128"
#endif
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) { y[threadIdx.x] = x[threadIdx.x]; }
)";
  CHECK(CompileText(text, DType::kBF16, {{"BLOCK", 64}}).ok);
  auto r = CompileText(text, DType::kF16, {{"BLOCK", 128}});
  CHECK_FALSE(r.ok);
  CHECK(r.log.find("BLOCK is 128") != std::string::npos);
}

TEST_CASE("includes outside the allow list are rejected before NVRTC runs", "[compile][static]") {
  const std::vector<std::string> bad = {
      "#include <stdio.h>",
      "#include \"/etc/passwd\"",
      "#include \"../secret.h\"",
      "#include <cuda/../../../../etc/hostname>",
      "#  include   <unistd.h>",
      "#define H <stdio.h>\n#include H",
      "#include_next <cuda_fp16.h>",
      "#if __has_include(\"/etc/passwd\")\n#endif",
  };
  for (const auto& inc : bad) {
    INFO(inc);
    Status s = StaticCheck("x.cu", inc + "\n");
    CHECK_FALSE(s.ok());
    if (!s.ok()) CHECK(s.message().rfind("x.cu:", 0) == 0);
  }
  for (const auto& good : {"#include <cuda_bf16.h>", "#include <cooperative_groups.h>",
                           "#include <cooperative_groups/reduce.h>", "#include <cuda/pipeline>",
                           "#include \"kevolve.h\""}) {
    INFO(good);
    CHECK(StaticCheck("x.cu", std::string(good) + "\n").ok());
  }
  // And through the compiler: a rejected include never reaches NVRTC.
  auto r = CompileText("#include </etc/passwd>\n// @kevolve launch k grid=1 block=1\n__global__ void k() {}\n");
  CHECK_FALSE(r.ok);
  CHECK(r.rung == "static");
  CHECK(r.log.find("root:") == std::string::npos);
}

TEST_CASE("allowed CUDA headers compile", "[compile]") {
  auto r = CompileText(R"(#include <cooperative_groups.h>
#include <cuda/pipeline>
// @kevolve launch k grid=rows block=32
namespace cg = cooperative_groups;
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  y[threadIdx.x] = x[warp.thread_rank()];
}
)", DType::kBF16);
  INFO(r.log);
  CHECK(r.ok);
}

TEST_CASE("the size limit and a missing entry fail the static rung", "[compile][static]") {
  StaticLimits limits;
  limits.max_bytes = 100;
  CHECK_FALSE(StaticCheck("big.cu", std::string(200, ' '), limits).ok());
  auto r = CompileText("// @kevolve launch missing grid=1 block=1\n__global__ void other() {}\n");
  CHECK_FALSE(r.ok);
  CHECK(r.rung == "static");
  CHECK(r.log.find("'missing' is not defined") != std::string::npos);
}

TEST_CASE("the compile cache never compiles the same request twice", "[compile]") {
  auto c = CandidateSource::Parse(kSmemKernel, "k.cu");
  REQUIRE(c.ok());
  auto inner = std::make_shared<NvrtcCompiler>();
  CachingCompiler cache(inner);
  auto req = MakeCompileRequest(*c, c->DefaultAssignment(), DType::kF32, "sm_90");
  auto a = cache.Compile(req);
  auto b = cache.Compile(req);
  REQUIRE(a.ok);
  CHECK_FALSE(a.cached);
  CHECK(b.cached);
  CHECK(a.cubin == b.cubin);
  CHECK(cache.size() == 1);
  auto req2 = req;
  req2.dtype = DType::kBF16;
  CHECK(req2.Hash() != req.Hash());
  cache.Compile(req2);
  CHECK(cache.size() == 2);
}

TEST_CASE("CompileAll returns results in request order", "[compile]") {
  const char* text = R"(// @kevolve param V 1 2 3 4
// @kevolve launch k grid=1 block=32
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  __shared__ float s[V * 64];
  s[threadIdx.x] = x[0]; __syncthreads(); y[0] = s[(threadIdx.x + 1) % 32];
}
)";
  auto c = CandidateSource::Parse(text, "k.cu");
  REQUIRE(c.ok());
  std::vector<CompileRequest> reqs;
  for (int64_t v : {1, 2, 3, 4}) reqs.push_back(MakeCompileRequest(*c, {{"V", v}}, DType::kF32, "sm_90"));
  NvrtcCompiler nvrtc;
  auto out = CompileAll(nvrtc, reqs, 2);
  REQUIRE(out.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    REQUIRE(out[i].ok);
    CHECK(out[i].resources.at("k").smem_static == static_cast<int64_t>((i + 1) * 64 * 4));
  }
}

TEST_CASE("the worker's harness kernels compile for sm_90", "[compile]") {
  NvrtcCompiler nvrtc;
  auto r = nvrtc.Compile(HarnessCompileRequest("sm_90"));
  INFO(r.log);
  REQUIRE(r.ok);
  CHECK(r.lowered.size() == 10);
  // The read flush's loads go through L2 (ld.global.cg, 16 bytes), so it evicts the L2:
  // looked for in kv_read_sweep's own PTX (the probes' ticket copy loads the same way).
  const size_t sweep = r.ptx.find(".entry kv_read_sweep");
  REQUIRE(sweep != std::string::npos);
  const std::string sweep_ptx = r.ptx.substr(sweep, r.ptx.find(".entry", sweep + 1) - sweep);
  CHECK(sweep_ptx.find("ld.global.cg.v4.u32") != std::string::npos);
  // The L2 probes load with .cg (L2, not L1: an L1 hit would hide the partition) and read
  // the SM id.
  CHECK(r.ptx.find("ld.global.cg.u32") != std::string::npos);
  CHECK(r.ptx.find("%smid") != std::string::npos);
}

TEST_CASE("parameters named like kevolve.h's identifiers do not break the pre-included header", "[compile]") {
  // Parameters reach the code as macros (-DNAME=value), so kevolve.h must not use names a
  // candidate is likely to give its parameters.
  const char* text = R"(// @kevolve param N 4
// @kevolve param C 2
// @kevolve param L 3
// @kevolve param G 1
// @kevolve param I 1
// @kevolve param AL 1
// @kevolve param BYTES 16
// @kevolve param WARP 32
// @kevolve param STREAM 0
// @kevolve param U 2
// @kevolve launch k grid=rows block=WARP
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  int item = 0, kind = 0;
  kv::lag_order(threadIdx.x, N * C, L, item, kind);
  const kv::Group<BYTES> g = kv::load_group<BYTES, AL == 1>(x + blockIdx.x * cols, 0, G > 0, cols);
  float f[BYTES / KV_SIZEOF_T];
  kv::unpack(g, f);
  y[blockIdx.x * cols + threadIdx.x % cols] = kv::from_float<T>(f[0] + (float)(item + kind + I + STREAM + U));
}
)";
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    CompileResult r = CompileText(text, dt);
    INFO(r.log);
    CHECK(r.ok);
  }
}

TEST_CASE("kv::load_group's L1 policies load with ld.global.nc and that policy, at every size", "[compile]") {
  const char* text = R"(// @kevolve param BYTES 16 8 4
// @kevolve param L1 0 1 2 3
// @kevolve launch k grid=rows block=32
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  const kv::Group<BYTES> g = kv::load_group<BYTES, true, size_t, L1>(x + (size_t)blockIdx.x * cols, threadIdx.x,
                                                                    threadIdx.x < cols / (BYTES / KV_SIZEOF_T), cols);
  kv::store_group<BYTES, true, false, size_t>(y + (size_t)blockIdx.x * cols, threadIdx.x, cols, g);
}
)";
  const char* policy[] = {"", ".L1::no_allocate", ".L1::evict_first", ".L1::evict_last"};
  const char* shape[] = {"", ".v2.u32", ".v4.u32"};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t bytes : {16, 8, 4}) {
      for (int64_t l1 = 0; l1 < 4; ++l1) {
        CompileResult r = CompileText(text, dt, {{"BYTES", bytes}, {"L1", l1}});
        INFO(r.log << " BYTES=" << bytes << " L1=" << l1);
        REQUIRE(r.ok);
        const bool nc = r.ptx.find("ld.global.nc") != std::string::npos;
        if (l1 == 0) {
          CHECK(r.ptx.find("L1::") == std::string::npos);
        } else {
          CHECK(nc);
          const std::string want = std::string("ld.global.nc") + policy[l1] + (bytes == 16 ? shape[2] : bytes == 8 ? shape[1] : ".u32");
          CHECK(r.ptx.find(want) != std::string::npos);
        }
      }
    }
  }
}

TEST_CASE("kevolve.h's bulk stores assemble: shared to global in a bulk group, with the evict_first hint and the waits", "[compile]") {
  // One block stages its row in shared memory, fences it for the async proxy, sends it back
  // with one bulk store (STREAM: an L2 evict_first policy) and waits for the store to read
  // it, then for the whole group.
  const char* text = R"(// @kevolve param STREAM 0 1
// @kevolve launch k grid=rows block=64
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  __shared__ __align__(16) T buf[1024];
  const int n = min(cols, 1024) / (16 / KV_SIZEOF_T) * (16 / KV_SIZEOF_T);
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[(size_t)blockIdx.x * cols + i];
  kv::fence_async_smem();
  __syncthreads();
  if (threadIdx.x == 0 && n > 0) {
    kv::bulk_store<STREAM>(y + (size_t)blockIdx.x * cols, buf, (unsigned)(n * KV_SIZEOF_T));
    kv::bulk_commit();
    kv::bulk_wait_read<0>();
    kv::bulk_wait<0>();
  }
}
)";
  for (int64_t stream : {0, 1}) {
    auto c = CandidateSource::Parse(text, "bulk.cu");
    REQUIRE(c.ok());
    NvrtcCompiler nvrtc;
    CompileResult r = nvrtc.Compile(MakeCompileRequest(*c, {{"STREAM", stream}}, DType::kBF16, "sm_90a"));
    INFO(r.log << " STREAM=" << stream);
    REQUIRE(r.ok);
    CHECK(r.ptx.find("cp.async.bulk.global.shared::cta.bulk_group") != std::string::npos);
    CHECK(r.ptx.find("cp.async.bulk.commit_group") != std::string::npos);
    CHECK(r.ptx.find("cp.async.bulk.wait_group.read 0") != std::string::npos);
    CHECK(r.ptx.find("fence.proxy.async.shared::cta") != std::string::npos);
    const bool hinted = r.ptx.find("createpolicy.fractional.L2::evict_first") != std::string::npos &&
                        r.ptx.find(".bulk_group.L2::cache_hint") != std::string::npos;
    CHECK(hinted == (stream == 1));
  }
}

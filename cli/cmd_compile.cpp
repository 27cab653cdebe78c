// kevolve compile: the static and compile rungs for candidate files, on the CPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "app_context.h"
#include "assignments.h"
#include "commands.h"
#include "kevolve/core/hash.h"
#include "kevolve/core/json_file.h"
#include "kevolve/db/store.h"
#include "kevolve/evaluators/compile_pool.h"
#include "kevolve/evaluators/cuda_driver.h"
#include "kevolve/evaluators/nvrtc_compiler.h"
#include "kevolve/evaluators/rungs.h"

namespace fs = std::filesystem;

namespace kevolve::cli {

namespace {

struct CompileArgs {
  std::string op;
  std::string dtype;
  std::string arch;
  AssignmentFlags assign;  // --param, --sweep, --variants, --seed
  std::vector<std::string> files;
  int jobs = 0;
  bool json = false;
  bool quiet = false;
  std::string db;
};

// One unit of work: a file at one assignment.
struct Item {
  std::string file;
  std::string name;
  std::string text;
  Assignment params;
  CandidateSource parsed;
  RungResult static_rung;
  size_t request = SIZE_MAX;  // index into the compile batch, when static passed
};

void Record(db::Store& store, const OpSpec& op, DType dtype, const std::string& arch, const Item& it,
            const CompileRequest* req, const CompileResult* res) {
  db::SourceRecord src;
  src.hash = Sha256Hex(it.text);
  src.name = it.name;
  src.text = it.text;
  src.origin = "user";
  auto sid = store.PutSource(src);
  if (!sid.ok()) { PrintError(sid.error()); return; }
  db::CandidateRecord c;
  c.hash = req ? req->Hash() : Sha256Hex("static-failed\n" + it.text + AssignmentString(it.params));
  c.source_id = *sid;
  for (const auto& [k, v] : it.params) c.params[k] = v;
  c.op = op.name;
  c.dtype = DTypeName(dtype);
  c.arch = arch;
  c.op_name = "user";
  auto id = store.PutCandidate(c);
  if (!id.ok()) { PrintError(id.error()); return; }
  if (!id->second) return;  // the same candidate was recorded before: store nothing twice
  db::EvaluationRecord e;
  e.candidate_id = id->first;
  auto add = [&](const RungResult& r) {
    e.rungs.push_back({0, id->first, r.name, r.ok, r.metrics, r.log, r.duration_ms, "", ""});
  };
  add(it.static_rung);
  if (res) add(CompileRung(*res));
  bool ok = it.static_rung.ok && res && res->ok;
  e.status = ok ? "compiled" : (it.static_rung.ok ? "failed_compile" : "failed_static");
  if (Status s = store.RecordEvaluation(e); !s.ok()) PrintError(s.message());
  if (ok) {
    store.PutArtifact(id->first, "cubin", res->cubin);
    store.PutArtifact(id->first, "ptx", res->ptx);
  }
}

int Run(const CompileArgs& a) {
  auto op = LoadOp(a.op);
  if (!op.ok()) { PrintError(op.error()); return kExitUsage; }
  auto dtype = ResolveDType(*op, a.dtype);
  if (!dtype.ok()) { PrintError(dtype.error()); return kExitUsage; }
  std::string arch = a.arch.empty() ? DefaultArch() : a.arch;
  if (std::string why = a.arch.empty() ? "" : NvrtcCompiler::CheckArch(arch); !why.empty()) {
    PrintError(why);  // only a given --arch: the default is whatever the GPU is
    return kExitUsage;
  }

  // Bad --param/--sweep/--variants flags stop the command before a database is created.
  if (Status st = CheckAssignmentFlags(a.assign); !st.ok()) { PrintError(st.message()); return kExitUsage; }
  std::unique_ptr<db::Store> store;
  if (!a.db.empty()) {
    auto s = db::OpenSqliteStore(a.db);
    if (!s.ok()) { PrintError(s.error()); return kExitUsage; }
    store = std::move(*s);
  }

  std::vector<Item> items;
  std::vector<CompileRequest> reqs;
  for (const auto& f : a.files) {
    auto text = ReadTextFile(f);
    if (!text.ok()) { PrintError(text.error()); return kExitUsage; }
    Item base;
    base.file = f;
    base.name = fs::path(f).filename().string();
    base.text = *text;
    // Parse once to learn the parameter space; the static rung re-checks each assignment.
    auto parsed = CandidateSource::Parse(base.text, base.name);
    auto list = FileAssignments(base.name, parsed, a.assign, *dtype);
    if (!list.ok()) { PrintError(list.error()); return kExitUsage; }
    for (const auto& asg : *list) {
      Item it = base;
      it.params = asg;
      it.static_rung = StaticRung(*op, *dtype, it.name, it.text, asg, &it.parsed);
      if (it.static_rung.ok) {
        it.request = reqs.size();
        reqs.push_back(MakeCompileRequest(it.parsed, asg, *dtype, arch));
      }
      items.push_back(std::move(it));
    }
  }

  NvrtcCompiler nvrtc;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<CompileResult> results = CompileAll(nvrtc, reqs, a.jobs);
  double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  int failed = 0;
  nlohmann::json out = nlohmann::json::array();
  std::vector<double> times;
  for (const auto& it : items) {
    const CompileResult* res = it.request != SIZE_MAX ? &results[it.request] : nullptr;
    bool ok = it.static_rung.ok && res && res->ok;
    failed += !ok;
    if (res) times.push_back(res->compile_ms);
    if (store) Record(*store, *op, *dtype, arch, it, res ? &reqs[it.request] : nullptr, res);
    std::vector<RungResult> rungs = {it.static_rung};
    if (res) rungs.push_back(CompileRung(*res));
    if (a.json) {
      nlohmann::json j = {{"file", it.file}, {"params", it.params}, {"dtype", DTypeName(*dtype)}, {"arch", arch},
                          {"ok", ok}, {"rungs", nlohmann::json::array()}};
      if (res) j["hash"] = res->hash;
      for (const auto& r : rungs)
        j["rungs"].push_back({{"name", r.name}, {"ok", r.ok}, {"metrics", r.metrics}, {"log", r.log},
                              {"duration_ms", r.duration_ms}});
      out.push_back(j);
      continue;
    }
    if (a.quiet && ok) continue;
    std::printf("%s [%s] %s %s\n", it.file.c_str(), AssignmentString(it.params).c_str(), DTypeName(*dtype), arch.c_str());
    for (const auto& r : rungs) std::printf("  %s\n", FormatRung(r).c_str());
  }
  if (a.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else if (items.size() > 1 || a.quiet) {  // quiet: the summary is all an ok file shows
    std::sort(times.begin(), times.end());
    double median = times.empty() ? 0 : times[times.size() / 2];
    std::printf("%zu compiled, %d failed in %.2f s wall: %.1f kernels/s, median %.0f ms per kernel (NVRTC %s)\n",
                items.size() - failed, failed, wall_s, wall_s > 0 ? reqs.size() / wall_s : 0.0, median,
                NvrtcCompiler::Version().c_str());
  }
  return failed ? kExitFailed : kExitOk;
}

}  // namespace

Handler AddCompileCommand(CLI::App& app) {
  auto a = std::make_shared<CompileArgs>();
  CLI::App* sub = app.add_subcommand(
      "compile",
      "Run the static and compile rungs (NVRTC, no GPU needed) on candidate files and print the ladder.\n"
      "Exit status: 0 when every candidate compiles, 1 when one fails, 2 for bad input.\n"
      "Examples:\n"
      "  kevolve compile --op softmax configs/ops/softmax/seeds/*.cu\n"
      "  kevolve compile --op softmax --dtype bf16 --param BLOCK=512 my_kernel.cu\n"
      "  kevolve compile --op softmax --variants 64 configs/ops/softmax/seeds/block_row.cu\n"
      "  kevolve compile --op layernorm --dtype bf16 --sweep SHIFT=0,1 --sweep BLOCK=128,256 "
      "configs/ops/layernorm/seeds/block_row.cu");
  sub->add_option("--op", a->op, "Op whose interface the candidates implement")->required();
  sub->add_option("--dtype", a->dtype, "Element type variant (default: the op's first)");
  sub->add_option("--arch", a->arch, "Real target architecture (default: the GPU's own in its arch-specific form, sm_90a on an H100/H200; sm_90a without a GPU)");
  // One value per use (CLI11 would otherwise take the candidate files that follow too).
  sub->add_option("--param", a->assign.params, "Override a parameter: NAME=VALUE (repeatable)")->allow_extra_args(false);
  sub->add_option("--sweep", a->assign.sweeps,
                  "Compile each file at every value of a parameter: NAME=V1,V2,... (repeatable: the cross "
                  "product, at most 256 per file)")
      ->allow_extra_args(false);
  sub->add_option("--variants", a->assign.variants, "Compile N assignments per file: the default one, then random valid ones")->check(CLI::NonNegativeNumber);
  sub->add_option("--seed", a->assign.seed, "Random seed for --variants");
  sub->add_option("-j,--jobs", a->jobs, "Compile threads (default: all cores)");
  sub->add_option("--db", a->db, "Record candidates and rungs in this database");
  sub->add_flag("--json", a->json, "Machine-readable output");
  sub->add_flag("-q,--quiet", a->quiet, "Print only failures and the summary");
  sub->add_option("files", a->files, "Candidate .cu files")->required()->check(CLI::ExistingFile);
  return [a] { return Run(*a); };
}

}  // namespace kevolve::cli

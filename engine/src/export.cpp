#include "kevolve/engine/export.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "kevolve/core/json_file.h"
#include "kevolve/engine/profiler.h"
#include "kevolve/evaluators/nvrtc_compiler.h"

namespace fs = std::filesystem;

namespace kevolve {

std::string BakeParameters(const std::string& source, const Assignment& params, DType dtype) {
  std::ostringstream out;
  out << "// Exported by kevolve with its parameters fixed:";
  for (const auto& [k, v] : params) out << " " << k << "=" << v;
  out << " (" << DTypeName(dtype) << ")\n";
  for (const auto& [k, v] : params) out << "#define " << k << " " << v << "\n";
  // The dtype it was exported for, unless the compiler is told another one (kevolve passes
  // -DKV_DTYPE_...), then kevolve.h (kept next to this file), which defines T and kv::.
  std::string macro = DTypeName(dtype);
  for (auto& ch : macro) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  out << "#if !defined(KV_DTYPE_F32) && !defined(KV_DTYPE_BF16) && !defined(KV_DTYPE_F16) && !defined(KV_DTYPE_F64)\n"
      << "#define KV_DTYPE_" << macro << " 1\n#define KV_SIZEOF_T " << DTypeSize(dtype) << "\n#endif\n"
      << "#include \"kevolve.h\"\n";
  std::istringstream in(source);
  std::string line;
  while (std::getline(in, line)) {
    std::string t = line.substr(line.find_first_not_of(" \t") == std::string::npos ? line.size() : line.find_first_not_of(" \t"));
    const std::string kw = DirectiveKeyword(line);
    // Presets name other values of the now single-valued parameters: they go.
    if (kw == "preset") continue;
    if (kw == "param") {
      std::istringstream d(t.substr(t.find("@kevolve") + 8));
      std::string word, name;
      d >> word >> name;  // "param", then the parameter's name
      auto it = params.find(name);
      if (it != params.end()) {
        out << "// @kevolve param " << name << " " << it->second << "\n";
        continue;
      }
    }
    out << line << "\n";
  }
  return out.str();
}

namespace {

nlohmann::json Lineage(db::Store& store, int64_t id) {
  nlohmann::json out = nlohmann::json::array();
  std::vector<int64_t> todo = {id};
  std::set<int64_t> seen;
  while (!todo.empty()) {
    int64_t c = todo.back();
    todo.pop_back();
    if (!seen.insert(c).second) continue;
    auto rec = store.GetCandidate(c);
    if (!rec.ok()) continue;
    auto src = store.GetSource(rec->source_id);
    out.push_back({{"id", rec->id}, {"operator", rec->op_name}, {"generation", rec->generation},
                   {"island", rec->island}, {"source", src.ok() ? src->name : ""}, {"params", rec->params},
                   {"fitness", rec->fitness ? nlohmann::json(*rec->fitness) : nlohmann::json()},
                   {"status", rec->status}, {"parents", rec->parents}});
    for (int64_t p : rec->parents) todo.push_back(p);
  }
  return out;
}

Assignment ParamsOf(const db::CandidateRecord& c) {
  Assignment params;
  for (auto it = c.params.begin(); it != c.params.end(); ++it) params[it.key()] = it->get<int64_t>();
  return params;
}

std::string Fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

}  // namespace

nlohmann::json LaunchJson(const std::string& text, const std::string& name, const Assignment& params, const OpSpec& op,
                          DType dtype, const std::string& arch, int num_sms) {
  auto parsed = CandidateSource::Parse(text, name);
  nlohmann::json launch = {{"entries", nlohmann::json::array()}, {"shapes", nlohmann::json::array()},
                           {"dtype", DTypeName(dtype)}, {"arch", arch}, {"params", params},
                           {"argument_order", "buffers (as in the op), sizes (int), scalars, scratch buffers"},
                           {"launch_notes",
                            "smem is dynamic shared memory in bytes: above 48 KiB raise the kernel's "
                            "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first; a cluster launch needs "
                            "cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, and a cluster above 8 "
                            "blocks needs CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 1"}};
  if (parsed.ok()) {
    for (const auto& l : parsed->launches) {
      nlohmann::json e = {{"entry", l.entry}, {"grid", {l.grid[0].text(), l.grid[1].text(), l.grid[2].text()}},
                          {"block", {l.block[0].text(), l.block[1].text(), l.block[2].text()}}, {"smem", l.smem.text()}};
      if (l.cluster) e["cluster"] = {(*l.cluster)[0].text(), (*l.cluster)[1].text(), (*l.cluster)[2].text()};
      launch["entries"].push_back(e);
    }
    for (const auto& s : op.tune) {
      Env env = op.MakeEnv(s, dtype);
      if (num_sms > 0) env["num_sms"] = num_sms;
      nlohmann::json sj = {{"shape", s.label}};
      Status rq = CheckRequirements(*parsed, params, env);  // first, as the evaluator does
      auto lc = ResolveLaunches(*parsed, params, env);
      auto sc = ResolveScratch(*parsed, params, env);
      if (!rq.ok() || !lc.ok() || !sc.ok()) {
        sj["error"] = !rq.ok() ? "unsupported: " + rq.message() : !lc.ok() ? lc.error() : sc.error();
        launch["shapes"].push_back(sj);
        continue;
      }
      sj["launches"] = nlohmann::json::array();
      for (const auto& l : *lc) {
        nlohmann::json lj = {{"entry", l.entry}, {"grid", l.grid}, {"block", l.block}, {"smem", l.smem}};
        if (l.cluster[0] > 0) lj["cluster"] = l.cluster;
        sj["launches"].push_back(lj);
      }
      if (!sc->empty()) sj["scratch_bytes"] = *sc;
      launch["shapes"].push_back(sj);
    }
    nlohmann::json scratch = nlohmann::json::array();
    bool zeroed = false;
    for (const auto& s : parsed->scratch) {
      scratch.push_back({{"name", s.name}, {"bytes", s.bytes.text()}, {"zeroed", s.zeroed}});
      zeroed = zeroed || s.zeroed;
    }
    launch["scratch"] = scratch;
    if (zeroed)
      launch["launch_notes"] = launch["launch_notes"].get<std::string>() +
                               "; a zeroed scratch buffer is zeroed once, when allocated, and the kernel leaves it "
                               "ready for its next launch: do not clear it between calls, and keep one buffer per "
                               "kernel build and shape, used by one stream at a time (it may hold a launch counter)";
  }
  nlohmann::json iface = nlohmann::json::array();
  for (const auto& b : op.buffers) iface.push_back({{"name", b.name}, {"role", b.role == BufferRole::kIn ? "in" : "out"}, {"dtype", b.dtype}});
  launch["buffers"] = iface;
  launch["sizes"] = op.sizes;
  launch["num_sms"] = num_sms;
  // kernel.cu includes kevolve.h and defines its dtype and parameters, so it compiles on
  // its own; kevolve's NVRTC options, for the same code as kernel.cubin.
  launch["compile"] = {
      {"nvcc", "nvcc -arch=" + arch + " -std=c++17 -cubin -I. kernel.cu -o kernel.cubin"},
      {"nvrtc_options", {"--gpu-architecture=" + arch, "--std=c++17", "--device-as-default-execution-space",
                         "-I.", "-I$CUDA_HOME/include", "-I$CUDA_HOME/include/cccl"}},
      {"note", "kevolve compiles with NVRTC, which makes unannotated functions __device__ "
               "(--device-as-default-execution-space); nvcc needs every device function marked __device__"}};
  return launch;
}

namespace {

// Writes one survivor's folder (the held-out gate has passed).
void WriteSurvivor(db::Store& store, Pipeline& pipeline, const ExportOptions& o, const db::CandidateRecord& c,
                   const db::SourceRecord& source, const Assignment& params, const RungResult* corr,
                   const std::string& folder) {
  const OpSpec& op = pipeline.op();
  const db::SourceRecord* src = &source;
  std::error_code ec;
  auto timings = store.GetTimings(c.id);
  fs::path dir = fs::path(o.out_dir) / folder;
  fs::create_directories(dir, ec);
  WriteTextFile((dir / "kernel.cu").string(), BakeParameters(src->text, params, pipeline.dtype()));
  WriteTextFile((dir / "kevolve.h").string(), KevolveHeader());
  WriteTextFile((dir / "launch.json").string(), LaunchJson(src->text, src->name, params, op, pipeline.dtype(), pipeline.arch(), pipeline.num_sms()).dump(2) + "\n");
  for (const auto& [kind, file] : std::vector<std::pair<std::string, std::string>>{
           {"ptx", "kernel.ptx"}, {"cubin", "kernel.cubin"}, {"sass", "kernel.sass"}}) {
    auto art = store.GetArtifact(c.id, kind);
    if (art.ok() && *art) WriteTextFile((dir / file).string(), **art);
  }
  auto rungs = store.GetRungs(c.id);
  nlohmann::json rj = nlohmann::json::array();
  nlohmann::json resources = nlohmann::json::object();
  if (rungs.ok())
    for (const auto& r : *rungs) {
      rj.push_back({{"name", r.name}, {"ok", r.ok}, {"metrics", r.metrics}, {"log", r.log},
                    {"duration_ms", r.duration_ms}, {"device", r.device_uuid}, {"at", r.created_at}});
      if (r.name == "compile") resources = r.metrics;
    }
  WriteTextFile((dir / "resources.json").string(), resources.dump(2) + "\n");
  nlohmann::json tj = nlohmann::json::array();
  std::string device;
  if (timings.ok())
    for (const auto& t : *timings) {
      tj.push_back({{"shape", t.shape}, {"median_us", t.median_us}, {"p10_us", t.p10_us}, {"p90_us", t.p90_us},
                    {"n", t.n}, {"roofline_us", t.roofline_us}, {"fraction", t.fraction},
                    {"samples_us", t.samples_us}, {"protocol", t.protocol}});
      device = t.device_uuid;
    }
  nlohmann::json dev = nlohmann::json::object();
  if (auto d = store.GetDevice(device); d.ok() && *d)
    dev = {{"uuid", (*d)->uuid}, {"name", (*d)->name}, {"arch", (*d)->arch}, {"sm_count", (*d)->sm_count},
           {"l2_bytes", (*d)->l2_bytes}, {"copy_gbps", (*d)->copy_gbps}, {"fp32_gflops", (*d)->fp32_gflops},
           {"calibration", (*d)->calibration}, {"calibrated_at", (*d)->calibrated_at}};
  nlohmann::json heldout = {{"shapes", nlohmann::json::array()}, {"metrics", corr->metrics}};
  for (const auto& s : op.heldout) heldout["shapes"].push_back(s.label);
  nlohmann::json metrics = {{"candidate", c.id}, {"hash", c.hash}, {"op", op.name}, {"dtype", c.dtype},
                            {"fitness", c.fitness.value_or(0)}, {"rungs", rj}, {"timings", tj},
                            {"device", dev}, {"heldout_correctness", heldout}};
  WriteTextFile((dir / "metrics.json").string(), metrics.dump(2) + "\n");
  WriteTextFile((dir / "lineage.json").string(), Lineage(store, c.id).dump(2) + "\n");
  std::ostringstream readme;
  readme << "# " << src->name << " (candidate " << c.id << ")\n\n"
         << "Parameters: `" << AssignmentString(params) << "`, " << c.dtype << ", " << c.arch
         << ", fitness " << Fmt("%.4f", c.fitness.value_or(0)) << " (geometric mean of roofline fractions).\n\n"
         << "| shape | median (us) | p10 | p90 | n | roofline (us) | fraction |\n|---|---|---|---|---|---|---|\n";
  if (timings.ok())
    for (const auto& t : *timings)
      readme << "| " << t.shape << " | " << Fmt("%.2f", t.median_us) << " | " << Fmt("%.2f", t.p10_us) << " | "
             << Fmt("%.2f", t.p90_us) << " | " << t.n << " | " << Fmt("%.2f", t.roofline_us) << " | "
             << Fmt("%.3f", t.fraction) << " |\n";
  readme << "\nHeld-out shapes passed the correctness gate: ";
  for (const auto& s : op.heldout) readme << s.label << " ";
  readme << "\n\nFiles: kernel.cu (parameters and dtype baked in; it includes kevolve.h, the header kevolve "
            "pre-includes into every candidate), launch.json (launch expressions and values, scratch, and the "
            "compile command), kernel.ptx, kernel.cubin, "
            "kernel.sass (when cuobjdump was found), resources.json, metrics.json, lineage.json.\n";
  if (o.profile) {
    std::vector<Ladder> full = pipeline.Run({{src->name, src->text, params}}, nullptr, nullptr);
    auto freq = pipeline.Request(full[0]);
    if (freq.ok() && full[0].compiled.ok) {
      ProfileOptions po;
      po.workdir = (dir / ".profile-work").string();
      ProfileResult pr = Profile(*freq, full[0].compiled, full[0].timings, po);
      if (!pr.ncu_report.empty()) WriteTextFile((dir / "profile.ncu-rep").string(), pr.ncu_report);
      if (!pr.sass.empty()) WriteTextFile((dir / "kernel.sass").string(), pr.sass);
      WriteTextFile((dir / "ncu_summary.txt").string(), pr.ncu_summary + pr.rung.log);
      fs::remove_all(po.workdir, ec);
      readme << "\nNsight Compute: profile.ncu-rep, summary in ncu_summary.txt.\n";
    }
  }
  if (!fs::exists(dir / "kernel.sass")) {
    std::string cuobjdump = FindTool("cuobjdump");
    if (!cuobjdump.empty() && fs::exists(dir / "kernel.cubin")) {
      std::string cmd = "'" + cuobjdump + "' -sass '" + (dir / "kernel.cubin").string() + "' > '" +
                        (dir / "kernel.sass").string() + "' 2>/dev/null";
      if (std::system(cmd.c_str()) != 0) fs::remove(dir / "kernel.sass", ec);
    }
  }
  WriteTextFile((dir / "README.md").string(), readme.str());
}

std::string FolderName(const std::string& prefix, const std::string& source_name, int64_t id) {
  return prefix + "-" + fs::path(source_name).stem().string() + "-" + std::to_string(id);
}

}  // namespace

Result<int> ExportRun(db::Store& store, Pipeline& pipeline, const ExportOptions& o) {
  const OpSpec& op = pipeline.op();
  db::CandidateQuery q;
  q.run_id = o.run_id;
  q.only_ok = true;
  q.order_by_fitness = true;
  auto cands = store.ListCandidates(q);
  if (!cands.ok()) return cands.status();
  if (cands->empty()) return Status::Error("run " + std::to_string(o.run_id) + " has no candidate that passed every rung");
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return Status::Error("cannot create " + o.out_dir + ": " + ec.message());

  std::ostringstream table;
  table << "# kevolve export: run " << o.run_id << ", " << op.name << " " << DTypeName(pipeline.dtype()) << "\n\n"
        << "| pick | folder | source | params | fitness | held-out |";
  for (const auto& s : op.tune) table << " " << s.label << " (us) |";
  table << "\n|---|---|---|---|---|---|";
  for (size_t i = 0; i < op.tune.size(); ++i) table << "---|";
  table << "\n";

  // The held-out gate, run once per candidate; a candidate that passes is written once,
  // under the folder name of the first pick that chose it.
  std::map<int64_t, std::string> exported_folder;  // candidate -> folder ("" = failed the gate)
  std::map<int64_t, std::string> row_rest;         // candidate -> its README row after the pick column
  int exported = 0;
  // Held-out ladders run ahead of the picks (the per-shape confirmation runs the gate and
  // the re-timing in one pass): candidate -> ladder.
  std::map<int64_t, Ladder> gated;
  auto pick = [&](const db::CandidateRecord& c, const std::string& prefix, const std::string& label) -> Result<std::string> {
    if (auto it = exported_folder.find(c.id); it != exported_folder.end()) {
      table << "| " << label << " |" << row_rest[c.id];  // picked again: the same row, its own label
      return it->second;
    }
    auto src = store.GetSource(c.source_id);
    if (!src.ok()) return src.status();
    Assignment params = ParamsOf(c);
    // The held-out gate: the same ladder (correctness only) on shapes never used in the search.
    if (gated.find(c.id) == gated.end()) {
      std::vector<Shape> no_tune;
      gated[c.id] = std::move(pipeline.Run({{src->name, src->text, params}}, &op.heldout, &no_tune)[0]);
    }
    const Ladder& g = gated[c.id];
    const RungResult* corr = g.Find("correctness");
    bool passed = corr && corr->ok;
    std::string folder = FolderName(prefix, src->name, c.id);
    std::ostringstream row;
    row << " " << (passed ? "[" + folder + "](" + folder + "/)" : "(skipped)") << " | " << src->name << " | `"
        << AssignmentString(params) << "` | " << Fmt("%.4f", c.fitness.value_or(0)) << " | "
        << (passed ? "pass" : "FAIL") << " |";
    auto timings = store.GetTimings(c.id);
    for (const auto& s : op.tune) {
      std::string cell = " - |";
      if (timings.ok())
        for (const auto& t : *timings)
          if (t.shape == s.label) cell = " " + Fmt("%.1f", t.median_us) + " |";
      row << cell;
    }
    row << "\n";
    row_rest[c.id] = row.str();
    table << "| " << label << " |" << row.str();
    if (!passed) {
      std::string why = corr ? corr->log : (g.rungs.empty() ? "not evaluated" : g.rungs.back().log);
      std::fprintf(stderr, "kevolve: export: candidate %lld fails the held-out shapes and is skipped: %s\n",
                   static_cast<long long>(c.id), why.c_str());
      exported_folder[c.id] = "";
      return std::string();
    }
    WriteSurvivor(store, pipeline, o, c, *src, params, corr, folder);
    ++exported;
    exported_folder[c.id] = folder;
    return folder;
  };

  std::ostringstream retimed;  // the README's confirmation table
  std::map<int64_t, std::map<std::string, double>> medians;  // candidate -> shape -> search median
  for (const auto& c : *cands)
    if (auto t = store.GetTimings(c.id); t.ok())
      for (const auto& x : *t) medians[c.id][x.shape] = x.median_us;
  auto by_search = [&](const std::string& shape) {
    std::vector<std::pair<double, const db::CandidateRecord*>> order;
    for (const auto& c : *cands)
      if (auto it = medians[c.id].find(shape); it != medians[c.id].end()) order.push_back({it->second, &c});
    std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    return order;
  };
  // Confirmation (--per-shape): the search's per-shape minimum is taken over many noisy
  // medians, timed while other candidates compile. The `confirm` fastest candidates of
  // each shape are timed again in one fresh pass that also runs their held-out gate (so
  // none is gated twice, the top picks below included); each shape then takes the
  // fastest on the new medians, and reports that median.
  std::map<int64_t, std::map<std::string, double>> again;  // candidate -> shape -> re-timed median
  if (o.per_shape && o.confirm > 0) {
    std::vector<const db::CandidateRecord*> todo;
    std::set<int64_t> seen;
    for (const auto& s : op.tune) {
      auto order = by_search(s.label);
      for (size_t i = 0; i < order.size() && i < static_cast<size_t>(o.confirm); ++i)
        if (seen.insert(order[i].second->id).second) todo.push_back(order[i].second);
    }
    std::vector<CandidateInput> inputs;
    for (const auto* c : todo) {
      auto src = store.GetSource(c->source_id);
      if (!src.ok()) return src.status();
      inputs.push_back({src->name, src->text, ParamsOf(*c)});
    }
    std::vector<Ladder> ls = pipeline.Run(inputs, &op.heldout, &op.tune);
    for (size_t i = 0; i < ls.size(); ++i) {
      for (const auto& t : ls[i].timings) again[todo[i]->id][t.shape] = t.median_us;
      gated[todo[i]->id] = std::move(ls[i]);
    }
    retimed << "\n## Per-shape picks, timed again\n\nThe " << o.confirm
            << " fastest candidates of each shape by the search's medians were timed again in one fresh pass "
               "(`--confirm`); each shape takes the fastest on the new medians.\n\n"
               "| shape | candidate | search median (us) | re-timed median (us) |\n|---|---|---|---|\n";
  }

  for (int rank = 1; rank <= o.top && rank <= static_cast<int>(cands->size()); ++rank) {
    auto f = pick((*cands)[rank - 1], "rank" + std::to_string(rank), "#" + std::to_string(rank));
    if (!f.ok()) return f.status();
  }

  if (o.per_shape) {
    // The fastest survivor of each tune shape: a dispatch table, the way a kernel library
    // picks a configuration per problem size. Up to 3 tries per shape past held-out failures.
    nlohmann::json dispatch = {{"run", o.run_id}, {"op", op.name}, {"dtype", DTypeName(pipeline.dtype())},
                               {"confirm", o.confirm}, {"shapes", nlohmann::json::object()}};
    for (const auto& s : op.tune) {
      auto order = by_search(s.label);
      // Re-timed candidates first, by their new medians; the rest (no confirmation, or a
      // re-run that did not time) after them, by the search's.
      std::vector<std::pair<double, const db::CandidateRecord*>> first, rest;
      for (const auto& [median, c] : order) {
        auto a = again.find(c->id);
        if (a != again.end() && a->second.count(s.label)) first.push_back({a->second.at(s.label), c});
        else rest.push_back({median, c});
      }
      std::stable_sort(first.begin(), first.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      first.insert(first.end(), rest.begin(), rest.end());
      int tries = 0;
      for (const auto& [median, c] : first) {
        if (tries++ >= 3) break;
        auto f = pick(*c, "shape-" + s.label, "fastest " + s.label);
        if (!f.ok()) return f.status();
        if (f->empty()) continue;
        const double searched = medians[c->id][s.label];
        const bool confirmed = again.count(c->id) && again[c->id].count(s.label);
        dispatch["shapes"][s.label] = {{"folder", *f}, {"candidate", c->id}, {"median_us", median},
                                       {"search_median_us", searched}, {"retimed", confirmed}};
        if (o.confirm > 0)
          retimed << "| " << s.label << " | " << c->id << " | " << Fmt("%.2f", searched) << " | "
                  << (confirmed ? Fmt("%.2f", median) : std::string("(not re-timed)")) << " |\n";
        break;
      }
    }
    WriteTextFile((fs::path(o.out_dir) / "dispatch.json").string(), dispatch.dump(2) + "\n");
  }
  WriteTextFile((fs::path(o.out_dir) / "README.md").string(), table.str() + retimed.str());
  return exported;
}

}  // namespace kevolve

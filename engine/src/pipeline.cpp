#include "kevolve/engine/pipeline.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "kevolve/core/hash.h"
#include "kevolve/core/json_file.h"
#include "kevolve/core/paths.h"
#include "kevolve/evaluators/compile_pool.h"

namespace kevolve {

bool Ladder::ok() const {
  if (rungs.empty()) return false;
  for (const auto& r : rungs)
    if (!r.ok) return false;
  return true;
}

std::vector<ShapeBest> FastestPerShape(const std::vector<Ladder>& ladders) {
  std::vector<ShapeBest> best;
  for (size_t li = 0; li < ladders.size(); ++li) {
    const Ladder& l = ladders[li];
    if (!l.ok()) continue;
    for (const auto& t : l.timings) {
      auto it = std::find_if(best.begin(), best.end(), [&](const ShapeBest& b) { return b.shape == t.shape; });
      if (it != best.end() && it->median_us <= t.median_us) continue;  // ties keep the earlier ladder
      ShapeBest b{t.shape, t.median_us, 0.0, li};
      if (l.fitness)
        for (const auto& f : l.fitness->shapes)
          if (f.shape == t.shape) b.fraction = f.fraction;
      if (it != best.end()) *it = b;
      else best.push_back(b);
    }
  }
  return best;
}

std::string MediansTable(const std::vector<Ladder>& ladders) {
  std::vector<std::string> shapes;
  for (const auto& l : ladders)
    for (const auto& t : l.timings)
      if (std::find(shapes.begin(), shapes.end(), t.shape) == shapes.end()) shapes.push_back(t.shape);
  if (shapes.empty()) return "";
  std::map<std::string, double> best;  // shape -> the fastest passing median (ties all get the star)
  for (const auto& b : FastestPerShape(ladders)) best[b.shape] = b.median_us;
  // The parameters that vary between the ladders of one file.
  std::map<std::string, std::set<std::string>> varying;
  for (const auto& a : ladders)
    for (const auto& b : ladders) {
      if (&a == &b || a.input.name != b.input.name) continue;
      for (const auto& [k, v] : a.input.params) {
        auto it = b.input.params.find(k);
        if (it == b.input.params.end() || it->second != v) varying[a.input.name].insert(k);
      }
    }
  std::vector<std::string> labels;
  size_t label_w = 9;
  for (const auto& l : ladders) {
    std::string label = l.input.name;
    std::string params;
    for (const auto& k : varying[l.input.name])
      if (auto it = l.input.params.find(k); it != l.input.params.end())
        params += (params.empty() ? "" : ",") + k + "=" + std::to_string(it->second);
    if (!params.empty()) label += " [" + params + "]";
    labels.push_back(label);
  }
  // Rows that would read the same (one file given twice, or two files of one name from
  // different folders) are numbered in order: "k.cu #1", "k.cu #2".
  for (size_t i = 0; i < labels.size(); ++i) {
    if (std::count(labels.begin(), labels.end(), labels[i]) < 2) continue;
    const std::string same = labels[i];
    int n = 0;
    for (auto& l : labels)
      if (l == same) l += " #" + std::to_string(++n);
  }
  for (const auto& l : labels) label_w = std::max(label_w, l.size());
  std::vector<size_t> col_w;
  for (const auto& s : shapes) col_w.push_back(std::max<size_t>(s.size(), 9));
  auto pad_left = [](const std::string& s, size_t w) { return s.size() >= w ? s : std::string(w - s.size(), ' ') + s; };
  auto pad_right = [](const std::string& s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); };
  std::string out = "  " + pad_right("candidate", label_w);
  for (size_t c = 0; c < shapes.size(); ++c) out += "  " + pad_left(shapes[c], col_w[c]) + " ";
  out += "\n";
  for (size_t i = 0; i < ladders.size(); ++i) {
    const Ladder& l = ladders[i];
    out += "  " + pad_right(labels[i], label_w);
    if (!l.ok() && l.timings.empty()) {
      out += "  " + l.status() + "\n";
      continue;
    }
    // A ladder that failed after timing (the profile rung, a suspect time) keeps its
    // medians, without stars, and its status after them.
    for (size_t c = 0; c < shapes.size(); ++c) {
      auto t = std::find_if(l.timings.begin(), l.timings.end(), [&](const ShapeTiming& x) { return x.shape == shapes[c]; });
      std::string cell = "-";
      if (t != l.timings.end()) {
        char b[32];
        std::snprintf(b, sizeof(b), "%.4g", t->median_us);
        cell = b;
      }
      auto bi = best.find(shapes[c]);
      const bool star = l.ok() && t != l.timings.end() && bi != best.end() && t->median_us == bi->second;
      out += "  " + pad_left(cell, col_w[c]) + (star ? "*" : " ");
    }
    if (!l.ok()) out += "  " + l.status();
    out += "\n";
  }
  return out;
}

std::string Ladder::status() const {
  for (const auto& r : rungs) {
    if (r.ok) continue;
    if (r.reason == "timeout" || r.reason == "crashed" || r.reason == "suspect") return r.reason;
    return "failed_" + r.name;
  }
  return rungs.empty() ? "pending" : "ok";
}

const RungResult* Ladder::Find(const std::string& rung) const {
  for (const auto& r : rungs)
    if (r.name == rung) return &r;
  return nullptr;
}

nlohmann::json Ladder::Features() const {
  nlohmann::json f = {{"source", input.name}};
  for (const auto& [k, v] : input.params) f["param_" + k] = v;
  if (compiled.ok) {
    Resources a = Aggregate(compiled);
    f["regs"] = a.registers;
    f["smem_static"] = a.smem_static;
    f["spills"] = a.spill_loads + a.spill_stores;
  }
  if (threads > 0) f["threads"] = threads;
  return f;
}

Result<std::unique_ptr<Pipeline>> Pipeline::Create(const OpSpec& op, DType dtype, GpuExecutor* executor,
                                                   std::map<std::string, Calibration> calibration,
                                                   std::shared_ptr<Compiler> compiler, PipelineOptions options) {
  std::unique_ptr<Pipeline> p(new Pipeline(op, dtype));
  p->executor_ = executor;
  p->calibration_ = std::move(calibration);
  p->compiler_ = std::move(compiler);
  if (executor && !executor->Devices().empty()) {
    const DeviceDesc& d = executor->Devices().front();
    if (options.arch.empty()) options.arch = d.arch;
    p->num_sms_ = d.sm_count;
  }
  if (options.arch.empty()) options.arch = "sm_90a";
  p->options_ = std::move(options);
  // Tensor-core ops: the compute roof is the datasheet rate of configs/gpus.json.
  if (op.compute != "fp32" && executor) {
    std::string path = (std::filesystem::path(FindProjectRoot()) / "configs" / "gpus.json").string();
    auto peaks = ReadJsonFile(path);
    if (!peaks.ok()) return Status::Error("op " + op.name + " needs " + op.compute + " peaks: " + peaks.error());
    for (const auto& d : executor->Devices()) {
      auto it = peaks->find(d.name);
      std::string key = op.compute + "_tflops";
      if (it == peaks->end() || !it->contains(key) || !(*it)[key].is_number())
        return Status::Error(path + ": no \"" + key + "\" for device \"" + d.name + "\" (op " + op.name +
                             " is bounded by " + op.compute + ")");
      auto cal = p->calibration_.find(d.uuid);
      if (cal == p->calibration_.end()) continue;
      cal->second.fp32_gflops = (*it)[key].get<double>() * 1000.0;
      cal->second.details["compute_peak"] = {{"kind", op.compute}, {"gflops", cal->second.fp32_gflops}, {"from", path}};
    }
  }
  auto text = ReadTextFile(op.reference);
  if (!text.ok()) return text.status();
  auto ref = CandidateSource::Parse(*text, op.reference);
  if (!ref.ok()) return Status::Error("reference: " + ref.error());
  p->ref_source_ = *ref;
  p->ref_binary_ = p->compiler_->Compile(MakeCompileRequest(*ref, {}, dtype, p->options_.arch));
  if (!p->ref_binary_.ok) return Status::Error("the reference does not compile:\n" + p->ref_binary_.log);
  return p;
}

Result<EvalRequest> Pipeline::Request(const Ladder& l, const std::vector<Shape>* check,
                                     const std::vector<Shape>* tune) const {
  CompiledKernel cand{&l.parsed, l.input.params, &l.compiled};
  CompiledKernel ref{&ref_source_, {}, &ref_binary_};
  return BuildEvalRequest(op_, dtype_, cand, ref, check ? *check : op_.check, tune ? *tune : op_.tune, num_sms_,
                          options_.eval);
}

std::vector<Ladder> Pipeline::Run(const std::vector<CandidateInput>& cands, const std::vector<Shape>* check,
                                  const std::vector<Shape>* tune, const std::atomic<bool>* cancel,
                                  const std::function<void(size_t, Ladder&)>& on_done) {
  std::vector<Ladder> out(cands.size());
  std::vector<CompileRequest> reqs;
  std::vector<size_t> req_of(cands.size(), SIZE_MAX);
  for (size_t i = 0; i < cands.size(); ++i) {
    out[i].input = cands[i];
    RungResult s = StaticRung(op_, dtype_, cands[i].name, cands[i].text, cands[i].params, &out[i].parsed);
    out[i].rungs.push_back(s);
    if (!s.ok) {
      out[i].hash = Sha256Hex("static-failed\n" + cands[i].text + "\n" + AssignmentString(cands[i].params) + "\n" +
                              DTypeName(dtype_) + options_.arch);
      if (on_done) on_done(i, out[i]);
      continue;
    }
    req_of[i] = reqs.size();
    reqs.push_back(MakeCompileRequest(out[i].parsed, cands[i].params, dtype_, options_.arch));
    out[i].hash = reqs.back().Hash();
  }
  std::vector<CompileResult> bins = CompileAll(*compiler_, reqs, options_.compile_threads);

  std::vector<EvalRequest> evals;
  std::vector<size_t> ladder_of;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (req_of[i] == SIZE_MAX) continue;
    out[i].compiled = std::move(bins[req_of[i]]);
    out[i].rungs.push_back(CompileRung(out[i].compiled));
    bool evaluate = out[i].compiled.ok && !options_.compile_only && executor_;
    auto req = evaluate ? Request(out[i], check, tune) : Result<EvalRequest>(Status::Error(""));
    if (evaluate && !req.ok()) out[i].rungs.push_back({"launch", false, "bad_launch", nlohmann::json::object(), req.error(), 0});
    if (!evaluate || !req.ok()) {
      if (on_done) on_done(i, out[i]);
      continue;
    }
    req->id = static_cast<int64_t>(i);
    if (!req->tune.empty() && !req->tune[0].launches.empty()) {
      const auto& b = req->tune[0].launches[0].block;
      out[i].threads = b[0] * b[1] * b[2];
    }
    evals.push_back(std::move(*req));
    ladder_of.push_back(i);
  }
  if (evals.empty()) return out;
  // Each result is finished (fitness) and handed to on_done as it lands, so that the
  // caller can commit it at once: a killed run loses only what was in flight.
  auto finish = [&](size_t k, const Result<EvalResult>& res) {
    Ladder& l = out[ladder_of[k]];
    if (!res.ok() && res.error() == "cancelled") {
      l.rungs.clear();  // never started: the caller records nothing for it
      return;
    }
    if (!res.ok()) {
      l.rungs.push_back({"launch", false, "worker_error", nlohmann::json::object(), res.error(), 0});
    } else {
      const EvalResult& r = *res;
      l.device_uuid = r.device_uuid;
      for (const auto& rung : r.rungs) l.rungs.push_back(rung);
      l.timings = r.timings;
      // When ptxas' report was missing from the compile log, take the driver's figures.
      if (const RungResult* lr = l.Find("launch"); lr && lr->metrics.contains("resources")) {
        for (auto it = lr->metrics["resources"].begin(); it != lr->metrics["resources"].end(); ++it) {
          Resources& rs = l.compiled.resources[it.key()];
          if (rs.registers < 0) {
            rs.registers = it->value("regs", -1);
            rs.smem_static = it->value("smem_static", int64_t{0});
            rs.stack = it->value("local_bytes", int64_t{0});
          }
        }
      }
      const RungResult* timing = l.Find("timing");
      if (timing && timing->ok) {
        auto cal = calibration_.find(l.device_uuid);
        if (cal == calibration_.end()) {
          l.rungs.push_back({"fitness", false, "no_calibration", nlohmann::json::object(),
                             "no calibration for device " + l.device_uuid, 0});
        } else {
          l.fitness = ComputeFitness(l.timings, cal->second, options_.suspect_ratio);
          l.rungs.push_back(FitnessRung(*l.fitness));
        }
      }
    }
    if (on_done) on_done(ladder_of[k], l);
  };
  EvaluateAll(*executor_, evals, finish, cancel);
  return out;
}

Result<int64_t> RecordLadder(db::Store& store, const Ladder& l, const RecordContext& ctx) {
  db::SourceRecord src;
  src.hash = Sha256Hex(l.input.text);
  src.name = l.input.name;
  src.text = l.input.text;
  src.origin = ctx.origin;
  auto sid = store.PutSource(src);
  if (!sid.ok()) return sid.status();
  db::CandidateRecord c;
  c.hash = l.hash;
  c.source_id = *sid;
  for (const auto& [k, v] : l.input.params) c.params[k] = v;
  c.op = ctx.op;
  c.dtype = ctx.dtype;
  c.arch = ctx.arch;
  c.run_id = ctx.run_id;
  c.generation = ctx.generation;
  c.island = ctx.island;
  c.op_name = ctx.op_name;
  c.parents = ctx.parents;
  auto id = store.PutCandidate(c);
  if (!id.ok()) return id.status();
  db::EvaluationRecord e;
  e.candidate_id = id->first;
  e.status = l.status();
  if (l.fitness && l.ok()) e.fitness = l.fitness->fitness;
  e.features = l.Features();
  for (const auto& r : l.rungs) {
    nlohmann::json metrics = r.metrics;
    if (!r.reason.empty()) metrics["reason"] = r.reason;
    std::string device = r.name == "static" || r.name == "compile" ? "" : l.device_uuid;
    e.rungs.push_back({0, id->first, r.name, r.ok, metrics, r.log, r.duration_ms, device, ""});
  }
  std::map<std::string, const ShapeFraction*> frac;
  if (l.fitness)
    for (const auto& s : l.fitness->shapes) frac[s.shape] = &s;
  for (const auto& t : l.timings) {
    db::TimingRecord tr;
    tr.device_uuid = l.device_uuid;
    tr.shape = t.shape;
    tr.median_us = t.median_us;
    tr.p10_us = t.p10_us;
    tr.p90_us = t.p90_us;
    tr.n = t.n;
    tr.samples_us = t.samples_us;
    tr.protocol = t.protocol;
    if (auto it = frac.find(t.shape); it != frac.end()) {
      tr.roofline_us = it->second->roofline_us;
      tr.fraction = it->second->fraction;
    }
    e.timings.push_back(std::move(tr));
  }
  if (Status s = store.RecordEvaluation(e); !s.ok()) return s;
  if (l.compiled.ok) {
    store.PutArtifact(id->first, "cubin", l.compiled.cubin);
    store.PutArtifact(id->first, "ptx", l.compiled.ptx);
  }
  return id->first;
}

}  // namespace kevolve

namespace kevolve {

Result<std::map<std::string, Calibration>> LoadOrCalibrate(GpuExecutor& ex, db::Store* store, bool recalibrate,
                                                           bool verbose) {
  std::map<std::string, Calibration> out;
  auto devices = ex.Devices();
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceDesc& d = devices[i];
    if (store && !recalibrate) {
      auto rec = store->GetDevice(d.uuid);
      if (rec.ok() && *rec && (*rec)->copy_gbps > 0 && (*rec)->fp32_gflops > 0) {
        out[d.uuid] = {d.uuid, (*rec)->copy_gbps, (*rec)->fp32_gflops, (*rec)->calibration};
        continue;
      }
    }
    auto cal = ex.Calibrate(static_cast<int>(i));
    if (!cal.ok()) return Status::Error("calibrating " + d.name + " (" + d.uuid + "): " + cal.error());
    if (verbose)
      std::fprintf(stderr, "calibrated %s (%s): copy %.0f GB/s, fp32 FMA %.1f TFLOP/s\n", d.name.c_str(),
                   d.uuid.c_str(), cal->copy_gbps, cal->fp32_gflops / 1000);
    out[d.uuid] = *cal;
    if (store) {
      db::DeviceRecord rec;
      rec.uuid = d.uuid;
      rec.name = d.name;
      rec.arch = d.arch;
      rec.sm_count = d.sm_count;
      rec.l2_bytes = d.l2_bytes;
      rec.mem_bytes = d.mem_bytes;
      rec.copy_gbps = cal->copy_gbps;
      rec.fp32_gflops = cal->fp32_gflops;
      rec.calibration = cal->details;
      if (Status s = store->PutDevice(rec); !s.ok()) return s;
    }
  }
  return out;
}

}  // namespace kevolve

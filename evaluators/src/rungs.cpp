#include "kevolve/evaluators/rungs.h"

#include <chrono>
#include <map>
#include <cstdio>
#include <sstream>

#include "kevolve/evaluators/static_check.h"

namespace kevolve {

const std::vector<std::string>& RungOrder() {
  static const std::vector<std::string> k = {"static", "compile", "launch", "correctness", "timing", "fitness", "profile"};
  return k;
}

namespace {

std::string FormatValue(const nlohmann::json& v) {
  if (v.is_number_float()) {
    char buf[32];
    double d = v.get<double>();
    double a = d < 0 ? -d : d;
    if (a != 0 && (a < 1e-3 || a >= 1e6)) std::snprintf(buf, sizeof(buf), "%.2e", d);
    else std::snprintf(buf, sizeof(buf), "%.4g", d);
    return buf;
  }
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

}  // namespace

std::string FormatOccupancy(const nlohmann::json& protocol) {
  if (!protocol.is_object() || !protocol.contains("occupancy") || !protocol["occupancy"].is_array()) return "";
  const auto& occ = protocol["occupancy"];
  std::string s;
  for (const auto& o : occ) {
    if (!o.is_object()) continue;
    if (!s.empty()) s += " ";
    if (occ.size() > 1) s += o.value("entry", std::string("?")) + ":";
    s += "blocks/SM=" + std::to_string(o.value("blocks_per_sm", 0));
    if (o.contains("max_active_clusters"))
      s += " clusters=" + std::to_string(o.value("max_active_clusters", 0)) + "x" + std::to_string(o.value("cluster_size", 0));
  }
  return s;
}

std::string FormatRung(const RungResult& r, bool with_log) {
  std::ostringstream out;
  out << "[" << r.name << "] " << (r.ok ? "ok" : "FAILED");
  if (!r.ok && !r.reason.empty()) out << " (" << r.reason << ")";
  // The fields worth one line, per rung, in order; other rungs print every scalar.
  static const std::map<std::string, std::vector<std::string>> kLine = {
      {"static", {"bytes", "params", "launches", "space"}},
      {"compile", {"regs", "smem", "stack", "spills", "time_ms", "cached"}},
      {"correctness", {"shapes", "draws", "max_abs", "max_rel", "psnr", "cossim", "mismatches", "unwritten", "nonfinite"}},
  };
  auto it = kLine.find(r.name);
  if (it != kLine.end()) {
    for (const auto& k : it->second) {
      if (!r.metrics.contains(k) || r.metrics[k].is_structured()) continue;
      if (r.metrics[k].is_boolean() && !r.metrics[k].get<bool>()) continue;
      out << " " << k << "=" << FormatValue(r.metrics[k]);
    }
  } else if (r.metrics.is_object()) {
    for (auto m = r.metrics.begin(); m != r.metrics.end(); ++m) {
      if (m->is_structured()) continue;
      out << " " << m.key() << "=" << FormatValue(*m);
    }
  }
  if (with_log && !r.ok && !r.log.empty()) {
    std::istringstream in(r.log);
    std::string line;
    while (std::getline(in, line)) out << "\n    " << line;
  }
  return out.str();
}

RungResult StaticRung(const OpSpec& op, DType dtype, const std::string& name, const std::string& text,
                      const Assignment& params, CandidateSource* parsed, const StaticLimits& limits) {
  auto t0 = std::chrono::steady_clock::now();
  RungResult r;
  r.name = "static";
  auto finish = [&](bool ok, const std::string& log) {
    r.ok = ok;
    r.log = log;
    if (!ok) r.reason = "static";
    r.duration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  if (Status s = StaticCheck(name, text, limits); !s.ok()) return finish(false, s.message());
  auto c = CandidateSource::Parse(text, name);
  if (!c.ok()) return finish(false, c.error());
  if (Status s = CheckCandidateNames(*c, op.sizes); !s.ok()) return finish(false, s.message());
  Env constants = {{"sizeof_T", DTypeSize(dtype)}};
  if (Status s = ValidateAssignment(*c, params, constants); !s.ok()) return finish(false, name + ": " + s.message());
  r.metrics = {{"bytes", static_cast<int64_t>(text.size())},
               {"params", static_cast<int64_t>(c->params.size())},
               {"launches", static_cast<int64_t>(c->launches.size())},
               {"space", c->SpaceSize()}};
  *parsed = std::move(*c);
  return finish(true, "");
}

CompileRequest MakeCompileRequest(const CandidateSource& c, const Assignment& params, DType dtype,
                                  const std::string& arch) {
  CompileRequest req;
  req.name = c.name;
  req.source = c.text;
  req.params = params;
  req.dtype = dtype;
  req.arch = arch;
  for (const auto& l : c.launches) {
    bool dup = false;
    for (const auto& e : req.entries) dup = dup || e == l.entry;
    if (!dup) req.entries.push_back(l.entry);
  }
  return req;
}

RungResult CompileRung(const CompileResult& c) {
  RungResult r;
  r.name = c.rung == "static" ? "static" : "compile";
  r.ok = c.ok;
  r.duration_ms = c.compile_ms;
  r.log = c.log;
  if (!c.ok) {
    r.reason = r.name;
    r.metrics = {{"time_ms", c.compile_ms}};
    return r;
  }
  Resources a = Aggregate(c);
  nlohmann::json per_entry = nlohmann::json::object();
  for (const auto& [entry, x] : c.resources)
    per_entry[entry] = {{"regs", x.registers}, {"smem", x.smem_static}, {"stack", x.stack},
                        {"spill_stores", x.spill_stores}, {"spill_loads", x.spill_loads}, {"cmem", x.cmem}};
  r.metrics = {{"regs", a.registers},
               {"smem", a.smem_static},
               {"stack", a.stack},
               {"spills", a.spill_stores + a.spill_loads},
               {"time_ms", static_cast<double>(static_cast<int64_t>(c.compile_ms * 10)) / 10},
               {"cached", c.cached},
               {"cubin_bytes", static_cast<int64_t>(c.cubin.size())},
               {"entries", per_entry}};
  return r;
}

}  // namespace kevolve

#include "kevolve/engine/llm_context.h"

#include <cstdio>
#include <set>
#include <sstream>

#include "kevolve/core/candidate.h"
#include "kevolve/core/json_file.h"
#include "kevolve/evaluators/rungs.h"

namespace kevolve {

namespace {

constexpr size_t kMaxLog = 3000;
constexpr size_t kMaxInspiration = 6000;
constexpr int kInspirations = 3;
constexpr int kFailures = 5;
constexpr int kSnippets = 4;

std::string Clip(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n) + "\n[... " + std::to_string(s.size() - n) + " more bytes]";
}

// The SASS lines around the first global load: usually the hot loop of a rowwise kernel.
std::string SassExcerpt(const std::string& sass) {
  std::vector<std::string> lines;
  std::istringstream in(sass);
  std::string l;
  while (std::getline(in, l))
    if (l.find("/*") != std::string::npos && l.find(';') != std::string::npos) lines.push_back(l);
  size_t at = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find("LDG") != std::string::npos) {
      at = i;
      break;
    }
  size_t from = at > 8 ? at - 8 : 0;
  std::string out;
  for (size_t i = from; i < lines.size() && i < from + 48; ++i) out += lines[i] + "\n";
  return out;
}

std::string RungsText(db::Store& store, int64_t id) {
  std::ostringstream out;
  auto rungs = store.GetRungs(id);
  if (rungs.ok()) {
    for (const auto& r : *rungs) {
      RungResult rr{r.name, r.ok, r.metrics.value("reason", ""), r.metrics, "", r.duration_ms};
      out << FormatRung(rr, false) << "\n";
      if (!r.ok && !r.log.empty()) out << Clip(r.log, kMaxLog) << "\n";
      if (r.name == "correctness" && r.metrics.contains("worst"))
        out << "worst element: " << r.metrics["worst"].dump() << "\n";
      if (r.name == "compile" && r.metrics.contains("entries")) out << "resources: " << r.metrics["entries"].dump() << "\n";
    }
  }
  auto timings = store.GetTimings(id);
  if (timings.ok() && !timings->empty()) {
    out << "timings (median us, roofline us, fraction of the roofline; occupancy: blocks per SM, and for clusters\n"
           "how many the device holds at once x their size):\n";
    for (const auto& t : *timings) {
      char b[160];
      std::snprintf(b, sizeof(b), "  %-14s %10.1f %10.1f %6.3f", t.shape.c_str(), t.median_us, t.roofline_us, t.fraction);
      out << b;
      if (std::string occ = FormatOccupancy(t.protocol); !occ.empty()) out << "  " << occ;
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace

std::string InterfaceText(const OpSpec& op, DType dtype) {
  std::ostringstream s;
  s << "dtype " << DTypeName(dtype) << " (T = " << DTypeCppName(dtype) << "). Kernel arguments, in order:\n";
  for (const auto& b : op.buffers) {
    s << "  " << (b.role == BufferRole::kIn ? "const " : "") << DTypeCppName(op.BufferDType(b, dtype)) << "* " << b.name
      << "  // " << (b.role == BufferRole::kIn ? "input" : "output") << ", shape [";
    for (size_t i = 0; i < b.shape.size(); ++i) s << (i ? ", " : "") << b.shape[i].text();
    s << "]\n";
  }
  for (const auto& z : op.sizes) s << "  int " << z << "\n";
  for (const auto& sc : op.scalars) s << "  " << (sc.type == DType::kI32 ? "int " : "float ") << sc.name << "  // " << sc.value << "\n";
  s << "  then one pointer per declared scratch buffer.\n";
  s << "Cost model: bytes = " << op.cost_bytes.text() << ", flops = " << op.cost_flops.text() << ".\n";
  s << "Tune shapes:";
  for (const auto& t : op.tune) s << " " << t.label;
  s << "\nCheck shapes (correctness):";
  for (const auto& t : op.check) s << " " << t.label;
  s << "\n";
  return s.str();
}

llm::MutationContext BuildMutationContext(const OpSpec& op, DType dtype, const ParentRef& parent, db::Store* store,
                                          db::ContextIndex* index, std::optional<int64_t> run_id) {
  llm::MutationContext c;
  c.op_name = op.name;
  c.op_description = op.description;
  c.interface_text = InterfaceText(op, dtype);
  if (auto ref = ReadTextFile(op.reference); ref.ok()) c.reference_source = *ref;
  c.parent_name = parent.name;
  c.parent_source = parent.source;
  c.parent_params = AssignmentString(parent.params);
  c.parent_results = "not evaluated yet";
  std::string bottleneck = "memory bandwidth coalesced vector loads";
  if (store && parent.id) {
    c.parent_results = RungsText(*store, *parent.id);
    if (auto sass = store->GetArtifact(*parent.id, "sass"); sass.ok() && *sass)
      c.parent_profile = "SASS around the first global load:\n" + SassExcerpt(**sass);
    if (auto rungs = store->GetRungs(*parent.id); rungs.ok())
      for (const auto& r : *rungs) {
        if (r.name == "profile") c.parent_profile += "\nNsight Compute: " + r.metrics.dump();
        if (!r.ok && r.name == "correctness") bottleneck = "correctness reduction race tail bounds";
      }
  }
  if (store) {
    db::CandidateQuery q;
    q.op = op.name;
    q.dtype = DTypeName(dtype);
    q.only_ok = true;
    q.order_by_fitness = true;
    q.limit = 20;
    std::set<int64_t> sources;
    if (auto best = store->ListCandidates(q); best.ok()) {
      for (const auto& b : *best) {
        if (static_cast<int>(c.inspirations.size()) >= kInspirations) break;
        if (parent.id && b.id == *parent.id) continue;
        if (!sources.insert(b.source_id).second) continue;  // one per source: diversity
        auto src = store->GetSource(b.source_id);
        if (!src.ok() || WithoutPresets(src->text) == parent.source) continue;
        char head[200];
        std::snprintf(head, sizeof(head), "%s %s fitness %.4f", src->name.c_str(), b.params.dump().c_str(),
                      b.fitness.value_or(0));
        c.inspirations.push_back(std::string(head) + "\n```cuda\n" + Clip(WithoutPresets(src->text), kMaxInspiration) + "\n```");
      }
    }
    db::CandidateQuery f;
    if (run_id) f.run_id = *run_id;
    f.op = op.name;
    if (auto all = store->ListCandidates(f); all.ok()) {
      for (auto it = all->rbegin(); it != all->rend() && static_cast<int>(c.failures.size()) < kFailures; ++it) {
        if (it->status == "ok" || it->status == "pending" || it->status == "compiled") continue;
        if (it->op_name != "llm_rewrite" && it->op_name != "llm_diff" && it->op_name != "repair") continue;
        auto rungs = store->GetRungs(it->id);
        std::string why = it->status;
        if (rungs.ok())
          for (const auto& r : *rungs)
            if (!r.ok) {
              why += ": " + Clip(r.log, 600);
              break;
            }
        c.failures.push_back("candidate " + std::to_string(it->id) + " (" + it->op_name + ") " + why);
      }
    }
  }
  if (index) {
    auto snips = index->Search(op.name + " " + bottleneck + " " + DTypeName(dtype), kSnippets);
    if (snips.ok())
      for (const auto& s : *snips) c.snippets.push_back("From " + s.path + ":\n" + s.text);
  }
  return c;
}

std::optional<int64_t> RecordCalls(db::Store& store, const llm::MutationOutcome& m, std::optional<int64_t> run_id,
                                   std::optional<int64_t> parent_id, std::optional<int64_t> child_id) {
  std::optional<int64_t> producer;
  for (size_t i = 0; i < m.calls.size(); ++i) {
    const auto& c = m.calls[i];
    db::LlmCallRecord r;
    r.run_id = run_id;
    r.parent_id = parent_id;
    if (i + 1 == m.calls.size() && m.ok) r.candidate_id = child_id;
    r.provider = c.provider;
    r.model = c.model;
    r.op_name = c.op_name;
    r.prompt = c.prompt;
    r.response = c.response;
    r.tokens_in = c.reply.tokens_in;
    r.tokens_out = c.reply.tokens_out;
    r.latency_s = c.reply.latency_s;
    r.cost_usd = c.reply.cost_usd;
    r.outcome = c.parse_error.empty() ? c.reply.outcome : (c.reply.ok() ? "parse_error" : c.reply.outcome);
    r.error = c.parse_error.empty() ? c.reply.error : c.parse_error;
    auto id = store.RecordLlmCall(r);
    if (id.ok() && i + 1 == m.calls.size() && m.ok) producer = *id;
  }
  return producer;
}

}  // namespace kevolve

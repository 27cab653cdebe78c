// kevolve ops [OP] [--json]: the ops, their dtypes, sizes and shape sets.
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "app_context.h"
#include "commands.h"
#include "kevolve/core/candidate.h"
#include "kevolve/core/json_file.h"

namespace fs = std::filesystem;

namespace kevolve::cli {

namespace {

struct OpsArgs {
  std::string op;
  bool json = false;
};

std::string Labels(const std::vector<Shape>& shapes) {
  std::string s;
  for (const auto& sh : shapes) s += (s.empty() ? "" : " ") + sh.label;
  return s;
}

nlohmann::json OpJson(const OpSpec& op) {
  nlohmann::json dtypes = nlohmann::json::array();
  for (DType d : op.dtypes) dtypes.push_back(DTypeName(d));
  auto shapes = [](const std::vector<Shape>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& s : v) a.push_back(s.label);
    return a;
  };
  nlohmann::json seeds = nlohmann::json::array(), details = nlohmann::json::array();
  for (const auto& s : op.seeds) {
    const std::string name = fs::path(s).filename().string();
    seeds.push_back(name);
    // Each seed's search space: its parameters with their allowed values, and its presets.
    nlohmann::json d = {{"file", name}};
    auto text = ReadTextFile(s);
    auto src = text.ok() ? CandidateSource::Parse(*text, name) : Result<CandidateSource>(text.status());
    if (src.ok()) {
      nlohmann::json params = nlohmann::json::object();
      for (const auto& p : src->params) params[p.name] = p.values;
      nlohmann::json presets = nlohmann::json::array();
      for (const auto& pr : src->presets) presets.push_back(pr);
      d["params"] = params;
      d["space"] = src->SpaceSize();
      d["presets"] = presets;
    } else {
      d["error"] = src.error();
    }
    details.push_back(d);
  }
  // The kernel's arguments in order: buffers, sizes (int), scalars.
  nlohmann::json args = nlohmann::json::array();
  for (const auto& b : op.buffers)
    args.push_back({{"name", b.name}, {"kind", "buffer"}, {"role", b.role == BufferRole::kIn ? "in" : "out"},
                    {"dtype", b.dtype}});
  for (const auto& sz : op.sizes) args.push_back({{"name", sz}, {"kind", "int"}});
  for (const auto& sc : op.scalars) args.push_back({{"name", sc.name}, {"kind", sc.type == DType::kF32 ? "float" : "int"}});
  return {{"name", op.name}, {"description", op.description}, {"sizes", op.sizes}, {"dtypes", dtypes},
          {"tune", shapes(op.tune)}, {"check", shapes(op.check)}, {"heldout", shapes(op.heldout)},
          {"seeds", seeds}, {"seed_details", details}, {"args", args}, {"cost_bytes", op.cost_bytes.text()},
          {"cost_flops", op.cost_flops.text()}, {"dir", op.dir}};
}

int Run(const OpsArgs& a) {
  std::string root = OpsRoot();
  if (root.empty()) {
    PrintError("configs/ops not found: run from the kevolve checkout or set KEVOLVE_HOME");
    return kExitUsage;
  }
  std::vector<std::string> dirs;
  if (!a.op.empty()) dirs.push_back((fs::path(root) / a.op).string());
  else dirs = ListOpDirs(root);
  nlohmann::json all = nlohmann::json::array();
  int bad = 0;
  for (const auto& d : dirs) {
    auto op = a.op.empty() ? LoadOpSpec(d) : LoadOp(a.op);
    if (!op.ok()) {
      PrintError(op.error());
      ++bad;
      continue;
    }
    if (a.json) {
      all.push_back(OpJson(*op));
      continue;
    }
    std::string dtypes;
    for (DType t : op->dtypes) dtypes += (dtypes.empty() ? "" : ",") + std::string(DTypeName(t));
    std::string sizes;
    for (const auto& s : op->sizes) sizes += (sizes.empty() ? "" : " x ") + s;
    std::printf("%s  (%s)  dtypes=%s  seeds=%zu\n", op->name.c_str(), sizes.c_str(), dtypes.c_str(), op->seeds.size());
    if (!op->description.empty()) std::printf("  %s\n", op->description.c_str());
    std::printf("  tune:    %s\n  check:   %s\n  heldout: %s\n", Labels(op->tune).c_str(), Labels(op->check).c_str(),
                Labels(op->heldout).c_str());
    std::printf("  cost:    bytes = %s, flops = %s\n", op->cost_bytes.text().c_str(), op->cost_flops.text().c_str());
    // The kernel's arguments, in order, and each seed's parameters (the search space).
    std::string args;
    for (const auto& b : op->buffers) args += (args.empty() ? "" : ", ") + b.name;
    for (const auto& s : op->sizes) args += ", int " + s;
    for (const auto& s : op->scalars) args += std::string(s.type == DType::kF32 ? ", float " : ", int ") + s.name;
    std::printf("  args:    %s\n", args.c_str());
    for (const auto& seed : op->seeds) {
      std::string name = fs::path(seed).filename().string(), params;
      auto text = ReadTextFile(seed);
      auto src = text.ok() ? CandidateSource::Parse(*text, name) : Result<CandidateSource>(text.status());
      if (!src.ok()) {
        std::printf("  seed:    %s: %s\n", name.c_str(), src.error().c_str());
        continue;
      }
      for (const auto& p : src->params) params += (params.empty() ? "" : " ") + p.name;
      std::printf("  seed:    %-16s %s (%lld assignments before requires%s)\n", name.c_str(), params.c_str(),
                  static_cast<long long>(src->SpaceSize()),
                  src->presets.empty() ? ""
                  : (", " + std::to_string(src->presets.size()) + (src->presets.size() == 1 ? " preset" : " presets")).c_str());
    }
  }
  if (a.json) std::printf("%s\n", all.dump(2).c_str());
  return bad ? kExitUsage : kExitOk;
}

}  // namespace

Handler AddOpsCommand(CLI::App& app) {
  auto args = std::make_shared<OpsArgs>();
  CLI::App* sub = app.add_subcommand("ops", "List the ops with their dtypes, sizes, shape sets and seeds.\n"
                                            "Examples:\n  kevolve ops\n  kevolve ops softmax --json");
  sub->add_option("op", args->op, "Show one op only");
  sub->add_flag("--json", args->json, "Machine-readable output");
  return [args] { return Run(*args); };
}

}  // namespace kevolve::cli

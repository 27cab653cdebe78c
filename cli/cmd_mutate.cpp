// kevolve mutate: one LLM operator on one parent, no GPU needed: the prompt, the call,
// the child, and the child's static and compile rungs.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "app_context.h"
#include "commands.h"
#include "kevolve/core/json_file.h"
#include "kevolve/core/paths.h"
#include "kevolve/engine/llm_breeder.h"
#include "kevolve/engine/llm_context.h"
#include "kevolve/evaluators/cuda_driver.h"
#include "kevolve/evaluators/nvrtc_compiler.h"
#include "kevolve/evaluators/rungs.h"
#include "kevolve/operators/llm/provider.h"

namespace fs = std::filesystem;

namespace kevolve::cli {

namespace {

struct MutateArgs {
  std::string op, dtype, op_kind = "llm_rewrite", parent, out, provider, llm_config, db, arch;
  std::vector<std::string> context_dirs;
  double max_cost = 0;
  int repairs = 2;
  size_t max_prompt_chars = 60000;
  bool dry_run = false;
};

std::string DefaultIndexPath() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path base = xdg ? fs::path(xdg) : fs::path(home ? home : "/tmp") / ".cache";
  std::error_code ec;
  fs::create_directories(base / "kevolve", ec);
  return (base / "kevolve" / "context.db").string();
}

int Run(const MutateArgs& a) {
  auto op = LoadOp(a.op);
  if (!op.ok()) { PrintError(op.error()); return kExitUsage; }
  auto dtype = ResolveDType(*op, a.dtype);
  if (!dtype.ok()) { PrintError(dtype.error()); return kExitUsage; }
  if (a.op_kind != "llm_rewrite" && a.op_kind != "llm_diff") {
    PrintError("--operator must be llm_rewrite or llm_diff");
    return kExitUsage;
  }
  std::string root = FindProjectRoot();
  std::string cfg_path = a.llm_config.empty() ? (fs::path(root) / "configs" / "llm.json").string() : a.llm_config;
  if (!a.llm_config.empty() && !fs::exists(cfg_path)) {
    PrintError("no LLM config at '" + cfg_path + "'");
    return kExitUsage;
  }
  auto configs = fs::exists(cfg_path) ? llm::LoadProviderConfigs(cfg_path)
                                      : Result<std::vector<llm::ProviderConfig>>(std::vector<llm::ProviderConfig>{});
  if (!configs.ok()) { PrintError(configs.error()); return kExitUsage; }
  // --provider NAME, else the first provider with a weight above 0, else the first.
  const llm::ProviderConfig* cfg = nullptr;
  for (const auto& c : *configs)
    if (a.provider.empty() ? (!cfg && c.weight > 0) : c.name == a.provider) cfg = &c;
  if (!cfg && a.provider.empty() && !configs->empty()) cfg = &configs->front();
  if (!cfg && !a.dry_run) {
    PrintError(a.provider.empty() ? "no LLM provider configured in " + cfg_path +
                                        ": copy configs/llm.example.json to configs/llm.json and keep a provider "
                                        "(README, 'LLM operators')"
                                  : "no provider named '" + a.provider + "' in " + cfg_path);
    return kExitUsage;
  }

  std::unique_ptr<db::Store> store;
  if (!a.db.empty()) {
    auto s = db::OpenSqliteStore(a.db);
    if (!s.ok()) { PrintError(s.error()); return kExitUsage; }
    store = std::move(*s);
  }
  ParentRef parent;
  if (fs::exists(a.parent)) {
    auto text = ReadTextFile(a.parent);
    if (!text.ok()) { PrintError(text.error()); return kExitUsage; }
    parent.name = fs::path(a.parent).filename().string();
    parent.source = *text;
    auto parsed = CandidateSource::Parse(*text, parent.name);
    if (!parsed.ok()) { PrintError("the parent does not parse: " + parsed.error()); return kExitUsage; }
    parent.params = parsed->DefaultAssignment();
  } else {
    int64_t id = 0;
    try {
      id = std::stoll(a.parent);
    } catch (const std::exception&) {
      PrintError("--parent is neither a file nor a candidate id: '" + a.parent + "'");
      return kExitUsage;
    }
    if (!store) { PrintError("--parent " + a.parent + " is a candidate id: give the database with --db"); return kExitUsage; }
    auto c = store->GetCandidate(id);
    if (!c.ok()) { PrintError(c.error()); return kExitUsage; }
    auto src = store->GetSource(c->source_id);
    if (!src.ok()) { PrintError(src.error()); return kExitUsage; }
    parent.name = src->name;
    parent.source = src->text;
    for (auto it = c->params.begin(); it != c->params.end(); ++it) parent.params[it.key()] = it->get<int64_t>();
    parent.id = id;
  }

  auto index = db::ContextIndex::Open(a.db.empty() ? DefaultIndexPath() : a.db);
  std::unique_ptr<db::ContextIndex> idx;
  if (index.ok()) {
    idx = std::move(*index);
    std::vector<std::string> dirs = {(fs::path(root) / "context").string()};
    dirs.insert(dirs.end(), a.context_dirs.begin(), a.context_dirs.end());
    for (const auto& d : dirs) {
      auto n = idx->IndexFolder(d);
      if (!n.ok()) PrintWarning("context folder skipped: " + n.error());
    }
  } else {
    PrintError("context index unavailable: " + index.error());
  }
  llm::MutationContext ctx = BuildMutationContext(*op, *dtype, parent, store.get(), idx.get(), std::nullopt);
  bool diff = a.op_kind == "llm_diff";
  llm::Mutator preview(nullptr, nullptr, {a.max_prompt_chars, a.repairs});
  llm::BuiltPrompt p = preview.Prompt(ctx, diff);
  if (!p.fits) {  // a prompt without its parent is useless: bad input, before any call
    PrintError("--max-prompt-chars " + std::to_string(a.max_prompt_chars) +
               " is too small: the system prompt, task, interface and parent alone take " + std::to_string(p.chars()) +
               " characters");
    return kExitUsage;
  }
  if (a.dry_run) {  // the prompt only: no provider is called (or needed)
    std::printf("### system\n%s\n\n### user\n%s\n", p.system.c_str(), p.user.c_str());
    std::fprintf(stderr, "prompt: %zu chars (~%zu tokens)%s\n", p.chars(), p.chars() / 4,
                 p.dropped.empty() ? "" : ", trimmed to fit the budget");
    return kExitOk;
  }
  std::shared_ptr<llm::HttpTransport> transport = llm::MakeCurlTransport();
  llm::ProviderConfig chosen = *cfg;
  if (Status s = LoadReplayReplies(&chosen); !s.ok()) { PrintError(s.message()); return kExitUsage; }
  auto provider = llm::MakeProvider(chosen, transport);
  if (!provider.ok()) { PrintError(provider.error()); return kExitUsage; }
  llm::CostMeter meter(a.max_cost);
  llm::Mutator mutator(provider->get(), &meter, {a.max_prompt_chars, a.repairs});

  std::string arch = a.arch.empty() ? DefaultArch() : a.arch;
  if (std::string why = a.arch.empty() ? "" : NvrtcCompiler::CheckArch(arch); !why.empty()) {
    PrintError(why);
    return kExitUsage;
  }
  NvrtcCompiler nvrtc;
  std::string out = a.out.empty() ? fs::path(parent.name).stem().string() + "-" + a.op_kind + ".cu" : a.out;
  std::string out_name = fs::path(out).filename().string();
  std::vector<RungResult> last_rungs;
  auto check = [&](const std::string& source) -> std::string {
    last_rungs.clear();
    CandidateSource parsed;
    auto p0 = CandidateSource::Parse(source, out_name);
    Assignment params = p0.ok() ? p0->DefaultAssignment() : Assignment{};
    RungResult s = StaticRung(*op, *dtype, out_name, source, params, &parsed);
    last_rungs.push_back(s);
    if (!s.ok) return s.log;
    CompileResult c = nvrtc.Compile(MakeCompileRequest(parsed, params, *dtype, arch));
    last_rungs.push_back(CompileRung(c));
    return c.ok ? "" : c.log;
  };
  const std::string where = "provider '" + cfg->name + "'" + (cfg->base_url.empty() ? "" : " at " + cfg->base_url);
  if (cfg->kind != "replay")  // a network call or an agent can take a while: say what is being waited on
    std::fprintf(stderr, "kevolve: calling %s (up to %d attempts; --repairs %d)\n", where.c_str(),
                 cfg->max_retries + 1, a.repairs);
  llm::MutationOutcome m = mutator.Mutate(ctx, diff, check);
  int64_t tin = 0, tout = 0;
  double cost = 0;
  for (const auto& c : m.calls) {
    tin += c.reply.tokens_in;
    tout += c.reply.tokens_out;
    cost += c.reply.cost_usd;
  }
  std::string via = cfg->name + (cfg->model.empty() ? "" : " (" + cfg->model + ")");
  std::printf("%s via %s: prompt %zu chars, %zu call(s), tokens in %lld out %lld, cost $%.4f, repair turns %d\n",
              a.op_kind.c_str(), via.c_str(), m.prompt_chars, m.calls.size(),
              static_cast<long long>(tin), static_cast<long long>(tout), cost, m.repair_turns);
  if (store) RecordCalls(*store, m, std::nullopt, parent.id, std::nullopt);
  if (m.calls.empty() || (!m.ok && last_rungs.empty())) {
    PrintError(m.error + (m.error.rfind("provider:", 0) == 0 ? " (" + where + ")" : ""));
    return kExitFailed;
  }
  const std::string& child = m.ok ? m.child_source : m.calls.back().response;
  if (m.ok) {
    if (Status s = WriteTextFile(out, child); !s.ok()) { PrintError(s.message()); return kExitUsage; }
    std::printf("wrote %s\n", out.c_str());
  }
  for (const auto& r : last_rungs) std::printf("  %s\n", FormatRung(r).c_str());
  if (!m.ok) PrintError(m.error);
  return m.ok ? kExitOk : kExitFailed;
}

}  // namespace

Handler AddMutateCommand(CLI::App& app) {
  auto a = std::make_shared<MutateArgs>();
  CLI::App* sub = app.add_subcommand(
      "mutate",
      "Apply one LLM operator to a parent (a file or a candidate id), write the child and run its compile rung.\n"
      "No GPU needed. Providers are configured in configs/llm.json.\n"
      "Examples:\n"
      "  kevolve mutate --op softmax --operator llm_diff --parent configs/ops/softmax/seeds/warp_row.cu\n"
      "  kevolve mutate --op softmax --operator llm_rewrite --parent 42 --db kevolve.db --provider local\n"
      "  kevolve mutate --op softmax --parent configs/ops/softmax/seeds/block_row.cu --dry-run");
  sub->add_option("--op", a->op, "Op the parent implements")->required();
  sub->add_option("--dtype", a->dtype, "Element type variant (default: the op's first)");
  sub->add_option("--operator", a->op_kind, "llm_rewrite (a whole new file; the default) or llm_diff (SEARCH/REPLACE edits)");
  sub->add_option("--parent", a->parent, "A .cu file, or a candidate id in --db")->required();
  sub->add_option("--out", a->out, "Where to write the child (default: <parent>-<operator>.cu)");
  sub->add_option("--provider", a->provider, "Provider name in the LLM config (default: the first by name with a weight above 0, else the first)");
  sub->add_option("--llm-config", a->llm_config, "LLM provider configuration (default: configs/llm.json)");
  sub->add_option("--db", a->db, "Database: parent candidates, context index, and where calls are recorded");
  sub->add_option("--context-dir", a->context_dirs, "More folders to index and retrieve snippets from (repeatable)");
  sub->add_option("--max-cost", a->max_cost, "Stop calling the LLM once this many USD are spent")->check(CLI::Range(0.0, 1e9).description(""));
  sub->add_option("--repairs", a->repairs, "Compile-error repair turns (default 2)");
  sub->add_option("--max-prompt-chars", a->max_prompt_chars, "Prompt size budget (default 60000)");
  sub->add_option("--arch", a->arch, "Architecture for the compile rung (default: the GPU's own in its arch-specific form, sm_90a on an H100/H200; sm_90a without a GPU)");
  sub->add_flag("--dry-run", a->dry_run, "Print the prompt and stop");
  return [a] { return Run(*a); };
}

}  // namespace kevolve::cli

#include "kevolve/operators/llm/mutator.h"

#include "kevolve/operators/llm/response.h"

namespace kevolve::llm {

namespace {

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::string Fenced(const std::string& code) { return "```cuda\n" + code + (code.empty() || code.back() == '\n' ? "" : "\n") + "```"; }

}  // namespace

BuiltPrompt Mutator::Prompt(const MutationContext& c, bool diff) const {
  std::vector<PromptSection> s;
  s.push_back({"Task", std::string(diff ? "Improve the parent kernel below with SEARCH/REPLACE edits."
                                        : "Write a faster version of the parent kernel below as one complete file.") +
                           " It must stay correct on every shape. Op: " + c.op_name + ". " + c.op_description,
               100, false, true});
  s.push_back({"Interface", c.interface_text, 95, false, true});
  s.push_back({"Parent: " + c.parent_name + " (" + c.parent_params + ")", Fenced(c.parent_source), 90, false, true});
  s.push_back({"Parent's results", c.parent_results, 80, true});
  if (!c.failures.empty()) s.push_back({"Recent failed attempts (do not repeat them)", Join(c.failures, "\n\n"), 60, true});
  if (!c.parent_profile.empty()) s.push_back({"Parent's profile (SASS excerpt, Nsight Compute)", c.parent_profile, 50, true});
  if (!c.inspirations.empty()) s.push_back({"Other strong candidates, for inspiration", Join(c.inspirations, "\n\n"), 40, true});
  if (!c.snippets.empty()) s.push_back({"Notes retrieved from the context folders", Join(c.snippets, "\n\n---\n\n"), 30, true});
  s.push_back({"Reference implementation (slow, exact; its outputs are double)", Fenced(c.reference_source), 20, true});
  return BuildPrompt(SystemPrompt(diff), s, o_.max_prompt_chars);
}

MutationOutcome Mutator::Converse(std::vector<Message> messages, const std::string& parent, bool diff,
                                  const std::string& op_name, const CompileCheck& check) {
  MutationOutcome out;
  out.prompt_chars = 0;
  for (const auto& m : messages) out.prompt_chars += m.content.size();
  std::string base = parent;
  for (int turn = 0;; ++turn) {
    if (meter_ && !meter_->Allow()) {
      out.error = "the LLM budget (--max-cost) is spent";
      return out;
    }
    CallRecord rec;
    rec.provider = p_->config().name;
    rec.model = p_->config().model;
    rec.op_name = turn == 0 ? op_name : "repair";
    for (const auto& m : messages) rec.prompt += "### " + m.role + "\n" + m.content + "\n\n";
    rec.reply = p_->Complete(messages);
    rec.response = rec.reply.text;
    if (meter_) meter_->Add(rec.reply.cost_usd);
    if (!rec.reply.ok() && rec.reply.outcome != "truncated") {
      rec.parse_error = "provider: " + rec.reply.outcome + (rec.reply.error.empty() ? "" : ": " + rec.reply.error);
      out.error = rec.parse_error;
      out.calls.push_back(std::move(rec));
      return out;
    }
    auto parsed = ParseReply(rec.reply.text, base, diff);
    if (!parsed.ok()) {
      rec.parse_error = parsed.error();
      out.error = "no usable child: " + parsed.error();
      out.calls.push_back(std::move(rec));
      return out;
    }
    out.calls.push_back(rec);
    std::string log = check ? check(parsed->source) : "";
    if (log.empty()) {
      out.ok = true;
      out.child_source = parsed->source;
      out.repair_turns = turn;
      return out;
    }
    if (turn >= o_.compile_repairs) {
      out.error = "the child still fails to compile after " + std::to_string(turn) + " repair turn(s)";
      out.calls.back().parse_error = "compile failed";
      return out;
    }
    // Repair: the reply stays in the conversation, the compiler's log follows.
    messages.push_back({"assistant", rec.reply.text});
    messages.push_back({"user", "The file fails the harness's static or compile rung:\n\n```\n" + log.substr(0, 6000) +
                                    "\n```\n\nFix it. Reply with the whole corrected file in one ```cuda block."});
    base = parsed->source;
    diff = false;  // repairs come back as whole files
  }
}

static std::string TooSmallBudget(const BuiltPrompt& p, size_t max_chars) {
  return "the prompt budget of " + std::to_string(max_chars) + " characters cannot hold the system prompt, task, " +
         "interface and kernel (" + std::to_string(p.chars()) + " characters)";
}

MutationOutcome Mutator::Mutate(const MutationContext& ctx, bool diff, const CompileCheck& check) {
  BuiltPrompt p = Prompt(ctx, diff);
  if (!p.fits) {  // never send a prompt without its parent
    MutationOutcome out;
    out.error = TooSmallBudget(p, o_.max_prompt_chars);
    return out;
  }
  return Converse({{"system", p.system}, {"user", p.user}}, ctx.parent_source, diff, diff ? "llm_diff" : "llm_rewrite",
                  check);
}

MutationOutcome Mutator::RepairCorrectness(const MutationContext& ctx, const std::string& child_source,
                                           const std::string& report, const CompileCheck& check) {
  std::vector<PromptSection> s = {
      {"Task", "This kernel compiles but fails the correctness rung. Fix the bug without losing its speed. Op: " +
                   ctx.op_name + ". " + ctx.op_description, 100, false, true},
      {"Interface", ctx.interface_text, 95, false, true},
      {"Kernel", Fenced(child_source), 90, false, true},
      {"Correctness report (worst element, metrics per shape)", report, 85, true},
      {"Reference implementation", Fenced(ctx.reference_source), 40, true},
  };
  BuiltPrompt p = BuildPrompt(SystemPrompt(false), s, o_.max_prompt_chars);
  if (!p.fits) {
    MutationOutcome out;
    out.error = TooSmallBudget(p, o_.max_prompt_chars);
    return out;
  }
  MutationOutcome o = Converse({{"system", p.system}, {"user", p.user}}, child_source, false, "repair", check);
  return o;
}

}  // namespace kevolve::llm

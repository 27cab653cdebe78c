// The LLM operators (llm_rewrite, llm_diff) and the repair loop. The mutator is given
// everything the prompt shows (assembled by the engine from the database and the
// context index), calls a provider, parses the reply into a child source, and repairs:
// a child that fails the static or compile rung is sent back with its log for up to
// `compile_repairs` turns; a child that fails correctness gets one fix attempt
// (RepairCorrectness) with the mismatch report.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kevolve/operators/llm/prompt.h"
#include "kevolve/operators/llm/provider.h"

namespace kevolve::llm {

struct MutationContext {
  std::string op_name, op_description, interface_text;  // interface: buffers, sizes, scalars, dtype
  std::string reference_source;
  std::string parent_name, parent_source, parent_params;
  std::string parent_results;    // compile log, correctness metrics with the worst element, timings
                                 // and roofline fractions, registers/smem/spills
  std::string parent_profile;    // SASS excerpt of the hot loop, Nsight Compute summary
  std::vector<std::string> inspirations;  // strong, diverse candidates (source + one-line results)
  std::vector<std::string> failures;      // recent failed attempts: what failed and why
  std::vector<std::string> snippets;      // retrieved from the context folders
};

// One provider call as it is recorded in the llm_calls table.
struct CallRecord {
  std::string provider, model, op_name;  // op_name: llm_rewrite | llm_diff | repair
  std::string prompt, response;
  Reply reply;
  std::string parse_error;               // why no child came of it ("" when one did)
};

struct MutationOutcome {
  bool ok = false;
  std::string child_source;
  std::string error;             // one line when !ok
  int repair_turns = 0;
  size_t prompt_chars = 0;
  std::vector<CallRecord> calls; // every call made, in order
};

struct MutatorOptions {
  size_t max_prompt_chars = 60000;
  int compile_repairs = 2;
};

// Returns "" when the child passes the static and compile rungs, else their log.
using CompileCheck = std::function<std::string(const std::string& source)>;

class Mutator {
 public:
  Mutator(Provider* provider, CostMeter* meter, MutatorOptions options) : p_(provider), meter_(meter), o_(options) {}

  // diff: llm_diff (SEARCH/REPLACE on the parent); else llm_rewrite (a whole file).
  MutationOutcome Mutate(const MutationContext& ctx, bool diff, const CompileCheck& check);
  // One fix attempt for a child whose correctness rung failed, with that rung's report.
  MutationOutcome RepairCorrectness(const MutationContext& ctx, const std::string& child_source,
                                    const std::string& report, const CompileCheck& check);

  // The prompt a mutation would send (for `kevolve mutate --dry-run` and tests).
  BuiltPrompt Prompt(const MutationContext& ctx, bool diff) const;

 private:
  MutationOutcome Converse(std::vector<Message> messages, const std::string& parent, bool diff,
                           const std::string& op_name, const CompileCheck& check);
  Provider* p_;
  CostMeter* meter_;
  MutatorOptions o_;
};

}  // namespace kevolve::llm

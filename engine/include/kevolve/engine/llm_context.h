// Assembling what an LLM prompt shows, from the op spec, the database (the parent's
// rungs and timings, strong candidates, recent failures, SASS) and the context index.
#pragma once

#include <optional>
#include <string>

#include "kevolve/core/candidate.h"
#include "kevolve/core/op_spec.h"
#include "kevolve/db/context_index.h"
#include "kevolve/db/store.h"
#include "kevolve/operators/llm/mutator.h"

namespace kevolve {

struct ParentRef {
  std::string name, source;
  Assignment params;
  std::optional<int64_t> id;  // when the parent is a recorded candidate
};

// `store`, `index` and `run_id` may be absent; the context then has less in it.
llm::MutationContext BuildMutationContext(const OpSpec& op, DType dtype, const ParentRef& parent, db::Store* store,
                                          db::ContextIndex* index, std::optional<int64_t> run_id);

// The op's interface as the prompt states it: arguments in order with their C types.
std::string InterfaceText(const OpSpec& op, DType dtype);

// Records every call of a mutation in llm_calls (prompts and responses in full; no keys).
// Returns the id of the call that produced the child (the last one, when the mutation
// succeeded), for db::Store::LinkLlmCall once the child has been evaluated.
std::optional<int64_t> RecordCalls(db::Store& store, const llm::MutationOutcome& m, std::optional<int64_t> run_id,
                                   std::optional<int64_t> parent_id, std::optional<int64_t> child_id);

}  // namespace kevolve

// Turning a model's reply into a child source: a whole new file in a fenced code block
// (llm_rewrite), or SEARCH/REPLACE edit blocks applied to the parent (llm_diff):
//
//   <<<<<<< SEARCH
//   exact lines of the parent
//   =======
//   their replacement
//   >>>>>>> REPLACE
//
// Tolerant of markdown noise around blocks and of whitespace drift (trailing spaces,
// indentation, CRLF) when matching SEARCH text; strict about edits that do not apply
// or change nothing.
#pragma once

#include <string>
#include <vector>

#include "kevolve/core/status.h"

namespace kevolve::llm {

struct EditBlock {
  std::string search, replace;
};

struct ParsedReply {
  std::string kind;        // "rewrite" | "diff"
  std::string source;      // the child's full text
  int edits_applied = 0;
};

// The largest fenced code block (```cuda, ```cpp, ```c++, ```cu or bare ```) that
// looks like a kernel; an error when none.
Result<std::string> ExtractCodeBlock(const std::string& reply);
std::vector<EditBlock> ExtractEditBlocks(const std::string& reply);
// Applies every block in order; an error names the first block that does not match,
// is ambiguous (matches twice), or when the result equals the parent.
Result<std::string> ApplyEdits(const std::string& parent, const std::vector<EditBlock>& edits);

// Edit blocks if the reply has any (preferred for llm_diff), else a code block.
// Errors: "no usable code in the reply", "edit 2 does not apply: ...", "the edit changes nothing".
Result<ParsedReply> ParseReply(const std::string& reply, const std::string& parent, bool prefer_diff);

}  // namespace kevolve::llm

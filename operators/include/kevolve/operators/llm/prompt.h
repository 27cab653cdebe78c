// Prompts built from verifiable feedback, within a size budget: each section has a
// priority, and the least useful sections are trimmed (then dropped) first.
#pragma once

#include <string>
#include <vector>

namespace kevolve::llm {

struct PromptSection {
  std::string title;
  std::string body;
  int priority = 0;        // higher survives longer
  bool trimmable = true;   // may be cut to fit (keeping its head); else kept whole or dropped
  bool required = false;   // never cut or dropped: a prompt without it is useless (the parent)
};

struct BuiltPrompt {
  std::string system;
  std::string user;
  std::vector<std::string> dropped;  // titles of sections trimmed or dropped
  bool fits = true;                  // false: the system prompt and the required sections exceed the budget
  size_t chars() const { return system.size() + user.size(); }
};

// Orders sections as given, trims by ascending priority until system + user fit in
// max_chars. The system prompt and the required sections are never trimmed; when they
// alone exceed max_chars, every other section is dropped and `fits` is false (the caller
// must not send such a prompt).
BuiltPrompt BuildPrompt(const std::string& system, const std::vector<PromptSection>& sections, size_t max_chars);

// The system prompt: the rules of the harness and the two output formats.
std::string SystemPrompt(bool diff);

}  // namespace kevolve::llm

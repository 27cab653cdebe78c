// Parsing a model's reply. Everything here works on lines: a reply is split at '\n'
// (a trailing '\r' is part of the line and ignored where whitespace is), fences and
// edit markers are whole lines, and edits replace whole lines of the parent.
//
// Nothing here throws or indexes past an end: replies are arbitrary text.
#include "kevolve/operators/llm/response.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string_view>

namespace kevolve::llm {
namespace {

constexpr std::string_view kNoCode = "no usable code in the reply";
// Edit markers: `<<<<<<< SEARCH`, `=======`, `>>>>>>> REPLACE`, with some drift in the
// number of marker characters.
constexpr size_t kMinMarker = 5;
constexpr size_t kMaxMarker = 9;
// How much of a SEARCH line an error message quotes.
constexpr size_t kQuoteChars = 60;

bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view Trim(std::string_view s) {
  return TrimLeft(TrimRight(s));
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Lines without their '\n'. A final line without '\n' is kept; text ending in '\n'
// has no empty last line.
std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

bool Contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

// ---- Fenced code blocks ----

struct Fence {
  size_t ticks = 0;  // number of backticks; 0 when the line is no fence
  std::string info;  // the info string after an opening fence, lower-cased
};

Fence ParseFence(std::string_view line) {
  std::string_view t = Trim(line);
  size_t ticks = 0;
  while (ticks < t.size() && t[ticks] == '`') ++ticks;
  if (ticks < 3) return {};
  std::string_view info = Trim(t.substr(ticks));
  if (Contains(info, "`")) return {};  // inline code such as ```x``` on one line
  return {ticks, Lower(info)};
}

// The languages whose blocks can hold a candidate; "" is a bare fence.
bool CodeLanguage(const std::string& info) {
  std::string lang = info.substr(0, info.find_first_of(" \t{"));
  static const char* const kLangs[] = {"", "cuda", "cu", "cuh", "cpp", "c++", "cxx", "c"};
  return std::any_of(std::begin(kLangs), std::end(kLangs), [&](const char* l) { return lang == l; });
}

struct CodeBlock {
  std::string text;
  bool closed = true;
};

// Every fenced block of a code language, in order. A block left open at the end of the
// reply (a truncated reply) is kept with closed = false.
std::vector<CodeBlock> FindCodeBlocks(std::string_view reply) {
  std::vector<std::string_view> lines = SplitLines(reply);
  std::vector<CodeBlock> blocks;
  size_t i = 0;
  while (i < lines.size()) {
    Fence open = ParseFence(lines[i]);
    if (open.ticks == 0) {
      ++i;
      continue;
    }
    // Lines inside a fence lose up to the fence's own indentation (a fence in a list).
    size_t indent = lines[i].size() - TrimLeft(lines[i]).size();
    CodeBlock block;
    block.closed = false;
    size_t j = i + 1;
    for (; j < lines.size(); ++j) {
      std::string_view t = Trim(lines[j]);
      if (t.size() >= open.ticks && t.find_first_not_of('`') == std::string_view::npos) {
        block.closed = true;
        break;
      }
      std::string_view line = lines[j];
      size_t strip = 0;
      while (strip < indent && strip < line.size() && line[strip] == ' ') ++strip;
      line.remove_prefix(strip);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      block.text.append(line);
      block.text.push_back('\n');
    }
    if (CodeLanguage(open.info)) blocks.push_back(std::move(block));
    i = j + 1;
  }
  return blocks;
}

// ---- Edit blocks ----

// True when `line`, trimmed, is 5 to 9 copies of `c`, then optional blanks and `word`
// (any case); with an empty `word`, nothing may follow the marker characters.
bool IsMarker(std::string_view line, char c, std::string_view word) {
  std::string_view t = Trim(line);
  size_t n = 0;
  while (n < t.size() && t[n] == c) ++n;
  if (n < kMinMarker || n > kMaxMarker) return false;
  std::string_view rest = Trim(t.substr(n));
  if (word.empty()) return rest.empty();
  return Lower(rest) == Lower(word);
}

bool IsSearchMarker(std::string_view line) {
  return IsMarker(line, '<', "SEARCH");
}
bool IsDivider(std::string_view line) {
  return IsMarker(line, '=', "");
}
bool IsReplaceMarker(std::string_view line) {
  return IsMarker(line, '>', "REPLACE");
}

// ---- Applying edits ----

std::string Quote(std::string_view search) {
  std::string_view first;
  for (std::string_view line : SplitLines(search)) {
    if (!Trim(line).empty()) {
      first = Trim(line);
      break;
    }
  }
  std::string out(first.substr(0, kQuoteChars));
  if (first.size() > kQuoteChars) out += "...";
  return "'" + out + "'";
}

// Positions where `search` occurs starting at a line start and ending at a line end.
std::vector<size_t> ExactMatches(const std::string& text, const std::string& search) {
  std::vector<size_t> at;
  for (size_t pos = text.find(search); pos != std::string::npos; pos = text.find(search, pos + 1)) {
    bool starts_line = pos == 0 || text[pos - 1] == '\n';
    size_t end = pos + search.size();
    bool ends_line = search.back() == '\n' || end == text.size() || text[end] == '\n' || text[end] == '\r';
    if (starts_line && ends_line) at.push_back(pos);
  }
  return at;
}

// A text as lines, remembering its line ending and whether it ended with one.
struct LineText {
  std::vector<std::string> lines;
  std::string eol = "\n";
  bool final_eol = false;

  explicit LineText(const std::string& text) {
    for (std::string_view l : SplitLines(text)) lines.emplace_back(l);
    final_eol = !text.empty() && text.back() == '\n';
    if (Contains(text, "\r\n")) eol = "\r\n";
  }
  std::string Join() const {
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      std::string_view l = lines[i];
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      out.append(l);
      if (i + 1 < lines.size() || final_eol) out += eol;
    }
    return out;
  }
};

std::string_view Indent(std::string_view line) {
  return line.substr(0, line.size() - TrimLeft(line).size());
}

enum class Drift { kTrailing, kIndent };

std::string_view Normalise(std::string_view line, Drift drift) {
  return drift == Drift::kTrailing ? TrimRight(line) : Trim(line);
}

// Start lines where `needle` matches `hay` line by line under `drift`.
std::vector<size_t> LineMatches(const std::vector<std::string>& hay, const std::vector<std::string_view>& needle,
                                Drift drift) {
  std::vector<size_t> at;
  if (needle.empty() || needle.size() > hay.size()) return at;
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i) {
    bool match = true;
    for (size_t k = 0; k < needle.size() && match; ++k) {
      match = Normalise(hay[i + k], drift) == Normalise(needle[k], drift);
    }
    if (match) at.push_back(i);
  }
  return at;
}

// Drops blank lines at both ends: models often add or lose them around a SEARCH.
std::vector<std::string_view> CoreLines(std::string_view text) {
  std::vector<std::string_view> lines = SplitLines(text);
  while (!lines.empty() && Trim(lines.back()).empty()) lines.pop_back();
  size_t first = 0;
  while (first < lines.size() && Trim(lines[first]).empty()) ++first;
  lines.erase(lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(first));
  return lines;
}

// The replacement lines, re-indented when the SEARCH matched with different
// indentation: a line starting with the SEARCH's indentation gets the parent's instead.
std::vector<std::string> Reindent(std::string_view replace, std::string_view search_indent,
                                  std::string_view parent_indent) {
  std::vector<std::string> out;
  for (std::string_view line : SplitLines(replace)) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (search_indent != parent_indent && !Trim(line).empty() &&
        line.substr(0, search_indent.size()) == search_indent) {
      out.push_back(std::string(parent_indent) + std::string(line.substr(search_indent.size())));
    } else {
      out.emplace_back(line);
    }
  }
  return out;
}

std::string Ambiguous(size_t n, const std::string& what, std::string_view search) {
  return "its SEARCH text " + Quote(search) + " matches " + std::to_string(n) + " places" + what +
         " (ambiguous); include more surrounding lines so it matches once";
}

// Applies one edit to `text`, or says why it does not apply.
Result<std::string> ApplyOne(const std::string& text, const EditBlock& edit) {
  if (edit.search.find_first_not_of(" \t\r\n\f\v") == std::string::npos) {
    return Status::Error(
        "its SEARCH section is empty (to add code, SEARCH for the lines "
        "next to it and repeat them in REPLACE)");
  }
  std::vector<size_t> exact = ExactMatches(text, edit.search);
  if (exact.size() > 1) return Status::Error(Ambiguous(exact.size(), "", edit.search));
  if (exact.size() == 1) {
    std::string out = text;
    out.replace(exact[0], edit.search.size(), edit.replace);
    return out;
  }

  LineText parent(text);
  std::vector<std::string_view> needle = CoreLines(edit.search);
  for (Drift drift : {Drift::kTrailing, Drift::kIndent}) {
    std::vector<size_t> at = LineMatches(parent.lines, needle, drift);
    if (at.size() > 1) {
      return Status::Error(Ambiguous(at.size(), " ignoring whitespace", edit.search));
    }
    if (at.empty()) continue;
    const size_t begin = at[0];
    std::vector<std::string> replacement;
    if (drift == Drift::kIndent) {
      replacement = Reindent(edit.replace, Indent(needle[0]), Indent(parent.lines[begin]));
    } else {
      replacement = Reindent(edit.replace, "", "");
    }
    auto first = parent.lines.begin() + static_cast<std::ptrdiff_t>(begin);
    parent.lines.erase(first, first + static_cast<std::ptrdiff_t>(needle.size()));
    parent.lines.insert(parent.lines.begin() + static_cast<std::ptrdiff_t>(begin), replacement.begin(),
                        replacement.end());
    if (parent.lines.empty()) parent.final_eol = false;
    return parent.Join();
  }
  return Status::Error("its SEARCH text " + Quote(edit.search) +
                       " matches no part of the parent (SEARCH must copy the parent's lines "
                       "exactly)");
}

// Compares two sources as the compiler would see them: line endings and trailing
// blanks do not count.
bool SameSource(const std::string& a, const std::string& b) {
  std::vector<std::string_view> la = CoreLines(a), lb = CoreLines(b);
  if (la.size() != lb.size()) return false;
  for (size_t i = 0; i < la.size(); ++i) {
    if (TrimRight(la[i]) != TrimRight(lb[i])) return false;
  }
  return true;
}

}  // namespace

Result<std::string> ExtractCodeBlock(const std::string& reply) {
  const CodeBlock* best_kernel = nullptr;
  const CodeBlock* best_any = nullptr;
  bool truncated_without_kernel = false;
  std::vector<CodeBlock> blocks = FindCodeBlocks(reply);
  for (const CodeBlock& b : blocks) {
    if (Trim(b.text).empty()) continue;
    // A block of SEARCH/REPLACE edits is not a file.
    bool has_edits = false;
    for (std::string_view line : SplitLines(b.text)) has_edits = has_edits || IsSearchMarker(line);
    if (has_edits) continue;
    bool kernel = Contains(b.text, "__global__");
    if (!b.closed && !kernel) {
      truncated_without_kernel = true;
      continue;
    }
    if ((kernel || Contains(b.text, "@kevolve")) &&
        (best_kernel == nullptr || b.text.size() > best_kernel->text.size())) {
      best_kernel = &b;
    }
    if (best_any == nullptr || b.text.size() > best_any->text.size()) best_any = &b;
  }
  if (best_kernel != nullptr) return best_kernel->text;
  if (best_any != nullptr) return best_any->text;
  if (truncated_without_kernel) {
    return Status::Error(std::string(kNoCode) +
                         ": the code block is cut off before its closing fence and holds no "
                         "__global__ kernel (was the reply truncated?)");
  }
  return Status::Error(std::string(kNoCode));
}

std::vector<EditBlock> ExtractEditBlocks(const std::string& reply) {
  enum class State { kOutside, kSearch, kReplace };
  std::vector<EditBlock> edits;
  State state = State::kOutside;
  EditBlock cur;
  for (std::string_view line : SplitLines(reply)) {
    if (IsSearchMarker(line)) {  // also restarts a block left unfinished
      cur = EditBlock{};
      state = State::kSearch;
      continue;
    }
    switch (state) {
      case State::kOutside:
        break;
      case State::kSearch:
        if (IsDivider(line)) {
          state = State::kReplace;
        } else if (IsReplaceMarker(line)) {  // no divider: not a well-formed block
          state = State::kOutside;
        } else {
          cur.search.append(line);
          cur.search.push_back('\n');
        }
        break;
      case State::kReplace:
        if (IsReplaceMarker(line)) {
          edits.push_back(std::move(cur));
          cur = EditBlock{};
          state = State::kOutside;
        } else {
          cur.replace.append(line);
          cur.replace.push_back('\n');
        }
        break;
    }
  }
  // A block still open at the end (a truncated reply) is dropped: half an edit is no edit.
  return edits;
}

Result<std::string> ApplyEdits(const std::string& parent, const std::vector<EditBlock>& edits) {
  std::string text = parent;
  for (size_t i = 0; i < edits.size(); ++i) {
    Result<std::string> next = ApplyOne(text, edits[i]);
    if (!next.ok()) {
      return Status::Error("edit " + std::to_string(i + 1) + " does not apply: " + next.error());
    }
    text = std::move(*next);
  }
  if (SameSource(text, parent)) return Status::Error("the edit changes nothing");
  return text;
}

Result<ParsedReply> ParseReply(const std::string& reply, const std::string& parent, bool prefer_diff) {
  std::vector<EditBlock> edits = ExtractEditBlocks(reply);
  Result<std::string> code = ExtractCodeBlock(reply);
  if (!edits.empty() && (prefer_diff || !code.ok())) {
    Result<std::string> child = ApplyEdits(parent, edits);
    if (!child.ok()) return child.status();
    ParsedReply parsed;
    parsed.kind = "diff";
    parsed.source = std::move(*child);
    parsed.edits_applied = static_cast<int>(edits.size());
    return parsed;
  }
  if (!code.ok()) {
    bool open_edit = false;
    for (std::string_view line : SplitLines(reply)) open_edit = open_edit || IsSearchMarker(line);
    if (open_edit) {
      return Status::Error(std::string(kNoCode) +
                           ": an edit block has no '=======' or '>>>>>>> REPLACE' line (was the "
                           "reply truncated?)");
    }
    return code.status();
  }
  if (SameSource(*code, parent)) {
    return Status::Error("the rewrite changes nothing: it repeats the parent");
  }
  ParsedReply parsed;
  parsed.kind = "rewrite";
  parsed.source = std::move(*code);
  return parsed;
}

}  // namespace kevolve::llm

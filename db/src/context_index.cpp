// The context index: walking folders, chunking files, and FTS5 search.
#include "kevolve/db/context_index.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include "schema.h"
#include "sqlite_handle.h"

namespace kevolve::db {
namespace {

namespace fs = std::filesystem;

constexpr int kBusyTimeoutMs = 10000;
// Words of a query beyond this many are ignored (a prompt may pass a whole log).
constexpr size_t kMaxQueryTerms = 32;
// bm25 column weights for (path, chunk, text): a word in the file name counts half as
// much as one in the text; chunk is UNINDEXED.
constexpr const char* kRank = "bm25(context_chunks, 0.5, 0.0, 1.0)";

std::string_view TrimView(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool IndexedExtension(const fs::path& p, bool* markdown) {
  std::string ext = p.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const char* const kText[] = {".md", ".txt", ".rst"};
  static const char* const kCode[] = {".cu", ".cuh", ".h", ".hpp", ".ptx", ".py"};
  *markdown = std::find(std::begin(kText), std::end(kText), ext) != std::end(kText);
  return *markdown || std::find(std::begin(kCode), std::end(kCode), ext) != std::end(kCode);
}

// Length of the UTF-8 sequence starting at s[i], or 0 when it is not valid UTF-8.
size_t Utf8Length(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

// Replaces every byte that is not part of valid UTF-8 with '?': snippets end up in
// JSON requests, which must be valid UTF-8.
std::string FixUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = Utf8Length(s, i);
    if (n == 0) {
      out.push_back('?');
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

bool IsHashHeading(std::string_view line) {
  size_t n = 0;
  while (n < line.size() && line[n] == '#') ++n;
  return n >= 1 && n <= 6 && n < line.size() && (line[n] == ' ' || line[n] == '\t');
}

// A reStructuredText / setext underline: "=====", "-----", "~~~~".
bool IsUnderline(std::string_view line) {
  std::string_view t = TrimView(line);
  if (t.size() < 3) return false;
  char c = t[0];
  if (c != '=' && c != '-' && c != '~' && c != '^' && c != '*') return false;
  return t.find_first_not_of(c) == std::string_view::npos;
}

// Builds chunks line by line.
class Chunker {
 public:
  void Add(std::string_view line, bool heading) {
    if (line.size() > ContextIndex::kChunkChars) {
      AddLongLine(line);
      return;
    }
    if (heading && size_ >= ContextIndex::kMinChunkChars && has_body_) {
      Flush(lines_.size());
    } else if (!lines_.empty() && size_ + line.size() + 1 > ContextIndex::kChunkChars) {
      FlushKeepingTrailingHeadings();
    }
    if (TrimView(line).empty() && lines_.empty()) return;  // no chunk starts blank
    lines_.emplace_back(line);
    headings_.push_back(heading);
    size_ += line.size() + 1;
    has_body_ = has_body_ || (!heading && !TrimView(line).empty());
    // A blank line near the target size is a good place to end a chunk.
    if (TrimView(line).empty() && size_ >= ContextIndex::kChunkChars * 3 / 4) Flush(lines_.size());
  }

  std::vector<std::string> Finish() {
    Flush(lines_.size());
    return std::move(out_);
  }

 private:
  // A line longer than a chunk is cut into chunk-sized pieces at UTF-8 boundaries.
  void AddLongLine(std::string_view line) {
    Flush(lines_.size());
    while (!line.empty()) {
      size_t cut = std::min(line.size(), ContextIndex::kChunkChars);
      while (cut < line.size() && cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) {
        --cut;
      }
      if (cut == 0) cut = std::min(line.size(), ContextIndex::kChunkChars);
      out_.emplace_back(line.substr(0, cut));
      line.remove_prefix(cut);
    }
  }

  // Ends the chunk before its trailing headings, which move on with the next one.
  void FlushKeepingTrailingHeadings() {
    size_t keep = lines_.size();
    while (keep > 0 && (headings_[keep - 1] || TrimView(lines_[keep - 1]).empty())) --keep;
    while (keep < lines_.size() && TrimView(lines_[keep]).empty()) ++keep;  // blank lines stay
    if (keep == 0) keep = lines_.size();                                    // nothing but headings: keep them together
    Flush(keep);
  }

  // Emits lines_[0, n) as a chunk and keeps the rest as the start of the next one.
  void Flush(size_t n) {
    std::string text;
    for (size_t i = 0; i < n; ++i) text += lines_[i] + "\n";
    if (!TrimView(text).empty()) {
      while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
      out_.push_back(std::move(text));
    }
    lines_.erase(lines_.begin(), lines_.begin() + static_cast<std::ptrdiff_t>(n));
    headings_.erase(headings_.begin(), headings_.begin() + static_cast<std::ptrdiff_t>(n));
    size_ = 0;
    has_body_ = false;
    for (size_t i = 0; i < lines_.size(); ++i) {
      size_ += lines_[i].size() + 1;
      has_body_ = has_body_ || (!headings_[i] && !TrimView(lines_[i]).empty());
    }
  }

  std::vector<std::string> lines_;
  std::vector<bool> headings_;
  size_t size_ = 0;
  bool has_body_ = false;
  std::vector<std::string> out_;
};

// An FTS5 query matching any of the words of `query`, each one quoted: letters, digits,
// '_' and non-ASCII bytes (the tokenizer's unicode61 words) survive, so no operator,
// quote, '*', '-', NEAR or column filter can reach the MATCH syntax. Empty when the query
// has no words.
std::string SanitiseQuery(const std::string& query) {
  std::vector<std::string> terms;
  std::string word;
  auto finish = [&] {
    bool has_letter = std::any_of(word.begin(), word.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || static_cast<unsigned char>(c) >= 0x80;
    });
    if (has_letter && terms.size() < kMaxQueryTerms && std::find(terms.begin(), terms.end(), word) == terms.end()) {
      terms.push_back(word);
    }
    word.clear();
  };
  for (char c : FixUtf8(query)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '_' || u >= 0x80) {
      word.push_back(static_cast<char>(std::tolower(u)));
    } else {
      finish();
    }
  }
  finish();
  std::string match;
  for (const std::string& t : terms) match += (match.empty() ? "\"" : " OR \"") + t + "\"";
  return match;
}

Result<std::string> ReadWholeFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return Status::Error("cannot read '" + p.string() + "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return Status::Error("cannot read '" + p.string() + "'");
  return buf.str();
}

Status InContext(const std::string& context, const Status& s) {
  return s.ok() ? s : Status::Error(context + ": " + s.message());
}

struct FileState {
  int64_t size = 0;
  int64_t mtime = 0;
};

}  // namespace

std::vector<std::string> ContextIndex::Chunk(const std::string& text, bool markdown) {
  std::vector<std::string_view> lines;
  std::string_view rest = text;
  while (!rest.empty()) {
    size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  Chunker chunker;
  for (size_t i = 0; i < lines.size(); ++i) {
    bool heading = false;
    if (markdown) {
      bool underlined = i + 1 < lines.size() && IsUnderline(lines[i + 1]) && !TrimView(lines[i]).empty();
      bool is_underline = i > 0 && IsUnderline(lines[i]) && !TrimView(lines[i - 1]).empty();
      heading = IsHashHeading(lines[i]) || underlined || is_underline;
    }
    chunker.Add(lines[i], heading);
  }
  return chunker.Finish();
}

ContextIndex::ContextIndex(Key, std::unique_ptr<Connection> conn) : conn_(std::move(conn)) {}

ContextIndex::~ContextIndex() = default;

Result<std::unique_ptr<ContextIndex>> ContextIndex::Open(const std::string& sqlite_path) {
  const std::string prefix = "cannot open context index '" + sqlite_path + "': ";
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(sqlite_path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  auto conn = std::make_unique<Connection>(raw);  // owns the handle even when opening failed
  if (rc != SQLITE_OK) {
    return Status::Error(prefix + (raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  sqlite3_extended_result_codes(raw, 1);
  Status s = Check(raw, sqlite3_busy_timeout(raw, kBusyTimeoutMs), "sqlite3_busy_timeout");
  if (s.ok()) s = conn->Exec("PRAGMA foreign_keys = ON");
  if (s.ok()) {
    Result<std::string> mode = conn->QueryText("PRAGMA journal_mode = WAL");
    if (!mode.ok())
      s = mode.status();
    else if (*mode != "wal" && *mode != "memory")
      s = Status::Error("cannot enable WAL mode (journal_mode is '" + *mode + "')");
  }
  if (s.ok()) s = conn->Exec("PRAGMA synchronous = NORMAL");
  if (!s.ok()) return Status::Error(prefix + s.message());
  Result<int> version = Migrate(*conn, sqlite_path, /*read_only=*/false);
  if (!version.ok()) return version.status();
  return std::make_unique<ContextIndex>(Key{}, std::move(conn));
}

Result<int> ContextIndex::IndexFolder(const std::string& folder) {
  const std::string context = "IndexFolder(" + folder + ")";
  std::error_code ec;
  fs::path root = fs::weakly_canonical(fs::absolute(folder, ec), ec);
  if (ec || !fs::is_directory(root, ec)) {
    return Status::Error("'" + folder + "' is not a readable folder");
  }

  // The files to consider, in a stable order.
  std::vector<fs::path> files;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  if (ec) return Status::Error(context + ": " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return Status::Error(context + ": " + ec.message());
    const fs::path& p = it->path();
    bool hidden = p.filename().string().rfind('.', 0) == 0;
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      if (hidden) it.disable_recursion_pending();
      continue;
    }
    bool markdown = false;
    if (hidden || !it->is_regular_file(type_ec) || !IndexedExtension(p, &markdown)) continue;
    files.push_back(p);
  }
  std::sort(files.begin(), files.end());

  WriteScope scope(*conn_);
  Status s = scope.Open();
  if (!s.ok()) return InContext(context, s);

  Result<Statement> lookup = conn_->Prepare("SELECT size, mtime FROM context_files WHERE path = ?");
  Result<Statement> insert_chunk = conn_->Prepare("INSERT INTO context_chunks (path, chunk, text) VALUES (?, ?, ?)");
  Result<Statement> upsert_file = conn_->Prepare(
      "INSERT INTO context_files (path, size, mtime, chunks) VALUES (?, ?, ?, ?) "
      "ON CONFLICT (path) DO UPDATE SET size = excluded.size, mtime = excluded.mtime, "
      "chunks = excluded.chunks, indexed_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')");
  for (const Result<Statement>* st : {&lookup, &insert_chunk, &upsert_file}) {
    if (!st->ok()) return InContext(context, st->status());
  }

  std::set<std::string> present;  // files now indexed, changed or not
  int added = 0;
  for (const fs::path& p : files) {
    std::error_code file_ec;
    auto size = fs::file_size(p, file_ec);
    auto mtime = fs::last_write_time(p, file_ec);
    if (file_ec || size > kMaxFileBytes) continue;
    FileState now{static_cast<int64_t>(size), static_cast<int64_t>(mtime.time_since_epoch().count())};
    const std::string path = p.string();

    lookup->Reset();
    Result<bool> row = lookup->Bind(1, path).Step();
    if (!row.ok()) return InContext(context, row.status());
    bool known = *row;
    if (known && lookup->ColumnInt64(0) == now.size && lookup->ColumnInt64(1) == now.mtime) {
      present.insert(path);
      continue;
    }
    lookup->Reset();

    Result<std::string> text = ReadWholeFile(p);
    if (!text.ok() || text->find('\0') != std::string::npos) continue;  // unreadable or binary
    bool markdown = false;
    IndexedExtension(p, &markdown);
    std::vector<std::string> chunks = Chunk(FixUtf8(*text), markdown);

    if (known) {
      s = RemoveFile(path);
      if (!s.ok()) return InContext(context, s);
    }
    for (size_t i = 0; i < chunks.size(); ++i) {
      insert_chunk->Reset();
      s = insert_chunk->Bind(1, path).Bind(2, static_cast<int64_t>(i)).Bind(3, chunks[i]).Run();
      if (!s.ok()) return InContext(context, s);
    }
    upsert_file->Reset();
    s = upsert_file->Bind(1, path)
            .Bind(2, now.size)
            .Bind(3, now.mtime)
            .Bind(4, static_cast<int64_t>(chunks.size()))
            .Run();
    if (!s.ok()) return InContext(context, s);
    present.insert(path);
    added += static_cast<int>(chunks.size());
  }

  // Files under the folder that are gone (or no longer indexable) leave the index.
  Result<Statement> known_paths = conn_->Prepare("SELECT path FROM context_files");
  if (!known_paths.ok()) return InContext(context, known_paths.status());
  std::vector<std::string> stale;
  const std::string under = root.string() + "/";
  for (;;) {
    Result<bool> row = known_paths->Step();
    if (!row.ok()) return InContext(context, row.status());
    if (!*row) break;
    std::string path = known_paths->ColumnText(0);
    if (path.rfind(under, 0) == 0 && present.count(path) == 0) stale.push_back(std::move(path));
  }
  for (const std::string& path : stale) {
    s = RemoveFile(path);
    if (!s.ok()) return InContext(context, s);
  }
  s = scope.Release();
  if (!s.ok()) return InContext(context, s);
  return added;
}

Status ContextIndex::RemoveFile(const std::string& path) {
  // Narrow by the path's words through the full-text index, then compare exactly, so
  // that the delete does not scan every chunk. The path is one quoted phrase ('"'
  // doubled), which the tokenizer splits like the stored path.
  std::string phrase;
  for (char c : path) phrase += c == '"' ? std::string("\"\"") : std::string(1, c);
  bool has_word =
      std::any_of(path.begin(), path.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
  Result<Statement> del = has_word ? conn_->Prepare(
                                         "DELETE FROM context_chunks WHERE rowid IN (SELECT rowid FROM context_chunks "
                                         "WHERE context_chunks MATCH ? AND path = ?)")
                                   : conn_->Prepare("DELETE FROM context_chunks WHERE path = ?");
  if (!del.ok()) return del.status();
  Status s = has_word ? del->Bind(1, "path : \"" + phrase + "\"").Bind(2, path).Run() : del->Bind(1, path).Run();
  if (!s.ok()) return s;
  Result<Statement> del_file = conn_->Prepare("DELETE FROM context_files WHERE path = ?");
  if (!del_file.ok()) return del_file.status();
  return del_file->Bind(1, path).Run();
}

Result<std::vector<Snippet>> ContextIndex::Search(const std::string& query, int k) {
  std::vector<Snippet> out;
  std::string match = SanitiseQuery(query);
  if (match.empty() || k <= 0) return out;
  // The same text indexed from several folders (clones of one repository, say) is one
  // snippet: the best-ranked copy is kept, and the next distinct chunks fill the k slots.
  Result<Statement> select = conn_->Prepare(std::string("SELECT path, text, ") + kRank +
                                            " AS rank FROM context_chunks WHERE context_chunks "
                                            "MATCH ? ORDER BY rank LIMIT ?");
  if (!select.ok()) return Status::Error("Search: " + select.error());
  select->Bind(1, match).Bind(2, static_cast<int64_t>(k) * 16);
  std::unordered_set<std::string> seen;
  while (static_cast<int>(out.size()) < k) {
    Result<bool> row = select->Step();
    if (!row.ok()) return Status::Error("Search: " + row.error());
    if (!*row) break;
    std::string text = select->ColumnText(1);
    if (!seen.insert(text).second) continue;
    out.push_back({select->ColumnText(0), std::move(text), -select->ColumnDouble(2)});
  }
  return out;
}

}  // namespace kevolve::db

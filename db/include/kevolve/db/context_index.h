// A full-text index of context folders (the project's context/ notes, or a user's
// --context-dir such as a CUTLASS clone), from which prompts draw snippets.
//
// Files are split into chunks of about kChunkChars at line boundaries and stored in
// the FTS5 table context_chunks of the kevolve database; context_files remembers each
// file's size and mtime so that re-indexing skips files that did not change.
//
// Thread-safety: one ContextIndex is used by one thread. It holds its own connection,
// so it may live beside a Store on the same file (SQLite WAL).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kevolve/core/status.h"

namespace kevolve::db {

class Connection;

struct Snippet {
  std::string path;  // the file, as an absolute path
  std::string text;  // one chunk of it
  double score = 0;  // higher is better (the negated bm25 rank)
};

class ContextIndex {
  struct Key {};  // only Open constructs

 public:
  // Chunks aim at this many characters; a heading starts a new chunk once the current
  // one holds at least kMinChunkChars.
  static constexpr size_t kChunkChars = 1200;
  static constexpr size_t kMinChunkChars = 300;
  // Larger files are not indexed (generated code, data).
  static constexpr size_t kMaxFileBytes = 1 << 20;

  // Opens (creating if needed) and migrates the database at `sqlite_path`, exactly as
  // OpenSqliteStore does. Errors name the path.
  static Result<std::unique_ptr<ContextIndex>> Open(const std::string& sqlite_path);

  ~ContextIndex();
  ContextIndex(const ContextIndex&) = delete;
  ContextIndex& operator=(const ContextIndex&) = delete;

  // Walks `folder` recursively (skipping hidden files and folders, files over
  // kMaxFileBytes, binary files, and extensions other than .md .txt .rst .cu .cuh .h
  // .hpp .ptx .py). Files whose size and mtime are unchanged are skipped; changed ones
  // have their chunks replaced; files under `folder` that have disappeared are removed
  // from the index. Returns the number of chunks added. All of it lands or none.
  Result<int> IndexFolder(const std::string& folder);

  // The k chunks that best match any word of `query` (bm25), best first. The query is
  // free text: only its words are used, so no input can break the MATCH syntax. A
  // query without words gives no snippets.
  Result<std::vector<Snippet>> Search(const std::string& query, int k);

  // Splits a file's text into chunks. Headings (Markdown '#' lines, in .md, .txt and
  // .rst files) stay with the text below them. Exposed for tests.
  static std::vector<std::string> Chunk(const std::string& text, bool markdown);

  ContextIndex(Key, std::unique_ptr<Connection> conn);

 private:
  // Deletes a file's chunks and its context_files row.
  Status RemoveFile(const std::string& path);

  std::unique_ptr<Connection> conn_;
};

}  // namespace kevolve::db

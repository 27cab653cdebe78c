// Tests for the context index (db/src/context_index.cpp), the llm_calls table, and the
// migration of a version 1 database to version 2.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kevolve/db/context_index.h"
#include "kevolve/db/store.h"
#include "test_util.h"

namespace kevolve::db {
namespace {

namespace fs = std::filesystem;
using kevolve::testing::MakeTempDir;
using kevolve::testing::WriteFile;

// A temp folder removed with everything in it.
class Scratch {
 public:
  explicit Scratch(const std::string& tag) : dir_(MakeTempDir(tag)) {}
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

std::unique_ptr<ContextIndex> OpenIndex(const std::string& path) {
  Result<std::unique_ptr<ContextIndex>> index = ContextIndex::Open(path);
  INFO((index.ok() ? std::string("ok") : index.error()));
  REQUIRE(index.ok());
  return std::move(*index);
}

std::unique_ptr<Store> OpenStore(const std::string& path) {
  Result<std::unique_ptr<Store>> store = OpenSqliteStore(path);
  INFO((store.ok() ? std::string("ok") : store.error()));
  REQUIRE(store.ok());
  return std::move(*store);
}

int Index(ContextIndex& index, const fs::path& folder) {
  Result<int> added = index.IndexFolder(folder.string());
  INFO((added.ok() ? std::string("ok") : added.error()));
  REQUIRE(added.ok());
  return *added;
}

std::vector<Snippet> Find(ContextIndex& index, const std::string& query, int k = 5) {
  Result<std::vector<Snippet>> found = index.Search(query, k);
  INFO(query);
  INFO((found.ok() ? std::string("ok") : found.error()));
  REQUIRE(found.ok());
  return std::move(*found);
}

void Exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string why = err != nullptr ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  INFO(sql << ": " << why);
  REQUIRE(rc == SQLITE_OK);
}

std::string Query(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
  std::string out;
  if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
    out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

// Makes a file look modified: new content and a later mtime.
void Rewrite(const fs::path& p, const std::string& text) {
  auto before = fs::last_write_time(p);
  WriteFile(p, text);
  fs::last_write_time(p, before + std::chrono::seconds(5));
}

void MakeCorpus(const fs::path& dir) {
  WriteFile(dir / "hopper.md",
            "# Hopper\n\nThread block clusters group blocks that share distributed shared "
            "memory.\n\n## TMA\n\nThe tensor memory accelerator copies tiles asynchronously.\n");
  WriteFile(dir / "softmax" / "notes.txt",
            "Online softmax keeps a running maximum and rescales the running sum of "
            "exponentials.\n");
  WriteFile(dir / "kernels" / "reduce.cu",
            "// warp shuffle reduction\n__device__ float warp_sum(float v) {\n"
            "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
            "  return v;\n}\n");
  WriteFile(dir / "ignored.bin", "coalescing coalescing coalescing");
  WriteFile(dir / ".hidden" / "secret.md", "coalescing is hidden here");
  WriteFile(dir / ".dotfile.md", "coalescing in a dot file");
  WriteFile(dir / "big.md", std::string(ContextIndex::kMaxFileBytes + 1, 'a') + " coalescing");
  WriteFile(dir / "binary.h", std::string("coalescing\0\x01\x02", 14));
}

}  // namespace

TEST_CASE("chunks keep headings with their text and respect the size", "[context]") {
  std::string doc;
  for (int s = 0; s < 6; ++s) {
    doc += "## Section " + std::to_string(s) + "\n\n";
    for (int l = 0; l < 12; ++l)
      doc += "Sentence " + std::to_string(l) + " of section " + std::to_string(s) + " with some words.\n";
    doc += "\n";
  }
  std::vector<std::string> chunks = ContextIndex::Chunk(doc, true);
  REQUIRE(chunks.size() >= 3);
  for (const std::string& c : chunks) {
    INFO(c);
    CHECK(c.size() <= ContextIndex::kChunkChars);
    CHECK(c.rfind("## Section", 0) == 0);  // every chunk starts at a heading
    CHECK(c.back() != '\n');
  }
  // A line longer than a chunk is split; blank input gives no chunks.
  CHECK(ContextIndex::Chunk(std::string(3000, 'z'), false).size() == 3);
  CHECK(ContextIndex::Chunk("\n\n  \n", true).empty());
  CHECK(ContextIndex::Chunk("", false).empty());
}

TEST_CASE("the context index finds the right file and skips unchanged files", "[context]") {
  Scratch tmp("context");
  fs::path corpus = tmp.dir() / "corpus";
  MakeCorpus(corpus);
  std::string db = (tmp.dir() / "kevolve.db").string();
  auto index = OpenIndex(db);

  int added = Index(*index, corpus);
  CHECK(added == 3);  // one chunk each: hopper.md (small sections stay together), notes, reduce
  CHECK(Query(db, "SELECT count(*) FROM context_files") == "3");

  std::vector<Snippet> hits = Find(*index, "distributed shared memory clusters");
  REQUIRE_FALSE(hits.empty());
  CHECK(fs::path(hits[0].path).filename() == "hopper.md");
  CHECK(hits[0].text.find("Thread block clusters") != std::string::npos);
  CHECK(hits[0].score > 0);

  hits = Find(*index, "how do I rescale the running sums (online-softmax)?");
  REQUIRE_FALSE(hits.empty());
  CHECK(fs::path(hits[0].path).filename() == "notes.txt");

  hits = Find(*index, "__shfl_xor_sync warp_sum");
  REQUIRE_FALSE(hits.empty());
  CHECK(fs::path(hits[0].path).filename() == "reduce.cu");

  // Hidden, oversized, binary and unlisted files are not indexed.
  CHECK(Find(*index, "coalescing").empty());
  CHECK(Find(*index, "secret").empty());

  SECTION("re-indexing skips unchanged files and picks up a changed one") {
    CHECK(Index(*index, corpus) == 0);
    Rewrite(corpus / "softmax" / "notes.txt", "Softmax with a single pass over coalesced rows.\n");
    CHECK(Index(*index, corpus) == 1);
    CHECK(Find(*index, "rescales").empty());
    hits = Find(*index, "single pass");
    REQUIRE(hits.size() == 1);
    CHECK(fs::path(hits[0].path).filename() == "notes.txt");
    CHECK(Query(db, "SELECT count(*) FROM context_chunks WHERE path LIKE '%notes.txt'") == "1");
    CHECK(Query(db, "SELECT count(*) FROM context_files") == "3");
  }
  SECTION("deleted files leave the index") {
    fs::remove(corpus / "kernels" / "reduce.cu");
    CHECK(Index(*index, corpus) == 0);
    CHECK(Find(*index, "warp_sum").empty());
    CHECK(Query(db, "SELECT count(*) FROM context_files") == "2");
  }
  SECTION("a second connection sees the same index") {
    auto other = OpenIndex(db);
    CHECK(Index(*other, corpus) == 0);
    CHECK_FALSE(Find(*other, "tensor memory accelerator").empty());
  }
}

TEST_CASE("search queries cannot break the MATCH syntax", "[context]") {
  Scratch tmp("context-syntax");
  fs::path corpus = tmp.dir() / "corpus";
  MakeCorpus(corpus);
  auto index = OpenIndex((tmp.dir() / "kevolve.db").string());
  Index(*index, corpus);
  for (const std::string& q : std::vector<std::string>{
           "\"unbalanced quote", "NEAR(clusters memory, 2)", "clusters*", "-clusters", "a OR", "AND", "NOT clusters",
           "path:hopper", "{path}: x", "^clusters", "(((", "\"\"", "col : \"x\" +", "üñíçødé tensor",
           "'; DROP TABLE context_chunks; --", std::string("\xff\xfe tile", 7)}) {
    Result<std::vector<Snippet>> found = index->Search(q, 3);
    INFO(q);
    INFO((found.ok() ? std::string("ok") : found.error()));
    CHECK(found.ok());
  }
  CHECK_FALSE(Find(*index, "NEAR(clusters memory, 2)").empty());
  CHECK(Find(*index, "!!! ???").empty());
  CHECK(Find(*index, "clusters", 0).empty());
  CHECK(Find(*index, "tensor memory accelerator", 1).size() == 1);
}

TEST_CASE("the same text indexed from several folders is one snippet", "[context]") {
  Scratch tmp("context-dups");
  auto index = OpenIndex((tmp.dir() / "kevolve.db").string());
  // Three clones of one corpus, and a second file that also matches the query.
  for (const char* clone : {"a", "b", "c"}) {
    MakeCorpus(tmp.dir() / clone);
    Index(*index, tmp.dir() / clone);
  }
  // A weaker match than the three copies: one query word in a longer text.
  std::string more = "# Notes\n\nThe clusters of this folder are something else entirely.";
  for (int i = 0; i < 20; ++i) more += " Padding words about kernels, rows, tiles and timing.";
  WriteFile(tmp.dir() / "d" / "more.md", more + "\n");
  Index(*index, tmp.dir() / "d");
  std::vector<Snippet> hits = Find(*index, "distributed shared memory clusters", 2);
  // Two slots: the copies rank first, so without reading past them the second slot would
  // hold a copy (or stay empty after removing copies).
  REQUIRE(hits.size() == 2);
  CHECK(hits[0].text != hits[1].text);
  CHECK(fs::path(hits[0].path).filename() == "hopper.md");
  CHECK(fs::path(hits[1].path).filename() == "more.md");
}

TEST_CASE("indexing a missing folder is an error", "[context]") {
  Scratch tmp("context-missing");
  auto index = OpenIndex((tmp.dir() / "kevolve.db").string());
  Result<int> added = index->IndexFolder((tmp.dir() / "nope").string());
  REQUIRE_FALSE(added.ok());
  CHECK_THAT(added.error(), Catch::Contains("nope"));
}

TEST_CASE("the project's own context notes are indexed and found", "[context]") {
  Scratch tmp("context-notes");
  auto index = OpenIndex((tmp.dir() / "kevolve.db").string());
  CHECK(Index(*index, kevolve::testing::SourceRoot() / "context") >= 10);
  struct Case {
    std::string query, file;
  };
  for (const Case& c : {Case{"online softmax running maximum rescale", "cuda_hopper_guidance.md"},
                        Case{"poison unwritten guard zone", "harness_rules.md"},
                        Case{"scratch zeroed directive", "candidate_format.md"}}) {
    std::vector<Snippet> hits = Find(*index, c.query, 3);
    INFO(c.query);
    REQUIRE_FALSE(hits.empty());
    CHECK(fs::path(hits[0].path).filename() == c.file);
    for (const Snippet& h : hits) CHECK(h.text.size() <= ContextIndex::kChunkChars);
  }
}

TEST_CASE("LLM calls round-trip through the store", "[db]") {
  Scratch tmp("llm-calls");
  std::string path = (tmp.dir() / "kevolve.db").string();
  auto store = OpenStore(path);
  Result<int64_t> run = store->CreateRun(RunRecord{});
  REQUIRE(run.ok());

  LlmCallRecord call;
  call.run_id = *run;
  call.provider = "local";
  call.model = "qwen";
  call.op_name = "llm_diff";
  call.prompt = "system + user";
  call.response = "<<<<<<< SEARCH ...";
  call.tokens_in = 1200;
  call.tokens_out = 300;
  call.latency_s = 2.5;
  call.cost_usd = 0.0125;
  call.outcome = "ok";
  Result<int64_t> id = store->RecordLlmCall(call);
  REQUIRE(id.ok());

  LlmCallRecord failed;
  failed.provider = "local";
  failed.model = "qwen";
  failed.op_name = "llm_rewrite";
  failed.outcome = "timeout";
  failed.error = "no reply within 120 s";
  failed.latency_s = std::nan("");
  REQUIRE(store->RecordLlmCall(failed).ok());
  failed.run_id = *run;
  failed.parent_id = 12345;  // no such candidate
  CHECK_FALSE(store->RecordLlmCall(failed).ok());
  failed.parent_id.reset();
  failed.outcome = "";
  CHECK_FALSE(store->RecordLlmCall(failed).ok());

  Result<std::vector<LlmCallRecord>> all = store->ListLlmCalls(std::nullopt);
  REQUIRE(all.ok());
  CHECK(all->size() == 2);
  Result<std::vector<LlmCallRecord>> of_run = store->ListLlmCalls(*run);
  REQUIRE(of_run.ok());
  REQUIRE(of_run->size() == 1);
  const LlmCallRecord& got = of_run->front();
  CHECK(got.id == *id);
  CHECK(got.run_id == *run);
  CHECK_FALSE(got.candidate_id.has_value());
  CHECK(got.provider == "local");
  CHECK(got.model == "qwen");
  CHECK(got.op_name == "llm_diff");
  CHECK(got.prompt == call.prompt);
  CHECK(got.response == call.response);
  CHECK(got.tokens_in == 1200);
  CHECK(got.tokens_out == 300);
  CHECK(got.latency_s == 2.5);
  CHECK(got.cost_usd == 0.0125);
  CHECK(got.outcome == "ok");
  CHECK(got.error.empty());
  CHECK_FALSE(got.created_at.empty());
  CHECK(std::isnan((*all)[1].latency_s));
  CHECK_FALSE((*all)[1].run_id.has_value());

  CHECK(Query(path,
              "SELECT calls || ',' || ok_calls || ',' || tokens_in || ',' || tokens_out "
              "FROM llm_spend WHERE run_id = " +
                  std::to_string(*run)) == "1,1,1200,300");
  CHECK(Query(path, "SELECT count(*) FROM llm_spend") == "2");
}

TEST_CASE("a version 1 database migrates to the latest version keeping its rows", "[db]") {
  Scratch tmp("migrate-v1");
  std::string path = (tmp.dir() / "kevolve.db").string();
  int64_t run_id = 0;
  {
    auto store = OpenStore(path);
    REQUIRE(store->SchemaVersion() >= 2);
    RunRecord run;
    run.op = "softmax";
    run.dtype = "f32";
    Result<int64_t> id = store->CreateRun(run);
    REQUIRE(id.ok());
    run_id = *id;
  }
  // Back to version 1: what versions 2 to 4 added is removed.
  Exec(path,
       "DROP VIEW llm_spend; DROP TABLE llm_calls; DROP TABLE context_chunks; "
       "DROP TABLE context_files; DROP TABLE run_members; DROP TABLE timing_protocols; "
       "UPDATE schema_version SET version = 1;");
  CHECK(Query(path, "SELECT count(*) FROM sqlite_master WHERE name = 'llm_calls'") == "0");

  SECTION("through the store") {
    auto store = OpenStore(path);
    CHECK(store->SchemaVersion() >= 2);
    Result<RunRecord> run = store->GetRun(run_id);
    REQUIRE(run.ok());
    CHECK(run->op == "softmax");
    LlmCallRecord call;
    call.provider = "p";
    call.outcome = "ok";
    call.run_id = run_id;
    CHECK(store->RecordLlmCall(call).ok());
  }
  SECTION("through the context index") {
    auto index = OpenIndex(path);
    CHECK(Query(path, "SELECT count(*) FROM runs") == "1");
    CHECK(Query(path, "SELECT count(*) FROM sqlite_master WHERE name = 'context_files'") == "1");
  }
  CHECK(Query(path, "SELECT count(*) FROM schema_version") == "1");
  CHECK(Query(path, "SELECT version FROM schema_version") != "1");
}

}  // namespace kevolve::db

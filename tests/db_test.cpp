// Tests for the SQLite store (db/): schema migration, each Store method, atomicity and
// concurrent reading through WAL.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kevolve/db/store.h"

namespace kevolve::db {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    dir_ = fs::temp_directory_path() /
           ("kevolve_db_test_" + std::to_string(stamp) + "_" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string File(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

std::unique_ptr<Store> Open(const std::string& path, StoreOptions options = {}) {
  Result<std::unique_ptr<Store>> store = OpenSqliteStore(path, options);
  INFO((store.ok() ? std::string("ok") : store.error()));
  REQUIRE(store.ok());
  return std::move(*store);
}

// A direct connection, for checking what the store wrote and for tampering with it.
class RawDb {
 public:
  explicit RawDb(const std::string& path) { REQUIRE(sqlite3_open(path.c_str(), &db_) == SQLITE_OK); }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  // The first column of the first row as text ("" when there is no row).
  std::string Query(const std::string& sql, const std::string& arg = "") {
    sqlite3_stmt* stmt = nullptr;
    INFO(sql);
    REQUIRE(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
    if (!arg.empty()) sqlite3_bind_text(stmt, 1, arg.c_str(), -1, SQLITE_TRANSIENT);
    std::string out;
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    REQUIRE((rc == SQLITE_ROW || rc == SQLITE_DONE));
    return out;
  }
  void Exec(const std::string& sql) {
    INFO(sql);
    REQUIRE(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  }

 private:
  sqlite3* db_ = nullptr;
};

int64_t AddSource(Store& store, const std::string& hash) {
  SourceRecord source;
  source.hash = hash;
  source.name = hash + ".cu";
  source.text = "__global__ void k() {}";
  source.origin = "seed";
  Result<int64_t> id = store.PutSource(source);
  INFO((id.ok() ? std::string("ok") : id.error()));
  REQUIRE(id.ok());
  return *id;
}

CandidateRecord MakeCandidate(const std::string& hash, int64_t source_id) {
  CandidateRecord c;
  c.hash = hash;
  c.source_id = source_id;
  c.params = {{"BLOCK", 256}};
  c.op = "softmax";
  c.dtype = "f32";
  c.arch = "sm_90";
  c.op_name = "seed";
  c.features = {{"block", 256}};
  return c;
}

int64_t AddCandidate(Store& store, const CandidateRecord& c) {
  Result<std::pair<int64_t, bool>> put = store.PutCandidate(c);
  INFO((put.ok() ? std::string("ok") : put.error()));
  REQUIRE(put.ok());
  REQUIRE(put->second);
  return put->first;
}

RungRecord MakeRung(const std::string& name, bool ok) {
  RungRecord r;
  r.name = name;
  r.ok = ok;
  r.metrics = {{"regs", 32}};
  r.log = ok ? "" : "error: boom";
  r.duration_ms = 12.5;
  return r;
}

}  // namespace

TEST_CASE("a new file is migrated to the latest schema", "[db]") {
  TempDir tmp;
  std::string path = tmp.File("kevolve.db");
  SECTION("missing file") {}
  SECTION("zero-byte file") { std::ofstream(path).close(); }

  int version = 0;
  {
    auto store = Open(path);
    version = store->SchemaVersion();
    REQUIRE(version >= 1);
  }
  RawDb raw(path);
  CHECK(raw.Query("SELECT version FROM schema_version") == std::to_string(version));
  CHECK(raw.Query("SELECT count(*) FROM schema_version") == "1");
  CHECK(raw.Query("PRAGMA journal_mode") == "wal");
  for (const char* table : {"runs", "sources", "candidates", "candidate_parents", "rungs",
                            "timings", "devices", "artifacts"}) {
    INFO(table);
    CHECK(raw.Query("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
                    table) == "1");
  }
  for (const char* view : {"leaderboard", "lineage", "operator_stats", "rung_failures"}) {
    INFO(view);
    CHECK(raw.Query("SELECT count(*) FROM sqlite_master WHERE type = 'view' AND name = ?",
                    view) == "1");
  }
  CHECK(raw.Query("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'timing_protocols'") == "1");
}

TEST_CASE("re-opening an up-to-date database changes nothing", "[db]") {
  TempDir tmp;
  std::string path = tmp.File("kevolve.db");
  int version = 0;
  {
    auto store = Open(path);
    version = store->SchemaVersion();
    REQUIRE(store->CreateRun(RunRecord{}).ok());
  }
  std::string schema_before = RawDb(path).Query("SELECT group_concat(sql, ';') FROM sqlite_master");
  for (int i = 0; i < 2; ++i) {
    auto store = Open(path);
    CHECK(store->SchemaVersion() == version);
    Result<std::vector<RunRecord>> runs = store->ListRuns();
    REQUIRE(runs.ok());
    CHECK(runs->size() == 1);
  }
  auto reader = Open(path, StoreOptions{.read_only = true});
  CHECK(reader->SchemaVersion() == version);
  RawDb raw(path);
  CHECK(raw.Query("SELECT group_concat(sql, ';') FROM sqlite_master") == schema_before);
  CHECK(raw.Query("SELECT count(*) FROM schema_version") == "1");
}

TEST_CASE("a database newer than the binary is refused", "[db]") {
  TempDir tmp;
  std::string path = tmp.File("kevolve.db");
  int version = Open(path)->SchemaVersion();
  RawDb(path).Exec("UPDATE schema_version SET version = " + std::to_string(version + 1));

  Result<std::unique_ptr<Store>> store = OpenSqliteStore(path);
  REQUIRE_FALSE(store.ok());
  CHECK_THAT(store.error(), Catch::Contains(path) && Catch::Contains("newer") &&
                                Catch::Contains(std::to_string(version + 1)));
}

TEST_CASE("open errors name the path", "[db]") {
  TempDir tmp;
  std::string missing = tmp.File("missing.db");
  Result<std::unique_ptr<Store>> ro = OpenSqliteStore(missing, StoreOptions{.read_only = true});
  REQUIRE_FALSE(ro.ok());
  CHECK_THAT(ro.error(), Catch::StartsWith("cannot open database '" + missing + "': "));

  std::string junk = tmp.File("junk.db");
  std::ofstream(junk) << "this is not a database, just some text that is long enough";
  Result<std::unique_ptr<Store>> bad = OpenSqliteStore(junk);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error(), Catch::Contains(junk) && Catch::Contains("not a database"));
  CHECK(bad.error().find('\n') == std::string::npos);
}

TEST_CASE("runs round trip", "[db]") {
  TempDir tmp;
  auto store = Open(tmp.File("kevolve.db"));
  RunRecord run;
  run.op = "softmax";
  run.dtype = "f16";
  run.seed = 0xFEDCBA9876543210ull;  // above INT64_MAX
  run.config = {{"population", 32}, {"islands", {1, 2}}};
  run.devices = {"GPU-1234"};
  Result<int64_t> id = store->CreateRun(run);
  REQUIRE(id.ok());

  Result<RunRecord> got = store->GetRun(*id);
  REQUIRE(got.ok());
  CHECK(got->id == *id);
  CHECK(got->op == "softmax");
  CHECK(got->dtype == "f16");
  CHECK(got->seed == run.seed);
  CHECK(got->status == "created");
  CHECK(got->config == run.config);
  CHECK(got->devices == run.devices);
  CHECK(got->created_at.size() == 24);  // 2024-01-02T03:04:05.678Z
  CHECK(got->created_at[10] == 'T');
  CHECK(got->created_at.back() == 'Z');

  RunRecord changed = *got;
  changed.status = "finished";
  changed.generations_done = 7;
  changed.cost_usd = 1.25;
  REQUIRE(store->UpdateRun(changed).ok());
  got = store->GetRun(*id);
  REQUIRE(got.ok());
  CHECK(got->status == "finished");
  CHECK(got->generations_done == 7);
  CHECK(got->cost_usd == 1.25);
  CHECK(got->updated_at >= got->created_at);

  REQUIRE(store->CreateRun(RunRecord{}).ok());
  Result<std::vector<RunRecord>> runs = store->ListRuns();
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 2);
  CHECK(runs->at(0).id == *id);

  Result<RunRecord> missing = store->GetRun(4242);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error(), Catch::Contains("4242"));
  changed.id = 4243;
  Status update_missing = store->UpdateRun(changed);
  REQUIRE_FALSE(update_missing.ok());
  CHECK_THAT(update_missing.message(), Catch::Contains("4243"));
}

TEST_CASE("sources are deduplicated by hash", "[db]") {
  TempDir tmp;
  auto store = Open(tmp.File("kevolve.db"));
  int64_t a = AddSource(*store, "hash-a");
  CHECK(AddSource(*store, "hash-a") == a);
  int64_t b = AddSource(*store, "hash-b");
  CHECK(b != a);

  Result<SourceRecord> got = store->GetSource(a);
  REQUIRE(got.ok());
  CHECK(got->hash == "hash-a");
  CHECK(got->name == "hash-a.cu");
  CHECK(got->text == "__global__ void k() {}");
  CHECK(got->origin == "seed");
  CHECK_FALSE(got->created_at.empty());

  Result<SourceRecord> missing = store->GetSource(999);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error(), Catch::Contains("999"));
}

TEST_CASE("candidates are deduplicated by hash and keep their parents", "[db]") {
  TempDir tmp;
  auto store = Open(tmp.File("kevolve.db"));
  int64_t source = AddSource(*store, "src");
  int64_t run = *store->CreateRun(RunRecord{});

  CandidateRecord seed = MakeCandidate("cand-a", source);
  seed.run_id = run;
  int64_t a = AddCandidate(*store, seed);
  CandidateRecord child = MakeCandidate("cand-b", source);
  child.parents = {a};
  child.op_name = "param_tweak";
  child.generation = 1;
  child.island = 2;
  int64_t b = AddCandidate(*store, child);
  CandidateRecord cross = MakeCandidate("cand-c", source);
  cross.parents = {b, a};
  cross.op_name = "crossover";
  int64_t c = AddCandidate(*store, cross);

  CandidateRecord again = MakeCandidate("cand-c", source);
  again.op_name = "something_else";
  Result<std::pair<int64_t, bool>> dup = store->PutCandidate(again);
  REQUIRE(dup.ok());
  CHECK(dup->first == c);
  CHECK_FALSE(dup->second);

  Result<CandidateRecord> got = store->GetCandidate(c);
  REQUIRE(got.ok());
  CHECK(got->op_name == "crossover");  // the existing row is unchanged
  CHECK(got->parents == std::vector<int64_t>{b, a});
  CHECK_FALSE(got->run_id.has_value());
  CHECK_FALSE(got->fitness.has_value());
  CHECK(got->status == "pending");

  got = store->GetCandidate(b);
  REQUIRE(got.ok());
  CHECK(got->hash == "cand-b");
  CHECK(got->source_id == source);
  CHECK(got->params == Json{{"BLOCK", 256}});
  CHECK(got->op == "softmax");
  CHECK(got->dtype == "f32");
  CHECK(got->arch == "sm_90");
  CHECK(got->generation == 1);
  CHECK(got->island == 2);
  CHECK(got->parents == std::vector<int64_t>{a});
  CHECK(got->features == Json{{"block", 256}});

  Result<std::optional<CandidateRecord>> found = store->FindCandidate("cand-a");
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  CHECK((*found)->id == a);
  CHECK((*found)->run_id == run);
  CHECK((*found)->parents.empty());
  found = store->FindCandidate("nope");
  REQUIRE(found.ok());
  CHECK_FALSE(found->has_value());

  Result<CandidateRecord> missing = store->GetCandidate(777);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error(), Catch::Contains("777"));

  // A missing parent fails the whole put: the candidate row does not land either.
  CandidateRecord orphan = MakeCandidate("cand-orphan", source);
  orphan.parents = {a, 9999};
  Result<std::pair<int64_t, bool>> bad = store->PutCandidate(orphan);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error(), Catch::Contains("FOREIGN KEY"));
  found = store->FindCandidate("cand-orphan");
  REQUIRE(found.ok());
  CHECK_FALSE(found->has_value());

  CHECK_FALSE(store->PutCandidate(MakeCandidate("cand-no-source", source + 100)).ok());
}

TEST_CASE("RecordEvaluation stores rungs, timings, status, fitness and features", "[db]") {
  TempDir tmp;
  auto store = Open(tmp.File("kevolve.db"));
  int64_t id = AddCandidate(*store, MakeCandidate("cand", AddSource(*store, "src")));

  EvaluationRecord e;
  e.candidate_id = id;
  e.status = "ok";
  e.fitness = 0.75;
  e.features = {{"regs", 40}};
  e.rungs = {MakeRung("compile", true), MakeRung("timing", true)};
  e.rungs[1].device_uuid = "GPU-1";
  TimingRecord t;
  t.device_uuid = "GPU-1";
  t.shape = "4096x1024";
  t.median_us = 10.5;
  t.p10_us = 10.0;
  t.p90_us = 11.0;
  t.n = 3;
  t.samples_us = {10.0, 10.5, 11.0};
  t.protocol = {{"warmup", 5}, {"flush_bytes", 1 << 20}};
  t.roofline_us = 7.0;
  t.fraction = 7.0 / 10.5;
  e.timings = {t};
  Status s = store->RecordEvaluation(e);
  INFO(s.ToString());
  REQUIRE(s.ok());

  Result<CandidateRecord> c = store->GetCandidate(id);
  REQUIRE(c.ok());
  CHECK(c->status == "ok");
  CHECK(c->fitness == 0.75);
  CHECK(c->features == Json{{"block", 256}, {"regs", 40}});

  Result<std::vector<RungRecord>> rungs = store->GetRungs(id);
  REQUIRE(rungs.ok());
  REQUIRE(rungs->size() == 2);
  CHECK(rungs->at(0).name == "compile");
  CHECK(rungs->at(0).candidate_id == id);
  CHECK(rungs->at(0).ok);
  CHECK(rungs->at(0).metrics == Json{{"regs", 32}});
  CHECK(rungs->at(0).duration_ms == 12.5);
  CHECK(rungs->at(1).device_uuid == "GPU-1");

  Result<std::vector<TimingRecord>> timings = store->GetTimings(id);
  REQUIRE(timings.ok());
  REQUIRE(timings->size() == 1);
  const TimingRecord& got = timings->front();
  CHECK(got.candidate_id == id);
  CHECK(got.shape == "4096x1024");
  CHECK(got.median_us == 10.5);
  CHECK(got.p10_us == 10.0);
  CHECK(got.p90_us == 11.0);
  CHECK(got.n == 3);
  CHECK(got.samples_us == t.samples_us);
  CHECK(got.protocol == t.protocol);
  CHECK(got.fraction == Approx(7.0 / 10.5));

  RungRecord extra = MakeRung("profile", false);
  extra.candidate_id = id;
  REQUIRE(store->AddRung(extra).ok());
  rungs = store->GetRungs(id);
  REQUIRE(rungs.ok());
  REQUIRE(rungs->size() == 3);
  CHECK_FALSE(rungs->at(2).ok);
  CHECK(rungs->at(2).log == "error: boom");
}

namespace {

// Records one ok evaluation of a new candidate of `op` (dtype f32) with two timings of
// protocol `p`.
Status RecordTimed(Store& store, const std::string& hash, const std::string& op, const Json& p) {
  CandidateRecord c = MakeCandidate(hash, AddSource(store, "src"));
  c.op = op;
  EvaluationRecord e;
  e.candidate_id = AddCandidate(store, c);
  e.status = "ok";
  e.fitness = 0.5;
  TimingRecord t;
  t.shape = "4096x1024";
  t.median_us = 10;
  t.protocol = p;
  e.timings = {t, t};
  return store.RecordEvaluation(e);
}

}  // namespace

TEST_CASE("TimingProtocols names the timer and L2 flush of an op's timings once", "[db]") {
  TempDir tmp;
  auto store = Open(tmp.File("kevolve.db"));
  auto none = store->TimingProtocols("softmax", "f32");
  REQUIRE(none.ok());
  CHECK(none->empty());
  using P = std::pair<std::string, std::string>;
  // Each op below holds one protocol, written the ways kevolve has written it.
  REQUIRE(RecordTimed(*store, "a1", "a", {{"timer", "events"}, {"flush_l2", true}}).ok());  // before the flush was named
  REQUIRE(RecordTimed(*store, "a2", "a", {{"timer", "events"}, {"flush_l2", true}, {"flush", "memset"}}).ok());
  REQUIRE(RecordTimed(*store, "b1", "b", {{"timer", "cupti"}, {"flush_l2", true}, {"flush", "read"}}).ok());
  REQUIRE(RecordTimed(*store, "c1", "c", {{"timer", "events"}, {"flush_l2", false}}).ok());  // did not flush
  REQUIRE(RecordTimed(*store, "c2", "c", {{"timer", "events"}, {"flush_l2", false}, {"flush", "none"}}).ok());
  REQUIRE(RecordTimed(*store, "d1", "d", {{"flush_l2", true}}).ok());  // no timer: events
  const std::pair<std::string, P> want[] = {
      {"a", {"events", "memset"}}, {"b", {"cupti", "read"}}, {"c", {"events", "none"}}, {"d", {"events", "memset"}}};
  for (const auto& [op, p] : want) {
    INFO(op);
    auto got = store->TimingProtocols(op, "f32");
    REQUIRE(got.ok());
    CHECK(*got == std::vector<P>{p});
  }
  // Another dtype of an op has timings of its own (none here).
  auto other = store->TimingProtocols("a", "bf16");
  REQUIRE(other.ok());
  CHECK(other->empty());
}

TEST_CASE("RecordEvaluation refuses timings of a second protocol for an op and dtype, and records nothing of them", "[db]") {
  TempDir tmp;
  auto store = Open(tmp.File("kevolve.db"));
  const Json memset = {{"timer", "events"}, {"flush_l2", true}, {"flush", "memset"}};
  REQUIRE(RecordTimed(*store, "x1", "softmax", memset).ok());
  const Status st = RecordTimed(*store, "x2", "softmax", {{"timer", "events"}, {"flush_l2", true}, {"flush", "read"}});
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("softmax f32 timings measured more than one way") != std::string::npos);
  CHECK(st.message().find("--timer events --flush memset; --timer events --flush read") != std::string::npos);
  // The refused evaluation left nothing: the candidate is as it was stored, with no timings.
  auto c = store->FindCandidate("x2");
  REQUIRE(c.ok());
  REQUIRE(*c);
  CHECK((*c)->status != "ok");
  auto t = store->GetTimings((*c)->id);
  REQUIRE(t.ok());
  CHECK(t->empty());
  auto held = store->TimingProtocols("softmax", "f32");
  REQUIRE(held.ok());
  CHECK(held->size() == 1);
  // The same protocol, and another op with another protocol, are recorded.
  CHECK(RecordTimed(*store, "x3", "softmax", memset).ok());
  CHECK(RecordTimed(*store, "y1", "rmsnorm", {{"timer", "cupti"}, {"flush_l2", false}, {"flush", "none"}}).ok());
}

TEST_CASE("migrating to version 4 fills timing_protocols from the timings already stored", "[db]") {
  TempDir tmp;
  const std::string path = tmp.File("kevolve.db");
  {
    auto store = Open(path);
    REQUIRE(RecordTimed(*store, "a1", "a", {{"timer", "events"}, {"flush_l2", true}}).ok());
    REQUIRE(RecordTimed(*store, "b1", "b", {{"timer", "cupti"}, {"flush_l2", true}, {"flush", "read"}}).ok());
  }
  {
    RawDb raw(path);
    raw.Exec("DROP TABLE timing_protocols; UPDATE schema_version SET version = 3;");
  }
  auto store = Open(path);
  CHECK(store->SchemaVersion() >= 4);
  RawDb raw(path);
  CHECK(raw.Query("SELECT timer || ' ' || flush FROM timing_protocols WHERE op = 'a'") == "events memset");
  CHECK(raw.Query("SELECT timer || ' ' || flush FROM timing_protocols WHERE op = 'b'") == "cupti read");
  // And the refill is what later evaluations are checked against.
  CHECK_FALSE(RecordTimed(*store, "b2", "b", {{"timer", "events"}, {"flush_l2", true}}).ok());
  CHECK(RecordTimed(*store, "b3", "b", {{"timer", "cupti"}, {"flush_l2", true}, {"flush", "read"}}).ok());
}

TEST_CASE("RecordEvaluation is atomic", "[db]") {
  TempDir tmp;
  auto store = Open(tmp.File("kevolve.db"));
  int64_t id = AddCandidate(*store, MakeCandidate("cand", AddSource(*store, "src")));

  SECTION("unknown candidate") {
    EvaluationRecord e;
    e.candidate_id = 31337;
    e.status = "ok";
    e.rungs = {MakeRung("compile", true)};
    Status s = store->RecordEvaluation(e);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Catch::Contains("31337"));
    Result<std::vector<RungRecord>> rungs = store->GetRungs(31337);
    REQUIRE(rungs.ok());
    CHECK(rungs->empty());
  }

  // The second rung breaks a constraint after the candidate and first rung were
  // written; none of it may remain.
  EvaluationRecord broken;
  broken.candidate_id = id;
  broken.status = "failed_compile";
  broken.fitness = 0.5;
  broken.features = {{"regs", 99}};
  broken.rungs = {MakeRung("static", true), MakeRung("", false)};

  auto expect_untouched = [&] {
    Result<CandidateRecord> c = store->GetCandidate(id);
    REQUIRE(c.ok());
    CHECK(c->status == "pending");
    CHECK_FALSE(c->fitness.has_value());
    CHECK(c->features == Json{{"block", 256}});
  };

  SECTION("on its own") {
    REQUIRE_FALSE(store->RecordEvaluation(broken).ok());
    expect_untouched();
    CHECK(store->GetRungs(id)->empty());
  }

  SECTION("inside a caller's transaction") {
    REQUIRE(store->Begin().ok());
    RungRecord before = MakeRung("launch", true);
    before.candidate_id = id;
    REQUIRE(store->AddRung(before).ok());
    REQUIRE_FALSE(store->RecordEvaluation(broken).ok());
    // The caller's transaction is still open and keeps its earlier write.
    REQUIRE(store->Commit().ok());
    expect_untouched();
    Result<std::vector<RungRecord>> rungs = store->GetRungs(id);
    REQUIRE(rungs.ok());
    REQUIRE(rungs->size() == 1);
    CHECK(rungs->front().name == "launch");
  }
}

TEST_CASE("ListCandidates honours every query field", "[db]") {
  TempDir tmp;
  auto store = Open(tmp.File("kevolve.db"));
  int64_t source = AddSource(*store, "src");
  int64_t run1 = *store->CreateRun(RunRecord{});
  int64_t run2 = *store->CreateRun(RunRecord{});

  struct Spec {
    std::string hash, op, dtype, status;
    std::optional<int64_t> run;
    std::optional<double> fitness;
  };
  std::vector<Spec> specs = {
      {"c1", "softmax", "f32", "ok", run1, 0.5},
      {"c2", "softmax", "f16", "ok", run1, 0.9},
      {"c3", "softmax", "f32", "failed_compile", run1, std::nullopt},
      {"c4", "layernorm", "f32", "ok", run2, 0.7},
      {"c5", "softmax", "f32", "pending", std::nullopt, std::nullopt},
  };
  std::vector<int64_t> ids;
  for (const Spec& spec : specs) {
    CandidateRecord c = MakeCandidate(spec.hash, source);
    c.op = spec.op;
    c.dtype = spec.dtype;
    c.status = spec.status;
    c.run_id = spec.run;
    c.fitness = spec.fitness;
    ids.push_back(AddCandidate(*store, c));
  }
  auto list = [&](const CandidateQuery& q) {
    Result<std::vector<CandidateRecord>> got = store->ListCandidates(q);
    INFO((got.ok() ? std::string("ok") : got.error()));
    REQUIRE(got.ok());
    std::vector<std::string> hashes;
    for (const CandidateRecord& c : *got) hashes.push_back(c.hash);
    return hashes;
  };
  using V = std::vector<std::string>;

  CHECK(list({}) == V{"c1", "c2", "c3", "c4", "c5"});
  CHECK(list({.run_id = run1}) == V{"c1", "c2", "c3"});
  CHECK(list({.op = "layernorm"}) == V{"c4"});
  CHECK(list({.dtype = "f16"}) == V{"c2"});
  CHECK(list({.status = "failed_compile"}) == V{"c3"});
  CHECK(list({.only_ok = true}) == V{"c1", "c2", "c4"});
  CHECK(list({.order_by_fitness = true}) == V{"c2", "c4", "c1", "c3", "c5"});
  CHECK(list({.only_ok = true, .order_by_fitness = true, .limit = 2}) == V{"c2", "c4"});
  CHECK(list({.run_id = run1, .op = "softmax", .dtype = "f32"}) == V{"c1", "c3"});
  CHECK(list({.limit = 0}).empty());
  CHECK(list({.run_id = run2, .status = "pending"}).empty());
}

TEST_CASE("the analysis views answer from the tables", "[db]") {
  TempDir tmp;
  std::string path = tmp.File("kevolve.db");
  auto store = Open(path);
  int64_t source = AddSource(*store, "src");
  int64_t run = *store->CreateRun(RunRecord{});
  CandidateRecord seed = MakeCandidate("seed", source);
  seed.run_id = run;
  int64_t a = AddCandidate(*store, seed);
  CandidateRecord child = MakeCandidate("child", source);
  child.run_id = run;
  child.op_name = "param_tweak";
  child.parents = {a};
  int64_t b = AddCandidate(*store, child);
  CandidateRecord child2 = MakeCandidate("child2", source);
  child2.run_id = run;
  child2.op_name = "param_tweak";
  child2.parents = {a};
  int64_t c = AddCandidate(*store, child2);

  REQUIRE(store->RecordEvaluation({.candidate_id = a, .status = "ok", .fitness = 0.4,
                                   .rungs = {MakeRung("compile", true)}}).ok());
  REQUIRE(store->RecordEvaluation({.candidate_id = b, .status = "ok", .fitness = 0.8,
                                   .rungs = {MakeRung("compile", true)}}).ok());
  REQUIRE(store->RecordEvaluation({.candidate_id = c, .status = "failed_compile",
                                   .rungs = {MakeRung("compile", false)}}).ok());

  RawDb raw(path);
  CHECK(raw.Query("SELECT candidate_id FROM leaderboard") == std::to_string(b));
  CHECK(raw.Query("SELECT count(*) FROM leaderboard") == "2");
  CHECK(raw.Query("SELECT source FROM leaderboard") == "src.cu");
  CHECK(raw.Query("SELECT count(*) FROM lineage WHERE parent_id = " + std::to_string(a)) == "2");
  CHECK(raw.Query("SELECT count(*) FROM lineage WHERE parent_id IS NULL") == "1");
  CHECK(raw.Query("SELECT children || ',' || ok || ',' || success_rate || ',' || best_fitness "
                  "FROM operator_stats WHERE operator = 'param_tweak'") == "2,1,0.5,0.8");
  CHECK(raw.Query("SELECT failures || ',' || attempts FROM rung_failures "
                  "WHERE rung = 'compile'") == "1,3");
}

TEST_CASE("devices are inserted or replaced", "[db]") {
  TempDir tmp;
  auto store = Open(tmp.File("kevolve.db"));
  DeviceRecord d;
  d.uuid = "GPU-abc";
  d.name = "NVIDIA H200";
  d.arch = "sm_90";
  d.sm_count = 132;
  d.l2_bytes = 50 << 20;
  d.mem_bytes = 141ll << 30;
  d.copy_gbps = 3900.5;
  d.fp32_gflops = 60000;
  d.calibration = {{"launch_us", 2.5}};
  REQUIRE(store->PutDevice(d).ok());

  Result<std::optional<DeviceRecord>> got = store->GetDevice("GPU-abc");
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK((*got)->name == "NVIDIA H200");
  CHECK((*got)->sm_count == 132);
  CHECK((*got)->mem_bytes == 141ll << 30);
  CHECK((*got)->copy_gbps == 3900.5);
  CHECK((*got)->calibration == d.calibration);
  CHECK_FALSE((*got)->calibrated_at.empty());  // filled by the store

  d.copy_gbps = 4000;
  d.calibrated_at = "2025-01-01T00:00:00.000Z";
  REQUIRE(store->PutDevice(d).ok());
  got = store->GetDevice("GPU-abc");
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK((*got)->copy_gbps == 4000);
  CHECK((*got)->calibrated_at == "2025-01-01T00:00:00.000Z");

  got = store->GetDevice("GPU-none");
  REQUIRE(got.ok());
  CHECK_FALSE(got->has_value());
}

TEST_CASE("artifacts round trip binary bytes", "[db]") {
  TempDir tmp;
  auto store = Open(tmp.File("kevolve.db"));
  int64_t id = AddCandidate(*store, MakeCandidate("cand", AddSource(*store, "src")));
  std::string bytes("\x7f" "ELF\0\0\x01\xff\0tail", 12);
  REQUIRE(bytes.size() == 12);
  REQUIRE(store->PutArtifact(id, "cubin", bytes).ok());

  Result<std::optional<std::string>> got = store->GetArtifact(id, "cubin");
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK(**got == bytes);

  REQUIRE(store->PutArtifact(id, "cubin", "replaced").ok());
  got = store->GetArtifact(id, "cubin");
  REQUIRE(got.ok());
  CHECK(got->value_or("") == "replaced");

  REQUIRE(store->PutArtifact(id, "ptx", "").ok());
  got = store->GetArtifact(id, "ptx");
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK((*got)->empty());

  got = store->GetArtifact(id, "sass");
  REQUIRE(got.ok());
  CHECK_FALSE(got->has_value());
  CHECK_FALSE(store->PutArtifact(id + 1, "cubin", bytes).ok());  // no such candidate
}

TEST_CASE("Begin, Commit and Rollback group writes", "[db]") {
  TempDir tmp;
  auto store = Open(tmp.File("kevolve.db"));
  auto run_count = [&] { return store->ListRuns()->size(); };

  REQUIRE(store->Begin().ok());
  REQUIRE(store->CreateRun(RunRecord{}).ok());
  REQUIRE(store->Rollback().ok());
  CHECK(run_count() == 0);

  REQUIRE(store->Begin().ok());
  Status nested = store->Begin();
  REQUIRE_FALSE(nested.ok());
  CHECK_THAT(nested.message(), Catch::Contains("already open"));
  REQUIRE(store->CreateRun(RunRecord{}).ok());
  REQUIRE(store->CreateRun(RunRecord{}).ok());
  REQUIRE(store->Commit().ok());
  CHECK(run_count() == 2);

  CHECK_FALSE(store->Commit().ok());
  CHECK(store->Rollback().ok());  // nothing open: a no-op
}

TEST_CASE("a read-only connection sees committed rows while the writer is open", "[db]") {
  TempDir tmp;
  std::string path = tmp.File("kevolve.db");
  auto writer = Open(path);
  RunRecord run;
  run.op = "softmax";
  int64_t first = *writer->CreateRun(run);

  auto reader = Open(path, StoreOptions{.read_only = true});
  Result<RunRecord> got = reader->GetRun(first);
  REQUIRE(got.ok());
  CHECK(got->op == "softmax");

  REQUIRE(writer->Begin().ok());
  int64_t second = *writer->CreateRun(run);
  CHECK_FALSE(reader->GetRun(second).ok());  // not committed yet
  REQUIRE(writer->Commit().ok());
  CHECK(reader->GetRun(second).ok());

  CHECK_FALSE(reader->CreateRun(run).ok());
}

}  // namespace kevolve::db

// OpenSqliteStore, runs, sources and explicit transactions. Candidates, evaluations,
// devices and artifacts live in the sqlite_store_*.cpp files beside this one.
#include "sqlite_store.h"

#include <memory>

#include "json_text.h"
#include "schema.h"

namespace kevolve::db {
namespace {

constexpr const char* kRunColumns =
    "id, op, dtype, seed, status, config_json, devices_json, generations_done, cost_usd, "
    "created_at, updated_at";

Status Configure(Connection& conn, bool read_only) {
  Status s = conn.Exec("PRAGMA foreign_keys = ON");
  if (!s.ok()) return s;
  if (!read_only) {
    // Changing the journal mode needs write access; a read-only connection uses
    // whatever mode the writer chose.
    Result<std::string> mode = conn.QueryText("PRAGMA journal_mode = WAL");
    if (!mode.ok()) return mode.status();
    if (*mode != "wal" && *mode != "memory") {
      return Status::Error("cannot enable WAL mode (journal_mode is '" + *mode + "')");
    }
  }
  return conn.Exec("PRAGMA synchronous = NORMAL");
}

Result<RunRecord> ReadRun(const Statement& row) {
  RunRecord run;
  run.id = row.ColumnInt64(0);
  run.op = row.ColumnText(1);
  run.dtype = row.ColumnText(2);
  run.seed = static_cast<uint64_t>(row.ColumnInt64(3));
  run.status = row.ColumnText(4);
  std::string where = "run " + std::to_string(run.id);
  Result<Json> config = ParseJson(row.ColumnText(5), where + " config_json");
  if (!config.ok()) return config.status();
  run.config = std::move(*config);
  Result<Json> devices = ParseJson(row.ColumnText(6), where + " devices_json");
  if (!devices.ok()) return devices.status();
  run.devices = std::move(*devices);
  run.generations_done = static_cast<int>(row.ColumnInt64(7));
  run.cost_usd = row.ColumnDouble(8);
  run.created_at = row.ColumnText(9);
  run.updated_at = row.ColumnText(10);
  return run;
}

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               const StoreOptions& options) {
  const std::string prefix = "cannot open database '" + path + "': ";
  int flags = options.read_only ? SQLITE_OPEN_READONLY
                                : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Connection conn(raw);  // owns the handle even when opening failed
  if (rc != SQLITE_OK) {
    return Status::Error(prefix + (raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  sqlite3_extended_result_codes(raw, 1);
  Status s = Check(raw, sqlite3_busy_timeout(raw, options.busy_timeout_ms),
                   "sqlite3_busy_timeout");
  if (s.ok()) s = Configure(conn, options.read_only);
  if (!s.ok()) return Status::Error(prefix + s.message());

  Result<int> version = Migrate(conn, path, options.read_only);
  if (!version.ok()) return version.status();
  return std::unique_ptr<Store>(
      std::make_unique<SqliteStore>(std::move(conn), *version, options.read_only));
}

// ---- Runs ----

Result<int64_t> SqliteStore::CreateRun(const RunRecord& run) {
  Result<Statement> insert = conn_.Prepare(
      "INSERT INTO runs (op, dtype, seed, status, config_json, devices_json, "
      "generations_done, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  if (!insert.ok()) return WithContext("CreateRun", insert.status());
  Status s = insert->Bind(1, run.op)
                 .Bind(2, run.dtype)
                 .Bind(3, static_cast<int64_t>(run.seed))
                 .Bind(4, run.status)
                 .Bind(5, DumpJson(run.config))
                 .Bind(6, DumpJson(run.devices))
                 .Bind(7, run.generations_done)
                 .Bind(8, run.cost_usd)
                 .Run();
  if (!s.ok()) return WithContext("CreateRun", s);
  return conn_.LastInsertId();
}

Result<RunRecord> SqliteStore::GetRun(int64_t id) {
  Result<Statement> query =
      conn_.Prepare(std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = ?");
  if (!query.ok()) return query.status();
  Result<bool> row = query->Bind(1, id).Step();
  if (!row.ok()) return row.status();
  if (!*row) return Status::Error("no run with id " + std::to_string(id));
  return ReadRun(*query);
}

Status SqliteStore::UpdateRun(const RunRecord& run) {
  const std::string context = "UpdateRun(run " + std::to_string(run.id) + ")";
  Result<Statement> update = conn_.Prepare(
      "UPDATE runs SET op = ?, dtype = ?, seed = ?, status = ?, config_json = ?, "
      "devices_json = ?, generations_done = ?, cost_usd = ?, "
      "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?");
  if (!update.ok()) return WithContext(context, update.status());
  Status s = update->Bind(1, run.op)
                 .Bind(2, run.dtype)
                 .Bind(3, static_cast<int64_t>(run.seed))
                 .Bind(4, run.status)
                 .Bind(5, DumpJson(run.config))
                 .Bind(6, DumpJson(run.devices))
                 .Bind(7, run.generations_done)
                 .Bind(8, run.cost_usd)
                 .Bind(9, run.id)
                 .Run();
  if (!s.ok()) return WithContext(context, s);
  if (conn_.Changes() == 0) return Status::Error("no run with id " + std::to_string(run.id));
  return Status::Ok();
}

Result<std::vector<RunRecord>> SqliteStore::ListRuns() {
  Result<Statement> query =
      conn_.Prepare(std::string("SELECT ") + kRunColumns + " FROM runs ORDER BY id");
  if (!query.ok()) return query.status();
  std::vector<RunRecord> runs;
  for (;;) {
    Result<bool> row = query->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    Result<RunRecord> run = ReadRun(*query);
    if (!run.ok()) return run.status();
    runs.push_back(std::move(*run));
  }
  return runs;
}

// ---- Sources ----

Result<int64_t> SqliteStore::PutSource(const SourceRecord& source) {
  if (source.hash.empty()) return Status::Error("PutSource: the source hash is empty");
  const std::string context = "PutSource(" + source.hash + ")";
  Result<Statement> insert = conn_.Prepare(
      "INSERT INTO sources (hash, name, text, origin) VALUES (?, ?, ?, ?) "
      "ON CONFLICT (hash) DO NOTHING");
  if (!insert.ok()) return WithContext(context, insert.status());
  Status s = insert->Bind(1, source.hash)
                 .Bind(2, source.name)
                 .Bind(3, source.text)
                 .Bind(4, source.origin)
                 .Run();
  if (!s.ok()) return WithContext(context, s);
  if (conn_.Changes() > 0) return conn_.LastInsertId();

  Result<Statement> query = conn_.Prepare("SELECT id FROM sources WHERE hash = ?");
  if (!query.ok()) return WithContext(context, query.status());
  Result<bool> row = query->Bind(1, source.hash).Step();
  if (!row.ok()) return WithContext(context, row.status());
  if (!*row) return Status::Error(context + ": the row vanished after a conflict");
  return query->ColumnInt64(0);
}

Result<SourceRecord> SqliteStore::GetSource(int64_t id) {
  Result<Statement> query = conn_.Prepare(
      "SELECT id, hash, name, text, origin, created_at FROM sources WHERE id = ?");
  if (!query.ok()) return query.status();
  Result<bool> row = query->Bind(1, id).Step();
  if (!row.ok()) return row.status();
  if (!*row) return Status::Error("no source with id " + std::to_string(id));
  SourceRecord source;
  source.id = query->ColumnInt64(0);
  source.hash = query->ColumnText(1);
  source.name = query->ColumnText(2);
  source.text = query->ColumnText(3);
  source.origin = query->ColumnText(4);
  source.created_at = query->ColumnText(5);
  return source;
}

// ---- Transactions ----

Status SqliteStore::Begin() {
  if (conn_.InTransaction()) return Status::Error("Begin: a transaction is already open");
  return WithContext("Begin", conn_.Exec(read_only_ ? "BEGIN" : "BEGIN IMMEDIATE"));
}

Status SqliteStore::Commit() {
  if (!conn_.InTransaction()) return Status::Error("Commit: no transaction is open");
  return WithContext("Commit", conn_.Exec("COMMIT"));
}

Status SqliteStore::Rollback() {
  if (!conn_.InTransaction()) return Status::Ok();
  return WithContext("Rollback", conn_.Exec("ROLLBACK"));
}

}  // namespace kevolve::db

#include "schema.h"

#include <iterator>

namespace kevolve::db {
namespace {

// Version 1: runs, sources, candidates and their lineage, evaluation results, devices,
// artifacts, and the analysis views.
//
// Conventions: timestamps are ISO-8601 UTC text; *_json columns hold JSON text; a NULL
// REAL in a measurement column means "not a number".
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE schema_version (
  version INTEGER NOT NULL
);

CREATE TABLE runs (
  id               INTEGER PRIMARY KEY,
  op               TEXT NOT NULL,
  dtype            TEXT NOT NULL,
  seed             INTEGER NOT NULL,  -- the uint64 seed's bits, as a signed integer
  status           TEXT NOT NULL,
  config_json      TEXT NOT NULL,
  devices_json     TEXT NOT NULL,
  generations_done INTEGER NOT NULL DEFAULT 0,
  cost_usd         REAL NOT NULL DEFAULT 0,
  created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  updated_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE sources (
  id         INTEGER PRIMARY KEY,
  hash       TEXT NOT NULL UNIQUE,
  name       TEXT NOT NULL,
  text       TEXT NOT NULL,
  origin     TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE candidates (
  id              INTEGER PRIMARY KEY,
  hash            TEXT NOT NULL UNIQUE,
  source_id       INTEGER NOT NULL REFERENCES sources(id),
  params_json     TEXT NOT NULL,
  op              TEXT NOT NULL,
  dtype           TEXT NOT NULL,
  arch            TEXT NOT NULL,
  compile_options TEXT NOT NULL,
  run_id          INTEGER REFERENCES runs(id),
  generation      INTEGER NOT NULL,
  island          INTEGER NOT NULL,
  operator        TEXT NOT NULL,
  status          TEXT NOT NULL,
  fitness         REAL,
  features_json   TEXT NOT NULL,
  created_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX candidates_by_run ON candidates(run_id, status);
CREATE INDEX candidates_by_status_fitness ON candidates(status, fitness DESC);
CREATE INDEX candidates_by_fitness ON candidates(fitness DESC);
CREATE INDEX candidates_by_source ON candidates(source_id);

CREATE TABLE candidate_parents (
  candidate_id INTEGER NOT NULL REFERENCES candidates(id),
  parent_id    INTEGER NOT NULL REFERENCES candidates(id),
  position     INTEGER NOT NULL,  -- the parent's index in the operator's input
  PRIMARY KEY (candidate_id, parent_id)
);
CREATE INDEX candidate_parents_by_parent ON candidate_parents(parent_id);

CREATE TABLE rungs (
  id           INTEGER PRIMARY KEY,
  candidate_id INTEGER NOT NULL REFERENCES candidates(id),
  name         TEXT NOT NULL CHECK (name <> ''),
  ok           INTEGER NOT NULL CHECK (ok IN (0, 1)),
  metrics_json TEXT NOT NULL,
  log          TEXT NOT NULL,
  duration_ms  REAL,
  device_uuid  TEXT NOT NULL,  -- '' for CPU rungs
  created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX rungs_by_candidate ON rungs(candidate_id);

CREATE TABLE timings (
  id            INTEGER PRIMARY KEY,
  candidate_id  INTEGER NOT NULL REFERENCES candidates(id),
  device_uuid   TEXT NOT NULL,
  shape         TEXT NOT NULL,
  median_us     REAL,
  p10_us        REAL,
  p90_us        REAL,
  n             INTEGER NOT NULL,
  samples_json  TEXT NOT NULL,
  protocol_json TEXT NOT NULL,
  roofline_us   REAL,
  fraction      REAL,
  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX timings_by_candidate ON timings(candidate_id);

CREATE TABLE devices (
  uuid             TEXT PRIMARY KEY,
  name             TEXT NOT NULL,
  arch             TEXT NOT NULL,
  sm_count         INTEGER NOT NULL,
  l2_bytes         INTEGER NOT NULL,
  mem_bytes        INTEGER NOT NULL,
  copy_gbps        REAL,
  fp32_gflops      REAL,
  calibration_json TEXT NOT NULL,
  calibrated_at    TEXT NOT NULL
);

CREATE TABLE artifacts (
  candidate_id INTEGER NOT NULL REFERENCES candidates(id),
  kind         TEXT NOT NULL,  -- cubin | ptx | sass | ncu-rep | ...
  data         BLOB NOT NULL,
  created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (candidate_id, kind)
);

-- Candidates that passed every rung, best first.
CREATE VIEW leaderboard AS
SELECT c.id AS candidate_id, c.run_id, c.op, c.dtype, c.arch, c.fitness,
       s.name AS source, c.params_json AS params, c.operator, c.generation, c.island,
       c.hash
FROM candidates c JOIN sources s ON s.id = c.source_id
WHERE c.status = 'ok'
ORDER BY c.fitness DESC, c.id;

-- One row per (candidate, parent); candidates without parents (seeds) have a NULL
-- parent_id.
CREATE VIEW lineage AS
SELECT c.id AS candidate_id, p.parent_id, p.position, c.operator, c.generation,
       c.island, c.run_id, c.status, c.fitness
FROM candidates c LEFT JOIN candidate_parents p ON p.candidate_id = c.id
ORDER BY c.id, p.position;

-- How well each operator does per run; success_rate is over evaluated children
-- (status other than 'pending').
CREATE VIEW operator_stats AS
SELECT run_id, operator,
       COUNT(*) AS children,
       SUM(status <> 'pending') AS evaluated,
       SUM(status = 'ok') AS ok,
       CAST(SUM(status = 'ok') AS REAL) / NULLIF(SUM(status <> 'pending'), 0)
         AS success_rate,
       MAX(CASE WHEN status = 'ok' THEN fitness END) AS best_fitness
FROM candidates
GROUP BY run_id, operator;

-- Where candidates fall out of the evaluation ladder, per run and rung.
CREATE VIEW rung_failures AS
SELECT c.run_id, r.name AS rung,
       SUM(r.ok = 0) AS failures,
       COUNT(*) AS attempts
FROM rungs r JOIN candidates c ON c.id = r.candidate_id
GROUP BY c.run_id, r.name;
)sql";

// Version 2: every LLM call with its cost, and the full-text index of the context
// folders that prompts draw snippets from.
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE llm_calls (
  id           INTEGER PRIMARY KEY,
  run_id       INTEGER REFERENCES runs(id),
  candidate_id INTEGER REFERENCES candidates(id),  -- the child it produced, if any
  parent_id    INTEGER REFERENCES candidates(id),  -- the candidate the prompt showed
  provider     TEXT NOT NULL,
  model        TEXT NOT NULL,
  operator     TEXT NOT NULL,
  prompt       TEXT NOT NULL,
  response     TEXT NOT NULL,
  tokens_in    INTEGER NOT NULL DEFAULT 0,
  tokens_out   INTEGER NOT NULL DEFAULT 0,
  latency_s    REAL,
  cost_usd     REAL,
  outcome      TEXT NOT NULL,
  error        TEXT NOT NULL DEFAULT '',
  created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX llm_calls_by_run ON llm_calls(run_id, provider);
CREATE INDEX llm_calls_by_candidate ON llm_calls(candidate_id);
CREATE INDEX llm_calls_by_parent ON llm_calls(parent_id);

-- What the LLMs cost, per run and provider.
CREATE VIEW llm_spend AS
SELECT run_id, provider,
       COUNT(*) AS calls,
       SUM(outcome = 'ok') AS ok_calls,
       SUM(tokens_in) AS tokens_in,
       SUM(tokens_out) AS tokens_out,
       TOTAL(cost_usd) AS cost_usd
FROM llm_calls
GROUP BY run_id, provider;

-- Context folders, split into chunks of text for full-text search. `chunk` is the
-- chunk's index within its file.
CREATE VIRTUAL TABLE context_chunks USING fts5(
  path, chunk UNINDEXED, text, tokenize = 'porter unicode61'
);

-- One row per indexed file, so that unchanged files (same size and mtime) are skipped.
CREATE TABLE context_files (
  path       TEXT PRIMARY KEY,
  size       INTEGER NOT NULL,
  mtime      INTEGER NOT NULL,  -- nanoseconds since the file clock's epoch
  chunks     INTEGER NOT NULL,
  indexed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
)sql";

// Append-only: a released script is never edited; the next version is appended as a
// new entry. kMigrations[i] takes a database from version i to version i + 1. Each
// runs in a transaction with foreign keys enforced.
// v3: run membership. A candidate is stored once (by content hash); a run that meets a
// candidate evaluated elsewhere (another run, `kevolve eval --db`) adopts its result
// through this table instead of evaluating it again, and --resume replays it.
constexpr const char* kSchemaV3 = R"SQL(
CREATE TABLE run_members (
  run_id       INTEGER NOT NULL REFERENCES runs(id),
  candidate_id INTEGER NOT NULL REFERENCES candidates(id),
  generation   INTEGER NOT NULL,
  island       INTEGER NOT NULL DEFAULT 0,
  operator     TEXT NOT NULL DEFAULT '',
  created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (run_id, candidate_id)
);
CREATE INDEX run_members_by_generation ON run_members(run_id, generation);
)SQL";

// One timing protocol per op and dtype: the timer and L2 flush that the timings of each
// op and dtype were measured with, kept by RecordEvaluation (SqliteStore::CheckOneProtocol).
// Filled from the timings already stored; where an older kevolve mixed protocols, the
// first one stored is kept (the commands refuse such an op and dtype: TimingProtocols).
constexpr const char* kSchemaV4 =
    "CREATE TABLE IF NOT EXISTS timing_protocols (\n"
    "  op    TEXT NOT NULL,\n"
    "  dtype TEXT NOT NULL,\n"
    "  timer TEXT NOT NULL,\n"
    "  flush TEXT NOT NULL,\n"
    "  PRIMARY KEY (op, dtype)\n"
    ");\n"
    "INSERT OR IGNORE INTO timing_protocols (op, dtype, timer, flush)\n"
    "  SELECT c.op, c.dtype, " KEVOLVE_TIMING_PROTOCOL_COLUMNS
    " FROM timings t JOIN candidates c ON c.id = t.candidate_id ORDER BY t.id;\n";

constexpr const char* kMigrations[] = {
    kSchemaV1,
    kSchemaV2,
    kSchemaV3,
    kSchemaV4,
};

constexpr int kLatest = static_cast<int>(std::size(kMigrations));

Status SetVersion(Connection& conn, int version) {
  Status s = conn.Exec("DELETE FROM schema_version");
  if (!s.ok()) return s;
  Result<Statement> insert = conn.Prepare("INSERT INTO schema_version(version) VALUES (?)");
  if (!insert.ok()) return insert.status();
  return insert->Bind(1, version).Run();
}

// Moves the database from `from` to `from + 1`, unless another process got there first.
Status ApplyMigration(Connection& conn, int from) {
  WriteScope scope(conn);
  Status s = scope.Open();
  if (!s.ok()) return s;
  Result<int> current = ReadSchemaVersion(conn);
  if (!current.ok()) return current.status();
  if (*current > from) return Status::Ok();
  s = conn.Exec(kMigrations[from]);
  if (!s.ok()) return s;
  s = SetVersion(conn, from + 1);
  if (!s.ok()) return s;
  return scope.Release();
}

}  // namespace

int LatestSchemaVersion() { return kLatest; }

Result<int> ReadSchemaVersion(Connection& conn) {
  Result<Statement> exists = conn.Prepare(
      "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'");
  if (!exists.ok()) return exists.status();
  Result<bool> row = exists->Step();
  if (!row.ok()) return row.status();
  if (!*row || exists->ColumnInt64(0) == 0) return 0;

  Result<Statement> version = conn.Prepare("SELECT max(version) FROM schema_version");
  if (!version.ok()) return version.status();
  row = version->Step();
  if (!row.ok()) return row.status();
  if (!*row || version->ColumnIsNull(0)) {
    return Status::Error("table schema_version is empty");
  }
  return static_cast<int>(version->ColumnInt64(0));
}

Result<int> Migrate(Connection& conn, const std::string& path, bool read_only) {
  Result<int> version = ReadSchemaVersion(conn);
  if (!version.ok()) {
    return Status::Error("cannot read schema version of '" + path + "': " + version.error());
  }
  if (*version > kLatest) {
    return Status::Error("database '" + path + "' has schema version " +
                         std::to_string(*version) + ", newer than this kevolve supports (" +
                         std::to_string(kLatest) + "); upgrade kevolve to open it");
  }
  if (*version == kLatest) return *version;
  if (read_only) {
    return Status::Error("database '" + path + "' has schema version " +
                         std::to_string(*version) + " but " + std::to_string(kLatest) +
                         " is needed; open it read-write once to migrate it");
  }
  for (int from = *version; from < kLatest; ++from) {
    Status s = ApplyMigration(conn, from);
    if (!s.ok()) {
      return Status::Error("cannot migrate '" + path + "' from schema version " +
                           std::to_string(from) + " to " + std::to_string(from + 1) + ": " +
                           s.message());
    }
  }
  return kLatest;
}

}  // namespace kevolve::db

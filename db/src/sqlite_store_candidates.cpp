// Candidates and their parents.
#include <string>

#include "json_text.h"
#include "sqlite_store.h"

namespace kevolve::db {
namespace {

// The columns ReadCandidate expects, in order.
constexpr const char* kCandidateColumns =
    "id, hash, source_id, params_json, op, dtype, arch, compile_options, run_id, "
    "generation, island, operator, status, fitness, features_json, created_at";

std::string SelectCandidates(const char* tail) {
  return std::string("SELECT ") + kCandidateColumns + " FROM candidates " + tail;
}

}  // namespace

Result<CandidateRecord> SqliteStore::ReadCandidate(const Statement& row) {
  CandidateRecord c;
  c.id = row.ColumnInt64(0);
  c.hash = row.ColumnText(1);
  c.source_id = row.ColumnInt64(2);
  const std::string where = "candidate " + std::to_string(c.id);
  Result<Json> params = ParseJson(row.ColumnText(3), where + " params_json");
  if (!params.ok()) return params.status();
  c.params = std::move(*params);
  c.op = row.ColumnText(4);
  c.dtype = row.ColumnText(5);
  c.arch = row.ColumnText(6);
  c.compile_options = row.ColumnText(7);
  c.run_id = row.ColumnOptionalInt64(8);
  c.generation = static_cast<int>(row.ColumnInt64(9));
  c.island = static_cast<int>(row.ColumnInt64(10));
  c.op_name = row.ColumnText(11);
  c.status = row.ColumnText(12);
  c.fitness = row.ColumnOptionalDouble(13);
  Result<Json> features = ParseJson(row.ColumnText(14), where + " features_json");
  if (!features.ok()) return features.status();
  c.features = std::move(*features);
  c.created_at = row.ColumnText(15);

  Result<Statement> parents = conn_.Prepare(
      "SELECT parent_id FROM candidate_parents WHERE candidate_id = ? ORDER BY position");
  if (!parents.ok()) return parents.status();
  parents->Bind(1, c.id);
  for (;;) {
    Result<bool> next = parents->Step();
    if (!next.ok()) return next.status();
    if (!*next) break;
    c.parents.push_back(parents->ColumnInt64(0));
  }
  return c;
}

Result<std::vector<CandidateRecord>> SqliteStore::CollectCandidates(Statement& query) {
  std::vector<CandidateRecord> out;
  for (;;) {
    Result<bool> row = query.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    Result<CandidateRecord> c = ReadCandidate(query);
    if (!c.ok()) return c.status();
    out.push_back(std::move(*c));
  }
  return out;
}

Result<std::pair<int64_t, bool>> SqliteStore::PutCandidate(const CandidateRecord& c) {
  if (c.hash.empty()) return Status::Error("PutCandidate: the candidate hash is empty");
  const std::string context = "PutCandidate(" + c.hash + ")";
  WriteScope scope(conn_);
  Status s = scope.Open();
  if (!s.ok()) return WithContext(context, s);

  Result<Statement> insert = conn_.Prepare(
      "INSERT INTO candidates (hash, source_id, params_json, op, dtype, arch, "
      "compile_options, run_id, generation, island, operator, status, fitness, "
      "features_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
      "ON CONFLICT (hash) DO NOTHING");
  if (!insert.ok()) return WithContext(context, insert.status());
  s = insert->Bind(1, c.hash)
          .Bind(2, c.source_id)
          .Bind(3, DumpJson(c.params))
          .Bind(4, c.op)
          .Bind(5, c.dtype)
          .Bind(6, c.arch)
          .Bind(7, c.compile_options)
          .Bind(8, c.run_id)
          .Bind(9, c.generation)
          .Bind(10, c.island)
          .Bind(11, c.op_name)
          .Bind(12, c.status)
          .Bind(13, c.fitness)
          .Bind(14, DumpJson(c.features))
          .Run();
  if (!s.ok()) return WithContext(context, s);

  if (conn_.Changes() == 0) {
    Result<Statement> query = conn_.Prepare("SELECT id FROM candidates WHERE hash = ?");
    if (!query.ok()) return WithContext(context, query.status());
    Result<bool> row = query->Bind(1, c.hash).Step();
    if (!row.ok()) return WithContext(context, row.status());
    if (!*row) return Status::Error(context + ": the row vanished after a conflict");
    int64_t existing = query->ColumnInt64(0);
    s = scope.Release();
    if (!s.ok()) return WithContext(context, s);
    return std::pair<int64_t, bool>(existing, false);
  }

  const int64_t id = conn_.LastInsertId();
  // A parent listed twice (a crossover of a candidate with itself) is stored once, at
  // its first position.
  Result<Statement> link = conn_.Prepare(
      "INSERT INTO candidate_parents (candidate_id, parent_id, position) VALUES (?, ?, ?) "
      "ON CONFLICT (candidate_id, parent_id) DO NOTHING");
  if (!link.ok()) return WithContext(context, link.status());
  for (size_t i = 0; i < c.parents.size(); ++i) {
    s = link->Bind(1, id).Bind(2, c.parents[i]).Bind(3, static_cast<int64_t>(i)).Run();
    if (!s.ok()) {
      return WithContext(context + " parent " + std::to_string(c.parents[i]), s);
    }
    link->Reset();
  }
  s = scope.Release();
  if (!s.ok()) return WithContext(context, s);
  return std::pair<int64_t, bool>(id, true);
}

Result<std::optional<CandidateRecord>> SqliteStore::FindCandidate(const std::string& hash) {
  Result<Statement> query = conn_.Prepare(SelectCandidates("WHERE hash = ?"));
  if (!query.ok()) return query.status();
  query->Bind(1, hash);
  Result<std::vector<CandidateRecord>> found = CollectCandidates(*query);
  if (!found.ok()) return found.status();
  if (found->empty()) return std::optional<CandidateRecord>();
  return std::optional<CandidateRecord>(std::move(found->front()));
}

Result<CandidateRecord> SqliteStore::GetCandidate(int64_t id) {
  Result<Statement> query = conn_.Prepare(SelectCandidates("WHERE id = ?"));
  if (!query.ok()) return query.status();
  query->Bind(1, id);
  Result<std::vector<CandidateRecord>> found = CollectCandidates(*query);
  if (!found.ok()) return found.status();
  if (found->empty()) return Status::Error("no candidate with id " + std::to_string(id));
  return std::move(found->front());
}

Result<std::vector<CandidateRecord>> SqliteStore::ListCandidates(const CandidateQuery& q) {
  // The SQL text varies only by which fixed clauses are present; every value is bound.
  std::string sql = SelectCandidates("WHERE 1 = 1");
  if (q.run_id) sql += " AND run_id = ?";
  if (q.op) sql += " AND op = ?";
  if (q.dtype) sql += " AND dtype = ?";
  if (q.status) sql += " AND status = ?";
  if (q.only_ok) sql += " AND status = 'ok'";
  // SQLite sorts NULL lowest, so unevaluated candidates come last in descending order.
  sql += q.order_by_fitness ? " ORDER BY fitness DESC, id" : " ORDER BY id";
  sql += " LIMIT ?";  // a negative limit means no limit

  Result<Statement> query = conn_.Prepare(sql);
  if (!query.ok()) return query.status();
  int index = 1;
  if (q.run_id) query->Bind(index++, *q.run_id);
  if (q.op) query->Bind(index++, *q.op);
  if (q.dtype) query->Bind(index++, *q.dtype);
  if (q.status) query->Bind(index++, *q.status);
  query->Bind(index, static_cast<int64_t>(q.limit));
  return CollectCandidates(*query);
}

}  // namespace kevolve::db

// Evaluation results: rungs, timings, and the candidate's status, fitness and features.
#include <string>

#include "json_text.h"
#include "schema.h"
#include "sqlite_store.h"

namespace kevolve::db {

Status SqliteStore::InsertRung(const RungRecord& rung, int64_t candidate_id) {
  Result<Statement> insert = conn_.Prepare(
      "INSERT INTO rungs (candidate_id, name, ok, metrics_json, log, duration_ms, "
      "device_uuid) VALUES (?, ?, ?, ?, ?, ?, ?)");
  if (!insert.ok()) return insert.status();
  Status s = insert->Bind(1, candidate_id)
                 .Bind(2, rung.name)
                 .Bind(3, rung.ok ? 1 : 0)
                 .Bind(4, DumpJson(rung.metrics))
                 .Bind(5, rung.log)
                 .Bind(6, rung.duration_ms)
                 .Bind(7, rung.device_uuid)
                 .Run();
  return WithContext("rung '" + rung.name + "'", s);
}

Status SqliteStore::InsertTiming(const TimingRecord& timing, int64_t candidate_id) {
  Result<Statement> insert = conn_.Prepare(
      "INSERT INTO timings (candidate_id, device_uuid, shape, median_us, p10_us, p90_us, "
      "n, samples_json, protocol_json, roofline_us, fraction) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!insert.ok()) return insert.status();
  Status s = insert->Bind(1, candidate_id)
                 .Bind(2, timing.device_uuid)
                 .Bind(3, timing.shape)
                 .Bind(4, timing.median_us)
                 .Bind(5, timing.p10_us)
                 .Bind(6, timing.p90_us)
                 .Bind(7, timing.n)
                 .Bind(8, DumpJson(timing.samples_us))
                 .Bind(9, DumpJson(timing.protocol))
                 .Bind(10, timing.roofline_us)
                 .Bind(11, timing.fraction)
                 .Run();
  return WithContext("timing for shape '" + timing.shape + "'", s);
}

Status SqliteStore::MergeEvaluationIntoCandidate(const EvaluationRecord& e) {
  if (e.status.empty()) return Status::Error("the evaluation status is empty");
  if (!e.features.is_object() && !e.features.is_null()) {
    return Status::Error("the evaluation features are not a JSON object");
  }
  Result<Statement> query = conn_.Prepare("SELECT features_json FROM candidates WHERE id = ?");
  if (!query.ok()) return query.status();
  Result<bool> row = query->Bind(1, e.candidate_id).Step();
  if (!row.ok()) return row.status();
  if (!*row) return Status::Error("no candidate with id " + std::to_string(e.candidate_id));
  Result<Json> features = ParseJson(query->ColumnText(0), "features_json");
  if (!features.ok()) return features.status();
  if (e.features.is_object()) features->merge_patch(e.features);

  Result<Statement> update = conn_.Prepare(
      "UPDATE candidates SET status = ?, fitness = ?, features_json = ? WHERE id = ?");
  if (!update.ok()) return update.status();
  return update->Bind(1, e.status)
      .Bind(2, e.fitness)
      .Bind(3, DumpJson(*features))
      .Bind(4, e.candidate_id)
      .Run();
}

// One timing protocol per op and dtype (Store::RecordEvaluation): checked inside the write
// transaction, after the new timings are in, so that two writers cannot both pass. The
// first evaluation timed for an op and dtype sets it in timing_protocols; every later one
// must match it (a lookup by primary key, whatever the size of the database).
Status SqliteStore::CheckOneProtocol(int64_t candidate_id) {
  Result<Statement> mine = conn_.Prepare("SELECT DISTINCT " KEVOLVE_TIMING_PROTOCOL_COLUMNS
                                         " FROM timings t WHERE t.candidate_id = ? ORDER BY 1, 2");
  if (!mine.ok()) return mine.status();
  mine->Bind(1, candidate_id);
  std::vector<std::pair<std::string, std::string>> found;
  for (;;) {
    Result<bool> row = mine->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    found.emplace_back(mine->ColumnText(0), mine->ColumnText(1));
  }
  if (found.empty()) return Status::Ok();
  Result<Statement> claim = conn_.Prepare(
      "INSERT OR IGNORE INTO timing_protocols (op, dtype, timer, flush) "
      "SELECT op, dtype, ?, ? FROM candidates WHERE id = ?");
  if (!claim.ok()) return claim.status();
  if (Status s = claim->Bind(1, found[0].first).Bind(2, found[0].second).Bind(3, candidate_id).Run(); !s.ok()) return s;
  Result<Statement> held = conn_.Prepare(
      "SELECT p.op, p.dtype, p.timer, p.flush FROM candidates c JOIN timing_protocols p "
      "ON p.op = c.op AND p.dtype = c.dtype WHERE c.id = ?");
  if (!held.ok()) return held.status();
  Result<bool> row = held->Bind(1, candidate_id).Step();
  if (!row.ok()) return row.status();
  if (!*row) return Status::Error("no candidate with id " + std::to_string(candidate_id));
  const std::pair<std::string, std::string> kept{held->ColumnText(2), held->ColumnText(3)};
  if (found.size() == 1 && found[0] == kept) return Status::Ok();
  std::string ways = "--timer " + kept.first + " --flush " + kept.second;
  for (const auto& p : found)
    if (p != kept) ways += "; --timer " + p.first + " --flush " + p.second;
  return Status::Error("these timings would leave the database with " + held->ColumnText(0) + " " +
                       held->ColumnText(1) + " timings measured more than one way (" + ways +
                       "); it keeps one timing protocol per op and dtype");
}

Status SqliteStore::RecordEvaluation(const EvaluationRecord& e) {
  WriteScope scope(conn_);
  Status s = scope.Open();
  if (s.ok()) s = MergeEvaluationIntoCandidate(e);
  for (size_t i = 0; s.ok() && i < e.rungs.size(); ++i) {
    s = InsertRung(e.rungs[i], e.candidate_id);
  }
  for (size_t i = 0; s.ok() && i < e.timings.size(); ++i) {
    s = InsertTiming(e.timings[i], e.candidate_id);
  }
  if (s.ok() && !e.timings.empty()) s = CheckOneProtocol(e.candidate_id);
  if (s.ok()) s = scope.Release();
  return WithContext("RecordEvaluation(candidate " + std::to_string(e.candidate_id) + ")", s);
}

Status SqliteStore::AddRung(const RungRecord& rung) {
  return WithContext("AddRung(candidate " + std::to_string(rung.candidate_id) + ")",
                     InsertRung(rung, rung.candidate_id));
}

Result<std::vector<RungRecord>> SqliteStore::GetRungs(int64_t candidate_id) {
  Result<Statement> query = conn_.Prepare(
      "SELECT id, candidate_id, name, ok, metrics_json, log, duration_ms, device_uuid, "
      "created_at FROM rungs WHERE candidate_id = ? ORDER BY id");
  if (!query.ok()) return query.status();
  query->Bind(1, candidate_id);
  std::vector<RungRecord> rungs;
  for (;;) {
    Result<bool> row = query->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    RungRecord r;
    r.id = query->ColumnInt64(0);
    r.candidate_id = query->ColumnInt64(1);
    r.name = query->ColumnText(2);
    r.ok = query->ColumnInt64(3) != 0;
    Result<Json> metrics =
        ParseJson(query->ColumnText(4), "rung " + std::to_string(r.id) + " metrics_json");
    if (!metrics.ok()) return metrics.status();
    r.metrics = std::move(*metrics);
    r.log = query->ColumnText(5);
    r.duration_ms = query->ColumnDouble(6);
    r.device_uuid = query->ColumnText(7);
    r.created_at = query->ColumnText(8);
    rungs.push_back(std::move(r));
  }
  return rungs;
}

Result<std::vector<TimingRecord>> SqliteStore::GetTimings(int64_t candidate_id) {
  Result<Statement> query = conn_.Prepare(
      "SELECT id, candidate_id, device_uuid, shape, median_us, p10_us, p90_us, n, "
      "samples_json, protocol_json, roofline_us, fraction "
      "FROM timings WHERE candidate_id = ? ORDER BY id");
  if (!query.ok()) return query.status();
  query->Bind(1, candidate_id);
  std::vector<TimingRecord> timings;
  for (;;) {
    Result<bool> row = query->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    TimingRecord t;
    t.id = query->ColumnInt64(0);
    t.candidate_id = query->ColumnInt64(1);
    t.device_uuid = query->ColumnText(2);
    t.shape = query->ColumnText(3);
    t.median_us = query->ColumnDouble(4);
    t.p10_us = query->ColumnDouble(5);
    t.p90_us = query->ColumnDouble(6);
    t.n = query->ColumnInt64(7);
    const std::string where = "timing " + std::to_string(t.id);
    Result<Json> samples = ParseJson(query->ColumnText(8), where + " samples_json");
    if (!samples.ok()) return samples.status();
    t.samples_us = std::move(*samples);
    Result<Json> protocol = ParseJson(query->ColumnText(9), where + " protocol_json");
    if (!protocol.ok()) return protocol.status();
    t.protocol = std::move(*protocol);
    t.roofline_us = query->ColumnDouble(10);
    t.fraction = query->ColumnDouble(11);
    timings.push_back(std::move(t));
  }
  return timings;
}

Result<std::vector<std::pair<std::string, std::string>>> SqliteStore::TimingProtocols(const std::string& op,
                                                                                    const std::string& dtype) {
  Result<Statement> query = conn_.Prepare("SELECT DISTINCT " KEVOLVE_TIMING_PROTOCOL_COLUMNS
                                          " FROM timings t JOIN candidates c ON c.id = t.candidate_id "
                                          "WHERE c.op = ? AND c.dtype = ? ORDER BY 1, 2");
  if (!query.ok()) return query.status();
  query->Bind(1, op).Bind(2, dtype);
  std::vector<std::pair<std::string, std::string>> out;
  for (;;) {
    Result<bool> row = query->Step();
    if (!row.ok()) return WithContext("TimingProtocols", row.status());
    if (!*row) break;
    out.emplace_back(query->ColumnText(0), query->ColumnText(1));
  }
  return out;
}

}  // namespace kevolve::db

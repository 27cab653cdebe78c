// Evaluation results: rungs, timings, and the candidate's status, fitness and features.
#include <algorithm>
#include <string>

#include "json_text.h"
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

namespace {

// A timing's (timer, L2 flush) from its protocol_json, as TimingProtocols names them.
constexpr const char* kProtocolColumns =
    "coalesce(json_extract(t.protocol_json, '$.timer'), 'events'), "
    "CASE WHEN json_extract(t.protocol_json, '$.flush_l2') = 0 THEN 'none' "
    "ELSE coalesce(json_extract(t.protocol_json, '$.flush'), 'memset') END";

}  // namespace

// One timing protocol per op and dtype (Store::RecordEvaluation): checked inside the write
// transaction, after the new timings are in, so that two writers cannot both pass. The
// candidate's timings are compared with one timing of another candidate of its op and
// dtype (they all share one protocol), which keeps the check cheap in a large database.
Status SqliteStore::CheckOneProtocol(int64_t candidate_id) {
  Result<Statement> mine = conn_.Prepare(std::string("SELECT DISTINCT ") + kProtocolColumns +
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
  Result<Statement> other = conn_.Prepare(
      std::string("SELECT ") + kProtocolColumns + ", c.op, c.dtype FROM candidates me JOIN candidates c "
      "ON c.op = me.op AND c.dtype = me.dtype AND c.id != me.id JOIN timings t ON t.candidate_id = c.id "
      "WHERE me.id = ? LIMIT 1");
  if (!other.ok()) return other.status();
  Result<bool> row = other->Bind(1, candidate_id).Step();
  if (!row.ok()) return row.status();
  std::string what = "its";
  if (*row) {
    std::pair<std::string, std::string> held{other->ColumnText(0), other->ColumnText(1)};
    what = other->ColumnText(2) + " " + other->ColumnText(3);
    if (std::find(found.begin(), found.end(), held) == found.end()) found.insert(found.begin(), held);
  }
  if (found.size() <= 1) return Status::Ok();
  std::string ways;
  for (const auto& [timer, flush] : found)
    ways += std::string(ways.empty() ? "" : "; ") + "--timer " + timer + " --flush " + flush;
  return Status::Error("these timings would leave the database with " + what +
                       " timings measured more than one way (" + ways +
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
  Result<Statement> query = conn_.Prepare(std::string("SELECT DISTINCT ") + kProtocolColumns +
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

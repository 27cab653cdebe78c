// Devices (with their calibration) and per-candidate binary artifacts.
#include <string>

#include "json_text.h"
#include "sqlite_store.h"

namespace kevolve::db {

Status SqliteStore::PutDevice(const DeviceRecord& d) {
  if (d.uuid.empty()) return Status::Error("PutDevice: the device uuid is empty");
  Result<Statement> upsert = conn_.Prepare(
      "INSERT INTO devices (uuid, name, arch, sm_count, l2_bytes, mem_bytes, copy_gbps, "
      "fp32_gflops, calibration_json, calibrated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
      "COALESCE(NULLIF(?, ''), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))) "
      "ON CONFLICT (uuid) DO UPDATE SET name = excluded.name, arch = excluded.arch, "
      "sm_count = excluded.sm_count, l2_bytes = excluded.l2_bytes, "
      "mem_bytes = excluded.mem_bytes, copy_gbps = excluded.copy_gbps, "
      "fp32_gflops = excluded.fp32_gflops, calibration_json = excluded.calibration_json, "
      "calibrated_at = excluded.calibrated_at");
  Status s = upsert.ok() ? upsert->Bind(1, d.uuid)
                               .Bind(2, d.name)
                               .Bind(3, d.arch)
                               .Bind(4, d.sm_count)
                               .Bind(5, d.l2_bytes)
                               .Bind(6, d.mem_bytes)
                               .Bind(7, d.copy_gbps)
                               .Bind(8, d.fp32_gflops)
                               .Bind(9, DumpJson(d.calibration))
                               .Bind(10, d.calibrated_at)
                               .Run()
                         : upsert.status();
  return WithContext("PutDevice(" + d.uuid + ")", s);
}

Result<std::optional<DeviceRecord>> SqliteStore::GetDevice(const std::string& uuid) {
  Result<Statement> query = conn_.Prepare(
      "SELECT uuid, name, arch, sm_count, l2_bytes, mem_bytes, copy_gbps, fp32_gflops, "
      "calibration_json, calibrated_at FROM devices WHERE uuid = ?");
  if (!query.ok()) return query.status();
  Result<bool> row = query->Bind(1, uuid).Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<DeviceRecord>();
  DeviceRecord d;
  d.uuid = query->ColumnText(0);
  d.name = query->ColumnText(1);
  d.arch = query->ColumnText(2);
  d.sm_count = static_cast<int>(query->ColumnInt64(3));
  d.l2_bytes = query->ColumnInt64(4);
  d.mem_bytes = query->ColumnInt64(5);
  d.copy_gbps = query->ColumnDouble(6);
  d.fp32_gflops = query->ColumnDouble(7);
  Result<Json> calibration =
      ParseJson(query->ColumnText(8), "device " + uuid + " calibration_json");
  if (!calibration.ok()) return calibration.status();
  d.calibration = std::move(*calibration);
  d.calibrated_at = query->ColumnText(9);
  return std::optional<DeviceRecord>(std::move(d));
}

Status SqliteStore::PutArtifact(int64_t candidate_id, const std::string& kind,
                                const std::string& bytes) {
  Result<Statement> upsert = conn_.Prepare(
      "INSERT INTO artifacts (candidate_id, kind, data) VALUES (?, ?, ?) "
      "ON CONFLICT (candidate_id, kind) DO UPDATE SET data = excluded.data, "
      "created_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')");
  Status s = upsert.ok() ? upsert->Bind(1, candidate_id).Bind(2, kind).BindBlob(3, bytes).Run()
                         : upsert.status();
  return WithContext("PutArtifact(candidate " + std::to_string(candidate_id) + ", " + kind + ")",
                     s);
}

Result<std::optional<std::string>> SqliteStore::GetArtifact(int64_t candidate_id,
                                                             const std::string& kind) {
  Result<Statement> query =
      conn_.Prepare("SELECT data FROM artifacts WHERE candidate_id = ? AND kind = ?");
  if (!query.ok()) return query.status();
  Result<bool> row = query->Bind(1, candidate_id).Bind(2, kind).Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<std::string>();
  return std::optional<std::string>(query->ColumnBlob(0));
}

}  // namespace kevolve::db

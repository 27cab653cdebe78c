// Provider configuration: the rules every ProviderConfig must meet, and the loader for
// configs/llm.json ({"providers": {"name": {...}}}, comments allowed).
#include <cctype>
#include <climits>
#include <functional>
#include <string>
#include <vector>

#include "kevolve/core/json_file.h"
#include "provider_internal.h"

namespace kevolve::llm {

namespace internal {

namespace {

constexpr const char* kKinds[] = {"openai", "anthropic", "command", "replay"};

bool IsEnvName(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

}  // namespace

void CheckProviderConfig(const ProviderConfig& cfg,
                         const std::function<void(const std::string& field, const std::string& what)>& error) {
  bool known = false;
  std::string kinds;
  for (const char* k : kKinds) {
    known = known || cfg.kind == k;
    kinds += std::string(kinds.empty() ? "" : ", ") + k;
  }
  if (!known) error("kind", "must be one of " + kinds + " (got '" + cfg.kind + "')");
  bool http = cfg.kind == "openai" || cfg.kind == "anthropic";
  if (http && cfg.model.empty()) error("model", "required for kind " + cfg.kind);
  if (cfg.kind == "command" && cfg.command.empty()) error("command", "required for kind command");
  if (cfg.kind == "replay" && cfg.replay_dir.empty() && cfg.replay_db.empty())
    error("replay_dir", "required for kind replay (or replay_db: an earlier run's database)");
  if (cfg.kind == "replay" && !cfg.replay_dir.empty() && !cfg.replay_db.empty())
    error("replay_db", "give replay_dir or replay_db, not both");
  if (cfg.replay_run < 0) error("replay_run", "must be >= 0 (0: the calls of every run)");
  if (cfg.replay_run > 0 && cfg.replay_db.empty()) error("replay_run", "needs replay_db");
  if (cfg.kind != "replay" && (!cfg.replay_db.empty() || !cfg.replay_dir.empty()))
    error(cfg.replay_db.empty() ? "replay_dir" : "replay_db", "only kind replay reads recorded replies");
  // Never echo the value: a common mistake is to paste the key itself here.
  if (!cfg.api_key_env.empty() && !IsEnvName(cfg.api_key_env)) {
    error("api_key_env", "must name an environment variable (e.g. OPENAI_API_KEY), not hold the key");
  }
  if (cfg.temperature < 0) error("temperature", "must be >= 0");
  if (cfg.max_tokens < 1) error("max_tokens", "must be >= 1");
  if (!(cfg.timeout_s > 0)) error("timeout_s", "must be > 0");
  if (cfg.max_concurrency < 1) error("max_concurrency", "must be >= 1");
  if (cfg.price_in_per_mtok < 0) error("price_in_per_mtok", "must be >= 0");
  if (cfg.price_out_per_mtok < 0) error("price_out_per_mtok", "must be >= 0");
  if (cfg.weight < 0) error("weight", "must be >= 0");
  if (cfg.max_retries < 0) error("max_retries", "must be >= 0");
  if (cfg.backoff_s < 0) error("backoff_s", "must be >= 0");
  if (cfg.breaker_failures < 0) error("breaker_failures", "must be >= 0 (0: never opens)");
}

Status ValidateProviderConfig(const ProviderConfig& cfg) {
  std::string all;
  CheckProviderConfig(cfg, [&](const std::string& field, const std::string& what) {
    all += (all.empty() ? "" : "\n") + ("provider '" + cfg.name + "': field '" + field + "': " + what);
  });
  return all.empty() ? Status::Ok() : Status::Error(all);
}

}  // namespace internal

namespace {

const std::vector<std::string> kFields = {
    "kind",      "model",           "base_url",    "api_key_env", "temperature",       "max_tokens",
    "timeout_s", "max_concurrency", "price_in_per_mtok", "price_out_per_mtok", "weight", "command",
    "replay_dir", "replay_db",      "replay_run",  "max_retries", "backoff_s",  "breaker_failures"};

// An int field read as int64 and range-checked, so 1e12 is an error and not a wrap.
int IntField(JsonReader& r, const Json& obj, const std::string& key, const std::string& path, int def) {
  int64_t v = r.Integer(obj, key, path, /*required=*/false, def);
  if (v < INT_MIN || v > INT_MAX) {
    r.Error(JoinPath(path, key), "out of range");
    return def;
  }
  return static_cast<int>(v);
}

ProviderConfig ReadOne(JsonReader& r, const std::string& name, const Json& obj, const std::string& path) {
  ProviderConfig d;  // the defaults
  ProviderConfig c;
  c.name = name;
  if (!obj.is_object()) {
    r.Error(path, "expected an object");
    return c;
  }
  std::vector<std::string> allowed = kFields;
  allowed.push_back("api_key");  // reported below with a better message than "unknown"
  r.OnlyKeys(obj, allowed, path);
  if (obj.contains("api_key")) {
    r.Error(JoinPath(path, "api_key"),
            "API keys are read from the environment only: export the key and name the variable in api_key_env");
  }
  c.kind = r.String(obj, "kind", path);
  c.model = r.String(obj, "model", path, false);
  c.base_url = r.String(obj, "base_url", path, false);
  c.api_key_env = r.String(obj, "api_key_env", path, false);
  c.temperature = r.Number(obj, "temperature", path, false, d.temperature);
  c.max_tokens = IntField(r, obj, "max_tokens", path, d.max_tokens);
  c.timeout_s = r.Number(obj, "timeout_s", path, false, d.timeout_s);
  c.max_concurrency = IntField(r, obj, "max_concurrency", path, d.max_concurrency);
  c.price_in_per_mtok = r.Number(obj, "price_in_per_mtok", path, false, d.price_in_per_mtok);
  c.price_out_per_mtok = r.Number(obj, "price_out_per_mtok", path, false, d.price_out_per_mtok);
  c.weight = r.Number(obj, "weight", path, false, d.weight);
  c.command = r.String(obj, "command", path, false);
  c.replay_dir = r.String(obj, "replay_dir", path, false);
  c.replay_db = r.String(obj, "replay_db", path, false);
  c.replay_run = r.Integer(obj, "replay_run", path, false, 0);
  c.max_retries = IntField(r, obj, "max_retries", path, d.max_retries);
  c.backoff_s = r.Number(obj, "backoff_s", path, false, d.backoff_s);
  c.breaker_failures = IntField(r, obj, "breaker_failures", path, d.breaker_failures);
  // A missing or mistyped kind was reported above; don't pile "must be one of" on top.
  if (!obj.contains("kind") || !obj["kind"].is_string()) return c;
  internal::CheckProviderConfig(c, [&](const std::string& field, const std::string& what) {
    r.Error(JoinPath(path, field), what);
  });
  return c;
}

}  // namespace

Result<std::vector<ProviderConfig>> LoadProviderConfigs(const std::string& path) {
  auto json = ReadJsonFile(path);
  if (!json.ok()) return json.status();
  JsonReader r(path);
  r.OnlyKeys(*json, {"providers"}, "");
  std::vector<ProviderConfig> out;
  if (const Json* providers = r.Field(*json, "providers", "", Json::value_t::object)) {
    // nlohmann keeps object keys sorted, so providers come back in name order.
    for (auto it = providers->begin(); it != providers->end(); ++it) {
      std::string p = JoinPath("providers", it.key());
      if (it.key().empty()) r.Error(p, "a provider needs a non-empty name");
      out.push_back(ReadOne(r, it.key(), it.value(), p));
    }
  }
  if (!r.ok()) return r.ToStatus();
  return out;
}

}  // namespace kevolve::llm

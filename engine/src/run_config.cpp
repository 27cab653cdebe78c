#include "kevolve/engine/run_config.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "kevolve/core/json_file.h"

namespace kevolve {

nlohmann::json RunConfig::ToJson() const {
  return {{"generations", generations}, {"time_limit_s", time_limit_s}, {"target_fraction", target_fraction},
          {"seed", seed}, {"population", population}, {"islands", islands},
          {"migration_interval", migration_interval}, {"migrants", migrants},
          {"elite_per_island", elite_per_island}, {"seed_samples", seed_samples},
          {"local_search", local_search}, {"shape_parents", shape_parents}, {"operator_mix", operator_mix}, {"timer", timer},
          {"flush", flush},
          {"max_cost_usd", max_cost_usd}, {"llm_wait_s", llm_wait_s}};
}

Status ValidateRunConfig(const RunConfig& c) {
  auto bad = [](const std::string& f, const std::string& w) { return Status::Error("run config: " + f + " " + w); };
  if (c.generations < 0) return bad("generations", "must be >= 0");
  if (c.population < 1) return bad("population", "must be >= 1");
  if (c.islands < 1) return bad("islands", "must be >= 1");
  if (c.migration_interval < 1) return bad("migration_interval", "must be >= 1");
  if (c.elite_per_island < 1) return bad("elite_per_island", "must be >= 1");
  if (c.seed_samples < 1) return bad("seed_samples", "must be >= 1");
  if (c.time_limit_s < 0) return bad("time_limit_s", "must be >= 0");
  if (c.target_fraction < 0 || c.target_fraction > 1.5) return bad("target_fraction", "must be in [0, 1.5]");
  if (c.timer != "events" && c.timer != "cupti") return bad("timer", "must be \"events\" or \"cupti\"");
  if (c.flush != "memset" && c.flush != "read" && c.flush != "none")
    return bad("flush", "must be \"memset\", \"read\" or \"none\"");
  if (c.max_cost_usd < 0) return bad("max_cost_usd", "must be >= 0");
  if (c.shape_parents < 0 || c.shape_parents > 1) return bad("shape_parents", "must be in [0, 1]");
  if ((c.llm_wait_s < 0 && c.llm_wait_s != -1) || c.llm_wait_s > 86400)
    return bad("llm_wait_s", "must be in [0, 86400] seconds, or -1 (wait for the replies)");
  double total = 0;
  for (const auto& [k, v] : c.operator_mix) {
    if (k != "param_tweak" && k != "crossover" && k != "llm_rewrite" && k != "llm_diff")
      return bad("operator_mix." + k, "is no operator (param_tweak, crossover, llm_rewrite, llm_diff)");
    if (v < 0) return bad("operator_mix." + k, "must be >= 0");
    total += v;
  }
  if (total <= 0) return bad("operator_mix", "needs a positive weight");
  return Status::Ok();
}

namespace {

Result<RunConfig> FromJsonImpl(const nlohmann::json& j, const std::string& path) {
  RunConfig c;
  JsonReader r(path);
  r.OnlyKeys(j, {"generations", "time_limit_s", "target_fraction", "seed", "population", "islands",
                 "migration_interval", "migrants", "elite_per_island", "seed_samples", "local_search",
                 "shape_parents", "operator_mix", "timer", "flush", "max_cost_usd", "llm_wait_s"}, "");
  if (j.is_object() && j.contains("arch")) {
    nlohmann::json k = j;
    k.erase("arch");
    return FromJsonImpl(k, path);
  }
  c.generations = static_cast<int>(r.Integer(j, "generations", "", false, c.generations));
  c.time_limit_s = r.Number(j, "time_limit_s", "", false, c.time_limit_s);
  c.target_fraction = r.Number(j, "target_fraction", "", false, c.target_fraction);
  c.seed = static_cast<uint64_t>(r.Integer(j, "seed", "", false, static_cast<int64_t>(c.seed)));
  c.population = static_cast<int>(r.Integer(j, "population", "", false, c.population));
  c.islands = static_cast<int>(r.Integer(j, "islands", "", false, c.islands));
  c.migration_interval = static_cast<int>(r.Integer(j, "migration_interval", "", false, c.migration_interval));
  c.migrants = static_cast<int>(r.Integer(j, "migrants", "", false, c.migrants));
  c.elite_per_island = static_cast<int>(r.Integer(j, "elite_per_island", "", false, c.elite_per_island));
  c.seed_samples = static_cast<int>(r.Integer(j, "seed_samples", "", false, c.seed_samples));
  c.local_search = static_cast<int>(r.Integer(j, "local_search", "", false, c.local_search));
  c.shape_parents = r.Number(j, "shape_parents", "", false, c.shape_parents);
  c.timer = r.String(j, "timer", "", false, c.timer);
  c.flush = r.String(j, "flush", "", false, c.flush);
  c.max_cost_usd = r.Number(j, "max_cost_usd", "", false, c.max_cost_usd);
  c.llm_wait_s = r.Number(j, "llm_wait_s", "", false, c.llm_wait_s);
  if (const Json* mix = r.Field(j, "operator_mix", "", Json::value_t::object, false)) {
    c.operator_mix.clear();
    for (auto it = mix->begin(); it != mix->end(); ++it) {
      if (!it->is_number()) r.Error("operator_mix." + it.key(), "expected a number");
      else c.operator_mix[it.key()] = it->get<double>();
    }
  }
  if (!r.ok()) return r.ToStatus();
  if (Status s = ValidateRunConfig(c); !s.ok()) return Status::Error(path + ": " + s.message());
  return c;
}

}  // namespace

Result<RunConfig> LoadRunConfig(const std::string& path) {
  auto doc = ReadJsonFile(path);
  if (!doc.ok()) return doc.status();
  return FromJsonImpl(*doc, path);
}

Result<RunConfig> RunConfigFromJson(const nlohmann::json& j) {
  // A run stored before shape_parents existed bred from fitness alone: it resumes that way.
  if (j.is_object() && !j.contains("shape_parents")) {
    nlohmann::json k = j;
    k["shape_parents"] = 0.0;
    return FromJsonImpl(k, "the run's stored config");
  }
  return FromJsonImpl(j, "the run's stored config");
}

Result<double> ParseDuration(const std::string& text) {
  double total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.')) ++j;
    if (j == i) return Status::Error("bad duration '" + text + "' (examples: 90s, 30m, 2h, 1h30m)");
    double v = std::stod(text.substr(i, j - i));
    char unit = j < text.size() ? text[j] : 's';
    double scale = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : unit == 'd' ? 86400 : -1;
    if (scale < 0) return Status::Error("bad duration '" + text + "' (examples: 90s, 30m, 2h, 1h30m)");
    total += v * scale;
    any = true;
    i = j < text.size() ? j + 1 : j;
  }
  if (!any) return Status::Error("empty duration");
  return total;
}

std::string FormatDuration(double seconds) {
  long long t = std::llround(std::max(0.0, seconds));
  std::string out;
  for (const auto& [unit, size] : {std::pair<const char*, long long>{"h", 3600}, {"m", 60}, {"s", 1}}) {
    if (t >= size) {
      out += std::to_string(t / size) + unit;
      t %= size;
    }
  }
  return out.empty() ? "0s" : out;
}

std::string OtherStops(const RunConfig& c) {
  std::string also;
  if (c.time_limit_s > 0) also += ", or " + FormatDuration(c.time_limit_s);
  if (c.target_fraction > 0) {
    char t[32];
    std::snprintf(t, sizeof(t), ", or fitness %g", c.target_fraction);
    also += t;
  }
  return also.empty() ? also : " (" + also.substr(2) + ")";
}

}  // namespace kevolve

// The run configuration: defaults from configs/run.json (comments allowed), overridden by
// command-line flags. The effective configuration is stored with the run.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "kevolve/core/status.h"

namespace kevolve {

struct RunConfig {
  int generations = 50;
  double time_limit_s = 0;      // 0 = none
  double target_fraction = 0;   // stop when the best reaches this roofline fraction; 0 = none
  uint64_t seed = 1;
  int population = 32;          // children per generation
  int islands = 4;
  int migration_interval = 5;   // generations between migrations
  int migrants = 2;             // best candidates copied to the next island
  int elite_per_island = 8;
  int seed_samples = 8;         // generation 0: assignments sampled per seed
  int local_search = 6;         // hybrid: param_tweak children for each new source
  // Share of bred children whose parent is a tune shape's champion (the candidate with the
  // smallest median at a randomly drawn shape), so the search also improves the per-shape
  // dispatch table, not only the single kernel with the best geometric mean.
  double shape_parents = 0.25;
  std::map<std::string, double> operator_mix = {{"param_tweak", 0.7}, {"crossover", 0.3}};
  std::string timer = "events"; // events | cupti
  // How the L2 is emptied before every timed repetition: memset (as triton's do_bench; the
  // kernel pays for the write-back of the buffer's dirty lines), read (a cold L2 with no
  // dirty lines) or none.
  std::string flush = "memset";
  double max_cost_usd = 0;      // LLM budget for the whole run, across resumes; 0 = none
  // How long a generation waits for the LLM children asked for during the previous one
  // before it goes ahead without them (they join a later generation, and no new calls
  // start meanwhile). 0: never hold the GPUs for an LLM. -1: wait for them, which makes
  // the proposals depend on the seed and the replies only, not on when replies arrive.
  double llm_wait_s = 0;

  nlohmann::json ToJson() const;
};

// Reads `path` over the built-in defaults. Unknown fields and bad values are errors that
// name the file and the field.
Result<RunConfig> LoadRunConfig(const std::string& path);
Status ValidateRunConfig(const RunConfig& c);
// The configuration stored with a run (RunConfig::ToJson), read back for --resume. A
// stored config without shape_parents (older runs) reads it as 0, as those runs bred.
Result<RunConfig> RunConfigFromJson(const nlohmann::json& j);
// "90s", "30m", "2h", "1h30m" or plain seconds; an error names the text.
Result<double> ParseDuration(const std::string& text);
// Whole seconds as ParseDuration reads them back: 90 -> "1m30s", 7200 -> "2h", 0 -> "0s".
std::string FormatDuration(double seconds);
// The stops besides the generation count, for the run's header line: " (or 1m30s, or
// fitness 0.9)", or empty when there are none.
std::string OtherStops(const RunConfig& c);

}  // namespace kevolve

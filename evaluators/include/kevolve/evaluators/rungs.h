// Rung results and the CPU-side rungs (static, compile) shared by every command.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kevolve/core/candidate.h"
#include "kevolve/core/op_spec.h"
#include "kevolve/evaluators/compiler.h"
#include "kevolve/evaluators/static_check.h"

namespace kevolve {

struct RungResult {
  std::string name;  // static | compile | launch | correctness | timing | fitness | profile
  bool ok = false;
  std::string reason;            // short failure class: "crashed", "timeout", "mismatch", ...
  nlohmann::json metrics = nlohmann::json::object();
  std::string log;               // full text for humans and prompts
  double duration_ms = 0.0;
};

// The rung ladder's order; a candidate stops at its first failed rung.
const std::vector<std::string>& RungOrder();

// One line in the ladder style: "[compile] ok regs=32 smem=0 spills=0 time_ms=140",
// or "[compile] FAILED ..." followed by the indented log when `with_log`.
std::string FormatRung(const RungResult& r, bool with_log = true);

// A timing's occupancy (its protocol's "occupancy": one entry per launch), e.g.
// "blocks/SM=3 clusters=21x16"; entries are named when there are several; "" when none.
std::string FormatOccupancy(const nlohmann::json& protocol);

// Parses the candidate, checks its names against the op, the assignment (allowed values,
// requirements), the includes and the size. On success fills *parsed.
RungResult StaticRung(const OpSpec& op, DType dtype, const std::string& name, const std::string& text,
                      const Assignment& params, CandidateSource* parsed, const StaticLimits& limits = {});

CompileRequest MakeCompileRequest(const CandidateSource& c, const Assignment& params, DType dtype,
                                  const std::string& arch);
RungResult CompileRung(const CompileResult& r);

}  // namespace kevolve

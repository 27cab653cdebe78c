// Exporting survivors: each one re-checked on the op's held-out shapes first (a survivor
// that fails there is reported and skipped), then written to its own folder with
// everything needed to reuse it or re-check the claim:
//   kernel.cu (parameters baked in), launch.json, kernel.ptx, kernel.cubin, kernel.sass
//   (when cuobjdump exists), resources.json, metrics.json, lineage.json, README.md,
//   and with `profile` an Nsight Compute report (profile.ncu-rep) plus ncu_summary.txt.
// The export folder gets a README.md table of all survivors.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kevolve/db/store.h"
#include "kevolve/engine/pipeline.h"

namespace kevolve {

struct ExportOptions {
  int64_t run_id = 0;
  int top = 3;
  std::string out_dir;
  bool profile = false;
  // Also export the fastest survivor of each tune shape (held-out gated) and write
  // dispatch.json, mapping each shape to its folder.
  bool per_shape = false;
  // Per-shape picks: time the `confirm` fastest candidates of each shape again (0: take the
  // search's medians as they are) and pick, and report, by the new medians.
  int confirm = 3;
};

// Returns how many survivors were exported. `pipeline` must be for the run's op and
// dtype and have a GPU executor (the held-out gate runs on the GPU).
Result<int> ExportRun(db::Store& store, Pipeline& pipeline, const ExportOptions& options);

// launch.json of an exported kernel: the launch expressions (grid, block, smem, cluster),
// their values and the scratch sizes at each tune shape on a GPU of `num_sms` SMs (the
// exporting device's; expressions may read num_sms), the argument order, the scratch
// contract and the driver opt-ins a launch needs. A shape whose values cannot be
// computed (num_sms 0 while an expression reads it, an unmet requirement) gets "error".
nlohmann::json LaunchJson(const std::string& text, const std::string& name, const Assignment& params, const OpSpec& op,
                          DType dtype, const std::string& arch, int num_sms);

// The candidate's source with every parameter fixed ("#define NAME VALUE" lines and
// single-valued @kevolve param directives; preset directives dropped), its dtype macros (unless the compiler defines
// another dtype) and `#include "kevolve.h"`, so that the file compiles on its own next to
// kevolve.h; kevolve itself still compiles it (one parameter value each, same dtype).
std::string BakeParameters(const std::string& source, const Assignment& params, DType dtype);

}  // namespace kevolve

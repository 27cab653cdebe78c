// The fitness rung: roofline time per tune shape from the op's cost model and the
// device's measured ceilings, the fraction achieved, and their geometric mean.
#pragma once

#include <string>
#include <vector>

#include "kevolve/evaluators/protocol.h"
#include "kevolve/evaluators/rungs.h"

namespace kevolve {

struct ShapeFraction {
  std::string shape;
  double roofline_us = 0;
  double median_us = 0;
  double fraction = 0;       // roofline_us / median_us
  std::string bound;         // "memory" or "compute"
};

struct FitnessResult {
  double fitness = 0;        // geometric mean of the fractions
  std::vector<ShapeFraction> shapes;
  bool suspect = false;      // some median below suspect_ratio x its roofline
  std::string suspect_shape;
};

// roofline_time = max(bytes / bandwidth, flops / peak); fraction = roofline / median.
// Timings carry their bytes and flops. A median below `suspect_ratio` of the roofline
// is physically impossible: the result is flagged suspect.
FitnessResult ComputeFitness(const std::vector<ShapeTiming>& timings, const Calibration& cal,
                             double suspect_ratio = 0.9);

// The fitness rung as it appears in the ladder; fails as "suspect" when flagged.
RungResult FitnessRung(const FitnessResult& f);

// Fixed cost against steady state, over shapes that differ in one size only (say
// 512x131072, 1024x131072 and 2048x131072): the least-squares line
// median_us = fixed_us + roofline_us / steady through their (roofline_us, median_us).
// `steady` is the fraction of the roofline the kernel keeps per extra unit of work, and
// `fixed_us` what a launch costs on top of it (launch, ramp, drain, a last partial wave).
// One fit per such family of two or more shapes with the same bound; a shape can be in
// one family per size. Families whose line does not rise (steady <= 0) are left out.
struct ScalingFit {
  std::vector<std::string> shapes;  // in the order timed
  size_t varies = 0;                // index of the size that differs, in the label's order
  double steady = 0;
  double fixed_us = 0;
  double max_residual_us = 0;       // the line's worst miss (0 for two shapes)
  std::string bound;
};
std::vector<ScalingFit> ScalingFits(const FitnessResult& f);

}  // namespace kevolve

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

}  // namespace kevolve

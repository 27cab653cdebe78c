// How the L2 is split between SMs, read from probe latencies (Evaluator::Calibrate runs
// the probes on the GPU; this part is pure, so CPU tests feed it synthetic latencies).
//
// Hopper's L2 is two partitions joined by a fabric. Every line is owned by one partition;
// an SM's load of a line its own partition neither owns nor holds a copy of crosses the
// fabric, and an L2 hit then takes about 450 cycles against 280 on the H200. The probe:
// flush the L2, let a reference SM read a set of lines (they land in the owning partition,
// and the reference side keeps a copy of the far ones), then time one load of each line
// from another SM. An SM beside the reference sees every line near; an SM on the other
// side sees the lines the reference side owns as far, about half of them.
#pragma once

#include <vector>

namespace kevolve {

struct L2SideProbe {
  int sm = -1;                 // the probing SM's id
  std::vector<double> cycles;  // one timed load per line; empty when the SM was not found
};

struct L2Sides {
  bool split = false;          // two groups of SMs found
  std::vector<int> side;       // per SM id: 0 beside the reference SM, 1 the other side,
                               // -1 not probed or no owner pattern (every line slow, say)
  int count[2] = {0, 0};       // SMs on each side
  double near_cycles = 0;      // median latency of the fast loads
  double far_cycles = 0;       // median latency of the other side's slow loads
  double threshold = 0;        // a load slower than this counts as slow (crossed the fabric
                               // when split); computed whether or not the SMs split
};

// A load is slow above 1.3 times the median over SMs of their fastest tenth (every SM has
// near lines). An SM with over 90% of its loads slow is on neither side; the others split
// at the widest gap (at least 0.15) between their shares of slow loads: the larger shares
// across the fabric, the smaller beside the reference.
L2Sides ClassifyL2Sides(const std::vector<L2SideProbe>& probes);

// The ownership granule of lines line_bytes apart, starting at an address aligned to it:
// the largest power of two (in lines, at most a quarter of them) that three in four owner
// changes fall on, single-line outliers (a near load delayed) ignored; in bytes. 0 when
// the lines change owner fewer than four times.
long long L2OwnerGranule(const std::vector<double>& cycles, long long line_bytes, double threshold);

}  // namespace kevolve

// The fitness rung: roofline time per tune shape, the fraction of it achieved, and the
// geometric mean of the fractions.
//
// A shape whose cost model gives neither bytes nor flops (or whose device ceilings are
// missing) has roofline 0, bound "none" and fraction 0, which makes the fitness 0.
#include "kevolve/evaluators/fitness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <utility>

namespace kevolve {

namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

// "512x131072" -> {512, 131072}; empty when the label is not sizes joined by 'x'.
std::vector<long long> LabelSizes(const std::string& label) {
  std::vector<long long> out;
  size_t i = 0;
  while (i <= label.size()) {
    size_t j = label.find('x', i);
    if (j == std::string::npos) j = label.size();
    const std::string part = label.substr(i, j - i);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) return {};
    out.push_back(std::atoll(part.c_str()));
    i = j + 1;
  }
  return out;
}

}  // namespace

std::vector<ScalingFit> ScalingFits(const FitnessResult& f) {
  std::vector<ScalingFit> fits;
  std::vector<std::vector<long long>> sizes;
  for (const ShapeFraction& s : f.shapes) sizes.push_back(LabelSizes(s.shape));
  size_t dims = 0;
  for (const auto& z : sizes) dims = std::max(dims, z.size());
  for (size_t d = 0; d < dims; ++d) {
    // Shapes with the same other sizes and the same bound form a family along size d.
    std::map<std::pair<std::vector<long long>, std::string>, std::vector<size_t>> families;
    std::vector<std::pair<std::vector<long long>, std::string>> order;
    for (size_t i = 0; i < f.shapes.size(); ++i) {
      const ShapeFraction& s = f.shapes[i];
      if (sizes[i].size() != dims || s.roofline_us <= 0 || s.median_us <= 0) continue;
      std::vector<long long> others = sizes[i];
      others.erase(others.begin() + static_cast<long>(d));
      auto key = std::make_pair(others, s.bound);
      if (!families.count(key)) order.push_back(key);
      families[key].push_back(i);
    }
    for (const auto& key : order) {
      const std::vector<size_t>& members = families[key];
      if (members.size() < 2) continue;
      double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
      for (size_t i : members) {
        const double x = f.shapes[i].roofline_us, y = f.shapes[i].median_us;
        n += 1;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
      }
      const double den = n * sxx - sx * sx;
      if (den <= 0) continue;  // one roofline for all: no line
      const double slope = (n * sxy - sx * sy) / den, fixed = (sy - slope * sx) / n;
      if (slope <= 0) continue;
      ScalingFit fit;
      fit.varies = d;
      fit.steady = 1.0 / slope;
      fit.fixed_us = fixed;
      fit.bound = key.second;
      for (size_t i : members) {
        fit.shapes.push_back(f.shapes[i].shape);
        fit.max_residual_us = std::max(
            fit.max_residual_us, std::abs(f.shapes[i].median_us - (fixed + slope * f.shapes[i].roofline_us)));
      }
      fits.push_back(std::move(fit));
    }
  }
  return fits;
}

FitnessResult ComputeFitness(const std::vector<ShapeTiming>& timings, const Calibration& cal, double suspect_ratio) {
  FitnessResult f;
  double log_sum = 0;
  bool any_zero = false;
  for (const ShapeTiming& t : timings) {
    ShapeFraction s;
    s.shape = t.shape;
    s.median_us = t.median_us;
    double mem_us = 0, comp_us = 0;
    if (cal.copy_gbps > 0 && t.bytes > 0) mem_us = t.bytes / (cal.copy_gbps * 1e9) * 1e6;
    if (cal.fp32_gflops > 0 && t.flops > 0) comp_us = t.flops / (cal.fp32_gflops * 1e9) * 1e6;
    s.roofline_us = std::max(mem_us, comp_us);
    if (s.roofline_us <= 0) s.bound = "none";
    else s.bound = mem_us >= comp_us ? "memory" : "compute";
    s.fraction = t.median_us > 0 ? s.roofline_us / t.median_us : 0.0;
    if (s.fraction > 0) log_sum += std::log(s.fraction);
    else any_zero = true;
    if (!f.suspect && s.roofline_us > 0 && t.median_us < suspect_ratio * s.roofline_us) {
      f.suspect = true;
      f.suspect_shape = t.shape;
    }
    f.shapes.push_back(std::move(s));
  }
  if (!f.shapes.empty() && !any_zero) f.fitness = std::exp(log_sum / static_cast<double>(f.shapes.size()));
  return f;
}

RungResult FitnessRung(const FitnessResult& f) {
  RungResult r;
  r.name = "fitness";
  nlohmann::json shapes = nlohmann::json::array();
  double min_fraction = 0, max_fraction = 0;
  std::ostringstream log;
  for (size_t i = 0; i < f.shapes.size(); ++i) {
    const ShapeFraction& s = f.shapes[i];
    shapes.push_back({{"shape", s.shape},
                      {"roofline_us", s.roofline_us},
                      {"median_us", s.median_us},
                      {"fraction", s.fraction},
                      {"bound", s.bound}});
    min_fraction = i == 0 ? s.fraction : std::min(min_fraction, s.fraction);
    max_fraction = i == 0 ? s.fraction : std::max(max_fraction, s.fraction);
    log << s.shape << ": median " << Num(s.median_us) << " us, roofline " << Num(s.roofline_us) << " us ("
        << s.bound << "-bound), fraction " << Num(s.fraction) << "\n";
  }
  r.metrics = {{"fitness", f.fitness},
               {"shapes", shapes},
               {"min_fraction", min_fraction},
               {"max_fraction", max_fraction}};
  if (f.shapes.empty()) {
    r.ok = false;
    r.reason = "no_timings";
    r.log = "no timings: there is no tune shape to compute a fitness from";
    return r;
  }
  if (f.suspect) {
    r.ok = false;
    r.reason = "suspect";
    std::ostringstream why;
    why << "shape " << f.suspect_shape;
    for (const ShapeFraction& s : f.shapes) {
      if (s.shape != f.suspect_shape) continue;
      why << ": median " << Num(s.median_us) << " us is below its roofline of " << Num(s.roofline_us) << " us ("
          << s.bound << "-bound, fraction " << Num(s.fraction) << ")";
      break;
    }
    why << ". Faster than the device's measured ceilings is physically impossible: a broken measurement or a "
           "cheat (work skipped, cached or done outside the timed launches).\n"
        << log.str();
    r.log = why.str();
    return r;
  }
  r.ok = true;
  r.log = log.str();
  return r;
}

}  // namespace kevolve

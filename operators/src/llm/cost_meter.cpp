// Spend tracking against --max-cost.
#include <mutex>

#include "kevolve/operators/llm/provider.h"

namespace kevolve::llm {

bool CostMeter::Allow() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_usd_ <= 0 || spent_ < max_usd_;
}

void CostMeter::Add(double usd) {
  std::lock_guard<std::mutex> lock(mu_);
  spent_ += usd;
}

double CostMeter::spent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spent_;
}

}  // namespace kevolve::llm

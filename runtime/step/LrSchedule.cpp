//===- LrSchedule.cpp - The learning rate of each step --------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "step/LrSchedule.h"

#include <algorithm>
#include <cmath>

namespace ztrt {

bool LrSchedule::parseKind(const std::string &name, Kind &kind) {
  if (name == "constant")
    kind = Kind::Constant;
  else if (name == "cosine")
    kind = Kind::Cosine;
  else if (name == "linear")
    kind = Kind::Linear;
  else
    return false;
  return true;
}

const char *LrSchedule::kindName(Kind kind) {
  switch (kind) {
  case Kind::Constant:
    return "constant";
  case Kind::Cosine:
    return "cosine";
  case Kind::Linear:
    return "linear";
  }
  return "?";
}

double LrSchedule::at(double compiled, int64_t t) const {
  const double base = lr.value_or(compiled);
  if (warmup > 0 && t <= warmup) {
    if (logWarmup) // DeepSpeed: 1 / ln(max(2, W)), times ln(i + 1)
      return base * std::log(static_cast<double>(t)) /
             std::log(static_cast<double>(std::max<int64_t>(2, warmup)));
    return base * static_cast<double>(t) / static_cast<double>(warmup);
  }
  if (kind == Kind::Constant)
    return base;
  double p = 1.0;
  if (decaySteps > warmup)
    p = std::clamp(static_cast<double>(t - warmup) /
                       static_cast<double>(decaySteps - warmup),
                   0.0, 1.0);
  const double pi = 3.14159265358979323846;
  const double shape = kind == Kind::Cosine ? 0.5 * (1.0 + std::cos(pi * p))
                                            : 1.0 - p;
  const double floor = minLrRatio ? *minLrRatio * base : minLr;
  return floor + (base - floor) * shape;
}

} // namespace ztrt

//===- LossScaler.cpp - Dynamic loss scaling for fp16 ---------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "step/LossScaler.h"

#include <algorithm>
#include <cmath>

namespace ztrt {

LossScaler::LossScaler(const LossScalePolicy &policy) : policy_(policy) {
  state_.scale = policy.init;
  state_.hysteresis = policy.hysteresis;
}

bool LossScaler::restore(const State &s) {
  // Every reachable scale is init * 2^k >= min (or min itself), finite.
  if (!(s.scale >= policy_.min) || !std::isfinite(s.scale) || s.iter < 0 ||
      s.lastOverflowIter < -1 || s.lastOverflowIter >= s.iter ||
      s.hysteresis < 1 || s.hysteresis > policy_.hysteresis ||
      s.skipped < 0 || s.skipped > s.iter)
    return false;
  state_ = s;
  return true;
}

LossScaler::Outcome LossScaler::update(bool overflow) {
  constexpr double factor = 2.0;
  State &s = state_;
  if (overflow) {
    if (policy_.hysteresis == 1 || s.hysteresis == 1) {
      if (s.scale == policy_.min)
        return Outcome::AtMinimum;
      s.scale = std::max(s.scale / factor, policy_.min);
    } else {
      --s.hysteresis;
    }
    s.lastOverflowIter = s.iter;
    ++s.skipped;
    ++s.iter;
    return Outcome::Skipped;
  }
  // DeepSpeed through 2024 (and Megatron-LM's scaler it was taken from):
  // the scale doubles on the window-th consecutive clean step. (A later
  // DeepSpeed revision waits one step more; docs/mixed-precision.md.)
  if ((s.iter - s.lastOverflowIter) % policy_.window == 0) {
    s.hysteresis = policy_.hysteresis;
    s.scale *= factor;
  }
  ++s.iter;
  return Outcome::Applied;
}

} // namespace ztrt

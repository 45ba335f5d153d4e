//===- LrSchedule.h - The learning rate of each step ------------*- C++ -*-===//
//
// Part of ztrain's runtime.
//
// The executable's --lr, --lr-schedule, --warmup-steps, --min-lr and
// --lr-decay-steps. With t the optimizer step (1-based; a step skipped by
// loss scaling does not count), W the warmup steps and T the decay steps:
//
//   t <= W (W > 0):  lr * t / W                      (linear warmup)
//                    lr * ln t / ln max(W, 2)        (--warmup-type log)
//   constant:        lr
//   cosine:          min + (lr - min) * (1 + cos(pi p)) / 2
//   linear:          min + (lr - min) * (1 - p)
//
// where p = (t - W) / (T - W) clamped to [0, 1] (1 when T <= W): PyTorch's
// and Hugging Face's warmup + cosine / linear decay, with the warmup
// counted from the first step (step 1 already takes lr / W). The log warmup
// is DeepSpeed's WarmupLR default (warmup_type "log"; its iteration i is
// step t = i + 1, so step 1 takes 0 and step W the full rate).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_STEP_LRSCHEDULE_H
#define ZTRT_STEP_LRSCHEDULE_H

#include <cstdint>
#include <optional>
#include <string>

namespace ztrt {

struct LrSchedule {
  enum class Kind { Constant, Cosine, Linear };
  /// --lr: replaces the compiled learning rate.
  std::optional<double> lr;
  Kind kind = Kind::Constant;
  int64_t warmup = 0;
  /// How the warmup rises: linearly (the default) or as DeepSpeed's "log".
  bool logWarmup = false;
  double minLr = 0.0;
  /// When set, the decay ends at this fraction of the learning rate instead
  /// of minLr (DeepSpeed's WarmupCosineLR cos_min_ratio, --config).
  std::optional<double> minLrRatio;
  /// T; 0: not set yet (the driver sets the run's last step).
  int64_t decaySteps = 0;

  /// "constant" / "cosine" / "linear" -> kind; false for anything else.
  static bool parseKind(const std::string &name, Kind &kind);
  static const char *kindName(Kind kind);

  /// The learning rate of optimizer step t (>= 1) given the compiled one.
  double at(double compiled, int64_t t) const;
  /// True when the schedule may change the learning rate from step to step
  /// or --lr replaced it (the progress line then shows it).
  bool visible() const { return lr || kind != Kind::Constant || warmup > 0; }
};

} // namespace ztrt

#endif // ZTRT_STEP_LRSCHEDULE_H

//===- LossScaler.h - Dynamic loss scaling for fp16 -------------*- C++ -*-===//
//
// Part of ztrain's runtime.
//
// The scale an fp16 step seeds its backward pass with, and how it moves:
// DeepSpeed's DynamicLossScaler (deepspeed/runtime/fp16/loss_scaler.py,
// update_scale, with consecutive_hysteresis off), rule for rule. The
// compiler places the overflow check and ztrt_update_loss_scale in the step
// (train.update_loss_scale); this class is the host-side state machine
// behind that call. It has no backend or MPI dependency, so the sequence of
// scales for a sequence of overflows is unit-testable.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_STEP_LOSSSCALER_H
#define ZTRT_STEP_LOSSSCALER_H

#include <cstdint>

namespace ztrt {

/// The numbers of the policy (the descriptor's `loss_scale` record).
struct LossScalePolicy {
  double init = 65536.0;
  int64_t window = 1000;
  int64_t hysteresis = 2;
  double min = 1.0;
};

class LossScaler {
public:
  /// Everything that evolves, for checkpoints: restoring it makes the
  /// scaler continue exactly as if the run had not stopped.
  struct State {
    double scale = 0.0;
    /// Steps the scaler has seen (DeepSpeed's cur_iter).
    int64_t iter = 0;
    /// The iteration of the last overflow, -1 before the first.
    int64_t lastOverflowIter = -1;
    /// Overflows still tolerated before the scale is lowered.
    int64_t hysteresis = 0;
    /// Steps skipped so far (their optimizer updates did not run).
    int64_t skipped = 0;
  };

  explicit LossScaler(const LossScalePolicy &policy);

  /// The scale the next step's backward pass uses.
  double scale() const { return state_.scale; }
  const State &state() const { return state_; }
  const LossScalePolicy &policy() const { return policy_; }
  /// Continues from a checkpointed state; false (nothing changed) when the
  /// state is not one this policy can reach.
  bool restore(const State &state);

  /// The outcome of one step.
  enum class Outcome {
    Applied,     ///< no overflow: the update ran (the scale may have doubled)
    Skipped,     ///< overflow: the update was skipped, the scale lowered or
                 ///< the hysteresis used
    AtMinimum,   ///< overflow at the minimum scale with no hysteresis left:
                 ///< training cannot go on (DeepSpeed raises)
  };
  /// DeepSpeed's update_scale(overflow). On AtMinimum the state is left as
  /// it was.
  Outcome update(bool overflow);

private:
  LossScalePolicy policy_;
  State state_;
};

} // namespace ztrt

#endif // ZTRT_STEP_LOSSSCALER_H

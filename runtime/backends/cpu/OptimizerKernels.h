//===- OptimizerKernels.h - Optimizer updates, shared by the CPU builds -*- C++ -*-===//
//
// Part of ztrain's runtime. The SGD and Adam / AdamW element loops, compiled
// into the baseline backend (backends/cpu/CpuOptimizer.cpp, every element type and the
// master-weight forms) and into the AVX-512 kernels (backends/cpu/IsaKernelsAvx512.cpp,
// f32). One source, so both builds evaluate the same operations in the same
// order: the updates are bitwise equal (IsaKernelTest), and so are states
// updated on the host and on the device (the cuda backend's kernels follow
// the same formula).
//
// The scalars (backends/cpu/IsaKernels.h's SgdConstants / AdamConstants) are rounded
// to float once by the caller, from the run's double hyper-parameters, as
// PyTorch's CPU kernels round each Python scalar before it meets a tensor.
// Everything here is in an anonymous namespace for the reason RowKernels.h
// gives: each translation unit compiles its own copy for its own ISA.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CPU_OPTIMIZERKERNELS_H
#define ZTRT_BACKENDS_CPU_OPTIMIZERKERNELS_H

#include "backends/cpu/IsaKernels.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace ztrt {
namespace {
namespace optkernels {

/// torch.optim.SGD's single-tensor path. T is the parameter and state type,
/// G the gradient's (widened as it is read), P the parameter that receives
/// the new value rounded once in the master-weight form (void: none).
template <typename T, typename G = T, typename P = void>
void sgd(T *param, const G *grad, T *momentumBuf, int64_t n,
         const SgdConstants &c, P *rounded = nullptr) {
  const float negLr = c.negLr, momentum = c.momentum, keep = c.keep,
              decay = c.decay, unscale = c.unscale;
  const bool useMomentum = c.useMomentum, first = c.first,
             nesterov = c.nesterov;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    float d = static_cast<float>(grad[i]) * unscale;
    const float p = static_cast<float>(param[i]);
    if (decay != 0.0f)
      d = d + decay * p;
    if (useMomentum) {
      float buf =
          first ? d : static_cast<float>(momentumBuf[i]) * momentum + keep * d;
      momentumBuf[i] = static_cast<T>(buf);
      d = nesterov ? d + momentum * buf : buf;
    }
    const float updated = p + negLr * d;
    param[i] = static_cast<T>(updated);
    if constexpr (!std::is_void_v<P>)
      rounded[i] = static_cast<P>(updated);
  }
}

/// torch.optim.Adam / AdamW (1.13) single-tensor path; T, G, P as in sgd.
template <typename T, typename G = T, typename P = void>
void adam(T *param, const G *grad, T *expAvg, T *expAvgSq, int64_t n,
          const AdamConstants &c, P *rounded = nullptr) {
  const float negStepSize = c.negStepSize, bias2Sqrt = c.bias2Sqrt,
              beta1 = c.beta1, beta2 = c.beta2,
              oneMinusBeta1 = c.oneMinusBeta1,
              oneMinusBeta2 = c.oneMinusBeta2, eps = c.eps, decay = c.decay,
              shrink = c.shrink, unscale = c.unscale;
  const bool decoupled = c.decoupled;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    float g = static_cast<float>(grad[i]) * unscale;
    float p = static_cast<float>(param[i]);
    if (decoupled)
      p = p * shrink;
    else if (decay != 0.0f)
      g = g + decay * p;
    const float m = static_cast<float>(expAvg[i]) * beta1 + oneMinusBeta1 * g;
    const float v =
        static_cast<float>(expAvgSq[i]) * beta2 + oneMinusBeta2 * g * g;
    expAvg[i] = static_cast<T>(m);
    expAvgSq[i] = static_cast<T>(v);
    const float denom = std::sqrt(v) / bias2Sqrt + eps;
    const float updated = p + negStepSize * m / denom;
    param[i] = static_cast<T>(updated);
    if constexpr (!std::is_void_v<P>)
      rounded[i] = static_cast<P>(updated);
  }
}

} // namespace optkernels
} // namespace
} // namespace ztrt

#endif // ZTRT_BACKENDS_CPU_OPTIMIZERKERNELS_H

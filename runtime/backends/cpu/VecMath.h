//===- VecMath.h - Vectorizable float math for the CPU kernels --*- C++ -*-===//
//
// Part of the ztrain project.
//
// libm's tanhf is a scalar call the compiler cannot vectorize; in a GPT step
// it cost more time than all non-GEMM kernels together. These are the
// Cephes single-precision algorithms (range reduction + minimax polynomials),
// written without branches or calls so that loops calling them vectorize.
// Accuracy: a few float ulp over the whole range (tested against libm in
// runtime/tests/VecMathTest.cpp).
//
// The cuda backend's kernels include this header too (ZTRT_HD makes the
// functions __host__ __device__ under nvcc), so that gelu and its gradient
// round exactly as on the cpu: both are pure float arithmetic, and the
// CUDA kernels are compiled without FMA contraction (--fmad=false).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CPU_VECMATH_H
#define ZTRT_BACKENDS_CPU_VECMATH_H

#include "base/HostDevice.h" // ZTRT_HD

#include <cmath>
#include <cstdint>
#include <cstring>

// The functions' linkage. backends/cpu/IsaKernels*.cpp compile this header for a
// wider vector ISA and define ZTRT_VECMATH_INTERNAL, so that their copies
// have internal linkage: the linker can then never substitute an AVX-512
// copy of an inline function for the baseline one (or the reverse).
#ifdef ZTRT_VECMATH_INTERNAL
#define ZTRT_VM static inline
#else
#define ZTRT_VM ZTRT_HD inline
#endif

namespace ztrt::vecmath {

/// exp(x) for x in [-87, 0] (clamped below): Cephes expf.
ZTRT_VM float expNonPositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  float t = x * 1.44269504088896341f + 0.5f;
  // NaN: any n will do (x carries the NaN into r), and converting a NaN
  // to an integer is undefined behaviour (UBSan).
  t = t == t ? t : 0.0f;
  // floor(t), exactly, both ways (|t| < 2^24): with SSE4.1's round
  // instruction std::floor vectorizes (and the integer route does not
  // under AVX); without it the integer route does.
#if defined(__SSE4_1__) && !defined(__CUDA_ARCH__)
  float fx = std::floor(t);
  int32_t n = static_cast<int32_t>(fx);
#else
  int32_t n = static_cast<int32_t>(t);
  n -= t < static_cast<float>(n); // floor for negative t
  float fx = static_cast<float>(n);
#endif
  // x - n * ln(2), with ln(2) split in two for exactness.
  float r = x - fx * 0.693359375f - fx * -2.12194440e-4f;
  float r2 = r * r;
  float p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r +
               8.3334519073e-3f) *
                  r +
              4.1665795894e-2f) *
                 r +
             1.6666665459e-1f) *
                r +
            5.0000001201e-1f;
  float y = p * r2 + r + 1.0f;
  int32_t bits = (n + 127) << 23; // 2^n; n >= -126 after the clamp
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

/// exp(x) for x <= 0 where x below expNonPositive's clamp gives 0, as
/// libm's expf does for x < -103.97 (and -inf): softmax's exponentials of
/// entries at or below max - 87, whose share of the row sum is below a
/// float's resolution (e^-87 < 2^-125). NaN stays NaN.
ZTRT_VM float expShifted(float x) {
  float y = expNonPositive(x);
  return x < -87.0f ? 0.0f : y;
}

/// tanh(x): Cephes tanhf. |x| < 0.625: odd minimax polynomial; otherwise
/// (1 - e) / (1 + e) with e = exp(-2|x|), which has no cancellation there.
ZTRT_VM float tanh(float x) {
  float a = std::fabs(x);
  float e = expNonPositive(-2.0f * a);
  float large = (1.0f - e) / (1.0f + e);
  float z = x * x;
  float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z -
                   5.37397155531e-2f) *
                      z +
                  1.33314422036e-1f) *
                     z -
                 3.33332819422e-1f) *
                    z * a +
                a;
  return std::copysign(a < 0.625f ? small : large, x);
}

// GELU with the tanh approximation, evaluated in float in the order of
// PyTorch's GeluKernel.cpp (approximate='tanh').
constexpr float kGeluBeta = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;

ZTRT_VM float gelu(float v) {
  float inner = kGeluBeta * (v + kGeluKappa * v * v * v);
  return 0.5f * v * (1.0f + tanh(inner));
}

/// dy * gelu'(v).
ZTRT_VM float geluGrad(float dy, float v) {
  float vSq = v * v;
  float inner = kGeluBeta * (v + kGeluKappa * vSq * v);
  float t = tanh(inner);
  float left = 0.5f * v;
  float right = 1.0f + t;
  float leftDerivative = 0.5f * right;
  float rightDerivative =
      left * (1.0f - t * t) * kGeluBeta * (1.0f + 3.0f * kGeluKappa * vSq);
  return dy * (leftDerivative + rightDerivative);
}

// The exact GELU (PyTorch approximate='none'), in the float order of
// GeluKernel.cpp: x * 0.5 * (1 + erf(x * M_SQRT1_2)); erf is the platform's
// erff, so a device may differ from the host in the last bit, as exp.
constexpr float kGeluErfAlpha = 0.70710678118654752440f;  // 1 / sqrt(2)
constexpr float kGeluErfBeta = 0.39894228040143267794f;   // 1 / sqrt(2 pi)

ZTRT_VM float geluErf(float v) {
  return v * 0.5f * (1.0f + std::erf(v * kGeluErfAlpha));
}

/// dy * erf'(v), in the order of PyTorch's erf backward formula.
constexpr float kTwoOverSqrtPi = 1.12837916709551257390f;
ZTRT_VM float erfGrad(float dy, float v) {
  return kTwoOverSqrtPi * std::exp(-(v * v)) * dy;
}

/// dy * gelu_erf'(v): cdf + v * pdf, as GeluBackward's CPU kernel.
ZTRT_VM float geluErfGrad(float dy, float v) {
  float cdf = 0.5f * (1.0f + std::erf(v * kGeluErfAlpha));
  float pdf = std::exp(-0.5f * v * v) * kGeluErfBeta;
  return dy * (cdf + v * pdf);
}

// The activations of Llama-class models, in PyTorch's float order
// (aten/src/ATen/native/cpu/UnaryOpsKernel.cpp, Activation.cpp): exp is
// the platform's expf, so a device's result may differ from the host's by
// the last bit (the conformance tests allow that; gelu alone is
// polynomial and bitwise equal).
ZTRT_VM float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

/// dy * (1 - y) * y with y = sigmoid(x).
ZTRT_VM float sigmoidGrad(float dy, float y) {
  return dy * (1.0f - y) * y;
}

ZTRT_VM float silu(float v) { return v / (1.0f + std::exp(-v)); }

/// dy * silu'(x) = dy * s * (1 + x * (1 - s)), s = sigmoid(x).
ZTRT_VM float siluGrad(float dy, float v) {
  float s = 1.0f / (1.0f + std::exp(-v));
  return dy * s * (1.0f + v * (1.0f - s));
}

ZTRT_VM float rsqrt(float v) { return 1.0f / std::sqrt(v); }

/// -0.5 * dy * y^3 with y = rsqrt(x) (PyTorch's rsqrt backward).
ZTRT_VM float rsqrtGrad(float dy, float y) {
  return (-0.5f * dy) * (y * y * y);
}

/// Llama 3's RoPE frequency scaling (transformers' rope_type "llama3"):
/// factor 0 is none (a factor of 1 is the llama3 rule with factor 1, which
/// transformers applies, blend included). Wavelengths longer than
/// original / low stretch by `factor`, shorter than original / high stay,
/// and those between blend.
struct RopeScaling {
  double factor = 0.0, lowFreqFactor = 1.0, highFreqFactor = 4.0,
         originalMaxPositions = 8192.0;
};

/// RoPE's frequency of pair `i` of a head of `dim` channels: inv = 1 /
/// theta^(2i / dim) in float, the power taken in double and rounded once;
/// then, with scaling, transformers' _compute_llama3_parameters step by
/// step as CPU torch evaluates it in float32: a Python scalar in tensor
/// arithmetic is rounded to float, `scalar / tensor` is `tensor.reciprocal()
/// * scalar` (Tensor.__rtruediv__), `tensor / scalar` a true division.
ZTRT_VM float ropeInvFreq(int64_t i, int64_t dim, double theta,
                          const RopeScaling &scaling) {
  float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
  float power = static_cast<float>(
      std::pow(static_cast<double>(static_cast<float>(theta)),
               static_cast<double>(exponent)));
  float inv = 1.0f / power;
  if (scaling.factor == 0.0)
    return inv;
  const float factor = static_cast<float>(scaling.factor);
  const float low = static_cast<float>(scaling.lowFreqFactor);
  const float old = static_cast<float>(scaling.originalMaxPositions);
  const float lowWavelen =
      static_cast<float>(scaling.originalMaxPositions / scaling.lowFreqFactor);
  const float highWavelen =
      static_cast<float>(scaling.originalMaxPositions / scaling.highFreqFactor);
  const float wavelen =
      (1.0f / inv) * static_cast<float>(2.0 * 3.141592653589793);
  const float scaled = wavelen > lowWavelen ? inv / factor : inv;
  if (wavelen < highWavelen || wavelen > lowWavelen)
    return scaled;
  const float smooth =
      ((1.0f / wavelen) * old - low) /
      static_cast<float>(scaling.highFreqFactor - scaling.lowFreqFactor);
  return (1.0f - smooth) * scaled / factor + smooth * scaled;
}

/// cos and sin of RoPE's angle for position `t` and pair `i`: a = t * inv
/// in float (ropeInvFreq), as Hugging Face's LlamaRotaryEmbedding computes
/// it in float32; the cosine and sine are taken in double and rounded once,
/// so every backend gets the same bits.
ZTRT_VM void ropeCosSin(int64_t t, int64_t i, int64_t dim, double theta,
                        const RopeScaling &scaling, float &c, float &s) {
  float a = static_cast<float>(t) * ropeInvFreq(i, dim, theta, scaling);
  c = static_cast<float>(std::cos(static_cast<double>(a)));
  s = static_cast<float>(std::sin(static_cast<double>(a)));
}

} // namespace ztrt::vecmath

#endif // ZTRT_BACKENDS_CPU_VECMATH_H

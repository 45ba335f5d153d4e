//===- Optimizer.cpp - Entry points: the optimizer updates ----------------===//
//
// Part of ztrain's runtime. The entry points of ztrt_abi.def's "Optimizer
// updates": SGD and Adam(W), plain and with an f32 master, after the loss
// scaler's, clipping's and gradient accumulation's say; on the host step
// for host-placed states (ztrt_update_async / ztrt_update_wait).
//
//===----------------------------------------------------------------------===//

#include "ztrt.h"

#include "abi/Checks.h"
#include "base/Support.h"
#include "step/Context.h"

#include <cstdint>

using namespace ztrt;
using namespace ztrt::abi;

namespace {

/// A master-weight update writes the master and the parameter element by
/// element, in parallel: a parameter stored over its master would
/// overwrite master elements not yet updated.
void checkMasterApart(const char *op, const void *param, DType paramType,
                      const void *master, int64_t n) {
  if (overlaps(param, n * elementBytes(paramType), master,
               n * elementBytes(DType::F32)))
    fatal("%s: param (%s) overlaps master", op, dtypeName(paramType));
}

} // namespace

extern "C" {

namespace {

/// Loss scaling needs master weights: the plain updates refuse a model that
/// scales its loss (the compiler never emits that).
void requireNoLossScale(ztrt_ctx *ctx, const char *op) {
  if (ctx->scaler)
    fatal("%s: the model scales its loss (descriptor loss_scale) but "
          "updates without an f32 master; loss-scaled updates are the "
          "master-weight forms",
          op);
}

/// What the step's updates multiply gradients by besides the loss scale:
/// the clipping coefficient (1 without clipping) times 1 / K of gradient
/// accumulation (1 without); fatal when the model clips but the step has
/// not computed its norm yet, or accumulates but updates before its
/// boundary.
double clipFactor(ztrt_ctx *ctx, const char *op) {
  if (ctx->accumSteps > 0 && !ctx->boundaryAsked)
    fatal("%s: step %lld updates before ztrt_accumulation_boundary (the "
          "model accumulates gradients: the updates follow the last "
          "micro-batch)",
          op, static_cast<long long>(ctx->step));
  if (!ctx->clipMaxNorm)
    return ctx->accumFactor();
  if (!ctx->clipChecked)
    fatal("%s: step %lld updates before ztrt_clip_grad_norm (the model "
          "clips its gradients: the norm must come first)",
          op, static_cast<long long>(ctx->step));
  return ctx->clipCoef * ctx->accumFactor();
}

/// The master-weight updates: false when the step overflowed (loss
/// scaling; the update is skipped), else `factor` = 1 / the step's loss
/// scale x the clipping coefficient (each 1 when absent).
bool scaledUpdate(ztrt_ctx *ctx, const char *op, double &factor) {
  factor = 1.0;
  if (ctx->scaler) {
    if (!ctx->scaleUpdated)
      fatal("%s: step %lld updates before ztrt_update_loss_scale (the model "
            "scales its loss: the overflow check must come first)",
            op, static_cast<long long>(ctx->step));
    if (ctx->skipUpdates)
      return false;
    factor = 1.0 / ctx->stepScale;
  }
  factor *= clipFactor(ctx, op);
  return true;
}

} // namespace

// A host step's tile of an optimizer state: `at` elements of `type` on
// (null stays null: SGD without momentum).
static void *tileOf(void *state, int64_t at, DType type) {
  return state ? static_cast<char *>(state) + at * ztrt::elementBytes(type)
               : nullptr;
}

void ztrt_sgd_update(ztrt_ctx *ctx, int32_t dtype, void *param,
                     const void *grad, void *momentum_buf, int64_t n, double lr,
                     double momentum, double dampening, double weight_decay,
                     int32_t nesterov) {
  Backend &backend = backendOf(ctx, "sgd_update");
  TraceScope trace(ctx->trace(), "sgd_update");
  const bool announced = ctx->takeUpdateAsync(param, "sgd_update");
  const DType type = checkDType("sgd_update", dtype);
  checkCount("sgd_update", "element count", n);
  if (momentum != 0.0 && !momentum_buf)
    fatal("sgd_update: momentum %g needs a momentum buffer", momentum);
  if (ctx->step < 1)
    fatal("sgd_update: called outside a step (step counter is %lld)",
          static_cast<long long>(ctx->step));
  requireNoLossScale(ctx, "sgd_update");
  SgdHyper hyper{lr, momentum, dampening, weight_decay, nesterov != 0};
  hyper.gradScale = clipFactor(ctx, "sgd_update");
  if (ctx->hostStep(momentum_buf)) {
    // ZeRO-Offload's CPU step: the states are host memory. (The kernel
    // holds its values: it may run on the host step thread.)
    const int64_t t = ctx->step;
    ctx->runHostStep(
        param, type, grad, type, n, false,
        [=](Backend &cpu, void *p, const void *g, int64_t at, int64_t k) {
          cpu.sgdUpdate(type, p, g, tileOf(momentum_buf, at, type), k, hyper,
                        t);
        },
        "sgd_update", announced);
    return;
  }
  backend.sgdUpdate(type, param, grad, momentum_buf, n, hyper, ctx->step);
  ctx->noteStateAccess(param, n * ztrt::elementBytes(type));
  ctx->noteStateAccess(momentum_buf, n * ztrt::elementBytes(type));
}

void ztrt_adam_update(ztrt_ctx *ctx, int32_t dtype, void *param,
                      const void *grad, void *exp_avg, void *exp_avg_sq,
                      int64_t n, double lr, double beta1, double beta2,
                      double eps, double weight_decay, int32_t decoupled) {
  const char *op = decoupled ? "adamw_update" : "adam_update";
  Backend &backend = backendOf(ctx, op);
  TraceScope trace(ctx->trace(), "adam_update");
  const bool announced = ctx->takeUpdateAsync(param, op);
  const DType type = checkDType(op, dtype);
  checkCount(op, "element count", n);
  if (ctx->step < 1)
    fatal("%s: called outside a step (step counter is %lld)", op,
          static_cast<long long>(ctx->step));
  requireNoLossScale(ctx, op);
  AdamHyper hyper{lr, beta1, beta2, eps, weight_decay, decoupled != 0};
  hyper.gradScale = clipFactor(ctx, op);
  if (ctx->hostStep(exp_avg)) {
    const int64_t t = ctx->step;
    ctx->runHostStep(
        param, type, grad, type, n, false,
        [=](Backend &cpu, void *p, const void *g, int64_t at, int64_t k) {
          cpu.adamUpdate(type, p, g, tileOf(exp_avg, at, type),
                         tileOf(exp_avg_sq, at, type), k, hyper, t);
        },
        op, announced);
    return;
  }
  backend.adamUpdate(type, param, grad, exp_avg, exp_avg_sq, n, hyper,
                     ctx->step);
  ctx->noteStateAccess(param, n * ztrt::elementBytes(type));
  ctx->noteStateAccess(exp_avg, n * ztrt::elementBytes(type));
  ctx->noteStateAccess(exp_avg_sq, n * ztrt::elementBytes(type));
}

void ztrt_sgd_update_master(ztrt_ctx *ctx, int32_t dtype, void *param,
                            const void *grad, void *master, void *momentum_buf,
                            int64_t n, double lr, double momentum,
                            double dampening, double weight_decay,
                            int32_t nesterov, int32_t param_dtype) {
  const char *op = "sgd_update_master";
  Backend &backend = backendOf(ctx, op);
  TraceScope trace(ctx->trace(), op);
  const bool announced = ctx->takeUpdateAsync(param, op);
  const DType gradType = checkDType(op, dtype);
  const DType paramType = checkDType(op, "param_dtype", param_dtype);
  checkCount(op, "element count", n);
  checkMasterApart(op, param, paramType, master, n);
  if (momentum != 0.0 && !momentum_buf)
    fatal("%s: momentum %g needs a momentum buffer", op, momentum);
  if (ctx->step < 1)
    fatal("%s: called outside a step (step counter is %lld)", op,
          static_cast<long long>(ctx->step));
  double unscale = 1.0;
  if (!scaledUpdate(ctx, op, unscale))
    return;
  SgdHyper hyper{lr, momentum, dampening, weight_decay, nesterov != 0};
  hyper.gradScale = unscale;
  if (ctx->hostStep(master)) {
    // The parameter is written only: nothing of it goes down.
    const int64_t t = ctx->optimizerStep();
    ctx->runHostStep(
        param, paramType, grad, gradType, n, true,
        [=](Backend &cpu, void *p, const void *g, int64_t at, int64_t k) {
          cpu.sgdUpdateMaster(
              gradType, paramType, p, g,
              static_cast<float *>(tileOf(master, at, DType::F32)),
              static_cast<float *>(tileOf(momentum_buf, at, DType::F32)), k,
              hyper, t);
        },
        op, announced);
    return;
  }
  backend.sgdUpdateMaster(gradType, paramType, param, grad,
                          static_cast<float *>(master),
                          static_cast<float *>(momentum_buf), n, hyper,
                          ctx->optimizerStep());
  // The parameter receives the new master rounded: written, not read.
  ctx->noteHostAccess(param, 0, n * ztrt::elementBytes(paramType));
  ctx->noteStateAccess(master, n * 4);
  ctx->noteStateAccess(momentum_buf, n * 4);
}

void ztrt_adam_update_master(ztrt_ctx *ctx, int32_t dtype, void *param,
                             const void *grad, void *master, void *exp_avg,
                             void *exp_avg_sq, int64_t n, double lr,
                             double beta1, double beta2, double eps,
                             double weight_decay, int32_t decoupled,
                             int32_t param_dtype) {
  const char *op = decoupled ? "adamw_update_master" : "adam_update_master";
  Backend &backend = backendOf(ctx, op);
  TraceScope trace(ctx->trace(), "adam_update_master");
  const bool announced = ctx->takeUpdateAsync(param, op);
  const DType gradType = checkDType(op, dtype);
  const DType paramType = checkDType(op, "param_dtype", param_dtype);
  checkCount(op, "element count", n);
  checkMasterApart(op, param, paramType, master, n);
  if (ctx->step < 1)
    fatal("%s: called outside a step (step counter is %lld)", op,
          static_cast<long long>(ctx->step));
  double unscale = 1.0;
  if (!scaledUpdate(ctx, op, unscale))
    return;
  AdamHyper hyper{lr, beta1, beta2, eps, weight_decay, decoupled != 0};
  hyper.gradScale = unscale;
  if (ctx->hostStep(master)) {
    const int64_t t = ctx->optimizerStep();
    ctx->runHostStep(
        param, paramType, grad, gradType, n, true,
        [=](Backend &cpu, void *p, const void *g, int64_t at, int64_t k) {
          cpu.adamUpdateMaster(
              gradType, paramType, p, g,
              static_cast<float *>(tileOf(master, at, DType::F32)),
              static_cast<float *>(tileOf(exp_avg, at, DType::F32)),
              static_cast<float *>(tileOf(exp_avg_sq, at, DType::F32)), k,
              hyper, t);
        },
        op, announced);
    return;
  }
  backend.adamUpdateMaster(gradType, paramType, param, grad,
                           static_cast<float *>(master),
                           static_cast<float *>(exp_avg),
                           static_cast<float *>(exp_avg_sq), n, hyper,
                           ctx->optimizerStep());
  ctx->noteHostAccess(param, 0, n * ztrt::elementBytes(paramType));
  for (const void *state : {static_cast<const void *>(master),
                            static_cast<const void *>(exp_avg),
                            static_cast<const void *>(exp_avg_sq)})
    ctx->noteStateAccess(state, n * 4);
}

void ztrt_update_async(ztrt_ctx *ctx, const void *param) {
  backendOf(ctx, "update_async");
  ctx->markUpdateAsync(param, "update_async");
}

void ztrt_update_wait(ztrt_ctx *ctx, const void *param) {
  backendOf(ctx, "update_wait");
  ctx->waitUpdate(param);
}

} // extern "C"

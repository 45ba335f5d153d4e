//===- Bindings.cpp - Entry points: buffers, bindings, the step -----------===//
//
// Part of ztrain's runtime. The entry points of ztrt_abi.def's "Buffers and
// bindings": memory and arenas, the storage of parameters, states,
// gradients, inputs and buffers, and the step's loss, loss scale, gradient
// clipping, learning rate, hyper-parameters, output and gradient
// accumulation.
//
//===----------------------------------------------------------------------===//

#include "ztrt.h"

#include "abi/Checks.h"
#include "base/Support.h"
#include "step/Context.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

using namespace ztrt;
using namespace ztrt::abi;

namespace {

void *binding(const char *op, const std::vector<void *> &list, int64_t index,
              const char *kind) {
  if (index < 0 || index >= static_cast<int64_t>(list.size()))
    fatal("%s: %s index %lld out of range [0, %zu)", op, kind,
          static_cast<long long>(index), list.size());
  return list[index];
}

} // namespace

extern "C" {

void *ztrt_alloc(ztrt_ctx *ctx, int64_t bytes, int32_t category) {
  backendOf(ctx, "alloc");
  return ctx->allocate(bytes, category, "alloc");
}

void ztrt_free(ztrt_ctx *ctx, void *ptr) {
  backendOf(ctx, "free");
  ctx->deallocate(ptr, "free");
}

void *ztrt_arena(ztrt_ctx *ctx, int64_t index, int64_t bytes,
                 int32_t category) {
  backendOf(ctx, "arena");
  if (index < 0 || index > 64)
    fatal("arena: index %lld out of range [0, 64]",
          static_cast<long long>(index));
  size_t i = static_cast<size_t>(index);
  if (i >= ctx->arenas.size())
    ctx->arenas.resize(i + 1, {nullptr, 0});
  auto &[ptr, size] = ctx->arenas[i];
  if (!ptr) {
    ptr = ctx->allocate(bytes, category, "arena");
    size = bytes;
  } else if (size != bytes) {
    fatal("arena: arena %lld was allocated with %lld bytes, now asked for "
          "%lld",
          static_cast<long long>(index), static_cast<long long>(size),
          static_cast<long long>(bytes));
  }
  return ptr;
}

void *ztrt_param(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "param");
  void *ptr = binding("param", ctx->params, index, "parameter");
  if (!ptr)
    fatal("param: parameter %lld lives on nvme: the step reaches it "
          "through its swap buffer (ztrt_swap_in), not ztrt_param",
          static_cast<long long>(index));
  return ptr;
}

void *ztrt_state(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "state");
  void *ptr = binding("state", ctx->states, index, "optimizer state");
  if (!ptr)
    fatal("state: optimizer state %lld lives on nvme: the step reaches it "
          "through its swap buffer (ztrt_swap_in), not ztrt_state",
          static_cast<long long>(index));
  return ptr;
}

void *ztrt_grad(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "grad");
  void *ptr = binding("grad", ctx->grads, index, "gradient");
  if (!ptr)
    fatal("grad: the gradient of parameter %lld has no persistent buffer "
          "(its descriptor record has 0 elements: the step keeps it in its "
          "arena)",
          static_cast<long long>(index));
  return ptr;
}

void *ztrt_buffer(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "buffer");
  return binding("buffer", ctx->buffers, index, "buffer");
}

void *ztrt_input(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "input");
  return binding("input", ctx->inputs, index, "input");
}

void ztrt_set_loss(ztrt_ctx *ctx, const void *loss) {
  Backend &backend = backendOf(ctx, "set_loss");
  if (!loss)
    fatal("set_loss: null loss buffer");
  // The driver reads the loss after the step's synchronize(); a device
  // backend need not stall its stream in the middle of the step for it.
  backend.copyToHostAtSync(&ctx->loss, loss, sizeof(ctx->loss));
  ctx->lossSet = true;
}

void ztrt_loss_scale(ztrt_ctx *ctx, void *out) {
  Backend &backend = backendOf(ctx, "loss_scale");
  if (!out)
    fatal("loss_scale: null output buffer");
  if (!ctx->scaler)
    fatal("loss_scale: the model's descriptor has no loss_scale record");
  const float scale = static_cast<float>(ctx->stepScale);
  backend.copyFromHost(out, &scale, sizeof(scale));
}

void ztrt_update_loss_scale(ztrt_ctx *ctx, const void *found) {
  Backend &backend = backendOf(ctx, "update_loss_scale");
  TraceScope trace(ctx->trace(), "update_loss_scale");
  if (!found)
    fatal("update_loss_scale: null flag buffer");
  if (!ctx->scaler)
    fatal("update_loss_scale: the model's descriptor has no loss_scale "
          "record");
  if (ctx->step < 1)
    fatal("update_loss_scale: called outside a step (step counter is %lld)",
          static_cast<long long>(ctx->step));
  if (ctx->scaleUpdated)
    fatal("update_loss_scale: called twice in step %lld",
          static_cast<long long>(ctx->step));
  float flag = 0.0f;
  // The decision is the host's: wait for the flag (one float).
  backend.copyToHost(&flag, found, sizeof(flag));
  ctx->scaleUpdated = true;
  // The flag is the same on every rank (the compiler sums it over the
  // ranks), so every rank takes the same branch.
  switch (ctx->scaler->update(flag != 0.0f)) {
  case ztrt::LossScaler::Outcome::Applied:
    ctx->skipUpdates = false;
    break;
  case ztrt::LossScaler::Outcome::Skipped:
    ctx->skipUpdates = true;
    break;
  case ztrt::LossScaler::Outcome::AtMinimum:
    refuse("step %lld: the gradients overflow at the minimum loss scale %g "
           "(--min-loss-scale); stopping. The loss is probably diverging: "
           "lower the learning rate, or train in bf16",
           static_cast<long long>(ctx->step), ctx->scaler->policy().min);
  }
}

double ztrt_lr(ztrt_ctx *ctx, double compiled) {
  backendOf(ctx, "lr");
  if (ctx->step < 1)
    fatal("lr: called outside a step (step counter is %lld)",
          static_cast<long long>(ctx->step));
  const ztrt::LrSchedule &s = ctx->lrSchedule;
  const double base = s.lr.value_or(compiled);
  if (!(base >= 0.0) || !std::isfinite(base))
    fatal("lr: the learning rate %g is not finite and >= 0", base);
  if (s.kind != ztrt::LrSchedule::Kind::Constant && !s.minLrRatio &&
      s.minLr > base)
    refuse("--min-lr %g exceeds the learning rate %g (the %s schedule decays "
           "from the learning rate to --min-lr)",
           s.minLr, base, ztrt::LrSchedule::kindName(s.kind));
  ctx->stepLr = s.at(compiled, ctx->optimizerStep());
  return ctx->stepLr;
}

void ztrt_set_output(ztrt_ctx *ctx, int32_t dtype, const void *ptr,
                     int64_t n) {
  backendOf(ctx, "set_output");
  checkDType("set_output", dtype);
  checkCount("set_output", "element count", n);
  if (!ptr)
    fatal("set_output: null buffer");
  ctx->output = ptr;
  ctx->outputElems = n;
  ctx->outputType = dtype;
  ctx->outputSet = true;
}

double ztrt_hyper(ztrt_ctx *ctx, int32_t id, double compiled) {
  backendOf(ctx, "hyper");
  if (id < 0 || id >= ZTRT_HYPER_COUNT)
    fatal("hyper: unknown hyper-parameter id %d", id);
  const std::optional<double> &given = ctx->hyperOverrides[id];
  const double v = given.value_or(compiled);
  std::string problem = ztrt::hyperProblem(id, v);
  if (!problem.empty())
    fatal("hyper: %s %g %s", ztrt::hyperFlag(id), v, problem.c_str());
  ctx->hyperSeen[id] = v;
  return v;
}

void ztrt_clip_grad_norm(ztrt_ctx *ctx, const void *sum_sq, double max_norm) {
  Backend &backend = backendOf(ctx, "clip_grad_norm");
  if (!sum_sq)
    fatal("clip_grad_norm: null sum buffer");
  if (!ctx->clipMaxNorm)
    fatal("clip_grad_norm: the model's descriptor has no clip_grad_norm "
          "record");
  if (!(max_norm > 0.0) || !std::isfinite(max_norm))
    fatal("clip_grad_norm: max_norm must be finite and positive, got %g",
          max_norm);
  if (ctx->clipChecked)
    fatal("clip_grad_norm: called twice in step %lld",
          static_cast<long long>(ctx->step));
  if (ctx->scaler && !ctx->scaleUpdated)
    fatal("clip_grad_norm: step %lld computes the norm before "
          "ztrt_update_loss_scale",
          static_cast<long long>(ctx->step));
  float sum = 0.0f;
  backend.copyToHost(&sum, sum_sq, sizeof(sum));
  ctx->clipChecked = true;
  // torch.nn.utils.clip_grad_norm_ in float: norm, then
  // clip_coef = max_norm / (norm + 1e-6), clamped to at most 1.
  float norm = std::sqrt(sum);
  if (ctx->scaler)
    norm = static_cast<float>(norm / ctx->stepScale);
  // Accumulated gradients are sums of K micro-batches: the norm is of
  // their mean.
  if (ctx->accumSteps > 0)
    norm = static_cast<float>(norm * ctx->accumFactor());
  ctx->gradNorm = norm;
  ctx->clipCoef = 1.0;
  if (ctx->skipUpdates || !std::isfinite(norm))
    return; // an overflowed step is skipped; a NaN norm is the loss's to say
  const float coef = static_cast<float>(max_norm) / (norm + 1e-6f);
  if (coef < 1.0f)
    ctx->clipCoef = coef;
}

void ztrt_accumulate_grad(ztrt_ctx *ctx, int32_t dtype, void *acc,
                          const void *x, int64_t n) {
  Backend &backend = backendOf(ctx, "accumulate_grad");
  TraceScope trace(ctx->trace(), "accumulate_grad");
  const DType type = checkDType("accumulate_grad", dtype);
  checkCount("accumulate_grad", "element count", n);
  if (!acc || !x)
    fatal("accumulate_grad: null buffer");
  if (ctx->accumSteps < 1)
    fatal("accumulate_grad: the model's descriptor has no grad_accum record");
  if (ctx->step < 1 || ctx->microStep < 1)
    fatal("accumulate_grad: called outside a step (step counter is %lld)",
          static_cast<long long>(ctx->step));
  if (ctx->boundaryAsked)
    fatal("accumulate_grad: step %lld accumulates after "
          "ztrt_accumulation_boundary",
          static_cast<long long>(ctx->step));
  if (ctx->microStep == 1)
    backend.copy(x, acc, n * elementBytes(type));
  else
    backend.add(type, acc, x, acc, n);
}

int32_t ztrt_accumulation_boundary(ztrt_ctx *ctx) {
  backendOf(ctx, "accumulation_boundary");
  if (ctx->accumSteps < 1)
    fatal("accumulation_boundary: the model's descriptor has no grad_accum "
          "record");
  if (ctx->step < 1)
    fatal("accumulation_boundary: called outside a step (step counter is "
          "%lld)",
          static_cast<long long>(ctx->step));
  if (ctx->boundaryAsked)
    fatal("accumulation_boundary: called twice in micro-batch %lld of step "
          "%lld",
          static_cast<long long>(ctx->microStep),
          static_cast<long long>(ctx->step));
  ctx->boundaryAsked = true;
  return ctx->microStep == ctx->accumSteps ? 1 : 0;
}

} // extern "C"

/*===- fake_bf16_model.c - A hand-written mixed-precision "model" ---------===*
 *
 * fake_model.c's linear regression with a bf16 parameter `w`, its f32
 * master copy and f32 momentum, as ztrain-compile --precision=bf16
 * --reduce-dtype=fp32 lays them out: the step computes in f32 from the
 * master and updates with ztrt_sgd_update_master, which keeps w equal to
 * the master rounded to bf16. Exercises the runtime's 16-bit model state
 * (init, --init, --save, checkpoints) end to end; cpu backend only.
 *
 *===----------------------------------------------------------------------===*/

#include "ztrt.h"

#include <stdint.h>

#define BATCH 8
#define DIM 4

const char ztrain_descriptor[] =
    "ztrain-descriptor 1\n"
    "param w bf16 2 4 1 init normal 0.5\n"
    "grad w 4 f32\n"
    "state w.master f32 2 4 1 of w master\n"
    "state w.momentum_buffer f32 2 4 1 of w\n"
    "input x f32 2 8 4 bound 0\n"
    "optimizer sgd lr=0.1 momentum=0.5\n";

static const float kTrueW[DIM] = {1.0f, -2.0f, 0.5f, 3.0f};
static const int64_t kLossShape[2] = {BATCH, 1};
static const int64_t kLossMask[2] = {1, 1};

void ztrain_step(ztrt_ctx *ctx) {
  void *w = ztrt_param(ctx, 0);
  void *master = ztrt_state(ctx, 0);
  void *momentum = ztrt_state(ctx, 1);
  void *grad = ztrt_grad(ctx, 0);
  const void *x = ztrt_input(ctx, 0);
  const int64_t vec = BATCH * sizeof(float);
  void *pred = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *target = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *diff = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *sq = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *loss = ztrt_alloc(ctx, sizeof(float), ZTRT_CAT_ACTIVATIONS);

  ztrt_matmul(ctx, ZTRT_F32, x, master, pred, 1, BATCH, 1, DIM, 0, 0, 0, 0, 0);
  ztrt_matmul(ctx, ZTRT_F32, x, kTrueW, target, 1, BATCH, 1, DIM, 0, 0, 0, 0, 0);
  ztrt_sub(ctx, ZTRT_F32, pred, target, diff, BATCH);
  ztrt_mul(ctx, ZTRT_F32, diff, diff, sq, BATCH);
  ztrt_reduce(ctx, ZTRT_F32, sq, loss, 2, kLossShape, kLossMask, 1);
  ztrt_set_loss(ctx, loss);

  ztrt_scale(ctx, ZTRT_F32, diff, diff, BATCH, 2.0 / BATCH);
  ztrt_matmul(ctx, ZTRT_F32, x, diff, grad, 1, DIM, 1, BATCH, 1, 0, 0, 0, 0);
  ztrt_all_reduce(ctx, ZTRT_F32, grad, grad, DIM, 1, 0);
  ztrt_sgd_update_master(ctx, ZTRT_F32, w, grad, master, momentum, DIM, 0.1,
                         0.5, 0.0, 0.0, 0, ZTRT_BF16);

  ztrt_free(ctx, loss);
  ztrt_free(ctx, sq);
  ztrt_free(ctx, diff);
  ztrt_free(ctx, target);
  ztrt_free(ctx, pred);
}

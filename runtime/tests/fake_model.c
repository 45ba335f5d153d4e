/*===- fake_model.c - A hand-written "compiled model" for tests ----------===*
 *
 * Stands in for what ztrain-compile emits: a descriptor and a step function
 * made of ztrt_* calls. The model is linear regression onto a fixed weight
 * vector, y = x . w_true, with an MSE loss built from matmul, sub, mul and a
 * mean reduce, and SGD with momentum on the gradient averaged over ranks
 * (data parallelism; a copy in a world of one). Linked with libztrt_main it
 * is a complete training executable for the end-to-end tests.
 *
 * It passes the host array kTrueW straight to a kernel, which is only valid
 * on the cpu backend; a real compiled model keeps constants in ztrt memory.
 *
 * Built with FAKE_FUSED (ztrt_fake_fused_model) it is what
 * --fuse=elementwise makes of it: sub and mul become one generated kernel,
 * run through ztrt_fused, and the descriptor says so (`fused 1`). Its
 * results are bitwise the unfused model's.
 *
 *===----------------------------------------------------------------------===*/

#include "ztrt.h"

#include <stddef.h>
#include <stdint.h>

#define BATCH 8
#define DIM 4

const char ztrain_descriptor[] = "ztrain-descriptor 1\n"
                                 "param w f32 2 4 1 init normal 0.5\n"
                                 "state w.momentum_buffer f32 2 4 1 of w\n"
                                 "input x f32 2 8 4 bound 0\n"
                                 "optimizer sgd lr=0.1 momentum=0.5\n"
#ifdef FAKE_FUSED
                                 "fused 1\n"
#endif
    ;

static const float kTrueW[DIM] = {1.0f, -2.0f, 0.5f, 3.0f};
static const int64_t kLossShape[2] = {BATCH, 1};
static const int64_t kLossMask[2] = {1, 1};

#ifdef FAKE_FUSED
/* Items [begin, end) of the region sub+mul: diff = pred - target and
 * sq = diff * diff, each rounded to float as the two kernels round them.
 * args: pred, target, diff, sq. */
static void subMul(void *const *args, int64_t begin, int64_t end) {
  const float *pred = args[0], *target = args[1];
  float *diff = args[2], *sq = args[3];
  for (int64_t i = begin; i < end; ++i) {
    float d = pred[i] - target[i];
    diff[i] = d;
    sq[i] = d * d;
  }
}
#endif

void ztrain_step(ztrt_ctx *ctx) {
  void *w = ztrt_param(ctx, 0);
  void *momentum = ztrt_state(ctx, 0);
  const void *x = ztrt_input(ctx, 0);
  const int64_t vec = BATCH * sizeof(float);
  void *pred = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *target = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *diff = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *sq = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *loss = ztrt_alloc(ctx, sizeof(float), ZTRT_CAT_ACTIVATIONS);

  /* Forward: loss = mean((x w - x w_true)^2). */
  ztrt_matmul(ctx, ZTRT_F32, x, w, pred, 1, BATCH, 1, DIM, 0, 0, 0, 0, 0);
  ztrt_matmul(ctx, ZTRT_F32, x, kTrueW, target, 1, BATCH, 1, DIM, 0, 0, 0, 0, 0);
#ifdef FAKE_FUSED
  void *args[4] = {pred, target, diff, sq};
  ztrt_fused(ctx, "fused:sub+mul", (void *)subMul, NULL, args, BATCH, 1);
#else
  ztrt_sub(ctx, ZTRT_F32, pred, target, diff, BATCH);
  ztrt_mul(ctx, ZTRT_F32, diff, diff, sq, BATCH);
#endif
  ztrt_reduce(ctx, ZTRT_F32, sq, loss, 2, kLossShape, kLossMask, 1);
  ztrt_set_loss(ctx, loss);

  /* Backward: dloss/dpred = 2 diff / B; dw = x^T dpred. */
  void *grad = ztrt_alloc(ctx, DIM * sizeof(float), ZTRT_CAT_GRADIENTS);
  ztrt_scale(ctx, ZTRT_F32, diff, diff, BATCH, 2.0 / BATCH);
  ztrt_matmul(ctx, ZTRT_F32, x, diff, grad, 1, DIM, 1, BATCH, 1, 0, 0, 0, 0);
  ztrt_all_reduce(ctx, ZTRT_F32, grad, grad, DIM, 1, 0);
  ztrt_sgd_update(ctx, ZTRT_F32, w, grad, momentum, DIM, 0.1, 0.5, 0.0, 0.0, 0);

  ztrt_free(ctx, grad);
  ztrt_free(ctx, loss);
  ztrt_free(ctx, sq);
  ztrt_free(ctx, diff);
  ztrt_free(ctx, target);
  ztrt_free(ctx, pred);
}

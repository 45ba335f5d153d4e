/*===- fake_zero_model.c - fake_model.c with ZeRO storage ----------------===*
 *
 * The model of fake_model.c (linear regression onto kTrueW, MSE loss, SGD
 * with momentum, data parallel) with the per-rank storage the compiler
 * emits for ZeRO, as a hand-written stand-in for the end-to-end tests of
 * the descriptor's `store` suffix. Built once per (stage, ranks) with
 *
 *   ZERO_STAGE  2: the parameter is full but padded to RANKS * CHUNK (the
 *                  updated shards are all-gathered in place), its momentum
 *                  buffer is sharded;
 *               3: both are sharded; the step all-gathers the weights.
 *   ZERO_RANKS  the grid size N;
 *   ZERO_CHUNK  the shard size C >= ceil(4 / N); the tests pick one element
 *               more than needed, so that every layout has padding;
 *   ZERO_PADDED N * C, spelled out because the descriptor needs its digits.
 *
 * Every rank averages the gradient with reduce_scatter (rank-order sum,
 * then / N) where fake_model.c all-reduces it, and the cpu backend's
 * all_reduce is exactly that reduce_scatter followed by an all_gather, so
 * both models compute the same bits: their checkpoints must be identical.
 *
 * Its collectives are the asynchronous ones, as an overlap-scheduled step
 * issues them: stage 3 starts the weights' gather and computes the target
 * (which does not need them) before waiting; the gradient is packed into a
 * rank-major bucket with ztrt_copy_2d (here the identity layout: one
 * parameter) and reduce-scattered while the activations are freed. The
 * gathered weights of stage 3 are ZTRT_CAT_GATHERED memory.
 *
 *===----------------------------------------------------------------------===*/

#include "ztrt.h"

#include <stdint.h>

#define BATCH 8
#define DIM 4
#if ZERO_PADDED != ZERO_RANKS * ZERO_CHUNK
#error "ZERO_PADDED must be ZERO_RANKS * ZERO_CHUNK"
#endif

#define STR_(x) #x
#define STR(x) STR_(x)

#if ZERO_STAGE == 2
#define PARAM_STORE STR(ZERO_PADDED) " full"
#elif ZERO_STAGE == 3
#define PARAM_STORE STR(ZERO_CHUNK) " shard"
#else
#error "ZERO_STAGE must be 2 or 3"
#endif

/* clang-format cannot lay out string pieces made by macros. */
/* clang-format off */
const char ztrain_descriptor[] =
    "ztrain-descriptor 1\n"
    "grid " STR(ZERO_RANKS) "\n"
    "param w f32 2 4 1 init normal 0.5 store " PARAM_STORE "\n"
    "state w.momentum_buffer f32 2 4 1 of w store " STR(ZERO_CHUNK) " shard\n"
    "input x f32 2 8 4 bound 0\n"
    "optimizer sgd lr=0.1 momentum=0.5\n";
/* clang-format on */

static const float kTrueW[DIM] = {1.0f, -2.0f, 0.5f, 3.0f};
static const int64_t kLossShape[2] = {BATCH, 1};
static const int64_t kLossMask[2] = {1, 1};

void ztrain_step(ztrt_ctx *ctx) {
  const int64_t rank = ztrt_rank(ctx);
  void *momentum = ztrt_state(ctx, 0);
  const void *x = ztrt_input(ctx, 0);
#if ZERO_STAGE == 3
  float *shard = (float *)ztrt_param(ctx, 0);
  float *w =
      (float *)ztrt_alloc(ctx, ZERO_PADDED * sizeof(float), ZTRT_CAT_GATHERED);
  int64_t gather =
      ztrt_all_gather_start(ctx, ZTRT_F32, shard, w, ZERO_CHUNK, 0);
#else
  float *w = (float *)ztrt_param(ctx, 0);
  float *shard = w + rank * ZERO_CHUNK;
#endif
  const int64_t vec = BATCH * sizeof(float);
  void *pred = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *target = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *diff = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *sq = ztrt_alloc(ctx, vec, ZTRT_CAT_ACTIVATIONS);
  void *loss = ztrt_alloc(ctx, sizeof(float), ZTRT_CAT_ACTIVATIONS);

  /* Forward: loss = mean((x w - x w_true)^2), w = the first DIM elements.
   * The target needs no weights: it is computed while they arrive. */
  ztrt_matmul(ctx, ZTRT_F32, x, kTrueW, target, 1, BATCH, 1, DIM, 0, 0, 0, 0, 0);
#if ZERO_STAGE == 3
  ztrt_wait(ctx, gather);
#endif
  ztrt_matmul(ctx, ZTRT_F32, x, w, pred, 1, BATCH, 1, DIM, 0, 0, 0, 0, 0);
  ztrt_sub(ctx, ZTRT_F32, pred, target, diff, BATCH);
  ztrt_mul(ctx, ZTRT_F32, diff, diff, sq, BATCH);
  ztrt_reduce(ctx, ZTRT_F32, sq, loss, 2, kLossShape, kLossMask, 1);
  ztrt_set_loss(ctx, loss);

  /* Backward into a gradient padded with zeros, so that the update of the
   * padding is exactly 0 and it stays zero, as the compiler guarantees. */
  void *grad = ztrt_alloc(ctx, ZERO_PADDED * sizeof(float), ZTRT_CAT_GRADIENTS);
  void *bucket =
      ztrt_alloc(ctx, ZERO_PADDED * sizeof(float), ZTRT_CAT_GRADIENTS);
  void *gradShard =
      ztrt_alloc(ctx, ZERO_CHUNK * sizeof(float), ZTRT_CAT_GRADIENTS);
  ztrt_fill(ctx, ZTRT_F32, grad, ZERO_PADDED, 0.0);
  ztrt_scale(ctx, ZTRT_F32, diff, diff, BATCH, 2.0 / BATCH);
  ztrt_matmul(ctx, ZTRT_F32, x, diff, grad, 1, DIM, 1, BATCH, 1, 0, 0, 0, 0);
  /* Row r of the bucket is what rank r receives reduced. */
  ztrt_copy_2d(ctx, grad, bucket, ZERO_RANKS, ZERO_CHUNK * sizeof(float),
               ZERO_CHUNK * sizeof(float), ZERO_CHUNK * sizeof(float));
  int64_t reduce = ztrt_reduce_scatter_start(ctx, ZTRT_F32, bucket, gradShard,
                                             ZERO_CHUNK, 1, 0);
  ztrt_free(ctx, loss);
  ztrt_free(ctx, sq);
  ztrt_free(ctx, diff);
  ztrt_free(ctx, target);
  ztrt_free(ctx, pred);
  ztrt_free(ctx, grad);
  ztrt_wait(ctx, reduce);
  ztrt_sgd_update(ctx, ZTRT_F32, shard, gradShard, momentum, ZERO_CHUNK, 0.1, 0.5,
                      0.0, 0.0, 0);
#if ZERO_STAGE == 2
  ztrt_wait(ctx, ztrt_all_gather_start(ctx, ZTRT_F32, shard, w, ZERO_CHUNK, 0));
#else
  ztrt_free(ctx, w);
#endif

  ztrt_free(ctx, gradShard);
  ztrt_free(ctx, bucket);
}

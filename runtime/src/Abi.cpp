//===- Abi.cpp - The ztrt_* entry points ----------------------------------===//
//
// Part of ztrain's runtime. Each entry point checks what can be checked
// without touching tensor data (counts, ranks, permutations, masks), names
// itself in any error, and dispatches to the context's backend; collectives
// go through the context's queue (src/CommQueue.h), which runs them on the
// communication thread. Kernel calls are recorded in the trace when --trace
// is on (a null-pointer test otherwise). Definitions are inside extern "C"
// with the exact types of ztrt.h, so a signature that drifts from
// ztrt_abi.def is a compile error rather than a silent overload.
//
//===----------------------------------------------------------------------===//

#include "ztrt.h"

#include "src/Context.h"
#include "src/Support.h"

#include <cstdint>
#include <vector>

using namespace ztrt;

namespace {

// Ranks beyond this are not tensors the compiler emits.
constexpr int64_t kMaxRank = 16;

Backend &backendOf(ztrt_ctx *ctx, const char *op) {
  if (!ctx)
    fatal("%s: null runtime context", op);
  return ctx->backend();
}

void checkCount(const char *op, const char *what, int64_t value) {
  if (value < 0)
    fatal("%s: negative %s %lld", op, what, static_cast<long long>(value));
}

void checkRank(const char *op, int64_t rank, const void *shape) {
  if (rank < 0 || rank > kMaxRank)
    fatal("%s: rank %lld outside [0, %lld]", op, static_cast<long long>(rank),
          static_cast<long long>(kMaxRank));
  if (rank > 0 && !shape)
    fatal("%s: null shape", op);
  const int64_t *dims = static_cast<const int64_t *>(shape);
  for (int64_t d = 0; d < rank; ++d)
    if (dims[d] < 0)
      fatal("%s: negative dimension %lld at dim %lld", op,
            static_cast<long long>(dims[d]), static_cast<long long>(d));
}

void *binding(const char *op, const std::vector<void *> &list, int64_t index,
              const char *kind) {
  if (index < 0 || index >= static_cast<int64_t>(list.size()))
    fatal("%s: %s index %lld out of range [0, %zu)", op, kind,
          static_cast<long long>(index), list.size());
  return list[index];
}

const float *f(const void *p) { return static_cast<const float *>(p); }
float *f(void *p) { return static_cast<float *>(p); }
const int32_t *i32(const void *p) { return static_cast<const int32_t *>(p); }

/// Whether a row of one set of `rows` rows of `rowBytes` bytes (the i-th at
/// a + i * aStride) intersects a row of the other. Both lists are sorted by
/// address (strides >= 0), so a merge walk decides it in O(rows): a row
/// that ends before the other list's current row cannot meet any later
/// row of that list. Interleaved layouts (a bucket unpacked into its own
/// gaps) are disjoint although their extents overlap.
bool rowsIntersect(uintptr_t a, int64_t aStride, uintptr_t b, int64_t bStride,
                   int64_t rows, int64_t rowBytes) {
  const uintptr_t length = static_cast<uintptr_t>(rowBytes);
  int64_t i = 0, j = 0;
  while (i < rows && j < rows) {
    const uintptr_t x = a + static_cast<uintptr_t>(i * aStride),
                    y = b + static_cast<uintptr_t>(j * bStride);
    if (x < y + length && y < x + length)
      return true;
    if (x < y)
      ++i;
    else
      ++j;
  }
  return false;
}

CollectiveRequest request(Collective kind, const void *in, void *out,
                          int64_t elems, int32_t mean) {
  CollectiveRequest r;
  r.kind = kind;
  r.in = f(in);
  r.out = f(out);
  r.elems = elems;
  r.mean = mean != 0;
  return r;
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
  return binding("param", ctx->params, index, "parameter");
}

void *ztrt_state(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "state");
  return binding("state", ctx->states, index, "optimizer state");
}

void *ztrt_grad(ztrt_ctx *ctx, int64_t index) {
  backendOf(ctx, "grad");
  return binding("grad", ctx->grads, index, "gradient");
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
  backend.copyToHostAtSync(&ctx->loss, loss, sizeof(float));
  ctx->lossSet = true;
}

void ztrt_copy(ztrt_ctx *ctx, const void *src, void *dst, int64_t bytes) {
  Backend &backend = backendOf(ctx, "copy");
  TraceScope trace(ctx->trace(), "copy");
  checkCount("copy", "byte count", bytes);
  backend.copy(src, dst, bytes);
}

void ztrt_copy_2d(ztrt_ctx *ctx, const void *src, void *dst, int64_t rows,
                  int64_t row_bytes, int64_t src_stride, int64_t dst_stride) {
  Backend &backend = backendOf(ctx, "copy_2d");
  TraceScope trace(ctx->trace(), "copy_2d");
  checkCount("copy_2d", "row count", rows);
  checkCount("copy_2d", "row size", row_bytes);
  checkCount("copy_2d", "src_stride", src_stride);
  checkCount("copy_2d", "dst_stride", dst_stride);
  if (rows == 0 || row_bytes == 0)
    return;
  if (rows > 1 && dst_stride < row_bytes)
    fatal("copy_2d: dst_stride %lld is less than row_bytes %lld (rows would "
          "overwrite each other)",
          static_cast<long long>(dst_stride),
          static_cast<long long>(row_bytes));
  int64_t srcExtent, dstExtent;
  if (__builtin_mul_overflow(rows - 1, src_stride, &srcExtent) ||
      __builtin_add_overflow(srcExtent, row_bytes, &srcExtent) ||
      __builtin_mul_overflow(rows - 1, dst_stride, &dstExtent) ||
      __builtin_add_overflow(dstExtent, row_bytes, &dstExtent))
    fatal("copy_2d: %lld rows of stride %lld / %lld bytes overflow int64",
          static_cast<long long>(rows), static_cast<long long>(src_stride),
          static_cast<long long>(dst_stride));
  // No row may be read after another has overwritten it, on any backend
  // (a device copies rows in parallel), so source and destination rows
  // must be disjoint; copying a region onto itself is a no-op.
  if (src == dst && src_stride == dst_stride)
    return;
  const uintptr_t from = reinterpret_cast<uintptr_t>(src),
                  to = reinterpret_cast<uintptr_t>(dst);
  if (from < to + static_cast<uint64_t>(dstExtent) &&
      to < from + static_cast<uint64_t>(srcExtent) &&
      rowsIntersect(from, src_stride, to, dst_stride, rows, row_bytes))
    fatal("copy_2d: source and destination rows overlap");
  backend.copy2d(src, dst, rows, row_bytes, src_stride, dst_stride);
}

void ztrt_fill_f32(ztrt_ctx *ctx, void *out, int64_t n, double value) {
  Backend &backend = backendOf(ctx, "fill_f32");
  TraceScope trace(ctx->trace(), "fill_f32");
  checkCount("fill_f32", "element count", n);
  backend.fill(f(out), n, value);
}

void ztrt_add_f32(ztrt_ctx *ctx, const void *a, const void *b, void *out,
                  int64_t n) {
  Backend &backend = backendOf(ctx, "add_f32");
  TraceScope trace(ctx->trace(), "add_f32");
  checkCount("add_f32", "element count", n);
  backend.add(f(a), f(b), f(out), n);
}

void ztrt_sub_f32(ztrt_ctx *ctx, const void *a, const void *b, void *out,
                  int64_t n) {
  Backend &backend = backendOf(ctx, "sub_f32");
  TraceScope trace(ctx->trace(), "sub_f32");
  checkCount("sub_f32", "element count", n);
  backend.sub(f(a), f(b), f(out), n);
}

void ztrt_mul_f32(ztrt_ctx *ctx, const void *a, const void *b, void *out,
                  int64_t n) {
  Backend &backend = backendOf(ctx, "mul_f32");
  TraceScope trace(ctx->trace(), "mul_f32");
  checkCount("mul_f32", "element count", n);
  backend.mul(f(a), f(b), f(out), n);
}

void ztrt_scale_f32(ztrt_ctx *ctx, const void *x, void *out, int64_t n,
                    double factor) {
  Backend &backend = backendOf(ctx, "scale_f32");
  TraceScope trace(ctx->trace(), "scale_f32");
  checkCount("scale_f32", "element count", n);
  backend.scale(f(x), f(out), n, factor);
}

void ztrt_bias_add_f32(ztrt_ctx *ctx, const void *x, const void *bias,
                       void *out, int64_t rows, int64_t cols) {
  Backend &backend = backendOf(ctx, "bias_add_f32");
  TraceScope trace(ctx->trace(), "bias_add_f32");
  checkCount("bias_add_f32", "row count", rows);
  checkCount("bias_add_f32", "column count", cols);
  backend.biasAdd(f(x), f(bias), f(out), rows, cols);
}

void ztrt_relu_f32(ztrt_ctx *ctx, const void *x, void *out, int64_t n) {
  Backend &backend = backendOf(ctx, "relu_f32");
  TraceScope trace(ctx->trace(), "relu_f32");
  checkCount("relu_f32", "element count", n);
  backend.relu(f(x), f(out), n);
}

void ztrt_relu_grad_f32(ztrt_ctx *ctx, const void *dy, const void *x, void *dx,
                        int64_t n) {
  Backend &backend = backendOf(ctx, "relu_grad_f32");
  TraceScope trace(ctx->trace(), "relu_grad_f32");
  checkCount("relu_grad_f32", "element count", n);
  backend.reluGrad(f(dy), f(x), f(dx), n);
}

void ztrt_gelu_f32(ztrt_ctx *ctx, const void *x, void *out, int64_t n) {
  Backend &backend = backendOf(ctx, "gelu_f32");
  TraceScope trace(ctx->trace(), "gelu_f32");
  checkCount("gelu_f32", "element count", n);
  backend.gelu(f(x), f(out), n);
}

void ztrt_gelu_grad_f32(ztrt_ctx *ctx, const void *dy, const void *x, void *dx,
                        int64_t n) {
  Backend &backend = backendOf(ctx, "gelu_grad_f32");
  TraceScope trace(ctx->trace(), "gelu_grad_f32");
  checkCount("gelu_grad_f32", "element count", n);
  backend.geluGrad(f(dy), f(x), f(dx), n);
}

void ztrt_matmul_f32(ztrt_ctx *ctx, const void *a, const void *b, void *c,
                     int64_t batch, int64_t m, int64_t n, int64_t k,
                     int32_t trans_a, int32_t trans_b, int64_t stride_a,
                     int64_t stride_b, int64_t stride_c) {
  Backend &backend = backendOf(ctx, "matmul_f32");
  TraceScope trace(ctx->trace(), "matmul_f32");
  checkCount("matmul_f32", "batch", batch);
  checkCount("matmul_f32", "m", m);
  checkCount("matmul_f32", "n", n);
  checkCount("matmul_f32", "k", k);
  checkCount("matmul_f32", "stride_a", stride_a);
  checkCount("matmul_f32", "stride_b", stride_b);
  checkCount("matmul_f32", "stride_c", stride_c);
  // Output matrices that overlap have no defined result (on the cpu the
  // last one written wins; cuBLAS computes them concurrently).
  if (batch > 1 && m > 0 && n > 0 && stride_c < m * n)
    fatal("matmul_f32: stride_c %lld is less than m * n = %lld with batch "
          "%lld (results would overwrite each other)",
          static_cast<long long>(stride_c), static_cast<long long>(m * n),
          static_cast<long long>(batch));
  backend.matmul(f(a), f(b), f(c), batch, m, n, k, trans_a != 0, trans_b != 0,
                 stride_a, stride_b, stride_c);
}

void ztrt_layer_norm_f32(ztrt_ctx *ctx, const void *x, const void *gamma,
                         const void *beta, void *y, int64_t rows, int64_t cols,
                         double eps) {
  Backend &backend = backendOf(ctx, "layer_norm_f32");
  TraceScope trace(ctx->trace(), "layer_norm_f32");
  checkCount("layer_norm_f32", "row count", rows);
  checkCount("layer_norm_f32", "column count", cols);
  backend.layerNorm(f(x), f(gamma), f(beta), f(y), rows, cols, eps);
}

void ztrt_layer_norm_grad_f32(ztrt_ctx *ctx, const void *dy, const void *x,
                              const void *gamma, void *dx, void *dgamma,
                              void *dbeta, int64_t rows, int64_t cols,
                              double eps) {
  Backend &backend = backendOf(ctx, "layer_norm_grad_f32");
  TraceScope trace(ctx->trace(), "layer_norm_grad_f32");
  checkCount("layer_norm_grad_f32", "row count", rows);
  checkCount("layer_norm_grad_f32", "column count", cols);
  backend.layerNormGrad(f(dy), f(x), f(gamma), f(dx), f(dgamma), f(dbeta), rows,
                        cols, eps);
}

void ztrt_softmax_f32(ztrt_ctx *ctx, const void *x, void *y, int64_t rows,
                      int64_t cols, int32_t causal) {
  Backend &backend = backendOf(ctx, "softmax_f32");
  TraceScope trace(ctx->trace(), "softmax_f32");
  checkCount("softmax_f32", "row count", rows);
  checkCount("softmax_f32", "column count", cols);
  if (causal && cols > 0 && rows % cols != 0)
    fatal("softmax_f32: causal rows (%lld) must be whole [%lld x %lld] blocks",
          static_cast<long long>(rows), static_cast<long long>(cols),
          static_cast<long long>(cols));
  backend.softmax(f(x), f(y), rows, cols, causal != 0);
}

void ztrt_softmax_grad_f32(ztrt_ctx *ctx, const void *dy, const void *y,
                           void *dx, int64_t rows, int64_t cols) {
  Backend &backend = backendOf(ctx, "softmax_grad_f32");
  TraceScope trace(ctx->trace(), "softmax_grad_f32");
  checkCount("softmax_grad_f32", "row count", rows);
  checkCount("softmax_grad_f32", "column count", cols);
  backend.softmaxGrad(f(dy), f(y), f(dx), rows, cols);
}

void ztrt_transpose_f32(ztrt_ctx *ctx, const void *x, void *out, int64_t rank,
                        const void *x_shape, const void *perm) {
  Backend &backend = backendOf(ctx, "transpose_f32");
  TraceScope trace(ctx->trace(), "transpose_f32");
  checkRank("transpose_f32", rank, x_shape);
  const int64_t *p = static_cast<const int64_t *>(perm);
  if (rank > 0 && !p)
    fatal("transpose_f32: null perm");
  std::vector<bool> seen(rank, false);
  for (int64_t d = 0; d < rank; ++d) {
    if (p[d] < 0 || p[d] >= rank || seen[p[d]])
      fatal("transpose_f32: perm is not a permutation of [0, %lld) "
            "(entry %lld is %lld)",
            static_cast<long long>(rank), static_cast<long long>(d),
            static_cast<long long>(p[d]));
    seen[p[d]] = true;
  }
  backend.transpose(f(x), f(out), rank, static_cast<const int64_t *>(x_shape),
                    p);
}

void ztrt_reduce_f32(ztrt_ctx *ctx, const void *x, void *out, int64_t rank,
                     const void *x_shape, const void *reduce_mask,
                     int32_t mean) {
  Backend &backend = backendOf(ctx, "reduce_f32");
  TraceScope trace(ctx->trace(), "reduce_f32");
  checkRank("reduce_f32", rank, x_shape);
  if (rank > 0 && !reduce_mask)
    fatal("reduce_f32: null reduce_mask");
  backend.reduce(f(x), f(out), rank, static_cast<const int64_t *>(x_shape),
                 static_cast<const int64_t *>(reduce_mask), mean != 0);
}

void ztrt_broadcast_f32(ztrt_ctx *ctx, const void *x, void *out, int64_t rank,
                        const void *out_shape, const void *bcast_mask,
                        double factor) {
  Backend &backend = backendOf(ctx, "broadcast_f32");
  TraceScope trace(ctx->trace(), "broadcast_f32");
  checkRank("broadcast_f32", rank, out_shape);
  if (rank > 0 && !bcast_mask)
    fatal("broadcast_f32: null bcast_mask");
  backend.broadcast(f(x), f(out), rank, static_cast<const int64_t *>(out_shape),
                    static_cast<const int64_t *>(bcast_mask), factor);
}

void ztrt_cross_entropy_f32(ztrt_ctx *ctx, const void *logits,
                            const void *labels, void *loss, int64_t rows,
                            int64_t classes) {
  Backend &backend = backendOf(ctx, "cross_entropy");
  TraceScope trace(ctx->trace(), "cross_entropy_f32");
  checkCount("cross_entropy", "row count", rows);
  checkCount("cross_entropy", "class count", classes);
  backend.crossEntropy(f(logits), i32(labels), f(loss), rows, classes);
}

void ztrt_cross_entropy_grad_f32(ztrt_ctx *ctx, const void *dloss,
                                 const void *logits, const void *labels,
                                 void *dlogits, int64_t rows, int64_t classes) {
  Backend &backend = backendOf(ctx, "cross_entropy_grad");
  TraceScope trace(ctx->trace(), "cross_entropy_grad_f32");
  checkCount("cross_entropy_grad", "row count", rows);
  checkCount("cross_entropy_grad", "class count", classes);
  backend.crossEntropyGrad(f(dloss), f(logits), i32(labels), f(dlogits), rows,
                           classes);
}

void ztrt_embedding_f32(ztrt_ctx *ctx, const void *table, const void *ids,
                        void *out, int64_t n_ids, int64_t vocab, int64_t dim) {
  Backend &backend = backendOf(ctx, "embedding");
  TraceScope trace(ctx->trace(), "embedding_f32");
  checkCount("embedding", "id count", n_ids);
  checkCount("embedding", "vocabulary size", vocab);
  checkCount("embedding", "dimension", dim);
  backend.embedding(f(table), i32(ids), f(out), n_ids, vocab, dim);
}

void ztrt_embedding_grad_f32(ztrt_ctx *ctx, const void *dy, const void *ids,
                             void *dtable, int64_t n_ids, int64_t vocab,
                             int64_t dim) {
  Backend &backend = backendOf(ctx, "embedding_grad");
  TraceScope trace(ctx->trace(), "embedding_grad_f32");
  checkCount("embedding_grad", "id count", n_ids);
  checkCount("embedding_grad", "vocabulary size", vocab);
  checkCount("embedding_grad", "dimension", dim);
  backend.embeddingGrad(f(dy), i32(ids), f(dtable), n_ids, vocab, dim);
}

void ztrt_sgd_update_f32(ztrt_ctx *ctx, void *param, const void *grad,
                         void *momentum_buf, int64_t n, double lr,
                         double momentum, double dampening, double weight_decay,
                         int32_t nesterov) {
  Backend &backend = backendOf(ctx, "sgd_update");
  TraceScope trace(ctx->trace(), "sgd_update_f32");
  checkCount("sgd_update", "element count", n);
  if (momentum != 0.0 && !momentum_buf)
    fatal("sgd_update: momentum %g needs a momentum buffer", momentum);
  if (ctx->step < 1)
    fatal("sgd_update: called outside a step (step counter is %lld)",
          static_cast<long long>(ctx->step));
  backend.sgdUpdate(
      f(param), f(grad), f(momentum_buf), n,
      SgdHyper{lr, momentum, dampening, weight_decay, nesterov != 0},
      ctx->step);
}

void ztrt_adam_update_f32(ztrt_ctx *ctx, void *param, const void *grad,
                          void *exp_avg, void *exp_avg_sq, int64_t n, double lr,
                          double beta1, double beta2, double eps,
                          double weight_decay, int32_t decoupled) {
  const char *op = decoupled ? "adamw_update" : "adam_update";
  Backend &backend = backendOf(ctx, op);
  TraceScope trace(ctx->trace(), "adam_update_f32");
  checkCount(op, "element count", n);
  if (ctx->step < 1)
    fatal("%s: called outside a step (step counter is %lld)", op,
          static_cast<long long>(ctx->step));
  backend.adamUpdate(
      f(param), f(grad), f(exp_avg), f(exp_avg_sq), n,
      AdamHyper{lr, beta1, beta2, eps, weight_decay, decoupled != 0},
      ctx->step);
}

int64_t ztrt_rank(ztrt_ctx *ctx) {
  backendOf(ctx, "rank");
  return ctx->comm().rank();
}

int64_t ztrt_world_size(ztrt_ctx *ctx) {
  backendOf(ctx, "world_size");
  return ctx->comm().count();
}

void ztrt_all_reduce_f32(ztrt_ctx *ctx, const void *in, void *out, int64_t n,
                         int32_t mean) {
  backendOf(ctx, "all_reduce_f32");
  checkCount("all_reduce_f32", "element count", n);
  ctx->runCollective(request(Collective::AllReduce, in, out, n, mean),
                     "all_reduce_f32");
}

void ztrt_reduce_scatter_f32(ztrt_ctx *ctx, const void *in, void *out,
                             int64_t count, int32_t mean) {
  backendOf(ctx, "reduce_scatter_f32");
  checkCount("reduce_scatter_f32", "element count", count);
  ctx->runCollective(request(Collective::ReduceScatter, in, out, count, mean),
                     "reduce_scatter_f32");
}

void ztrt_all_gather_f32(ztrt_ctx *ctx, const void *in, void *out,
                         int64_t count) {
  backendOf(ctx, "all_gather_f32");
  checkCount("all_gather_f32", "element count", count);
  ctx->runCollective(request(Collective::AllGather, in, out, count, 0),
                     "all_gather_f32");
}

void ztrt_bcast_f32(ztrt_ctx *ctx, void *buf, int64_t n, int64_t root) {
  backendOf(ctx, "bcast_f32");
  checkCount("bcast_f32", "element count", n);
  const int ranks = ctx->comm().count();
  if (root < 0 || root >= ranks)
    fatal("bcast_f32: root %lld out of range [0, %d)",
          static_cast<long long>(root), ranks);
  CollectiveRequest r = request(Collective::Broadcast, buf, buf, n, 0);
  r.root = static_cast<int>(root);
  ctx->runCollective(r, "bcast_f32");
}

int64_t ztrt_all_reduce_start_f32(ztrt_ctx *ctx, const void *in, void *out,
                                  int64_t n, int32_t mean) {
  backendOf(ctx, "all_reduce_start_f32");
  checkCount("all_reduce_start_f32", "element count", n);
  return ctx->startCollective(request(Collective::AllReduce, in, out, n, mean));
}

int64_t ztrt_reduce_scatter_start_f32(ztrt_ctx *ctx, const void *in, void *out,
                                      int64_t count, int32_t mean) {
  backendOf(ctx, "reduce_scatter_start_f32");
  checkCount("reduce_scatter_start_f32", "element count", count);
  return ctx->startCollective(
      request(Collective::ReduceScatter, in, out, count, mean));
}

int64_t ztrt_all_gather_start_f32(ztrt_ctx *ctx, const void *in, void *out,
                                  int64_t count) {
  backendOf(ctx, "all_gather_start_f32");
  checkCount("all_gather_start_f32", "element count", count);
  return ctx->startCollective(
      request(Collective::AllGather, in, out, count, 0));
}

void ztrt_wait(ztrt_ctx *ctx, int64_t handle) {
  backendOf(ctx, "wait");
  ctx->waitCollective(handle, "wait");
}

} // extern "C"

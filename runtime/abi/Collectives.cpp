//===- Collectives.cpp - Entry points: the job and its collectives --------===//
//
// Part of ztrain's runtime. The entry points of ztrt_abi.def's "The job and
// its collectives": the rank and world size, and the collectives, blocking
// or started and waited, through the context's queue.
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

/// A collective's request, after the checks every collective entry makes.
CollectiveRequest request(const char *op, ztrt_ctx *ctx, int32_t dtype,
                          Collective kind, const void *in, void *out,
                          int64_t elems, int32_t mean, int32_t axis = 0) {
  backendOf(ctx, op);
  if (axis < 0 || axis >= kMeshAxes)
    fatal("%s: mesh axis %d is not 0 (all ranks), 1 (the shard group) or 2 "
          "(the replicate group)",
          op, static_cast<int>(axis));
  CollectiveRequest r;
  r.axis = axis;
  r.dtype = checkDType(op, dtype);
  checkCount(op, "element count", elems);
  r.kind = kind;
  r.in = in;
  r.out = out;
  r.elems = elems;
  r.mean = mean != 0;
  return r;
}

} // namespace

extern "C" {

int64_t ztrt_rank(ztrt_ctx *ctx) {
  backendOf(ctx, "rank");
  return ctx->comm().rank();
}

int64_t ztrt_world_size(ztrt_ctx *ctx) {
  backendOf(ctx, "world_size");
  return ctx->comm().count();
}

void ztrt_all_reduce(ztrt_ctx *ctx, int32_t dtype, const void *in, void *out,
                     int64_t n, int32_t mean, int32_t axis) {
  ctx->runCollective(request("all_reduce", ctx, dtype, Collective::AllReduce,
                             in, out, n, mean, axis),
                     "all_reduce");
}

void ztrt_reduce_scatter(ztrt_ctx *ctx, int32_t dtype, const void *in,
                         void *out, int64_t count, int32_t mean, int32_t axis) {
  ctx->runCollective(request("reduce_scatter", ctx, dtype,
                             Collective::ReduceScatter, in, out, count, mean,
                             axis),
                     "reduce_scatter");
}

void ztrt_all_gather(ztrt_ctx *ctx, int32_t dtype, const void *in, void *out,
                     int64_t count, int32_t axis) {
  ctx->runCollective(request("all_gather", ctx, dtype, Collective::AllGather,
                             in, out, count, 0, axis),
                     "all_gather");
  // A host-placed parameter's shard crosses the host link once.
  ctx->noteHostAccess(in, count * ztrt::elementBytes(static_cast<DType>(dtype)),
                      0);
}

void ztrt_bcast(ztrt_ctx *ctx, int32_t dtype, void *buf, int64_t n,
                int64_t root) {
  CollectiveRequest r =
      request("bcast", ctx, dtype, Collective::Broadcast, buf, buf, n, 0);
  const int ranks = ctx->comm().count();
  if (root < 0 || root >= ranks)
    fatal("bcast: root %lld out of range [0, %d)", static_cast<long long>(root),
          ranks);
  r.root = static_cast<int>(root);
  ctx->runCollective(r, "bcast");
}

int64_t ztrt_all_reduce_start(ztrt_ctx *ctx, int32_t dtype, const void *in,
                              void *out, int64_t n, int32_t mean,
                              int32_t axis) {
  return ctx->startCollective(request("all_reduce_start", ctx, dtype,
                                      Collective::AllReduce, in, out, n, mean,
                                      axis));
}

int64_t ztrt_reduce_scatter_start(ztrt_ctx *ctx, int32_t dtype, const void *in,
                                  void *out, int64_t count, int32_t mean,
                                  int32_t axis) {
  return ctx->startCollective(request("reduce_scatter_start", ctx, dtype,
                                      Collective::ReduceScatter, in, out, count,
                                      mean, axis));
}

int64_t ztrt_all_gather_start(ztrt_ctx *ctx, int32_t dtype, const void *in,
                              void *out, int64_t count, int32_t axis) {
  const int64_t handle = ctx->startCollective(
      request("all_gather_start", ctx, dtype, Collective::AllGather, in, out,
              count, 0, axis));
  ctx->noteHostAccess(in, count * ztrt::elementBytes(static_cast<DType>(dtype)),
                      0);
  return handle;
}

void ztrt_wait(ztrt_ctx *ctx, int64_t handle) {
  backendOf(ctx, "wait");
  ctx->waitCollective(handle, "wait");
}

} // extern "C"

//===- ContextCollectives.cpp - ztrt_ctx: collectives ---------------------===//
//
// Part of ztrain's runtime. The context's side of the collectives: handing
// them to the communication queue, waiting for them, and their accounting
// (traffic, exposed and hidden time, trace events).
//
//===----------------------------------------------------------------------===//

#include "step/Context.h"

#include "base/Support.h"
#include "step/ContextImpl.h"

using namespace ztrt;

void ztrt_ctx::setMesh(int64_t shard, int64_t replicate) {
  const int ranks = world->count(), rank = world->rank();
  if (shard < 1 || replicate < 1 || shard * replicate != ranks)
    fatal("mesh: %lld shard x %lld replicate ranks do not make the %d ranks "
          "of the job",
          static_cast<long long>(shard), static_cast<long long>(replicate),
          ranks);
  requireCollectivesWaited("laying out the mesh");
  impl->checkMesh(shard, replicate);
  const int s = static_cast<int>(shard);
  // Splits are collective over the world: whether one is made depends on
  // the mesh alone, the same on every rank. A group of every rank is the
  // world itself, a group of one (replicate 1) this rank's own.
  shardGroup.reset();
  replicateGroup.reset();
  if (s != ranks)
    shardGroup = world->split(rank / s, rank);
  if (s != 1)
    replicateGroup = world->split(rank % s, rank);
  queue->setAxis(1, shardGroup ? *shardGroup : *world);
  queue->setAxis(2, replicateGroup ? *replicateGroup : *world);
}

void ztrt_ctx::countCall(const CollectiveRequest &request) {
  CollectiveStats &stats = traffic[static_cast<int>(request.kind)];
  ++stats.calls;
  stats.bytes +=
      collectiveBytes(request.kind, request.elems * elementBytes(request.dtype),
                      queue->axis(request.axis).count());
}

int64_t ztrt_ctx::startCollective(const CollectiveRequest &request) {
  const Clock::time_point begin = Clock::now();
  countCall(request);
  const int64_t handle = queue->start(request);
  // Performed inline: the step thread did the work itself. (A device
  // backend only enqueued it: its exposed time is the device's, accounted
  // at synchronize.)
  if (!queue->threaded() && !queue->enqueued())
    overlapStats.exposedNanos += nanosBetween(begin, Clock::now());
  return handle;
}

void ztrt_ctx::finishCollective(int64_t handle,
                                const CollectiveResult &result) {
  CollectiveStats &stats = traffic[static_cast<int>(result.kind)];
  stats.wireBytes += result.wireBytes;
  stats.intraNodeWireBytes += result.intraNodeWireBytes;
  stats.interNodeWireBytes += result.interNodeWireBytes;
  if (result.deferred) {
    deferred.push_back({handle, result.ticket, result.kind, result.elems,
                        result.payloadBytes, result.wireBytes, result.ranks});
    return;
  }
  overlapStats.commNanos += nanosBetween(result.begin, result.end);
  if (tracer) {
    TraceEvent event(TraceEvent::Type::Collective);
    event.kind = static_cast<uint8_t>(result.kind);
    event.begin = result.begin;
    event.end = result.end;
    event.value = handle;
    event.elems = result.elems;
    event.bytes =
        collectiveBytes(result.kind, result.payloadBytes, result.ranks);
    event.wireBytes = result.wireBytes;
    tracer->add(event);
  }
}

/// The step thread waited for `handle` from `begin` to `end`: exposed
/// communication time (unless the device, not the host, waited), the
/// collective's accounting, and a compute-track event of `type`.
void ztrt_ctx::finishWait(int64_t handle, const CollectiveResult &result,
                          Clock::time_point begin, Clock::time_point end,
                          TraceEvent::Type type, const char *name) {
  // An enqueued wait does not block the host; how long the device's
  // compute waited is measured on the device (synchronize()).
  if (!result.deferred)
    overlapStats.exposedNanos += nanosBetween(begin, end);
  finishCollective(handle, result);
  if (tracer) {
    TraceEvent event(type);
    event.kind = static_cast<uint8_t>(result.kind);
    event.name = name;
    event.begin = begin;
    event.end = end;
    event.value = handle;
    tracer->add(event);
  }
}

void ztrt_ctx::waitCollective(int64_t handle, const char *op) {
  const Clock::time_point begin = Clock::now();
  CollectiveResult result = queue->wait(handle, op);
  finishWait(handle, result, begin, Clock::now(), TraceEvent::Type::Wait,
             nullptr);
}

void ztrt_ctx::runCollective(const CollectiveRequest &request, const char *op) {
  const Clock::time_point begin = Clock::now();
  countCall(request);
  const int64_t handle = queue->start(request);
  CollectiveResult result = queue->wait(handle, op);
  finishWait(handle, result, begin, Clock::now(),
             TraceEvent::Type::SyncCollective, op);
}

void ztrt_ctx::synchronize() {
  impl->synchronize();
  for (const DeferredCollective &c : deferred) {
    DeviceCollectiveTiming timing;
    if (!impl->takeCollectiveTiming(c.ticket, &timing))
      continue;
    overlapStats.commNanos += nanosBetween(timing.begin, timing.end);
    overlapStats.exposedNanos += timing.exposedNanos;
    if (tracer) {
      TraceEvent event(TraceEvent::Type::Collective);
      event.kind = static_cast<uint8_t>(c.kind);
      event.begin = timing.begin;
      event.end = timing.end;
      event.value = c.handle;
      event.elems = c.elems;
      event.bytes = collectiveBytes(c.kind, c.payloadBytes, c.ranks);
      event.wireBytes = c.wireBytes;
      tracer->add(event);
    }
  }
  deferred.clear();
}

void ztrt_ctx::requireCollectivesWaited(const char *when, int64_t step) {
  Collective kind = Collective::AllReduce;
  size_t count = 0;
  const int64_t handle = queue->oldestOutstanding(&kind, &count);
  if (handle == 0)
    return;
  const std::string where =
      step >= 0 ? format("%s %lld", when, static_cast<long long>(step)) : when;
  fatal("%s: collective started but never waited (handle %lld, %s; %zu "
        "outstanding)",
        where.c_str(), static_cast<long long>(handle), collectiveName(kind),
        count);
}

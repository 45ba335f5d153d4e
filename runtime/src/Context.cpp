//===- Context.cpp - The runtime context behind ztrt_ctx ------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "src/Context.h"

#include "src/Support.h"

#include <algorithm>

namespace ztrt {

Backend::~Backend() = default;

const char *categoryName(int category) {
  static const char *const names[ZTRT_CAT_COUNT] = {
      "parameters", "gradients", "optimizer_states", "activations", "other"};
  return category >= 0 && category < ZTRT_CAT_COUNT ? names[category]
                                                    : "invalid";
}

const char *collectiveName(Collective kind) {
  switch (kind) {
  case Collective::AllReduce:
    return "all_reduce";
  case Collective::ReduceScatter:
    return "reduce_scatter";
  case Collective::AllGather:
    return "all_gather";
  case Collective::Broadcast:
    return "broadcast";
  }
  return "invalid";
}

int64_t collectiveBytes(Collective kind, int64_t elems, int64_t ranks) {
  if (ranks <= 1)
    return 0;
  const int64_t bytes = elems * 4;
  switch (kind) {
  case Collective::AllReduce:
    return 2 * (ranks - 1) * bytes / ranks;
  case Collective::ReduceScatter:
  case Collective::AllGather:
    return (ranks - 1) * bytes;
  case Collective::Broadcast:
    return bytes;
  }
  return 0;
}

} // namespace ztrt

using namespace ztrt;

ztrt_ctx::ztrt_ctx(std::unique_ptr<Backend> backend,
                   std::unique_ptr<Communicator> comm)
    : impl(std::move(backend)),
      world(comm ? std::move(comm) : std::make_unique<Communicator>()) {}

ztrt_ctx::~ztrt_ctx() {
  for (auto &[ptr, allocation] : live)
    impl->deallocate(ptr);
}

void *ztrt_ctx::allocate(int64_t bytes, int32_t category, const char *op) {
  if (category < 0 || category >= ZTRT_CAT_COUNT)
    fatal("%s: invalid memory category %d", op, category);
  if (bytes < 0)
    fatal("%s: negative size %lld bytes", op, static_cast<long long>(bytes));
  void *ptr = impl->allocate(bytes);
  if (!ptr)
    fatal("%s: out of %s memory allocating %lld bytes of %s (%lld bytes "
          "live)",
          op, impl->name(), static_cast<long long>(bytes),
          categoryName(category), static_cast<long long>(stats.currentTotal));
  live.emplace(ptr, Allocation{bytes, category});
  stats.current[category] += bytes;
  stats.peak[category] =
      std::max(stats.peak[category], stats.current[category]);
  stats.currentTotal += bytes;
  stats.peakTotal = std::max(stats.peakTotal, stats.currentTotal);
  return ptr;
}

void ztrt_ctx::deallocate(void *ptr, const char *op) {
  if (!ptr)
    return;
  auto it = live.find(ptr);
  if (it == live.end())
    fatal("%s: pointer %p was not allocated by ztrt_alloc (or was freed "
          "already)",
          op, ptr);
  stats.current[it->second.category] -= it->second.bytes;
  stats.currentTotal -= it->second.bytes;
  live.erase(it);
  impl->deallocate(ptr);
}

void ztrt_ctx::recordCollective(Collective kind, int64_t elems,
                                int64_t wireBytes) {
  CollectiveStats &stats = traffic[static_cast<int>(kind)];
  ++stats.calls;
  stats.bytes += collectiveBytes(kind, elems, world->count());
  stats.wireBytes += wireBytes;
}

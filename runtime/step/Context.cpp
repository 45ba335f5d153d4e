//===- Context.cpp - The runtime context behind ztrt_ctx ------------------===//
//
// Part of ztrain's runtime. The context's life (construction, teardown),
// its memory (allocations by category, mapped host ranges), the names of
// categories and collectives, and the run-time hyper-parameters' rules.
// Its other members are defined by concern (step/ContextImpl.h).
//
//===----------------------------------------------------------------------===//

#include "step/Context.h"

#include <cmath>

#include "base/Support.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace ztrt {

Backend::~Backend() = default;

// Only backends that return true from enqueuesCollectives() are asked to
// enqueue; reaching these is a bug in the runtime, not in the program.
int64_t Backend::enqueueCollective(Communicator &, const CollectiveRequest &,
                                   int64_t *) {
  fatal("the %s backend does not enqueue collectives", name());
}

void Backend::awaitCollective(int64_t) {
  fatal("the %s backend does not enqueue collectives", name());
}

bool Backend::collectiveDone(int64_t) { return true; }

bool Backend::takeCollectiveTiming(int64_t, DeviceCollectiveTiming *) {
  return false;
}

// The kernels of --fuse=elementwise are host code; main() refuses such an
// executable on another backend (Setup.cpp), so only hand-written calls
// get here.
void Backend::runFused(ztrt_fused_fn, ztrt_fused_fn, void *const *, int64_t,
                       int64_t) {
  fatal("the %s backend cannot run this executable's fused kernels: it was "
        "compiled with --fuse=elementwise, whose generated kernels run on "
        "the cpu backend only; recompile with --fuse=none",
        name());
}

const char *categoryName(int category) {
  static const char *const names[ZTRT_CAT_COUNT] = {
      "parameters",  "gradients", "optimizer_states",
      "activations", "other",     "gathered_parameters", "buffers",
      "swap_buffers", "host_optimizer_states", "host_activations",
      "host_parameters", "host_step_buffers", "host_gradients",
      "state_swap_buffers"};
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

int64_t collectiveBytes(Collective kind, int64_t payloadBytes, int64_t ranks) {
  if (ranks <= 1)
    return 0;
  const int64_t bytes = payloadBytes;
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

double OverlapStats::hiddenFraction() const {
  if (commNanos <= 0)
    return 0.0;
  double hidden = static_cast<double>(commNanos - exposedNanos) /
                  static_cast<double>(commNanos);
  return std::clamp(hidden, 0.0, 1.0);
}

} // namespace ztrt

using namespace ztrt;

ztrt_ctx::ztrt_ctx(std::unique_ptr<Backend> backend,
                   std::unique_ptr<Communicator> comm, CommMode mode)
    : impl(std::move(backend)),
      world(comm ? std::move(comm) : std::make_unique<Communicator>()) {
  // Before the queue exists: a device backend bootstraps its transport
  // (NCCL) over the communicator here.
  impl->attach(*world);
  hyperSeen.fill(std::nan(""));
  const bool threaded = mode == CommMode::Thread || world->count() > 1;
  queue = std::make_unique<CommQueue>(*impl, *world, threaded);
  // Without a mesh, the shard group is the world and the replicate group
  // this rank alone (setMesh lays out another).
  if (world->count() > 1) {
    replicateGroup = std::make_unique<Communicator>();
    queue->setAxis(2, *replicateGroup);
  }
}

ztrt_ctx::~ztrt_ctx() {
  // The thread may still be writing into buffers freed below.
  queue.reset();
  // The host step thread may still be stepping (a fatal error elsewhere).
  {
    std::lock_guard<std::mutex> lock(hostStepMutex);
    hostStepStop = true;
    hostStepQueue.clear();
    hostStepWork.notify_all();
  }
  if (hostStepThread.joinable())
    hostStepThread.join();
  // Device work may still read them too (frees are stream-ordered on a
  // device, but a final synchronize keeps teardown simple to reason about).
  impl->synchronize();
  // Transfers in flight read and write swap buffers freed below; the swap
  // directory goes with its engine.
  if (swap)
    swap->waitAll();
  awaitHostStepUploads();
  for (auto &[ticket, pending] : deviceSwaps) {
    if (pending.fence >= 0)
      impl->awaitFence(pending.fence);
    if (pending.regionFree >= 0)
      impl->awaitFence(pending.regionFree);
  }
  for (const StagingRead &read : stagingReads)
    impl->awaitFence(read.fence);
  for (int64_t fence : copyFences)
    impl->awaitFence(fence);
  swap.reset();
  for (auto &[ptr, allocation] : live)
    release(ptr, allocation);
}

void ztrt_ctx::release(void *ptr, const Allocation &allocation) {
  switch (allocation.memory) {
  case Memory::Backend:
    impl->deallocate(ptr);
    break;
  case Memory::SwapHost:
    std::free(ptr);
    break;
  case Memory::SwapDevice: {
    auto it = swapStaging.find(ptr);
    impl->unpinHost(it->second.host);
    std::free(it->second.host);
    swapStaging.erase(it);
    impl->deallocate(ptr);
    break;
  }
  case Memory::MappedHost:
    mappedRanges.erase(static_cast<const char *>(ptr));
    impl->deallocateMappedHost(ptr);
    break;
  }
}

void *ztrt_ctx::allocate(int64_t bytes, int32_t category, const char *op) {
  if (category < 0 || category >= ZTRT_CAT_COUNT)
    fatal("%s: invalid memory category %d", op, category);
  if (bytes < 0)
    fatal("%s: negative size %lld bytes", op, static_cast<long long>(bytes));
  // Swap buffers are O_DIRECT transfer buffers: 4096-byte aligned host
  // memory (SwapSpace::allocate is fatal when memory is short); a device
  // backend computes on a device copy and stages the I/O through them.
  // Host-placed states are host memory the backend's kernels can reach.
  // The swap buffers of nvme optimizer states are only read on the host (a
  // device backend steps those states there): pinned host memory, which
  // the backend page-aligns (cudaHostAlloc alone does not: CudaOffload.cpp).
  Memory memory = Memory::Backend;
  if (category == ZTRT_CAT_SWAP_BUFFERS)
    memory = impl->hostResident() ? Memory::SwapHost : Memory::SwapDevice;
  else if (category == ZTRT_CAT_STATE_SWAP_BUFFERS)
    memory = impl->hostResident() ? Memory::SwapHost : Memory::MappedHost;
  else if ((category == ZTRT_CAT_HOST_STATES ||
            category == ZTRT_CAT_HOST_ACTIVATIONS ||
            category == ZTRT_CAT_HOST_PARAMETERS ||
            category == ZTRT_CAT_HOST_STEP_BUFFERS ||
            category == ZTRT_CAT_HOST_GRADIENTS) &&
           !impl->hostResident())
    memory = Memory::MappedHost;
  void *ptr = nullptr;
  switch (memory) {
  case Memory::Backend:
  case Memory::SwapDevice:
    ptr = impl->allocate(bytes);
    break;
  case Memory::SwapHost:
    ptr = ztrt::SwapSpace::allocate(bytes);
    break;
  case Memory::MappedHost:
    ptr = impl->allocateMappedHost(bytes);
    break;
  }
  if (!ptr)
    fatal("%s: out of %s memory allocating %lld bytes of %s (%lld bytes "
          "live)",
          op, memory == Memory::MappedHost ? "pinned host" : impl->name(),
          static_cast<long long>(bytes), categoryName(category),
          static_cast<long long>(stats.currentTotal));
  // O_DIRECT transfers need block-aligned buffers; the backend's pinned
  // host memory is page-aligned (CudaBackend::allocateMappedHost aligns
  // it: the driver suballocates small pinned allocations), which this
  // checks rather than assumes.
  if (category == ZTRT_CAT_STATE_SWAP_BUFFERS &&
      reinterpret_cast<uintptr_t>(ptr) % ztrt::SwapSpace::kAlignment != 0)
    fatal("%s: pinned host memory for %s at %p is not %lld-byte aligned, "
          "which O_DIRECT swaps need",
          op, categoryName(category), ptr,
          static_cast<long long>(ztrt::SwapSpace::kAlignment));
  if (memory == Memory::SwapDevice) {
    char *host = static_cast<char *>(ztrt::SwapSpace::allocate(bytes));
    impl->pinHost(host, ztrt::SwapSpace::roundUp(bytes));
    swapStaging[ptr] = Staging{host, bytes};
  }
  live.emplace(ptr, Allocation{bytes, category, memory});
  if (memory == Memory::MappedHost)
    mappedRanges[static_cast<const char *>(ptr)] = bytes;
  stats.current[category] += bytes;
  stats.peak[category] =
      std::max(stats.peak[category], stats.current[category]);
  stats.currentTotal += bytes;
  stats.peakTotal = std::max(stats.peakTotal, stats.currentTotal);
  // The device's bytes: every category but the host ones of zero-offload,
  // whose swap buffers a device backend holds on the device as well.
  if (!ztrt::isHostCategory(category) || memory == Memory::SwapDevice) {
    stats.currentDevice += bytes;
    stats.peakDevice = std::max(stats.peakDevice, stats.currentDevice);
  }
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
  if (!ztrt::isHostCategory(it->second.category) ||
      it->second.memory == Memory::SwapDevice)
    stats.currentDevice -= it->second.bytes;
  Allocation allocation = it->second;
  live.erase(it);
  release(ptr, allocation);
}

void ztrt_ctx::enableTrace() {
  if (!tracer)
    tracer = std::make_unique<Trace>(Clock::now());
}

namespace {
/// The flag names and valid ranges of the run-time hyper-parameters.
struct HyperRule {
  const char *flag;
  double min, max;
  bool maxOpen;
};
constexpr HyperRule kHyperRules[ZTRT_HYPER_COUNT] = {
    {"--beta1", 0.0, 1.0, true},        {"--beta2", 0.0, 1.0, true},
    {"--eps", 0.0, HUGE_VAL, false},    {"--weight-decay", 0.0, HUGE_VAL, false},
    {"--momentum", 0.0, HUGE_VAL, false}, {"--dampening", 0.0, 1.0, false}};
} // namespace

const char *ztrt::hyperFlag(int id) {
  return id >= 0 && id < ZTRT_HYPER_COUNT ? kHyperRules[id].flag : "?";
}

std::string ztrt::hyperProblem(int id, double v) {
  if (id < 0 || id >= ZTRT_HYPER_COUNT)
    return "unknown hyper-parameter id " + std::to_string(id);
  const HyperRule &r = kHyperRules[id];
  const bool ok = std::isfinite(v) && v >= r.min &&
                  (r.maxOpen ? v < r.max : v <= r.max) &&
                  (id != ZTRT_HYPER_EPS || v > 0.0);
  if (ok)
    return "";
  if (id == ZTRT_HYPER_EPS)
    return "must be finite and positive";
  if (r.max == HUGE_VAL)
    return "must be finite and >= 0";
  return r.maxOpen ? "must be in [0, 1)" : "must be in [0, 1]";
}

const char *ztrt_ctx::mappedBase(const void *ptr) const {
  if (!ptr || mappedRanges.empty())
    return nullptr;
  const char *p = static_cast<const char *>(ptr);
  auto it = mappedRanges.upper_bound(p);
  if (it == mappedRanges.begin())
    return nullptr;
  --it;
  return p < it->first + it->second ? it->first : nullptr;
}

bool ztrt_ctx::hostGradient(const void *ptr) const {
  const char *base = mappedBase(ptr);
  if (!base)
    return false;
  auto it = live.find(const_cast<char *>(base));
  return it != live.end() && it->second.category == ZTRT_CAT_HOST_GRADIENTS;
}

bool ztrt_ctx::mappedHost(const void *ptr) const {
  return mappedBase(ptr) != nullptr;
}

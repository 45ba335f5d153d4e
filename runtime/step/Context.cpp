//===- Context.cpp - The runtime context behind ztrt_ctx ------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "step/Context.h"

#include <cmath>

#include "backends/cpu/CpuBackend.h"
#include "base/Support.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>

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

namespace {

int64_t nanosBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from)
      .count();
}

/// A host step's tile, in elements: the whole update when it fits the
/// buffer (or stages nothing); else half of the buffer (64-byte aligned
/// halves), alternating halves, so that a tile's parameter upload (on a
/// copy stream) overlaps the next tile's download and kernel. The compiler
/// sizes the buffer so (dist::HostStep::bufferBytes). 0: not one element
/// fits. The updates are elementwise: tiles compute the whole update's
/// values.
int64_t hostStepTile(int64_t n, int64_t perElement, int64_t bufferBytes) {
  if (perElement == 0 || n * perElement <= bufferBytes)
    return n;
  return bufferBytes / 2 / 64 * 64 / perElement;
}

} // namespace

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
  // the backend page-aligns (cudaHostAlloc alone does not: CudaBackend.cpp).
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

void ztrt_ctx::countCall(const CollectiveRequest &request) {
  CollectiveStats &stats = traffic[static_cast<int>(request.kind)];
  ++stats.calls;
  stats.bytes += collectiveBytes(request.kind,
                                 request.elems * elementBytes(request.dtype),
                                 world->count());
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
  traffic[static_cast<int>(result.kind)].wireBytes += result.wireBytes;
  if (result.deferred) {
    deferred.push_back(
        {handle, result.ticket, result.kind, result.elems, result.payloadBytes,
         result.wireBytes});
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
        collectiveBytes(result.kind, result.payloadBytes, world->count());
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
      event.bytes = collectiveBytes(c.kind, c.payloadBytes, world->count());
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

namespace {
/// Reads / writes `bytes` of a tensor's swap file (whole blocks through an
/// aligned staging buffer, synchronously).
void fileToHost(ztrt::SwapSpace &swap, int file, int64_t fileBytes,
                void *host, int64_t bytes) {
  void *staging = ztrt::SwapSpace::allocate(fileBytes);
  swap.wait(swap.read(file, staging, fileBytes, 0));
  std::memcpy(host, staging, static_cast<size_t>(bytes));
  std::free(staging);
}
void fileFromHost(ztrt::SwapSpace &swap, int file, int64_t fileBytes,
                  const void *host, int64_t bytes) {
  void *staging = ztrt::SwapSpace::allocate(fileBytes); // zeroed past bytes
  std::memcpy(staging, host, static_cast<size_t>(bytes));
  swap.wait(swap.write(file, staging, fileBytes, 0));
  std::free(staging);
}
} // namespace

void ztrt_ctx::stateToHost(size_t i, void *host, int64_t bytes) {
  if (i < stateFiles.size() && stateFiles[i] >= 0)
    return fileToHost(*swap, stateFiles[i], stateFileBytes[i], host, bytes);
  if (mappedHost(states[i])) {
    // Host memory the device's updates write: read it once they are done.
    impl->synchronize();
    std::memcpy(host, states[i], static_cast<size_t>(bytes));
    return;
  }
  impl->copyToHost(host, states[i], bytes);
}

void ztrt_ctx::stateFromHost(size_t i, const void *host, int64_t bytes) {
  if (i < stateFiles.size() && stateFiles[i] >= 0)
    return fileFromHost(*swap, stateFiles[i], stateFileBytes[i], host, bytes);
  if (mappedHost(states[i])) {
    impl->synchronize();
    std::memcpy(states[i], host, static_cast<size_t>(bytes));
    return;
  }
  impl->copyFromHost(states[i], host, bytes);
}

// --- Swaps (ztrt_swap_*) -----------------------------------------------------

char *ztrt_ctx::stagingOf(const void *buffer, int64_t bytes, const char *op) {
  const char *p = static_cast<const char *>(buffer);
  for (auto &[base, staging] : swapStaging) {
    const char *b = static_cast<const char *>(base);
    if (p < b || p + bytes > b + staging.bytes)
      continue;
    const int64_t offset = p - b;
    if (offset % ztrt::SwapSpace::kAlignment)
      fatal("%s: the swap buffer %p is at offset %lld of its arena, not a "
            "multiple of 4096 bytes",
            op, buffer, static_cast<long long>(offset));
    return staging.host + offset;
  }
  fatal("%s: %p (%lld bytes) is not inside a swap_buffers arena", op, buffer,
        static_cast<long long>(bytes));
}

void ztrt_ctx::pollSwaps() {
  for (auto &[ticket, pending] : deviceSwaps) {
    if (pending.hostOnly)
      continue;
    // A write-back whose copy to the staging bytes landed goes to its file.
    if (pending.write && pending.io < 0 && impl->fenceReached(pending.fence)) {
      impl->awaitFence(pending.fence);
      pending.fence = -1;
      pending.io = swap->write(pending.file, pending.staging, pending.bytes,
                               pending.offset);
    }
    // A read whose file bytes arrived goes on to the device at once, on the
    // copy stream, while the kernels run (ZeRO-Infinity's host -> device
    // stage for the next use).
    if (!pending.write && pending.fence < 0 && swap->finished(pending.io))
      startDeviceCopy(pending);
  }
  stagingReads.erase(
      std::remove_if(stagingReads.begin(), stagingReads.end(),
                     [&](const StagingRead &read) {
                       if (!impl->fenceReached(read.fence))
                         return false;
                       impl->awaitFence(read.fence);
                       return true;
                     }),
      stagingReads.end());
}

void ztrt_ctx::startDeviceCopy(DeviceSwap &pending) {
  pending.fence = impl->copyFromHostOnCopyStream(
      pending.device, pending.staging, pending.bytes, pending.regionFree);
  offload.hostToDeviceBytes += pending.bytes;
  // The staging bytes feed that copy until its fence passes.
  stagingReads.push_back(
      {pending.staging, pending.staging + pending.bytes, pending.fence});
  noteCopy(pending.regionFree);
  pending.regionFree = -1;
}

void ztrt_ctx::noteCopy(int64_t fence) {
  if (impl->hostResident())
    return;
  copyFences.erase(std::remove_if(copyFences.begin(), copyFences.end(),
                                  [&](int64_t f) {
                                    if (!impl->fenceReached(f))
                                      return false;
                                    impl->awaitFence(f);
                                    return true;
                                  }),
                   copyFences.end());
  copyFences.push_back(fence);
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

bool ztrt_ctx::hostStep(const void *state) const {
  if (impl->hostResident())
    return false;
  const char *base = mappedBase(state);
  if (!base)
    return false;
  auto it = live.find(const_cast<char *>(base));
  return it != live.end() &&
         (it->second.category == ZTRT_CAT_HOST_STATES ||
          it->second.category == ZTRT_CAT_STATE_SWAP_BUFFERS);
}

void ztrt_ctx::runHostStep(void *param, DType paramType, const void *grad,
                           DType gradType, int64_t n, bool writesParamOnly,
                           const HostKernel &kernel, const char *op,
                           bool async) {
  auto job = std::make_shared<HostStepJob>();
  job->param = param;
  job->paramType = paramType;
  job->grad = grad;
  job->gradType = gradType;
  job->n = n;
  job->writesParamOnly = writesParamOnly;
  job->kernel = kernel;
  job->op = op;
  // A gradient the step spilled to host memory (zero-offload's
  // host_gradients) is read where it is.
  const bool gradOnHost = job->gradOnHost = hostGradient(grad);
  const bool paramOnHost = job->paramOnHost = mappedHost(param);
  const int64_t gradElem = elementBytes(gradType);
  const int64_t paramElem = elementBytes(paramType);
  const int64_t perElement =
      (gradOnHost ? 0 : gradElem) + (paramOnHost ? 0 : paramElem);
  if (n > 0 && hostStepTile(n, perElement, hostStepBufferBytes) < 1)
    fatal("%s: the host step needs %lld bytes of staging per element, the "
          "host step buffer has %lld bytes (the descriptor's "
          "host_step_buffer record is missing or too small)",
          op, static_cast<long long>(perElement),
          static_cast<long long>(hostStepBufferBytes));
  if (!hostKernels) {
    hostKernels = createCpuBackend();
    if (hostStepThreads > 0)
      hostKernels->setThreads(hostStepThreads);
  }
  // The host-link bytes, counted here (on the step's thread) for both
  // forms: the gradient down unless spilled, the parameter down unless
  // host-placed or only written, and up unless host-placed.
  if (!gradOnHost)
    offload.deviceToHostBytes += n * gradElem;
  if (!paramOnHost) {
    if (!writesParamOnly)
      offload.deviceToHostBytes += n * paramElem;
    offload.hostToDeviceBytes += n * paramElem;
  }
  ++offload.hostSteps;
  if (async) {
    ++offload.asyncHostSteps;
    // After this point of the compute stream the gradient is final (a
    // spill has landed: its wait came before the update) and nothing
    // issued earlier reads the parameter's old values any more.
    job->ready = impl->recordFence();
    std::lock_guard<std::mutex> lock(hostStepMutex);
    if (!hostStepThread.joinable())
      hostStepThread = std::thread([this] { hostStepThreadMain(); });
    hostStepJobs.push_back(job);
    hostStepQueue.push_back(job);
    hostStepWork.notify_one();
    return;
  }
  // The buffer and the kernels are this thread's once the host step
  // thread is done.
  drainHostSteps();
  const Clock::time_point begin = Clock::now();
  runHostStepTiles(*job, false);
  offload.hostStepNanos += nanosBetween(begin, Clock::now());
}

void ztrt_ctx::runHostStepTiles(HostStepJob &job, bool async) {
  const bool gradOnHost = job.gradOnHost;
  const bool paramOnHost = job.paramOnHost;
  const int64_t gradElem = elementBytes(job.gradType);
  const int64_t paramElem = elementBytes(job.paramType);
  const int64_t perElement =
      (gradOnHost ? 0 : gradElem) + (paramOnHost ? 0 : paramElem);
  const int64_t n = job.n;
  const int64_t half = hostStepBufferBytes / 2 / 64 * 64;
  const int64_t tile = hostStepTile(n, perElement, hostStepBufferBytes);
  if (async) {
    // Host backends never get here. The compute stream reaches the
    // update's call: a spilled gradient is in host memory, a device one is
    // final. (The host step's time starts there.)
    impl->awaitFence(job.ready);
    job.begin = Clock::now();
  } else {
    // The previous host step's uploads read the buffer until they are
    // done.
    awaitHostStepUploads();
    if (gradOnHost) {
      // Its copy was enqueued on the copy stream as the gradient was made,
      // and the compute stream waits for it (ztrt_copy_wait): done once
      // the compute stream is.
      impl->synchronize();
    }
  }
  char *buffer = static_cast<char *>(hostStepBuffer);
  int64_t last = -1;
  for (int64_t offset = 0, index = 0; offset < n; offset += tile, ++index) {
    const int64_t count = std::min(tile, n - offset);
    const int h = static_cast<int>(index % 2);
    char *staging = tile < n ? buffer + h * half : buffer;
    // That half's upload of two tiles ago (or of an earlier update) still
    // reads it; a whole update uses the whole buffer: the other half's
    // too. (Nothing staged, nothing to wait for.)
    for (int k : {h, 1 - h})
      if (perElement > 0 && (k == h || tile >= n) &&
          hostStepUploads[k] >= 0) {
        impl->awaitFence(hostStepUploads[k]);
        hostStepUploads[k] = -1;
      }
    const void *hostGrad =
        static_cast<const char *>(job.grad) + offset * gradElem;
    if (!gradOnHost) {
      // Gradients down. Synchronously: waits for the kernels that made
      // this one (the compute stream runs everything issued before it).
      // Asynchronously: on the copy stream, the compute stream went past
      // the update's call already (nvme-placed states, whose gradient the
      // plan keeps on the device until the update's wait).
      if (async)
        impl->awaitFence(impl->copyToHostOnCopyStream(
            staging, hostGrad, count * gradElem, -1,
            Backend::kHostStepLane));
      else
        impl->copyToHost(staging, hostGrad, count * gradElem);
      hostGrad = staging;
    }
    char *deviceParam = static_cast<char *>(job.param) + offset * paramElem;
    void *hostParam = deviceParam;
    if (!paramOnHost) {
      hostParam = staging + (gradOnHost ? 0 : count * gradElem);
      if (!job.writesParamOnly) {
        if (async) {
          // On the copy stream: the compute stream went past the update's
          // call already, and later work does not write the parameter.
          impl->awaitFence(impl->copyToHostOnCopyStream(
              hostParam, deviceParam, count * paramElem, -1,
              Backend::kHostStepLane));
        } else {
          impl->copyToHost(hostParam, deviceParam, count * paramElem);
        }
      }
    }
    if (async) {
      job.kernel(*hostKernels, hostParam, hostGrad, offset, count);
    } else {
      TraceScope scope(trace(), "host step");
      job.kernel(*hostKernels, hostParam, hostGrad, offset, count);
    }
    if (!paramOnHost) {
      // Parameters up, on the copy stream, after the work issued so far
      // (whatever still reads the old values); an asynchronous step's
      // readers are after its ztrt_update_wait.
      int64_t ready = -1;
      if (!async) {
        ready = impl->recordFence();
        noteCopy(ready);
      }
      last = hostStepUploads[h] = impl->copyFromHostOnCopyStream(
          deviceParam, hostParam, count * paramElem, ready,
          async ? Backend::kHostStepLane : 0);
    }
  }
  job.lastUpload = last;
  // The work issued next reads the new values: the compute stream waits
  // for the last upload (the copy stream runs them in order); an
  // asynchronous step's wait is its ztrt_update_wait's.
  if (!async && last >= 0)
    impl->waitFenceOnDevice(last);
}

void ztrt_ctx::hostStepThreadMain() {
  // ZTRT_HOST_STEP_DELAY_US (tests): each host step starts after a random
  // delay of up to that many microseconds, as a slow host would make it,
  // so that a reader the waits fail to order after it sees stale values.
  const char *delayText = std::getenv("ZTRT_HOST_STEP_DELAY_US");
  const long long maxDelay = delayText ? std::atoll(delayText) : 0;
  std::minstd_rand delays(static_cast<unsigned>(maxDelay));
  // The rank's device for the copies and fences made here, and --threads
  // for the kernels' loops (OpenMP's thread count is per thread).
  impl->bindThread();
  if (hostStepThreads > 0)
    hostKernels->adoptThreads(hostStepThreads);
  std::unique_lock<std::mutex> lock(hostStepMutex);
  for (;;) {
    hostStepWork.wait(lock,
                      [&] { return hostStepStop || !hostStepQueue.empty(); });
    if (hostStepQueue.empty())
      return;
    std::shared_ptr<HostStepJob> job = hostStepQueue.front();
    hostStepQueue.erase(hostStepQueue.begin());
    hostStepBusy = true;
    lock.unlock();
    if (maxDelay > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(
          static_cast<long long>(delays() % (maxDelay + 1))));
    runHostStepTiles(*job, true);
    job->end = Clock::now();
    lock.lock();
    job->done = true;
    hostStepBusy = false;
    hostStepDone.notify_all();
  }
}

void ztrt_ctx::drainHostSteps() {
  std::unique_lock<std::mutex> lock(hostStepMutex);
  hostStepDone.wait(lock,
                    [&] { return hostStepQueue.empty() && !hostStepBusy; });
}

void ztrt_ctx::markUpdateAsync(const void *param, const char *op) {
  if (asyncNext)
    fatal("%s: ztrt_update_async of the parameter at %p follows one of the "
          "parameter at %p with no update between",
          op, param, asyncNext);
  // A host backend runs every update where it is, synchronously.
  if (!impl->hostResident())
    asyncNext = param;
}

bool ztrt_ctx::takeUpdateAsync(const void *param, const char *op) {
  const void *announced = asyncNext;
  asyncNext = nullptr;
  if (announced && announced != param)
    fatal("%s: ztrt_update_async named the parameter at %p, the update is "
          "of the parameter at %p (the call must come right before its "
          "update)",
          op, announced, param);
  return announced != nullptr;
}

void ztrt_ctx::waitUpdate(const void *param) {
  std::shared_ptr<HostStepJob> job;
  {
    std::unique_lock<std::mutex> lock(hostStepMutex);
    auto it = std::find_if(hostStepJobs.begin(), hostStepJobs.end(),
                           [&](const auto &j) { return j->param == param; });
    if (it == hostStepJobs.end())
      return;
    job = *it;
    const Clock::time_point begin = Clock::now();
    hostStepDone.wait(lock, [&] { return job->done; });
    // (Only this thread adds and removes jobs: `it` is still valid.)
    hostStepJobs.erase(it);
    offload.updateWaitNanos += nanosBetween(begin, Clock::now());
    offload.hostStepNanos += nanosBetween(job->begin, job->end);
    if (Trace *t = trace()) {
      TraceEvent wait(TraceEvent::Type::UpdateWait);
      wait.begin = begin;
      wait.end = Clock::now();
      t->add(wait);
      TraceEvent step(TraceEvent::Type::HostStep);
      step.name = job->op;
      step.begin = job->begin;
      step.end = job->end;
      step.elems = job->n;
      t->add(step);
    }
  }
  // The parameter's readers, issued next, see the new values.
  if (job->lastUpload >= 0)
    impl->waitFenceOnDevice(job->lastUpload);
}

void ztrt_ctx::requireUpdatesWaited(const char *when) {
  std::lock_guard<std::mutex> lock(hostStepMutex);
  if (asyncNext)
    fatal("%s: ztrt_update_async of the parameter at %p was not followed "
          "by its update",
          when, asyncNext);
  if (!hostStepJobs.empty())
    fatal("%s: the %s of the parameter at %p ran asynchronously but was "
          "never waited (ztrt_update_wait; %zu outstanding)",
          when, hostStepJobs.front()->op, hostStepJobs.front()->param,
          hostStepJobs.size());
}

size_t ztrt_ctx::pendingHostSteps() const {
  std::lock_guard<std::mutex> lock(hostStepMutex);
  return hostStepJobs.size();
}

void ztrt_ctx::awaitHostStepUploads() {
  for (int64_t &fence : hostStepUploads)
    if (fence >= 0) {
      impl->awaitFence(fence);
      fence = -1;
    }
}

void ztrt_ctx::noteCopyStart(Clock::time_point begin, int64_t ticket,
                             int64_t bytes, const char *name) {
  Trace *t = trace();
  if (!t)
    return;
  if (!impl->hostResident()) {
    pendingCopies[ticket].push_back({begin, bytes, name});
    return;
  }
  TraceEvent io(TraceEvent::Type::Io);
  io.name = name;
  io.begin = begin;
  io.end = Clock::now();
  io.value = ticket;
  io.elems = -1;
  io.bytes = bytes;
  t->add(io);
}

void ztrt_ctx::noteStateAccess(const void *state, int64_t bytes) {
  noteHostAccess(state, bytes, bytes);
}

void ztrt_ctx::noteHostAccess(const void *ptr, int64_t toDevice,
                              int64_t toHost) {
  if (!mappedBase(ptr))
    return;
  offload.hostToDeviceBytes += toDevice;
  offload.deviceToHostBytes += toHost;
}

int64_t ztrt_ctx::startSwap(int file, void *buffer, int64_t bytes,
                            bool write, int64_t offset) {
  if (impl->hostResident())
    return write ? swap->write(file, buffer, bytes, offset)
                 : swap->read(file, buffer, bytes, offset);
  // (Moves the parameters' swaps on: their device copies and file writes.)
  pollSwaps();
  if (mappedHost(buffer)) {
    // An nvme optimizer state's buffer (state_swap_buffers): the host step
    // that reads and writes it is done with the buffer when a write-back
    // starts (it ran on this thread, or an asynchronous one's
    // ztrt_update_wait came first), and the plan frees the region before
    // a read into it starts (as on a host backend).
    DeviceSwap pending{file, buffer, nullptr, bytes, write};
    pending.offset = offset;
    pending.hostOnly = true;
    pending.io = write ? swap->write(file, buffer, bytes, offset)
                       : swap->read(file, buffer, bytes, offset);
    const int64_t ticket = ++lastSwapTicket;
    deviceSwaps.emplace(ticket, pending);
    return ticket;
  }
  char *staging = stagingOf(buffer, bytes, write ? "swap_out" : "swap_in");
  DeviceSwap pending{file, buffer, staging, bytes, write};
  pending.offset = offset;
  if (write) {
    // After the work issued so far (the update that wrote the buffer), on
    // the copy stream.
    int64_t ready = impl->recordFence();
    pending.fence =
        impl->copyToHostOnCopyStream(staging, buffer, bytes, ready);
    noteCopy(ready);
    offload.deviceToHostBytes += bytes;
  } else {
    // The staging bytes may still feed an earlier buffer's copy to the
    // device: the file may overwrite them only once that copy is done.
    stagingReads.erase(
        std::remove_if(stagingReads.begin(), stagingReads.end(),
                       [&](const StagingRead &read) {
                         if (read.end <= staging ||
                             read.begin >= staging + bytes)
                           return false;
                         impl->awaitFence(read.fence);
                         return true;
                       }),
        stagingReads.end());
    pending.io = swap->read(file, staging, bytes, offset);
    // The device buffer is free once the kernels issued so far (its
    // previous tensor's) are done.
    pending.regionFree = impl->recordFence();
  }
  const int64_t ticket = ++lastSwapTicket;
  deviceSwaps.emplace(ticket, pending);
  return ticket;
}

void ztrt_ctx::finishSwap(int64_t ticket) {
  if (impl->hostResident())
    return swap->wait(ticket);
  auto it = deviceSwaps.find(ticket);
  if (it == deviceSwaps.end())
    fatal("swap_wait: swap %lld is not in flight (waited twice?)",
          static_cast<long long>(ticket));
  DeviceSwap pending = it->second;
  deviceSwaps.erase(it);
  if (pending.hostOnly) {
    swap->wait(pending.io);
    pollSwaps();
    return;
  }
  if (pending.write) {
    if (pending.io < 0) {
      impl->awaitFence(pending.fence);
      pending.io = swap->write(pending.file, pending.staging, pending.bytes,
                               pending.offset);
    }
    swap->wait(pending.io);
  } else {
    swap->wait(pending.io);
    if (pending.fence < 0)
      startDeviceCopy(pending);
    // The work the step issues next reads the buffer: on the device it
    // waits for the copy; the host goes on.
    impl->waitFenceOnDevice(pending.fence);
  }
  pollSwaps();
}

void ztrt_ctx::paramToHost(size_t i, void *host, int64_t bytes) {
  if (i < paramFiles.size() && paramFiles[i] >= 0)
    return fileToHost(*swap, paramFiles[i], paramFileBytes[i], host, bytes);
  if (mappedHost(params[i])) {
    impl->synchronize();
    std::memcpy(host, params[i], static_cast<size_t>(bytes));
    return;
  }
  impl->copyToHost(host, params[i], bytes);
}

void ztrt_ctx::paramFromHost(size_t i, const void *host, int64_t bytes) {
  if (i < paramFiles.size() && paramFiles[i] >= 0)
    return fileFromHost(*swap, paramFiles[i], paramFileBytes[i], host, bytes);
  if (mappedHost(params[i])) {
    impl->synchronize();
    std::memcpy(params[i], host, static_cast<size_t>(bytes));
    return;
  }
  impl->copyFromHost(params[i], host, bytes);
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

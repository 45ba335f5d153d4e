//===- Runtime.cpp - The CUDA runtime API on the host ---------------------===//
//
// Part of ztrain's CUDA emulator (docs/cuda.md#the-cuda-emulator).
//
// Devices: ZTRT_CUDAEMU_DEVICES of them (default 8, a node of eight GPUs;
// 0 makes cudaGetDeviceCount fail as on a machine without one), each with
// ZTRT_CUDAEMU_MEMORY bytes (default 4 GiB; past it allocations fail with
// cudaErrorMemoryAllocation).
//
// Memory: device allocations are host allocations in a registry, so that
// copies, memsets, kernel arguments and library calls can check that what
// they are given is device memory of the extent they touch. cudaFreeAsync
// frees when its stream gets there; from the call on, the memory counts as
// freed for every check. Pinned host memory (cudaMallocHost) is host
// memory the registry knows, so copies to and from it are asynchronous as
// on a GPU; copies to pageable host memory complete before the call
// returns (CUDA may synchronize there; code must not count on either).
//
// Streams: a worker thread each, running its work in order; streams run
// concurrently with each other and with the host, so work that a program
// fails to order with events races here as it would on a GPU
// (ZTRT_CUDAEMU_DELAY_US makes such races likely). The legacy
// default stream (0) runs work at once on the calling thread (the
// backend's streams are non-blocking: nothing orders them with it).
// Streams and events belong to the device current on the thread that
// created them (cudaSetDevice is per thread, device 0 until called);
// recording an event on another device's stream fails as on a GPU
// (cudaErrorInvalidResourceHandle).
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/emu/RuntimeState.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>

namespace ztrt::cudaemu {

Registry &registry() {
  static Registry *r =
      new Registry; // Never destroyed: workers may outlive exit.
  return *r;
}

std::atomic<int> stickyError{cudaSuccess};
thread_local cudaError_t lastError = cudaSuccess;
thread_local int device = 0;
MemPool pools[64];

size_t memoryLimit() {
  static const size_t limit =
      static_cast<size_t>(envInt("ZTRT_CUDAEMU_MEMORY", 4ll << 30));
  return limit;
}

/// The allocation containing ptr (nullptr if none); registry locked.
const std::pair<const uintptr_t, Allocation> *find(const void *ptr) {
  auto &allocs = registry().allocations;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = allocs.upper_bound(p);
  if (it == allocs.begin())
    return nullptr;
  --it;
  if (p >= it->first + std::max<size_t>(it->second.bytes, 1))
    return nullptr;
  return &*it;
}

/// [ptr, ptr + bytes) inside one allocation of the kind; `enqueued`: for
/// work already enqueued when its stream runs it, which may use memory
/// whose cudaFreeAsync comes later in stream order.
bool inside(const void *ptr, size_t bytes, Want want, bool enqueued) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  const auto *a = find(ptr);
  if (!a || a->second.released || (a->second.freed && !enqueued))
    return false;
  const bool kind = want == Want::Pinned
                        ? a->second.pinned
                        : !a->second.pinned || a->second.mapped;
  if (!kind)
    return false;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  return p + bytes <= a->first + a->second.bytes;
}

bool pinnedHost(const void *ptr, size_t bytes) {
  return inside(ptr, bytes, Want::Pinned);
}

/// Where a pinned allocation starts past its aligned_alloc block.
constexpr size_t kPinnedOffset = 256;

cudaError_t allocate(void **ptr, size_t bytes, bool pinned) {
  if (!ptr)
    return fail(cudaErrorInvalidValue);
  if (cudaError_t e = sticky())
    return e;
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  // Device memory 256-byte aligned, as cudaMalloc's is. Pinned host memory
  // 256-byte aligned and never page-aligned: the driver suballocates small
  // pinned allocations (an H100 with driver 580.159 returned 0x...b200),
  // so a program that needs pages (O_DIRECT I/O) must align them itself,
  // and here finds out if it does not.
  const size_t align = pinned ? 4096 : 256;
  // (aligned_alloc wants a multiple of the alignment: the offset takes a
  // page of its own.)
  const size_t rounded =
      (std::max<size_t>(bytes, 1) + (pinned ? kPinnedOffset : 0) + align - 1) /
      align * align;
  if (!pinned &&
      (rounded > memoryLimit() || r.deviceBytes > memoryLimit() - rounded)) {
    *ptr = nullptr;
    return fail(cudaErrorMemoryAllocation);
  }
  void *p = std::aligned_alloc(align, rounded);
  if (!p)
    return fail(cudaErrorMemoryAllocation);
  if (pinned)
    p = static_cast<char *>(p) + kPinnedOffset;
  r.allocations[reinterpret_cast<uintptr_t>(p)] = {bytes, pinned, false, false};
  if (!pinned)
    r.deviceBytes += rounded;
  *ptr = p;
  return cudaSuccess;
}

/// Marks a device allocation freed; the memory itself is released by
/// `release` (now, or when a stream gets there).
cudaError_t markFreed(void *ptr, bool pinned, size_t *bytes) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == r.allocations.end() || it->second.pinned != pinned ||
      it->second.freed || it->second.registered) {
    std::fprintf(stderr, "cuda emulator: %s(%p): not the start of a live %s\n",
                 pinned ? "cudaFreeHost" : "cudaFree", ptr,
                 pinned ? "pinned host allocation" : "device allocation");
    return fail(cudaErrorInvalidValue);
  }
  it->second.freed = true;
  *bytes = it->second.bytes;
  return cudaSuccess;
}

/// Releases an allocation into quarantine: it stays in the registry, freed,
/// and its memory is not reused until 256 MiB freed after it have joined
/// the quarantine, so that a late access to it is recognised (and not made
/// to another allocation at the same address).
void release(void *ptr, bool pinned) {
  constexpr size_t kQuarantineBytes = 256u << 20;
  Registry &r = registry();
  std::vector<void *> expired;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == r.allocations.end())
      return;
    const size_t rounded =
        (std::max<size_t>(it->second.bytes, 1) + 255) / 256 * 256;
    if (!pinned)
      r.deviceBytes -= rounded;
    it->second.freed = it->second.released = true;
    r.quarantine.push_back({ptr, rounded});
    r.quarantineBytes += rounded;
    while (r.quarantineBytes > kQuarantineBytes) {
      auto [old, bytes] = r.quarantine.front();
      r.quarantine.pop_front();
      r.quarantineBytes -= bytes;
      auto gone = r.allocations.find(reinterpret_cast<uintptr_t>(old));
      const bool wasPinned = gone != r.allocations.end() && gone->second.pinned;
      if (gone != r.allocations.end())
        r.allocations.erase(gone);
      expired.push_back(wasPinned ? static_cast<char *>(old) - kPinnedOffset
                                  : old);
    }
  }
  for (void *p : expired)
    std::free(p);
}

bool validEvent(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  return registry().events.count(e) != 0;
}

/// Checks a copy's two ranges against its kind; prints what is wrong.
bool checkCopy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
               const char *api) {
  const bool dstDevice = isDevice(dst, bytes), srcDevice = isDevice(src, bytes);
  bool ok = true;
  const char *problem = "";
  switch (kind) {
  case cudaMemcpyHostToDevice:
    ok = dstDevice && !anyDevice(src);
    problem = !dstDevice ? "destination is not device memory of that extent"
                         : "source is device memory";
    break;
  case cudaMemcpyDeviceToHost:
    ok = srcDevice && !anyDevice(dst);
    problem = !srcDevice ? "source is not device memory of that extent"
                         : "destination is device memory";
    break;
  case cudaMemcpyDeviceToDevice:
    ok = srcDevice && dstDevice;
    problem = !srcDevice ? "source is not device memory of that extent"
                         : "destination is not device memory of that extent";
    break;
  case cudaMemcpyDefault:
    ok = (srcDevice || !anyDevice(src)) && (dstDevice || !anyDevice(dst));
    problem = "a range overruns its device allocation";
    break;
  default:
    ok = false;
    problem = "the kind is not one of cudaMemcpyHostToDevice, "
              "cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, "
              "cudaMemcpyDefault";
  }
  if (!ok)
    std::fprintf(stderr, "cuda emulator: %s(dst %s, src %s, %zu bytes): %s\n",
                 api, describe(dst).c_str(), describe(src).c_str(), bytes,
                 problem);
  return ok;
}

/// When a stream reaches a copy: its device ranges must still be live (a
/// free that is not ordered after the copy is a use after free on a GPU).
bool stillValid(void *dst, const void *src, size_t bytes) {
  for (const void *p : {static_cast<const void *>(dst), src}) {
    if (!p || !anyDevice(p) || inside(p, bytes, Want::DeviceAccessible, true))
      continue;
    fault("a copy on a stream touches %s, freed before the stream got there "
          "(its free is not ordered after the copy)",
          describe(p).c_str());
    return false;
  }
  return true;
}

// --- Internals (Emu.h) ------------------------------------------------------

long long envInt(const char *name, long long fallback) {
  const char *v = std::getenv(name);
  if (!v || !*v)
    return fallback;
  char *end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (*end) {
    std::fprintf(stderr, "cuda emulator: %s=%s is not an integer\n", name, v);
    std::exit(2);
  }
  return x;
}

int deviceCount() {
  static const int n = static_cast<int>(envInt("ZTRT_CUDAEMU_DEVICES", 8));
  return n;
}
int currentDevice() { return device; }

void vreport(const char *prefix, const char *format, va_list args) {
  char buf[1024];
  std::vsnprintf(buf, sizeof(buf), format, args);
  std::fprintf(stderr, "cuda emulator: %s%s\n", prefix, buf);
}

void report(const char *format, ...) {
  va_list args;
  va_start(args, format);
  vreport("", format, args);
  va_end(args);
}

void fault(const char *format, ...) {
  va_list args;
  va_start(args, format);
  vreport("fault: ", format, args);
  va_end(args);
  int expected = cudaSuccess;
  stickyError.compare_exchange_strong(expected, cudaErrorIllegalAddress);
}

cudaError_t sticky() { return static_cast<cudaError_t>(stickyError.load()); }

cudaError_t fail(cudaError_t error) {
  lastError = error;
  return error;
}

bool validStream(cudaStream_t s) {
  if (!s)
    return true;
  std::lock_guard<std::mutex> lock(registry().mutex);
  return registry().streams.count(s) != 0;
}

void enqueue(cudaStream_t stream, std::function<void()> op) {
  if (!stream) {
    op();
    return;
  }
  stream->push(std::move(op));
}

void drain(cudaStream_t stream) {
  if (stream)
    stream->drain();
}

bool isDevice(const void *ptr, size_t bytes) {
  return inside(ptr, bytes, Want::DeviceAccessible);
}

bool isLiveDevice(const void *ptr, size_t bytes) {
  return inside(ptr, bytes, Want::DeviceAccessible, true);
}

bool anyDevice(const void *ptr) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  const auto *a = find(ptr);
  return a && !a->second.pinned;
}

std::string describe(const void *ptr) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  char buf[160];
  const auto *a = find(ptr);
  if (!a) {
    std::snprintf(buf, sizeof(buf), "%p (host memory)", ptr);
  } else {
    const auto offset = reinterpret_cast<uintptr_t>(ptr) - a->first;
    std::snprintf(
        buf, sizeof(buf), "%p (%s%s of %zu bytes, at offset %zu)", ptr,
        a->second.released ? "freed "
        : a->second.freed  ? "to-be-freed "
                           : "",
        a->second.pinned ? "pinned host allocation" : "device allocation",
        a->second.bytes, static_cast<size_t>(offset));
  }
  return buf;
}

} // namespace ztrt::cudaemu

using namespace ztrt::cudaemu;

// --- Errors -----------------------------------------------------------------

const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "no error";
  case cudaErrorInvalidValue:
    return "invalid argument";
  case cudaErrorMemoryAllocation:
    return "out of memory";
  case cudaErrorInitializationError:
    return "initialization error";
  case cudaErrorInsufficientDriver:
    return "CUDA driver version is insufficient for CUDA runtime version";
  case cudaErrorNoDevice:
    return "no CUDA-capable device is detected";
  case cudaErrorInvalidDevice:
    return "invalid device ordinal";
  case cudaErrorInvalidResourceHandle:
    return "invalid resource handle";
  case cudaErrorNotReady:
    return "device not ready";
  case cudaErrorIllegalAddress:
    return "an illegal memory access was encountered";
  case cudaErrorLaunchFailure:
    return "unspecified launch failure";
  case cudaErrorInvalidConfiguration:
    return "invalid configuration argument";
  default:
    return "unknown error";
  }
}

const char *cudaGetErrorName(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "cudaSuccess";
  case cudaErrorInvalidValue:
    return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation:
    return "cudaErrorMemoryAllocation";
  case cudaErrorInitializationError:
    return "cudaErrorInitializationError";
  case cudaErrorInsufficientDriver:
    return "cudaErrorInsufficientDriver";
  case cudaErrorNoDevice:
    return "cudaErrorNoDevice";
  case cudaErrorInvalidDevice:
    return "cudaErrorInvalidDevice";
  case cudaErrorInvalidResourceHandle:
    return "cudaErrorInvalidResourceHandle";
  case cudaErrorNotReady:
    return "cudaErrorNotReady";
  case cudaErrorIllegalAddress:
    return "cudaErrorIllegalAddress";
  case cudaErrorLaunchFailure:
    return "cudaErrorLaunchFailure";
  case cudaErrorInvalidConfiguration:
    return "cudaErrorInvalidConfiguration";
  default:
    return "cudaErrorUnknown";
  }
}

cudaError_t cudaGetLastError() {
  if (cudaError_t e = sticky())
    return e;
  cudaError_t e = lastError;
  lastError = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  if (cudaError_t e = sticky())
    return e;
  return lastError;
}

// --- Devices ----------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int *count) {
  if (!count)
    return fail(cudaErrorInvalidValue);
  *count = std::max(deviceCount(), 0);
  if (*count == 0)
    return fail(cudaErrorNoDevice);
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
  ZTRT_STICKY();
  if (d < 0 || d >= deviceCount())
    return fail(cudaErrorInvalidDevice);
  device = d;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d) {
  if (!d)
    return fail(cudaErrorInvalidValue);
  *d = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int d) {
  if (!prop)
    return fail(cudaErrorInvalidValue);
  if (d < 0 || d >= deviceCount())
    return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name),
                "ztrain CUDA emulator (host CPU, not a GPU)");
  prop->totalGlobalMem = memoryLimit();
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->maxThreadsPerBlock = 1024;
  prop->warpSize = 32;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int d) {
  if (!value)
    return fail(cudaErrorInvalidValue);
  if (d < 0 || d >= deviceCount())
    return fail(cudaErrorInvalidDevice);
  switch (attr) {
  case cudaDevAttrMaxThreadsPerBlock:
    *value = 1024;
    break;
  case cudaDevAttrMultiProcessorCount:
    *value = 1;
    break;
  // As cudaGetDeviceProperties says: one sm_90 SM. The clock (kHz) is a
  // round figure, not the host CPU's: the emulator's peak rate is only
  // there so that the MFU path runs.
  case cudaDevAttrClockRate:
    *value = 1000000;
    break;
  case cudaDevAttrComputeCapabilityMajor:
    *value = 9;
    break;
  case cudaDevAttrComputeCapabilityMinor:
    *value = 0;
    break;
  case cudaDevAttrMemoryPoolsSupported:
    *value = 1;
    break;
  default:
    return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  // Hopper's range; priorities change nothing here.
  if (least)
    *least = 0;
  if (greatest)
    *greatest = -5;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int d) {
  if (!pool)
    return fail(cudaErrorInvalidValue);
  if (d < 0 || d >= deviceCount() || d >= 64)
    return fail(cudaErrorInvalidDevice);
  *pool = &pools[d];
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                    void *value) {
  if (!pool || !value || attr < cudaMemPoolReuseFollowEventDependencies ||
      attr > cudaMemPoolAttrReleaseThreshold)
    return fail(cudaErrorInvalidValue);
  return cudaSuccess; // Allocations are the host's: nothing to tune.
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t) {
  if (!pool)
    return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  ZTRT_STICKY();
  std::vector<Stream *> streams;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    streams.assign(registry().streams.begin(), registry().streams.end());
  }
  for (Stream *s : streams)
    s->drain();
  return sticky();
}

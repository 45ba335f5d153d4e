//===- RuntimeState.h - The CUDA emulator's runtime state -------*- C++ -*-===//
//
// Part of ztrain's CUDA emulator (private). The state the CUDA runtime API
// functions share: streams and events, the registry of allocations, and
// the checks on ranges, defined in Runtime.cpp and used by it (errors,
// devices), RuntimeMemory.cpp (allocation, copies, memsets) and
// RuntimeStreams.cpp (streams, events).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CUDA_EMU_RUNTIMESTATE_H
#define ZTRT_BACKENDS_CUDA_EMU_RUNTIMESTATE_H

#include "backends/cuda/emu/Emu.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>

namespace ztrt::cudaemu {

using Clock = std::chrono::steady_clock;

struct Stream {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::function<void()>> work;
  bool busy = false, stopping = false;
  int priority = 0;
  /// The device current on the creating thread (cudaSetDevice is per
  /// thread): an event may only be recorded on a stream of its own device.
  int device = 0;
  std::thread worker;
  // ZTRT_CUDAEMU_DELAY_US: each operation starts after a random delay of
  // up to that many microseconds, so that streams a program fails to order
  // get out of step (seeded by the stream's number: reproducible).
  long long delayMicros = 0;
  std::mt19937_64 rng;

  Stream() {
    static std::atomic<uint64_t> streams{0};
    static const long long delay = envInt("ZTRT_CUDAEMU_DELAY_US", 0);
    delayMicros = delay;
    rng.seed(++streams);
    worker = std::thread([this] { run(); });
  }
  ~Stream() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    cv.notify_all();
    worker.join();
  }
  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      cv.wait(lock, [&] { return stopping || !work.empty(); });
      if (work.empty())
        return;
      std::function<void()> op = std::move(work.front());
      work.pop_front();
      busy = true;
      lock.unlock();
      if (delayMicros > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(
            std::uniform_int_distribution<long long>(0, delayMicros)(rng)));
      op();
      lock.lock();
      busy = false;
      cv.notify_all();
    }
  }
  void push(std::function<void()> op) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      work.push_back(std::move(op));
    }
    cv.notify_all();
  }
  bool idle() {
    std::lock_guard<std::mutex> lock(mutex);
    return work.empty() && !busy;
  }
  void drain() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return work.empty() && !busy; });
  }
};

/// An event's state outlives the handle: work already enqueued may still
/// complete a record after cudaEventDestroy (CUDA allows that).
struct EventState {
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
  Clock::time_point time;
};

struct Event {
  unsigned flags = 0;
  int device = 0; // (as Stream::device)
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

struct MemPool {};

struct Allocation {
  size_t bytes;
  bool pinned;
  bool freed;    // cudaFree / cudaFreeAsync called: no new work may use it
  bool released; // the free happened (a stream reached cudaFreeAsync)
  /// Pinned host memory mapped into the device's address space
  /// (cudaHostAllocMapped, cudaHostRegisterMapped): kernels, copies and
  /// library calls may use it as device memory (over PCIe on a GPU).
  bool mapped = false;
  /// Host memory of the program's, pinned by cudaHostRegister: it is not
  /// the emulator's to free (cudaHostUnregister forgets it).
  bool registered = false;
};

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> allocations;
  size_t deviceBytes = 0;
  std::deque<std::pair<void *, size_t>> quarantine;
  size_t quarantineBytes = 0;
  std::set<Stream *> streams;
  std::set<Event *> events;
};

/// What a range must be: memory the device can use (device allocations
/// and mapped pinned host memory), or pinned host memory.
enum class Want { DeviceAccessible, Pinned };

Registry &registry();
/// ZTRT_CUDAEMU_MEMORY: each device's bytes.
size_t memoryLimit();
/// The allocation containing ptr (nullptr if none); registry locked.
const std::pair<const uintptr_t, Allocation> *find(const void *ptr);
/// [ptr, ptr + bytes) inside one allocation of the kind; `enqueued`: for
/// work already enqueued when its stream runs it, which may use memory
/// whose cudaFreeAsync comes later in stream order.
bool inside(const void *ptr, size_t bytes, Want want, bool enqueued = false);
bool pinnedHost(const void *ptr, size_t bytes);
cudaError_t allocate(void **ptr, size_t bytes, bool pinned);
cudaError_t markFreed(void *ptr, bool pinned, size_t *bytes);
void release(void *ptr, bool pinned);
bool validEvent(cudaEvent_t e);
/// Checks a copy's two ranges against its kind; prints what is wrong.
bool checkCopy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
               const char *api);
bool stillValid(void *dst, const void *src, size_t bytes);

extern std::atomic<int> stickyError;
extern thread_local cudaError_t lastError;
extern thread_local int device;
extern MemPool pools[64];

} // namespace ztrt::cudaemu

#define ZTRT_STICKY()                                                          \
  do {                                                                         \
    if (cudaError_t e_ = sticky())                                             \
      return e_;                                                               \
  } while (0)

#endif // ZTRT_BACKENDS_CUDA_EMU_RUNTIMESTATE_H

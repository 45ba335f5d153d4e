//===- CudaOffload.cpp - The cuda backend: zero-offload's host memory -----===//
//
// Part of ztrain's runtime. The cuda backend's host memory for
// zero-offload (mapped pinned memory, pinning) and its fences: the copy
// streams' asynchronous copies and the events that order them.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackendImpl.h"

#include "base/Support.h"

#include <algorithm>
#include <cstdint>
#include <mutex>

namespace ztrt {


// --- Host memory of zero-offload -------------------------------------------
// Optimizer states placed on the host live in mapped pinned memory: the
// update kernels read and write them in place, over PCIe (zero-copy),
// and nothing else touches them during a step. Swap buffers of nvme
// tensors are device memory with a pinned host staging copy; the copies
// between the two are ordered on the compute stream and fenced by events
// (runtime/abi/Offload.cpp, ztrt_swap_*).

bool CudaBackend::hostResident() const { return false; }

// Page-aligned: the state swap buffers among them are O_DIRECT buffers
// (Context.cpp checks), and the host step's vector loads like aligned
// data. cudaHostAlloc does not promise it: the driver suballocates small
// pinned allocations, 512-byte aligned (seen on an H100, driver
// 580.159, CUDA 13.0: 0x...b200). So each allocation takes a page more
// and hands out its first page-aligned address; `mappedBases` keeps what
// cudaFreeHost needs.
void *CudaBackend::allocateMappedHost(int64_t bytes) {
  constexpr size_t kPage = 4096;
  void *base = nullptr;
  cudaError_t status = cudaHostAlloc(
      &base, static_cast<size_t>(std::max<int64_t>(bytes, 1)) + kPage,
      cudaHostAllocMapped | cudaHostAllocPortable);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  check(status, "cudaHostAlloc");
  void *device = nullptr;
  check(cudaHostGetDevicePointer(&device, base, 0),
        "cudaHostGetDevicePointer");
  // Unified addressing (every 64-bit CUDA platform): the device's pointer
  // is the host's, so the host side (checkpoints) can use it as well.
  if (device != base)
    fatal("--backend cuda: mapped host memory has a device address "
          "(%p) other than its host address (%p): this platform lacks "
          "unified addressing, which host-placed optimizer states need",
          device, base);
  const uintptr_t at = reinterpret_cast<uintptr_t>(base);
  void *host = reinterpret_cast<void *>((at + kPage - 1) / kPage * kPage);
  std::lock_guard<std::mutex> lock(mappedMutex);
  mappedBases[host] = base;
  return host;
}

void CudaBackend::deallocateMappedHost(void *ptr) {
  void *base = nullptr;
  {
    std::lock_guard<std::mutex> lock(mappedMutex);
    auto it = mappedBases.find(ptr);
    if (it == mappedBases.end())
      fatal("--backend cuda: %p is not mapped host memory of this backend",
            ptr);
    base = it->second;
    mappedBases.erase(it);
  }
  // cudaFreeHost waits for the device, which may still run an update
  // on it.
  check(cudaFreeHost(base), "cudaFreeHost");
}

void CudaBackend::pinHost(void *ptr, int64_t bytes) {
  if (bytes > 0)
    check(cudaHostRegister(ptr, static_cast<size_t>(bytes),
                           cudaHostRegisterPortable),
          "cudaHostRegister");
}

void CudaBackend::unpinHost(void *ptr) {
  check(cudaHostUnregister(ptr), "cudaHostUnregister");
}

// The fence calls may come from the step's thread and the host step
// thread at once (Backend.h): `fenceMutex` guards the fence table, the
// spare events and the copy stream's creation. awaitFence blocks outside
// it (an event is reused only once its fence is retired).
int64_t CudaBackend::recordFence() {
  std::lock_guard<std::mutex> lock(fenceMutex);
  return recordFence(compute);
}

int64_t CudaBackend::copyFromHostOnCopyStream(void *dst, const void *hostSrc,
                                              int64_t bytes, int64_t after,
                                              int lane) {
  return copyOnCopyStream(dst, hostSrc, bytes, after,
                          cudaMemcpyHostToDevice, lane);
}

int64_t CudaBackend::copyToHostOnCopyStream(void *hostDst, const void *src,
                                            int64_t bytes, int64_t after,
                                            int lane) {
  return copyOnCopyStream(hostDst, src, bytes, after,
                          cudaMemcpyDeviceToHost, lane);
}

void CudaBackend::waitFenceOnDevice(int64_t fence) {
  std::lock_guard<std::mutex> lock(fenceMutex);
  // A fence retired already has passed: nothing to wait for.
  auto it = fences.find(fence);
  if (it != fences.end())
    check(cudaStreamWaitEvent(compute, it->second, 0), "cudaStreamWaitEvent");
}

bool CudaBackend::fenceReached(int64_t fence) {
  std::lock_guard<std::mutex> lock(fenceMutex);
  cudaError_t status = cudaEventQuery(fenceEvent(fence));
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check(status, "cudaEventQuery");
  return true;
}

void CudaBackend::awaitFence(int64_t fence) {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(fenceMutex);
    event = fenceEvent(fence);
  }
  check(cudaEventSynchronize(event), "cudaEventSynchronize");
  std::lock_guard<std::mutex> lock(fenceMutex);
  fences.erase(fence);
  spareFences.push_back(event);
}
/// A copy on the copy stream once fence `after` has passed; its fence.
int64_t CudaBackend::copyOnCopyStream(void *dst, const void *src, int64_t bytes,
                                      int64_t after, cudaMemcpyKind kind,
                                      int lane) {
  std::lock_guard<std::mutex> lock(fenceMutex);
  cudaStream_t s = copyStream(lane);
  if (after >= 0)
    check(cudaStreamWaitEvent(s, fenceEvent(after), 0),
          "cudaStreamWaitEvent");
  if (bytes > 0)
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind, s),
          kind == cudaMemcpyHostToDevice
              ? "cudaMemcpyAsync (host to device)"
              : "cudaMemcpyAsync (device to host)");
  return recordFence(s);
}

cudaStream_t CudaBackend::copyStream(int lane) {
  cudaStream_t &s = lane == kHostStepLane ? hostStepCopies : copies;
  if (!s)
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
          "cudaStreamCreate");
  return s;
}

/// An event recorded on `stream` now, by fence number.
int64_t CudaBackend::recordFence(cudaStream_t stream) {
  cudaEvent_t event = nullptr;
  if (!spareFences.empty()) {
    event = spareFences.back();
    spareFences.pop_back();
  } else {
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
          "cudaEventCreate");
  }
  check(cudaEventRecord(event, stream), "cudaEventRecord");
  const int64_t fence = ++lastFence;
  fences.emplace(fence, event);
  return fence;
}

cudaEvent_t CudaBackend::fenceEvent(int64_t fence) {
  auto it = fences.find(fence);
  if (it == fences.end())
    fatal("cuda: fence %lld is not pending (awaited already?)",
          static_cast<long long>(fence));
  return it->second;
}

} // namespace ztrt

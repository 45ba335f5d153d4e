//===- RuntimeMemory.cpp - The CUDA runtime API: memory ===//
//
// Part of ztrain's CUDA emulator (docs/cuda.md#the-cuda-emulator); the
// state it shares with Runtime.cpp is in RuntimeState.h.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/emu/RuntimeState.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace ztrt::cudaemu;

// --- Memory -----------------------------------------------------------------

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
  return allocate(ptr, bytes, false);
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
  if (!free || !total)
    return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(registry().mutex);
  *total = memoryLimit();
  *free = memoryLimit() - registry().deviceBytes;
  return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
  if (!ptr)
    return cudaSuccess;
  size_t bytes = 0;
  if (cudaError_t e = markFreed(ptr, false, &bytes))
    return e;
  // cudaFree synchronizes the device first.
  cudaDeviceSynchronize();
  release(ptr, false);
  return sticky();
}

cudaError_t cudaMallocAsync(void **ptr, size_t bytes, cudaStream_t stream) {
  if (!validStream(stream))
    return fail(cudaErrorInvalidResourceHandle);
  return allocate(ptr, bytes, false);
}

cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream) {
  ZTRT_STICKY();
  if (!validStream(stream))
    return fail(cudaErrorInvalidResourceHandle);
  if (!ptr)
    return cudaSuccess;
  size_t bytes = 0;
  if (cudaError_t e = markFreed(ptr, false, &bytes))
    return e;
  enqueue(stream, [ptr] { release(ptr, false); });
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t bytes) {
  return allocate(ptr, bytes, true);
}

cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned flags) {
  if (flags & ~unsigned(cudaHostAllocPortable | cudaHostAllocMapped |
                        cudaHostAllocWriteCombined))
    return fail(cudaErrorInvalidValue);
  if (cudaError_t e = allocate(ptr, bytes, true))
    return e;
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().allocations[reinterpret_cast<uintptr_t>(*ptr)].mapped =
      (flags & cudaHostAllocMapped) != 0;
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **device, void *host,
                                     unsigned flags) {
  if (!device || flags != 0)
    return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(registry().mutex);
  const auto *a = find(host);
  if (!a || !a->second.pinned || !a->second.mapped || a->second.freed) {
    std::fprintf(stderr,
                 "cuda emulator: cudaHostGetDevicePointer(%p): not mapped "
                 "pinned host memory\n",
                 host);
    return fail(cudaErrorInvalidValue);
  }
  *device = host; // unified addressing: the same address
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void *ptr, size_t bytes, unsigned flags) {
  if (!ptr || bytes == 0 ||
      (flags & ~unsigned(cudaHostRegisterPortable | cudaHostRegisterMapped)))
    return fail(cudaErrorInvalidValue);
  if (cudaError_t e = sticky())
    return e;
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  // No overlap with anything the registry knows (CUDA:
  // cudaErrorHostMemoryAlreadyRegistered).
  auto next = r.allocations.lower_bound(p);
  if ((next != r.allocations.end() && next->first < p + bytes) || find(ptr)) {
    std::fprintf(stderr,
                 "cuda emulator: cudaHostRegister(%p, %zu bytes): overlaps "
                 "memory already known to CUDA\n",
                 ptr, bytes);
    return fail(cudaErrorInvalidValue);
  }
  Allocation a{bytes, true, false, false};
  a.mapped = (flags & cudaHostRegisterMapped) != 0;
  a.registered = true;
  r.allocations[p] = a;
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *ptr) {
  {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == r.allocations.end() || !it->second.registered) {
      std::fprintf(stderr,
                   "cuda emulator: cudaHostUnregister(%p): not the start of "
                   "memory registered by cudaHostRegister\n",
                   ptr);
      return fail(cudaErrorInvalidValue);
    }
  }
  // Work still in flight may read it; the program frees it after this.
  cudaDeviceSynchronize();
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().allocations.erase(reinterpret_cast<uintptr_t>(ptr));
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) {
  if (!ptr)
    return cudaSuccess;
  size_t bytes = 0;
  if (cudaError_t e = markFreed(ptr, true, &bytes))
    return e;
  cudaDeviceSynchronize();
  release(ptr, true);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes,
                       cudaMemcpyKind kind) {
  ZTRT_STICKY();
  if (bytes == 0)
    return cudaSuccess;
  if (!checkCopy(dst, src, bytes, kind, "cudaMemcpy"))
    return fail(cudaErrorInvalidValue);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream) {
  ZTRT_STICKY();
  if (!validStream(stream))
    return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0)
    return cudaSuccess;
  if (!checkCopy(dst, src, bytes, kind, "cudaMemcpyAsync"))
    return fail(cudaErrorInvalidValue);
  const bool dstPageable = !anyDevice(dst) && !pinnedHost(dst, bytes);
  const bool srcPageable = !anyDevice(src) && !pinnedHost(src, bytes);
  if (srcPageable) {
    // Staged now: the caller may reuse its buffer when this returns.
    auto staged = std::make_shared<std::vector<char>>(
        static_cast<const char *>(src), static_cast<const char *>(src) + bytes);
    enqueue(stream, [dst, staged] {
      if (stillValid(dst, nullptr, staged->size()))
        std::memcpy(dst, staged->data(), staged->size());
    });
  } else {
    enqueue(stream, [dst, src, bytes] {
      if (stillValid(dst, src, bytes))
        std::memmove(dst, src, bytes);
    });
  }
  if (dstPageable)
    drain(stream); // Pageable destination: complete on return.
  return cudaSuccess;
}

cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
  ZTRT_STICKY();
  if (bytes && !isDevice(dst, bytes)) {
    std::fprintf(stderr,
                 "cuda emulator: cudaMemset(%s, %zu bytes): not device "
                 "memory of that extent\n",
                 describe(dst).c_str(), bytes);
    return fail(cudaErrorInvalidValue);
  }
  std::memset(dst, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes,
                            cudaStream_t stream) {
  ZTRT_STICKY();
  if (!validStream(stream))
    return fail(cudaErrorInvalidResourceHandle);
  if (bytes && !isDevice(dst, bytes)) {
    std::fprintf(stderr,
                 "cuda emulator: cudaMemsetAsync(%s, %zu bytes): not "
                 "device memory of that extent\n",
                 describe(dst).c_str(), bytes);
    return fail(cudaErrorInvalidValue);
  }
  enqueue(stream, [dst, value, bytes] {
    if (stillValid(dst, nullptr, bytes))
      std::memset(dst, value, bytes);
  });
  return cudaSuccess;
}

//===- ContextOffload.cpp - ztrt_ctx: swaps and host copies ---------------===//
//
// Part of ztrain's runtime. zero-offload's transfers: nvme-resident
// tensors' swaps (through staging buffers on a device backend), the copies
// between device and host memory, their fences and their accounting, and
// a tensor's bytes to and from the host wherever it lives (checkpoints).
//
//===----------------------------------------------------------------------===//

#include "step/Context.h"

#include "base/Support.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

using namespace ztrt;

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

//===- Offload.cpp - Entry points: swaps and copies -----------------------===//
//
// Part of ztrain's runtime. The entry points of ztrt_abi.def's "Offload":
// the swaps of nvme-resident tensors, the copies between device and host
// memory of activation offload and gradient spills, and the plain and
// strided copies.
//
//===----------------------------------------------------------------------===//

#include "ztrt.h"

#include "abi/Checks.h"
#include "base/Support.h"
#include "step/Context.h"

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

using namespace ztrt;
using namespace ztrt::abi;

namespace {

/// Whether a row of one set of `rows` rows of `rowBytes` bytes (the i-th at
/// a + i * aStride) intersects a row of the other. Both lists are sorted by
/// address (strides >= 0), so a merge walk decides it in O(rows): a row
/// that ends before the other list's current row cannot meet any later
/// row of that list. Interleaved layouts (a bucket unpacked into its own
/// gaps) are disjoint although their extents overlap.
bool rowsIntersect(uintptr_t a, int64_t aStride, uintptr_t b, int64_t bStride,
                   int64_t rows, int64_t rowBytes) {
  const uintptr_t length = static_cast<uintptr_t>(rowBytes);
  int64_t i = 0, j = 0;
  while (i < rows && j < rows) {
    const uintptr_t x = a + static_cast<uintptr_t>(i * aStride),
                    y = b + static_cast<uintptr_t>(j * bStride);
    if (x < y + length && y < x + length)
      return true;
    if (x < y)
      ++i;
    else
      ++j;
  }
  return false;
}

} // namespace

extern "C" {

/// The swap file and its bytes of nvme-resident tensor `index` of `kind`
/// (fatal otherwise).
static std::pair<int, int64_t> swapFileOf(ztrt_ctx *ctx, const char *op,
                                          int32_t kind, int64_t index,
                                          const void *buffer) {
  if (kind != ZTRT_SWAP_STATE && kind != ZTRT_SWAP_PARAM)
    fatal("%s: unknown swap kind %d (%d: optimizer state, %d: parameter)", op,
          kind, ZTRT_SWAP_STATE, ZTRT_SWAP_PARAM);
  const bool param = kind == ZTRT_SWAP_PARAM;
  const char *what = param ? "parameter" : "optimizer state";
  const size_t count = param ? ctx->params.size() : ctx->states.size();
  if (index < 0 || index >= static_cast<int64_t>(count))
    fatal("%s: %s index %lld out of range [0, %zu)", op, what,
          static_cast<long long>(index), count);
  size_t i = static_cast<size_t>(index);
  const std::vector<int> &files = param ? ctx->paramFiles : ctx->stateFiles;
  if (!ctx->swap || i >= files.size() || files[i] < 0)
    fatal("%s: %s %lld does not live on nvme (its descriptor record has no "
          "`space nvme`)",
          op, what, static_cast<long long>(index));
  // (A device backend's buffers are device memory; their staging copies
  // are checked for alignment by the context.)
  if (!buffer || (ctx->backend().hostResident() &&
                  reinterpret_cast<uintptr_t>(buffer) %
                      ztrt::SwapSpace::kAlignment))
    fatal("%s: the swap buffer %p is not 4096-byte aligned", op, buffer);
  return {files[i], (param ? ctx->paramFileBytes : ctx->stateFileBytes)[i]};
}

/// Starts one swap of tensor `index` of `kind` through `buffer`, counted
/// and remembered for the trace.
static int64_t startSwap(ztrt_ctx *ctx, const char *op, int32_t kind,
                         int64_t index, const void *buffer, bool write,
                         int64_t offset = 0, int64_t chunkBytes = -1) {
  backendOf(ctx, op);
  auto [file, bytes] = swapFileOf(ctx, op, kind, index, buffer);
  if (chunkBytes >= 0) {
    // A chunk: whole blocks from a block boundary, inside the file.
    const int64_t block = ztrt::SwapSpace::kAlignment;
    const int64_t moved = (chunkBytes + block - 1) / block * block;
    if (offset < 0 || offset % block != 0 || chunkBytes <= 0 ||
        offset + moved > bytes)
      fatal("%s: bytes [%lld, %lld) are not whole %lld-byte blocks within "
            "the %lld-byte swap file",
            op, static_cast<long long>(offset),
            static_cast<long long>(offset + chunkBytes),
            static_cast<long long>(block), static_cast<long long>(bytes));
    bytes = moved;
  }
  ++(write ? ctx->offload.writes : ctx->offload.reads);
  (write ? ctx->offload.writeBytes : ctx->offload.readBytes) += bytes;
  auto begin = ztrt::Clock::now();
  int64_t ticket =
      ctx->startSwap(file, const_cast<void *>(buffer), bytes, write, offset);
  ctx->pendingSwaps[ticket] = {begin, index, bytes, write};
  return ticket;
}

int64_t ztrt_swap_in(ztrt_ctx *ctx, int32_t kind, int64_t index,
                     void *buffer) {
  return startSwap(ctx, "swap_in", kind, index, buffer, /*write=*/false);
}

int64_t ztrt_swap_out(ztrt_ctx *ctx, int32_t kind, int64_t index,
                      const void *buffer) {
  return startSwap(ctx, "swap_out", kind, index, buffer, /*write=*/true);
}

int64_t ztrt_swap_in_chunk(ztrt_ctx *ctx, int32_t kind, int64_t index,
                           void *buffer, int64_t offset, int64_t bytes) {
  return startSwap(ctx, "swap_in_chunk", kind, index, buffer,
                   /*write=*/false, offset, bytes);
}

int64_t ztrt_swap_out_chunk(ztrt_ctx *ctx, int32_t kind, int64_t index,
                            const void *buffer, int64_t offset,
                            int64_t bytes) {
  return startSwap(ctx, "swap_out_chunk", kind, index, buffer,
                   /*write=*/true, offset, bytes);
}

void ztrt_swap_wait(ztrt_ctx *ctx, int64_t ticket) {
  backendOf(ctx, "swap_wait");
  if (!ctx->swap)
    fatal("swap_wait: no state lives on nvme in this run");
  auto begin = ztrt::Clock::now();
  ctx->finishSwap(ticket);
  auto end = ztrt::Clock::now();
  ctx->offload.exposedNanos +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(end - begin)
          .count();
  auto it = ctx->pendingSwaps.find(ticket);
  if (it == ctx->pendingSwaps.end())
    return;
  if (ztrt::Trace *trace = ctx->trace()) {
    ztrt::TraceEvent io(ztrt::TraceEvent::Type::Io);
    io.name = it->second.write ? "swap_out" : "swap_in";
    io.begin = it->second.begin;
    io.end = end;
    io.value = ticket;
    io.elems = it->second.state;
    io.bytes = it->second.bytes;
    trace->add(io);
    ztrt::TraceEvent wait(ztrt::TraceEvent::Type::SwapWait);
    wait.begin = begin;
    wait.end = end;
    wait.value = ticket;
    trace->add(wait);
  }
  ctx->pendingSwaps.erase(it);
}

namespace {
/// A copy of `bytes` of device memory `src` into host memory `dst`, on the
/// copy stream behind the op that made the value (Pa+cpu's activations,
/// gradient spills): counted in `counter`, and over the host link on a
/// device backend; traced as `what`.
int64_t copyToHostStart(ztrt_ctx *ctx, const char *op, const char *what,
                        int64_t ztrt::OffloadStats::*counter, const void *src,
                        void *dst, int64_t bytes) {
  Backend &backend = backendOf(ctx, op);
  checkCount(op, "byte count", bytes);
  ctx->offload.*counter += bytes;
  if (!backend.hostResident())
    ctx->offload.deviceToHostBytes += bytes;
  auto begin = ztrt::Clock::now();
  int64_t ready = backend.recordFence();
  int64_t fence = backend.copyToHostOnCopyStream(dst, src, bytes, ready);
  ctx->noteCopy(ready);
  ctx->noteCopyStart(begin, fence, bytes, what);
  return fence;
}
} // namespace

int64_t ztrt_copy_to_host_start(ztrt_ctx *ctx, const void *src, void *dst,
                                int64_t bytes) {
  return copyToHostStart(ctx, "copy_to_host_start", "activation_to_host",
                         &ztrt::OffloadStats::activationsToHost, src, dst,
                         bytes);
}

int64_t ztrt_spill_gradient_start(ztrt_ctx *ctx, const void *src, void *dst,
                                  int64_t bytes) {
  return copyToHostStart(ctx, "spill_gradient_start", "gradient_to_host",
                         &ztrt::OffloadStats::gradientsToHost, src, dst,
                         bytes);
}

int64_t ztrt_copy_from_host_start(ztrt_ctx *ctx, const void *src, void *dst,
                                  int64_t bytes) {
  Backend &backend = backendOf(ctx, "copy_from_host_start");
  checkCount("copy_from_host_start", "byte count", bytes);
  ctx->offload.activationsFromHost += bytes;
  if (!backend.hostResident())
    ctx->offload.hostToDeviceBytes += bytes;
  // On the copy stream, once the kernels issued so far (the destination
  // buffer's earlier tenants) are done.
  auto begin = ztrt::Clock::now();
  int64_t free = backend.recordFence();
  int64_t fence = backend.copyFromHostOnCopyStream(dst, src, bytes, free);
  ctx->noteCopy(free);
  ctx->noteCopyStart(begin, fence, bytes, "activation_from_host");
  return fence;
}

void ztrt_copy_wait(ztrt_ctx *ctx, int64_t ticket) {
  Backend &backend = backendOf(ctx, "copy_wait");
  // The kernels issued from here on (the reloaded value's readers, or the
  // offloaded buffer's next tenant) wait for the copy on the device.
  backend.waitFenceOnDevice(ticket);
  ctx->noteCopy(ticket);
  // The trace's I/O track (device backends; a host backend's copies were
  // recorded at their start): the copy ran between its start and this
  // wait (it may still run after it: the kernels issued next wait for it
  // on the device).
  auto it = ctx->pendingCopies.find(ticket);
  if (it == ctx->pendingCopies.end() || it->second.empty())
    return;
  if (ztrt::Trace *trace = ctx->trace()) {
    const ztrt_ctx::PendingCopy &copy = it->second.front();
    ztrt::TraceEvent io(ztrt::TraceEvent::Type::Io);
    io.name = copy.name;
    io.begin = copy.begin;
    io.end = ztrt::Clock::now();
    io.value = ticket;
    io.elems = -1;
    io.bytes = copy.bytes;
    trace->add(io);
  }
  it->second.erase(it->second.begin());
  if (it->second.empty())
    ctx->pendingCopies.erase(it);
}

void ztrt_copy(ztrt_ctx *ctx, const void *src, void *dst, int64_t bytes) {
  Backend &backend = backendOf(ctx, "copy");
  TraceScope trace(ctx->trace(), "copy");
  checkCount("copy", "byte count", bytes);
  backend.copy(src, dst, bytes);
}

void ztrt_copy_2d(ztrt_ctx *ctx, const void *src, void *dst, int64_t rows,
                  int64_t row_bytes, int64_t src_stride, int64_t dst_stride) {
  Backend &backend = backendOf(ctx, "copy_2d");
  TraceScope trace(ctx->trace(), "copy_2d");
  checkCount("copy_2d", "row count", rows);
  checkCount("copy_2d", "row size", row_bytes);
  checkCount("copy_2d", "src_stride", src_stride);
  checkCount("copy_2d", "dst_stride", dst_stride);
  if (rows == 0 || row_bytes == 0)
    return;
  if (rows > 1 && dst_stride < row_bytes)
    fatal("copy_2d: dst_stride %lld is less than row_bytes %lld (rows would "
          "overwrite each other)",
          static_cast<long long>(dst_stride),
          static_cast<long long>(row_bytes));
  int64_t srcExtent, dstExtent;
  if (__builtin_mul_overflow(rows - 1, src_stride, &srcExtent) ||
      __builtin_add_overflow(srcExtent, row_bytes, &srcExtent) ||
      __builtin_mul_overflow(rows - 1, dst_stride, &dstExtent) ||
      __builtin_add_overflow(dstExtent, row_bytes, &dstExtent))
    fatal("copy_2d: %lld rows of stride %lld / %lld bytes overflow int64",
          static_cast<long long>(rows), static_cast<long long>(src_stride),
          static_cast<long long>(dst_stride));
  // No row may be read after another has overwritten it, on any backend
  // (a device copies rows in parallel), so source and destination rows
  // must be disjoint; copying a region onto itself is a no-op.
  if (src == dst && src_stride == dst_stride)
    return;
  const uintptr_t from = reinterpret_cast<uintptr_t>(src),
                  to = reinterpret_cast<uintptr_t>(dst);
  if (from < to + static_cast<uint64_t>(dstExtent) &&
      to < from + static_cast<uint64_t>(srcExtent) &&
      rowsIntersect(from, src_stride, to, dst_stride, rows, row_bytes))
    fatal("copy_2d: source and destination rows overlap");
  backend.copy2d(src, dst, rows, row_bytes, src_stride, dst_stride);
}

} // extern "C"

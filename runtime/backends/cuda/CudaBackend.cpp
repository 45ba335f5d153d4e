//===- CudaBackend.cpp - The CUDA / NCCL backend --------------------------===//
//
// Part of ztrain's runtime. Host side of the cuda backend: device, streams,
// memory, cuBLAS, NCCL, the enqueued collectives and the deferred error
// checks. The kernels are in the .cu files (Kernels.h). Design: docs/cuda.md.
//
// Element types. Every kernel method dispatches on its DType to one
// launcher template instantiated for float, bf16 and f16 (base/DType.h's
// storage types, converted on the device): loads widened to float, each
// output rounded once. matmul is cuBLAS's sgemm for float and GemmEx with
// CUBLAS_COMPUTE_32F for bf16 / f16; collectives hand NCCL the dtype's
// ncclFloat32 / ncclBfloat16 / ncclFloat16 and count wire bytes in its
// element size.
//
// Streams. All kernels, copies and frees run on one compute stream, in call
// order, so a step's program order is the device's order. Collectives run
// on a communication stream of higher priority (NCCL kernels should not
// queue behind compute kernels they could overlap): enqueueCollective
// records an event on the compute stream, makes the communication stream
// wait for it, enqueues the NCCL call and records a completion event;
// awaitCollective makes the compute stream wait for that event. The host
// never blocks in either, so the compiler's schedule (start early, wait
// late) is the overlap the device gets.
//
// Memory. cudaMallocAsync / cudaFreeAsync on the compute stream, from the
// device's default pool with its release threshold at the maximum: freed
// blocks stay cached for the next step's allocations (a caching allocator
// without our own bookkeeping), and a free is ordered after every use the
// program made before it. No managed memory.
//
// Errors. API errors are fatal at once. Data errors (a label or id out of
// range) are found by the kernels, which record the first offending index
// in an error slot and never read out of bounds; the host reads the slots
// at its next synchronization (synchronize(), copyToHost) and reports the
// first error in call order with the cpu backend's message.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackend.h"

#include "backends/cpu/VecMath.h"
#include "backends/cuda/Kernels.h"
#include "backends/cuda/Libraries.h"
#include "comm/CommQueue.h"
#include "comm/Communicator.h"
#include "step/Context.h"
#include "base/Support.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <type_traits>
#include <vector>

namespace ztrt {

namespace cuda {

void check(cudaError_t status, const char *what) {
  if (status == cudaSuccess)
    return;
  fatal("cuda: %s: %s (%s)", what, cudaGetErrorString(status),
        cudaGetErrorName(status));
}

void *scratch(int64_t bytes, cudaStream_t stream, const char *op) {
  void *ptr = nullptr;
  cudaError_t status = cudaMallocAsync(
      &ptr, static_cast<size_t>(std::max<int64_t>(bytes, 1)), stream);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fatal("%s: out of cuda memory allocating %lld bytes of scratch", op,
          static_cast<long long>(bytes));
  }
  check(status, "cudaMallocAsync");
  return ptr;
}

} // namespace cuda

using cuda::check;

namespace {

// Every allocation is a multiple of this: distinct pointers for 0 bytes,
// and any vector width is aligned.
constexpr int64_t kAllocationGranule = 256;
// Checking kernels between two synchronizations; more forces one.
constexpr size_t kErrorSlots = 256;
// Pinned bytes for copyToHostAtSync between two synchronizations.
constexpr size_t kStagingBytes = 4096;

void checkNccl(ncclResult_t result, const char *what) {
  if (result == ncclSuccess)
    return;
  fatal("NCCL %s failed: %s", what, cuda::nccl().getErrorString(result));
}

void checkBlas(cublasStatus_t status, const char *what) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return;
  fatal("cuBLAS %s failed: %s", what, cuda::cublas().statusString(status));
}

/// A buffer argument as an array of T.
template <typename T> const T *as(const void *p) {
  return static_cast<const T *>(p);
}
template <typename T> T *as(void *p) { return static_cast<T *>(p); }

bool overlaps(const void *a, int64_t aBytes, const void *b, int64_t bBytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + static_cast<uintptr_t>(bBytes) &&
         y < x + static_cast<uintptr_t>(aBytes);
}

/// Drops unit dims and merges dims d, d+1 whose source strides are
/// contiguous (stride[d] == stride[d+1] * shape[d+1]): fewer divisions per
/// element, same offsets in the same order.
void simplify(int &rank, int64_t *shape, int64_t *strides) {
  int out = 0;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 1)
      continue;
    if (out > 0 && strides[out - 1] == strides[d] * shape[d]) {
      shape[out - 1] *= shape[d];
      strides[out - 1] = strides[d];
      continue;
    }
    shape[out] = shape[d];
    strides[out] = strides[d];
    ++out;
  }
  rank = out;
}

std::vector<int64_t> contiguousStrides(int64_t rank, const int64_t *shape) {
  std::vector<int64_t> strides(rank);
  int64_t stride = 1;
  for (int64_t d = rank; d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

/// What a checking kernel's error slot stands for.
struct SlotInfo {
  const char *op;
  /// "label ... at row" or "id ... at position".
  bool labels;
  int64_t bound;
};

/// A copyToHostAtSync waiting for the next synchronization.
struct Staged {
  void *hostDst;
  size_t offset, bytes;
};

/// An enqueued collective's events and, once known, its timing.
struct Ticket {
  cudaEvent_t ready = nullptr;   // compute stream -> communication stream
  cudaEvent_t begin = nullptr;   // on the communication stream
  cudaEvent_t end = nullptr;     // on the communication stream
  cudaEvent_t reached = nullptr; // compute stream at the await
  bool awaited = false;
  /// begin / end mapped to the host clock (the events have completed).
  bool placed = false;
  /// The exposed time is known too.
  bool timed = false;
  DeviceCollectiveTiming timing;
};

class CudaBackend final : public Backend {
public:
  explicit CudaBackend(const CudaOptions &options) : options(options) {
    device = options.device;
    check(cudaSetDevice(device), "cudaSetDevice");
    int pools = 0;
    check(
        cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device),
        "cudaDeviceGetAttribute");
    if (!pools)
      fatal("--backend cuda: device %d does not support stream-ordered "
            "memory pools (cudaMallocAsync), which the backend needs",
            device);
    // Keep freed memory in the pool: a step frees and re-allocates the same
    // activation sizes every time.
    check(cudaDeviceGetDefaultMemPool(&pool, device),
          "cudaDeviceGetDefaultMemPool");
    uint64_t threshold = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                  &threshold),
          "cudaMemPoolSetAttribute");
    // Memory freed on one stream is not handed to an allocation on the
    // other by making that stream wait (the pool's default): a compute
    // allocation reusing a collective's staging buffer would then wait for
    // the collective, serializing what the schedule overlaps. The events
    // already order every use; the pool reuses memory whose free has
    // completed (opportunistic reuse, on by default).
    int internalDependencies = 0;
    check(cudaMemPoolSetAttribute(pool,
                                  cudaMemPoolReuseAllowInternalDependencies,
                                  &internalDependencies),
          "cudaMemPoolSetAttribute");
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest),
          "cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithPriority(&compute, cudaStreamNonBlocking, least),
          "cudaStreamCreate");
    check(cudaStreamCreateWithPriority(&comm, cudaStreamNonBlocking, greatest),
          "cudaStreamCreate");

    const cuda::CublasApi &blas = cuda::cublas();
    checkBlas(blas.create(&handle), "cublasCreate");
    checkBlas(blas.setStream(handle, compute), "cublasSetStream");
    // CUBLAS_DEFAULT_MATH keeps float32 GEMMs in float32: no TF32 tensor
    // cores (that needs CUBLAS_TF32_TENSOR_OP_MATH), so results match the
    // cpu backend up to summation order (CudaConformanceTest checks it).
    checkBlas(blas.setMathMode(handle, CUBLAS_DEFAULT_MATH),
              "cublasSetMathMode");

    check(cudaMalloc(&slots, kErrorSlots * sizeof(cuda::ErrorSlot)),
          "cudaMalloc");
    check(cudaMemsetAsync(slots, 0xff, kErrorSlots * sizeof(cuda::ErrorSlot),
                          compute),
          "cudaMemsetAsync");
    check(cudaMallocHost(&staging, kStagingBytes), "cudaMallocHost");
    check(cudaEventCreate(&base), "cudaEventCreate");
    rebase();
  }

  ~CudaBackend() override {
    // Best effort: errors here cannot be reported through fatal() (it may
    // be running already).
    cudaStreamSynchronize(comm);
    cudaStreamSynchronize(compute);
    if (ncclComm)
      cuda::nccl().commDestroy(ncclComm);
    for (auto &[id, ticket] : tickets)
      for (cudaEvent_t e :
           {ticket.ready, ticket.begin, ticket.end, ticket.reached})
        if (e)
          cudaEventDestroy(e);
    for (cudaEvent_t e : timedEvents)
      cudaEventDestroy(e);
    for (cudaEvent_t e : untimedEvents)
      cudaEventDestroy(e);
    for (auto &[fence, event] : fences)
      cudaEventDestroy(event);
    for (cudaEvent_t e : spareFences)
      cudaEventDestroy(e);
    cudaEventDestroy(base);
    cudaFreeHost(staging);
    cudaFree(slots);
    cuda::cublas().destroy(handle);
    for (cudaStream_t s : {copies, hostStepCopies})
      if (s) {
        cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
      }
    cudaStreamDestroy(comm);
    cudaStreamDestroy(compute);
  }

  void bindThread() override {
    check(cudaSetDevice(device), "cudaSetDevice");
  }

  const char *name() const override { return "cuda"; }
  std::string deviceName() const override {
    return cudaDeviceDescription(options.device);
  }
  PeakRate peakRate(bool sixteenBit) const override {
    return cudaPeakRate(options.device, sixteenBit);
  }
  bool deviceMemory(uint64_t &freeBytes, uint64_t &totalBytes) override {
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    freeBytes = free;
    totalBytes = total;
    return true;
  }
  // Kernels run on the device; --threads only sets what the report says.
  void setThreads(int threads) override { hostThreads = threads; }
  int threads() const override { return hostThreads; }
  void adoptThreads(int) override {}

  void attach(Communicator &world) override {
    ranks = world.count();
    rank = world.rank();
    if (ranks == 1 && !options.ncclInWorldOfOne)
      return;
    // NCCL's bootstrap: rank 0 makes the id, MPI carries it to the others,
    // and every rank joins the communicator on its own GPU.
    const cuda::NcclApi &api = cuda::nccl();
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank == 0)
      checkNccl(api.getUniqueId(&id), "ncclGetUniqueId");
    world.broadcastBytes(&id, sizeof(id), 0);
    check(cudaSetDevice(device), "cudaSetDevice");
    checkNccl(api.commInitRank(&ncclComm, ranks, id, rank), "ncclCommInitRank");
  }

  void synchronize() override {
    awaitStream(comm);
    awaitStream(compute);
    cudaStream_t copyStreams[2] = {nullptr, nullptr};
    {
      std::lock_guard<std::mutex> lock(fenceMutex);
      copyStreams[0] = copies;
      copyStreams[1] = hostStepCopies;
    }
    for (cudaStream_t s : copyStreams)
      if (s)
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    for (const Staged &s : staged)
      std::memcpy(s.hostDst, staging + s.offset, s.bytes);
    staged.clear();
    stagingUsed = 0;
    reportErrors();
    if (ncclComm) {
      ncclResult_t state = ncclSuccess;
      checkNccl(cuda::nccl().commGetAsyncError(ncclComm, &state),
                "ncclCommGetAsyncError");
      // Non-blocking communicators report work in progress; ours block.
      if (inProgress(state))
        state = ncclSuccess;
      checkNccl(state, "collective");
    }
    placeTickets();
    rebase();
  }

  // --- Memory ----------------------------------------------------------------

  void *allocate(int64_t bytes) override {
    if (bytes > std::numeric_limits<int64_t>::max() - kAllocationGranule)
      return nullptr;
    const int64_t rounded =
        (std::max<int64_t>(bytes, 1) + kAllocationGranule - 1) /
        kAllocationGranule * kAllocationGranule;
    void *ptr = nullptr;
    cudaError_t status =
        cudaMallocAsync(&ptr, static_cast<size_t>(rounded), compute);
    if (status == cudaErrorMemoryAllocation) {
      // The pool keeps every freed block (release threshold: all), which
      // fragmented sizes or memory taken outside it (NCCL's buffers,
      // cuBLAS's workspace) can leave unusable: finish the pending frees,
      // give the pool's unused memory back to the device, and try once
      // more, as PyTorch's caching allocator does.
      cudaGetLastError();
      check(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
      check(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
      status = cudaMallocAsync(&ptr, static_cast<size_t>(rounded), compute);
    }
    // Out of memory; a size the pool can never satisfy may also come back
    // as an invalid value. Neither is sticky: the caller reports it.
    if (status == cudaErrorMemoryAllocation ||
        status == cudaErrorInvalidValue) {
      cudaGetLastError();
      return nullptr;
    }
    check(status, "cudaMallocAsync");
    return ptr;
  }

  void deallocate(void *ptr) override {
    check(cudaFreeAsync(ptr, compute), "cudaFreeAsync");
  }

  // The synchronous copies take cudaMemcpyDefault: their backend pointer
  // may be mapped pinned host memory (zero-offload's host placements),
  // which unified addressing classifies, rather than device memory.
  void copyFromHost(void *dst, const void *hostSrc, int64_t bytes) override {
    if (bytes <= 0)
      return;
    check(cudaMemcpyAsync(dst, hostSrc, static_cast<size_t>(bytes),
                          cudaMemcpyDefault, compute),
          "cudaMemcpyAsync (host to device)");
    // The host buffer may be reused as soon as this returns.
    awaitStream(compute);
  }

  void copyToHost(void *hostDst, const void *src, int64_t bytes) override {
    if (bytes <= 0)
      return;
    check(cudaMemcpyAsync(hostDst, src, static_cast<size_t>(bytes),
                          cudaMemcpyDefault, compute),
          "cudaMemcpyAsync (device to host)");
    awaitStream(compute);
    // What was computed before is known now: report its data errors
    // rather than hand out values computed from them.
    reportErrors();
  }

  void copyToHostAtSync(void *hostDst, const void *src,
                        int64_t bytes) override {
    if (bytes <= 0)
      return;
    const size_t size = static_cast<size_t>(bytes);
    if (stagingUsed + size > kStagingBytes)
      synchronize();
    if (size > kStagingBytes) {
      copyToHost(hostDst, src, bytes);
      return;
    }
    check(cudaMemcpyAsync(staging + stagingUsed, src, size,
                          cudaMemcpyDefault, compute),
          "cudaMemcpyAsync (device to host)");
    staged.push_back({hostDst, stagingUsed, size});
    stagingUsed += (size + 15) / 16 * 16;
  }

  void copy(const void *src, void *dst, int64_t bytes) override {
    if (bytes <= 0 || src == dst)
      return;
    // memmove semantics (the compiler may copy onto an overlapping view);
    // cudaMemcpy's are undefined for overlap, so go through scratch.
    if (overlaps(src, bytes, dst, bytes)) {
      void *tmp = cuda::scratch(bytes, compute, "copy");
      check(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, compute),
            "cudaMemcpyAsync");
      check(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, compute),
            "cudaMemcpyAsync");
      cuda::release(tmp, compute);
      return;
    }
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                          cudaMemcpyDeviceToDevice, compute),
          "cudaMemcpyAsync");
  }

  void copy2d(const void *src, void *dst, int64_t rows, int64_t rowBytes,
              int64_t srcStride, int64_t dstStride) override {
    cuda::copy2d(src, dst, rows, rowBytes, srcStride, dstStride, compute);
  }

  // --- Host memory of zero-offload -------------------------------------------
  // Optimizer states placed on the host live in mapped pinned memory: the
  // update kernels read and write them in place, over PCIe (zero-copy),
  // and nothing else touches them during a step. Swap buffers of nvme
  // tensors are device memory with a pinned host staging copy; the copies
  // between the two are ordered on the compute stream and fenced by events
  // (runtime/abi/Offload.cpp, ztrt_swap_*).

  bool hostResident() const override { return false; }

  // Page-aligned: the state swap buffers among them are O_DIRECT buffers
  // (Context.cpp checks), and the host step's vector loads like aligned
  // data. cudaHostAlloc does not promise it: the driver suballocates small
  // pinned allocations, 512-byte aligned (seen on an H100, driver
  // 580.159, CUDA 13.0: 0x...b200). So each allocation takes a page more
  // and hands out its first page-aligned address; `mappedBases` keeps what
  // cudaFreeHost needs.
  void *allocateMappedHost(int64_t bytes) override {
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

  void deallocateMappedHost(void *ptr) override {
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

  void pinHost(void *ptr, int64_t bytes) override {
    if (bytes > 0)
      check(cudaHostRegister(ptr, static_cast<size_t>(bytes),
                             cudaHostRegisterPortable),
            "cudaHostRegister");
  }

  void unpinHost(void *ptr) override {
    check(cudaHostUnregister(ptr), "cudaHostUnregister");
  }

  // The fence calls may come from the step's thread and the host step
  // thread at once (Backend.h): `fenceMutex` guards the fence table, the
  // spare events and the copy stream's creation. awaitFence blocks outside
  // it (an event is reused only once its fence is retired).
  int64_t recordFence() override {
    std::lock_guard<std::mutex> lock(fenceMutex);
    return recordFence(compute);
  }

  int64_t copyFromHostOnCopyStream(void *dst, const void *hostSrc,
                                   int64_t bytes, int64_t after,
                                   int lane = 0) override {
    return copyOnCopyStream(dst, hostSrc, bytes, after,
                            cudaMemcpyHostToDevice, lane);
  }

  int64_t copyToHostOnCopyStream(void *hostDst, const void *src,
                                 int64_t bytes, int64_t after,
                                 int lane = 0) override {
    return copyOnCopyStream(hostDst, src, bytes, after,
                            cudaMemcpyDeviceToHost, lane);
  }

  void waitFenceOnDevice(int64_t fence) override {
    std::lock_guard<std::mutex> lock(fenceMutex);
    // A fence retired already has passed: nothing to wait for.
    auto it = fences.find(fence);
    if (it != fences.end())
      check(cudaStreamWaitEvent(compute, it->second, 0), "cudaStreamWaitEvent");
  }

  bool fenceReached(int64_t fence) override {
    std::lock_guard<std::mutex> lock(fenceMutex);
    cudaError_t status = cudaEventQuery(fenceEvent(fence));
    if (status == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    check(status, "cudaEventQuery");
    return true;
  }

  void awaitFence(int64_t fence) override {
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

private:
  /// A copy on the copy stream once fence `after` has passed; its fence.
  int64_t copyOnCopyStream(void *dst, const void *src, int64_t bytes,
                           int64_t after, cudaMemcpyKind kind, int lane) {
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

  cudaStream_t copyStream(int lane) {
    cudaStream_t &s = lane == kHostStepLane ? hostStepCopies : copies;
    if (!s)
      check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
            "cudaStreamCreate");
    return s;
  }

  /// An event recorded on `stream` now, by fence number.
  int64_t recordFence(cudaStream_t stream) {
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

  cudaEvent_t fenceEvent(int64_t fence) {
    auto it = fences.find(fence);
    if (it == fences.end())
      fatal("cuda: fence %lld is not pending (awaited already?)",
            static_cast<long long>(fence));
    return it->second;
  }

public:
  // --- Kernels ---------------------------------------------------------------
  // Each method dispatches on the dtype (base/DType.h) to the launcher
  // template of Kernels.h instantiated for float, bf16 or f16: one kernel
  // per op, loads widened to float, each output rounded once to T.

#define ZTRT_CUDA_DISPATCH(dtype, call)                                        \
  dispatch(dtype, [&](auto tag) {                                              \
    using T = decltype(tag);                                                   \
    call;                                                                      \
  })

  void fill(DType dtype, void *out, int64_t n, double value) override {
    ZTRT_CUDA_DISPATCH(
        dtype, cuda::fill(as<T>(out), n, static_cast<float>(value), compute));
  }
  void scale(DType dtype, const void *x, void *out, int64_t n,
             double factor) override {
    ZTRT_CUDA_DISPATCH(dtype, cuda::scale(as<T>(x), as<T>(out), n,
                                          static_cast<float>(factor), compute));
  }

  void biasAdd(DType dtype, const void *x, const void *bias, void *out,
               int64_t rows, int64_t cols) override {
    ZTRT_CUDA_DISPATCH(dtype, cuda::biasAdd(as<T>(x), as<T>(bias), as<T>(out),
                                            rows, cols, compute));
  }

  // The elementwise kernels of backends/Elementwise.def, one launch each.
#define ZTRT_UNARY(method, Name, expr)                                         \
  void method(DType dtype, const void *x, void *out, int64_t n) override {     \
    ZTRT_CUDA_DISPATCH(dtype, cuda::unary(cuda::Unary::Name, as<T>(x),         \
                                          as<T>(out), n, compute));            \
  }
#define ZTRT_BINARY(method, Name, expr)                                        \
  void method(DType dtype, const void *a, const void *b, void *out, int64_t n) \
      override {                                                               \
    ZTRT_CUDA_DISPATCH(dtype, cuda::binary(cuda::Binary::Name, as<T>(a),       \
                                           as<T>(b), as<T>(out), n, compute)); \
  }
#include "backends/Elementwise.def"

  void maskedFill(DType dtype, const void *x, const void *mask, void *out,
                  int64_t outer, int64_t inner, double value) override {
    ZTRT_CUDA_DISPATCH(
        dtype, cuda::maskedFill(as<T>(x), as<int32_t>(mask), as<T>(out), outer,
                                inner, static_cast<float>(value), compute));
  }

  void where(DType dtype, const void *mask, const void *x, const void *y,
             void *out, int64_t outer, int64_t inner) override {
    ZTRT_CUDA_DISPATCH(dtype,
                       cuda::where(as<int32_t>(mask), as<T>(x), as<T>(y),
                                   as<T>(out), outer, inner, compute));
  }

  void dropout(DType dtype, const void *x, void *out, int64_t n, uint64_t key,
               uint64_t counterBase, uint32_t threshold, float scale) override {
    ZTRT_CUDA_DISPATCH(dtype, cuda::dropout(as<T>(x), as<T>(out), n, key,
                                            counterBase, threshold, scale,
                                            compute));
  }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
  // gets B first, with the row-major leading dimensions unchanged (a
  // row-major matrix is its transpose in column-major order). float:
  // cublasSgemmStridedBatched; bf16 / f16: cublasGemmStridedBatchedEx with
  // the operands and C in the dtype and CUBLAS_COMPUTE_32F (products and
  // sums in float, C rounded once to the dtype).
  void matmul(DType dtype, const void *a, const void *b, void *c, int64_t batch,
              int64_t m, int64_t n, int64_t k, int32_t transA, int32_t transB,
              int64_t strideA, int64_t strideB, int64_t strideC) override {
    if (batch == 0 || m == 0 || n == 0)
      return;
    if (k == 0) {
      // An empty sum; cuBLAS, like BLAS, need not touch C when k == 0.
      const int64_t elem = elementBytes(dtype);
      if (strideC == m * n)
        fill(dtype, c, batch * m * n, 0.0);
      else
        for (int64_t i = 0; i < batch; ++i)
          fill(dtype, static_cast<char *>(c) + i * strideC * elem, m * n, 0.0);
      return;
    }
    const int64_t lda = transA ? m : k, ldb = transB ? k : n;
    // As on the cpu: a shared B with packed, untransposed A_i and packed
    // C_i is one (batch * m) x k GEMM.
    if (batch > 1 && strideB == 0 && !transA && strideA == m * k &&
        strideC == m * n) {
      m *= batch;
      batch = 1;
    }
    if (std::max({m, n, k, lda, ldb, batch}) > INT_MAX)
      fatal("matmul: %lld x %lld x %lld (batch %lld) is too large for "
            "cuBLAS",
            static_cast<long long>(m), static_cast<long long>(n),
            static_cast<long long>(k), static_cast<long long>(batch));
    const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    const float one = 1.0f, zero = 0.0f;
    if (dtype == DType::F32) {
      checkBlas(cuda::cublas().sgemmStridedBatched(
                    handle, opB, opA, static_cast<int>(n), static_cast<int>(m),
                    static_cast<int>(k), &one, as<float>(b),
                    static_cast<int>(ldb), strideB, as<float>(a),
                    static_cast<int>(lda), strideA, &zero, as<float>(c),
                    static_cast<int>(n), strideC, static_cast<int>(batch)),
                "cublasSgemmStridedBatched");
      return;
    }
    const cudaDataType type = dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
    // CUBLAS_COMPUTE_32F: alpha and beta are floats.
    checkBlas(cuda::cublas().gemmStridedBatchedEx(
                  handle, opB, opA, static_cast<int>(n), static_cast<int>(m),
                  static_cast<int>(k), &one, b, type, static_cast<int>(ldb),
                  strideB, a, type, static_cast<int>(lda), strideA, &zero, c,
                  type, static_cast<int>(n), strideC, static_cast<int>(batch),
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmStridedBatchedEx");
  }

  void layerNorm(DType dtype, const void *x, const void *gamma,
                 const void *beta, void *y, int64_t rows, int64_t cols,
                 double eps) override {
    ZTRT_CUDA_DISPATCH(dtype,
                       cuda::layerNorm(as<T>(x), as<T>(gamma), as<T>(beta),
                                       as<T>(y), rows, cols, eps, compute));
  }
  void layerNormGrad(DType dtype, const void *dy, const void *x,
                     const void *gamma, void *dx, void *dgamma, void *dbeta,
                     int64_t rows, int64_t cols, double eps) override {
    ZTRT_CUDA_DISPATCH(dtype, cuda::layerNormGrad(as<T>(dy), as<T>(x),
                                                  as<T>(gamma), as<T>(dx),
                                                  as<T>(dgamma), as<T>(dbeta),
                                                  rows, cols, eps, compute));
  }
  void rmsNorm(DType dtype, const void *x, const void *gamma, void *y,
               int64_t rows, int64_t cols, double eps) override {
    ZTRT_CUDA_DISPATCH(dtype, cuda::rmsNorm(as<T>(x), as<T>(gamma), as<T>(y),
                                            rows, cols, eps, compute));
  }
  void rmsNormGrad(DType dtype, const void *dy, const void *x,
                   const void *gamma, void *dx, void *dgamma, int64_t rows,
                   int64_t cols, double eps) override {
    ZTRT_CUDA_DISPATCH(
        dtype, cuda::rmsNormGrad(as<T>(dy), as<T>(x), as<T>(gamma), as<T>(dx),
                                 as<T>(dgamma), rows, cols, eps, compute));
  }
  void rotaryEmbedding(DType dtype, const void *x, void *out, int64_t outer,
                       int64_t seq, int64_t inner, int64_t dim, double theta,
                       double factor, double low, double high, double original,
                       int32_t inverse) override {
    const vecmath::RopeScaling scaling{factor, low, high, original};
    ZTRT_CUDA_DISPATCH(dtype, cuda::rotaryEmbedding(as<T>(x), as<T>(out), outer,
                                                    seq, inner, dim, theta,
                                                    scaling, inverse != 0,
                                                    compute));
  }
  void softmax(DType dtype, const void *x, void *y, int64_t rows, int64_t cols,
               int32_t causal) override {
    ZTRT_CUDA_DISPATCH(dtype, cuda::softmax(as<T>(x), as<T>(y), rows, cols,
                                            causal != 0, compute));
  }
  void softmaxGrad(DType dtype, const void *dy, const void *y, void *dx,
                   int64_t rows, int64_t cols) override {
    ZTRT_CUDA_DISPATCH(dtype, cuda::softmaxGrad(as<T>(dy), as<T>(y), as<T>(dx),
                                                rows, cols, compute));
  }

  // Fused attention: the composed form's kernels (float GEMMs, scale,
  // softmax, softmax gradient) over groups of heads whose [tq, tk] float
  // scores fit options.attentionScratchElements, so no heads x tq x tk
  // tensor outlives the op; bf16 / f16 operands are widened to float
  // scratch and the results rounded once. A correct baseline with the cpu
  // backend's numerics (the conformance suite), not a fast one: a tiled
  // tensor-core kernel (FlashAttention) is the next step (docs/cuda.md).

  /// Heads per group: at least 1, at most `heads`.
  int64_t attentionGroup(int64_t heads, int64_t tq, int64_t tk) const {
    return std::max<int64_t>(
        1, std::min<int64_t>(heads,
                             options.attentionScratchElements / (tq * tk)));
  }

  /// Grouped-query: the key / value heads of query heads [h, h + g) in
  /// float, one per query head (head i reads (h + i) / kvGroups), into
  /// `scratch` (g x n floats).
  const float *repeatedHeadFloats(DType dtype, const void *x, int64_t h,
                                  int64_t g, int64_t kvGroups, int64_t n,
                                  float *scratch) {
    const int64_t elem = elementBytes(dtype);
    for (int64_t i = 0; i < g; ++i) {
      const void *src = offset(x, (h + i) / kvGroups * n * elem);
      if (dtype == DType::F32)
        check(cudaMemcpyAsync(scratch + i * n, src,
                              static_cast<size_t>(n * 4),
                              cudaMemcpyDeviceToDevice, compute),
              "cudaMemcpyAsync (attention key / value heads)");
      else
        cast(dtype, src, scratch + i * n, n, static_cast<int32_t>(DType::F32));
    }
    return scratch;
  }

  static const void *offset(const void *p, int64_t bytes) {
    return static_cast<const char *>(p) + bytes;
  }
  static void *offset(void *p, int64_t bytes) {
    return static_cast<char *>(p) + bytes;
  }

  /// `n` elements of dtype at `x` as floats: `x` itself for f32, else
  /// widened into `scratch` (n floats).
  const float *floatsOf(DType dtype, const void *x, int64_t n,
                        float *scratch) {
    if (dtype == DType::F32)
      return as<float>(x);
    cast(dtype, x, scratch, n, static_cast<int32_t>(DType::F32));
    return scratch;
  }
  /// Where a float result for `x` goes: `x` for f32, else `scratch`, then
  /// rounded into `x` by storeFloats.
  float *floatResult(DType dtype, void *x, float *scratch) {
    return dtype == DType::F32 ? as<float>(x) : scratch;
  }
  void storeFloats(DType dtype, const float *from, void *x, int64_t n) {
    if (dtype != DType::F32)
      cast(DType::F32, from, x, n, static_cast<int32_t>(dtype));
  }

  void attention(DType dtype, const void *q, const void *k, const void *v,
                 void *out, void *lse, int64_t heads, int64_t kvGroups,
                 int64_t tq, int64_t tk, int64_t d, int32_t causal,
                 double scaleFactor) override {
    // bf16 / f16 with a head dim the tiled kernel has: the tensor cores.
    bool tiled = false;
    ZTRT_CUDA_DISPATCH(dtype, if constexpr (!std::is_same_v<T, float>) {
      tiled = cuda::attentionForward(
          as<T>(q), as<T>(k), as<T>(v), as<T>(out), as<float>(lse), heads,
          kvGroups, tq, tk, d, causal != 0, static_cast<float>(scaleFactor),
          compute);
    });
    if (tiled)
      return;
    const int64_t group = attentionGroup(heads, tq, tk);
    const int64_t qn = tq * d, kn = tk * d, pn = tq * tk,
                  elem = elementBytes(dtype);
    // Widened operands; grouped-query: the shared key / value heads
    // repeated, one per query head of the group.
    const bool wide = dtype != DType::F32 || kvGroups > 1;
    float *p = static_cast<float *>(
        cuda::scratch(group * pn * 4, compute, "attention"));
    float *w = wide ? static_cast<float *>(cuda::scratch(
                          group * (2 * qn + 2 * kn) * 4, compute, "attention"))
                    : nullptr;
    for (int64_t h = 0; h < heads; h += group) {
      const int64_t g = std::min(group, heads - h);
      const float *fq = floatsOf(dtype, offset(q, h * qn * elem), g * qn, w),
                  *fk = kvGroups > 1
                            ? repeatedHeadFloats(dtype, k, h, g, kvGroups, kn,
                                                 w + group * qn)
                            : floatsOf(dtype, offset(k, h * kn * elem), g * kn,
                                       w + group * qn),
                  *fv = kvGroups > 1
                            ? repeatedHeadFloats(dtype, v, h, g, kvGroups, kn,
                                                 w + group * (qn + kn))
                            : floatsOf(dtype, offset(v, h * kn * elem), g * kn,
                                       w + group * (qn + kn));
      void *o = offset(out, h * qn * elem);
      float *fo = dtype == DType::F32 ? as<float>(o)
                                      : w + group * (qn + 2 * kn);
      matmul(DType::F32, fq, fk, p, g, tq, tk, d, 0, 1, qn, kn, pn);
      scale(DType::F32, p, p, g * pn, scaleFactor);
      cuda::softmax<float>(p, p, g * tq, tk, causal != 0, compute,
                           as<float>(lse) + h * tq);
      matmul(DType::F32, p, fv, fo, g, tq, d, tk, 0, 0, pn, kn, qn);
      storeFloats(dtype, fo, o, g * qn);
    }
    cuda::release(p, compute);
    if (w)
      cuda::release(w, compute);
  }

  void attentionGrad(DType dtype, const void *dout, const void *q,
                     const void *k, const void *v, const void *out,
                     const void *lse, void *dq, void *dk, void *dv,
                     int64_t heads, int64_t kvGroups, int64_t tq, int64_t tk,
                     int64_t d, int32_t causal, double scaleFactor) override {
    bool tiled = false;
    ZTRT_CUDA_DISPATCH(dtype, if constexpr (!std::is_same_v<T, float>) {
      tiled = cuda::attentionBackward(
          as<T>(dout), as<T>(q), as<T>(k), as<T>(v), as<T>(out),
          as<float>(lse), as<T>(dq), as<T>(dk), as<T>(dv), heads, kvGroups,
          tq, tk, d, causal != 0, static_cast<float>(scaleFactor), compute);
    });
    if (tiled)
      return;
    // The composed kernels (which read neither out nor lse). Grouped-query:
    // the key / value heads repeated per query head as in the forward, each
    // query head's dk and dv in float scratch, added in head order into a
    // float accumulator per shared head (dk and dv themselves in f32, else
    // `sums`, rounded once at the end): K and V's size, not the scores'.
    const int64_t group = attentionGroup(heads, tq, tk);
    const int64_t qn = tq * d, kn = tk * d, pn = tq * tk,
                  elem = elementBytes(dtype);
    const bool grouped = kvGroups > 1;
    const bool wide = dtype != DType::F32 || grouped;
    const int64_t kvHeads = heads / kvGroups;
    float *p = static_cast<float *>(
        cuda::scratch(2 * group * pn * 4, compute, "attention_grad"));
    float *dp = p + group * pn;
    // Widened q, dout, k, v and the float dq, dk, dv.
    float *w = wide ? static_cast<float *>(cuda::scratch(
                          group * (4 * qn + 4 * kn) * 4, compute,
                          "attention_grad"))
                    : nullptr;
    float *sums = grouped && dtype != DType::F32
                      ? static_cast<float *>(cuda::scratch(
                            2 * kvHeads * kn * 4, compute, "attention_grad"))
                      : nullptr;
    float *accK = dtype == DType::F32 ? as<float>(dk) : sums,
          *accV = dtype == DType::F32 ? as<float>(dv) : sums + kvHeads * kn;
    if (grouped)
      for (float *acc : {accK, accV})
        check(cudaMemsetAsync(acc, 0, static_cast<size_t>(kvHeads * kn * 4),
                              compute),
              "cudaMemsetAsync (attention_grad dk / dv)");
    for (int64_t h = 0; h < heads; h += group) {
      const int64_t g = std::min(group, heads - h);
      const float *fq = floatsOf(dtype, offset(q, h * qn * elem), g * qn, w),
                  *fdo = floatsOf(dtype, offset(dout, h * qn * elem), g * qn,
                                  w + group * qn),
                  *fk = grouped ? repeatedHeadFloats(dtype, k, h, g, kvGroups,
                                                     kn, w + group * 2 * qn)
                                : floatsOf(dtype, offset(k, h * kn * elem),
                                           g * kn, w + group * 2 * qn),
                  *fv = grouped ? repeatedHeadFloats(dtype, v, h, g, kvGroups,
                                                     kn,
                                                     w + group * (2 * qn + kn))
                                : floatsOf(dtype, offset(v, h * kn * elem),
                                           g * kn, w + group * (2 * qn + kn));
      void *oq = offset(dq, h * qn * elem),
           *ok = grouped ? nullptr : offset(dk, h * kn * elem),
           *ov = grouped ? nullptr : offset(dv, h * kn * elem);
      float *fdq = dtype == DType::F32 ? as<float>(oq)
                                       : w + group * (2 * qn + 2 * kn),
            *fdk = grouped || dtype != DType::F32
                       ? w + group * (3 * qn + 2 * kn)
                       : as<float>(ok),
            *fdv = grouped || dtype != DType::F32
                       ? w + group * (3 * qn + 3 * kn)
                       : as<float>(ov);
      matmul(DType::F32, fq, fk, p, g, tq, tk, d, 0, 1, qn, kn, pn);
      scale(DType::F32, p, p, g * pn, scaleFactor);
      cuda::softmax<float>(p, p, g * tq, tk, causal != 0, compute);
      // The composed form's adjoints (as the cpu backend's attentionGrad).
      matmul(DType::F32, fdo, fv, dp, g, tq, tk, d, 0, 1, qn, kn, pn);
      matmul(DType::F32, p, fdo, fdv, g, tk, d, tq, 1, 0, pn, qn, kn);
      softmaxGrad(DType::F32, dp, p, dp, g * tq, tk);
      scale(DType::F32, dp, dp, g * pn, scaleFactor);
      matmul(DType::F32, dp, fk, fdq, g, tq, d, tk, 0, 0, pn, kn, qn);
      matmul(DType::F32, dp, fq, fdk, g, tk, d, tq, 1, 0, pn, qn, kn);
      storeFloats(dtype, fdq, oq, g * qn);
      if (grouped) {
        for (int64_t i = 0; i < g; ++i) {
          const int64_t at = (h + i) / kvGroups * kn;
          add(DType::F32, accK + at, fdk + i * kn, accK + at, kn);
          add(DType::F32, accV + at, fdv + i * kn, accV + at, kn);
        }
        continue;
      }
      storeFloats(dtype, fdk, ok, g * kn);
      storeFloats(dtype, fdv, ov, g * kn);
    }
    cuda::release(p, compute);
    if (w)
      cuda::release(w, compute);
    if (sums) {
      storeFloats(dtype, accK, dk, kvHeads * kn);
      storeFloats(dtype, accV, dv, kvHeads * kn);
      cuda::release(sums, compute);
    }
  }

  void transpose(DType dtype, const void *x, void *out, int64_t rank,
                 const void *xShapeArg, const void *permArg) override {
    const int64_t *xShape = as<int64_t>(xShapeArg),
                  *perm = as<int64_t>(permArg);
    std::vector<int64_t> xStrides = contiguousStrides(rank, xShape);
    cuda::Gather plan;
    plan.rank = static_cast<int>(rank);
    for (int64_t d = 0; d < rank; ++d) {
      plan.shape[d] = xShape[perm[d]];
      plan.strides[d] = xStrides[perm[d]];
    }
    simplify(plan.rank, plan.shape, plan.strides);
    ZTRT_CUDA_DISPATCH(dtype,
                       cuda::gather(as<T>(x), as<T>(out), plan, 1.0, compute));
  }

  void reduce(DType dtype, const void *x, void *out, int64_t rank,
              const void *xShape, const void *mask, int32_t kind) override {
    const cuda::Reduction plan =
        reduction(rank, as<int64_t>(xShape), as<int64_t>(mask));
    ZTRT_CUDA_DISPATCH(dtype, cuda::reduce(as<T>(x), as<T>(out), plan,
                                           static_cast<cuda::ReduceKind>(kind),
                                           compute));
  }

  void reduceMaxGrad(DType dtype, const void *dy, const void *x, const void *y,
                     void *dx, int64_t rank, const void *xShapeArg,
                     const void *maskArg) override {
    const int64_t *xShape = as<int64_t>(xShapeArg),
                  *mask = as<int64_t>(maskArg);
    const cuda::Reduction plan = reduction(rank, xShape, mask);
    // x's shape with the output's strides (0 along the reduced dims).
    cuda::Gather toOutput;
    toOutput.rank = static_cast<int>(rank);
    int64_t stride = 1;
    for (int64_t d = rank; d-- > 0;) {
      toOutput.shape[d] = xShape[d];
      toOutput.strides[d] = mask[d] ? 0 : stride;
      if (!mask[d])
        stride *= xShape[d];
    }
    simplify(toOutput.rank, toOutput.shape, toOutput.strides);
    ZTRT_CUDA_DISPATCH(dtype,
                       cuda::reduceMaxGrad(as<T>(dy), as<T>(x), as<T>(y),
                                           as<T>(dx), plan, toOutput, compute));
  }

  void broadcast(DType dtype, const void *x, void *out, int64_t rank,
                 const void *outShapeArg, const void *maskArg,
                 double factor) override {
    const int64_t *outShape = as<int64_t>(outShapeArg),
                  *mask = as<int64_t>(maskArg);
    cuda::Gather plan;
    plan.rank = static_cast<int>(rank);
    int64_t stride = 1;
    for (int64_t d = rank; d-- > 0;) {
      plan.shape[d] = outShape[d];
      plan.strides[d] = mask[d] ? 0 : stride;
      if (!mask[d])
        stride *= outShape[d];
    }
    simplify(plan.rank, plan.shape, plan.strides);
    ZTRT_CUDA_DISPATCH(
        dtype, cuda::gather(as<T>(x), as<T>(out), plan, factor, compute));
  }

  // The loss and dloss are one float whatever the dtype; labels and ids
  // int32.
  void crossEntropy(DType dtype, const void *logits, const void *labels,
                    void *loss, int64_t rows, int64_t classes) override {
    checkRows("cross_entropy", rows);
    cuda::ErrorSlot *error = slot("cross_entropy", true, classes);
    ZTRT_CUDA_DISPATCH(dtype,
                       cuda::crossEntropy(as<T>(logits), as<int32_t>(labels),
                                          as<float>(loss), rows, classes, error,
                                          compute));
  }
  void crossEntropyWithGrad(DType dtype, const void *logits,
                            const void *labels, const void *dloss, void *loss,
                            void *dlogits, int64_t rows,
                            int64_t classes) override {
    checkRows("cross_entropy", rows);
    cuda::ErrorSlot *error = slot("cross_entropy", true, classes);
    ZTRT_CUDA_DISPATCH(dtype, cuda::crossEntropyWithGrad(
                                  as<T>(logits), as<int32_t>(labels),
                                  as<float>(dloss), as<float>(loss),
                                  as<T>(dlogits), rows, classes, error,
                                  compute));
  }
  void crossEntropyGrad(DType dtype, const void *dloss, const void *logits,
                        const void *labels, void *dlogits, int64_t rows,
                        int64_t classes) override {
    checkRows("cross_entropy_grad", rows);
    cuda::ErrorSlot *error = slot("cross_entropy_grad", true, classes);
    ZTRT_CUDA_DISPATCH(
        dtype, cuda::crossEntropyGrad(as<float>(dloss), as<T>(logits),
                                      as<int32_t>(labels), as<T>(dlogits), rows,
                                      classes, error, compute));
  }
  void embedding(DType dtype, const void *table, const void *ids, void *out,
                 int64_t nIds, int64_t vocab, int64_t dim) override {
    checkRows("embedding", nIds);
    cuda::ErrorSlot *error = slot("embedding", false, vocab);
    ZTRT_CUDA_DISPATCH(dtype, cuda::embedding(as<T>(table), as<int32_t>(ids),
                                              as<T>(out), nIds, vocab, dim,
                                              error, compute));
  }
  void embeddingGrad(DType dtype, const void *dy, const void *ids, void *dtable,
                     int64_t nIds, int64_t vocab, int64_t dim) override {
    checkRows("embedding_grad", nIds);
    cuda::ErrorSlot *error = slot("embedding_grad", false, vocab);
    ZTRT_CUDA_DISPATCH(dtype, cuda::embeddingGrad(as<T>(dy), as<int32_t>(ids),
                                                  as<T>(dtable), nIds, vocab,
                                                  dim, error, compute));
  }

  // Scalars exactly as backends/cpu/CpuOptimizer.cpp rounds them.
  static cuda::SgdScalars sgdScalars(const SgdHyper &hyper, int64_t step) {
    cuda::SgdScalars s;
    s.negLr = static_cast<float>(-hyper.lr);
    s.momentum = static_cast<float>(hyper.momentum);
    s.keep = static_cast<float>(1.0 - hyper.dampening);
    s.decay = static_cast<float>(hyper.weightDecay);
    s.useMomentum = hyper.momentum != 0.0;
    s.first = step == 1;
    s.nesterov = hyper.nesterov;
    s.unscale = static_cast<float>(hyper.gradScale);
    return s;
  }

  static cuda::AdamScalars adamScalars(const AdamHyper &hyper, int64_t step) {
    const double t = static_cast<double>(step);
    const double bias1 = 1.0 - std::pow(hyper.beta1, t);
    const double bias2 = 1.0 - std::pow(hyper.beta2, t);
    cuda::AdamScalars s;
    s.unscale = static_cast<float>(hyper.gradScale);
    s.negStepSize = static_cast<float>(-(hyper.lr / bias1));
    s.bias2Sqrt = static_cast<float>(std::sqrt(bias2));
    s.beta1 = static_cast<float>(hyper.beta1);
    s.beta2 = static_cast<float>(hyper.beta2);
    s.oneMinusBeta1 = static_cast<float>(1.0 - hyper.beta1);
    s.oneMinusBeta2 = static_cast<float>(1.0 - hyper.beta2);
    s.eps = static_cast<float>(hyper.eps);
    s.decay = static_cast<float>(hyper.weightDecay);
    s.shrink = static_cast<float>(1.0 - hyper.lr * hyper.weightDecay);
    s.decoupled = hyper.decoupled;
    return s;
  }

  void sgdUpdate(DType dtype, void *param, const void *grad, void *momentumBuf,
                 int64_t n, const SgdHyper &hyper, int64_t step) override {
    const cuda::SgdScalars s = sgdScalars(hyper, step);
    ZTRT_CUDA_DISPATCH(dtype,
                       cuda::sgdUpdate(as<T>(param), as<T>(grad),
                                       as<T>(momentumBuf), n, s, compute));
  }

  void adamUpdate(DType dtype, void *param, const void *grad, void *expAvg,
                  void *expAvgSq, int64_t n, const AdamHyper &hyper,
                  int64_t step) override {
    const cuda::AdamScalars s = adamScalars(hyper, step);
    ZTRT_CUDA_DISPATCH(dtype, cuda::adamUpdate(as<T>(param), as<T>(grad),
                                               as<T>(expAvg), as<T>(expAvgSq),
                                               n, s, compute));
  }

  // The float kernels on the master and the float states, one launch that
  // widens the gradient and stores the rounded parameter.
  void sgdUpdateMaster(DType gradType, DType paramType, void *param,
                       const void *grad, float *master, float *momentumBuf,
                       int64_t n, const SgdHyper &hyper,
                       int64_t step) override {
    const cuda::SgdScalars s = sgdScalars(hyper, step);
    ZTRT_CUDA_DISPATCH(gradType, dispatch(paramType, [&](auto paramTag) {
                         using P = decltype(paramTag);
                         cuda::sgdUpdateMaster(as<P>(param), as<T>(grad),
                                               master, momentumBuf, n, s,
                                               compute);
                       }));
  }

  void adamUpdateMaster(DType gradType, DType paramType, void *param,
                        const void *grad, float *master, float *expAvg,
                        float *expAvgSq, int64_t n, const AdamHyper &hyper,
                        int64_t step) override {
    const cuda::AdamScalars s = adamScalars(hyper, step);
    ZTRT_CUDA_DISPATCH(gradType, dispatch(paramType, [&](auto paramTag) {
                         using P = decltype(paramTag);
                         cuda::adamUpdateMaster(as<P>(param), as<T>(grad),
                                                master, expAvg, expAvgSq, n, s,
                                                compute);
                       }));
  }

  void gradSqNorm(DType dtype, const void *x, int64_t n, const void *sumIn,
                  void *sumOut) override {
    ZTRT_CUDA_DISPATCH(dtype, cuda::gradSqNorm(as<T>(x), n, as<float>(sumIn),
                                               as<float>(sumOut), compute));
  }

  void foundNonfinite(DType dtype, const void *x, int64_t n,
                      const void *foundIn, void *foundOut) override {
    ZTRT_CUDA_DISPATCH(dtype, cuda::foundNonfinite(
                                  as<T>(x), n, as<float>(foundIn),
                                  as<float>(foundOut), compute));
  }

  // One rounding per element; the same type is a device copy (memmove
  // semantics, NaN payloads kept), as on the cpu.
  void cast(DType dtype, const void *x, void *out, int64_t n,
            int32_t to) override {
    const DType target = static_cast<DType>(to);
    if (target == dtype) {
      copy(x, out, n * elementBytes(dtype));
      return;
    }
    ZTRT_CUDA_DISPATCH(dtype, dispatch(target, [&](auto toTag) {
                         using U = decltype(toTag);
                         cuda::cast(as<T>(x), as<U>(out), n, compute);
                       }));
  }

#undef ZTRT_CUDA_DISPATCH
  // --- Collectives -----------------------------------------------------------
  // The synchronous forms (not used by the context, which enqueues): the
  // enqueued collective, waited and finished.

  int64_t allReduce(Communicator &world, DType dtype, const void *in, void *out,
                    int64_t n, bool mean) override {
    return blocking(world, Collective::AllReduce, dtype, in, out, n, mean, 0);
  }
  int64_t reduceScatter(Communicator &world, DType dtype, const void *in,
                        void *out, int64_t count, bool mean) override {
    return blocking(world, Collective::ReduceScatter, dtype, in, out, count,
                    mean, 0);
  }
  int64_t allGather(Communicator &world, DType dtype, const void *in, void *out,
                    int64_t count) override {
    return blocking(world, Collective::AllGather, dtype, in, out, count, false,
                    0);
  }
  int64_t bcast(Communicator &world, DType dtype, void *buf, int64_t n,
                int root) override {
    return blocking(world, Collective::Broadcast, dtype, buf, buf, n, false,
                    root);
  }

  bool enqueuesCollectives() const override { return true; }

  int64_t enqueueCollective(Communicator &world,
                            const CollectiveRequest &request,
                            int64_t *wireBytes) override {
    Ticket ticket;
    ticket.ready = event(false);
    ticket.begin = event(true);
    ticket.end = event(true);
    check(cudaEventRecord(ticket.ready, compute), "cudaEventRecord");
    check(cudaStreamWaitEvent(comm, ticket.ready, 0), "cudaStreamWaitEvent");
    check(cudaEventRecord(ticket.begin, comm), "cudaEventRecord");
    execute(request);
    check(cudaEventRecord(ticket.end, comm), "cudaEventRecord");
    *wireBytes = ncclWireBytes(request);
    const int64_t id = nextTicket++;
    tickets.emplace(id, ticket);
    return id;
  }

  void awaitCollective(int64_t id) override {
    Ticket &ticket = find(id);
    ticket.reached = event(true);
    check(cudaEventRecord(ticket.reached, compute), "cudaEventRecord");
    check(cudaStreamWaitEvent(compute, ticket.end, 0), "cudaStreamWaitEvent");
    ticket.awaited = true;
  }

  bool collectiveDone(int64_t id) override {
    cudaError_t status = cudaEventQuery(find(id).end);
    if (status == cudaErrorNotReady)
      return false;
    check(status, "cudaEventQuery");
    return true;
  }

  bool takeCollectiveTiming(int64_t id,
                            DeviceCollectiveTiming *timing) override {
    auto it = tickets.find(id);
    if (it == tickets.end() || !it->second.timed)
      return false;
    *timing = it->second.timing;
    Ticket &t = it->second;
    recycle(t.ready, false);
    recycle(t.begin, true);
    recycle(t.end, true);
    recycle(t.reached, true);
    tickets.erase(it);
    return true;
  }

private:
  /// The bytes this rank hands NCCL for other ranks: NCCL does not say what
  /// it sent, so the ring algorithm's per-rank volume for the element count
  /// and element size NCCL was given (reduce-scatter and all-gather send
  /// N-1 chunks of `count`; all-reduce 2 (N-1) / N of its payload, integer
  /// bytes; a broadcast forwards its payload once). 0 without a
  /// communicator of more than one rank (a world of one copies).
  int64_t ncclWireBytes(const CollectiveRequest &r) const {
    if (!ncclComm || ranks <= 1)
      return 0;
    const int64_t payload = r.elems * elementBytes(r.dtype);
    switch (r.kind) {
    case Collective::AllReduce:
      return 2 * (ranks - 1) * payload / ranks;
    case Collective::ReduceScatter:
    case Collective::AllGather:
      return (ranks - 1) * payload;
    case Collective::Broadcast:
      return payload;
    }
    return 0;
  }

  static ncclDataType_t ncclType(DType dtype) {
    switch (dtype) {
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::F32:
      break;
    }
    return ncclFloat32;
  }

  /// Enqueues the collective's data movement on the communication stream.
  /// Sums are NCCL's (in its order, in the dtype: see docs/cuda.md); a mean
  /// divides the sum by N in float and rounds once to the dtype.
  void execute(const CollectiveRequest &r) {
    const int64_t n = r.elems;
    const int64_t elem = elementBytes(r.dtype);
    const int64_t bytes = n * elem;
    if (!ncclComm) {
      // A world of one: each collective is a copy (bcast: nothing).
      if (r.kind != Collective::Broadcast)
        copyOnComm(r.in, r.out, bytes);
      return;
    }
    const cuda::NcclApi &api = cuda::nccl();
    const size_t count = static_cast<size_t>(n);
    const ncclDataType_t type = ncclType(r.dtype);
    const char *in = static_cast<const char *>(r.in);
    char *out = static_cast<char *>(r.out);
    void *staged = nullptr;
    // NCCL allows exactly one kind of overlap per collective (its "in
    // place" layout); any other overlap goes through a copy of `in`, so
    // that `in` is read completely before `out` is written, as on the cpu.
    auto stage = [&](int64_t inBytes) {
      staged = cuda::scratch(inBytes, comm, collectiveName(r.kind));
      check(cudaMemcpyAsync(staged, in, static_cast<size_t>(inBytes),
                            cudaMemcpyDeviceToDevice, comm),
            "cudaMemcpyAsync");
      in = static_cast<const char *>(staged);
    };
    // An NCCL call may block the host (connection set-up on first use; the
    // emulator's NCCL runs the collective in the call): timed by the
    // collective watchdog like an MPI call.
    static constexpr const char *kCallNames[] = {
        "ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast"};
    WatchedWait watched(kCallNames[static_cast<int>(r.kind)]);
    switch (r.kind) {
    case Collective::AllReduce:
      if (in != out && overlaps(in, bytes, out, bytes))
        stage(bytes);
      checkNccl(api.allReduce(in, out, count, type, ncclSum, ncclComm, comm),
                "ncclAllReduce");
      break;
    case Collective::ReduceScatter:
      if (out != in + rank * bytes && overlaps(in, bytes * ranks, out, bytes))
        stage(bytes * ranks);
      checkNccl(
          api.reduceScatter(in, out, count, type, ncclSum, ncclComm, comm),
          "ncclReduceScatter");
      break;
    case Collective::AllGather:
      if (in != out + rank * bytes && overlaps(in, bytes, out, bytes * ranks))
        stage(bytes);
      checkNccl(api.allGather(in, out, count, type, ncclComm, comm),
                "ncclAllGather");
      break;
    case Collective::Broadcast:
      checkNccl(api.broadcast(out, out, count, type, r.root, ncclComm, comm),
                "ncclBroadcast");
      break;
    }
    // The mean is the sum divided by N in float, as on the cpu (not NCCL's
    // ncclAvg, which scales each rank's term before summing).
    if (r.mean && ranks > 1 && r.kind != Collective::Broadcast)
      dispatch(r.dtype, [&](auto tag) {
        using T = decltype(tag);
        cuda::divide(as<T>(r.out), n, static_cast<float>(ranks), comm);
      });
    if (staged)
      cuda::release(staged, comm);
  }

  void copyOnComm(const void *in, void *out, int64_t bytes) {
    if (bytes <= 0 || in == out)
      return;
    if (overlaps(in, bytes, out, bytes)) {
      void *tmp = cuda::scratch(bytes, comm, "collective");
      check(cudaMemcpyAsync(tmp, in, bytes, cudaMemcpyDeviceToDevice, comm),
            "cudaMemcpyAsync");
      check(cudaMemcpyAsync(out, tmp, bytes, cudaMemcpyDeviceToDevice, comm),
            "cudaMemcpyAsync");
      cuda::release(tmp, comm);
      return;
    }
    check(cudaMemcpyAsync(out, in, static_cast<size_t>(bytes),
                          cudaMemcpyDeviceToDevice, comm),
          "cudaMemcpyAsync");
  }

  int64_t blocking(Communicator &world, Collective kind, DType dtype,
                   const void *in, void *out, int64_t elems, bool mean,
                   int root) {
    CollectiveRequest request;
    request.kind = kind;
    request.dtype = dtype;
    request.in = in;
    request.out = out;
    request.elems = elems;
    request.mean = mean;
    request.root = root;
    int64_t wireBytes = 0;
    const int64_t id = enqueueCollective(world, request, &wireBytes);
    awaitCollective(id);
    synchronize();
    DeviceCollectiveTiming unused;
    takeCollectiveTiming(id, &unused);
    return wireBytes;
  }

  /// Blocks until `stream` has finished. With a communicator, polls NCCL's
  /// asynchronous error meanwhile (NCCL's error model): a collective whose
  /// peer died or whose network failed never finishes, so waiting for the
  /// stream alone would hang the job; the communicator is aborted and the
  /// error reported instead.
  void awaitStream(cudaStream_t stream) {
    if (!ncclComm) {
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      return;
    }
    // The stream may wait in a collective for a rank that stopped or died:
    // the collective watchdog times this wait like an MPI call's.
    if (cudaStreamQuery(stream) == cudaSuccess)
      return;
    cudaGetLastError();
    WatchedWait watched("a wait for the device's NCCL collectives");
    for (;;) {
      const cudaError_t status = cudaStreamQuery(stream);
      if (status == cudaSuccess)
        return;
      if (status != cudaErrorNotReady)
        check(status, "cudaStreamQuery");
      cudaGetLastError(); // cudaErrorNotReady is not an error.
      ncclResult_t state = ncclSuccess;
      checkNccl(cuda::nccl().commGetAsyncError(ncclComm, &state),
                "ncclCommGetAsyncError");
      if (state != ncclSuccess && !inProgress(state)) {
        cuda::nccl().commAbort(ncclComm);
        ncclComm = nullptr;
        fatal("NCCL collective failed: %s (communicator aborted)",
              cuda::nccl().getErrorString(state));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  static bool inProgress(ncclResult_t state) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    return state == ncclInProgress;
#else
    return false;
#endif
  }

  Ticket &find(int64_t id) {
    auto it = tickets.find(id);
    if (it == tickets.end())
      fatal("cuda: unknown collective ticket %lld", static_cast<long long>(id));
    return it->second;
  }

  cudaEvent_t event(bool timed) {
    std::vector<cudaEvent_t> &pool = timed ? timedEvents : untimedEvents;
    if (!pool.empty()) {
      cudaEvent_t e = pool.back();
      pool.pop_back();
      return e;
    }
    cudaEvent_t e;
    check(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault
                                             : cudaEventDisableTiming),
          "cudaEventCreate");
    return e;
  }

  void recycle(cudaEvent_t e, bool timed) {
    if (e)
      (timed ? timedEvents : untimedEvents).push_back(e);
  }

  /// Milliseconds from `from` to `to` (both completed); 0 if CUDA cannot
  /// say (an event recorded after the other).
  static float elapsed(cudaEvent_t from, cudaEvent_t to) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess) {
      cudaGetLastError();
      return 0.0f;
    }
    return ms;
  }

  Clock::time_point hostTime(cudaEvent_t e) const {
    const double ns = static_cast<double>(elapsed(base, e)) * 1e6;
    return hostBase +
           std::chrono::nanoseconds(static_cast<int64_t>(std::llround(ns)));
  }

  /// After both streams finished: maps every collective's events onto the
  /// host clock through the base event, and the exposed time of those
  /// awaited (how long the compute stream, having reached the wait, still
  /// waited for the collective's end).
  void placeTickets() {
    for (auto &[id, t] : tickets) {
      if (!t.placed) {
        t.timing.begin = hostTime(t.begin);
        t.timing.end = std::max(t.timing.begin, hostTime(t.end));
        t.placed = true;
      }
      if (t.awaited && !t.timed) {
        const float ms = elapsed(t.reached, t.end);
        t.timing.exposedNanos =
            ms > 0.0f ? static_cast<int64_t>(std::llround(ms * 1e6)) : 0;
        t.timed = true;
      }
    }
  }

  /// A fresh pair (device event, host time) for placing events: taken at
  /// every synchronization, so elapsed times stay short and precise in
  /// float milliseconds.
  void rebase() {
    check(cudaEventRecord(base, compute), "cudaEventRecord");
    check(cudaEventSynchronize(base), "cudaEventSynchronize");
    hostBase = Clock::now();
  }

  /// The plan of a reduction of x (xShape) over the dims with mask[d] != 0.
  static cuda::Reduction reduction(int64_t rank, const int64_t *xShape,
                                   const int64_t *mask) {
    std::vector<int64_t> strides = contiguousStrides(rank, xShape);
    cuda::Reduction plan;
    for (int64_t d = 0; d < rank; ++d) {
      if (mask[d]) {
        plan.reducedShape[plan.reducedRank] = xShape[d];
        plan.reducedStrides[plan.reducedRank++] = strides[d];
        plan.reduced *= xShape[d];
      } else {
        plan.keptShape[plan.keptRank] = xShape[d];
        plan.keptStrides[plan.keptRank++] = strides[d];
        plan.outputs *= xShape[d];
      }
    }
    simplify(plan.keptRank, plan.keptShape, plan.keptStrides);
    simplify(plan.reducedRank, plan.reducedShape, plan.reducedStrides);
    if (plan.reducedRank == 0) {
      // One term per output (nothing reduced, or only unit dims).
      plan.reducedRank = 1;
      plan.reducedShape[0] = 1;
      plan.reducedStrides[0] = 0;
    }
    return plan;
  }

  static void checkRows(const char *op, int64_t rows) {
    // Error slots hold the row in 32 bits.
    if (rows > INT32_MAX)
      fatal("%s: %lld rows exceed the cuda backend's limit of %d", op,
            static_cast<long long>(rows), INT32_MAX);
  }

  cuda::ErrorSlot *slot(const char *op, bool labels, int64_t bound) {
    if (slotInfo.size() == kErrorSlots) {
      awaitStream(compute);
      reportErrors();
    }
    slotInfo.push_back({op, labels, bound});
    return slots + slotInfo.size() - 1;
  }

  /// Fatal with the cpu backend's message for the first recorded error, in
  /// call order; then the slots are free again. The compute stream must
  /// have finished the checking kernels.
  void reportErrors() {
    if (slotInfo.empty())
      return;
    std::vector<cuda::ErrorSlot> values(slotInfo.size());
    check(cudaMemcpy(values.data(), slots,
                     values.size() * sizeof(cuda::ErrorSlot),
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy (error slots)");
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i] == cuda::kNoError)
        continue;
      const SlotInfo &info = slotInfo[i];
      const long long index = static_cast<long long>(values[i] >> 32);
      const int32_t value =
          static_cast<int32_t>(static_cast<uint32_t>(values[i] & 0xffffffffu));
      if (info.labels)
        fatal("%s: label %d out of range [0, %lld) at row %lld", info.op, value,
              static_cast<long long>(info.bound), index);
      fatal("%s: id %d out of range [0, %lld) at position %lld", info.op, value,
            static_cast<long long>(info.bound), index);
    }
    check(cudaMemsetAsync(slots, 0xff,
                          slotInfo.size() * sizeof(cuda::ErrorSlot), compute),
          "cudaMemsetAsync");
    slotInfo.clear();
  }

  CudaOptions options;
  int device = 0;
  int hostThreads = 1;
  int ranks = 1, rank = 0;
  cudaStream_t compute = nullptr, comm = nullptr;
  /// zero-offload's swap copies, beside the kernels (created on first use).
  cudaStream_t copies = nullptr;
  /// The host step thread's copies (Backend::kHostStepLane): parameters
  /// down and up beside the swaps and spills (created on first use).
  cudaStream_t hostStepCopies = nullptr;
  cudaMemPool_t pool = nullptr;
  cublasHandle_t handle = nullptr;
  ncclComm_t ncclComm = nullptr;

  cuda::ErrorSlot *slots = nullptr;
  std::vector<SlotInfo> slotInfo;

  char *staging = nullptr;
  size_t stagingUsed = 0;
  std::vector<Staged> staged;

  std::unordered_map<int64_t, Ticket> tickets;
  int64_t nextTicket = 1;
  std::vector<cudaEvent_t> timedEvents, untimedEvents;
  cudaEvent_t base = nullptr;
  /// Fences of zero-offload's asynchronous copies, and retired events.
  std::unordered_map<int64_t, cudaEvent_t> fences;
  std::vector<cudaEvent_t> spareFences;
  std::mutex fenceMutex;
  /// allocateMappedHost's page-aligned addresses -> cudaHostAlloc's.
  std::mutex mappedMutex;
  std::unordered_map<void *, void *> mappedBases;
  int64_t lastFence = 0;
  Clock::time_point hostBase;
};

} // namespace

int cudaDeviceCount(std::string *reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    *reason = format("cudaGetDeviceCount returned %s (%s)",
                     cudaGetErrorName(status), cudaGetErrorString(status));
    // "Driver version is insufficient" is also what a machine without any
    // NVIDIA driver gets; say which it is.
    if (void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL))
      dlclose(driver);
    else
      *reason += "; the NVIDIA driver (libcuda.so.1) is not installed";
    return 0;
  }
  if (count == 0)
    *reason = "cudaGetDeviceCount found no device";
  return count;
}

std::string cudaDeviceDescription(int device) {
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return format("%s (sm_%d%d, %d SMs, %.1f GiB)", prop.name, prop.major,
                prop.minor, prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / (1 << 30));
}

Backend::PeakRate cudaPeakRate(int device, bool sixteenBit) {
  int major = 0, minor = 0, sms = 0, khz = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                               device),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                               device),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device),
        "cudaDeviceGetAttribute");
  // Dense FLOPs per clock per SM of the data-center parts (NVIDIA's
  // architecture whitepapers): float32 is FFMA on the CUDA cores (the
  // backend keeps TF32 off); 16-bit is the tensor cores with float32
  // accumulation (GeForce parts of sm_86 / sm_89 accumulate at half that).
  struct Arch {
    int sm, fp32, half;
  };
  static const Arch arches[] = {{70, 128, 1024}, {75, 128, 1024},
                                {80, 128, 2048}, {86, 256, 1024},
                                {89, 256, 1024}, {90, 256, 4096}};
  const int sm = major * 10 + minor;
  for (const Arch &a : arches) {
    if (a.sm != sm)
      continue;
    const int perClock = sixteenBit ? a.half : a.fp32;
    const double tflops =
        static_cast<double>(sms) * khz * 1e3 * perClock / 1e12;
    return {tflops, format("%d SMs x %d MHz x %d FLOP/clock (sm_%d, %s)", sms,
                           khz / 1000, perClock, sm,
                           sixteenBit ? "16-bit tensor cores"
                                      : "float32 CUDA cores")};
  }
  return {0.0, format("no peak rate known for sm_%d", sm)};
}

int selectCudaDevice(const CommunicatorParams &params) {
  std::string reason;
  const int count = cudaDeviceCount(&reason);
  if (count == 0)
    fatal("--backend cuda: no CUDA device: %s", reason.c_str());
  if (params.localCount <= count)
    return params.localRank;
  // One visible device per rank: the launcher gave each rank its own GPU
  // (CUDA_VISIBLE_DEVICES per rank). If they all see the same one, NCCL
  // refuses to put two ranks on it.
  if (count == 1)
    return 0;
  fatal("--backend cuda: %d ranks on this node but %d CUDA devices visible "
        "(one GPU per rank: launch at most %d ranks per node)",
        params.localCount, count, count);
}

std::unique_ptr<Backend> createCudaBackend(const CudaOptions &options) {
  return std::make_unique<CudaBackend>(options);
}

} // namespace ztrt

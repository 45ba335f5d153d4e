//===- CudaBackendImpl.h - The cuda backend's class -------------*- C++ -*-===//
//
// Part of ztrain's runtime (private: not installed). The cuda backend's
// class, declared once and defined by purpose: CudaBackend.cpp (the
// device, synchronization, memory and copies, the error slots; the design
// in its file comment), CudaOffload.cpp (zero-offload's host memory and
// fences), CudaElementwise.cpp, CudaRows.cpp (normalization, softmax,
// RoPE), CudaMatmul.cpp (cuBLAS, attention), CudaLayout.cpp,
// CudaLosses.cpp, CudaOptimizer.cpp and CudaCollectives.cpp (NCCL, the
// enqueued collectives and their timing); the helpers more than one of
// them uses, in an anonymous namespace (each file its own copy); and the
// kernels' dtype dispatch.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CUDA_CUDABACKENDIMPL_H
#define ZTRT_BACKENDS_CUDA_CUDABACKENDIMPL_H

#include "backends/cuda/CudaBackend.h"

#include "backends/Backend.h"
#include "backends/cuda/Kernels.h"
#include "backends/cuda/Libraries.h"
#include "comm/CommQueue.h"
#include "step/Context.h"
#include "base/DType.h"
#include "base/Support.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ztrt {

using cuda::check;

namespace {

inline void checkNccl(ncclResult_t result, const char *what) {
  if (result == ncclSuccess)
    return;
  fatal("NCCL %s failed: %s", what, cuda::nccl().getErrorString(result));
}

inline void checkBlas(cublasStatus_t status, const char *what) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return;
  fatal("cuBLAS %s failed: %s", what, cuda::cublas().statusString(status));
}

/// A buffer argument as an array of T.
template <typename T> const T *as(const void *p) {
  return static_cast<const T *>(p);
}
template <typename T> T *as(void *p) { return static_cast<T *>(p); }

inline bool overlaps(const void *a, int64_t aBytes, const void *b,
                     int64_t bBytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + static_cast<uintptr_t>(bBytes) &&
         y < x + static_cast<uintptr_t>(aBytes);
}

} // namespace

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

// --- Kernels ---------------------------------------------------------------
// Each method dispatches on the dtype (base/DType.h) to the launcher
// template of Kernels.h instantiated for float, bf16 or f16: one kernel
// per op, loads widened to float, each output rounded once to T.

#define ZTRT_CUDA_DISPATCH(dtype, call)                                        \
  dispatch(dtype, [&](auto tag) {                                              \
    using T = decltype(tag);                                                   \
    call;                                                                      \
  })

class CudaBackend final : public Backend {
public:
  // CudaBackend.cpp
  explicit CudaBackend(const CudaOptions &options);
  ~CudaBackend() override;
  void bindThread() override;
  const char *name() const override;
  std::string deviceName() const override;
  PeakRate peakRate(bool sixteenBit) const override;
  bool deviceMemory(uint64_t &freeBytes, uint64_t &totalBytes) override;
  void setThreads(int threads) override;
  int threads() const override;
  void adoptThreads(int) override;
  void attach(Communicator &world) override;
  /// Hybrid sharding's groups need NCCL communicators of their own, which
  /// this backend does not make yet: a mesh of replicate > 1 is refused.
  void checkMesh(int64_t shard, int64_t replicate) override;
  void synchronize() override;
  void *allocate(int64_t bytes) override;
  void deallocate(void *ptr) override;
  void copyFromHost(void *dst, const void *hostSrc, int64_t bytes) override;
  void copyToHost(void *hostDst, const void *src, int64_t bytes) override;
  void copyToHostAtSync(void *hostDst, const void *src, int64_t bytes) override;
  void copy(const void *src, void *dst, int64_t bytes) override;
  void copy2d(const void *src, void *dst, int64_t rows, int64_t rowBytes,
              int64_t srcStride, int64_t dstStride) override;

  // CudaOffload.cpp
  bool hostResident() const override;
  void *allocateMappedHost(int64_t bytes) override;
  void deallocateMappedHost(void *ptr) override;
  void pinHost(void *ptr, int64_t bytes) override;
  void unpinHost(void *ptr) override;
  int64_t recordFence() override;
  int64_t copyFromHostOnCopyStream(void *dst, const void *hostSrc,
                                   int64_t bytes, int64_t after,
                                   int lane = 0) override;
  int64_t copyToHostOnCopyStream(void *hostDst, const void *src, int64_t bytes,
                                 int64_t after, int lane = 0) override;
  void waitFenceOnDevice(int64_t fence) override;
  bool fenceReached(int64_t fence) override;
  void awaitFence(int64_t fence) override;

  // The kernels: one override per ZTRT_KERNEL entry of ztrt_abi.def,
  // generated as Backend.h declares them. Defined by family in
  // CudaElementwise.cpp (fill, the Elementwise.def table, scale, biasAdd,
  // maskedFill, where, cast), CudaRows.cpp (layer/RMS norm, softmax, RoPE),
  // CudaMatmul.cpp (matmul, attention), CudaLayout.cpp (transpose, reduce,
  // broadcast), CudaLosses.cpp (cross-entropy, embedding) and
  // CudaOptimizer.cpp (foundNonfinite, gradSqNorm).
#define ZTRT_FN(...)
#define ZTRT_KERNEL(name, method, names, ...)                                  \
  void method(DType dtype, ZTRT_ARGS(__VA_ARGS__)) override;
#include "ztrt_abi.def"
#undef ZTRT_KERNEL
#undef ZTRT_FN

  // CudaElementwise.cpp
  void dropout(DType dtype, const void *x, void *out, int64_t n, uint64_t key,
               uint64_t counterBase, uint32_t threshold, float scale) override;

  // CudaOptimizer.cpp
  void sgdUpdate(DType dtype, void *param, const void *grad, void *momentumBuf,
                 int64_t n, const SgdHyper &hyper, int64_t step) override;
  void adamUpdate(DType dtype, void *param, const void *grad, void *expAvg,
                  void *expAvgSq, int64_t n, const AdamHyper &hyper,
                  int64_t step) override;
  void sgdUpdateMaster(DType gradType, DType paramType, void *param,
                       const void *grad, float *master, float *momentumBuf,
                       int64_t n, const SgdHyper &hyper, int64_t step) override;
  void adamUpdateMaster(DType gradType, DType paramType, void *param,
                        const void *grad, float *master, float *expAvg,
                        float *expAvgSq, int64_t n, const AdamHyper &hyper,
                        int64_t step) override;

  // CudaCollectives.cpp
  int64_t allReduce(Communicator &world, DType dtype, const void *in, void *out,
                    int64_t n, bool mean) override;
  int64_t reduceScatter(Communicator &world, DType dtype, const void *in,
                        void *out, int64_t count, bool mean) override;
  int64_t allGather(Communicator &world, DType dtype, const void *in, void *out,
                    int64_t count) override;
  int64_t bcast(Communicator &world, DType dtype, void *buf, int64_t n,
                int root) override;
  bool enqueuesCollectives() const override;
  int64_t enqueueCollective(Communicator &world,
                            const CollectiveRequest &request,
                            int64_t *wireBytes) override;
  void awaitCollective(int64_t id) override;
  bool collectiveDone(int64_t id) override;
  bool takeCollectiveTiming(int64_t id,
                            DeviceCollectiveTiming *timing) override;

private:
  // CudaBackend.cpp
  cuda::ErrorSlot *slot(const char *op, bool labels, int64_t bound);
  void reportErrors();

  // CudaOffload.cpp
  int64_t copyOnCopyStream(void *dst, const void *src, int64_t bytes,
                           int64_t after, cudaMemcpyKind kind, int lane);
  cudaStream_t copyStream(int lane);
  int64_t recordFence(cudaStream_t stream);
  cudaEvent_t fenceEvent(int64_t fence);

  // CudaMatmul.cpp
  int64_t attentionGroup(int64_t heads, int64_t tq, int64_t tk) const;
  const float *repeatedHeadFloats(DType dtype, const void *x, int64_t h,
                                  int64_t g, int64_t kvGroups, int64_t n,
                                  float *scratch);
  static const void *offset(const void *p, int64_t bytes);
  static void *offset(void *p, int64_t bytes);
  const float *floatsOf(DType dtype, const void *x, int64_t n, float *scratch);
  float *floatResult(DType dtype, void *x, float *scratch);
  void storeFloats(DType dtype, const float *from, void *x, int64_t n);

  // CudaLayout.cpp
  static cuda::Reduction reduction(int64_t rank, const int64_t *xShape,
                                   const int64_t *mask);

  // CudaLosses.cpp
  static void checkRows(const char *op, int64_t rows);

  // CudaOptimizer.cpp
  static cuda::SgdScalars sgdScalars(const SgdHyper &hyper, int64_t step);
  static cuda::AdamScalars adamScalars(const AdamHyper &hyper, int64_t step);

  // CudaCollectives.cpp
  int64_t ncclWireBytes(const CollectiveRequest &r) const;
  static ncclDataType_t ncclType(DType dtype);
  void execute(const CollectiveRequest &r);
  void copyOnComm(const void *in, void *out, int64_t bytes);
  int64_t blocking(Communicator &world, Collective kind, DType dtype,
                   const void *in, void *out, int64_t elems, bool mean,
                   int root);
  void awaitStream(cudaStream_t stream);
  static bool inProgress(ncclResult_t state);
  Ticket &find(int64_t id);
  cudaEvent_t event(bool timed);
  void recycle(cudaEvent_t e, bool timed);
  static float elapsed(cudaEvent_t from, cudaEvent_t to);
  Clock::time_point hostTime(cudaEvent_t e) const;
  void placeTickets();
  void rebase();

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

} // namespace ztrt

#endif // ZTRT_BACKENDS_CUDA_CUDABACKENDIMPL_H

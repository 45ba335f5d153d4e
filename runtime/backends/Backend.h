//===- Backend.h - The execution backend interface --------------*- C++ -*-===//
//
// ztrt_* entry points validate their arguments (sizes, ranks, permutations)
// and dispatch here, so backends may assume well-formed arguments. Pointers
// to tensors are backend memory (host for cpu, device for cuda); the int64
// shape / perm / mask arrays are always host memory (constant globals the
// compiler emits). Checks that need the data itself (label and id ranges)
// are the backend's job.
//
// Numerics contract shared by all backends: f32 results mirror PyTorch
// float32 (documented per kernel in docs/runtime.md), and a bf16 / f16
// result is the f32 computation on the widened inputs rounded once to the
// storage type (base/DType.h) and are bitwise deterministic
// for a fixed configuration (device, thread count). Collectives are bitwise
// identical on every rank. On the cpu backend they are also independent of
// the transport's algorithms: sums over ranks are taken in rank order
// 0..N-1 in float, and a mean is that sum divided by N in float. The cuda
// backend sums in NCCL's order (fixed by NCCL's version, the topology and
// the size; the same on every rank and in every run) and divides by N in
// float: equal to the rank-order sum up to float reassociation (bitwise for
// N <= 2), see docs/cuda.md.
//
// Execution model: a host backend finishes every call before returning. A
// device backend (cuda) enqueues kernels on its compute stream and returns
// at once; everything it enqueues runs in call order, so results are as if
// each call had finished, and the host sees device memory only through
// copyToHost (which waits) or after synchronize().
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_BACKEND_H
#define ZTRT_BACKENDS_BACKEND_H

#include "base/DType.h"
#include "report/Trace.h"
#include "ztrt.h"

#include <cstdint>
#include <string>

namespace ztrt {

class Communicator;
struct CollectiveRequest;

/// When an enqueued collective ran on the device, on the host's clock, and
/// how long the step's compute stream stood still waiting for it.
struct DeviceCollectiveTiming {
  Clock::time_point begin, end;
  int64_t exposedNanos = 0;
};

struct SgdHyper {
  double lr, momentum, dampening, weightDecay;
  bool nesterov;
  /// The master-weight updates multiply each widened gradient element by
  /// this (as a float) before using it: 1 / the loss scale under dynamic
  /// loss scaling, else 1 (exact: x * 1.0f == x).
  double gradScale = 1.0;
};

struct AdamHyper {
  double lr, beta1, beta2, eps, weightDecay;
  bool decoupled; // AdamW
  /// As SgdHyper::gradScale.
  double gradScale = 1.0;
};

class Backend {
public:
  virtual ~Backend();

  /// Short name for reports and messages ("cpu").
  virtual const char *name() const = 0;
  /// What this rank computes on, for reports: the processor's model, or
  /// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)".
  virtual std::string deviceName() const { return name(); }
  /// The device's peak dense matrix-multiply rate, the MFU's denominator
  /// when the run gives no --peak-tflops.
  struct PeakRate {
    /// TFLOP/s of this rank's device; 0 when the backend cannot tell.
    double tflops = 0.0;
    /// How it was found ("132 SMs x 1980 MHz x 4096 FLOP/clock (sm_90,
    /// 16-bit tensor cores)"), or why there is none.
    std::string basis;
  };
  /// The peak for float32 GEMMs (`sixteenBit` false) or bf16 / f16 ones
  /// with float32 accumulation. Host backends cannot tell a CPU's peak
  /// (clock and vector units vary by part and by load).
  virtual PeakRate peakRate(bool sixteenBit) const {
    (void)sixteenBit;
    return {0.0, "the " + std::string(name()) +
                     " backend does not know its processor's peak"};
  }
  /// Sets the number of threads kernels use (> 0).
  virtual void setThreads(int threads) = 0;
  /// The number of threads kernels use.
  virtual int threads() const = 0;
  /// Makes the calling thread's own kernel loops use `threads` threads,
  /// without touching process-wide settings (BLAS). The communication
  /// thread calls it so that the sums of reducing collectives respect
  /// --threads: thread-count settings like OpenMP's are per thread.
  virtual void adoptThreads(int threads) = 0;
  /// Makes the calling thread, other than the one that created the
  /// backend, use its device (the host step thread calls it first: a
  /// device backend's streams and events belong to one device, and a new
  /// thread's current device is the first one).
  virtual void bindThread() {}

  /// Called once by the context, before any collective, with the job's
  /// communicator (a device backend bootstraps its transport here: every
  /// rank constructs its context at the same point of the program).
  virtual void attach(Communicator &comm) {}
  /// Called by the context once the descriptor's mesh is known (before the
  /// first step): `replicate` groups of `shard` ranks. A backend that cannot
  /// run the collectives of such a mesh refuses it here (one line).
  virtual void checkMesh(int64_t shard, int64_t replicate) {}
  /// Blocks until every operation issued so far has completed, then
  /// reports errors that kernels found in the data (a label out of range)
  /// as the runtime's one-line fatal error. The driver calls it after every
  /// step. Host backends finish each call before returning: a no-op.
  virtual void synchronize() {}

  // --- Memory ----------------------------------------------------------------
  /// `bytes` of backend memory, or null when out of memory. Distinct calls
  /// return distinct pointers, also for 0 bytes.
  /// Free and total bytes of the device memory allocate() takes from
  /// (cudaMemGetInfo on this rank's GPU); false when it allocates host
  /// memory, which the driver checks itself.
  virtual bool deviceMemory(uint64_t &freeBytes, uint64_t &totalBytes) {
    (void)freeBytes;
    (void)totalBytes;
    return false;
  }
  virtual void *allocate(int64_t bytes) = 0;
  virtual void deallocate(void *ptr) = 0;
  virtual void copyFromHost(void *dst, const void *hostSrc, int64_t bytes) = 0;
  virtual void copyToHost(void *hostDst, const void *src, int64_t bytes) = 0;
  /// Like copyToHost, but the bytes need only have arrived in hostDst when
  /// the next synchronize() returns, so a device backend need not stall
  /// its stream (ztrt_set_loss). Host backends copy at once.
  virtual void copyToHostAtSync(void *hostDst, const void *src, int64_t bytes) {
    copyToHost(hostDst, src, bytes);
  }
  virtual void copy(const void *src, void *dst, int64_t bytes) = 0;

  // --- Host memory of zero-offload (docs/offload.md) ---------------------
  /// Whether allocate() returns host memory (cpu): tensors zero-offload
  /// places on the host or swaps from nvme then need no device copies.
  /// A device backend (false) implements the rest of this section.
  virtual bool hostResident() const { return true; }
  /// `bytes` of pinned host memory that this backend's kernels read and
  /// write in place (mapped into the device's address space: over PCIe on
  /// a GPU), for optimizer states placed on the host; null when short.
  /// Distinct calls return distinct pointers, also for 0 bytes.
  virtual void *allocateMappedHost(int64_t bytes) {
    (void)bytes;
    return nullptr;
  }
  virtual void deallocateMappedHost(void *ptr) { (void)ptr; }
  /// Pins [ptr, ptr + bytes) of the program's host memory for the
  /// asynchronous copies below; unpinned before it is freed.
  virtual void pinHost(void *ptr, int64_t bytes) {
    (void)ptr;
    (void)bytes;
  }
  virtual void unpinHost(void *ptr) { (void)ptr; }
  /// A fence at the end of the work issued so far (host backends: 0).
  virtual int64_t recordFence() { return 0; }
  /// Enqueues, on a copy stream of its own that runs alongside the
  /// kernels, a copy from pinned host memory to device memory that starts
  /// once fence `after` has passed (`after` < 0: as soon as the copy
  /// stream gets to it); returns its fence: hostSrc must stay unchanged
  /// until it has passed. Every fence is awaited once (awaitFence). Host
  /// backends copy at once and return 0. The fence calls (these copies,
  /// recordFence, waitFenceOnDevice, fenceReached, awaitFence) may come
  /// from two threads at once: the step's and the host step thread
  /// (ztrt_update_async); the other calls only from the step's.
  /// `lane` picks the copy stream: 0, the swaps' and spills' (the step's
  /// thread); kHostStepLane, the host step thread's own, so that its
  /// copies do not queue behind spills that wait for later kernels.
  static constexpr int kHostStepLane = 1;
  virtual int64_t copyFromHostOnCopyStream(void *dst, const void *hostSrc,
                                           int64_t bytes, int64_t after,
                                           int lane = 0) {
    (void)after;
    (void)lane;
    copyFromHost(dst, hostSrc, bytes);
    return 0;
  }
  /// The same, device memory to pinned host memory: hostDst holds the
  /// bytes once the returned fence has passed.
  virtual int64_t copyToHostOnCopyStream(void *hostDst, const void *src,
                                         int64_t bytes, int64_t after,
                                         int lane = 0) {
    (void)after;
    (void)lane;
    copyToHost(hostDst, src, bytes);
    return 0;
  }
  /// Makes the work issued from now on wait for `fence` on the device (the
  /// host does not block); a fence already awaited has passed.
  virtual void waitFenceOnDevice(int64_t fence) { (void)fence; }
  /// Whether the work before `fence` has completed (does not block).
  virtual bool fenceReached(int64_t fence) {
    (void)fence;
    return true;
  }
  /// Blocks until the work before `fence` has completed, and retires it.
  virtual void awaitFence(int64_t fence) { (void)fence; }

  /// `rows` rows of `rowBytes` bytes, row r from src + r * srcStride to
  /// dst + r * dstStride (strides in bytes, >= 0). Source and destination
  /// do not overlap (the entry point checks).
  virtual void copy2d(const void *src, void *dst, int64_t rows,
                      int64_t rowBytes, int64_t srcStride,
                      int64_t dstStride) = 0;

  // --- Kernels ---------------------------------------------------------------
  // One pure virtual per ZTRT_KERNEL entry of ztrt_abi.def, generated from
  // it: Method(DType dtype, arguments...) with the entry's argument types
  // (buffers as void *, flags as int32_t) and meaning. Tensor buffers hold
  // `dtype` elements; backends compute in float and round once on store
  // (base/DType.h), instantiating one template per kernel for every dtype.
#define ZTRT_FN(...)
#define ZTRT_KERNEL(name, method, names, ...)                                  \
  virtual void method(DType dtype, ZTRT_ARGS(__VA_ARGS__)) = 0;
#include "ztrt_abi.def"
#undef ZTRT_KERNEL
#undef ZTRT_FN

  // --- Optimizer updates (ztrt_sgd_update / ztrt_adam_update) ----------------
  /// `step` is the 1-based step counter (first step: buffer = gradient).
  /// Parameter, gradient and states hold `dtype`.
  virtual void sgdUpdate(DType dtype, void *param, const void *grad,
                         void *momentumBuf, int64_t n, const SgdHyper &hyper,
                         int64_t step) = 0;
  virtual void adamUpdate(DType dtype, void *param, const void *grad,
                          void *expAvg, void *expAvgSq, int64_t n,
                          const AdamHyper &hyper, int64_t step) = 0;

  // --- Master-weight updates (ztrt_sgd_update_master / _adam_update_master) --
  /// The f32 update of sgdUpdate / adamUpdate (the same per-element float
  /// expressions) on the f32 master and f32 states, with the gradient of
  /// `gradType` widened to float, then param (`paramType`) = the new master
  /// rounded once.
  virtual void sgdUpdateMaster(DType gradType, DType paramType, void *param,
                               const void *grad, float *master,
                               float *momentumBuf, int64_t n,
                               const SgdHyper &hyper, int64_t step) = 0;
  virtual void adamUpdateMaster(DType gradType, DType paramType, void *param,
                                const void *grad, float *master, float *expAvg,
                                float *expAvgSq, int64_t n,
                                const AdamHyper &hyper, int64_t step) = 0;

  // --- Dropout (ztrt_dropout) ------------------------------------------------
  /// out[i] = x[i] * (drop ? 0 : scale) (NaN and inf propagate), where element i drops when
  /// rng::bits24(key, counterBase + i) < threshold (base/Rng.h). The entry
  /// point derives key, counterBase, threshold and scale from the call and
  /// the context (docs/runtime.md, "Dropout").
  virtual void dropout(DType dtype, const void *x, void *out, int64_t n,
                       uint64_t key, uint64_t counterBase, uint32_t threshold,
                       float scale) = 0;

  // --- Fused elementwise regions (ztrt_fused) --------------------------------
  /// Runs a kernel the compiler generated for one fused elementwise region
  /// over items [0, items) of itemElements elements each, in calls
  /// fn(args, begin, end) that together cover every item exactly once; `wide`
  /// (or null) is the same kernel built for AVX-512. The kernels are host
  /// code, which only a host backend can run: the default is a fatal error
  /// (main() refuses such an executable on any other backend before its
  /// first step, so reaching it means hand-written calls).
  virtual void runFused(ztrt_fused_fn fn, ztrt_fused_fn wide, void *const *args,
                        int64_t items, int64_t itemElements);

  // --- Collectives over the ranks of `comm` (meaning as in ztrt_abi.def) -----
  // Each returns the bytes this rank handed to the transport for other ranks
  // (its "wire bytes": the sizes of the sends it passed to MPI or NCCL, in
  // bytes of `dtype`), which depend on the backend's algorithm. In a world
  // of one each is a copy that returns 0. With more than one rank they run
  // on the context's communication thread (comm/CommQueue.h), one at a time
  // in the order the step issued them, concurrently with the step's kernels
  // on other buffers. On the cpu backend, sums are accumulated in float in
  // rank order and rounded once to `dtype`; NCCL (cuda backend) sums in
  // `dtype` in its own order (docs/cuda.md).
  virtual int64_t allReduce(Communicator &comm, DType dtype, const void *in,
                            void *out, int64_t n, bool mean) = 0;
  virtual int64_t reduceScatter(Communicator &comm, DType dtype,
                                const void *in, void *out, int64_t count,
                                bool mean) = 0;
  virtual int64_t allGather(Communicator &comm, DType dtype, const void *in,
                            void *out, int64_t count) = 0;
  virtual int64_t bcast(Communicator &comm, DType dtype, void *buf, int64_t n,
                        int root) = 0;

  // --- Enqueued collectives (device backends) --------------------------------
  // A backend whose collectives are device work ordered by events returns
  // true from enqueuesCollectives(). The context then runs no communication
  // thread, in any world size: the step thread enqueues each collective
  // (comm/CommQueue.h), which every rank does in the same order, and neither
  // start nor wait blocks the host.

  /// Whether collectives go through the four functions below instead of
  /// allReduce & co. on a communication thread.
  virtual bool enqueuesCollectives() const { return false; }
  /// Orders the collective after all work issued so far, starts it on the
  /// communication stream and returns a ticket (> 0) at once; `*wireBytes`
  /// is what allReduce & co. would return.
  virtual int64_t enqueueCollective(Communicator &comm,
                                    const CollectiveRequest &request,
                                    int64_t *wireBytes);
  /// Orders all work issued after this call behind the collective's
  /// completion, without blocking the host. Once per ticket.
  virtual void awaitCollective(int64_t ticket);
  /// Whether the collective has completed; never blocks.
  virtual bool collectiveDone(int64_t ticket);
  /// After a synchronize() that followed awaitCollective(ticket): the
  /// collective's timing; releases the ticket. False if it is not known.
  virtual bool takeCollectiveTiming(int64_t ticket,
                                    DeviceCollectiveTiming *timing);
};

} // namespace ztrt

#endif // ZTRT_BACKENDS_BACKEND_H

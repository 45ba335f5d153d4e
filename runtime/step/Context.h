//===- Context.h - The runtime context behind ztrt_ctx ----------*- C++ -*-===//
//
// One per process: the backend, the communicator (this process's rank among
// the job's), the queue of collectives (with the communication thread when
// there is more than one rank), the bindings of parameters / states / inputs
// that ztrt_param & co. return, the step counter, the loss of the current
// step, the byte accounting per memory category, the traffic per collective
// kind, the overlap of communication with compute, and the trace.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_STEP_CONTEXT_H
#define ZTRT_STEP_CONTEXT_H

#include "ztrt.h"

#include "backends/Backend.h"
#include "comm/CommQueue.h"
#include "comm/Communicator.h"
#include "step/LossScaler.h"
#include "step/LrSchedule.h"
#include "io/SwapIO.h"
#include "report/Trace.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <array>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <optional>
#include <map>
#include <unordered_map>
#include <vector>

namespace ztrt {

/// Category name as in reports: "parameters", "optimizer_states", ...,
/// "gathered_parameters".
const char *categoryName(int category);

struct MemoryStats {
  int64_t current[ZTRT_CAT_COUNT] = {};
  int64_t peak[ZTRT_CAT_COUNT] = {};
  int64_t currentTotal = 0;
  /// Peak of the sum over categories (not the sum of the peaks).
  int64_t peakTotal = 0;
  /// The same over the device's categories only (all but the host ones of
  /// zero-offload: swap buffers and host-resident states), what
  /// zero-report's predicted peak counts.
  int64_t currentDevice = 0, peakDevice = 0;
};

/// Whether memory of `category` is host memory by placement (zero-offload)
/// rather than the backend's device memory.
inline bool isHostCategory(int category) {
  return category == ZTRT_CAT_SWAP_BUFFERS ||
         category == ZTRT_CAT_HOST_STATES ||
         category == ZTRT_CAT_HOST_ACTIVATIONS ||
         category == ZTRT_CAT_HOST_PARAMETERS ||
         category == ZTRT_CAT_HOST_STEP_BUFFERS ||
         category == ZTRT_CAT_HOST_GRADIENTS ||
         category == ZTRT_CAT_STATE_SWAP_BUFFERS;
}

/// The swaps of nvme-resident optimizer states during steps (ztrt_swap_*).
struct OffloadStats {
  int64_t reads = 0, writes = 0;
  /// Bytes moved (whole 4096-byte blocks, as the files hold them).
  int64_t readBytes = 0, writeBytes = 0;
  /// Wall time the step thread spent blocked in ztrt_swap_wait.
  int64_t exposedNanos = 0;
  /// Device backends: bytes copied between device memory and host memory
  /// for swaps, plus the host-placed states the updates read and wrote in
  /// place (each counted both ways).
  int64_t hostToDeviceBytes = 0, deviceToHostBytes = 0;
  /// Activations copied to host memory and back (Pa+cpu).
  int64_t activationsToHost = 0, activationsFromHost = 0;
  /// Gradients spilled to host memory for a host step (optimizer=cpu).
  int64_t gradientsToHost = 0;
  /// Host steps (updates a device backend ran on the host), how many of
  /// them ran on the host step thread (ztrt_update_async), the wall time
  /// they took (download, kernel, upload enqueue), and the time the step
  /// thread spent blocked in ztrt_update_wait: the part of the
  /// asynchronous ones' time the step did not hide.
  int64_t hostSteps = 0, asyncHostSteps = 0;
  int64_t hostStepNanos = 0, updateWaitNanos = 0;
};

enum class Collective { AllReduce, ReduceScatter, AllGather, Broadcast };
constexpr int kCollectiveKinds = 4;

/// Collective name as in reports: "all_reduce", "reduce_scatter", ...
const char *collectiveName(Collective kind);

/// The bytes one call moves (the "bus bytes" of nccl-tests, the quantity
/// the ZeRO analysis counts), from the payload the step handed the
/// runtime: B = n or count elements times the size of their dtype.
/// all_reduce: 2(N-1)/N * B (rounded down); reduce_scatter and all_gather:
/// (N-1) * B; broadcast: B; 0 in a world of one (N = 1), which moves
/// nothing.
int64_t collectiveBytes(Collective kind, int64_t payloadBytes, int64_t ranks);

struct CollectiveStats {
  int64_t calls = 0;
  /// Sum of collectiveBytes() over the calls.
  int64_t bytes = 0;
  /// Bytes this rank handed to the transport for other ranks (what the
  /// backend's algorithm sends).
  int64_t wireBytes = 0;
  /// wireBytes by the destination's link (CollectiveResult): to ranks on
  /// this rank's node, and to other nodes; their sum is wireBytes.
  int64_t intraNodeWireBytes = 0, interNodeWireBytes = 0;
};

/// How much of the communication the step thread waited for.
struct OverlapStats {
  /// Sum of the durations of all collectives, from the backend's start to
  /// its end (on the communication thread, or inline in a world of one).
  int64_t commNanos = 0;
  /// Wall time the step thread spent blocked on collectives: in ztrt_wait,
  /// in synchronous collectives, and performing a collective inline (a
  /// world of one).
  int64_t exposedNanos = 0;
  /// (comm - exposed) / comm clamped to [0, 1]; 0 without communication.
  double hiddenFraction() const;
};

/// Where a context's collectives run.
enum class CommMode {
  /// On a communication thread when there is more than one rank, inline
  /// otherwise.
  Automatic,
  /// On a communication thread even in a world of one (tests of the queue).
  Thread,
};

} // namespace ztrt

struct ztrt_ctx {
  /// A null communicator means a world of one.
  explicit ztrt_ctx(std::unique_ptr<ztrt::Backend> backend,
                    std::unique_ptr<ztrt::Communicator> comm = nullptr,
                    ztrt::CommMode mode = ztrt::CommMode::Automatic);
  /// Lets queued collectives finish, stops the communication thread, then
  /// frees whatever is still allocated.
  ~ztrt_ctx();
  ztrt_ctx(const ztrt_ctx &) = delete;
  ztrt_ctx &operator=(const ztrt_ctx &) = delete;

  ztrt::Backend &backend() { return *impl; }
  const ztrt::Backend &backend() const { return *impl; }
  ztrt::Communicator &comm() { return *world; }
  const ztrt::Communicator &comm() const { return *world; }

  // --- The mesh (descriptor `mesh <shard> <replicate> <ranks_per_node>`) --
  /// Lays the world out as `replicate` groups of `shard` consecutive ranks
  /// (shard * replicate == comm().count(), else fatal): rank r's shard group
  /// (axis 1) is the `shard` ranks from r - r % shard, its replicate group
  /// (axis 2) the ranks with r's r % shard. Collective over the world (it
  /// splits the world's communicator: call it after setRanksPerNode, whose
  /// nodes the groups inherit), once, before any collective of axis 1 or 2.
  /// Without a call, axis 1 is the world and axis 2 this rank alone.
  void setMesh(int64_t shard, int64_t replicate);
  /// The communicator of mesh axis `axis` (0, 1 or 2): the world itself
  /// where the group is every rank.
  ztrt::Communicator &axisComm(int axis) { return queue->axis(axis); }
  const ztrt::Communicator &axisComm(int axis) const {
    return queue->axis(axis);
  }
  /// The ranks a sharded tensor is split over (the shard group's size) and
  /// this rank's shard of it (its place in that group, rank % shard): what
  /// initialisation, --save and checkpoints slice by.
  /// (With `statesOverWorld`, ZeRO++'s hpZ: the groups serve its backward
  /// gathers only, and states are split over every rank.)
  int64_t shardCount() const {
    return statesOverWorld ? world->count() : axisComm(1).count();
  }
  int64_t shardIndex() const {
    return statesOverWorld ? world->rank() : axisComm(1).rank();
  }
  bool statesOverWorld = false;
  /// The ranks one copy of the sharded states is split over: the shard
  /// group, or the world (no mesh, or hpZ).
  ztrt::Communicator &shardComm() {
    return statesOverWorld ? *world : axisComm(1);
  }
  /// The number of replicate groups (1 without a mesh).
  int64_t replicateCount() const {
    return statesOverWorld ? 1 : axisComm(2).count();
  }

  /// Allocates through the backend and accounts the bytes to `category`;
  /// `op` names the caller in error messages.
  void *allocate(int64_t bytes, int32_t category, const char *op);
  /// Frees a pointer from allocate(); null is a no-op.
  void deallocate(void *ptr, const char *op);
  const ztrt::MemoryStats &memory() const { return stats; }

  // --- Collectives (the ztrt_* entry points check the arguments) ----------
  /// Starts a collective and returns its handle: counts the call and its
  /// payload bytes now (its wire bytes when it is waited).
  int64_t startCollective(const ztrt::CollectiveRequest &request);
  /// ztrt_wait: blocks until the collective behind `handle` completed, then
  /// accounts and traces it. Fatal, naming `op`, for a handle that is not
  /// outstanding.
  void waitCollective(int64_t handle, const char *op);
  /// A synchronous collective: start and wait, traced as one blocking call
  /// named `op` on the compute track.
  void runCollective(const ztrt::CollectiveRequest &request, const char *op);
  /// Fatal error "<when>[ <step>]: collective started but never waited
  /// ..." if a started collective has not been waited (`step` is printed
  /// when >= 0). The driver checks after each step: the step owns its
  /// collectives, and the driver's own exchanges (and MPI_Finalize) must
  /// find the communication thread idle.
  void requireCollectivesWaited(const char *when, int64_t step = -1);
  /// Whether the collective behind `handle` completed (never blocks; a
  /// waited handle has). For tests.
  bool collectiveCompleted(int64_t handle) { return queue->completed(handle); }
  /// Whether collectives run on a communication thread.
  bool commThreaded() const { return queue->threaded(); }
  /// Whether collectives are enqueued on the backend's device streams.
  bool commEnqueued() const { return queue->enqueued(); }

  /// Waits for the backend's device work (Backend::synchronize: reports
  /// errors kernels found), then accounts the collectives waited since the
  /// last call whose timing only the device knew: their durations, the
  /// time compute waited for them, their trace events. The driver calls it
  /// after every step; a no-op on host backends.
  void synchronize();

  const ztrt::CollectiveStats &communication(ztrt::Collective kind) const {
    return traffic[static_cast<int>(kind)];
  }
  const ztrt::OverlapStats &overlap() const { return overlapStats; }

  // --- Trace ----------------------------------------------------------------
  /// Starts recording (timestamps relative to now); see Trace.h.
  void enableTrace();
  /// The trace being recorded, or null when tracing is off.
  ztrt::Trace *trace() { return tracer.get(); }

  std::vector<void *> params, states, inputs, buffers;

  // --- Offload (zero-offload's nvme-resident states) ----------------------
  /// The rank's swap directory (present when a state lives on nvme).
  std::unique_ptr<ztrt::SwapSpace> swap;
  /// Per state: its swap file (-1: not on nvme), and the file's bytes
  /// (the state's storage rounded up to 4096).
  std::vector<int> stateFiles, paramFiles;
  std::vector<int64_t> stateFileBytes, paramFileBytes;
  ztrt::OffloadStats offload;
  /// Swaps in flight, by ticket: when issued, which state, which way (for
  /// the trace's I/O track).
  struct PendingSwap {
    ztrt::Clock::time_point begin;
    int64_t state, bytes;
    bool write;
  };
  std::unordered_map<int64_t, PendingSwap> pendingSwaps;
  /// Host copies in flight while tracing (ztrt_copy_to_host_start & co.),
  /// by ticket (the backend's fence; a host backend's are all 0, so the
  /// oldest of a ticket is the one its ztrt_copy_wait completes).
  struct PendingCopy {
    ztrt::Clock::time_point begin;
    int64_t bytes;
    const char *name;
  };
  std::unordered_map<int64_t, std::vector<PendingCopy>> pendingCopies;
  /// Notes a host copy that started at `begin` for the trace's I/O track
  /// (a no-op when not tracing): ztrt_copy_wait ends it on a device
  /// backend; a host backend copied at once, and its event ends now.
  void noteCopyStart(ztrt::Clock::time_point begin, int64_t ticket,
                     int64_t bytes, const char *name);
  /// Starts reading (`write` false) or writing `bytes` of swap `file` into
  /// or from swap buffer `buffer`; returns the ticket finishSwap takes.
  /// On a host backend the buffer is the I/O buffer. On a device backend
  /// it is device memory with a pinned host staging copy (same offset in
  /// the arena's staging buffer): a read fills the staging copy now and
  /// copies it to the device at finishSwap; a write copies the device
  /// buffer to the staging copy after the work issued so far and writes
  /// the file once that copy has landed (at finishSwap, or earlier when a
  /// later swap call finds it done).
  int64_t startSwap(int file, void *buffer, int64_t bytes, bool write,
                    int64_t offset = 0);
  /// Blocks until swap `ticket` has completed as far as the step needs:
  /// a read's bytes are in the buffer for the work issued next (on a
  /// device: the copy is enqueued ahead of it), a write's are in its file.
  void finishSwap(int64_t ticket);
  // --- ZeRO-Offload's CPU step (docs/offload.md, "On the cuda backend") --
  /// Whether an update that was given `state` (one of its optimizer states
  /// or its f32 master) runs on the host: on a device backend, when the
  /// state is host-placed (--offload-optimizer=cpu) or in an nvme state's
  /// swap buffer (--offload-optimizer=nvme). On the cpu backend every
  /// update runs where it always does.
  bool hostStep(const void *state) const;
  /// Runs an update of `n` elements on the host: copies the gradient
  /// (`gradType`) from the device into the host step buffer, and the
  /// parameter (`paramType`) too unless it is host-placed (updated where it
  /// is) or `writesParamOnly` (a master-weight update, which only writes it
  /// rounded from the master); runs `kernel` with the host pointers on the
  /// cpu backend's kernels, the same arithmetic as the device's; copies
  /// the parameter back, on the copy stream (the compute stream waits for
  /// it). An update larger than the buffer goes in tiles of half of it,
  /// alternating halves, each tile's upload overlapping the next tile.
  /// Every byte is counted as host-link traffic.
  /// The update's kernel on `count` elements from `offset`: `param` and
  /// `grad` point at that tile (in host memory); the kernel offsets its
  /// states itself.
  using HostKernel =
      std::function<void(ztrt::Backend &, void *param, const void *grad,
                         int64_t offset, int64_t count)>;
  /// `async`: the update was announced by ztrt_update_async
  /// (takeUpdateAsync); it then runs on the host step thread, which
  /// stages a device gradient itself (the compiler keeps it alive until
  /// the update's wait).
  void runHostStep(void *param, ztrt::DType paramType, const void *grad,
                   ztrt::DType gradType, int64_t n, bool writesParamOnly,
                   const HostKernel &kernel, const char *op,
                   bool async = false);
  /// The host step buffer's halves' parameter uploads in flight (-1:
  /// none); awaitHostStepUploads retires them.
  int64_t hostStepUploads[2] = {-1, -1};
  void awaitHostStepUploads();
  // --- Asynchronous host steps (ztrt_update_async / ztrt_update_wait) -----
  /// ztrt_update_async: the next update, of the parameter at `param`, may
  /// run asynchronously. A host step then goes to the host step thread and
  /// the call returns; its
  /// completion is ztrt_update_wait(param), which the compiler places
  /// before the parameter's next reader. Any other update runs as before.
  void markUpdateAsync(const void *param, const char *op);
  /// Every update call starts with this: whether ztrt_update_async
  /// announced it (fatal, naming both, when it announced another
  /// parameter); the announcement is used up either way (a skipped
  /// update, one on the device, ...).
  bool takeUpdateAsync(const void *param, const char *op);
  /// ztrt_update_wait: blocks until the asynchronous host step of `param`
  /// has run on the host and enqueued its upload, and makes the compute
  /// stream wait for that upload. A no-op when the update ran
  /// synchronously (the cpu backend; an update that was not a host step).
  void waitUpdate(const void *param);
  /// Fatal "<when>: the update of the parameter at ... ran asynchronously
  /// but was never waited (ztrt_update_wait)" if one is outstanding.
  void requireUpdatesWaited(const char *when);
  /// Asynchronous host steps started and not yet waited (for tests).
  size_t pendingHostSteps() const;
  /// The pinned host buffer of runHostStep (ZTRT_CAT_HOST_STEP_BUFFERS),
  /// of the descriptor's host_step_buffer bytes (the compiler sizes it for
  /// the largest host-stepped update).
  void *hostStepBuffer = nullptr;
  int64_t hostStepBufferBytes = 0;
  /// Threads of the host step's kernels (the executable's --threads; 0:
  /// OpenMP's default, every core).
  int hostStepThreads = 0;

  /// Counts an update's reads and writes of a state (`bytes`) as host-link
  /// traffic when the state is host memory a device backend's kernel
  /// reaches in place (a host-placed state on cuda).
  void noteStateAccess(const void *state, int64_t bytes);
  /// The same for any access of host memory a device backend's kernel or
  /// collective reaches in place (`ptr` anywhere inside the allocation):
  /// `toDevice` bytes read over the host link, `toHost` bytes written.
  /// A host-placed parameter's shard read by its gathers, read and written
  /// by its update (zero-report's host-link bytes).
  void noteHostAccess(const void *ptr, int64_t toDevice, int64_t toHost);
  /// Retires the completed fences of activation copies (ztrt_copy_wait)
  /// and keeps `fence` until it completes: nothing blocks, the compute
  /// stream orders the copies with the kernels.
  void noteCopy(int64_t fence);
  /// Whether `ptr` points into an allocation of host memory a device
  /// backend's kernels reach in place (host-placed states, parameters,
  /// activations, the host step buffer).
  bool mappedHost(const void *ptr) const;
  /// The start of the MappedHost allocation `ptr` points into, or null.
  const char *mappedBase(const void *ptr) const;
  /// Whether `ptr` points into the host_gradients arena on a device backend
  /// (a gradient the step spilled for its host step).
  bool hostGradient(const void *ptr) const;
  /// Copies state `i`'s storage (`bytes`, its storeBytes) to host memory
  /// and back, wherever it lives: through the backend, or synchronously
  /// through its swap file (initialisation and checkpoints).
  void stateToHost(size_t i, void *host, int64_t bytes);
  void stateFromHost(size_t i, const void *host, int64_t bytes);
  /// The same for parameter `i`'s storage (its shard at stage 3).
  void paramToHost(size_t i, void *host, int64_t bytes);
  void paramFromHost(size_t i, const void *host, int64_t bytes);

  /// The step's arenas (ztrt_arena), by index: pointer and size.
  std::vector<std::pair<void *, int64_t>> arenas;
  /// One persistent gradient buffer per parameter (empty when the model
  /// declares none); indexed like params.
  std::vector<void *> grads;
  /// 1-based number of the step being run; 0 before the first.
  int64_t step = 0;
  /// The run's seed (--seed, or the resumed checkpoint's): dropout masks
  /// derive from it.
  uint64_t seed = 0;
  /// The value ztrt_set_loss received during the current step.
  float loss = 0.0f;
  bool lossSet = false;

  // --- Dynamic loss scaling (descriptor `loss_scale`) ---------------------
  /// Present when the model scales its loss (fp16).
  std::optional<ztrt::LossScaler> scaler;
  /// The scale the current step's backward pass uses (1 without scaling).
  double stepScale = 1.0;
  /// Set by ztrt_update_loss_scale in the current step.
  bool scaleUpdated = false;
  /// The current step overflowed: its optimizer updates do nothing.
  bool skipUpdates = false;
  /// The number the optimizer updates of the current step take as their
  /// step t (Adam's bias correction, SGD's first step): the steps whose
  /// updates ran, this one included; `step` when nothing is skipped.
  // --- Learning rate (ztrt_lr) ---------------------------------------------
  ztrt::LrSchedule lrSchedule;
  /// The learning rate ztrt_lr gave the current step (NaN before a call).
  double stepLr = 0.0;

  // --- Gradient clipping (descriptor `clip_grad_norm`) --------------------
  /// The max norm when the model clips its gradients.
  std::optional<double> clipMaxNorm;
  /// Set by ztrt_clip_grad_norm in the current step.
  bool clipChecked = false;
  /// What the current step's updates multiply gradients by for clipping (1:
  /// no clipping or a norm within max_norm), and the gradient norm (NaN
  /// until known).
  double clipCoef = 1.0, gradNorm = 0.0;

  // --- The output of a forward function (ztrt_set_output) ----------------
  const void *output = nullptr;
  int64_t outputElems = 0;
  int32_t outputType = 0;
  bool outputSet = false;

  // --- Optimizer hyper-parameters (ztrt_hyper) ----------------------------
  /// The run's overrides (--beta1 ... --dampening), by ztrt_hyper_id.
  std::array<std::optional<double>, ZTRT_HYPER_COUNT> hyperOverrides;
  /// The last value ztrt_hyper returned per id (NaN: never asked), for the
  /// report.
  std::array<double, ZTRT_HYPER_COUNT> hyperSeen;

  // --- Gradient accumulation (descriptor `grad_accum`) --------------------
  /// Micro-batches per optimizer step: 0 when the model does not
  /// accumulate (the step is one micro-batch), else the run's K.
  int64_t accumSteps = 0;
  /// 1-based micro-batch of the current optimizer step (1 without
  /// accumulation), and, with accumulation, the 1-based number of the
  /// micro-batch over the run, (step - 1) * K + microStep, which data and
  /// dropout masks follow (the step does without accumulation).
  int64_t microStep = 1, microBatch = 0;
  /// Set by ztrt_accumulation_boundary in the current micro-batch.
  bool boundaryAsked = false;
  /// What the updates multiply the accumulated gradients by: 1 / K (1
  /// without accumulation).
  double accumFactor() const {
    return accumSteps > 0 ? 1.0 / static_cast<double>(accumSteps) : 1.0;
  }

  int64_t optimizerStep() const {
    return scaler ? step - scaler->state().skipped : step;
  }

private:
  /// Where an allocation's memory comes from.
  enum class Memory {
    Backend,      ///< impl->allocate
    SwapHost,     ///< SwapSpace::allocate: the I/O buffer itself (host backends)
    SwapDevice,   ///< impl->allocate, plus a pinned staging copy (device backends)
    MappedHost,   ///< impl->allocateMappedHost (host states on device backends)
  };
  struct Allocation {
    int64_t bytes;
    int32_t category;
    Memory memory;
  };
  void release(void *ptr, const Allocation &allocation);

  /// Device backends: the pinned staging copy of each swap arena, by the
  /// arena's device address.
  struct Staging {
    char *host;
    int64_t bytes;
  };
  std::unordered_map<const void *, Staging> swapStaging;
  /// The staging bytes of device swap buffer [buffer, buffer + bytes).
  char *stagingOf(const void *buffer, int64_t bytes, const char *op);
  /// A swap on a device backend: its file I/O (-1 until issued) and the
  /// fence of its copy (-1 when none pending).
  struct DeviceSwap {
    int file;
    void *device;
    char *staging;
    int64_t bytes;
    bool write;
    /// Where in the file (a chunk's offset; 0: the whole tensor).
    int64_t offset = 0;
    /// The file I/O (-1 until issued); the device copy's fence (-1 until
    /// issued); for a read, the compute stream's point at the swap-in,
    /// after which its device buffer is free.
    int64_t io = -1, fence = -1, regionFree = -1;
    /// A buffer in host memory (an nvme optimizer state's, which the host
    /// step reads): the file I/O goes straight to it, issued at the start.
    bool hostOnly = false;
  };
  std::unordered_map<int64_t, DeviceSwap> deviceSwaps;
  int64_t lastSwapTicket = 0;
  /// Host-to-device copies that may still read their staging bytes.
  struct StagingRead {
    const char *begin, *end;
    int64_t fence;
  };
  std::vector<StagingRead> stagingReads;
  std::vector<int64_t> copyFences;
  /// Issues the writes whose device-to-host copy has landed, and retires
  /// the staging reads that completed (neither blocks).
  void pollSwaps();
  /// Starts a read's copy from its staging bytes to the device.
  void startDeviceCopy(DeviceSwap &pending);
  /// Counts a collective's call and payload bytes (at its start).
  void countCall(const ztrt::CollectiveRequest &request);
  /// Accounts a completed collective: wire bytes, duration, trace event
  /// (for a deferred result the last two at the next synchronize()).
  void finishCollective(int64_t handle, const ztrt::CollectiveResult &result);
  void finishWait(int64_t handle, const ztrt::CollectiveResult &result,
                  ztrt::Clock::time_point begin, ztrt::Clock::time_point end,
                  ztrt::TraceEvent::Type type, const char *name);

  /// A waited collective whose timing the device reports later.
  struct DeferredCollective {
    int64_t handle, ticket;
    ztrt::Collective kind;
    int64_t elems, payloadBytes, wireBytes;
    /// The rank count of its axis' group.
    int64_t ranks;
  };
  std::vector<DeferredCollective> deferred;

  std::unique_ptr<ztrt::Backend> impl;
  std::unique_ptr<ztrt::Communicator> world;
  /// The groups of axes 1 and 2 where they are not the world (null there).
  std::unique_ptr<ztrt::Communicator> shardGroup, replicateGroup;
  std::unique_ptr<ztrt::CommQueue> queue;
  std::unordered_map<void *, Allocation> live;
  /// The MappedHost allocations by address (start -> bytes), for
  /// noteHostAccess's lookups of pointers inside them.
  std::map<const char *, int64_t> mappedRanges;
  ztrt::MemoryStats stats;
  ztrt::CollectiveStats traffic[ztrt::kCollectiveKinds];
  ztrt::OverlapStats overlapStats;
  std::unique_ptr<ztrt::Trace> tracer;
  /// The cpu backend's kernels for runHostStep (created on first use).
  std::unique_ptr<ztrt::Backend> hostKernels;

  /// One host step: the update's pointers, its kernel (which holds its
  /// hyper-parameters by value), and the fence of the compute stream at
  /// its call (after it the gradient's spill has landed and nothing issued
  /// before still reads the parameter's old values).
  struct HostStepJob {
    void *param = nullptr;
    ztrt::DType paramType = ztrt::DType::F32;
    const void *grad = nullptr;
    ztrt::DType gradType = ztrt::DType::F32;
    int64_t n = 0;
    bool writesParamOnly = false;
    HostKernel kernel;
    const char *op = nullptr;
    /// Where the gradient and the parameter are (looked up on the step's
    /// thread, which owns the allocation tables).
    bool gradOnHost = false, paramOnHost = false;
    int64_t ready = -1;
    // Set by the host step thread when done (under hostStepMutex):
    bool done = false;
    /// The fence of its last parameter upload (-1: none).
    int64_t lastUpload = -1;
    ztrt::Clock::time_point begin, end;
  };
  /// Runs a job's tiles: downloads (after its `ready` fence, on the copy
  /// stream), the kernel, the uploads (copy stream). On the host step
  /// thread for an asynchronous job, on the step's thread otherwise.
  void runHostStepTiles(HostStepJob &job, bool async);
  /// Blocks until the host step thread has finished every job handed to
  /// it (the buffer and the kernels are then the caller's).
  void drainHostSteps();
  void hostStepThreadMain();
  /// The parameter the next update may run asynchronously (update_async).
  const void *asyncNext = nullptr;
  /// Jobs handed to the host step thread, in order; the done ones stay
  /// until their ztrt_update_wait.
  std::vector<std::shared_ptr<HostStepJob>> hostStepJobs;
  std::vector<std::shared_ptr<HostStepJob>> hostStepQueue;
  mutable std::mutex hostStepMutex;
  std::condition_variable hostStepWork, hostStepDone;
  bool hostStepStop = false;
  bool hostStepBusy = false;
  std::thread hostStepThread;
};

namespace ztrt {
/// The executable flag of hyper-parameter `id` (a ztrt_hyper_id).
const char *hyperFlag(int id);
/// Empty if `value` is valid for hyper-parameter `id`, else what is wrong
/// ("must be in [0, 1)").
std::string hyperProblem(int id, double value);
} // namespace ztrt

#endif // ZTRT_STEP_CONTEXT_H

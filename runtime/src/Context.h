//===- Context.h - The runtime context behind ztrt_ctx ----------*- C++ -*-===//
//
// One per process: the backend, the communicator (this process's rank among
// the job's), the bindings of parameters / states / inputs that ztrt_param &
// co. return, the step counter, the loss of the current step, the byte
// accounting per memory category and the traffic per collective kind.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_SRC_CONTEXT_H
#define ZTRT_SRC_CONTEXT_H

#include "ztrt.h"

#include "src/Backend.h"
#include "src/Communicator.h"

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace ztrt {

/// Category name as in reports: "parameters", "optimizer_states", ...
const char *categoryName(int category);

struct MemoryStats {
  int64_t current[ZTRT_CAT_COUNT] = {};
  int64_t peak[ZTRT_CAT_COUNT] = {};
  int64_t currentTotal = 0;
  /// Peak of the sum over categories (not the sum of the peaks).
  int64_t peakTotal = 0;
};

enum class Collective { AllReduce, ReduceScatter, AllGather, Broadcast };
constexpr int kCollectiveKinds = 4;

/// Collective name as in reports: "all_reduce", "reduce_scatter", ...
const char *collectiveName(Collective kind);

/// The bytes one call moves by the formulas the ZeRO analysis uses (the "bus
/// bytes" of nccl-tests): all_reduce of n elements 2(N-1)/N * 4n (rounded
/// down), reduce_scatter and all_gather of N * count elements
/// (N-1) * 4count, broadcast of n elements 4n; 0 in a world of one (N = 1),
/// which moves nothing. `elems` is n, or count for reduce_scatter and
/// all_gather.
int64_t collectiveBytes(Collective kind, int64_t elems, int64_t ranks);

struct CollectiveStats {
  int64_t calls = 0;
  /// Sum of collectiveBytes() over the calls.
  int64_t bytes = 0;
  /// Bytes this rank handed to the transport for other ranks (what the
  /// backend's algorithm sends).
  int64_t wireBytes = 0;
};

} // namespace ztrt

struct ztrt_ctx {
  /// A null communicator means a world of one.
  explicit ztrt_ctx(std::unique_ptr<ztrt::Backend> backend,
                    std::unique_ptr<ztrt::Communicator> comm = nullptr);
  /// Frees whatever is still allocated.
  ~ztrt_ctx();
  ztrt_ctx(const ztrt_ctx &) = delete;
  ztrt_ctx &operator=(const ztrt_ctx &) = delete;

  ztrt::Backend &backend() { return *impl; }
  ztrt::Communicator &comm() { return *world; }

  /// Allocates through the backend and accounts the bytes to `category`;
  /// `op` names the caller in error messages.
  void *allocate(int64_t bytes, int32_t category, const char *op);
  /// Frees a pointer from allocate(); null is a no-op.
  void deallocate(void *ptr, const char *op);
  const ztrt::MemoryStats &memory() const { return stats; }

  /// Accounts one collective call of `kind` on `elems` elements (as in
  /// collectiveBytes) that sent `wireBytes`.
  void recordCollective(ztrt::Collective kind, int64_t elems,
                        int64_t wireBytes);
  const ztrt::CollectiveStats &communication(ztrt::Collective kind) const {
    return traffic[static_cast<int>(kind)];
  }

  std::vector<void *> params, states, inputs;
  /// One persistent gradient buffer per parameter (empty when the model
  /// declares none); indexed like params.
  std::vector<void *> grads;
  /// 1-based number of the step being run; 0 before the first.
  int64_t step = 0;
  /// The value ztrt_set_loss received during the current step.
  float loss = 0.0f;
  bool lossSet = false;

private:
  struct Allocation {
    int64_t bytes;
    int32_t category;
  };
  std::unique_ptr<ztrt::Backend> impl;
  std::unique_ptr<ztrt::Communicator> world;
  std::unordered_map<void *, Allocation> live;
  ztrt::MemoryStats stats;
  ztrt::CollectiveStats traffic[ztrt::kCollectiveKinds];
};

#endif // ZTRT_SRC_CONTEXT_H

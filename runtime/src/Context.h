//===- Context.h - The runtime context behind ztrt_ctx ----------*- C++ -*-===//
//
// One per process: the backend, the bindings of parameters / states / inputs
// that ztrt_param & co. return, the step counter, the loss of the current
// step and the byte accounting per memory category.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_SRC_CONTEXT_H
#define ZTRT_SRC_CONTEXT_H

#include "ztrt.h"

#include "src/Backend.h"

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

} // namespace ztrt

struct ztrt_ctx {
  explicit ztrt_ctx(std::unique_ptr<ztrt::Backend> backend);
  /// Frees whatever is still allocated.
  ~ztrt_ctx();
  ztrt_ctx(const ztrt_ctx &) = delete;
  ztrt_ctx &operator=(const ztrt_ctx &) = delete;

  ztrt::Backend &backend() { return *impl; }

  /// Allocates through the backend and accounts the bytes to `category`;
  /// `op` names the caller in error messages.
  void *allocate(int64_t bytes, int32_t category, const char *op);
  /// Frees a pointer from allocate(); null is a no-op.
  void deallocate(void *ptr, const char *op);
  const ztrt::MemoryStats &memory() const { return stats; }

  std::vector<void *> params, states, inputs;
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
  std::unordered_map<void *, Allocation> live;
  ztrt::MemoryStats stats;
};

#endif // ZTRT_SRC_CONTEXT_H

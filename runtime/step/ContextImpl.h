//===- ContextImpl.h - What ztrt_ctx's files share --------------*- C++ -*-===//
//
// Part of ztrain's runtime (private: not installed). The members of
// ztrt_ctx (step/Context.h) are defined by concern: Context.cpp (the
// context itself, memory, names), ContextCollectives.cpp (collectives and
// their accounting), ContextOffload.cpp (swaps and host copies) and
// ContextHostStep.cpp (zero-offload's host optimizer step).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_STEP_CONTEXTIMPL_H
#define ZTRT_STEP_CONTEXTIMPL_H

#include "report/Trace.h"

#include <chrono>
#include <cstdint>

namespace ztrt {

inline int64_t nanosBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from)
      .count();
}

} // namespace ztrt

#endif // ZTRT_STEP_CONTEXTIMPL_H

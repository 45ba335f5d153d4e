//===- MpiTestUtil.h - Shared pieces of the MPI test programs ----*- C++
//-*-===//
//
// Part of ztrain's runtime tests. What mpi_collectives.cpp, mpi_mesh.cpp
// and cuda_mpi_collectives.cpp share: the per-rank test values and the
// listener that prints other ranks' failures.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_TESTS_MPITESTUTIL_H
#define ZTRT_TESTS_MPITESTUTIL_H

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace ztrt::test {

/// Rank `r`'s element i of buffer `salt`: mixed signs and magnitudes
/// 2^-10 .. 2^10, so that the order of a sum changes its rounding.
inline float mixedValue(int r, int64_t i, uint32_t salt) {
  uint32_t h = static_cast<uint32_t>(r) * 0x9E3779B9u ^
               static_cast<uint32_t>(i) * 0x85EBCA6Bu ^ salt * 0xC2B2AE35u;
  h ^= h >> 16;
  h *= 0x7FEB352Du;
  h ^= h >> 15;
  float unit = static_cast<float>(h >> 8) / 16777216.0f - 0.5f;
  return std::ldexp(unit, static_cast<int>(h % 21) - 10);
}

/// Prints failed assertions of ranks other than 0, prefixed with the rank,
/// instead of every rank's full gtest output.
class FailurePrinter : public ::testing::EmptyTestEventListener {
public:
  explicit FailurePrinter(int rank) : rank(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult &result) override {
    if (result.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank,
                   result.file_name() ? result.file_name() : "?",
                   result.line_number(), result.summary());
  }

private:
  int rank;
};

} // namespace ztrt::test

#endif // ZTRT_TESTS_MPITESTUTIL_H

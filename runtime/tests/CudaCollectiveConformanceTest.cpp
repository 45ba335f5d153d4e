//===- CudaCollectiveConformanceTest.cpp - Cuda conformance: collectives --===//
//
// Part of ztrain's runtime tests: the cuda conformance suite
// (CudaConformanceTest.cpp's file comment) for the collectives in a world
// of one, through the copy path and through a one-rank NCCL communicator.
//
//===----------------------------------------------------------------------===//

#include "CudaConformance.h"

using namespace ztrt;
using namespace ztrt::test;

namespace {

/// The collectives in a world of one, through the copy path (plain) and
/// through a one-rank NCCL communicator (Nccl): bit-exact copies, as the
/// cpu backend's.
class CudaCollectiveTest : public CudaConformanceTest,
                           public ::testing::WithParamInterface<bool> {
protected:
  CudaOptions options() const override {
    CudaOptions o;
    o.ncclInWorldOfOne = GetParam();
    return o;
  }
};

TEST_P(CudaCollectiveTest, EnqueuedAndCopiesBitwise) {
  EXPECT_TRUE(g()->commEnqueued());
  EXPECT_FALSE(g()->commThreaded());
  const int64_t n = (1 << 18) + 3;
  std::vector<float> values = inputs(n, 120, 1.0f, true);
  values[1] = -0.0f;
  uint32_t payload = 0x7fc01234u; // a NaN with a payload, copied as is
  std::memcpy(&values[2], &payload, 4);
  for (int kind = 0; kind < 3; ++kind)
    for (int mean : {0, 1}) {
      auto in = twin(values), out = output(n);
      both([&](ztrt_ctx *c, bool d) {
        if (kind == 0)
          ztrt_all_reduce(c, ZTRT_F32, at(in, d), at(out, d), n, mean, 0);
        else if (kind == 1)
          ztrt_reduce_scatter(c, ZTRT_F32, at(in, d), at(out, d), n, mean, 0);
        else
          ztrt_all_gather(c, ZTRT_F32, at(in, d), at(out, d), n, 0);
      });
      std::vector<float> got = fetch(out);
      ASSERT_EQ(std::memcmp(got.data(), values.data(), n * 4), 0)
          << "collective " << kind << " mean " << mean << " is not a copy";
      // In place.
      both([&](ztrt_ctx *c, bool d) {
        const int64_t h =
            kind == 0 ? ztrt_all_reduce_start(c, ZTRT_F32, at(in, d), at(in, d),
                                              n, mean, 0)
            : kind == 1 ? ztrt_reduce_scatter_start(c, ZTRT_F32, at(in, d),
                                                    at(in, d), n, mean, 0)
                        : ztrt_all_gather_start(c, ZTRT_F32, at(in, d),
                                                at(in, d), n, 0);
        ztrt_wait(c, h);
      });
      got = fetch(in);
      ASSERT_EQ(std::memcmp(got.data(), values.data(), n * 4), 0);
    }
  auto buf = twin(values);
  ztrt_bcast(g(), ZTRT_F32, buf.dev, n, 0);
  std::vector<float> got = fetch(buf);
  EXPECT_EQ(std::memcmp(got.data(), values.data(), n * 4), 0);
}

TEST_P(CudaCollectiveTest, SeveralInFlightOrderedAgainstCompute) {
  // Each input is written by a kernel just before its collective starts and
  // each output read by a kernel just after its wait: the events must
  // order them (a missing wait would read stale data).
  const int64_t n = 1 << 20;
  std::vector<Twin<float>> ins, outs;
  std::vector<int64_t> handles;
  for (int i = 0; i < 4; ++i) {
    ins.push_back(output(n));
    outs.push_back(output(n));
  }
  for (int i = 0; i < 4; ++i) {
    ztrt_fill(g(), ZTRT_F32, ins[i].dev, n, 1.0 + i);
    handles.push_back(
        ztrt_all_reduce_start(g(), ZTRT_F32, ins[i].dev, outs[i].dev, n, 0, 0));
  }
  for (int i : {2, 0, 3, 1}) {
    ztrt_wait(g(), handles[i]);
    ztrt_scale(g(), ZTRT_F32, outs[i].dev, outs[i].dev, n, 2.0);
  }
  g()->synchronize();
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(g()->collectiveCompleted(handles[i]));
    std::vector<float> got = fetch(outs[i]);
    for (float v : got)
      ASSERT_EQ(v, 2.0f * (1.0f + i)) << "collective " << i;
  }
  // Overlap accounting comes from the device's events at synchronize.
  const OverlapStats &overlap = g()->overlap();
  EXPECT_GT(overlap.commNanos, 0);
  EXPECT_GE(overlap.exposedNanos, 0);
  EXPECT_GE(overlap.hiddenFraction(), 0.0);
  EXPECT_LE(overlap.hiddenFraction(), 1.0);
  EXPECT_EQ(g()->communication(Collective::AllReduce).calls, 4);
  EXPECT_EQ(g()->communication(Collective::AllReduce).bytes, 0); // world of one
}

TEST_P(CudaCollectiveTest, UnwaitedCollectiveIsFatal) {
  auto in = output(16);
  ztrt_all_gather_start(g(), ZTRT_F32, in.dev, in.dev, 16, 0);
  EXPECT_EXIT(g()->requireCollectivesWaited("step", 1),
              ::testing::ExitedWithCode(1),
              "step 1: collective started but never waited");
  EXPECT_EXIT(ztrt_wait(g(), 42), ::testing::ExitedWithCode(1),
              "unknown collective handle 42");
}

TEST_P(CudaCollectiveTest, SixteenBitCollectivesAreCopies) {
  // bf16 and f16 in a world of one: every collective is a bit-exact copy
  // of 2-byte elements (NCCL's ncclBfloat16 / ncclFloat16 in the Nccl
  // variant), whatever the bits (NaN payloads, infinities, subnormals).
  const int64_t n = (1 << 16) + 3;
  std::vector<uint16_t> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = static_cast<uint16_t>(i * 40503u);
  for (int32_t ty : {ZTRT_BF16, ZTRT_F16}) {
    for (int kind = 0; kind < 3; ++kind)
      for (int mean : {0, 1}) {
        auto in = twin(values), out = twin(std::vector<uint16_t>(n, 0xffff));
        if (kind == 0)
          ztrt_all_reduce(g(), ty, in.dev, out.dev, n, mean, 0);
        else if (kind == 1)
          ztrt_reduce_scatter(g(), ty, in.dev, out.dev, n, mean, 0);
        else
          ztrt_all_gather(g(), ty, in.dev, out.dev, n, 0);
        std::vector<uint16_t> got = fetch(out);
        ASSERT_EQ(std::memcmp(got.data(), values.data(), n * sizeof(uint16_t)),
                  0)
            << "dtype " << ty << " collective " << kind << " mean " << mean
            << " is not a copy";
      }
    auto buf = twin(values);
    ztrt_bcast(g(), ty, buf.dev, n, 0);
    std::vector<uint16_t> got = fetch(buf);
    EXPECT_EQ(std::memcmp(got.data(), values.data(), n * sizeof(uint16_t)), 0);
  }
  // A world of one moves nothing over the wire, whatever the dtype.
  EXPECT_EQ(g()->communication(Collective::AllReduce).wireBytes, 0);
}

TEST_P(CudaCollectiveTest, HybridShardingIsRefused) {
  // A world of one: every mesh axis is this rank (axis 1 and 2 collectives
  // are copies, as axis 0's); a mesh of 1 x 1 is allowed.
  auto in = twin(std::vector<float>{1.0f, 2.0f}), out = output(2);
  for (int axis : {1, 2})
    ztrt_all_gather(g(), ZTRT_F32, in.dev, out.dev, 2, axis);
  EXPECT_EQ(fetch(out), (std::vector<float>{1.0f, 2.0f}));
  g()->setMesh(1, 1);
  // Replicate groups need NCCL communicators the backend does not make:
  // refused in one line (exact text).
  EXPECT_EXIT(g()->backend().checkMesh(2, 2), ::testing::ExitedWithCode(1),
              "^ztrain: error: --backend cuda: hybrid sharding \\(mesh of 2 "
              "shard x 2 replicate ranks\\) runs on the cpu backend only for "
              "now");
}

INSTANTIATE_TEST_SUITE_P(Transport, CudaCollectiveTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return info.param ? "Nccl" : "Copy";
                         });

} // namespace

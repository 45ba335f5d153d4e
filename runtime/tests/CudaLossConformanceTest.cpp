//===- CudaLossConformanceTest.cpp - The cuda backend's losses
//-------------===//
//
// The cuda backend's cross-entropy kernels (alone, with their gradient in
// one pass, with ignore_index, in tiles of rows, and their label errors)
// against the cpu backend, as CudaConformanceTest.cpp does for the other
// f32 kernels (its file comment: how the comparisons are made).
//
//===----------------------------------------------------------------------===//

#include "CudaConformance.h"

using namespace ztrt;
using namespace ztrt::test;

namespace {

TEST_F(CudaConformanceTest, CrossEntropyAndGrad) {
  const int64_t rows = 300, classes = 1000;
  std::vector<int32_t> labelValues(rows);
  for (int64_t r = 0; r < rows; ++r)
    labelValues[r] = static_cast<int32_t>((r * 7919) % classes);
  auto logits = twin(inputs(rows * classes, 80, 8.0f)),
       dloss = twin(std::vector<float>{0.7f});
  auto labels = twin(labelValues);
  auto loss = output(1), dlogits = output(rows * classes);
  both([&](ztrt_ctx *c, bool d) {
    ztrt_cross_entropy(c, ZTRT_F32, at(logits, d), at(labels, d), at(loss, d),
                       rows, classes, ZTRT_NO_IGNORE_INDEX);
    ztrt_cross_entropy_grad(c, ZTRT_F32, at(dloss, d), at(logits, d),
                            at(labels, d), at(dlogits, d), rows, classes,
                            ZTRT_NO_IGNORE_INDEX);
  });
  // Log-sum-exp and the mean in double with CUDA's exp / log (within 1-2
  // ulp of double): the float results are equal or adjacent; p - 1 for the
  // label's entry may cancel to ~1e-16 absolute.
  expectUlps(fetch(loss), loss.host, 1, "cross_entropy");
  expectUlpsOrAbs(fetch(dlogits), dlogits.host, 1, 1e-12, "cross_entropy_grad");
}

TEST_F(CudaConformanceTest, CrossEntropyWithGradIsTheTwoKernels) {
  // On the device: bitwise the device's two kernels (one log-sum-exp per
  // row instead of two, the same expressions), hence the cpu's tolerance.
  const int64_t rows = 300, classes = 1000;
  std::vector<int32_t> labelValues(rows);
  for (int64_t r = 0; r < rows; ++r)
    labelValues[r] = static_cast<int32_t>((r * 7919) % classes);
  auto logits = twin(inputs(rows * classes, 81, 8.0f)),
       dloss = twin(std::vector<float>{0.7f});
  auto labels = twin(labelValues);
  auto loss = output(1), dlogits = output(rows * classes),
       fusedLoss = output(1), fusedGrad = output(rows * classes);
  ztrt_cross_entropy(g(), ZTRT_F32, logits.dev, labels.dev, loss.dev, rows,
                     classes, ZTRT_NO_IGNORE_INDEX);
  ztrt_cross_entropy_grad(g(), ZTRT_F32, dloss.dev, logits.dev, labels.dev,
                          dlogits.dev, rows, classes, ZTRT_NO_IGNORE_INDEX);
  both([&](ztrt_ctx *c, bool d) {
    ztrt_cross_entropy_with_grad(c, ZTRT_F32, at(logits, d), at(labels, d),
                                 at(dloss, d), at(fusedLoss, d),
                                 at(fusedGrad, d), rows, classes,
                                 ZTRT_NO_IGNORE_INDEX);
  });
  expectBitwise(fetch(fusedLoss), fetch(loss), "cross_entropy_with_grad loss");
  expectBitwise(fetch(fusedGrad), fetch(dlogits),
                "cross_entropy_with_grad dlogits");
  expectUlps(fetch(fusedLoss), fusedLoss.host, 1, "cross_entropy_with_grad");
  expectUlpsOrAbs(fetch(fusedGrad), fusedGrad.host, 1, 1e-12,
                  "cross_entropy_with_grad");
}

TEST_F(CudaConformanceTest, CrossEntropyIgnoreIndexIsTheCpus) {
  // ignore_index (-100 here): ignored rows add nothing, their gradient rows
  // are zero, the mean is over the rows that count (counted on the device).
  // The cpu's results within CrossEntropyAndGrad's tolerance; the fused
  // kernel bitwise the two.
  const int64_t rows = 300, classes = 1000, ignore = -100;
  std::vector<int32_t> labelValues(rows);
  for (int64_t r = 0; r < rows; ++r)
    labelValues[r] = r % 4 == 2 ? static_cast<int32_t>(ignore)
                                : static_cast<int32_t>((r * 7919) % classes);
  auto logits = twin(inputs(rows * classes, 82, 8.0f)),
       dloss = twin(std::vector<float>{0.7f});
  auto labels = twin(labelValues);
  auto loss = output(1), dlogits = output(rows * classes),
       fusedLoss = output(1), fusedGrad = output(rows * classes);
  both([&](ztrt_ctx *c, bool d) {
    ztrt_cross_entropy(c, ZTRT_F32, at(logits, d), at(labels, d), at(loss, d),
                       rows, classes, ignore);
    ztrt_cross_entropy_grad(c, ZTRT_F32, at(dloss, d), at(logits, d),
                            at(labels, d), at(dlogits, d), rows, classes,
                            ignore);
    ztrt_cross_entropy_with_grad(c, ZTRT_F32, at(logits, d), at(labels, d),
                                 at(dloss, d), at(fusedLoss, d),
                                 at(fusedGrad, d), rows, classes, ignore);
  });
  expectUlps(fetch(loss), loss.host, 1, "cross_entropy ignore_index");
  expectUlpsOrAbs(fetch(dlogits), dlogits.host, 1, 1e-12,
                  "cross_entropy_grad ignore_index");
  expectBitwise(fetch(fusedLoss), fetch(loss), "fused loss ignore_index");
  expectBitwise(fetch(fusedGrad), fetch(dlogits), "fused grad ignore_index");
  std::vector<float> device = fetch(dlogits);
  for (int64_t j = 0; j < classes; ++j)
    ASSERT_EQ(device[2 * classes + j], 0.0f) << j;
}

TEST_F(CudaConformanceTest, CrossEntropyTilesAreTheCpusAndTheUntiledRows) {
  // train-tile-loss's tiles (cross_entropy_tile*): rows [first, first + n)
  // of 300, the divisor counted over all 300 labels on the device (some
  // ignored). Each tile's adjoint rows are bitwise the device's untiled
  // rows and its share within an ulp of the cpu's (CrossEntropyAndGrad's
  // tolerance); the loss-only tile's share bitwise the with-grad tile's.
  const int64_t rows = 300, classes = 1000, ignore = -100;
  const int64_t bounds[] = {0, 97, 200, rows};
  std::vector<int32_t> labelValues(rows);
  for (int64_t r = 0; r < rows; ++r)
    labelValues[r] = r % 7 == 3 ? static_cast<int32_t>(ignore)
                                : static_cast<int32_t>((r * 7919) % classes);
  auto logits = twin(inputs(rows * classes, 83, 8.0f)),
       dloss = twin(std::vector<float>{0.7f});
  auto labels = twin(labelValues);
  auto loss = output(1), dlogits = output(rows * classes);
  ztrt_cross_entropy_with_grad(g(), ZTRT_F32, logits.dev, labels.dev, dloss.dev,
                               loss.dev, dlogits.dev, rows, classes, ignore);
  const std::vector<float> whole = fetch(dlogits);
  for (int t = 0; t < 3; ++t) {
    const int64_t first = bounds[t], n = bounds[t + 1] - bounds[t];
    auto share = output(1), lossOnly = output(1), grad = output(n * classes);
    both([&](ztrt_ctx *c, bool d) {
      const float *tile =
          static_cast<const float *>(at(logits, d)) + first * classes;
      ztrt_cross_entropy_tile_with_grad(c, ZTRT_F32, tile, at(labels, d),
                                        at(dloss, d), at(share, d), at(grad, d),
                                        n, classes, ignore, first, rows);
      ztrt_cross_entropy_tile(c, ZTRT_F32, tile, at(labels, d), at(lossOnly, d),
                              n, classes, ignore, first, rows);
    });
    expectUlps(fetch(share), share.host, 1, "cross_entropy_tile_with_grad");
    expectBitwise(fetch(lossOnly), fetch(share), "cross_entropy_tile");
    const std::vector<float> rowsOfTile = fetch(grad);
    for (int64_t i = 0; i < n * classes; ++i)
      ASSERT_EQ(rowsOfTile[i], whole[first * classes + i])
          << "tile " << t << " element " << i;
  }
}

TEST_F(CudaConformanceTest, OutOfRangeLabelIsTheCpusError) {
  // The kernel records the first bad row; the error surfaces, with the cpu
  // backend's message, at the next synchronization.
  const int64_t rows = 6, classes = 10;
  auto logits = twin(inputs(rows * classes, 81));
  auto labels = twin(std::vector<int32_t>{1, 2, 3, 12, 0, -4});
  auto loss = output(1);
  EXPECT_EXIT(
      {
        ztrt_cross_entropy(g(), ZTRT_F32, logits.dev, labels.dev, loss.dev,
                           rows, classes, ZTRT_NO_IGNORE_INDEX);
        g()->synchronize();
      },
      ::testing::ExitedWithCode(1),
      "ztrain: error: cross_entropy: label 12 out of range \\[0, 10\\) at row "
      "3\n");
  auto dlogits = output(rows * classes);
  auto dloss = twin(std::vector<float>{1.0f});
  EXPECT_EXIT(
      {
        ztrt_cross_entropy_grad(g(), ZTRT_F32, dloss.dev, logits.dev,
                                labels.dev, dlogits.dev, rows, classes,
                                ZTRT_NO_IGNORE_INDEX);
        std::vector<float> host(rows * classes);
        g()->backend().copyToHost(host.data(), dlogits.dev, rows * classes * 4);
      },
      ::testing::ExitedWithCode(1),
      "cross_entropy_grad: label 12 out of range \\[0, 10\\) at row 3");
}

} // namespace

//===- CudaConformanceTest.cpp - The cuda backend against the cpu one -----===//
//
// Every kernel, copy and collective of the cuda backend, called through the
// C ABI on device memory, against the cpu backend on the same inputs in
// host memory. Each comparison states its tolerance and why, next to the
// assertion: the cuda backend evaluates the cpu's float expressions in the
// same order (bitwise equal), except where it sums in another order
// (cuBLAS, the double row sums, NCCL) or uses CUDA's exp / log.
//
// Without a usable GPU every test is skipped, saying why (GTEST_SKIP: CTest
// shows them as "Skipped", not "Passed").
//
// This file: the f32 elementwise, matmul, row, layout and lookup
// kernels (the losses: CudaLossConformanceTest.cpp), copies, memory,
// determinism and the libraries' loading; the other families are in
// Cuda*ConformanceTest.cpp, the fixtures in CudaConformance.h.
//
//===----------------------------------------------------------------------===//

#include "CudaConformance.h"

using namespace ztrt;
using namespace ztrt::test;

namespace {

TEST_F(CudaConformanceTest, ElementwiseIsBitwiseTheCpus) {
  // One float operation (or the shared gelu formulas, VecMath.h) per
  // element, no FMA contraction on either side: bitwise equal, also for
  // the special values (NaN compared as NaN).
  for (size_t n : {size_t(1), size_t(37), size_t(1) << 20}) {
    auto a = twin(inputs(n, 1, 4.0f, true)), b = twin(inputs(n, 2, 4.0f, true));
    auto out = output(n);
    const int64_t len = static_cast<int64_t>(n);
    const std::string size = " n=" + std::to_string(n);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_add(x, ZTRT_F32, at(a, d), at(b, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "add" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_sub(x, ZTRT_F32, at(a, d), at(b, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "sub" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_mul(x, ZTRT_F32, at(a, d), at(b, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "mul" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_scale(x, ZTRT_F32, at(a, d), at(out, d), len, -0.3);
    });
    expectBitwise(fetch(out), out.host, "scale" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_fill(x, ZTRT_F32, at(out, d), len, 0.1);
    });
    expectBitwise(fetch(out), out.host, "fill" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_relu(x, ZTRT_F32, at(a, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "relu" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_relu_grad(x, ZTRT_F32, at(b, d), at(a, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "relu_grad" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_gelu(x, ZTRT_F32, at(a, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "gelu" + size);
    both([&](ztrt_ctx *x, bool d) {
      ztrt_gelu_grad(x, ZTRT_F32, at(b, d), at(a, d), at(out, d), len);
    });
    expectBitwise(fetch(out), out.host, "gelu_grad" + size);
    // In place: out aliases an input.
    both([&](ztrt_ctx *x, bool d) {
      ztrt_add(x, ZTRT_F32, at(a, d), at(b, d), at(a, d), len);
    });
    expectBitwise(fetch(a), a.host, "add in place" + size);
  }
}

TEST_F(CudaConformanceTest, ElementwiseOnUnalignedViewsIsBitwise) {
  // The memory-bound kernels load and store 16 bytes at a time where every
  // pointer is 16-byte aligned (backends/cuda/DeviceUtil.cuh, forEachPacked) and go
  // element by element otherwise: views 1-3 floats into a buffer, each
  // operand at its own offset, take the second path, the aligned ones the
  // first, with a tail. Either way the cpu's bits, and nothing outside the
  // view is written (the NaN poison around it stays).
  const size_t n = 1003;
  auto a = twin(inputs(n + 3, 1, 4.0f, true)),
       b = twin(inputs(n + 3, 2, 4.0f, true)),
       bias = twin(inputs(n + 3, 4));
  const int64_t len = static_cast<int64_t>(n);
  for (int64_t oa : {0, 1, 3})
    for (int64_t oo : {0, 2}) {
      const std::string what =
          " a+" + std::to_string(oa) + " out+" + std::to_string(oo);
      auto view = [](Twin<float> &t, bool d, int64_t off) {
        return static_cast<float *>(at(t, d)) + off;
      };
      auto out = output(n + 3);
      both([&](ztrt_ctx *x, bool d) {
        ztrt_add(x, ZTRT_F32, view(a, d, oa), view(b, d, 0), view(out, d, oo),
                 len);
      });
      expectBitwise(fetch(out), out.host, "add" + what);
      out = output(n + 3);
      both([&](ztrt_ctx *x, bool d) {
        ztrt_scale(x, ZTRT_F32, view(a, d, oa), view(out, d, oo), len, -0.3);
      });
      expectBitwise(fetch(out), out.host, "scale" + what);
      out = output(n + 3);
      both([&](ztrt_ctx *x, bool d) {
        ztrt_gelu(x, ZTRT_F32, view(a, d, oa), view(out, d, oo), len);
      });
      expectBitwise(fetch(out), out.host, "gelu" + what);
      out = output(n + 3);
      both([&](ztrt_ctx *x, bool d) {
        ztrt_bias_add(x, ZTRT_F32, view(a, d, oa), view(bias, d, 1),
                      view(out, d, oo), 59, 17);
      });
      expectBitwise(fetch(out), out.host, "bias_add" + what);
    }
}

TEST_F(CudaConformanceTest, BiasAddIsBitwise) {
  // One float addition per element.
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1}, {5, 7}, {1000, 768}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto x = twin(inputs(rows * cols, 3)), bias = twin(inputs(cols, 4));
    auto out = output(rows * cols);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_bias_add(c, ZTRT_F32, at(x, d), at(bias, d), at(out, d), rows, cols);
    });
    expectBitwise(fetch(out), out.host, "bias_add");
  }
}

TEST_F(CudaConformanceTest, MatmulMatchesUpToSummationOrder) {
  // cuBLAS and OpenBLAS sum the k products in different orders (blocking,
  // tensor-core tiles). Each order's error is at most (k-1) u sum|a||b|
  // (u = 2^-24), so the two differ by at most 2 k u sum_l |a_il||b_lj|:
  // a rigorous bound, checked per element. TF32 would exceed it by ~2^13.
  struct Case {
    int64_t batch, m, n, k;
    int ta, tb;
    int64_t sa, sb; // -1: packed (m*k / k*n)
  };
  std::vector<Case> cases;
  for (int ta : {0, 1})
    for (int tb : {0, 1}) {
      cases.push_back({1, 33, 65, 127, ta, tb, -1, -1});
      cases.push_back({3, 17, 9, 31, ta, tb, -1, -1});
      cases.push_back({4, 8, 16, 12, ta, tb, 0, -1}); // shared A
      cases.push_back({4, 8, 16, 12, ta, tb, -1, 0}); // shared B
    }
  cases.push_back({1, 256, 512, 1024, 0, 0, -1, -1});
  for (const Case &cs : cases) {
    const int64_t sa = cs.sa < 0 ? cs.m * cs.k : cs.sa;
    const int64_t sb = cs.sb < 0 ? cs.k * cs.n : cs.sb;
    const int64_t sc = cs.m * cs.n;
    // A stride of 0 shares one matrix across the batch.
    auto a =
        twin(inputs(static_cast<size_t>(sa ? cs.batch * sa : cs.m * cs.k), 30));
    auto b =
        twin(inputs(static_cast<size_t>(sb ? cs.batch * sb : cs.k * cs.n), 31));
    auto out = output(static_cast<size_t>(cs.batch * sc));
    both([&](ztrt_ctx *x, bool d) {
      ztrt_matmul(x, ZTRT_F32, at(a, d), at(b, d), at(out, d), cs.batch, cs.m,
                  cs.n, cs.k, cs.ta, cs.tb, sa, sb, sc);
    });
    std::vector<float> got = fetch(out);
    const std::string what =
        "matmul batch=" + std::to_string(cs.batch) +
        " m=" + std::to_string(cs.m) + " n=" + std::to_string(cs.n) +
        " k=" + std::to_string(cs.k) + " ta=" + std::to_string(cs.ta) +
        " tb=" + std::to_string(cs.tb) + " sa=" + std::to_string(sa) +
        " sb=" + std::to_string(sb);
    int bad = 0;
    for (int64_t i = 0; i < cs.batch && bad < 5; ++i)
      for (int64_t r = 0; r < cs.m; ++r)
        for (int64_t col = 0; col < cs.n; ++col) {
          double mag = 0.0;
          for (int64_t l = 0; l < cs.k; ++l) {
            const float av =
                a.host[i * sa + (cs.ta ? l * cs.m + r : r * cs.k + l)];
            const float bv =
                b.host[i * sb + (cs.tb ? col * cs.k + l : l * cs.n + col)];
            mag += std::fabs(static_cast<double>(av) * bv);
          }
          const size_t e = static_cast<size_t>(i * sc + r * cs.n + col);
          const double bound = 2.0 * cs.k * std::ldexp(1.0, -24) * mag + 1e-30;
          if (!(std::fabs(static_cast<double>(got[e]) - out.host[e]) <=
                bound) &&
              bad++ < 5)
            ADD_FAILURE() << what << " C[" << i << "][" << r << "][" << col
                          << "]: cuda " << got[e] << ", cpu " << out.host[e]
                          << ", bound " << bound;
        }
  }
}

TEST_F(CudaConformanceTest, MatmulDoesNotUseTF32) {
  // A = 1 + 2^-20 everywhere, B = 1, k = 16: every partial sum
  // j (1 + 2^-20), j <= 16, is a float, so any summation order gives
  // exactly 16 + 2^-16. TF32 keeps 10 mantissa bits: it would round A to 1
  // and give 16.
  const int64_t m = 128, n = 128, k = 16;
  const float one = 1.0f + std::ldexp(1.0f, -20);
  auto a = twin(std::vector<float>(m * k, one)),
       b = twin(std::vector<float>(k * n, 1.0f));
  auto out = output(m * n);
  ztrt_matmul(g(), ZTRT_F32, a.dev, b.dev, out.dev, 1, m, n, k, 0, 0, 0, 0, 0);
  const float exact = 16.0f + std::ldexp(1.0f, -16);
  for (float v : fetch(out))
    ASSERT_EQ(v, exact) << "cuBLAS rounded float32 inputs (TF32 tensor cores?)";
}

TEST_F(CudaConformanceTest, MatmulWithEmptyInnerDimWritesZeros) {
  // Exact: an empty sum is +0 on both sides.
  auto a = twin(std::vector<float>(1, 0.0f)),
       b = twin(std::vector<float>(1, 0.0f));
  auto out = output(2 * 3 * 4);
  both([&](ztrt_ctx *x, bool d) {
    ztrt_matmul(x, ZTRT_F32, at(a, d), at(b, d), at(out, d), 2, 3, 4, 0, 0, 0,
                0, 0, 12);
  });
  expectBitwise(fetch(out), out.host, "matmul k=0");
}

TEST_F(CudaConformanceTest, LayerNormAndGrad) {
  // Rows of up to 1024 go to a warp each, longer ones to a block each
  // (backends/cuda/Rows.cu, kWarpRowCols): both paths, and rows past 8 per block.
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1},
                     {7, 16},
                     {64, 1000},
                     {300, 768},
                     {3, 1024},
                     {5, 1025},
                     {9, 3000}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto x = twin(inputs(rows * cols, 40, 3.0f)),
         gamma = twin(inputs(cols, 41)), beta = twin(inputs(cols, 42)),
         dy = twin(inputs(rows * cols, 43));
    auto y = output(rows * cols), dx = output(rows * cols),
         dgamma = output(cols), dbeta = output(cols);
    const std::string what =
        " " + std::to_string(rows) + "x" + std::to_string(cols);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_layer_norm(c, ZTRT_F32, at(x, d), at(gamma, d), at(beta, d),
                      at(y, d), rows, cols, 1e-5);
      ztrt_layer_norm_grad(c, ZTRT_F32, at(dy, d), at(x, d), at(gamma, d),
                           at(dx, d), at(dgamma, d), at(dbeta, d), rows, cols,
                           1e-5);
    });
    // The same double formulas with the row sums in another order: mean
    // and rstd differ by ~1e-15 relative, so the floats y rounds to are
    // equal or adjacent; where (x - mean) rstd gamma + beta cancels to
    // almost 0 that difference (~1e-14 absolute here) is the bound instead.
    expectUlpsOrAbs(fetch(y), y.host, 1, 1e-12, "layer_norm" + what);
    // dx = rstd * (g - mean(g) - xhat * mean(g xhat)) can cancel: where it
    // does, the double difference's rounding (~1e-15 of the terms, O(1)
    // here) is the bound instead.
    expectUlpsOrAbs(fetch(dx), dx.host, 1, 1e-12, "layer_norm_grad dx" + what);
    // Column sums over rows in double, chunked instead of serial: adjacent
    // floats, or ~rows * 2^-53 * sum|terms| (< 1e-11 here) near zero.
    expectUlpsOrAbs(fetch(dgamma), dgamma.host, 1, 1e-11, "dgamma" + what);
    expectUlpsOrAbs(fetch(dbeta), dbeta.host, 1, 1e-11, "dbeta" + what);
  }
}

TEST_F(CudaConformanceTest, SoftmaxCausalOrNotAndGrad) {
  for (int causal : {0, 1})
    for (auto shape :
         {std::pair<int64_t, int64_t>{8, 8}, {3 * 64, 64}, {2 * 257, 257}}) {
      // Causal rows are whole [cols x cols] blocks; plain ones need not be.
      const int64_t rows = !causal && shape.first == 8 ? 5 : shape.first;
      const int64_t cols = shape.second;
      auto x = twin(inputs(rows * cols, 50, 6.0f)),
           dy = twin(inputs(rows * cols, 51));
      auto y = output(rows * cols), dx = output(rows * cols);
      const std::string what = (causal ? " causal " : " ") +
                               std::to_string(rows) + "x" +
                               std::to_string(cols);
      both([&](ztrt_ctx *c, bool d) {
        ztrt_softmax(c, ZTRT_F32, at(x, d), at(y, d), rows, cols, causal);
        ztrt_softmax_grad(c, ZTRT_F32, at(dy, d), at(y, d), at(dx, d), rows,
                          cols);
      });
      std::vector<float> got = fetch(y);
      // CUDA's expf is within 2 ulp, glibc's within 1: each exp differs by
      // <= 3 ulp, the double row sums (and so the float 1/sum) by as much,
      // the product by one more rounding: 8 ulp bounds it.
      expectUlps(got, y.host, 8, "softmax" + what);
      // Masked entries are exactly zero on both sides.
      if (causal) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = r % cols + 1; j < cols; ++j)
            ASSERT_EQ(bits(got[r * cols + j]), 0u) << what << " masked " << r;
      }
      // softmax_grad on each side's own y would compound the softmax
      // difference; given the same y (the cpu's) it is y * (dy - d) with
      // d = float(dot in double): the two d are equal or adjacent, so the
      // results differ by at most |y| (ulp(d) + ulp(dy - d)) plus their own
      // rounding: within 2^-22 |y| (|dy| + |d|).
      g()->backend().copyFromHost(y.dev, y.host.data(), rows * cols * 4);
      ztrt_softmax_grad(g(), ZTRT_F32, dy.dev, y.dev, dx.dev, rows, cols);
      std::vector<float> gotDx = fetch(dx);
      for (int64_t r = 0; r < rows; ++r) {
        double dot = 0.0;
        for (int64_t j = 0; j < cols; ++j)
          dot +=
              static_cast<double>(dy.host[r * cols + j]) * y.host[r * cols + j];
        for (int64_t j = 0; j < cols; ++j) {
          const size_t e = static_cast<size_t>(r * cols + j);
          const double tol = std::ldexp(
              std::fabs(y.host[e]) * (std::fabs(dy.host[e]) + std::fabs(dot)),
              -22);
          if (!(std::fabs(static_cast<double>(gotDx[e]) - dx.host[e]) <= tol))
            FAIL() << "softmax_grad" << what << " [" << e << "]: cuda "
                   << gotDx[e] << ", cpu " << dx.host[e];
        }
      }
    }
}

TEST_F(CudaConformanceTest, TransposeAndBroadcastAreBitwise) {
  // Pure data movement (broadcast's factor: one double product rounded to
  // float on both sides).
  struct Case {
    std::vector<int64_t> shape, perm;
  };
  for (const Case &cs : {Case{{3, 5}, {1, 0}}, Case{{2, 3, 4}, {2, 0, 1}},
                         Case{{2, 64, 4, 16}, {0, 2, 1, 3}},
                         Case{{3, 1, 5, 2}, {3, 2, 1, 0}}, Case{{7}, {0}}}) {
    int64_t n = 1;
    for (int64_t v : cs.shape)
      n *= v;
    auto x = twin(inputs(n, 60)), out = output(n);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_transpose(c, ZTRT_F32, at(x, d), at(out, d),
                     static_cast<int64_t>(cs.shape.size()), cs.shape.data(),
                     cs.perm.data());
    });
    expectBitwise(fetch(out), out.host, "transpose");
  }
  const std::vector<int64_t> shape{3, 4, 5, 2};
  for (const std::vector<int64_t> &mask :
       std::vector<std::vector<int64_t>>{{0, 0, 0, 0},
                                         {1, 0, 0, 0},
                                         {0, 0, 0, 1},
                                         {1, 0, 1, 0},
                                         {0, 1, 1, 0},
                                         {1, 1, 1, 1},
                                         {1, 1, 0, 1}})
    for (double factor : {1.0, 0.125, -3.3}) {
      int64_t inN = 1;
      for (size_t d = 0; d < shape.size(); ++d)
        inN *= mask[d] ? 1 : shape[d];
      auto x = twin(inputs(inN, 61, 1.0f, inN >= 8)),
           out = output(3 * 4 * 5 * 2);
      both([&](ztrt_ctx *c, bool d) {
        ztrt_broadcast(c, ZTRT_F32, at(x, d), at(out, d), 4, shape.data(),
                       mask.data(), factor);
      });
      expectBitwise(fetch(out), out.host, "broadcast");
    }
}

TEST_F(CudaConformanceTest, ReduceSumsInDouble) {
  // Both sum in double and round once; the cuda backend splits long sums
  // into chunks. The double sums differ by ~R 2^-53 sum|x|: adjacent
  // floats, or that much absolute where the sum cancels to ~0.
  const std::vector<int64_t> shape{6, 70, 3, 33};
  int64_t n = 1;
  for (int64_t v : shape)
    n *= v;
  auto x = twin(inputs(n, 70));
  for (const std::vector<int64_t> &mask :
       std::vector<std::vector<int64_t>>{{0, 0, 0, 0},
                                         {1, 0, 0, 0},
                                         {0, 0, 0, 1},
                                         {1, 1, 1, 0},
                                         {0, 1, 0, 1},
                                         {1, 1, 1, 1},
                                         {1, 0, 1, 1}})
    for (int mean : {0, 1}) {
      int64_t outN = 1;
      for (size_t d = 0; d < shape.size(); ++d)
        outN *= mask[d] ? 1 : shape[d];
      auto out = output(outN);
      both([&](ztrt_ctx *c, bool d) {
        ztrt_reduce(c, ZTRT_F32, at(x, d), at(out, d), 4, shape.data(),
                    mask.data(), mean);
      });
      expectUlpsOrAbs(fetch(out), out.host, 1, 1e-11, "reduce");
    }
  // A bias gradient's shape: few outputs, many rows (the chunked path).
  const std::vector<int64_t> bias{8192, 96}, rowMask{1, 0};
  auto y = twin(inputs(8192 * 96, 71)), out = output(96);
  both([&](ztrt_ctx *c, bool d) {
    ztrt_reduce(c, ZTRT_F32, at(y, d), at(out, d), 2, bias.data(),
                rowMask.data(), 0);
  });
  expectUlpsOrAbs(fetch(out), out.host, 1, 1e-10, "reduce rows");
}

TEST_F(CudaConformanceTest, EmbeddingAndDeterministicGradAreBitwise) {
  // Gather: copies. Grad: zero, then each row the float sum of its dy rows
  // in index order, exactly the cpu's additions in the cpu's order.
  const int64_t vocab = 50, dim = 300, nIds = 1000;
  std::vector<int32_t> idValues(nIds);
  for (int64_t i = 0; i < nIds; ++i)
    idValues[i] = static_cast<int32_t>((i * i * 31 + 7) % 37); // repeats, gaps
  idValues[5] = 49;
  auto table = twin(inputs(vocab * dim, 90)), dy = twin(inputs(nIds * dim, 91));
  auto ids = twin(idValues);
  auto out = output(nIds * dim), dtable = output(vocab * dim);
  both([&](ztrt_ctx *c, bool d) {
    ztrt_embedding(c, ZTRT_F32, at(table, d), at(ids, d), at(out, d), nIds,
                   vocab, dim);
    ztrt_embedding_grad(c, ZTRT_F32, at(dy, d), at(ids, d), at(dtable, d), nIds,
                        vocab, dim);
  });
  expectBitwise(fetch(out), out.host, "embedding");
  expectBitwise(fetch(dtable), dtable.host, "embedding_grad");
  // Every id the same: one row sums all of dy.
  auto same = twin(std::vector<int32_t>(nIds, 3));
  both([&](ztrt_ctx *c, bool d) {
    ztrt_embedding_grad(c, ZTRT_F32, at(dy, d), at(same, d), at(dtable, d),
                        nIds, vocab, dim);
  });
  expectBitwise(fetch(dtable), dtable.host, "embedding_grad one id");
  auto bad = twin(std::vector<int32_t>{0, 1, -1, 60});
  EXPECT_EXIT(
      {
        ztrt_embedding(g(), ZTRT_F32, table.dev, bad.dev, out.dev, 4, vocab,
                       dim);
        g()->synchronize();
      },
      ::testing::ExitedWithCode(1),
      "embedding: id -1 out of range \\[0, 50\\) at position 2");
  EXPECT_EXIT(
      {
        ztrt_embedding_grad(g(), ZTRT_F32, dy.dev, bad.dev, dtable.dev, 4,
                            vocab, dim);
        g()->synchronize();
      },
      ::testing::ExitedWithCode(1),
      "embedding_grad: id -1 out of range \\[0, 50\\) at position 2");
}

TEST_F(CudaConformanceTest, CopiesAreBitwise) {
  std::vector<float> values = inputs(1000, 100, 1.0f, true);
  auto src = twin(values), dst = output(1000);
  both(
      [&](ztrt_ctx *c, bool d) { ztrt_copy(c, at(src, d), at(dst, d), 4000); });
  expectBitwise(fetch(dst), dst.host, "copy");
  // An overlapping copy has memmove semantics.
  both([&](ztrt_ctx *c, bool d) {
    ztrt_copy(c, at(src, d), static_cast<char *>(at(src, d)) + 40, 3000);
  });
  expectBitwise(fetch(src), src.host, "copy onto an overlapping view");
  struct Case {
    int64_t rows, rowBytes, srcStride, dstStride;
  };
  for (const Case &cs :
       {Case{10, 16, 48, 16}, Case{10, 16, 16, 48}, Case{7, 12, 0, 12},
        Case{5, 3, 7, 9}, Case{40, 100, 100, 100}, Case{1, 4000, 0, 0}}) {
    auto from = twin(values), to = output(1000);
    both([&](ztrt_ctx *c, bool d) {
      ztrt_copy_2d(c, at(from, d), at(to, d), cs.rows, cs.rowBytes,
                   cs.srcStride, cs.dstStride);
    });
    expectBitwise(fetch(to), to.host,
                  "copy_2d rows=" + std::to_string(cs.rows) +
                      " bytes=" + std::to_string(cs.rowBytes));
  }
}

TEST_F(CudaConformanceTest, MemoryIsAccountedAsOnTheCpu) {
  // The context accounts categories whatever the backend.
  void *a = ztrt_alloc(g(), 1000, ZTRT_CAT_PARAMETERS);
  void *b = ztrt_alloc(g(), 0, ZTRT_CAT_ACTIVATIONS);
  void *e = ztrt_alloc(g(), 0, ZTRT_CAT_ACTIVATIONS);
  EXPECT_NE(b, e) << "zero-byte allocations must be distinct";
  EXPECT_EQ(g()->memory().current[ZTRT_CAT_PARAMETERS], 1000);
  ztrt_free(g(), a);
  ztrt_free(g(), b);
  ztrt_free(g(), e);
  ztrt_free(g(), nullptr);
  EXPECT_EQ(g()->memory().current[ZTRT_CAT_PARAMETERS], 0);
  EXPECT_EQ(g()->memory().peak[ZTRT_CAT_PARAMETERS], 1000);
  EXPECT_EXIT(ztrt_alloc(g(), int64_t(1) << 50, ZTRT_CAT_ACTIVATIONS),
              ::testing::ExitedWithCode(1),
              "alloc: out of cuda memory allocating 1125899906842624 bytes");
}

namespace {

/// A stand-in for a kernel of --fuse=elementwise: never to be run here.
void hostOnlyKernel(void *const *, int64_t, int64_t) { std::abort(); }

} // namespace

TEST_F(CudaConformanceTest, FusedKernelsAreRefused) {
  // The generated kernels are host code, and these buffers device memory:
  // the cuda backend keeps Backend::runFused's refusal (main() refuses
  // such an executable on --backend cuda before its first step).
  auto x = output(4);
  void *args[] = {x.dev};
  EXPECT_EXIT(ztrt_fused(g(), "fused:relu",
                         reinterpret_cast<void *>(&hostOnlyKernel), nullptr,
                         args, 4, 1),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: the cuda backend cannot run this executable's "
              "fused kernels: it was compiled with --fuse=elementwise, whose "
              "generated kernels run on the cpu backend only; recompile with "
              "--fuse=none\n$");
}

TEST_F(CudaConformanceTest, LossArrivesAtSynchronize) {
  auto loss = twin(std::vector<float>{2.5f});
  g()->loss = 0.0f;
  ztrt_set_loss(g(), loss.dev);
  g()->synchronize();
  EXPECT_EQ(g()->loss, 2.5f);
}

TEST_F(CudaConformanceTest, SameInputsTwiceGiveTheSameBits) {
  // Determinism: no atomics on floats, fixed reduction trees, one cuBLAS
  // handle on one stream.
  auto run = [&] {
    auto x = twin(inputs(512 * 768, 110)), w = twin(inputs(768 * 768, 111)),
         gamma = twin(inputs(768, 112));
    auto ids = twin(std::vector<int32_t>(512, 7));
    auto h = output(512 * 768), dx = output(512 * 768), dg = output(768),
         db = output(768), bias = output(768), dt = output(20 * 768);
    ztrt_matmul(g(), ZTRT_F32, x.dev, w.dev, h.dev, 1, 512, 768, 768, 0, 1, 0,
                0, 0);
    ztrt_layer_norm_grad(g(), ZTRT_F32, h.dev, x.dev, gamma.dev, dx.dev, dg.dev,
                         db.dev, 512, 768, 1e-5);
    const int64_t shape[2] = {512, 768}, mask[2] = {1, 0};
    ztrt_reduce(g(), ZTRT_F32, dx.dev, bias.dev, 2, shape, mask, 0);
    ztrt_embedding_grad(g(), ZTRT_F32, dx.dev, ids.dev, dt.dev, 512, 20, 768);
    std::vector<float> all = fetch(h);
    for (auto *t : {&dx, &dg, &db, &bias, &dt}) {
      std::vector<float> v = fetch(*t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  std::vector<float> first = run(), second = run();
  expectBitwise(second, first, "second run");
}

TEST(CudaBackendTest, CublasAndNcclLoadWithEveryFunction) {
  // dlopen and dlsym only (no GPU needed): the paths CMake recorded work
  // and every function the backend calls is there.
  int major = 0, version = 0;
  ASSERT_EQ(cuda::cublas().getProperty(MAJOR_VERSION, &major),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_GE(major, 11);
  ASSERT_EQ(cuda::nccl().getVersion(&version), ncclSuccess);
  EXPECT_GE(version, 21000) << "NCCL 2.10 or newer";
}

TEST(CudaBackendTest, DeviceCountSaysWhyThereIsNone) {
  std::string reason;
  const int count = cudaDeviceCount(&reason);
  if (count > 0)
    GTEST_SKIP() << count << " CUDA device(s) present";
  EXPECT_FALSE(reason.empty());
  EXPECT_NE(reason.find("cudaGetDeviceCount"), std::string::npos) << reason;
}

TEST(CudaBackendTest, NoDeviceIsOneLine) {
  std::string reason;
  if (cudaDeviceCount(&reason) > 0)
    GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EXIT(selectCudaDevice(CommunicatorParams{}),
              ::testing::ExitedWithCode(1),
              "ztrain: error: --backend cuda: no CUDA device: "
              "cudaGetDeviceCount returned");
}

} // namespace

TEST_F(CudaConformanceTest, MatmulAccMatchesUpToSummationOrder) {
  // train.matmul_acc: c = c_in + op(a) op(b) in float, f32 and bf16
  // operands, in place and into a copy. cuBLAS (beta = 1) and OpenBLAS /
  // the widened path sum in different orders: each result is within
  // (k + 1) u (|c_in| + sum |a||b|) of the exact value (u = 2^-24; bf16
  // products are exact in float), so the two within twice that.
  const int64_t m = 33, n = 41, k = 150;
  for (int32_t t : {int32_t(ZTRT_F32), int32_t(ZTRT_BF16)})
    for (int ta : {0, 1})
      for (int inPlace : {0, 1}) {
        std::vector<float> af = inputs(m * k, 50), bf = inputs(k * n, 51);
        if (t == ZTRT_BF16)
          for (std::vector<float> *v : {&af, &bf})
            for (float &e : *v)
              e = static_cast<float>(bf16(e));
        auto cIn = twin(inputs(m * n, 52));
        Twin<float> fresh = output(m * n);
        Twin<float> &out = inPlace ? cIn : fresh;
        std::vector<bf16> ah(af.size()), bh(bf.size());
        for (size_t i = 0; i < af.size(); ++i)
          ah[i] = bf16(af[i]);
        for (size_t i = 0; i < bf.size(); ++i)
          bh[i] = bf16(bf[i]);
        auto a32 = twin(af), b32 = twin(bf);
        auto a16 = twin(ah), b16 = twin(bh);
        const std::vector<float> before = cIn.host;
        both([&](ztrt_ctx *x, bool d) {
          const void *a = t == ZTRT_F32 ? at(a32, d) : at(a16, d);
          const void *b = t == ZTRT_F32 ? at(b32, d) : at(b16, d);
          ztrt_matmul_acc(x, t, a, b, at(cIn, d), at(out, d), m, n, k, ta,
                          1 - ta);
        });
        std::vector<float> got = fetch(out);
        const std::string what = std::string(t == ZTRT_F32 ? "f32" : "bf16") +
                                 " ta=" + std::to_string(ta) +
                                 (inPlace ? " in place" : " copied");
        expectUlpsOrBound(
            got, out.host, 0,
            [&](size_t e) {
              const int64_t r = static_cast<int64_t>(e) / n,
                            col = static_cast<int64_t>(e) % n;
              double mag = std::fabs(static_cast<double>(before[e]));
              for (int64_t l = 0; l < k; ++l)
                mag += std::fabs(
                    static_cast<double>(ta ? af[l * m + r] : af[r * k + l]) *
                    (ta ? bf[l * n + col] : bf[col * k + l]));
              return 2.0 * (k + 1) * std::ldexp(1.0, -24) * mag;
            },
            what);
      }
}

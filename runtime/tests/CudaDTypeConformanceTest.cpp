//===- CudaDTypeConformanceTest.cpp - Cuda conformance: bf16 and f16 ------===//
//
// Part of ztrain's runtime tests: the cuda conformance suite
// (CudaConformanceTest.cpp's file comment) in bf16 and f16: every kernel
// against the same backend's float kernel on the widened inputs, rounded
// once (CudaConformance.h's CudaDTypeTest says why that is exact). The
// Llama kernels' are in CudaLlamaConformanceTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "CudaConformance.h"

using namespace ztrt;
using namespace ztrt::test;

namespace {

TYPED_TEST(CudaDTypeTest, ElementwiseAreTheFloatKernelsRounded) {
  ztrt_ctx *x = this->g();
  for (size_t n : {size_t(1), size_t(37), size_t(1) << 16}) {
    auto a = this->pair(this->values(n, 1, 4.0f, true)),
         b = this->pair(this->values(n, 2, 4.0f, true));
    auto out = this->output(n);
    const int64_t len = static_cast<int64_t>(n);
    const std::string size = " n=" + std::to_string(n);
    using P = decltype(a);
    auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
    this->each([&](int32_t ty, bool t) {
      ztrt_add(x, ty, at(a, t), at(b, t), at(out, t), len);
    });
    this->expectRounded(out, "add" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_sub(x, ty, at(a, t), at(b, t), at(out, t), len);
    });
    this->expectRounded(out, "sub" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_mul(x, ty, at(a, t), at(b, t), at(out, t), len);
    });
    this->expectRounded(out, "mul" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_scale(x, ty, at(a, t), at(out, t), len, -0.3);
    });
    this->expectRounded(out, "scale" + size);
    this->each(
        [&](int32_t ty, bool t) { ztrt_fill(x, ty, at(out, t), len, 0.1); });
    this->expectRounded(out, "fill" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_relu(x, ty, at(a, t), at(out, t), len);
    });
    this->expectRounded(out, "relu" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_relu_grad(x, ty, at(b, t), at(a, t), at(out, t), len);
    });
    this->expectRounded(out, "relu_grad" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_gelu(x, ty, at(a, t), at(out, t), len);
    });
    this->expectRounded(out, "gelu" + size);
    this->each([&](int32_t ty, bool t) {
      ztrt_gelu_grad(x, ty, at(b, t), at(a, t), at(out, t), len);
    });
    this->expectRounded(out, "gelu_grad" + size);
    // In place: out aliases an input.
    this->each([&](int32_t ty, bool t) {
      ztrt_add(x, ty, at(a, t), at(b, t), at(a, t), len);
    });
    this->expectRounded(a, "add in place" + size);
  }
  for (auto shape : {std::pair<int64_t, int64_t>{1, 1}, {5, 7}, {300, 96}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto in = this->pair(this->values(rows * cols, 3)),
         bias = this->pair(this->values(cols, 4));
    auto out = this->output(rows * cols);
    this->each([&](int32_t ty, bool t) {
      ztrt_bias_add(x, ty, TestFixture::at(in, t), TestFixture::at(bias, t),
                    TestFixture::at(out, t), rows, cols);
    });
    this->expectRounded(out, "bias_add");
  }
}

TYPED_TEST(CudaDTypeTest, OptimizerUpdatesAreTheFloatUpdatesRounded) {
  // Each step separately: the T states after a step are rounded, so the
  // next step's float run starts from them widened (resync). Three steps:
  // the first step's momentum rule, then the general one.
  ztrt_ctx *x = this->g();
  const int64_t n = 4099;
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  struct Sgd {
    double lr, momentum, dampening, decay;
    int nesterov;
  };
  for (Sgd h : {Sgd{0.1, 0.0, 0.0, 0.0, 0}, Sgd{0.05, 0.9, 0.0, 1e-2, 0},
                Sgd{0.05, 0.9, 0.1, 0.0, 0}, Sgd{0.01, 0.9, 0.0, 1e-3, 1}}) {
    auto p = this->pair(this->values(n, 5)),
         buf = this->pair(std::vector<TypeParam>(n, TypeParam(0.0f)));
    for (int64_t step = 1; step <= 3; ++step) {
      auto grad = this->pair(this->values(n, 10 + static_cast<uint32_t>(step)));
      x->step = step;
      this->each([&](int32_t ty, bool t) {
        ztrt_sgd_update(x, ty, at(p, t), at(grad, t), at(buf, t), n, h.lr,
                        h.momentum, h.dampening, h.decay, h.nesterov);
      });
      const std::string what = " step " + std::to_string(step);
      this->expectRounded(p, "sgd param" + what);
      this->expectRounded(buf, "sgd momentum" + what);
      this->resync(p);
      this->resync(buf);
    }
  }
  for (int decoupled : {0, 1})
    for (double decay : {0.0, 0.1}) {
      auto p = this->pair(this->values(n, 6)),
           m = this->pair(std::vector<TypeParam>(n, TypeParam(0.0f))),
           v = this->pair(std::vector<TypeParam>(n, TypeParam(0.0f)));
      for (int64_t step = 1; step <= 3; ++step) {
        auto grad =
            this->pair(this->values(n, 20 + static_cast<uint32_t>(step)));
        x->step = step;
        this->each([&](int32_t ty, bool t) {
          ztrt_adam_update(x, ty, at(p, t), at(grad, t), at(m, t), at(v, t), n,
                           1e-3, 0.9, 0.999, 1e-8, decay, decoupled);
        });
        const std::string what = " step " + std::to_string(step);
        this->expectRounded(p, "adam param" + what);
        this->expectRounded(m, "adam exp_avg" + what);
        this->expectRounded(v, "adam exp_avg_sq" + what);
        for (P *s : {&p, &m, &v})
          this->resync(*s);
      }
    }
}

TYPED_TEST(CudaDTypeTest, MatmulIsTheFloatMatmulRounded) {
  // bf16 / f16: cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F (float
  // products and sums, C rounded once); float: cublasSgemmStridedBatched.
  // The emulator implements both as the same float loop in k order, so
  // the T result is the float result rounded: bitwise. A GPU runs other
  // kernels for the two (16-bit tensor-core tiles, another k blocking), so
  // the float sums differ by up to the summation-order bound of
  // MatmulMatchesUpToSummationOrder, 2 k u sum|a b| (u = 2^-24), and the
  // two roundings to T by one more spacing of T: that is the GPU's
  // tolerance.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
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
  cases.push_back({1, 128, 96, 256, 0, 0, -1, -1});
  cases.push_back({2, 3, 4, 0, 0, 0, -1, -1}); // k = 0: zeros
  for (const Case &cs : cases) {
    const int64_t sa = cs.sa < 0 ? cs.m * cs.k : cs.sa;
    const int64_t sb = cs.sb < 0 ? cs.k * cs.n : cs.sb;
    const int64_t sc = cs.m * cs.n;
    // A stride of 0 shares one matrix across the batch.
    auto a = this->pair(this->values(static_cast<size_t>(std::max<int64_t>(
                                         sa ? cs.batch * sa : cs.m * cs.k, 1)),
                                     30));
    auto b = this->pair(this->values(static_cast<size_t>(std::max<int64_t>(
                                         sb ? cs.batch * sb : cs.k * cs.n, 1)),
                                     31));
    auto out = this->output(static_cast<size_t>(cs.batch * sc));
    this->each([&](int32_t ty, bool t) {
      ztrt_matmul(x, ty, at(a, t), at(b, t), at(out, t), cs.batch, cs.m, cs.n,
                  cs.k, cs.ta, cs.tb, sa, sb, sc);
    });
    const std::string what =
        "matmul batch=" + std::to_string(cs.batch) +
        " m=" + std::to_string(cs.m) + " n=" + std::to_string(cs.n) +
        " k=" + std::to_string(cs.k) + " ta=" + std::to_string(cs.ta) +
        " tb=" + std::to_string(cs.tb) + " sa=" + std::to_string(sa) +
        " sb=" + std::to_string(sb);
    if (kEmulator) {
      this->expectRounded(out, what);
      continue;
    }
    const std::vector<TypeParam> got =
        this->template download<TypeParam>(out.t, out.host.size());
    const std::vector<float> ref =
        this->template download<float>(out.f, out.host.size());
    const double spacing = std::ldexp(1.0, 1 - precisionBits<TypeParam>());
    int bad = 0;
    for (int64_t i = 0; i < cs.batch && bad < 5; ++i)
      for (int64_t r = 0; r < cs.m; ++r)
        for (int64_t col = 0; col < cs.n; ++col) {
          double mag = 0.0;
          for (int64_t l = 0; l < cs.k; ++l) {
            const float av = static_cast<float>(
                a.host[i * sa + (cs.ta ? l * cs.m + r : r * cs.k + l)]);
            const float bv = static_cast<float>(
                b.host[i * sb + (cs.tb ? col * cs.k + l : l * cs.n + col)]);
            mag += std::fabs(static_cast<double>(av) * bv);
          }
          const size_t e = static_cast<size_t>(i * sc + r * cs.n + col);
          const double want =
              static_cast<float>(static_cast<TypeParam>(ref[e]));
          // The float sums' difference, then each side's rounding to T
          // (relative spacing, or T's smallest subnormal near zero).
          const double order = 2.0 * cs.k * std::ldexp(1.0, -24) * mag;
          const double bound = order + spacing * (std::fabs(want) + order) +
                               static_cast<float>(TypeParam::fromBits(1));
          if (!(std::fabs(static_cast<float>(got[e]) - want) <= bound) &&
              bad++ < 5)
            ADD_FAILURE() << dtypeName(TestFixture::kType) << " " << what
                          << " C[" << e << "]: " << static_cast<float>(got[e])
                          << ", float kernel rounded " << want << ", bound "
                          << bound;
        }
  }
}

TYPED_TEST(CudaDTypeTest, LayerNormAndGradAreTheFloatOnesRounded) {
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  for (auto shape :
       {std::pair<int64_t, int64_t>{1, 1}, {7, 16}, {64, 1000}, {300, 96}}) {
    const int64_t rows = shape.first, cols = shape.second;
    auto in = this->pair(this->values(rows * cols, 40, 3.0f)),
         gamma = this->pair(this->values(cols, 41)),
         beta = this->pair(this->values(cols, 42)),
         dy = this->pair(this->values(rows * cols, 43));
    auto y = this->output(rows * cols), dx = this->output(rows * cols),
         dgamma = this->output(cols), dbeta = this->output(cols);
    const std::string what =
        " " + std::to_string(rows) + "x" + std::to_string(cols);
    this->each([&](int32_t ty, bool t) {
      ztrt_layer_norm(x, ty, at(in, t), at(gamma, t), at(beta, t), at(y, t),
                      rows, cols, 1e-5);
      ztrt_layer_norm_grad(x, ty, at(dy, t), at(in, t), at(gamma, t), at(dx, t),
                           at(dgamma, t), at(dbeta, t), rows, cols, 1e-5);
    });
    this->expectRounded(y, "layer_norm" + what);
    this->expectRounded(dx, "layer_norm_grad dx" + what);
    this->expectRounded(dgamma, "dgamma" + what);
    this->expectRounded(dbeta, "dbeta" + what);
  }
}

TYPED_TEST(CudaDTypeTest, SoftmaxAndGradAreTheFloatOnesRounded) {
  // For T != float the kernel keeps no exponential in y (it computes each
  // again for the store), so y holds only final, once-rounded values.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  for (int causal : {0, 1})
    for (auto shape :
         {std::pair<int64_t, int64_t>{8, 8}, {3 * 64, 64}, {2 * 257, 257}}) {
      const int64_t rows = !causal && shape.first == 8 ? 5 : shape.first;
      const int64_t cols = shape.second;
      auto in = this->pair(this->values(rows * cols, 50, 6.0f)),
           dy = this->pair(this->values(rows * cols, 51));
      auto y = this->output(rows * cols), dx = this->output(rows * cols);
      const std::string what = (causal ? " causal " : " ") +
                               std::to_string(rows) + "x" +
                               std::to_string(cols);
      this->each([&](int32_t ty, bool t) {
        ztrt_softmax(x, ty, at(in, t), at(y, t), rows, cols, causal);
      });
      this->expectRounded(y, "softmax" + what);
      // softmax_grad on the same y: the T side's, widened for float.
      this->resync(y);
      this->each([&](int32_t ty, bool t) {
        ztrt_softmax_grad(x, ty, at(dy, t), at(y, t), at(dx, t), rows, cols);
      });
      this->expectRounded(dx, "softmax_grad" + what);
    }
}

TYPED_TEST(CudaDTypeTest, LayoutKernelsAreTheFloatOnesRounded) {
  // transpose and broadcast with factor 1 move T's bits (which the float
  // run's rounding gives back exactly); broadcast's factor and reduce's
  // double sums are rounded once.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  struct Case {
    std::vector<int64_t> shape, perm;
  };
  for (const Case &cs : {Case{{3, 5}, {1, 0}}, Case{{2, 3, 4}, {2, 0, 1}},
                         Case{{2, 64, 4, 16}, {0, 2, 1, 3}},
                         Case{{3, 1, 5, 2}, {3, 2, 1, 0}}, Case{{7}, {0}}}) {
    int64_t n = 1;
    for (int64_t v : cs.shape)
      n *= v;
    auto in = this->pair(this->values(n, 60, 1.0f, n >= 8)),
         out = this->output(n);
    this->each([&](int32_t ty, bool t) {
      ztrt_transpose(x, ty, at(in, t), at(out, t),
                     static_cast<int64_t>(cs.shape.size()), cs.shape.data(),
                     cs.perm.data());
    });
    this->expectRounded(out, "transpose");
  }
  const std::vector<int64_t> shape{3, 4, 5, 2};
  const std::vector<std::vector<int64_t>> masks{
      {0, 0, 0, 0}, {1, 0, 0, 0}, {0, 0, 0, 1}, {1, 0, 1, 0},
      {0, 1, 1, 0}, {1, 1, 1, 1}, {1, 1, 0, 1}};
  for (const std::vector<int64_t> &mask : masks)
    for (double factor : {1.0, 0.125, -3.3}) {
      int64_t inN = 1;
      for (size_t d = 0; d < shape.size(); ++d)
        inN *= mask[d] ? 1 : shape[d];
      auto in = this->pair(this->values(inN, 61, 1.0f, inN >= 8)),
           out = this->output(3 * 4 * 5 * 2);
      this->each([&](int32_t ty, bool t) {
        ztrt_broadcast(x, ty, at(in, t), at(out, t), 4, shape.data(),
                       mask.data(), factor);
      });
      this->expectRounded(out, "broadcast");
    }
  const std::vector<int64_t> big{6, 70, 3, 33};
  int64_t n = 1;
  for (int64_t v : big)
    n *= v;
  auto in = this->pair(this->values(n, 70));
  for (const std::vector<int64_t> &mask : masks)
    for (int mean : {0, 1}) {
      int64_t outN = 1;
      for (size_t d = 0; d < big.size(); ++d)
        outN *= mask[d] ? 1 : big[d];
      auto out = this->output(outN);
      this->each([&](int32_t ty, bool t) {
        ztrt_reduce(x, ty, at(in, t), at(out, t), 4, big.data(), mask.data(),
                    mean);
      });
      this->expectRounded(out, "reduce");
    }
  // A bias gradient's shape: few outputs, many rows (the chunked path).
  const std::vector<int64_t> bias{8192, 96}, rowMask{1, 0};
  auto rowsIn = this->pair(this->values(8192 * 96, 71)), out = this->output(96);
  this->each([&](int32_t ty, bool t) {
    ztrt_reduce(x, ty, at(rowsIn, t), at(out, t), 2, bias.data(),
                rowMask.data(), 0);
  });
  this->expectRounded(out, "reduce rows");
}

TYPED_TEST(CudaDTypeTest, CrossEntropyAndGradAreTheFloatOnesRounded) {
  // The loss is one float for every dtype: the T kernel's must be the float
  // kernel's, bit for bit (the same double sums of the same widened
  // logits). dloss is a float too.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  const int64_t rows = 300, classes = 1000;
  std::vector<int32_t> labelValues(rows);
  for (int64_t r = 0; r < rows; ++r)
    labelValues[r] = static_cast<int32_t>((r * 7919) % classes);
  void *labels = this->upload(labelValues);
  void *dloss = this->upload(std::vector<float>{0.7f});
  void *lossT = this->upload(std::vector<float>{NAN});
  void *lossF = this->upload(std::vector<float>{NAN});
  auto logits = this->pair(this->values(rows * classes, 80, 8.0f));
  auto dlogits = this->output(rows * classes);
  this->each([&](int32_t ty, bool t) {
    ztrt_cross_entropy(x, ty, at(logits, t), labels, t ? lossT : lossF, rows,
                       classes, ZTRT_NO_IGNORE_INDEX);
    ztrt_cross_entropy_grad(x, ty, dloss, at(logits, t), labels, at(dlogits, t),
                            rows, classes, ZTRT_NO_IGNORE_INDEX);
  });
  const float gotLoss = this->template download<float>(lossT, 1)[0];
  const float refLoss = this->template download<float>(lossF, 1)[0];
  EXPECT_EQ(bits(gotLoss), bits(refLoss))
      << dtypeName(TestFixture::kType) << " cross_entropy: " << gotLoss
      << ", float kernel " << refLoss;
  this->expectRounded(dlogits, "cross_entropy_grad");
}

TYPED_TEST(CudaDTypeTest, CrossEntropyWithGradIsTheFloatOneRounded) {
  // The fused loss and adjoint in T against the float kernel: the loss bit
  // for bit, the gradient the float one rounded once (as the pair above).
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  const int64_t rows = 300, classes = 1000;
  std::vector<int32_t> labelValues(rows);
  for (int64_t r = 0; r < rows; ++r)
    labelValues[r] = static_cast<int32_t>((r * 7919) % classes);
  void *labels = this->upload(labelValues);
  void *dloss = this->upload(std::vector<float>{0.7f});
  void *lossT = this->upload(std::vector<float>{NAN});
  void *lossF = this->upload(std::vector<float>{NAN});
  auto logits = this->pair(this->values(rows * classes, 82, 8.0f));
  auto dlogits = this->output(rows * classes);
  this->each([&](int32_t ty, bool t) {
    ztrt_cross_entropy_with_grad(x, ty, at(logits, t), labels, dloss,
                                 t ? lossT : lossF, at(dlogits, t), rows,
                                 classes, ZTRT_NO_IGNORE_INDEX);
  });
  const float gotLoss = this->template download<float>(lossT, 1)[0];
  const float refLoss = this->template download<float>(lossF, 1)[0];
  EXPECT_EQ(bits(gotLoss), bits(refLoss))
      << dtypeName(TestFixture::kType) << " cross_entropy_with_grad: "
      << gotLoss << ", float kernel " << refLoss;
  this->expectRounded(dlogits, "cross_entropy_with_grad");
}

TYPED_TEST(CudaDTypeTest, EmbeddingAndGradAreTheFloatOnesRounded) {
  // embedding copies rows of T; embedding_grad accumulates in a float
  // scratch table in index order (the float kernel's additions in its
  // order) and rounds each element once.
  ztrt_ctx *x = this->g();
  using P = typename TestFixture::Pair;
  auto at = [](P &p, bool t) { return TestFixture::at(p, t); };
  const int64_t vocab = 50, dim = 300, nIds = 1000;
  std::vector<int32_t> idValues(nIds);
  for (int64_t i = 0; i < nIds; ++i)
    idValues[i] = static_cast<int32_t>((i * i * 31 + 7) % 37); // repeats, gaps
  idValues[5] = 49;
  void *ids = this->upload(idValues);
  void *same = this->upload(std::vector<int32_t>(nIds, 3));
  auto table = this->pair(this->values(vocab * dim, 90, 1.0f, true)),
       dy = this->pair(this->values(nIds * dim, 91));
  auto out = this->output(nIds * dim), dtable = this->output(vocab * dim);
  this->each([&](int32_t ty, bool t) {
    ztrt_embedding(x, ty, at(table, t), ids, at(out, t), nIds, vocab, dim);
    ztrt_embedding_grad(x, ty, at(dy, t), ids, at(dtable, t), nIds, vocab, dim);
  });
  this->expectRounded(out, "embedding");
  this->expectRounded(dtable, "embedding_grad");
  // Every id the same: one row sums all of dy.
  this->each([&](int32_t ty, bool t) {
    ztrt_embedding_grad(x, ty, at(dy, t), same, at(dtable, t), nIds, vocab,
                        dim);
  });
  this->expectRounded(dtable, "embedding_grad one id");
}

} // namespace

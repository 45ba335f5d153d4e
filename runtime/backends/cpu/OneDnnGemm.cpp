//===- OneDnnGemm.cpp - bf16 GEMM through oneDNN --------------------------===//
//
// Part of ztrain's runtime.
//
// One matmul primitive per shape, created on first use and kept (a step
// calls the same few shapes every time; creating a primitive costs far more
// than running a small one). Determinism: oneDNN's CPU matmul has no
// atomics; a given shape and thread count computes the same bits.
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/OneDnnGemm.h"

#include "base/Support.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#ifdef ZTRT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace ztrt::onednn {

namespace {

enum class Choice { Unread, OneDnn, Widen };

#ifdef ZTRT_HAVE_DNNL
/// Whether oneDNN has a bf16 matmul for this processor. Debian's oneDNN
/// needs AVX-512 (with BF16 instructions or its emulation of them); on a
/// processor without, creating the primitive fails, and the default is then
/// the widening path rather than a fatal error at the first bf16 GEMM.
bool oneDnnRunsBf16() {
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::memory::desc a(dims{1, 1, 1}, dt::bf16, dims{1, 1, 1});
    dnnl::memory::desc b(dims{1, 1, 1}, dt::bf16, dims{1, 1, 1});
    dnnl::memory::desc c(dims{1, 1, 1}, dt::f32, dims{1, 1, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine);
    return true;
  } catch (const dnnl::error &) {
    return false;
  }
}
#endif

Choice choice() {
  static Choice c = [] {
    const char *env = std::getenv("ZTRAIN_CPU_BF16_GEMM");
    std::string v = env ? env : "";
#ifdef ZTRT_HAVE_DNNL
    if (v == "onednn")
      return Choice::OneDnn;
    if (v.empty())
      return oneDnnRunsBf16() ? Choice::OneDnn : Choice::Widen;
#else
    if (v == "onednn")
      fatal("ZTRAIN_CPU_BF16_GEMM=onednn: this runtime was built without "
            "oneDNN (install libdnnl-dev and rebuild)");
    if (v.empty())
      return Choice::Widen;
#endif
    if (v == "widen")
      return Choice::Widen;
    fatal("ZTRAIN_CPU_BF16_GEMM='%s' is not onednn or widen", v.c_str());
  }();
  return c;
}

#ifdef ZTRT_HAVE_DNNL
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, int64_t,
                       int64_t, bool>;

struct Plan {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c;
  std::string impl;
};

struct State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Plan> plans;
  std::vector<float> out;
  std::string lastImpl;
};

State &state() {
  static State s;
  return s;
}

/// The primitive for these shapes; `accumulate` adds the product to the f32
/// destination (oneDNN's sum post-op) instead of overwriting it.
Plan &plan(int64_t batch, int64_t m, int64_t n, int64_t k, bool transA,
           bool transB, int64_t strideA, int64_t strideB,
           bool accumulate = false) {
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  State &s = state();
  Key key{batch, m, n, k, transA, transB, strideA, strideB, accumulate};
  auto it = s.plans.find(key);
  if (it != s.plans.end())
    return it->second;
  // 3-D descriptors [batch, rows, cols] with the operands' own strides;
  // strideB == 0 (one weight for every batch element) is a batch dim of 1,
  // which matmul broadcasts.
  const int64_t bBatch = strideB == 0 ? 1 : batch;
  dnnl::memory::desc a(dims{batch, m, k}, dt::bf16,
                       transA ? dims{strideA, 1, m} : dims{strideA, k, 1});
  dnnl::memory::desc b(dims{bBatch, k, n}, dt::bf16,
                       transB ? dims{strideB ? strideB : k * n, 1, k}
                              : dims{strideB ? strideB : k * n, n, 1});
  dnnl::memory::desc c(dims{batch, m, n}, dt::f32, dims{m * n, n, 1});
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, s.engine);
  Plan p{dnnl::matmul(pd), a, b, c, pd.impl_info_str()};
  return s.plans.emplace(key, std::move(p)).first->second;
}
#endif

} // namespace

bool bf16GemmEnabled() { return choice() == Choice::OneDnn; }

const char *bf16GemmName() {
#ifdef ZTRT_HAVE_DNNL
  if (bf16GemmEnabled())
    return "onednn";
#endif
  return "widen to f32 + OpenBLAS sgemm";
}

void bf16Matmul(const bf16 *a, const bf16 *b, bf16 *c, int64_t batch,
                int64_t m, int64_t n, int64_t k, bool transA, bool transB,
                int64_t strideA, int64_t strideB, int64_t strideC) {
#ifdef ZTRT_HAVE_DNNL
  if (batch == 0 || m == 0 || n == 0)
    return;
  State &s = state();
  const size_t outElems = static_cast<size_t>(batch * m * n);
  if (s.out.size() < outElems)
    s.out.resize(outElems);
  if (k == 0) {
    std::memset(s.out.data(), 0, outElems * sizeof(float));
  } else {
    try {
      // A single-element stride array cannot be 0 for oneDNN: a batch of
      // one gets the natural stride.
      Plan &p = plan(batch, m, n, k, transA, transB,
                     batch == 1 ? m * k : strideA, batch == 1 ? 0 : strideB);
      dnnl::memory am(p.a, s.engine, const_cast<bf16 *>(a));
      dnnl::memory bm(p.b, s.engine, const_cast<bf16 *>(b));
      dnnl::memory cm(p.c, s.engine, s.out.data());
      p.primitive.execute(s.stream, {{DNNL_ARG_SRC, am},
                                     {DNNL_ARG_WEIGHTS, bm},
                                     {DNNL_ARG_DST, cm}});
      s.stream.wait();
    } catch (const dnnl::error &e) {
      fatal("matmul: oneDNN bf16 GEMM %lldx%lldx%lld (batch %lld) failed: "
            "%s (status %d); ZTRAIN_CPU_BF16_GEMM=widen avoids oneDNN",
            static_cast<long long>(m), static_cast<long long>(n),
            static_cast<long long>(k), static_cast<long long>(batch), e.what(),
            static_cast<int>(e.status));
    }
  }
  for (int64_t i = 0; i < batch; ++i) {
    const float *src = s.out.data() + i * m * n;
    bf16 *dst = c + i * strideC;
#pragma omp parallel for schedule(static) if (m * n >= 32768)
    for (int64_t j = 0; j < m * n; ++j)
      dst[j] = bf16(src[j]);
  }
#else
  (void)a, (void)b, (void)c, (void)batch, (void)m, (void)n, (void)k,
      (void)transA, (void)transB, (void)strideA, (void)strideB, (void)strideC;
  fatal("matmul: the runtime was built without oneDNN");
#endif
}

void bf16MatmulAcc(const bf16 *a, const bf16 *b, float *c, int64_t m, int64_t n,
                   int64_t k, bool transA, bool transB) {
#ifdef ZTRT_HAVE_DNNL
  if (m == 0 || n == 0 || k == 0)
    return;
  State &s = state();
  try {
    Plan &p = plan(1, m, n, k, transA, transB, m * k, 0, /*accumulate=*/true);
    dnnl::memory am(p.a, s.engine, const_cast<bf16 *>(a));
    dnnl::memory bm(p.b, s.engine, const_cast<bf16 *>(b));
    dnnl::memory cm(p.c, s.engine, c);
    p.primitive.execute(
        s.stream,
        {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    s.stream.wait();
  } catch (const dnnl::error &e) {
    fatal("matmul_acc: oneDNN bf16 GEMM %lldx%lldx%lld failed: %s (status "
          "%d); ZTRAIN_CPU_BF16_GEMM=widen avoids oneDNN",
          static_cast<long long>(m), static_cast<long long>(n),
          static_cast<long long>(k), e.what(), static_cast<int>(e.status));
  }
#else
  (void)a, (void)b, (void)c, (void)m, (void)n, (void)k, (void)transA,
      (void)transB;
  fatal("matmul_acc: the runtime was built without oneDNN");
#endif
}

} // namespace ztrt::onednn

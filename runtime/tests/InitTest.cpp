//===- InitTest.cpp - Deterministic parameter initialisation --------------===//

#include "TestUtil.h"

#include "base/DType.h"
#include "step/Init.h"
#include "io/Safetensors.h"

#include <cmath>
#include <cstring>

using namespace ztrt;

namespace {

ParamSpec param(const std::string &name, InitKind kind, double scale,
                int64_t n) {
  ParamSpec spec;
  spec.name = name;
  spec.shape = {n};
  spec.numel = n;
  spec.bytes = 4 * n;
  spec.init = kind;
  spec.scale = scale;
  spec.storeElems = n;
  spec.storeBytes = 4 * n;
  return spec;
}

/// `spec` stored as `mode` with E = `elems` per rank.
ParamSpec stored(ParamSpec spec, StoreMode mode, int64_t elems) {
  spec.store = mode;
  spec.storeElems = elems;
  spec.storeBytes = 4 * elems;
  return spec;
}

std::vector<float> initStorage(const ParamSpec &spec, uint64_t seed,
                               int64_t rank) {
  // Poisoned, so that an element initStorage forgets to write shows up.
  std::vector<float> out(spec.storeElems, -99.0f);
  initParameterStorage(spec, seed, rank, out.data());
  return out;
}

std::vector<float> init(const ParamSpec &spec, uint64_t seed) {
  std::vector<float> out(spec.numel);
  initParameter(spec, seed, 0, spec.numel, out.data());
  return out;
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

} // namespace

TEST(InitTest, SplitMix64ReferenceValue) {
  // splitmix64 seeded with 0: the first output of the published reference
  // generator. Pins draw() to the documented algorithm.
  EXPECT_EQ(rng::draw(0, 0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng::fnv1a64(""), 0xCBF29CE484222325ull);
  EXPECT_EQ(rng::fnv1a64("a"), 0xAF63DC4C8601EC8Cull);
}

TEST(InitTest, SameSeedAndNameGiveSameBits) {
  auto spec = param("layer.0.weight", InitKind::Normal, 0.02, 1000);
  EXPECT_TRUE(sameBits(init(spec, 7), init(spec, 7)));
}

TEST(InitTest, NameAndSeedChangeTheValues) {
  auto a = param("layer.0.weight", InitKind::Normal, 0.02, 1000);
  auto b = param("layer.1.weight", InitKind::Normal, 0.02, 1000);
  EXPECT_FALSE(sameBits(init(a, 7), init(b, 7)));
  EXPECT_FALSE(sameBits(init(a, 7), init(a, 8)));
}

TEST(InitTest, ShardsMatchTheFullTensor) {
  auto spec = param("w", InitKind::Uniform, 0.5, 1001);
  auto full = init(spec, 3);
  std::vector<float> shard(300);
  initParameter(spec, 3, 500, 800, shard.data());
  EXPECT_EQ(0, std::memcmp(shard.data(), full.data() + 500, 300 * 4));
}

TEST(InitTest, ShardStorageIsTheSliceOfTheFullInitBitForBit) {
  // 1001 elements on N ranks in shards of E >= ceil(1001 / N), some with
  // extra padding (E = 400 on 4 ranks leaves rank 3 with padding only): the
  // concatenated storage must be the full init followed by zeros, for every
  // init kind (ones and normal must not leak into the padding).
  struct Layout {
    int64_t ranks, elems;
  };
  for (InitKind kind :
       {InitKind::Zeros, InitKind::Ones, InitKind::Normal, InitKind::Uniform}) {
    auto spec = param("w", kind, 0.5, 1001);
    std::vector<float> full = init(spec, 3);
    for (Layout layout : {Layout{1, 1001}, Layout{2, 501}, Layout{3, 334},
                          Layout{4, 251}, Layout{4, 400}}) {
      SCOPED_TRACE("init kind " + std::to_string(static_cast<int>(kind)) +
                   ", " + std::to_string(layout.ranks) + " ranks of " +
                   std::to_string(layout.elems));
      auto sharded = stored(spec, StoreMode::Shard, layout.elems);
      std::vector<float> concatenated;
      for (int64_t r = 0; r < layout.ranks; ++r) {
        std::vector<float> shard = initStorage(sharded, 3, r);
        concatenated.insert(concatenated.end(), shard.begin(), shard.end());
      }
      std::vector<float> expected = full;
      expected.resize(layout.ranks * layout.elems, 0.0f);
      EXPECT_TRUE(sameBits(concatenated, expected));
    }
  }
}

TEST(InitTest, FullStorageIsTheWholeInitThenZeros) {
  for (InitKind kind : {InitKind::Ones, InitKind::Normal}) {
    auto spec = param("w", kind, 0.5, 7);
    std::vector<float> expected = init(spec, 5);
    expected.resize(8, 0.0f);
    auto padded = stored(spec, StoreMode::Full, 8);
    // Every rank holds the same full, padded tensor.
    for (int64_t r = 0; r < 4; ++r)
      EXPECT_TRUE(sameBits(initStorage(padded, 5, r), expected))
          << "rank " << r;
  }
}

TEST(InitTest, NormalHasRequestedMoments) {
  const int64_t n = 200000;
  auto values = init(param("w", InitKind::Normal, 2.0, n), 1);
  double sum = 0, sq = 0;
  for (float v : values) {
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  double mean = sum / n, var = sq / n - mean * mean;
  // Standard error of the mean is 2/sqrt(n) ~ 0.0045: allow ~5 sigma.
  EXPECT_NEAR(mean, 0.0, 0.025);
  // Standard error of the variance is var*sqrt(2/n) ~ 0.0127: ~5 sigma.
  EXPECT_NEAR(var, 4.0, 0.065);
}

TEST(InitTest, UniformStaysInRangeAndCentred) {
  const int64_t n = 100000;
  auto values = init(param("w", InitKind::Uniform, 0.1, n), 1);
  double sum = 0;
  for (float v : values) {
    EXPECT_GE(v, -0.1f);
    EXPECT_LT(v, 0.1f);
    sum += v;
  }
  // Standard error 0.1/sqrt(3n) ~ 1.8e-4: allow ~5 sigma.
  EXPECT_NEAR(sum / n, 0.0, 1e-3);
}

TEST(InitTest, ZerosAndOnes) {
  for (float v : init(param("z", InitKind::Zeros, 5, 10), 1))
    EXPECT_EQ(v, 0.0f);
  for (float v : init(param("o", InitKind::Ones, 5, 10), 1))
    EXPECT_EQ(v, 1.0f);
}

namespace {

/// `spec` as a 16-bit parameter of type `type` (2-byte elements).
ParamSpec sixteen(ParamSpec spec, ElemType type) {
  spec.type = type;
  spec.bytes = 2 * spec.numel;
  spec.storeBytes = 2 * spec.storeElems;
  return spec;
}

/// The f32 master state of `spec` stored as `mode` with E = `elems`.
StateSpec masterOf(const ParamSpec &spec, StoreMode mode, int64_t elems) {
  StateSpec master;
  master.name = spec.name + ".master";
  master.shape = spec.shape;
  master.numel = spec.numel;
  master.bytes = 4 * spec.numel;
  master.store = mode;
  master.storeElems = elems;
  master.storeBytes = 4 * elems;
  master.of = spec.name;
  master.master = true;
  return master;
}

std::vector<uint16_t> roundAll(const std::vector<float> &values,
                               ElemType type) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    out[i] = type == ElemType::BF16 ? bf16(values[i]).bits
                                    : f16(values[i]).bits;
  return out;
}

} // namespace

// Exact, no tolerance: a 16-bit parameter is by definition the f32 init of
// the same name rounded once (DType.h's conversion), and its master the f32
// init itself.
TEST(InitTest, SixteenBitParamsAreTheRoundedF32InitBitForBit) {
  for (ElemType type : {ElemType::BF16, ElemType::F16})
    for (InitKind kind : {InitKind::Normal, InitKind::Uniform, InitKind::Ones,
                          InitKind::Zeros}) {
      ParamSpec wide = param("layer.w", kind, 0.7, 37);
      std::vector<float> f32 = init(wide, 11);
      ParamSpec narrow = sixteen(wide, type);
      std::vector<uint16_t> got(37, 0xdead);
      initParameter(narrow, 11, 0, 37, got.data());
      EXPECT_EQ(got, roundAll(f32, type)) << elemTypeName(type);
      // The master holds the unrounded values.
      StateSpec master = masterOf(narrow, StoreMode::Full, 37);
      std::vector<float> m(37, -99.0f);
      initMasterStorage(master, narrow, 11, 0, m.data());
      EXPECT_TRUE(sameBits(m, f32));
    }
  // The random ones really do round (so the check above is not vacuous).
  ParamSpec wide = param("layer.w", InitKind::Normal, 0.7, 37);
  std::vector<float> f32 = init(wide, 11);
  int inexact = 0;
  for (float v : f32)
    inexact += static_cast<float>(bf16(v)) != v;
  EXPECT_GT(inexact, 30);
}

TEST(InitTest, ShardedSixteenBitParamsAndMastersAreSlicesOfTheFullInit) {
  // 10 elements in shards of 4 on 3 ranks: the last rank has 2 + 2 padding.
  ParamSpec wide = param("w", InitKind::Uniform, 0.3, 10);
  std::vector<float> f32 = init(wide, 5);
  for (ElemType type : {ElemType::BF16, ElemType::F16}) {
    ParamSpec spec = sixteen(stored(wide, StoreMode::Shard, 4), type);
    StateSpec master = masterOf(spec, StoreMode::Shard, 4);
    std::vector<uint16_t> rounded = roundAll(f32, type);
    for (int64_t rank = 0; rank < 3; ++rank) {
      std::vector<uint16_t> p(4, 0xdead);
      initParameterStorage(spec, 5, rank, p.data());
      std::vector<float> m(4, -99.0f);
      initMasterStorage(master, spec, 5, rank, m.data());
      for (int64_t i = 0; i < 4; ++i) {
        int64_t g = rank * 4 + i;
        EXPECT_EQ(p[i], g < 10 ? rounded[g] : 0) << rank << " " << i;
        float want = g < 10 ? f32[g] : 0.0f;
        EXPECT_EQ(std::memcmp(&m[i], &want, 4), 0) << rank << " " << i;
      }
    }
  }
  // A replicated parameter with a sharded master (ZeRO-1): each rank's
  // master slice, the whole rounded parameter.
  ParamSpec spec = sixteen(wide, ElemType::BF16);
  StateSpec master = masterOf(spec, StoreMode::Shard, 5);
  std::vector<float> m(5);
  initMasterStorage(master, spec, 5, 1, m.data());
  EXPECT_EQ(std::memcmp(m.data(), f32.data() + 5, 20), 0);
}

namespace {

SafetensorsTensor tensorOf(const char *dtype, std::vector<int64_t> shape,
                           const void *data, size_t bytes) {
  SafetensorsTensor t;
  t.name = "w";
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = static_cast<const char *>(data);
  t.bytes = bytes;
  return t;
}

} // namespace

TEST(InitTest, InitFileConversionsForSixteenBitParams) {
  ParamSpec spec = sixteen(param("w", InitKind::Zeros, 0, 4), ElemType::BF16);
  spec = stored(spec, StoreMode::Shard, 3);
  spec.storeBytes = 6;
  StateSpec master = masterOf(spec, StoreMode::Shard, 3);
  // 1 + 2^-8 is not a bf16 value (it rounds to 1): the master keeps it.
  const float values[4] = {1.0f + 0x1p-8f, -2.0f, 0.5f, 3.0f};
  SafetensorsTensor f32 = tensorOf("F32", {4}, values, sizeof(values));
  uint16_t p[3];
  float m[3];
  // F32 with a master: master = the values, param = their rounding. Exact.
  EXPECT_EQ(loadInitTensor(spec, &master, f32, 1, p, m), "");
  EXPECT_EQ(p[0], bf16(3.0f).bits);
  EXPECT_EQ(p[1], 0); // padding
  EXPECT_EQ(m[0], 3.0f);
  EXPECT_EQ(m[1], 0.0f);
  EXPECT_EQ(loadInitTensor(spec, &master, f32, 0, p, m), "");
  EXPECT_EQ(p[0], bf16(1.0f).bits);
  EXPECT_EQ(std::memcmp(m, values, 12), 0);
  // BF16 with a master: param = the values, master = them widened (exact).
  const uint16_t halves[4] = {bf16(1.5f).bits, bf16(-0.25f).bits,
                              bf16(7.0f).bits, bf16(8.0f).bits};
  SafetensorsTensor b = tensorOf("BF16", {4}, halves, sizeof(halves));
  EXPECT_EQ(loadInitTensor(spec, &master, b, 0, p, m), "");
  EXPECT_EQ(std::memcmp(p, halves, 6), 0);
  EXPECT_EQ(m[0], 1.5f);
  EXPECT_EQ(m[1], -0.25f);
  EXPECT_EQ(m[2], 7.0f);
  // Without a master, F32 only when every value is exact in bf16.
  EXPECT_EQ(loadInitTensor(spec, nullptr, f32, 1, p, m),
            "tensor 'w' is F32 but parameter 'w' is bf16 and has no f32 "
            "master: converting it would lose precision (1 of 4 values are "
            "not exactly representable in bf16; store it as BF16)");
  // A frozen parameter is never updated: the file's values rounded (to
  // nearest even) are what it computes with.
  ParamSpec frozen = spec;
  frozen.frozen = true;
  EXPECT_EQ(loadInitTensor(frozen, nullptr, f32, 0, p, m), "");
  EXPECT_EQ(p[0], bf16(1.0f).bits); // 1 + 2^-8 is a tie: rounds to even
  EXPECT_EQ(p[1], bf16(-2.0f).bits);
  const float exact[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  SafetensorsTensor e = tensorOf("F32", {4}, exact, sizeof(exact));
  EXPECT_EQ(loadInitTensor(spec, nullptr, e, 1, p, m), "");
  EXPECT_EQ(p[0], bf16(3.0f).bits);
  // F16 with a master: the master holds the f16 values exactly, the bf16
  // parameter their rounding. 1 + 2^-10 is an f16 value, not a bf16 one.
  const uint16_t f16s[4] = {0x3c01 /* 1 + 2^-10 */, 0xc000 /* -2 */,
                            0x3800 /* 0.5 */, 0x4200 /* 3 */};
  SafetensorsTensor h = tensorOf("F16", {4}, f16s, sizeof(f16s));
  EXPECT_EQ(loadInitTensor(spec, &master, h, 0, p, m), "");
  EXPECT_EQ(m[0], 1.0f + 0x1p-10f);
  EXPECT_EQ(p[0], bf16(1.0f).bits);
  EXPECT_EQ(p[1], bf16(-2.0f).bits);
  // ... and without one it is refused like F32 (the rounding loses a value).
  EXPECT_EQ(loadInitTensor(spec, nullptr, h, 0, p, m),
            "tensor 'w' is F16 but parameter 'w' is bf16 and has no f32 "
            "master: converting it would lose precision (1 of 4 values are "
            "not exactly representable in bf16; store it as BF16)");
  // Not a float, or another shape: refused, naming the tensor.
  const int32_t ints[4] = {1, 2, 3, 4};
  SafetensorsTensor i32 = tensorOf("I32", {4}, ints, sizeof(ints));
  EXPECT_EQ(loadInitTensor(spec, &master, i32, 0, p, m),
            "tensor 'w' has dtype I32, the model expects F32, BF16 or F16");
  SafetensorsTensor s = tensorOf("F32", {2, 2}, values, sizeof(values));
  EXPECT_EQ(loadInitTensor(spec, &master, s, 0, p, m),
            "tensor 'w' has shape [2, 2], the model expects [4]");
  // An f32 parameter takes its own F32 as is, and BF16 / F16 widened:
  // exact, so no master is needed (a bf16 Hugging Face checkpoint).
  ParamSpec wide = param("w", InitKind::Zeros, 0, 4);
  float w[4];
  EXPECT_EQ(loadInitTensor(wide, nullptr, b, 0, w, nullptr), "");
  const float widened[4] = {1.5f, -0.25f, 7.0f, 8.0f};
  EXPECT_EQ(std::memcmp(w, widened, 16), 0);
  EXPECT_EQ(loadInitTensor(wide, nullptr, h, 0, w, nullptr), "");
  EXPECT_EQ(w[0], 1.0f + 0x1p-10f);
  EXPECT_EQ(w[3], 3.0f);
  EXPECT_EQ(loadInitTensor(wide, nullptr, f32, 0, w, nullptr), "");
  EXPECT_EQ(std::memcmp(w, values, 16), 0);
  EXPECT_EQ(loadInitTensor(wide, nullptr, i32, 0, w, nullptr),
            "tensor 'w' has dtype I32, the model expects F32, BF16 or F16");
  // An i32 parameter (hand-written descriptors have them) takes I32 as is.
  ParamSpec ints32 = param("w", InitKind::Zeros, 0, 4);
  ints32.type = ElemType::I32;
  int32_t got[4];
  EXPECT_EQ(loadInitTensor(ints32, nullptr, i32, 0, got, nullptr), "");
  EXPECT_EQ(std::memcmp(got, ints, 16), 0);
  EXPECT_EQ(loadInitTensor(ints32, nullptr, f32, 0, got, nullptr),
            "tensor 'w' has dtype F32, the model expects I32");
}

TEST(InitTest, InitFileValuesPastFp16RangeAreRefused) {
  ParamSpec spec = sixteen(param("w", InitKind::Zeros, 0, 3), ElemType::F16);
  StateSpec master = masterOf(spec, StoreMode::Full, 1);
  // 65504 is f16's largest value; 70000 rounds to infinity. A master does
  // not help: the parameter itself would be infinite.
  const float values[3] = {65504.0f, -70000.0f, 1.0f};
  SafetensorsTensor t = tensorOf("F32", {3}, values, sizeof(values));
  uint16_t p[3];
  float m[3];
  EXPECT_EQ(loadInitTensor(spec, &master, t, 0, p, m),
            "tensor 'w' element 1 is -70000, beyond f16's range (65504): "
            "parameter 'w' is f16");
  const float fine[3] = {65504.0f, -1.0f, 1.0f};
  SafetensorsTensor u = tensorOf("F32", {3}, fine, sizeof(fine));
  EXPECT_EQ(loadInitTensor(spec, &master, u, 0, p, m), "");
  EXPECT_EQ(p[0], 0x7bff);
}

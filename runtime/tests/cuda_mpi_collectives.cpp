//===- cuda_mpi_collectives.cpp - NCCL collectives across real ranks ------===//
//
// A GoogleTest program run under the MPI launcher (`mpiexec -n N
// ztrt_cuda_mpi_collectives`; CTest runs it for N = 2), one GPU per rank:
// the cuda backend's collectives, bootstrapped over MPI, against the cpu
// backend's rank-order reference computed on every rank.
//
// For N = 2 a sum is one float addition, which is commutative, so NCCL's
// result must equal the reference bitwise; for N > 2 NCCL's order differs
// from rank order and the difference is bounded by 2 (N-1) u sum_s |x_s|
// per element (each order's error is at most (N-1) u sum|x|, u = 2^-24).
// Every rank must hold the same bits either way. The bf16 and f16 suite
// (CudaMpiDTypeTest) compares against the rank-order float sum rounded once
// to the type; its tolerances are stated above it.
//
// Without as many GPUs as ranks on the node, every rank exits with 77,
// which CTest reports as skipped; rank 0 says why.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackend.h"
#include "comm/Communicator.h"
#include "step/Context.h"

#include "ztrt.h"

#include "MpiTestUtil.h"
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <mpi.h>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

using namespace ztrt;

namespace {

ztrt_ctx *ctx = nullptr;

#ifdef ZTRT_CUDA_EMULATOR
/// The emulator's NCCL (backends/cuda/emu/Nccl.cpp): 16-bit sums in float in rank
/// order, rounded once.
constexpr bool kEmulatedNccl = true;
#else
constexpr bool kEmulatedNccl = false;
#endif

int rank() { return static_cast<int>(ztrt_rank(ctx)); }
int ranks() { return static_cast<int>(ztrt_world_size(ctx)); }

float value(int r, int64_t i, uint32_t salt) {
  return ztrt::test::mixedValue(r, i, salt);
}

std::vector<float> values(int r, int64_t offset, int64_t n, uint32_t salt) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out[i] = value(r, offset + i, salt);
  return out;
}

void *upload(const std::vector<float> &host, int64_t extra = 0) {
  const int64_t bytes = static_cast<int64_t>(host.size()) * 4;
  void *dev = ztrt_alloc(ctx, bytes + extra, ZTRT_CAT_OTHER);
  ctx->backend().copyFromHost(dev, host.data(), bytes);
  return dev;
}

std::vector<float> download(const void *dev, int64_t n, int64_t offset = 0) {
  std::vector<float> out(static_cast<size_t>(n));
  ctx->backend().copyToHost(out.data(),
                            static_cast<const float *>(dev) + offset, n * 4);
  return out;
}

/// Checks a reduced result against the rank-order reference: bitwise for
/// two ranks, within 2 (N-1) u sum|x| otherwise; and, for a replicated
/// result (all-reduce; not a reduce-scatter's shard, which differs by rank),
/// that every rank holds the same bits.
void expectReduced(const std::vector<float> &got, int64_t offset, uint32_t salt,
                   bool mean, const char *what, bool replicated = true) {
  const int n = ranks();
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    float sum = value(0, offset + i, salt);
    double magnitude = std::fabs(sum);
    for (int s = 1; s < n; ++s) {
      sum += value(s, offset + i, salt);
      magnitude += std::fabs(value(s, offset + i, salt));
    }
    const float want = mean ? sum / static_cast<float>(n) : sum;
    const double bound =
        n == 2 ? 0.0
               : 2.0 * (n - 1) * std::ldexp(magnitude, -24) / (mean ? n : 1);
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want, 4);
    const bool ok =
        n == 2 ? a == b
               : std::fabs(static_cast<double>(got[i]) - want) <= bound;
    if (!ok && bad++ < 5)
      ADD_FAILURE() << "[rank " << rank() << "] " << what << "[" << i
                    << "]: " << got[i] << ", rank-order reference " << want;
  }
  if (!replicated)
    return;
  // Same bits on every rank.
  uint64_t hash = 1469598103934665603ull;
  for (float v : got) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    hash = (hash ^ bits) * 1099511628211ull;
  }
  std::vector<uint64_t> all(static_cast<size_t>(n));
  MPI_Allgather(&hash, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T,
                MPI_COMM_WORLD);
  for (int s = 1; s < n; ++s)
    EXPECT_EQ(all[s], all[0])
        << what << ": rank " << s << " differs from rank 0";
}

class CudaMpiTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(CudaMpiTest, AllReduceSumAndMean) {
  const int64_t n = GetParam();
  for (int mean : {0, 1}) {
    void *in = upload(values(rank(), 0, n, 1));
    void *out = ztrt_alloc(ctx, n * 4, ZTRT_CAT_OTHER);
    ztrt_all_reduce(ctx, ZTRT_F32, in, out, n, mean, 0);
    expectReduced(download(out, n), 0, 1, mean, "all_reduce");
    // In place, asynchronously.
    ztrt_wait(ctx, ztrt_all_reduce_start(ctx, ZTRT_F32, in, in, n, mean, 0));
    expectReduced(download(in, n), 0, 1, mean, "all_reduce in place");
    ztrt_free(ctx, in);
    ztrt_free(ctx, out);
  }
}

TEST_P(CudaMpiTest, ReduceScatterInEveryLayout) {
  const int64_t count = GetParam(), n = ranks();
  for (int layout = 0; layout < 3; ++layout) {
    void *in = upload(values(rank(), 0, n * count, 2));
    float *base = static_cast<float *>(in);
    // 0: separate output; 1: NCCL's in-place layout (out = in + rank *
    // count); 2: another overlap (out = in + the next rank's offset, never
    // the in-place layout), which the backend stages.
    float *out =
        layout == 0
            ? static_cast<float *>(ztrt_alloc(ctx, count * 4, ZTRT_CAT_OTHER))
        : layout == 1 ? base + rank() * count
                      : base + (rank() + 1) % n * count;
    ztrt_wait(ctx,
              ztrt_reduce_scatter_start(ctx, ZTRT_F32, in, out, count, 1, 0));
    expectReduced(download(out, count), rank() * count, 2, true,
                  layout == 0   ? "reduce_scatter"
                  : layout == 1 ? "reduce_scatter in place"
                                : "reduce_scatter overlapping",
                  /*replicated=*/false);
    if (layout == 0)
      ztrt_free(ctx, out);
    ztrt_free(ctx, in);
  }
}

TEST_P(CudaMpiTest, AllGatherInEveryLayout) {
  const int64_t count = GetParam(), n = ranks();
  std::vector<float> want;
  for (int s = 0; s < n; ++s) {
    std::vector<float> part = values(s, 0, count, 3);
    want.insert(want.end(), part.begin(), part.end());
  }
  for (int layout = 0; layout < 3; ++layout) {
    float *out =
        static_cast<float *>(ztrt_alloc(ctx, n * count * 4, ZTRT_CAT_OTHER));
    const std::vector<float> mine = values(rank(), 0, count, 3);
    float *in;
    if (layout == 0) {
      in = static_cast<float *>(upload(mine));
    } else {
      // 1: in place (in = out + rank * count); 2: in = out + the next
      // rank's offset (overlapping, never in place), staged.
      in = layout == 1 ? out + rank() * count : out + (rank() + 1) % n * count;
      ctx->backend().copyFromHost(in, mine.data(), count * 4);
    }
    ztrt_all_gather(ctx, ZTRT_F32, in, out, count, 0);
    std::vector<float> got = download(out, n * count);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
        << "[rank " << rank() << "] all_gather layout " << layout;
    if (layout == 0)
      ztrt_free(ctx, in);
    ztrt_free(ctx, out);
  }
}

TEST_P(CudaMpiTest, BroadcastFromEveryRoot) {
  const int64_t n = GetParam();
  for (int root = 0; root < ranks(); ++root) {
    void *buf = upload(values(rank(), 0, n, 4));
    ztrt_bcast(ctx, ZTRT_F32, buf, n, root);
    std::vector<float> got = download(buf, n), want = values(root, 0, n, 4);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), n * 4), 0)
        << "[rank " << rank() << "] bcast from " << root;
    ztrt_free(ctx, buf);
  }
}

TEST_P(CudaMpiTest, SeveralInFlightWaitedOutOfOrder) {
  // Each input is written on the compute stream just before its start and
  // each output copied on the compute stream just after its wait, so only
  // the backend's events order them against the collectives.
  const int64_t n = GetParam();
  std::vector<void *> sources, ins, outs, copies;
  std::vector<int64_t> handles;
  for (uint32_t k = 0; k < 4; ++k) {
    sources.push_back(upload(values(rank(), 0, n, 10 + k)));
    ins.push_back(ztrt_alloc(ctx, n * 4, ZTRT_CAT_OTHER));
    outs.push_back(ztrt_alloc(ctx, n * 4, ZTRT_CAT_OTHER));
    copies.push_back(ztrt_alloc(ctx, n * 4, ZTRT_CAT_OTHER));
  }
  for (uint32_t k = 0; k < 4; ++k) {
    ctx->backend().copy(sources[k], ins[k], n * 4);
    handles.push_back(
        ztrt_all_reduce_start(ctx, ZTRT_F32, ins[k], outs[k], n, 0, 0));
  }
  for (int k : {3, 1, 0, 2}) {
    ztrt_wait(ctx, handles[k]);
    ctx->backend().copy(outs[k], copies[k], n * 4);
  }
  ctx->synchronize();
  for (uint32_t k = 0; k < 4; ++k) {
    expectReduced(download(copies[k], n), 0, 10 + k, false, "in flight");
    for (void *p : {sources[k], ins[k], outs[k], copies[k]})
      ztrt_free(ctx, p);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaMpiTest,
                         ::testing::Values(int64_t(1), int64_t(1000),
                                           int64_t(1 << 20) + 5));

// --- bf16 and f16
// ----------------------------------------------------------------
//
// The same collectives on 2-byte elements (ncclBfloat16 / ncclFloat16).
// Reference: each element's rank-order sum of the widened values in float,
// divided by N in float for a mean, rounded once to T (the cpu backend's
// contract). On the emulator, whose NCCL sums 16-bit types in float in rank
// order and rounds once, that is exact for the sums: bitwise. A mean is the
// backend's division of the T sum by N in float, rounded again: when N is a
// power of two that division is exact for these inputs (multiples of
// 2^-16 below 2^7 in magnitude, so a T sum too small to halve exactly in
// the normal range is itself a multiple of 2^-16, which halves exactly in
// T's subnormals), so the mean is bitwise too; for other N it may differ
// by the second rounding, 1 ulp of T. On a GPU NCCL adds in T along its
// ring or tree, rounding at every step: the bound there is N (N-1) units
// of T's roundoff times sum|x| plus one spacing of T (see docs/cuda.md).

/// Rank r's element i as a value of T: mixed signs, magnitudes in
/// [2^-6, 2^7), rounded to T (bf16 keeps 8 significant bits, f16 11).
template <typename T> T valueT(int r, int64_t i, uint32_t salt) {
  uint32_t h = static_cast<uint32_t>(r) * 0x27D4EB2Fu ^
               static_cast<uint32_t>(i) * 0x165667B1u ^ salt * 0x9E3779B9u;
  h ^= h >> 15;
  h *= 0x85EBCA77u;
  h ^= h >> 13;
  const float fraction = static_cast<float>(h >> 8) / 16777216.0f;
  const float magnitude =
      std::ldexp(1.0f + fraction, static_cast<int>(h % 13) - 6);
  return static_cast<T>((h >> 4) & 1 ? -magnitude : magnitude);
}

template <typename T>
std::vector<T> valuesT(int r, int64_t offset, int64_t n, uint32_t salt) {
  std::vector<T> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out[i] = valueT<T>(r, offset + i, salt);
  return out;
}

template <typename T> void *uploadT(const std::vector<T> &host) {
  const int64_t bytes = static_cast<int64_t>(host.size() * sizeof(T));
  void *dev = ztrt_alloc(ctx, bytes, ZTRT_CAT_OTHER);
  ctx->backend().copyFromHost(dev, host.data(), bytes);
  return dev;
}

template <typename T>
std::vector<T> downloadT(const void *dev, int64_t n, int64_t offset = 0) {
  std::vector<T> out(static_cast<size_t>(n));
  ctx->backend().copyToHost(out.data(), static_cast<const T *>(dev) + offset,
                            n * static_cast<int64_t>(sizeof(T)));
  return out;
}

template <typename T> int32_t orderedBits(T v) {
  const int32_t magnitude = v.bits & 0x7fff;
  return (v.bits & 0x8000) ? -magnitude : magnitude;
}

/// A reduced T result against the rank-order float reference rounded to T
/// (tolerances in the section comment), and, when replicated, the same
/// bits on every rank.
template <typename T>
void expectReducedT(const std::vector<T> &got, int64_t offset, uint32_t salt,
                    bool mean, const std::string &what,
                    bool replicated = true) {
  const int n = ranks();
  const bool powerOfTwo = (n & (n - 1)) == 0;
  const int precision = std::is_same_v<T, bf16> ? 8 : 11;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    float sum = static_cast<float>(valueT<T>(0, offset + i, salt));
    double magnitude = std::fabs(sum);
    for (int s = 1; s < n; ++s) {
      const float x = static_cast<float>(valueT<T>(s, offset + i, salt));
      sum += x;
      magnitude += std::fabs(x);
    }
    const T want = static_cast<T>(mean ? sum / static_cast<float>(n) : sum);
    bool ok;
    if (kEmulatedNccl) {
      const int32_t apart = std::abs(orderedBits(got[i]) - orderedBits(want));
      ok = apart == 0 || (mean && !powerOfTwo && apart <= 1);
    } else {
      const double spacing = std::ldexp(1.0, 1 - precision);
      const double bound = static_cast<double>(n) * (n - 1) *
                               std::ldexp(1.0, -precision) * magnitude /
                               (mean ? n : 1) +
                           spacing * std::fabs(static_cast<float>(want));
      ok = std::fabs(static_cast<double>(static_cast<float>(got[i])) -
                     static_cast<float>(want)) <= bound;
    }
    if (!ok && bad++ < 5)
      ADD_FAILURE() << "[rank " << rank() << "] "
                    << dtypeName(DTypeOf<T>::value) << " " << what << "[" << i
                    << "]: " << static_cast<float>(got[i])
                    << ", rank-order reference rounded "
                    << static_cast<float>(want);
  }
  if (!replicated)
    return;
  uint64_t hash = 1469598103934665603ull;
  for (T v : got)
    hash = (hash ^ v.bits) * 1099511628211ull;
  std::vector<uint64_t> all(static_cast<size_t>(n));
  MPI_Allgather(&hash, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T,
                MPI_COMM_WORLD);
  for (int s = 1; s < n; ++s)
    EXPECT_EQ(all[s], all[0])
        << what << ": rank " << s << " differs from rank 0";
}

template <typename T> void allReduceT(int64_t n) {
  const int32_t ty = static_cast<int32_t>(DTypeOf<T>::value);
  for (int mean : {0, 1}) {
    void *in = uploadT(valuesT<T>(rank(), 0, n, 1));
    void *out =
        ztrt_alloc(ctx, n * static_cast<int64_t>(sizeof(T)), ZTRT_CAT_OTHER);
    const int64_t wireBefore =
        ctx->communication(Collective::AllReduce).wireBytes;
    ztrt_all_reduce(ctx, ty, in, out, n, mean, 0);
    // The bytes handed to NCCL: the ring's 2 (N-1) / N of the payload in
    // T's 2-byte elements, half of what float moves.
    EXPECT_EQ(ctx->communication(Collective::AllReduce).wireBytes - wireBefore,
              2 * (ranks() - 1) * n * static_cast<int64_t>(sizeof(T)) /
                  ranks());
    expectReducedT(downloadT<T>(out, n), 0, 1, mean, "all_reduce");
    ztrt_wait(ctx, ztrt_all_reduce_start(ctx, ty, in, in, n, mean, 0));
    expectReducedT(downloadT<T>(in, n), 0, 1, mean, "all_reduce in place");
    ztrt_free(ctx, in);
    ztrt_free(ctx, out);
  }
}

template <typename T> void reduceScatterT(int64_t count) {
  const int32_t ty = static_cast<int32_t>(DTypeOf<T>::value);
  const int64_t n = ranks();
  for (int layout = 0; layout < 3; ++layout)
    for (int mean : {0, 1}) {
      void *in = uploadT(valuesT<T>(rank(), 0, n * count, 2));
      T *base = static_cast<T *>(in);
      // As for float: separate, NCCL's in place, another overlap (staged).
      T *out = layout == 0   ? static_cast<T *>(ztrt_alloc(
                                   ctx, count * static_cast<int64_t>(sizeof(T)),
                                   ZTRT_CAT_OTHER))
               : layout == 1 ? base + rank() * count
                             : base + (rank() + 1) % n * count;
      ztrt_wait(ctx,
                ztrt_reduce_scatter_start(ctx, ty, in, out, count, mean, 0));
      expectReducedT(downloadT<T>(out, count), rank() * count, 2, mean,
                     "reduce_scatter layout " + std::to_string(layout),
                     /*replicated=*/false);
      if (layout == 0)
        ztrt_free(ctx, out);
      ztrt_free(ctx, in);
    }
}

template <typename T> void allGatherT(int64_t count) {
  const int32_t ty = static_cast<int32_t>(DTypeOf<T>::value);
  const int64_t n = ranks(), elem = static_cast<int64_t>(sizeof(T));
  std::vector<T> want;
  for (int s = 0; s < n; ++s) {
    std::vector<T> part = valuesT<T>(s, 0, count, 3);
    want.insert(want.end(), part.begin(), part.end());
  }
  for (int layout = 0; layout < 3; ++layout) {
    T *out =
        static_cast<T *>(ztrt_alloc(ctx, n * count * elem, ZTRT_CAT_OTHER));
    const std::vector<T> mine = valuesT<T>(rank(), 0, count, 3);
    T *in;
    if (layout == 0) {
      in = static_cast<T *>(uploadT(mine));
    } else {
      in = layout == 1 ? out + rank() * count : out + (rank() + 1) % n * count;
      ctx->backend().copyFromHost(in, mine.data(), count * elem);
    }
    ztrt_all_gather(ctx, ty, in, out, count, 0);
    std::vector<T> got = downloadT<T>(out, n * count);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0)
        << "[rank " << rank() << "] " << dtypeName(DTypeOf<T>::value)
        << " all_gather layout " << layout;
    if (layout == 0)
      ztrt_free(ctx, in);
    ztrt_free(ctx, out);
  }
}

template <typename T> void broadcastT(int64_t n) {
  const int32_t ty = static_cast<int32_t>(DTypeOf<T>::value);
  for (int root = 0; root < ranks(); ++root) {
    void *buf = uploadT(valuesT<T>(rank(), 0, n, 4));
    ztrt_bcast(ctx, ty, buf, n, root);
    std::vector<T> got = downloadT<T>(buf, n), want = valuesT<T>(root, 0, n, 4);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(T)), 0)
        << "[rank " << rank() << "] " << dtypeName(DTypeOf<T>::value)
        << " bcast from " << root;
    ztrt_free(ctx, buf);
  }
}

/// fn(T{}) for T the 16-bit type of `type` (the suite's parameter).
template <typename Fn> void dispatch16(DType type, Fn fn) {
  if (type == DType::BF16)
    fn(bf16{});
  else
    fn(f16{});
}

class CudaMpiDTypeTest
    : public ::testing::TestWithParam<std::tuple<DType, int64_t>> {
protected:
  DType type() const { return std::get<0>(GetParam()); }
  int64_t size() const { return std::get<1>(GetParam()); }
};

TEST_P(CudaMpiDTypeTest, AllReduceSumAndMean) {
  dispatch16(type(), [&](auto tag) { allReduceT<decltype(tag)>(size()); });
}

TEST_P(CudaMpiDTypeTest, ReduceScatterInEveryLayout) {
  dispatch16(type(), [&](auto tag) { reduceScatterT<decltype(tag)>(size()); });
}

TEST_P(CudaMpiDTypeTest, AllGatherInEveryLayout) {
  dispatch16(type(), [&](auto tag) { allGatherT<decltype(tag)>(size()); });
}

TEST_P(CudaMpiDTypeTest, BroadcastFromEveryRoot) {
  dispatch16(type(), [&](auto tag) { broadcastT<decltype(tag)>(size()); });
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, CudaMpiDTypeTest,
    ::testing::Combine(::testing::Values(DType::BF16, DType::F16),
                       ::testing::Values(int64_t(1), int64_t(1000),
                                         int64_t(1 << 20) + 5)),
    [](const ::testing::TestParamInfo<std::tuple<DType, int64_t>> &info) {
      return std::string(dtypeName(std::get<0>(info.param))) + "_" +
             std::to_string(std::get<1>(info.param));
    });

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!launchedByMpi()) {
    std::fprintf(stderr, "usage: mpiexec -n N %s\n", argv[0]);
    return 2;
  }
  std::unique_ptr<Communicator> world = Communicator::initWorld(&argc, &argv);
  // Skip on every rank, or on none.
  std::string why;
  const int devices = cudaDeviceCount(&why);
  int usable = devices > 0 && devices >= world->localCount() ? 1 : 0;
  if (devices > 0 && !usable)
    why = std::to_string(world->localCount()) + " ranks on this node but " +
          std::to_string(devices) + " CUDA device(s)";
  if (devices == 0)
    why = "no CUDA device: " + why;
  int allUsable = usable;
  MPI_Allreduce(&usable, &allUsable, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!allUsable) {
    if (world->rank() == 0)
      std::printf("SKIPPED: %s\n",
                  why.empty() ? "another rank has no GPU" : why.c_str());
    return 77;
  }
  CudaOptions options;
  options.device = selectCudaDevice(world->params());
  ztrt_ctx context(createCudaBackend(options), std::move(world));
  ctx = &context;
  int failed = RUN_ALL_TESTS();
  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return anyFailed ? 1 : 0;
}

//===- CudaEmulatorTest.cpp - The CUDA emulator's own semantics -----------===//
//
// The emulator (runtime/backends/cuda/emu, docs/cuda.md#the-cuda-emulator) stands in
// for a GPU in CI, so what it claims to check must be checked: warp and
// block intrinsics compute what CUDA's do; stream order, events and
// cudaStreamWaitEvent order work across streams; and what a GPU faults on
// or NCCL / cuBLAS refuse is refused here too, with a message. A fault is
// sticky for the process (as on a GPU), so each one runs in a death test.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/emu/Device.h"
#include "base/DType.h"

#include <cublas_v2.h>
#include <cuda_pipeline.h>
#include <nccl.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

// --- Kernels -------------------------------------------------------------------

__global__ void warpSums(const float *x, float *out) {
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void ballots(const int *flags, unsigned *out) {
  out[threadIdx.x] = __ballot_sync(0xffffffffu, flags[threadIdx.x]);
}

/// Each thread writes its slot, then (after the barrier) reads its
/// neighbour's: correct only if the barrier holds every thread back.
__global__ void rotate(int *out) {
  __shared__ int slots[256];
  slots[threadIdx.x] = static_cast<int>(threadIdx.x) * 10;
  __syncthreads();
  out[threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];
}

__global__ void anyOdd(const int *x, int *out) {
  out[threadIdx.x] = __syncthreads_or(x[threadIdx.x] % 2);
}

__global__ void fillValue(float *out, float v, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = v;
}

__global__ void divergentBarrier(int *out) {
  if (threadIdx.x < 32) // Half the block never reaches the barrier.
    __syncthreads();
  out[threadIdx.x] = 1;
}

/// Half a warp at a block barrier, the other half at a shuffle that needs
/// the first half: neither can complete.
__global__ void barrierShuffleDeadlock(int *out) {
  if (threadIdx.x < 16)
    __syncthreads();
  else
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

__global__ void shuffleAfterExit(float *out) {
  if (threadIdx.x % 32 == 5)
    return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

/// Each thread copies 16 bytes (4 ints) of x into shared memory
/// asynchronously, zero-filling the words of odd threads: before its wait
/// it records what the destination holds (all ones: a copy lands at the
/// wait), after the wait and a barrier it reads its neighbour's words.
__global__ void asyncCopies(const int *x, int *before, int *after) {
  alignas(16) __shared__ int words[64 * 4];
  const unsigned t = threadIdx.x;
  for (int e = 0; e < 4; ++e)
    words[t * 4 + e] = 7;
  __pipeline_memcpy_async(&words[t * 4], &x[t * 4], 16, t % 2 ? 16 : 0);
  __pipeline_commit();
  before[t] = words[t * 4 + 1];
  __pipeline_wait_prior(0);
  __syncthreads();
  const unsigned n = (t + 1) % blockDim.x;
  after[t] = words[n * 4] + words[n * 4 + 3];
}

/// Two commit groups; waiting for all but the newest lands the first only.
__global__ void asyncGroups(const int *x, int *out) {
  alignas(16) __shared__ int a[4], b[4];
  a[0] = b[0] = 7;
  __pipeline_memcpy_async(a, x, 16);
  __pipeline_commit();
  __pipeline_memcpy_async(b, x + 4, 16);
  __pipeline_commit();
  __pipeline_wait_prior(1);
  out[0] = a[0];
  out[1] = b[0]; // all ones until its wait
  __pipeline_wait_prior(0);
  out[2] = b[0];
  __pipeline_commit(); // an empty group left behind is no copy: no fault
}

__global__ void asyncNeverWaited(const int *x) {
  alignas(16) __shared__ int words[4];
  __pipeline_memcpy_async(words, x, 16);
  __pipeline_commit();
}

__global__ void asyncMisaligned(const int *x) {
  alignas(16) __shared__ int words[8];
  __pipeline_memcpy_async(words + 1, x, 16);
  __pipeline_commit();
  __pipeline_wait_prior(0);
}

template <typename T> T *deviceArray(const std::vector<T> &host) {
  void *p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T *>(p);
}

template <typename T> std::vector<T> hostCopy(const T *dev, size_t n) {
  std::vector<T> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return out;
}

// --- Intrinsics ----------------------------------------------------------------

TEST(CudaEmulatorTest, WarpShuffleSumsEveryLane) {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(i);
  float *dx = deviceArray(x), *dout = deviceArray(std::vector<float>(64));
  ZTRT_LAUNCH(1, 64, 0, nullptr, warpSums)(dx, dout);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> got = hostCopy(dout, 64);
  // Exact: small integers. Warp 0 sums 0..31, warp 1 sums 32..63.
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(got[i], i < 32 ? 496.0f : 1520.0f) << i;
  cudaFree(dx);
  cudaFree(dout);
}

TEST(CudaEmulatorTest, BallotAndSyncthreadsOr) {
  std::vector<int> flags(32, 0);
  flags[3] = flags[17] = flags[31] = 1;
  int *dflags = deviceArray(flags);
  unsigned *dballot = deviceArray(std::vector<unsigned>(32));
  ZTRT_LAUNCH(1, 32, 0, nullptr, ballots)(dflags, dballot);
  for (unsigned b : hostCopy(dballot, 32))
    EXPECT_EQ(b, (1u << 3) | (1u << 17) | (1u << 31));

  std::vector<int> even(64, 2), one(64, 2);
  one[40] = 7;
  int *dEven = deviceArray(even), *dOne = deviceArray(one);
  int *dout = deviceArray(std::vector<int>(64));
  ZTRT_LAUNCH(1, 64, 0, nullptr, anyOdd)(dEven, dout);
  for (int v : hostCopy(dout, 64))
    EXPECT_EQ(v, 0);
  ZTRT_LAUNCH(1, 64, 0, nullptr, anyOdd)(dOne, dout);
  for (int v : hostCopy(dout, 64))
    EXPECT_EQ(v, 1);
}

TEST(CudaEmulatorTest, SyncthreadsHoldsTheBlockBack) {
  int *dout = deviceArray(std::vector<int>(256));
  ZTRT_LAUNCH(1, 256, 0, nullptr, rotate)(dout);
  std::vector<int> got = hostCopy(dout, 256);
  for (int i = 0; i < 256; ++i)
    EXPECT_EQ(got[i], (i + 1) % 256 * 10) << i;
}

TEST(CudaEmulatorTest, AsynchronousCopiesLandAtTheirWait) {
  std::vector<int> x(64 * 4);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<int>(i);
  int *dx = deviceArray(x);
  int *before = deviceArray(std::vector<int>(64)),
      *after = deviceArray(std::vector<int>(64));
  ZTRT_LAUNCH(1, 64, 0, nullptr, asyncCopies)(dx, before, after);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int v : hostCopy(before, 64))
    EXPECT_EQ(v, -1); // all ones: not yet landed, what a reader that skips the wait sees
  std::vector<int> got = hostCopy(after, 64);
  for (int t = 0; t < 64; ++t) {
    const int n = (t + 1) % 64;
    // Odd threads' words are zero-filled; even ones' are x's.
    EXPECT_EQ(got[t], n % 2 ? 0 : x[n * 4] + x[n * 4 + 3]) << t;
  }

  int *out = deviceArray(std::vector<int>(3));
  ZTRT_LAUNCH(1, 32, 0, nullptr, asyncGroups)(dx, out);
  std::vector<int> groups = hostCopy(out, 3);
  EXPECT_EQ(groups[0], 0);  // the older group: landed
  EXPECT_EQ(groups[1], -1); // the newest: not yet (all ones)
  EXPECT_EQ(groups[2], 4);  // after waiting for all
  cudaFree(dx);
  cudaFree(before);
  cudaFree(after);
  cudaFree(out);
}

TEST(CudaEmulatorTest, InvalidLaunchConfigurationLaunchesNothing) {
  int *dout = deviceArray(std::vector<int>(4, 0));
  ZTRT_LAUNCH(1, 2048, 0, nullptr, rotate)(dout); // > 1024 threads
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ZTRT_LAUNCH(dim3(1, 70000), 32, 0, nullptr, rotate)(dout); // grid y > 65535
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ZTRT_LAUNCH(0u, 32, 0, nullptr, rotate)(dout); // empty grid
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess); // Not sticky.
  for (int v : hostCopy(dout, 4))
    EXPECT_EQ(v, 0);
}

// --- Streams and events --------------------------------------------------------

TEST(CudaEmulatorTest, StreamWaitEventOrdersAcrossStreams) {
  // s1 fills slowly (a large grid); s2 copies the result after waiting for
  // s1's event. Without the wait, s2 would copy zeros.
  const int64_t n = 1 << 18;
  cudaStream_t s1, s2;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t done;
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
            cudaSuccess);
  float *a = deviceArray(std::vector<float>(n, 0.0f));
  float *b = deviceArray(std::vector<float>(n, 0.0f));
  ZTRT_LAUNCH(64, 256, 0, s1, fillValue)(a, 3.0f, n);
  ASSERT_EQ(cudaEventRecord(done, s1), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s2, done, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b, a, n * 4, cudaMemcpyDeviceToDevice, s2),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(done), cudaSuccess);
  for (float v : hostCopy(b, n))
    ASSERT_EQ(v, 3.0f);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, done, done),
            cudaErrorInvalidResourceHandle); // timing disabled
  cudaGetLastError();
  cudaEventDestroy(done);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  cudaFree(a);
  cudaFree(b);
}

TEST(CudaEmulatorTest, StreamsAndEventsBelongToTheirThreadsDevice) {
  // cudaSetDevice is per thread: a thread that never called it creates on
  // device 0, and an event of one device recorded on another device's
  // stream is an invalid handle, as on a GPU (the host step thread binds
  // its rank's device for this reason).
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    cudaGetLastError();
    GTEST_SKIP() << "needs two emulated devices (ZTRT_CUDAEMU_DEVICES)";
  }
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t s1;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::thread([&] {
    ASSERT_EQ(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming),
              cudaSuccess);
  }).join();
  ASSERT_EQ(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming),
            cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e0, s1), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  EXPECT_EQ(cudaEventRecord(e1, s1), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  // Waiting on another device's event is fine (CUDA allows it).
  cudaStream_t s0 = nullptr;
  std::thread([&] {
    ASSERT_EQ(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking),
              cudaSuccess);
  }).join();
  EXPECT_EQ(cudaStreamWaitEvent(s0, e1, 0), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s0), cudaSuccess);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s0);
  cudaStreamDestroy(s1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

TEST(CudaEmulatorTest, PageableCopiesCompleteOnReturnPinnedOnesAtSync) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  float *d = deviceArray(std::vector<float>(4, 5.0f));
  std::vector<float> pageable(4, 0.0f);
  ASSERT_EQ(cudaMemcpyAsync(pageable.data(), d, 16, cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  EXPECT_EQ(pageable[3], 5.0f);
  float *pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 16), cudaSuccess);
  pinned[0] = 0.0f;
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, 16, cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(pinned[0], 5.0f);
  cudaFreeHost(pinned);
  cudaStreamDestroy(s);
  cudaFree(d);
}

// zero-offload's host memory on a device (docs/offload.md): mapped pinned
// memory is device-accessible (kernels write it in place), registered host
// memory takes asynchronous copies, and neither can be freed the wrong way.
TEST(CudaEmulatorTest, MappedHostMemoryIsWrittenInPlaceByKernels) {
  float *host = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void **>(&host), 64 * sizeof(float),
                          cudaHostAllocMapped | cudaHostAllocPortable),
            cudaSuccess);
  void *device = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&device, host, 0), cudaSuccess);
  EXPECT_EQ(device, host); // unified addressing
  ZTRT_LAUNCH(2, 32, 0, nullptr, fillValue)(host, 7.0f, 64);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(host[0], 7.0f);
  EXPECT_EQ(host[63], 7.0f);
  // Unmapped pinned memory has no device address.
  float *unmapped = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void **>(&unmapped), 16),
            cudaSuccess);
  EXPECT_EQ(cudaHostGetDevicePointer(&device, unmapped, 0),
            cudaErrorInvalidValue);
  cudaGetLastError();
  EXPECT_EQ(cudaFreeHost(unmapped), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(host), cudaSuccess);
}

TEST(CudaEmulatorTest, RegisteredHostMemoryTakesAsynchronousCopies) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  std::vector<float> staging(256, 3.0f);
  ASSERT_EQ(cudaHostRegister(staging.data(), staging.size() * sizeof(float),
                             cudaHostRegisterPortable),
            cudaSuccess);
  // Twice, or overlapping: refused.
  EXPECT_EQ(cudaHostRegister(staging.data() + 4, 16, 0), cudaErrorInvalidValue);
  cudaGetLastError();
  float *d = deviceArray(std::vector<float>(256, 0.0f));
  ASSERT_EQ(cudaMemcpyAsync(d, staging.data(), 1024, cudaMemcpyHostToDevice, s),
            cudaSuccess);
  cudaEvent_t e;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(e), cudaSuccess);
  EXPECT_EQ(hostCopy(d, 256)[255], 3.0f);
  ASSERT_EQ(cudaMemcpyAsync(staging.data(), d, 4, cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  // Registered memory is the program's: cudaFreeHost refuses it.
  EXPECT_EQ(cudaFreeHost(staging.data()), cudaErrorInvalidValue);
  cudaGetLastError();
  EXPECT_EQ(cudaHostUnregister(staging.data()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(staging.data()), cudaErrorInvalidValue);
  cudaGetLastError();
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
  cudaFree(d);
}

TEST(CudaEmulatorTest, MisusedCopiesAreRefused) {
  float host[4] = {};
  float *d = deviceArray(std::vector<float>(4));
  // Wrong kind, and an extent past the allocation.
  EXPECT_EQ(cudaMemcpy(d, host, 16, cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, host, 32, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(host), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue); // twice
  cudaGetLastError();
}

TEST(CudaEmulatorTest, CublasChecksItsArguments) {
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  float *a = deviceArray(std::vector<float>(6, 1.0f)); // 2 x 3
  float *c = deviceArray(std::vector<float>(4, 0.0f));
  const float one = 1, zero = 0;
  // C (2x2) = A (2x3) * A^T (3x2), column-major: lda = 2.
  EXPECT_EQ(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, 2, 2, 3, &one,
                                      a, 2, 0, a, 2, 0, &zero, c, 2, 0, 1),
            CUBLAS_STATUS_SUCCESS);
  for (float v : hostCopy(c, 4))
    EXPECT_EQ(v, 3.0f);
  // lda below the rows of A.
  EXPECT_EQ(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, 2, 2, 3, &one,
                                      a, 1, 0, a, 2, 0, &zero, c, 2, 0, 1),
            CUBLAS_STATUS_INVALID_VALUE);
  cublasDestroy(h);
}

TEST(CudaEmulatorTest, GemmExWidensAccumulatesInFloatAndRoundsOnce) {
  // C (2x2) = A (2x3) * B (3x2, ones) in bf16 and f16 with
  // CUBLAS_COMPUTE_32F: products and sums in float, one rounding to the
  // type. Row 0 of A is (1, s, s) with s half a spacing of the type at 1
  // (bf16: 2^-8, f16: 2^-11): the float sum 1 + 2s is a value of the type,
  // whereas rounding after each addition would give 1 (1 + s is a tie,
  // rounded to the even 1, twice). Row 1 is (1, 1, 1): 3.
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  auto run = [&](auto tag, cudaDataType type, int halfSpacing) {
    using T = decltype(tag);
    const float s = std::ldexp(1.0f, halfSpacing);
    const float rows[2][3] = {{1.0f, s, s}, {1.0f, 1.0f, 1.0f}};
    // Column-major 2 x 3: element (r, c) at r + 2c.
    std::vector<T> a(6);
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c)
        a[r + 2 * c] = static_cast<T>(rows[r][c]);
    T *da = deviceArray(a);
    T *db = deviceArray(std::vector<T>(6, static_cast<T>(1.0f)));
    T *dc = deviceArray(std::vector<T>(4, static_cast<T>(0.0f)));
    const float one = 1, zero = 0;
    ASSERT_EQ(cublasGemmStridedBatchedEx(
                  h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, type, 2, 0,
                  db, type, 3, 0, &zero, dc, type, 2, 0, 1, CUBLAS_COMPUTE_32F,
                  CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    std::vector<T> got = hostCopy(dc, 4);
    const T once = static_cast<T>(1.0f + 2 * s), three = static_cast<T>(3.0f);
    ASSERT_NE(once.bits, static_cast<T>(1.0f).bits);
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(got[2 * j].bits, once.bits) << "type " << type << " C[0]";
      EXPECT_EQ(got[1 + 2 * j].bits, three.bits) << "type " << type << " C[1]";
    }
    // A float C (train.matmul_acc's accumulator): the float sum, not
    // rounded to T, added to C (beta = 1).
    std::vector<float> c0 = {0.25f, 0.5f, 0.75f, 1.0f};
    float *dcf = deviceArray(c0);
    ASSERT_EQ(cublasGemmStridedBatchedEx(
                  h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, type, 2, 0,
                  db, type, 3, 0, &one, dcf, CUDA_R_32F, 2, 0, 1,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    std::vector<float> gotf = hostCopy(dcf, 4);
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(gotf[2 * j], (1.0f + 2 * s) + c0[2 * j]) << "type " << type;
      EXPECT_EQ(gotf[1 + 2 * j], 3.0f + c0[1 + 2 * j]) << "type " << type;
    }
    cudaFree(dcf);
    // Other mixed types and other compute types are not emulated: refused.
    EXPECT_EQ(cublasGemmStridedBatchedEx(
                  h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, type, 2, 0,
                  db, CUDA_R_32F, 3, 0, &zero, dc, type, 2, 0, 1,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(cublasGemmStridedBatchedEx(
                  h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, type, 2, 0,
                  db, type, 3, 0, &zero, dc, type, 2, 0, 1, CUBLAS_COMPUTE_16F,
                  CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_NOT_SUPPORTED);
    // cuBLAS's argument checks, as for sgemm: lda below the rows of A.
    EXPECT_EQ(cublasGemmStridedBatchedEx(
                  h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, type, 1, 0,
                  db, type, 3, 0, &zero, dc, type, 2, 0, 1, CUBLAS_COMPUTE_32F,
                  CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_INVALID_VALUE);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
  };
  run(ztrt::bf16{}, CUDA_R_16BF, -8);
  run(ztrt::f16{}, CUDA_R_16F, -11);
  cublasDestroy(h);
}

TEST(CudaEmulatorTest, NcclRefusesTypesItDoesNotImplement) {
  // float32, bfloat16 and float16 are emulated; anything else is refused
  // (not silently summed as something else).
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  int *buf = deviceArray(std::vector<int>(8, 1));
  EXPECT_EQ(ncclAllReduce(buf, buf, 8, ncclInt32, ncclSum, comm, nullptr),
            ncclInvalidUsage);
  uint16_t *half = deviceArray(std::vector<uint16_t>(8, 0x3c00));
  for (ncclDataType_t type : {ncclBfloat16, ncclFloat16})
    EXPECT_EQ(ncclAllReduce(half, half, 8, type, ncclSum, comm, nullptr),
              ncclSuccess);
  ncclCommDestroy(comm);
  cudaFree(buf);
  cudaFree(half);
}

// --- Faults (sticky: each in its own process) -------------------------------------

/// Runs `body`, then exits 3 if the sticky illegal-address error is set.
template <typename F> void faultThenExit(F body) {
  body();
  cudaDeviceSynchronize();
  std::exit(cudaGetLastError() == cudaErrorIllegalAddress ? 3 : 4);
}

TEST(CudaEmulatorDeathTest, DivergentBarrierFaults) {
  EXPECT_EXIT(faultThenExit([] {
                int *d = deviceArray(std::vector<int>(64));
                ZTRT_LAUNCH(1, 64, 0, nullptr, divergentBarrier)(d);
              }),
              ::testing::ExitedWithCode(3),
              "kernel divergentBarrier: __syncthreads in block \\(0,0,0\\) "
              "reached by 32 threads while 32 have exited");
}

TEST(CudaEmulatorDeathTest, AsynchronousCopyNeverWaitedForFaults) {
  EXPECT_EXIT(faultThenExit([] {
                int *d = deviceArray(std::vector<int>(4));
                ZTRT_LAUNCH(1, 32, 0, nullptr, asyncNeverWaited)(d);
              }),
              ::testing::ExitedWithCode(3),
              "kernel asyncNeverWaited: thread 0 ended with asynchronous "
              "copies \\(__pipeline_memcpy_async\\) it never waited for");
}

TEST(CudaEmulatorDeathTest, MisalignedAsynchronousCopyFaults) {
  EXPECT_EXIT(faultThenExit([] {
                int *d = deviceArray(std::vector<int>(4));
                ZTRT_LAUNCH(1, 32, 0, nullptr, asyncMisaligned)(d);
              }),
              ::testing::ExitedWithCode(3),
              "__pipeline_memcpy_async: .* not aligned to its 16 bytes");
}

TEST(CudaEmulatorDeathTest, BarrierAgainstShuffleIsADeadlock) {
  EXPECT_EXIT(faultThenExit([] {
                int *d = deviceArray(std::vector<int>(32));
                ZTRT_LAUNCH(1, 32, 0, nullptr, barrierShuffleDeadlock)(d);
              }),
              ::testing::ExitedWithCode(3),
              "kernel barrierShuffleDeadlock: deadlock in block \\(0,0,0\\)");
}

TEST(CudaEmulatorDeathTest, ShuffleWithAnExitedLaneFaults) {
  EXPECT_EXIT(faultThenExit([] {
                float *d = deviceArray(std::vector<float>(32));
                ZTRT_LAUNCH(1, 32, 0, nullptr, shuffleAfterExit)(d);
              }),
              ::testing::ExitedWithCode(3),
              "names lane 5 of warp 0, which has exited");
}

TEST(CudaEmulatorDeathTest, HostPointerKernelArgumentFaults) {
  EXPECT_EXIT(faultThenExit([] {
                static float host[64];
                ZTRT_LAUNCH(1, 32, 0, nullptr, fillValue)(host, 1.0f, 64);
              }),
              ::testing::ExitedWithCode(3),
              "kernel fillValue: argument 0 is 0x[0-9a-f]+ \\(host memory\\), "
              "not device memory");
}

TEST(CudaEmulatorDeathTest, GemmOperandOutsideItsAllocationFaults) {
  EXPECT_EXIT(faultThenExit([] {
                cublasHandle_t h;
                cublasCreate(&h);
                float *a = deviceArray(std::vector<float>(4));
                float *c = deviceArray(std::vector<float>(4));
                const float one = 1, zero = 0;
                // A claims 2 x 3 (lda 2): 6 elements of a 4-element buffer.
                cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3,
                                          &one, a, 2, 0, a, 3, 0, &zero, c, 2,
                                          0, 1);
              }),
              ::testing::ExitedWithCode(3),
              "cublasSgemmStridedBatched: A of batch 0 \\(2 x 3, ld 2");
}

TEST(CudaEmulatorDeathTest, GemmExOperandOutsideItsAllocationFaults) {
  // The extent is checked in elements of the operand's type: 6 bf16 of a
  // 4-element (8-byte) buffer.
  EXPECT_EXIT(faultThenExit([] {
                cublasHandle_t h;
                cublasCreate(&h);
                auto *a = deviceArray(std::vector<ztrt::bf16>(4));
                auto *c = deviceArray(std::vector<ztrt::bf16>(4));
                const float one = 1, zero = 0;
                cublasGemmStridedBatchedEx(
                    h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a, CUDA_R_16BF,
                    2, 0, a, CUDA_R_16BF, 3, 0, &zero, c, CUDA_R_16BF, 2, 0, 1,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
              }),
              ::testing::ExitedWithCode(3),
              "cublasGemmStridedBatchedEx: A of batch 0 \\(2 x 3, ld 2");
}

TEST(CudaEmulatorDeathTest, UseAfterStreamOrderedFreeFaults) {
  // A copy on s2 reads memory that s1 frees without any ordering between
  // them: s2 is held back by an event recorded after the free.
  EXPECT_EXIT(faultThenExit([] {
                cudaStream_t s1, s2;
                cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
                cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
                float *a = deviceArray(std::vector<float>(4));
                float *b = deviceArray(std::vector<float>(4));
                cudaEvent_t freed;
                cudaEventCreate(&freed);
                cudaMemcpyAsync(b, a, 16, cudaMemcpyDeviceToDevice, s2);
                cudaStreamSynchronize(s2);
                cudaFreeAsync(a, s1);
                cudaEventRecord(freed, s1);
                cudaStreamSynchronize(s1);
                // Enqueued after the free: refused at the call.
                if (cudaMemcpyAsync(b, a, 16, cudaMemcpyDeviceToDevice, s2) !=
                    cudaErrorInvalidValue)
                  std::exit(5);
                ZTRT_LAUNCH(1, 32, 0, s2, fillValue)(a, 1.0f, 4);
              }),
              ::testing::ExitedWithCode(3),
              "argument 0 is 0x[0-9a-f]+ \\(freed device allocation");
}

TEST(CudaEmulatorDeathTest, NcclOverlapOutsideInPlaceLayoutIsRefused) {
  EXPECT_EXIT(
      {
        ncclUniqueId id;
        ncclGetUniqueId(&id);
        ncclComm_t comm;
        if (ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess)
          std::exit(5);
        float *buf = deviceArray(std::vector<float>(8));
        // 4 elements from buf to buf + 2: overlapping, not in place.
        std::exit(ncclAllReduce(buf, buf + 2, 4, ncclFloat, ncclSum, comm,
                                nullptr) == ncclInvalidUsage
                      ? 3
                      : 4);
      },
      ::testing::ExitedWithCode(3),
      "ncclAllReduce: send and receive buffers overlap outside NCCL's "
      "in-place layout");
}

TEST(CudaEmulatorDeathTest, NcclIdNotFromGetUniqueIdIsRefused) {
  EXPECT_EXIT(
      {
        ncclUniqueId id{};
        ncclComm_t comm;
        std::exit(ncclCommInitRank(&comm, 1, id, 0) == ncclInvalidUsage ? 3
                                                                         : 4);
      },
      ::testing::ExitedWithCode(3), "the unique id was not made by");
}

} // namespace

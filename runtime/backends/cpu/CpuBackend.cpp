//===- CpuBackend.cpp - The host-memory backend ---------------------------===//
//
// Part of ztrain's runtime. This file: the device, threads, memory and
// copies, the choice of the AVX-512 kernels, and the factory; the kernels
// are defined by family in the files CpuBackendImpl.h names.
//
// Determinism: OpenMP loops split only independent work (elements, or whole
// rows whose reductions stay inside one thread); every reduction across rows
// runs serially in index order. Results are therefore bitwise identical for
// any OpenMP thread count. OpenBLAS's sgemm, and oneDNN's bf16 matmul
// (backends/cpu/OneDnnGemm.h), are deterministic for a fixed thread count.
//
// Precision: per-row statistics (layer-norm mean and variance, softmax and
// log-sum-exp sums, reductions) are accumulated in double and rounded once;
// elementwise formulas are evaluated in float in PyTorch's order. Every
// kernel is one template over the element type (float, bf16, f16): bf16 /
// f16 elements are widened to float on load and results rounded once on
// store, so those results are the f32 results rounded (base/DType.h).
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackend.h"

#include "backends/cpu/CpuBackendImpl.h"

#include <algorithm>
#include <cblas.h>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <malloc.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ztrt {

namespace {

// Alignment of every allocation: a cache line, enough for any vector ISA.
constexpr int64_t kAlignment = 64;

} // namespace

const char *CpuBackend::name() const { return "cpu"; }

std::string CpuBackend::deviceName() const {
  // /proc/cpuinfo's first "model name" (Linux); the name alone elsewhere.
  const char *kernels = avx512Kernels ? " (AVX-512 kernels)" : "";
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line))
    if (line.compare(0, 10, "model name") == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size())
        return line.substr(colon + 2) + kernels;
    }
  return std::string("host CPU") + kernels;
}

void CpuBackend::setThreads(int threads) {
  openblas_set_num_threads(threads);
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
}

int CpuBackend::threads() const {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return openblas_get_num_threads();
#endif
}

void CpuBackend::adoptThreads(int threads) {
  // OpenMP's thread count is a per-thread setting: a thread that never
  // set it uses the process default (all cores), not the count the step
  // thread was given.
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
}

void *CpuBackend::allocate(int64_t bytes) {
  if (bytes > std::numeric_limits<int64_t>::max() - kAlignment)
    return nullptr;
  // aligned_alloc needs a multiple of the alignment; rounding 0 up to one
  // line also makes every pointer distinct.
  int64_t rounded = (std::max<int64_t>(bytes, 1) + kAlignment - 1) /
                    kAlignment * kAlignment;
  return std::aligned_alloc(kAlignment, static_cast<size_t>(rounded));
}

void CpuBackend::deallocate(void *ptr) { std::free(ptr); }

void CpuBackend::copyFromHost(void *dst, const void *hostSrc, int64_t bytes) {
  if (bytes > 0)
    std::memcpy(dst, hostSrc, static_cast<size_t>(bytes));
}

void CpuBackend::copyToHost(void *hostDst, const void *src, int64_t bytes) {
  if (bytes > 0)
    std::memcpy(hostDst, src, static_cast<size_t>(bytes));
}

void CpuBackend::copy(const void *src, void *dst, int64_t bytes) {
  // memmove: the compiler may copy a buffer onto an overlapping view.
  if (bytes > 0)
    std::memmove(dst, src, static_cast<size_t>(bytes));
}

void CpuBackend::copy2d(const void *src, void *dst, int64_t rows,
                        int64_t rowBytes, int64_t srcStride,
                        int64_t dstStride) {
  if (rows <= 0 || rowBytes <= 0)
    return;
  const char *from = static_cast<const char *>(src);
  char *to = static_cast<char *>(dst);
  // Packed on both sides: one block.
  if (srcStride == rowBytes && dstStride == rowBytes) {
    std::memcpy(to, from, static_cast<size_t>(rows * rowBytes));
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(to + r * dstStride, from + r * srcStride,
                static_cast<size_t>(rowBytes));
}

bool avx512::enabled() {
#ifdef ZTRT_HAVE_AVX512_KERNELS
  const char *isa = std::getenv("ZTRT_CPU_ISA");
  if (isa && std::strcmp(isa, "baseline") == 0)
    return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

#ifndef ZTRT_HAVE_AVX512_KERNELS
// Never called (enabled() is false): the entry points exist for the linker.
#define ZTRT_UNARY(method, Name, expr)                                         \
  void avx512::method##F32(const float *, float *, int64_t) {}
#define ZTRT_BINARY(method, Name, expr)                                        \
  void avx512::method##F32(const float *, const float *, float *, int64_t) {}
#include "backends/Elementwise.def"
void avx512::scaleF32(const float *, float *, int64_t, float) {}
void avx512::softmaxF32(const float *, float *, int64_t, int64_t, bool,
                        float *) {}
void avx512::softmaxGradF32(const float *, const float *, float *, int64_t,
                            int64_t) {}
void avx512::sgdF32(float *, const float *, float *, int64_t,
                    const SgdConstants &) {}
void avx512::adamF32(float *, const float *, float *, float *, int64_t,
                     const AdamConstants &) {}
void avx512::sgdMasterBf16(float *, const void *, bool, float *, uint16_t *,
                           int64_t, const SgdConstants &) {}
void avx512::adamMasterBf16(float *, const void *, bool, float *, float *,
                            uint16_t *, int64_t, const AdamConstants &) {}
#endif

std::unique_ptr<Backend> createCpuBackend() {
  // A step frees and re-allocates the same activation buffers every time.
  // glibc serves large blocks with mmap and returns freed heap to the OS,
  // so each step would page-fault its activations in again (measured ~3% of
  // a GPT step in the kernel zeroing pages). Keep blocks up to glibc's
  // maximum mmap threshold on the heap, and the heap mapped. The compiler's
  // static memory plan will replace this with one arena.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return std::make_unique<CpuBackend>();
}

} // namespace ztrt

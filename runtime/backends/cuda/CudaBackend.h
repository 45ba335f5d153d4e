//===- CudaBackend.h - The CUDA / NCCL backend ------------------*- C++ -*-===//
//
// Device memory from the device's stream-ordered pool, cuBLAS for GEMM,
// CUDA kernels for everything else, NCCL collectives on a communication
// stream ordered against the compute stream with events. Design and
// numerics: docs/cuda.md. Built only when CMake finds the CUDA toolkit and
// NCCL (ZTRT_HAVE_CUDA); this header needs neither.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CUDA_CUDABACKEND_H
#define ZTRT_BACKENDS_CUDA_CUDABACKEND_H

#include "backends/Backend.h"

#include <memory>
#include <string>

namespace ztrt {

struct CommunicatorParams;

struct CudaOptions {
  /// The CUDA device, an index among the visible ones.
  int device = 0;
  /// Collectives go through NCCL even in a world of one (a communicator of
  /// one rank), so that a single GPU exercises the NCCL path; otherwise a
  /// world of one copies on the communication stream.
  bool ncclInWorldOfOne = false;
  /// Fused attention's float scratch: heads are processed in groups whose
  /// [tq, tk] scores fit this many elements (at least one head per group).
  int64_t attentionScratchElements = int64_t(1) << 24;
};

/// The number of visible CUDA devices. 0 when there are none or CUDA cannot
/// be used, with `*reason` saying why (cudaGetDeviceCount's error, and
/// whether the NVIDIA driver library can be loaded).
int cudaDeviceCount(std::string *reason);

/// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)": what reports and benchmarks
/// name the device by.
std::string cudaDeviceDescription(int device);

/// The device's peak dense GEMM rate from its compute capability, SM count
/// and peak clock (cudaDeviceGetAttribute) and a table of FLOPs per clock
/// per SM by architecture; 0 for an architecture not in the table.
Backend::PeakRate cudaPeakRate(int device, bool sixteenBit);

/// The device of this rank: its local rank among the ranks of its node
/// (one GPU per rank), or device 0 when each rank sees a single device (a
/// launcher that sets CUDA_VISIBLE_DEVICES per rank). Fatal, naming the
/// reason, when there is no device or fewer devices than local ranks.
int selectCudaDevice(const CommunicatorParams &params);

std::unique_ptr<Backend> createCudaBackend(const CudaOptions &options);

} // namespace ztrt

#endif // ZTRT_BACKENDS_CUDA_CUDABACKEND_H

//===- Libraries.h - cuBLAS and NCCL, loaded on first use -------*- C++ -*-===//
//
// Part of ztrain's runtime (cuda backend). Every model executable links the
// runtime, and most runs use the cpu backend. Linking cuBLAS (with
// cuBLASLt, ~600 MB) and NCCL (~200 MB) into each of them costs ~100 ms of
// start-up per process (measured on the CI machine: 20 starts of an empty
// program linked with them took 1.9-2.2 s against 0.04 s), which an MPI job
// pays per rank and the test suites per run, and would tie every
// executable to their presence. So the CUDA runtime is linked statically
// (cudart_static: ~2 ms) and the two libraries are opened with dlopen when
// a cuda backend is created: the path CMake found at configure time first,
// then the soname through the loader's search (LD_LIBRARY_PATH, the
// executable's runpath, ld.so.cache).
//
// The tables hold the functions the backend calls, typed from the libraries'
// own headers (decltype), so a signature mismatch does not compile.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_CUDA_LIBRARIES_H
#define ZTRT_CUDA_LIBRARIES_H

#include <cublas_v2.h>
#include <nccl.h>

namespace ztrt::cuda {

struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) setStream;
  decltype(&cublasSetMathMode) setMathMode;
  decltype(&cublasSgemmStridedBatched) sgemmStridedBatched;
  decltype(&cublasGetStatusString) statusString;
  decltype(&cublasGetProperty) getProperty;
};

struct NcclApi {
  decltype(&ncclGetVersion) getVersion;
  decltype(&ncclGetUniqueId) getUniqueId;
  decltype(&ncclCommInitRank) commInitRank;
  decltype(&ncclCommDestroy) commDestroy;
  decltype(&ncclCommAbort) commAbort;
  decltype(&ncclCommGetAsyncError) commGetAsyncError;
  decltype(&ncclGetErrorString) getErrorString;
  decltype(&ncclAllReduce) allReduce;
  decltype(&ncclReduceScatter) reduceScatter;
  decltype(&ncclAllGather) allGather;
  decltype(&ncclBroadcast) broadcast;
};

/// The loaded libraries; fatal, naming what was tried, when one cannot be
/// opened or lacks a function.
const CublasApi &cublas();
const NcclApi &nccl();

} // namespace ztrt::cuda

#endif // ZTRT_CUDA_LIBRARIES_H

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
// own headers (decltype), so a signature mismatch does not compile. The one
// exception is cublasGemmStridedBatchedEx, which cuBLAS's header overloads
// in C++ (a static inline wrapper taking the pre-11 cudaDataType compute
// type): its type is spelled out (GemmStridedBatchedExFn) and checked
// against the header's C function where the table is filled.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CUDA_LIBRARIES_H
#define ZTRT_BACKENDS_CUDA_LIBRARIES_H

#include <cublas_v2.h>
#include <nccl.h>

namespace ztrt::cuda {

/// cublasGemmStridedBatchedEx with cuBLAS >= 11's cublasComputeType_t.
using GemmStridedBatchedExFn = cublasStatus_t (*)(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
    int lda, long long strideA, const void *B, cudaDataType Btype, int ldb,
    long long strideB, const void *beta, void *C, cudaDataType Ctype, int ldc,
    long long strideC, int batchCount, cublasComputeType_t computeType,
    cublasGemmAlgo_t algo);

struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) setStream;
  decltype(&cublasSetMathMode) setMathMode;
  decltype(&cublasSgemmStridedBatched) sgemmStridedBatched;
  /// bf16 / f16 GEMMs (CUDA_R_16BF / CUDA_R_16F, CUBLAS_COMPUTE_32F).
  GemmStridedBatchedExFn gemmStridedBatchedEx;
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

#endif // ZTRT_BACKENDS_CUDA_LIBRARIES_H

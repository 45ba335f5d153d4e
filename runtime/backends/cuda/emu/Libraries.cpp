//===- Libraries.cpp - The emulated cuBLAS and NCCL tables
//-----------------===//
//
// Part of ztrain's CUDA emulator: the emulated runtime's replacement for
// backends/cuda/Libraries.cpp, which opens the real libraries with dlopen; here the
// tables point at Blas.cpp and Nccl.cpp.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/Libraries.h"

namespace ztrt::cuda {

const CublasApi &cublas() {
  static const CublasApi api = {
      cublasCreate_v2,           cublasDestroy_v2,
      cublasSetStream_v2,        cublasSetMathMode,
      cublasSgemmStridedBatched, cublasGemmStridedBatchedEx,
      cublasGetStatusString,     cublasGetProperty};
  return api;
}

const NcclApi &nccl() {
  static const NcclApi api = {
      ncclGetVersion,     ncclGetUniqueId, ncclCommInitRank,
      ncclCommDestroy,    ncclCommAbort,   ncclCommGetAsyncError,
      ncclGetErrorString, ncclAllReduce,   ncclReduceScatter,
      ncclAllGather,      ncclBroadcast};
  return api;
}

} // namespace ztrt::cuda

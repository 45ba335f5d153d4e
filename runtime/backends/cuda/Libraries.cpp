//===- Libraries.cpp - cuBLAS and NCCL, loaded on first use ---------------===//
//
// Part of ztrain's runtime (cuda backend). See Libraries.h for why.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/Libraries.h"

#include "base/Support.h"

#include <dlfcn.h>
#include <mutex>
#include <string>

// Set by CMake: the libraries found at configure time, and their sonames.
#ifndef ZTRT_CUBLAS_PATH
#define ZTRT_CUBLAS_PATH ""
#endif
#ifndef ZTRT_CUBLAS_SONAME
#define ZTRT_CUBLAS_SONAME "libcublas.so"
#endif
#ifndef ZTRT_NCCL_PATH
#define ZTRT_NCCL_PATH ""
#endif
#ifndef ZTRT_NCCL_SONAME
#define ZTRT_NCCL_SONAME "libnccl.so.2"
#endif

namespace ztrt::cuda {

namespace {

/// Opens the configured path, else the soname; fatal with both reasons.
void *open(const char *what, const char *path, const char *soname) {
  std::string errors;
  for (const char *name : {path, soname}) {
    if (!*name)
      continue;
    // RTLD_GLOBAL: cuBLAS opens cuBLASLt itself and looks for it loaded.
    if (void *handle = dlopen(name, RTLD_NOW | RTLD_GLOBAL))
      return handle;
    const char *error = dlerror();
    errors += format("%s%s", errors.empty() ? "" : "; ", error ? error : name);
  }
  fatal("--backend cuda: cannot load %s: %s (set LD_LIBRARY_PATH to its "
        "directory)",
        what, errors.c_str());
}

template <typename Fn>
void bind(void *library, const char *what, const char *symbol, Fn &fn) {
  dlerror();
  void *address = dlsym(library, symbol);
  if (!address)
    fatal("--backend cuda: %s has no function %s (too old a version?)", what,
          symbol);
  fn = reinterpret_cast<Fn>(address);
}

} // namespace

const CublasApi &cublas() {
  static CublasApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    const char *what = "cuBLAS";
    void *lib = open(what, ZTRT_CUBLAS_PATH, ZTRT_CUBLAS_SONAME);
    bind(lib, what, "cublasCreate_v2", api.create);
    bind(lib, what, "cublasDestroy_v2", api.destroy);
    bind(lib, what, "cublasSetStream_v2", api.setStream);
    bind(lib, what, "cublasSetMathMode", api.setMathMode);
    bind(lib, what, "cublasSgemmStridedBatched", api.sgemmStridedBatched);
    // Compiles only if the header declares the C function with this type.
    [[maybe_unused]] const GemmStridedBatchedExFn declared =
        &cublasGemmStridedBatchedEx;
    bind(lib, what, "cublasGemmStridedBatchedEx", api.gemmStridedBatchedEx);
    bind(lib, what, "cublasGetStatusString", api.statusString);
    bind(lib, what, "cublasGetProperty", api.getProperty);
  });
  return api;
}

const NcclApi &nccl() {
  static NcclApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    const char *what = "NCCL";
    void *lib = open(what, ZTRT_NCCL_PATH, ZTRT_NCCL_SONAME);
    bind(lib, what, "ncclGetVersion", api.getVersion);
    bind(lib, what, "ncclGetUniqueId", api.getUniqueId);
    bind(lib, what, "ncclCommInitRank", api.commInitRank);
    bind(lib, what, "ncclCommDestroy", api.commDestroy);
    bind(lib, what, "ncclCommAbort", api.commAbort);
    bind(lib, what, "ncclCommGetAsyncError", api.commGetAsyncError);
    bind(lib, what, "ncclGetErrorString", api.getErrorString);
    bind(lib, what, "ncclAllReduce", api.allReduce);
    bind(lib, what, "ncclReduceScatter", api.reduceScatter);
    bind(lib, what, "ncclAllGather", api.allGather);
    bind(lib, what, "ncclBroadcast", api.broadcast);
  });
  return api;
}

} // namespace ztrt::cuda

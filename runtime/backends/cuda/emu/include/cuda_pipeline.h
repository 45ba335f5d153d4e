//===- cuda_pipeline.h - CUDA's asynchronous copy primitives, emulated -*- C++ -*-===//
//
// Part of ztrain's CUDA emulator (runtime/backends/cuda/emu, docs/cuda.md). The
// primitives of the toolkit's <cuda_pipeline.h> the cuda backend uses
// (cp.async from global to shared memory, in commit groups), with its names
// and checks: 4, 8 or 16 bytes, both addresses aligned to the size. When
// issued, a copy fills its destination with all-ones bytes (NaN in every
// float type), and its bytes land when __pipeline_wait_prior completes its
// group: a thread that reads the destination before waiting (or a warp
// that reads another thread's copy without a barrier after the wait) reads
// NaNs or stale bytes, and so does a warp still reading a buffer that a
// copy issued too early (no barrier before it) overwrites, as each may on a
// GPU. A thread that ends with copies it never waited for is a fault.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_CUDAEMU_CUDA_PIPELINE_H
#define ZTRT_CUDAEMU_CUDA_PIPELINE_H

#include "backends/cuda/emu/Device.h"

#include <cstddef>

inline void __pipeline_memcpy_async(void *dst_shared, const void *src_global,
                                    size_t size_and_align, size_t zfill = 0) {
  ::ztrt::cudaemu::pipelineCopy(dst_shared, src_global, size_and_align, zfill);
}
inline void __pipeline_commit() { ::ztrt::cudaemu::pipelineCommit(); }
inline void __pipeline_wait_prior(size_t prior) {
  ::ztrt::cudaemu::pipelineWaitPrior(prior);
}

#endif // ZTRT_CUDAEMU_CUDA_PIPELINE_H

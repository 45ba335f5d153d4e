//===- CpuBackend.h - The host-memory backend -------------------*- C++ -*-===//
//
// Host memory, OpenBLAS for GEMM, plain loops (OpenMP over rows or elements)
// for everything else.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CPU_CPUBACKEND_H
#define ZTRT_BACKENDS_CPU_CPUBACKEND_H

#include "backends/Backend.h"

#include <memory>

namespace ztrt {

std::unique_ptr<Backend> createCpuBackend();

} // namespace ztrt

#endif // ZTRT_BACKENDS_CPU_CPUBACKEND_H

//===- HostDevice.h - ZTRT_HD: one function for host and device -*- C++ -*-===//
//
// Part of ztrain's runtime. ZTRT_HD marks a function that nvcc compiles for
// both the host and the device (__host__ __device__) and a host compiler
// as plain C++. A header of its own, with nothing else in it, so that the
// AVX-512 kernels (backends/cpu/IsaKernelsAvx512.cpp) can use it without including
// inline functions of external linkage.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BASE_HOSTDEVICE_H
#define ZTRT_BASE_HOSTDEVICE_H

#ifdef __CUDACC__
#define ZTRT_HD __host__ __device__
#else
#define ZTRT_HD
#endif

#endif // ZTRT_BASE_HOSTDEVICE_H

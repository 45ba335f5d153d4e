#===- runtime/cmake/CudaBackend.cmake - The optional cuda backend ----------===#
#
# Finds nvcc, the CUDA toolkit and NCCL. When all are there it sets
# ZTRT_HAVE_CUDA and defines ztrt_add_cuda_backend(target), which adds the
# backend to the runtime library; otherwise it says what is missing and the
# runtime has the cpu backend alone.
#
#   -DZTRT_ENABLE_CUDA=OFF            never build it
#   -DZTRT_CUDA_ARCHITECTURES=...     the GPUs to compile for (default
#                                     80-real;90: A100 code, H100/H200 code,
#                                     and PTX that newer GPUs compile at load)
#   -DNCCL_ROOT=DIR or $NCCL_ROOT     where NCCL lives, when not in the CUDA
#                                     toolkit (e.g. a Python wheel's
#                                     site-packages/nvidia/nccl)
#
# cuBLAS and NCCL are not linked: the backend opens them with dlopen when a
# cuda backend is created (backends/cuda/Libraries.h says why), from the paths found
# here. The CUDA runtime is linked statically.
#
#===------------------------------------------------------------------------===#

option(ZTRT_ENABLE_CUDA
  "Build the cuda backend when the CUDA toolkit and NCCL are found" ON)
set(ZTRT_CUDA_ARCHITECTURES "80-real;90" CACHE STRING
  "CUDA architectures of the cuda backend's kernels")
set(ZTRT_HAVE_CUDA OFF)

function(ztrt_cuda_unavailable why)
  message(STATUS "ztrt: cuda backend not built: ${why}; building the cpu "
                 "backend alone")
endfunction()

if(NOT ZTRT_ENABLE_CUDA)
  ztrt_cuda_unavailable("ZTRT_ENABLE_CUDA is OFF")
  return()
endif()

# nvcc is often not on PATH (CUDA installs under /usr/local/cuda/bin).
# CUDACXX is what CMake's own search (check_language below) honours.
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  find_program(ZTRT_NVCC nvcc
    HINTS ENV CUDA_HOME ENV CUDA_PATH PATH_SUFFIXES bin
    PATHS /usr/local/cuda/bin)
  if(ZTRT_NVCC)
    set(ENV{CUDACXX} ${ZTRT_NVCC})
  endif()
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  ztrt_cuda_unavailable("no working nvcc (set CUDACXX or put nvcc on PATH)")
  return()
endif()
enable_language(CUDA)

find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND OR NOT CUDA_cudart_static_LIBRARY
   OR NOT CUDA_cublas_LIBRARY)
  ztrt_cuda_unavailable("the CUDA toolkit (cudart_static, cuBLAS) was not "
                        "found next to ${CMAKE_CUDA_COMPILER}")
  return()
endif()

set(ZTRT_NCCL_HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME}
  ${CUDAToolkit_LIBRARY_ROOT})
find_path(ZTRT_NCCL_INCLUDE_DIR nccl.h
  HINTS ${ZTRT_NCCL_HINTS} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
# Wheels ship only the versioned name.
find_library(ZTRT_NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS ${ZTRT_NCCL_HINTS} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64)
if(NOT ZTRT_NCCL_INCLUDE_DIR OR NOT ZTRT_NCCL_LIBRARY)
  ztrt_cuda_unavailable("NCCL (nccl.h, libnccl) not found (set NCCL_ROOT)")
  return()
endif()

# The versioned cuBLAS is what dlopen should get (the unversioned symlink is
# a development file); the soname is the fallback search.
set(ZTRT_CUBLAS_SONAME "libcublas.so.${CUDAToolkit_VERSION_MAJOR}")
get_filename_component(ZTRT_CUBLAS_DIR ${CUDA_cublas_LIBRARY} DIRECTORY)
if(EXISTS "${ZTRT_CUBLAS_DIR}/${ZTRT_CUBLAS_SONAME}")
  set(ZTRT_CUBLAS_PATH "${ZTRT_CUBLAS_DIR}/${ZTRT_CUBLAS_SONAME}")
else()
  set(ZTRT_CUBLAS_PATH "${CUDA_cublas_LIBRARY}")
endif()
get_filename_component(ZTRT_NCCL_PATH ${ZTRT_NCCL_LIBRARY} REALPATH)

set(ZTRT_HAVE_CUDA ON)
message(STATUS "ztrt: cuda backend: CUDA ${CUDAToolkit_VERSION} "
               "(${CMAKE_CUDA_COMPILER}, architectures "
               "${ZTRT_CUDA_ARCHITECTURES}), cuBLAS ${ZTRT_CUBLAS_PATH}, "
               "NCCL ${ZTRT_NCCL_PATH}")

# Model executables linked outside CMake (ztrain-compile) need the static
# CUDA runtime and what it uses; nothing else (cuBLAS and NCCL are opened
# at run time).
set(ZTRT_EXTRA_LINK_ARGS
  "${ZTRT_EXTRA_LINK_ARGS};${CUDA_cudart_static_LIBRARY};-ldl;-lrt"
  CACHE INTERNAL
  "Linker arguments (a ;-list) that model executables need for ztrt's MPI")

# Adds the backend to `target` (the runtime library). The kernels are an
# object library whose objects go into the archive: the archive then has
# only C++ sources of its own, so every consumer (in any directory, with or
# without the CUDA language enabled there) links it as a C++ library plus
# the static CUDA runtime named below by path.
function(ztrt_add_cuda_backend target)
  add_library(ztrt_cuda_kernels OBJECT
    ${CMAKE_CURRENT_SOURCE_DIR}/backends/cuda/AttentionBackward.cu
    ${CMAKE_CURRENT_SOURCE_DIR}/backends/cuda/AttentionForward.cu
    ${CMAKE_CURRENT_SOURCE_DIR}/backends/cuda/Elementwise.cu
    ${CMAKE_CURRENT_SOURCE_DIR}/backends/cuda/Layout.cu
    ${CMAKE_CURRENT_SOURCE_DIR}/backends/cuda/Rows.cu
    ${CMAKE_CURRENT_SOURCE_DIR}/backends/cuda/TensorCoreCheck.cu)
  set_target_properties(ztrt_cuda_kernels PROPERTIES
    CUDA_ARCHITECTURES "${ZTRT_CUDA_ARCHITECTURES}"
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    POSITION_INDEPENDENT_CODE ON)
  # runtime/ for backends/cuda/ and base/DType.h (the storage types bf16 / f16),
  # runtime/include for the ztrt.h it includes.
  target_include_directories(ztrt_cuda_kernels PRIVATE
    ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/include)
  # No FMA contraction: elementwise kernels round exactly like the cpu
  # backend's loops (x86-64 without -mfma contracts nothing). Division and
  # square root stay IEEE (nvcc's defaults; never --use_fast_math).
  target_compile_options(ztrt_cuda_kernels PRIVATE --fmad=false)
  find_program(ZTRT_CCACHE ccache)
  if(ZTRT_CCACHE)
    set_target_properties(ztrt_cuda_kernels PROPERTIES
      CUDA_COMPILER_LAUNCHER ${ZTRT_CCACHE})
  endif()

  target_sources(${target} PRIVATE
    ${ZTRT_CUDA_BACKEND_SOURCES}
    ${CMAKE_CURRENT_SOURCE_DIR}/backends/cuda/Libraries.cpp
    $<TARGET_OBJECTS:ztrt_cuda_kernels>)
  target_include_directories(${target} PRIVATE
    ${CUDAToolkit_INCLUDE_DIRS} ${ZTRT_NCCL_INCLUDE_DIR})
  target_compile_definitions(${target} PRIVATE
    ZTRT_HAVE_CUDA
    ZTRT_CUBLAS_PATH="${ZTRT_CUBLAS_PATH}"
    ZTRT_CUBLAS_SONAME="${ZTRT_CUBLAS_SONAME}"
    ZTRT_NCCL_PATH="${ZTRT_NCCL_PATH}"
    ZTRT_NCCL_SONAME="libnccl.so.2")
  target_link_libraries(${target} PUBLIC
    ${CUDA_cudart_static_LIBRARY} ${CMAKE_DL_LIBS} rt)
endfunction()

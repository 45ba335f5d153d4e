#===- runtime/cmake/CudaEmulator.cmake - The cuda backend, emulated --------===#
#
# ztrt_cudaemu: the runtime with the cuda backend (backends/cuda/Cuda*.cpp and
# the kernels of backends/cuda/*.cu, unchanged) built against the CUDA emulator's
# headers and implementation (backends/cuda/emu): the CUDA runtime API, cuBLAS and
# NCCL on the host. Written as libztrt.a / libztrt_main.a under
# lib/cudaemu, so that `ztrain-compile --runtime-dir <build>/lib/cudaemu`
# links a model whose `--backend cuda` runs on the emulator.
#
#===------------------------------------------------------------------------===#

set(ZTRT_CUDAEMU_DIR ${CMAKE_CURRENT_SOURCE_DIR}/backends/cuda/emu)
ztrt_add_runtime_library(ztrt_cudaemu
  ${ZTRT_CUDA_BACKEND_SOURCES}
  backends/cuda/emu/Blas.cpp
  backends/cuda/emu/Grid.cpp
  backends/cuda/emu/KernelsAttentionBackward.cpp
  backends/cuda/emu/KernelsAttentionForward.cpp
  backends/cuda/emu/KernelsElementwise.cpp
  backends/cuda/emu/KernelsLayout.cpp
  backends/cuda/emu/KernelsRows.cpp
  backends/cuda/emu/KernelsTensorCore.cpp
  backends/cuda/emu/Libraries.cpp
  backends/cuda/emu/Nccl.cpp
  backends/cuda/emu/Runtime.cpp
  backends/cuda/emu/RuntimeMemory.cpp
  backends/cuda/emu/RuntimeStreams.cpp)
# The emulator's cuda_runtime_api.h, cublas_v2.h and nccl.h, also for the
# tests that include the backend's headers.
target_include_directories(ztrt_cudaemu BEFORE PUBLIC ${ZTRT_CUDAEMU_DIR}/include)
target_compile_definitions(ztrt_cudaemu PRIVATE ZTRT_HAVE_CUDA)
# The kernels' float expressions round as nvcc --fmad=false rounds them.
set_source_files_properties(
  backends/cuda/emu/KernelsAttentionBackward.cpp
  backends/cuda/emu/KernelsAttentionForward.cpp
  backends/cuda/emu/KernelsElementwise.cpp
  backends/cuda/emu/KernelsLayout.cpp
  backends/cuda/emu/KernelsRows.cpp backends/cuda/emu/KernelsTensorCore.cpp
  PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")

add_library(ztrt_cudaemu_main STATIC step/Main.cpp)
target_compile_options(ztrt_cudaemu_main PRIVATE ${ZTRT_WARNINGS})
target_include_directories(ztrt_cudaemu_main PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(ztrt_cudaemu_main PUBLIC ztrt_cudaemu)

set_target_properties(ztrt_cudaemu PROPERTIES OUTPUT_NAME ztrt)
set_target_properties(ztrt_cudaemu_main PROPERTIES OUTPUT_NAME ztrt_main)
set_target_properties(ztrt_cudaemu ztrt_cudaemu_main PROPERTIES
  ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib/cudaemu
  POSITION_INDEPENDENT_CODE ON)

// The Layout kernels compiled for the CUDA emulator (docs/cuda.md).
#include "backends/cuda/Layout.cu"

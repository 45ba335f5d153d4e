// The Elementwise kernels compiled for the CUDA emulator (docs/cuda.md).
#include "backends/cuda/Elementwise.cu"

// The Elementwise kernels compiled for the CUDA emulator (docs/cuda.md).
#include "cuda/Elementwise.cu"

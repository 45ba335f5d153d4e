// The Rows kernels compiled for the CUDA emulator (docs/cuda.md).
#include "cuda/Rows.cu"

// The Rows kernels compiled for the CUDA emulator (docs/cuda.md).
#include "backends/cuda/Rows.cu"

// The attention kernels compiled for the CUDA emulator (docs/cuda.md).
#include "backends/cuda/Attention.cu"

// The attention forward kernels compiled for the CUDA emulator (docs/cuda.md).
#include "backends/cuda/AttentionForward.cu"

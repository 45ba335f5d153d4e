// The attention backward kernels compiled for the CUDA emulator (docs/cuda.md).
#include "backends/cuda/AttentionBackward.cu"

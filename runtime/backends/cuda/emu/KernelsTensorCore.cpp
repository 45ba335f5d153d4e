// The tensor-core layout probe compiled for the CUDA emulator (docs/cuda.md).
#include "backends/cuda/TensorCoreCheck.cu"

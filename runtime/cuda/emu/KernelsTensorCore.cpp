// The tensor-core layout probe compiled for the CUDA emulator (docs/cuda.md).
#include "cuda/TensorCoreCheck.cu"

#!/usr/bin/env bash
# Packs what a GPU machine without LLVM/MLIR needs to run the cuda backend's
# tests and benchmark (docs/cuda.md#gpu-kit): the GPU test binaries, every
# executable test_cuda.py, test_cuda_offload.py and bench/gpu_step.py
# compile, with the zero-report plans test_cuda_offload.py checks against
# (in a compile cache keyed by model and flags), and the shared libraries
# they link (MPI,
# OpenBLAS) except glibc, libstdc++ and the NVIDIA driver's. Writes
# kit/ztrain-gpu-kit.tar.xz; scripts/gpu-kit-run.sh runs it on the GPU
# machine. Needs a build with the cuda backend (CMake found the CUDA toolkit
# and NCCL).
#
#   scripts/gpu-kit.sh            # GPUs on the target machine: 1
#   ZTRAIN_GPU_KIT_GPUS=8 scripts/gpu-kit.sh
#   ZTRAIN_GPU_KIT_E2E=0 ZTRAIN_GPU_KIT_PRECISIONS=bf16 scripts/gpu-kit.sh
#                                 # a quick kit: the conformance suite and
#                                 # the bf16 benchmark only (1 minute, not 5)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ZTRAIN_BUILD_DIR:-build}
KIT=kit
PY=/usr/bin/python3
if [ ! -x "$BUILD/bin/ztrt_cuda_tests" ]; then
  echo "gpu-kit: $BUILD has no cuda backend (configure where CMake finds the CUDA toolkit and NCCL)" >&2
  exit 1
fi
stage=$(mktemp -d /tmp/ztrain-gpu-kit.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/cache"
cp "$BUILD/bin/ztrt_cuda_tests" "$BUILD/bin/ztrt_cuda_gemm_peak" \
   "$BUILD/bin/ztrt_cuda_mpi_collectives" "$stage/bin/"

echo "== compiling the test and benchmark models into the kit's cache"
export ZTRAIN_COMPILE_CACHE="$stage/cache" ZTRAIN_BIN_DIR="$PWD/$BUILD/bin" PYTHONPATH=python
if [ "${ZTRAIN_GPU_KIT_E2E:-1}" != 0 ]; then
  ZTRAIN_GPU_KIT=populate "$PY" -m pytest -q -p no:cacheprovider test/e2e/test_cuda.py \
    test/e2e/test_cuda_offload.py | tail -1
fi
for precision in ${ZTRAIN_GPU_KIT_PRECISIONS:-fp32 bf16}; do
  "$PY" bench/gpu_step.py --compile-only --precision "$precision"
done
echo "   $(ls "$stage/cache" | grep -vc '\.json$') executables, $(ls "$stage/cache" | grep -c '\.json$') plans"

echo "== shared libraries"
for f in "$stage"/bin/* "$stage"/cache/*; do [[ $f == *.json ]] || ldd "$f"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcuda|libnvidia-[a-z]*)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
ls "$stage/lib" | sed 's/^/   /'

mkdir -p "$KIT"
# A dictionary larger than one executable (each links the runtime, ~8.5 MB,
# nearly the same bytes): xz then stores the repeats once (22 MB instead of
# 116 MB with the default 8 MiB dictionary).
tar -C "$stage" -cf - . | xz -T2 --lzma2=preset=6,dict=256MiB > "$KIT/ztrain-gpu-kit.tar.xz"
echo "== $KIT/ztrain-gpu-kit.tar.xz: $(du -h "$KIT/ztrain-gpu-kit.tar.xz" | cut -f1)"
echo "   on the GPU machine: scripts/gpu-kit-run.sh (device tool: carry [\"kit\"])"

#!/usr/bin/env bash
# Runs the GPU kit (scripts/gpu-kit.sh) on a GPU machine that has python3
# with numpy and pytest (and torch for the benchmark's comparison) but not
# the compiler: the conformance suite, test_cuda.py and test_cuda_offload.py
# from the kit's compile cache, and bench/gpu_step.py. Results go to $OUT (the device tool's
# folder) or gpu-results/: device.txt, conformance.{log,json}, e2e.log,
# gpu_step.{txt,json}, summary.txt. docs/cuda.md#gpu-kit.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${OUT:-gpu-results}
mkdir -p "$RESULTS"
KITDIR=$(mktemp -d /tmp/ztrain-gpu-kit.XXXXXX)
tar -C "$KITDIR" -xJf kit/ztrain-gpu-kit.tar.xz || { echo "gpu-kit-run: no kit/ztrain-gpu-kit.tar.xz (scripts/gpu-kit.sh)" >&2; exit 1; }
PY=${PYTHON:-python3}

# cuBLAS and NCCL are opened by path (where the build found them), else by
# soname: add the directories of Python's NVIDIA wheels (torch's).
libdirs=$("$PY" - <<'PY' 2>/dev/null
import glob, os, site
seen = []
for base in site.getsitepackages() + [site.getusersitepackages()]:
    for lib in glob.glob(os.path.join(base, "nvidia", "**", "lib", "lib*.so*"), recursive=True):
        d = os.path.dirname(lib)
        if d not in seen and ("nccl" in lib or "cublas" in lib):
            seen.append(d)
print(":".join(seen))
PY
)
export LD_LIBRARY_PATH="$KITDIR/lib${libdirs:+:$libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ZTRAIN_COMPILE_CACHE="$KITDIR/cache" ZTRAIN_BIN_DIR="$KITDIR/bin" PYTHONPATH=python

{
  date -u
  nvidia-smi -L 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  "$PY" -c 'import sys, numpy, pytest; print(sys.version.split()[0], "numpy", numpy.__version__, "pytest", pytest.__version__)' 2>&1
} > "$RESULTS/device.txt"

status=0
echo "== conformance suite (ztrt_cuda_tests)"
"$KITDIR/bin/ztrt_cuda_tests" --gtest_output="json:$RESULTS/conformance.json" \
  > "$RESULTS/conformance.log" 2>&1 || status=1
tail -4 "$RESULTS/conformance.log"

echo "== end to end (test/e2e/test_cuda.py, test_cuda_offload.py, executables from the kit)"
"$PY" -m pytest -rs -v -p no:cacheprovider test/e2e/test_cuda.py \
  test/e2e/test_cuda_offload.py > "$RESULTS/e2e.log" 2>&1 || status=1
tail -3 "$RESULTS/e2e.log"

echo "== benchmark (bench/gpu_step.py)"
"$PY" bench/gpu_step.py --json "$RESULTS/gpu_step.json" > "$RESULTS/gpu_step.txt" 2>&1 || status=1
cat "$RESULTS/gpu_step.txt"

{
  cat "$RESULTS/device.txt"
  echo; tail -4 "$RESULTS/conformance.log"
  echo; tail -3 "$RESULTS/e2e.log"
  echo; cat "$RESULTS/gpu_step.txt"
} > "$RESULTS/summary.txt"
rm -rf "$KITDIR"
exit $status

#!/usr/bin/env bash
# Runs the GPU kit (scripts/gpu-kit.sh) on a GPU machine that has python3
# with numpy and pytest (and torch for the benchmark's comparison) but not
# the compiler: the conformance suite, test_cuda.py and test_cuda_offload.py
# from the kit's compile cache, and bench/gpu_step.py in fp32 and in bf16
# (the bf16 run with its Nsight Compute kernel profile). Results go to $OUT
# (the device tool's folder) or gpu-results/: device.txt,
# conformance.log, e2e.log, gpu_step_{fp32,bf16}.{txt,json}, sanitizer.log
# and (not under the device tool, which brings back 8 files) summary.txt.
# docs/cuda.md#gpu-kit.
#
# Each part runs under a time limit (seconds; ZTRAIN_KIT_LIMITS="conformance
# e2e fp32 bf16", default "90 200 90 200") so that a lease of a few minutes
# brings back what finished; a part cut off by its limit counts as failed.
# ZTRAIN_KIT_PARTS picks the parts (default "conformance e2e fp32 bf16"),
# ZTRAIN_KIT_GTEST_FILTER the conformance tests, and ZTRAIN_KIT_BENCH_ARGS
# adds arguments to bench/gpu_step.py (e.g. "--attention fused").
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
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' 2>&1
  uname -r; nproc; grep -m1 "model name" /proc/cpuinfo
} > "$RESULTS/device.txt"

read -r LIM_CONF LIM_E2E LIM_FP32 LIM_BF16 <<<"${ZTRAIN_KIT_LIMITS:-}" || true
: "${LIM_CONF:=90}" "${LIM_E2E:=200}" "${LIM_FP32:=90}" "${LIM_BF16:=200}"
status=0
PARTS=" ${ZTRAIN_KIT_PARTS:-conformance e2e fp32 bf16} "
read -r -a BENCH_ARGS <<<"${ZTRAIN_KIT_BENCH_ARGS:-}" || true
part() { # LIMIT LOG CMD...: runs CMD with its output in LOG; says how it ended
  local limit=$1 log=$2 rc=0 t0=$SECONDS
  shift 2
  timeout -k 10 "$limit" "$@" > "$log" 2>&1 || rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "   (cut off by its ${limit} s limit)" | tee -a "$log"
  fi
  echo "   [$(basename "$log"): exit $rc, $((SECONDS - t0)) s]"
  [ $rc -eq 0 ] || status=1
}

if [[ $PARTS == *" conformance "* ]]; then
echo "== conformance suite (ztrt_cuda_tests)"
part "$LIM_CONF" "$RESULTS/conformance.log" \
  "$KITDIR/bin/ztrt_cuda_tests" --gtest_filter="${ZTRAIN_KIT_GTEST_FILTER:-*}"
grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \] [0-9]+ test' "$RESULTS/conformance.log" | head -40
fi

if [[ $PARTS == *" e2e "* ]]; then
echo "== end to end (test/e2e/test_cuda.py, test_cuda_offload.py, executables from the kit)"
xdist=()
"$PY" -c 'import xdist' 2>/dev/null && xdist=(-n "$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))")
part "$LIM_E2E" "$RESULTS/e2e.log" "$PY" -m pytest -rs -v -p no:cacheprovider "${xdist[@]}" \
  test/e2e/test_cuda.py test/e2e/test_cuda_offload.py
grep -E '^(FAILED|ERROR)' "$RESULTS/e2e.log" | head -30
tail -1 "$RESULTS/e2e.log"
fi

for precision in fp32 bf16; do
  [[ $PARTS == *" $precision "* ]] || continue
  echo "== benchmark (bench/gpu_step.py --precision $precision)"
  limit=$LIM_FP32 extra=()
  [ "$precision" = bf16 ] && limit=$LIM_BF16 extra=(--profile --profile-timeout $((LIM_BF16 / 2)))
  part "$limit" "$RESULTS/gpu_step_$precision.txt" env PYTHONUNBUFFERED=1 "$PY" bench/gpu_step.py \
    --precision "$precision" --json "$RESULTS/gpu_step_$precision.json" "${extra[@]}" \
    "${BENCH_ARGS[@]}"
  cat "$RESULTS/gpu_step_$precision.txt"
done

# Last, and only with ZTRAIN_KIT_SANITIZE=SECONDS: the conformance suite
# under compute-sanitizer's memcheck (out-of-bounds and misaligned device
# accesses, which the emulator's registry cannot see inside the host heap).
if [ -n "${ZTRAIN_KIT_SANITIZE:-}" ]; then
  echo "== conformance suite under compute-sanitizer --tool memcheck"
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$sanitizer" ]; then
    echo "   compute-sanitizer not found" | tee "$RESULTS/sanitizer.log"
  else
    part "$ZTRAIN_KIT_SANITIZE" "$RESULTS/sanitizer.log" "$sanitizer" --tool memcheck \
      --error-exitcode 3 "$KITDIR/bin/ztrt_cuda_tests" --gtest_brief=1
    grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)  \]" "$RESULTS/sanitizer.log" | head -20
  fi
fi

# The device tool brings back 8 files: no summary there (the output has it).
[ -n "${OUT:-}" ] || {
  cat "$RESULTS/device.txt"
  echo; tail -4 "$RESULTS/conformance.log"
  echo; grep -E '^(FAILED|ERROR)' "$RESULTS/e2e.log"; tail -1 "$RESULTS/e2e.log"
  echo; cat "$RESULTS/gpu_step_fp32.txt"
  echo; cat "$RESULTS/gpu_step_bf16.txt"
} > "$RESULTS/summary.txt"
rm -rf "$KITDIR"
exit $status

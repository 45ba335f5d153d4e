#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer) and the runtime's unit tests under
# AddressSanitizer + UndefinedBehaviorSanitizer (docs/fuzzing.md).
#
#   scripts/sanitize.sh [--ci]   what CI runs: the runtime alone, built with
#                                clang-22 and the sanitizers in
#                                ${ZTRAIN_SANITIZE_DIR:-build-sanitize}; every
#                                regression input and seed through each fuzz
#                                target, then each target fuzzed for
#                                ${FUZZ_SECONDS:-15} s, then the runtime's
#                                GoogleTest suite
#   scripts/sanitize.sh --full   also the compiler: the whole project in
#                                ${ZTRAIN_FUZZ_DIR:-build-fuzz} (ztrain's
#                                libraries instrumented, libMLIR not), with
#                                the MLIR target seeded from examples/ and
#                                test/; targets fuzzed ${FUZZ_SECONDS:-300} s
#                                each; no unit tests
#
# FUZZ_TARGETS="json data" limits the targets; FUZZ_SEED=N fixes libFuzzer's
# seed (--ci: 1, so CI explores the same inputs every run); FUZZ_SECONDS=0 runs the
# regression inputs and seeds only; ZTRAIN_JOBS (default 2) sets ninja's
# jobs. A finding fails the script, naming the input it wrote under
# <build dir>/findings/<target>/; reproduce it with
#   <build dir>/fuzz/<target> <input>
# and, once fixed, add the input to fuzz/regressions/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

MODE=ci
for arg in "$@"; do
  case "$arg" in
  --ci) MODE=ci ;;
  --full) MODE=full ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "sanitize.sh: unknown argument '$arg' (--ci or --full)" >&2
    exit 2
    ;;
  esac
done

JOBS=${ZTRAIN_JOBS:-2}
if [ "$MODE" = ci ]; then
  BUILD=${ZTRAIN_SANITIZE_DIR:-build-sanitize}
  SECONDS_PER_TARGET=${FUZZ_SECONDS:-15}
  FUZZ_SEED=${FUZZ_SEED:-1}
else
  BUILD=${ZTRAIN_FUZZ_DIR:-build-fuzz}
  SECONDS_PER_TARGET=${FUZZ_SECONDS:-300}
fi
RUNTIME_TARGETS="json safetensors descriptor checkpoint_index run_config data flags"
DEFAULT_TARGETS=$RUNTIME_TARGETS
if [ "$MODE" = full ]; then DEFAULT_TARGETS="$RUNTIME_TARGETS mlir_pipeline"; fi
TARGETS=${FUZZ_TARGETS:-$DEFAULT_TARGETS}

for tool in clang-22 clang++-22; do
  if ! command -v "$tool" >/dev/null; then
    echo "sanitize.sh: $tool not found (scripts/install-deps.sh installs clang-22," \
      "libclang-rt-22-dev and libfuzzer-22-dev)" >&2
    exit 1
  fi
done

SAN_FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined"
SAN_FLAGS+=" -fno-sanitize-recover=all -fsanitize=fuzzer-no-link"
if [ "$MODE" = full ]; then
  # As libMLIR.so was built: LLVM's headers change class layouts (pass
  # statistics) without NDEBUG, which would then disagree with the library.
  SAN_FLAGS+=" -DNDEBUG"
fi
LAUNCHER=()
if command -v ccache >/dev/null; then
  LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

start=$(date +%s)
if [ ! -f "$BUILD/build.ninja" ]; then
  if [ "$MODE" = ci ]; then
    SOURCE=runtime
    EXTRA=(-DZTRT_BUILD_FUZZERS=ON -DZTRT_BUILD_TESTS=ON
      -DZTRT_BUILD_CUDA_EMULATOR=OFF -DZTRT_ENABLE_CUDA=OFF)
  else
    SOURCE=.
    # The runtime's tests are --ci's (and would double this build).
    EXTRA=(-DZTRAIN_BUILD_FUZZERS=ON -DZTRT_BUILD_TESTS=OFF
      -DZTRT_BUILD_CUDA_EMULATOR=OFF -DZTRT_ENABLE_CUDA=OFF)
  fi
  CC=clang-22 CXX=clang++-22 cmake -G Ninja -S "$SOURCE" -B "$BUILD" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="$SAN_FLAGS" -DCMAKE_CXX_FLAGS="$SAN_FLAGS" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
    "${LAUNCHER[@]}" "${EXTRA[@]}" >/dev/null
fi
NINJA_TARGETS=()
for t in $TARGETS; do
  if [ "$t" = mlir_pipeline ]; then NINJA_TARGETS+=(ztrain_fuzz_mlir_pipeline)
  else NINJA_TARGETS+=("ztrt_fuzz_$t"); fi
done
if [ "$MODE" = ci ]; then NINJA_TARGETS+=(ztrt_tests); fi
echo "== sanitize.sh ($MODE): building ${NINJA_TARGETS[*]} in $BUILD"
if ! ninja -C "$BUILD" -j "$JOBS" "${NINJA_TARGETS[@]}" >"$BUILD/build.log" 2>&1; then
  tail -40 "$BUILD/build.log"
  exit 1
fi
echo "   built in $(($(date +%s) - start)) s"

# Where the fuzz targets are (the runtime's standalone build puts them in
# its own binary directory).
FUZZ_BIN=$BUILD/fuzz

dict_of() {
  case "$1" in
  json | safetensors | checkpoint_index | run_config) echo fuzz/dict/json.dict ;;
  descriptor) echo fuzz/dict/descriptor.dict ;;
  flags) echo fuzz/dict/flags.dict ;;
  data) echo fuzz/dict/data.dict ;;
  mlir_pipeline) echo fuzz/dict/mlir.dict ;;
  esac
}

# The MLIR target's seeds: the IR of examples/ and test/, each
# split-input-file piece a seed of its own.
mlir_seeds() {
  local out=$1
  rm -rf "$out" && mkdir -p "$out"
  /usr/bin/python3 - "$out" <<'EOF'
import glob, hashlib, os, sys
out = sys.argv[1]
files = sorted(glob.glob("examples/*.mlir")) + sorted(glob.glob("test/**/*.mlir", recursive=True))
for path in files:
    text = open(path, encoding="utf-8", errors="replace").read()
    for piece in text.split("// -----"):
        lines = [l for l in piece.splitlines() if not l.lstrip().startswith(("// RUN", "// CHECK", "// expected-"))]
        body = "\n".join(lines).strip() + "\n"
        if len(body) > 20:
            name = hashlib.sha1(body.encode()).hexdigest()[:16]
            open(os.path.join(out, name + ".mlir"), "w").write(body)
EOF
}

ASAN_BASE=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in $TARGETS; do
  if [ "$t" = mlir_pipeline ]; then bin=$FUZZ_BIN/ztrain_fuzz_mlir_pipeline
  else bin=$FUZZ_BIN/ztrt_fuzz_$t; fi
  findings=$BUILD/findings/$t
  work=$BUILD/corpus/$t
  mkdir -p "$findings" "$work"
  seeds=(fuzz/corpus/$t)
  if [ "$t" = mlir_pipeline ]; then
    mlir_seeds "$BUILD/seeds/$t"
    seeds=("$BUILD/seeds/$t")
  fi
  regressions=()
  if [ -d "fuzz/regressions/$t" ]; then regressions=(fuzz/regressions/$t); fi
  timeout_s=10
  if [ "$t" = mlir_pipeline ]; then timeout_s=30; fi
  common=(-dict="$(dict_of "$t")" -timeout=$timeout_s -rss_limit_mb=2048
    -artifact_prefix="$findings/" -print_final_stats=1)
  log=$BUILD/fuzz-$t.log
  # LLVM's allocators poison the unused part of a slab in code inlined
  # into ztrain's instrumented objects; libMLIR.so's uninstrumented copies
  # then hand out that memory without unpoisoning it (use-after-poison
  # false positives): ignore manual poisoning for the compiler's target.
  export ASAN_OPTIONS=$ASAN_BASE
  if [ "$t" = mlir_pipeline ]; then export ASAN_OPTIONS=$ASAN_BASE:allow_user_poisoning=0; fi
  t0=$(date +%s)
  # Every regression input and seed once (libFuzzer runs files given by
  # name, one by one): a finding fixed stays fixed.
  mapfile -t inputs < <(find "${regressions[@]}" "${seeds[@]}" -type f | sort)
  if ((${#inputs[@]} == 0)); then
    echo "sanitize.sh: no seeds for $t" >&2
    exit 1
  fi
  if ! "$bin" "${common[@]}" "${inputs[@]}" >"$log" 2>&1; then
    echo "== $t: FAILED on a regression input or seed ($log):"
    grep -E "ERROR|SUMMARY|contract broken|Test unit written" "$log" | head -5
    status=1
    continue
  fi
  # Then fuzz from the seeds and what earlier runs of this build found.
  if [ "$SECONDS_PER_TARGET" -gt 0 ]; then
    # CI fuzzes from a fixed seed (FUZZ_SEED, default 1 in --ci): a run
    # explores the same inputs every time, so CI does not fail at random on
    # what a longer campaign should find; --full draws a fresh one.
    seed=()
    if [ -n "${FUZZ_SEED:-}" ]; then seed=(-seed="$FUZZ_SEED"); fi
    if ! "$bin" "${common[@]}" "${seed[@]}" -max_total_time="$SECONDS_PER_TARGET" \
      -len_control=20 "$work" "${regressions[@]}" "${seeds[@]}" >>"$log" 2>&1; then
      echo "== $t: FINDING ($log):"
      grep -E "ERROR|SUMMARY|contract broken|Test unit written" "$log" | head -5
      status=1
      continue
    fi
  fi
  execs=$(grep -aoE 'stat::number_of_executed_units: *[0-9]+' "$log" | awk '{s+=$2} END {print s+0}' || true)
  cov=$(grep -aoE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}' || true)
  echo "== $t: ok, $execs inputs in $(($(date +%s) - t0)) s, coverage ${cov:-?} edges," \
    "corpus $(ls "$work" | wc -l) + $(find "${seeds[@]}" -type f | wc -l) seeds"
done

if [ "$MODE" = ci ]; then
  # The runtime's unit tests under the sanitizers (the GoogleTest suite;
  # ctest's MPI collective programs are the unsanitized build's). Open MPI's
  # own allocations outlive MPI_Finalize (LeakSanitizer would report them),
  # and the tests' mpirun jobs need its root and oversubscription settings.
  t0=$(date +%s)
  echo "== runtime unit tests (ASan + UBSan)"
  # ContextTest refuses a 2^62-byte allocation: ASan must return null for
  # it as malloc does, not abort.
  if ! ASAN_OPTIONS=abort_on_error=1:detect_leaks=0:allocator_may_return_null=1 \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_rmaps_base_oversubscribe=1 \
    ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure -R '^[A-Za-z/]+Test' \
    >"$BUILD/unit-tests.log" 2>&1; then
    grep -E "tests passed|FAILED|Failed|ERROR: AddressSanitizer|runtime error" \
      "$BUILD/unit-tests.log" | head -20
    status=1
  else
    grep -E "tests passed" "$BUILD/unit-tests.log"
  fi
  echo "   in $(($(date +%s) - t0)) s"
fi
echo "== sanitize.sh ($MODE): $([ $status = 0 ] && echo passed || echo FAILED)" \
  "in $(($(date +%s) - start)) s"
exit $status

#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every suite
# (lit + FileCheck, the runtime's GoogleTest suite, the end-to-end pytest
# suite against PyTorch) through CTest, then scripts/sanitize.sh --ci.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir "${ZTRAIN_BUILD_DIR:-build}" --output-on-failure -j 2 "$@"
# The runtime under AddressSanitizer + UBSan: its libFuzzer targets for a
# fixed short time each, and its unit tests (docs/fuzzing.md). About 8
# minutes on 2 cores from a clean build; ZTRAIN_SKIP_SANITIZE=1 skips it.
if [ "${ZTRAIN_SKIP_SANITIZE:-0}" != 1 ]; then
  scripts/sanitize.sh --ci
fi

#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every suite
# (lit + FileCheck, the runtime's GoogleTest suite, the end-to-end pytest
# suite against PyTorch) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir "${ZTRAIN_BUILD_DIR:-build}" --output-on-failure -j 2 "$@"

#!/usr/bin/env bash
# Configures and builds ztrain into ${ZTRAIN_BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ZTRAIN_BUILD_DIR:-build}
JOBS=${ZTRAIN_JOBS:-2}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$BUILD_DIR" -j "$JOBS"

#!/usr/bin/env bash
# Regenerates the reference documentation (docs/reference/) from the ODS
# definitions: the train dialect's ops and every pass.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ZTRAIN_BUILD_DIR:-build}
ninja -C "$BUILD_DIR" mlir-doc >/dev/null
cp "$BUILD_DIR/docs/Dialects/TrainDialect.md" docs/reference/TrainDialect.md
cp "$BUILD_DIR/docs/Dialects/DistDialect.md" docs/reference/DistDialect.md
cat "$BUILD_DIR/docs/Passes/TrainPasses.md" "$BUILD_DIR/docs/Passes/DistPasses.md" \
  "$BUILD_DIR/docs/Passes/ConversionPasses.md" "$BUILD_DIR/docs/Passes/ZTrainPasses.md" \
  > docs/reference/Passes.md
echo "docs/reference/ regenerated"

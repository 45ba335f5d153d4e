#!/usr/bin/env bash
# The main job: compiles the bundled character-level GPT (examples/gpt.mlir)
# with AdamW and trains it on the bundled public-domain text, printing the
# loss as it falls and writing the weights and a JSON report under out/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
BIN=${ZTRAIN_BUILD_DIR:-build}/bin
mkdir -p out
STEPS=${STEPS:-600}
echo "== compiling examples/gpt.mlir (forward + loss) into a training executable"
"$BIN/ztrain-compile" examples/gpt.mlir -o out/gpt --optimizer=adamw --lr=3e-3 \
  --weight-decay=0.01 --dump-ir-dir=out/ir
echo "   IR after every stage: out/ir/"
echo "== training on examples/data/genesis-kjv.txt for $STEPS steps"
out/gpt --steps "$STEPS" --seed 1 --data examples/data/genesis-kjv.txt \
  --log-every 50 --save out/gpt.safetensors --report out/report.json
echo "== weights: out/gpt.safetensors, report: out/report.json"

#!/usr/bin/env bash
# The main job: compiles the bundled character-level GPT (examples/gpt.mlir)
# for ZeRO stage 3 on 2 ranks (AdamW), trains it on the bundled public-domain
# text with ztrain-run (mpirun), and prints the loss as it falls, a sample
# of the trained model, then the memory and communication zero-report
# predicted beside what the run measured. Outputs (weights, reports, IR of every stage) go under out/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
BIN=${ZTRAIN_BUILD_DIR:-build}/bin
mkdir -p out
STEPS=${STEPS:-600}
RANKS=2
STAGE=3
FLAGS=(--optimizer=adamw --lr=3e-3 --weight-decay=0.01 --overlap)
echo "== compiling examples/gpt.mlir for ZeRO stage $STAGE on $RANKS ranks"
"$BIN/ztrain-compile" examples/gpt.mlir -o out/gpt "${FLAGS[@]}" \
  --dp=$RANKS --zero-stage=$STAGE --dump-ir-dir=out/ir
"$BIN/ztrain-opt" examples/gpt.mlir \
  --ztrain-training="optimizer=adamw lr=3e-3 weight-decay=0.01" \
  --ztrain-zero="stage=$STAGE dp=$RANKS overlap=true" --plan-memory \
  --zero-report="format=json output=out/zero-report.json" -o /dev/null
echo "   IR after every pass: out/ir/"
echo "== training on examples/data/genesis-kjv.txt: $RANKS ranks x 8 sequences, $STEPS steps,"
echo "   then a sample of the trained model (temperature 0.8, top-k 200)"
"$BIN/ztrain-run" --np $RANKS out/gpt --steps "$STEPS" --seed 1 --threads 1 \
  --data examples/data/genesis-kjv.txt --log-every 50 \
  --save out/gpt.safetensors --report out/report.json \
  --sample "And God said" --sample-tokens 160
echo "== zero-report vs the run"
python3 scripts/compare-report.py out/zero-report.json out/report.json
echo "== weights: out/gpt.safetensors, report: out/report.json"

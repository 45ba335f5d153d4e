#!/usr/bin/env bash
# Emits the LLVM IR that ztrain-compile produces for a fixed set of
# configurations (docs/benchmarks.md's list and a few more: bf16, offload,
# recompute, frozen-free llama), one file each, so that a refactoring can be
# shown to change nothing: run it before and after, then diff the folders.
#
#   scripts/ir-identity.sh OUT_DIR [BIN_DIR]        # write OUT_DIR/*.ll
#   diff -r before/ after/ && echo byte-identical
set -euo pipefail
out=${1:?usage: ir-identity.sh OUT_DIR [BIN_DIR]}
bin=${2:-build/bin}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
compile() {
  local name=$1 model=$2
  shift 2
  "$bin/ztrain-compile" "$root/examples/$model" --emit=llvm -o "$out/$name.ll" "$@"
}
compile mlp-sgd-momentum mlp.mlir --optimizer=sgd --momentum=0.9
compile mlp-adamw-z1-dp2 mlp.mlir --optimizer=adamw --zero-stage=1 --dp=2
compile gpt-z0-dp1 gpt.mlir --optimizer=adamw
compile gpt-z0-dp2 gpt.mlir --optimizer=adamw --dp=2
compile gpt-z2-dp4-overlap gpt.mlir --optimizer=adamw --zero-stage=2 --dp=4 --overlap
compile gpt-z3-dp2-overlap-b64k gpt.mlir --optimizer=adamw --zero-stage=3 --dp=2 --overlap --bucket-bytes=65536
compile gpt-z3-dp2-tile gpt.mlir --optimizer=adamw --zero-stage=3 --dp=2 --max-tile-bytes=16384
compile gpt-z3-dp3-tile-overlap gpt.mlir --optimizer=adamw --zero-stage=3 --dp=3 --max-tile-bytes=16384 --overlap
compile gpt-bf16-z2-dp2 gpt.mlir --optimizer=adamw --precision=bf16 --zero-stage=2 --dp=2
compile gpt-fp16-z1-dp2 gpt.mlir --optimizer=adamw --precision=fp16 --zero-stage=1 --dp=2
compile gpt-recompute-sel-offact gpt.mlir --optimizer=adamw --recompute=selective --offload-activations=cpu
compile gpt-z3-offload-cpu gpt.mlir --optimizer=adamw --zero-stage=3 --dp=2 --offload-optimizer=cpu --offload-param=cpu
compile gpt-z3-offload-nvme gpt.mlir --optimizer=adamw --zero-stage=3 --dp=2 --offload-optimizer=nvme --offload-param=nvme --sub-group-size=4096
compile gpt-z2-offload-ratio gpt.mlir --optimizer=adamw --zero-stage=2 --dp=2 --offload-optimizer=cpu --offload-ratio=0.5
compile llama-bf16-z3-dp2-overlap llama.mlir --optimizer=adamw --precision=bf16 --zero-stage=3 --dp=2 --overlap --recompute=full
compile llama-sgd-nodecay llama.mlir --optimizer=sgd --momentum=0.9 --nesterov --no-decay=none --weight-decay=0.1
echo "wrote $(ls "$out" | wc -l) files to $out"

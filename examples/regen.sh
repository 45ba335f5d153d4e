#!/bin/sh
# Regenerates the example models from the Python builders (python/ztrain/models.py).
# Needs only a Python 3 with the standard library.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$here/../python${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}

# MNIST-sized MLP: 784 -> 128 -> 10, batch 32, nn.Linear's default init.
"$PY" -m ztrain.models mlp --batch 32 --in-features 784 --hidden 128 --classes 10 \
  -o "$here/mlp.mlir"

# Character-level GPT for the demo: byte tokens (vocab 256), context 64,
# 2 layers, width 64, 4 heads, batch 8 -- ~0.12M parameters, a few tens of
# ms per step on a 2-core CPU.
"$PY" -m ztrain.models gpt --batch 8 --seq 64 --vocab 256 --layers 2 --width 64 --heads 4 \
  -o "$here/gpt.mlir"

# Character-level Llama: RMSNorm, SwiGLU (hidden 176 = Llama's 8/3 rule),
# rotary embeddings, no biases, tied embeddings; same sizes as the GPT.
"$PY" -m ztrain.models llama --batch 8 --seq 64 --vocab 256 --layers 2 --width 64 --heads 4 \
  -o "$here/llama.mlir"

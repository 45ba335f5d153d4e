"""ztrain Python tools: IR builders, model definitions, safetensors I/O and the
PyTorch parity harness.

`ztrain.ir` and `ztrain.models` need only the standard library;
`ztrain.safetensors` and `ztrain.datasets` need numpy; `ztrain.torch_ref` and `ztrain.parity`
need torch (Debian's python3-torch: run them with /usr/bin/python3).
"""

__version__ = "0.1.0"

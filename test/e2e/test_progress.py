"""The progress line and report say how fast training goes (issue 15 item
7): tokens/s of a language model, achieved TFLOP/s per rank from the
compiler's matmul FLOP count (and MFU against --peak-tflops), the time
left; the FLOP count is the model's, exactly.
"""

import re

import pytest

import e2e_util
from ztrain import models, parity


def test_flop_count_is_the_models(tmp_path):
    # An MLP in -> h -> c on batch B: forward 2B(in h + h c); backward the
    # two weight gradients 2B(in h + h c) and the hidden activation's
    # gradient 2B h c (the input x needs none).
    B, i, h, c = 8, 16, 32, 5
    spec = models.mlp(batch=B, in_features=i, hidden=[h], classes=c)
    for k in (1, 3):
        exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("sgd"),
                                    name=f"m{k}", extra=[f"--grad-accum-steps={k}"])
        report = str(tmp_path / f"r{k}.json")
        parity.run_exe(exe, 1, report=report)
        want = 4 * B * i * h + 6 * B * h * c
        assert parity.read_report(report)["flops_per_step_per_rank"] == k * want


def test_progress_line_has_throughput_mfu_and_eta(tmp_path):
    spec = models.gpt(batch=8, seq=64, vocab=64, layers=2, width=64, heads=4)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw"), name="gpt")
    p = parity.run_exe(exe, 600, log_every=100, threads=1, extra=["--peak-tflops", "1"])
    lines = [l for l in p.stdout.splitlines() if l.startswith("step")]
    assert len(lines) == 6, p.stdout
    pat = re.compile(r"  ([0-9.]+) ms/step  ([0-9.]+)(k|M)? tok/s  ([0-9.e+-]+) TFLOP/s "
                     r"\(MFU ([0-9.]+)%\)")
    for line in lines:
        m = pat.search(line)
        assert m, line
        ms, rate, unit, tflops, mfu = m.groups()
        rate = float(rate) * {"k": 1e3, "M": 1e6, None: 1}[unit]
        # tokens/s = B T / step time, to the printed digits.
        assert rate == pytest.approx(8 * 64 / (float(ms) / 1e3), rel=0.06), line
        # MFU = TFLOP/s / peak (1 here), printed to one decimal (%.1f%%):
        # up to 0.05 off, more than 6% of a small MFU (0.558 prints as 0.6);
        # TFLOP/s itself is printed to three significant digits, 0.5% (or
        # 0.00005 TFLOP/s = 0.005 points of MFU: "0.0215 TFLOP/s" with "MFU
        # 2.2%" is an MFU of 2.145-2.155, 0.055 from 2.15). Both roundings
        # together: 0.06 points.
        assert float(mfu) == pytest.approx(100 * float(tflops), rel=0.01, abs=0.06), line
    # The time left: shown while at least a second remains, never on the
    # last line.
    assert "ETA" not in lines[-1]
    first_ms = float(pat.search(lines[0]).group(1))
    if first_ms * 500 / 1e3 >= 2.0:
        assert "ETA" in lines[0], lines[0]


def test_the_cpu_backend_names_no_peak(tmp_path):
    """The cpu backend cannot tell its processor's peak: no MFU without
    --peak-tflops, and the report says why (the cuda backend's device peak
    is test_cuda.py::test_mfu_uses_the_devices_peak)."""
    spec = models.mlp(batch=8, in_features=16, hidden=[32], classes=5)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("sgd"))
    report = str(tmp_path / "r.json")
    p = parity.run_exe(exe, 2, log_every=1, report=report)
    assert "MFU" not in p.stdout
    r = parity.read_report(report)
    assert r["peak_tflops"] is None
    assert r["peak_tflops_basis"] == "the cpu backend does not know its processor's peak"

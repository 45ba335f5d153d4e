"""Bad input to a compiled executable: one error line, a non-zero exit, and no
partial --save / --report file."""

import os
import re

import numpy as np

import e2e_util
from ztrain import parity, safetensors


def _check_fails(exe, args, d, must_mention=()):
    save = os.path.join(d, "out.safetensors")
    report = os.path.join(d, "out.json")
    r = e2e_util.run([exe] + list(args) + ["--save", save, "--report", report])
    msg = r.stderr.strip()
    assert r.returncode != 0, f"exit 0 for {args}; stderr: {msg!r}"
    assert r.returncode > 0, f"killed by signal {-r.returncode} (a crash) for {args}"
    lines = [l for l in msg.splitlines() if l.strip()]
    assert len(lines) == 1, f"expected one error line on stderr, got {lines!r}"
    for word in must_mention:
        assert re.search(r"(?<![\w.-])" + re.escape(word) + r"(?![\w-])", msg), \
            f"error {msg!r} does not mention {word!r}"
    assert not os.path.exists(save), "a --save file was written despite the error"
    assert not os.path.exists(report), "a --report file was written despite the error"
    leftovers = [f for f in os.listdir(d) if f.startswith("out") or ".tmp" in f]
    assert not leftovers, f"partial files left behind: {leftovers}"
    return msg


def test_bad_flag(small_mlp, tmp_path):
    _, exe, data, _ = small_mlp
    _check_fails(exe, ["--steps", "1", "--data", data, "--no-such-flag"], tmp_path,
                 ["--no-such-flag"])


def test_bad_flag_value(small_mlp, tmp_path):
    _, exe, data, _ = small_mlp
    _check_fails(exe, ["--steps", "many", "--data", data], tmp_path, ["--steps"])


def test_missing_init_file(small_mlp, tmp_path):
    _, exe, data, _ = small_mlp
    missing = os.path.join(tmp_path, "nope", "init.safetensors")
    _check_fails(exe, ["--steps", "1", "--data", data, "--init", missing], tmp_path,
                 [missing])


def test_wrong_shaped_init_tensor(small_mlp, tmp_path):
    spec, exe, data, _ = small_mlp
    init = parity.make_init(spec, 0)
    bad = spec.params[0].name   # fc1.weight
    init[bad] = np.zeros(tuple(reversed(init[bad].shape)), np.float32)
    path = os.path.join(tmp_path, "init_bad.safetensors")
    safetensors.save(path, init)
    _check_fails(exe, ["--steps", "1", "--data", data, "--init", path], tmp_path, [bad])


def test_init_missing_tensor(small_mlp, tmp_path):
    spec, exe, data, _ = small_mlp
    init = parity.make_init(spec, 0)
    gone = spec.params[-1].name
    del init[gone]
    path = os.path.join(tmp_path, "init_partial.safetensors")
    safetensors.save(path, init)
    _check_fails(exe, ["--steps", "1", "--data", data, "--init", path], tmp_path, [gone])


def test_missing_data_file(small_mlp, tmp_path):
    _, exe, _, _ = small_mlp
    missing = os.path.join(tmp_path, "nope.safetensors")
    _check_fails(exe, ["--steps", "1", "--data", missing], tmp_path, [missing])


def test_label_out_of_range(small_mlp, tmp_path):
    spec, exe, _, _ = small_mlp
    data = parity.make_data(spec, samples=8, seed=1)
    data["y"][3] = spec.config["classes"]     # one past the last class
    path = os.path.join(tmp_path, "data_bad.safetensors")
    safetensors.save(path, data)
    _check_fails(exe, ["--steps", "1", "--data", path], tmp_path, ["y"])


def test_good_run_after_all(small_mlp, tmp_path):
    """The same executable with valid arguments succeeds (the failures above are real)."""
    _, exe, data, _ = small_mlp
    save = os.path.join(tmp_path, "ok.safetensors")
    report = os.path.join(tmp_path, "ok.json")
    r = e2e_util.run([exe, "--steps", "2", "--data", data, "--save", save, "--report", report])
    assert r.returncode == 0, r.stderr
    rep = parity.read_report(report)
    assert [s["step"] for s in rep["steps"]] == [1, 2]
    assert all(np.isfinite(s["loss"]) and s["time_ms"] >= 0 for s in rep["steps"])
    assert "memory" in rep
    safetensors.load(save)


def test_log_every_zero_is_silent(small_mlp, tmp_path):
    """--log-every 0 turns progress lines off (what scripts and benchmarks use)."""
    _, exe, data, _ = small_mlp
    r = e2e_util.run([exe, "--steps", "3", "--data", data, "--log-every", "0"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", r.stdout


def test_every_ranks_file_error_is_one_line(tmp_path):
    """On 2 ranks, a --data, --eval-data or --init problem that every rank
    meets is printed once (rank 0 reads the shared files first; issue 49:
    each rank printed the same line)."""
    from ztrain import models
    spec = models.mlp(batch=4, in_features=8, hidden=[8], classes=3)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adam"), name="dp2",
                                extra=["--dp", "2"])
    data = os.path.join(tmp_path, "data.safetensors")
    safetensors.save(data, parity.make_data(spec, samples=16, seed=1))
    init = parity.make_init(spec, 0)
    gone = spec.params[-1].name
    del init[gone]
    partial = os.path.join(tmp_path, "partial.safetensors")
    safetensors.save(partial, init)
    missing = os.path.join(tmp_path, "nope.safetensors")
    for args, word in ((["--data", missing], missing),
                       (["--data", data, "--eval-data", missing], "--eval-data"),
                       (["--data", data, "--init", partial], gone)):
        p = e2e_util.mpirun(2, [exe, "--steps", 1, "--threads", 1] + args, check=False)
        errors = [l for l in p.stderr.splitlines() if l.startswith("ztrain: error:")]
        assert p.returncode != 0 and len(errors) == 1 and word in errors[0], p.stderr

"""Bad inputs to a compiled executable: refused with one line naming the
flag and the file, non-zero exit, before any step runs, nothing left behind.
"""

import os
import resource
import stat
import struct
import time
import subprocess

import numpy as np
import pytest

import e2e_util
from ztrain import models, parity, safetensors


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_inputs")
    spec = models.mlp(batch=4, in_features=6, hidden=[8], classes=3)
    exe = e2e_util.compile_text(spec.to_mlir(), str(d), parity.OptimizerConfig("sgd", lr=0.1))
    return spec, exe


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=60, **kw)


def one_error(p):
    assert p.returncode != 0, p.stdout
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ztrain: error: "), p.stderr
    return lines[0]


def test_devices_are_not_read_without_bound(mlp, tmp_path):
    _, exe = mlp
    line = one_error(run([exe, "--steps", 1, "--init", "/dev/zero"]))
    assert line == ("ztrain: error: --init: '/dev/zero' is not a regular file (a device, "
                    "pipe or directory would be read without bound)")
    # A token model reads --data as raw bytes: the same check.
    gpt = models.gpt(batch=2, seq=8, vocab=32, layers=1, width=16, heads=2)
    tokens = e2e_util.compile_text(gpt.to_mlir(), str(tmp_path), parity.OptimizerConfig("sgd", lr=0.1))
    line = one_error(run([tokens, "--steps", 1, "--data", "/dev/zero"]))
    assert line == ("ztrain: error: --data: '/dev/zero' is not a regular file (a device, "
                    "pipe or directory would be read without bound)")


def test_a_huge_header_length_is_refused_before_reading_the_file(mlp, tmp_path):
    _, exe = mlp
    path = tmp_path / "bogus.safetensors"
    # 64 MiB of file behind a header length of 2^60: refused from the first
    # 8 bytes (the size check needs no read of the rest).
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", 1 << 60))
        fh.truncate(64 << 20)
    def peak_rss_kib(args):
        """Runs the executable; returns (exit status, stderr, peak RSS)."""
        with open(tmp_path / "err", "w+") as err:
            child = subprocess.Popen([str(exe)] + args, stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            return child.returncode, err.read(), usage.ru_maxrss

    _, _, baseline = peak_rss_kib(["--help"])
    code, err, peak = peak_rss_kib(["--steps", "1", "--init", str(path)])
    line = one_error(subprocess.CompletedProcess([], code, "", err))
    assert line == (f"ztrain: error: --init: '{path}' is not a valid safetensors file: header "
                    f"length {1 << 60} exceeds the file ({64 << 20} bytes)")
    # Reading the file would have added 64 MiB to the process; the refusal
    # costs nothing over starting up (16 MiB of slack for allocator noise).
    assert peak < baseline + (16 << 10), (peak, baseline)


@pytest.mark.parametrize("flag,path,problem", [
    ("--report", "/nonexistent/r.json", "directory '/nonexistent' does not exist"),
    ("--save", "/nonexistent/w.safetensors", "directory '/nonexistent' does not exist"),
    ("--save", "/", "is a directory, not a file"),
    ("--save-checkpoint", "/proc/version", "exists and is not a directory"),
])
def test_output_paths_are_checked_before_the_first_step(mlp, flag, path, problem):
    _, exe = mlp
    p = run([exe, "--steps", 3, flag, path])
    assert one_error(p) == f"ztrain: error: {flag} '{path}': {problem}"
    assert "step 1" not in p.stdout


def test_a_full_disk_quota_is_a_message_not_a_signal(mlp, tmp_path):
    """Past ulimit -f the write fails (EFBIG) instead of SIGXFSZ killing the
    process: one line, and no temporary file is left."""
    _, exe = mlp
    out = tmp_path / "w.safetensors"

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    p = run([exe, "--steps", 1, "--save", out], preexec_fn=small_files)
    assert one_error(p) == f"ztrain: error: cannot write '{out}': File too large"
    assert os.listdir(tmp_path) == []


def test_a_non_finite_loss_stops_the_run(mlp, tmp_path):
    """NaN in the data propagates (relu keeps NaN, as PyTorch does) and the
    run stops at that step with a message, where it used to print -nan and
    exit 0; --allow-nonfinite-loss trains on."""
    spec, exe = mlp
    data = parity.make_data(spec, samples=8, seed=2)
    data["x"][5, 1] = np.nan          # sample 5: in step 2's batch (rows 4..7)
    path = tmp_path / "data.safetensors"
    safetensors.save(str(path), data)
    p = run([exe, "--steps", 4, "--data", path])
    assert one_error(p) == ("ztrain: error: step 2: the loss is NaN; stopping "
                            "(--allow-nonfinite-loss trains on)")
    assert "step 1/4" in p.stdout and "step 3/4" not in p.stdout
    p = run([exe, "--steps", 4, "--data", path, "--allow-nonfinite-loss"])
    assert p.returncode == 0, p.stderr
    assert "step 4/4  loss nan" in p.stdout


def test_a_plan_larger_than_the_machine_is_refused_before_allocating(tmp_path):
    """A model whose plan needs 512 GiB per rank used to start allocating;
    the executable compares the descriptor's bytes with what this node has
    (MemAvailable or the cgroup's limit, per rank) and refuses with both."""
    text = """
train.param @w : tensor<65536x1048576xf32> init(zeros)
func.func @loss(%x: tensor<4x1048576xf32> {train.name = "x"},
                %y: tensor<4xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<65536x1048576xf32>
  %h = train.matmul %x, %w {transpose_b} : (tensor<4x1048576xf32>, tensor<65536x1048576xf32>) -> tensor<4x65536xf32>
  %l = train.cross_entropy %h, %y : (tensor<4x65536xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
"""
    exe = e2e_util.compile_text(text, str(tmp_path), parity.OptimizerConfig("sgd", lr=0.1))
    began = time.monotonic()
    line = one_error(run([exe, "--steps", 1]))
    # 2^36 floats of parameters and as many of gradient (SGD without
    # momentum has no states): 256 GiB + 256 GiB, 16 MiB of inputs, 2 MiB
    # of activations.
    assert line.startswith("ztrain: error: the compiled plan needs 512.02 GiB per rank "
                           "(model states 512.00 GiB, inputs 16.00 MiB, buffers 0 bytes, "
                           "step arenas 2.00 MiB) but rank(s) 0 ("), line
    assert "but rank(s) 0 (" in line and "have less available (" in line
    assert time.monotonic() - began < 10   # refused, not after faulting in pages


def test_outputs_never_replace_devices_or_pipes(mlp, tmp_path):
    """Found by test/fuzz: `--save /dev/null` as root renamed a regular file
    over the device node. Outputs that exist and are not regular files are
    refused (a FIFO stands in for the device here), and a FIFO as an input
    is refused at once rather than waiting for a writer."""
    _, exe = mlp
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for flag in ("--save", "--report", "--trace"):
        line = one_error(run([exe, "--steps", 1, flag, fifo]))
        assert line == (f"ztrain: error: {flag} '{fifo}': exists and is not a regular file "
                        "(outputs are written to a temporary file renamed into place, which "
                        "would replace it)")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    line = one_error(run([exe, "--steps", 1, "--init", fifo]))
    assert line == (f"ztrain: error: --init: '{fifo}' is not a regular file (a device, pipe "
                    "or directory would be read without bound)")

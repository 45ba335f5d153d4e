"""Reliability, round three (issue 44): outputs found unwritable before
step 1, checkpoint files that are FIFOs, one writer per checkpoint
directory, and an entry function without a body.

Each case is one line on stderr, a non-zero exit, nothing left behind.
"""

import os
import signal
import subprocess
import time

import pytest

import e2e_util


def errors(p):
    return [l for l in p.stderr.splitlines() if l.startswith("ztrain: error:")]


@pytest.mark.parametrize("flag,path,kind", [
    ("--save", "/proc/w.safetensors", "a file"),
    ("--report", "/proc/r.json", "a file"),
    ("--save-checkpoint", "/proc/ck", "a directory"),
])
def test_unwritable_output_is_refused_before_step_one(small_mlp, flag, path, kind):
    """root passes access(W_OK) on /proc; the probe creates (and removes) a
    file or directory there instead, so the run stops before training."""
    _, exe, data, _ = small_mlp
    t0 = time.monotonic()
    p = e2e_util.run([exe, "--steps", 100000, "--data", data, flag, path])
    assert p.returncode == 1
    assert errors(p) == [f"ztrain: error: {flag} '{path}': cannot create {kind} in "
                         "'/proc': No such file or directory"]
    assert "step " not in p.stdout
    assert time.monotonic() - t0 < 30   # it did not train 100000 steps


@pytest.mark.parametrize("which", ["latest", "index"])
def test_checkpoint_files_that_are_fifos_do_not_hang(small_mlp, tmp_path, which):
    _, exe, data, _ = small_mlp
    ck = tmp_path / "ck"
    if which == "latest":
        ck.mkdir()
        os.mkfifo(ck / "latest")
        bad = ck / "latest"
    else:
        p = e2e_util.run([exe, "--steps", 1, "--data", data, "--save-checkpoint", ck])
        assert p.returncode == 0, p.stderr
        bad = ck / "global_step1" / "index.json"
        bad.unlink()
        os.mkfifo(bad)
    # e2e_util.run's timeout (120 s) would catch a hang; the refusal is
    # immediate.
    p = e2e_util.run([exe, "--steps", 1, "--data", data, "--resume", ck])
    assert p.returncode == 1
    assert errors(p) == [f"ztrain: error: --resume: '{bad}' is not a regular file (a "
                         "device, pipe or directory would be read without bound)"]


def test_second_run_on_a_checkpoint_directory_is_refused(small_mlp, tmp_path):
    """Two runs, one --save-checkpoint directory: the second is refused in
    one line naming the first's pid, and writes nothing there. When the
    first dies (SIGKILL: no cleanup), the kernel drops its lock and a new
    run may write."""
    _, exe, data, _ = small_mlp
    ck = tmp_path / "ck"
    ck.mkdir()
    first = subprocess.Popen([str(exe), "--steps", "100000000", "--data", data,
                              "--save-checkpoint", str(ck), "--checkpoint-every",
                              "100000000"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        # Wait until the first run holds the directory's flock (it takes it
        # before step 1), as /proc/locks shows it; probing earlier would race
        # the first run for the lock and could win it.
        st = os.stat(ck)
        dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        deadline = time.monotonic() + 120
        while not any(f" {first.pid} {dev} " in line
                      for line in open("/proc/locks")):
            assert first.poll() is None, f"the first run ended: {first.communicate()[1]}"
            assert time.monotonic() < deadline, "the first run never took its lock"
            time.sleep(0.05)
        p = e2e_util.run([exe, "--steps", 3, "--data", data, "--seed", 9,
                          "--save-checkpoint", ck])
        assert p.returncode == 1, "the second run was not refused"
        assert errors(p) == [f"ztrain: error: --save-checkpoint '{ck}': another run (pid "
                             f"{first.pid} on this host) is writing checkpoints there; "
                             "give this run another directory, or stop that one"]
        assert list(ck.iterdir()) == []
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    p = e2e_util.run([exe, "--steps", 2, "--data", data, "--save-checkpoint", ck])
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(ck)) == ["global_step2", "latest"]


def test_entry_declaration_is_a_located_error(tmp_path):
    src = tmp_path / "decl.mlir"
    src.write_text('train.param @w : tensor<4xf32> init(ones)\n'
                   'func.func private @loss(%x: tensor<4xf32> {train.name = "x"}) '
                   '-> tensor<f32> attributes {train.entry}\n')
    for tool, args in (("ztrain-compile", ["-o", tmp_path / "out"]),
                       ("ztrain-opt", ["--ztrain-training"])):
        p = e2e_util.run([e2e_util.require_tool(tool), src] + args)
        assert p.returncode == 1, (tool, p.stderr)
        assert (f"{src}:2:1: error: 'func.func' op 'train.entry' function @loss is a "
                "declaration: the entry function needs a body") in p.stderr
        assert "Stack dump" not in p.stderr and "PLEASE submit" not in p.stderr
    assert not (tmp_path / "out").exists()

"""Helpers of the end-to-end tests (imported by conftest.py and the tests)."""

import os
import shutil
import subprocess

import pytest

from ztrain import parity, safetensors


def require_tool(name):
    try:
        return parity.tool(name)
    except parity.ToolError as e:
        msg = str(e)
    pytest.fail(msg, pytrace=False)


def compile_text(mlir_text, workdir, optimizer=None, name="model", extra=()):
    """Write `mlir_text` to workdir/name.mlir, compile it, return the executable."""
    if not os.environ.get("ZTRAIN_COMPILE_CACHE"):
        require_tool("ztrain-compile")
    src = os.path.join(workdir, name + ".mlir")
    with open(src, "w") as fh:
        fh.write(mlir_text)
    return parity.compile_model(src, os.path.join(workdir, name), optimizer, extra)


def compile_spec(spec, workdir, optimizer=None, name="model"):
    return compile_text(spec.to_mlir(), workdir, optimizer, name)


def run(cmd):
    return subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def mpirun(n, cmd, check=True, timeout=300):
    """`mpirun -np n cmd` as root and oversubscribed (CI has 2 cores and runs
    as root); asserts success unless check=False. Returns the process."""
    launcher = shutil.which("mpirun")
    assert launcher, "mpirun not found (openmpi-bin)"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run([launcher, "--oversubscribe", "-np", str(n)] + [str(c) for c in cmd],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, env=env)
    if check:
        assert p.returncode == 0, f"mpirun -np {n} failed:\n{p.stdout}\n{p.stderr}"
    return p


def launch(n, cmd, timeout=600):
    """Runs `cmd` as n ranks (mpirun) or, for n == 1, as one process;
    asserts success either way."""
    if n > 1:
        return mpirun(n, cmd, timeout=timeout)
    p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p


def child_pids(pid):
    """The pids whose parent is `pid` (from /proc): a launcher's ranks."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid:
            out.append(int(entry))
    return out


def compile_zero_mlp(workdir, dp=2, name="model"):
    """The small MLP (batch 2, 12-16-5, Adam lr 1e-2) compiled for ZeRO
    stage 3 on `dp` ranks: the model of the checkpoint, crash and hang
    tests."""
    from ztrain import models
    spec = models.mlp(batch=2, in_features=12, hidden=[16], classes=5)
    return compile_text(spec.to_mlir(), str(workdir), parity.OptimizerConfig("adam", lr=1e-2),
                        name=name, extra=["--dp", str(dp), "--zero-stage", "3"])


def io_events(events):
    """The transfers of a trace: the events on its I/O lanes ("io", "io 2",
    ...)."""
    lanes = {e["tid"] for e in events if e["name"] == "thread_name" and
             (e["args"]["name"] == "io" or e["args"]["name"].startswith("io "))}
    return [e for e in events if e["ph"] == "X" and e["tid"] in lanes]


def assert_tracks_nest(events):
    """On every track the slices nest or are disjoint (Perfetto shows
    partially overlapping slices wrongly). Exact in the file's nanoseconds."""
    tracks = {}
    for e in events:
        if e["ph"] == "X":
            ns = round(float(e["ts"]) * 1000), round(float(e["dur"]) * 1000)
            tracks.setdefault(e["tid"], []).append((ns[0], ns[0] + ns[1]))
    for tid, spans in tracks.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends = []
        for begin, end in spans:
            while open_ends and open_ends[-1] <= begin:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], \
                f"track {tid}: the slice at {begin} ns overlaps another partially"
            open_ends.append(end)


def far_from_single_process(ref_spec, init, data_path, got, ref, optimizer, steps, tol,
                            noise=()):
    """The tensors of `got` (a distributed run) further than `tol` (relative,
    norm-wise) from `ref` (one process on the global batch), leaving out
    `noise` and those the float64 trajectory excuses: a tensor passes if it
    is within `tol` of torch float64, or no further from it than the one
    process is, provided the one process is within 5 `tol` of float64 and
    the two runs within 10 `tol` of each other (test_zero_equivalence.py
    says why). Returns {name: distance}."""
    bad = {k: parity.rel_err(got[k], ref[k]) for k in sorted(set(ref) - set(noise))}
    bad = {k: e for k, e in bad.items() if e > tol}
    if bad:
        data = safetensors.load(data_path)
        _, exact = parity.torch_train(ref_spec, init, data, steps, optimizer, float64=True)
        for k in list(bad):
            to_exact = parity.rel_err(got[k], exact[k])
            ref_to_exact = parity.rel_err(ref[k], exact[k])
            if to_exact <= max(tol, ref_to_exact) and ref_to_exact <= 5 * tol \
                    and bad[k] <= 10 * tol:
                del bad[k]
    return bad

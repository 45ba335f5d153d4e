"""A save that runs out of disk (ENOSPC on a small tmpfs, EFBIG past
`ulimit -f`) is one line naming the file, a non-zero exit, and nothing left
behind: the previous checkpoint stays `latest` and resumes bitwise to what an
uninterrupted run computes; no temporary directory or file remains, on one
rank and on two.

The tmpfs needs root and CAP_SYS_ADMIN (mount); where they are missing the
ENOSPC tests skip and the EFBIG ones (an rlimit, no privilege) still run.
"""

import contextlib
import os
import resource
import shutil
import subprocess

import pytest

import e2e_util
from ztrain import models, parity, safetensors

# Owns machine-wide resources (conftest.py: one shard runs it whole).
E2E_SERIAL = True

MPIRUN = shutil.which("mpirun")
# Adam over ~4.4k f32 parameters: ~53 kB per checkpoint (weights, two
# moments); a 100 kB disk holds one and fails on the second.
SPEC = models.mlp(batch=4, in_features=64, hidden=[64], classes=4)
DISK = "100k"


@contextlib.contextmanager
def tmpfs(mnt, size):
    """A tmpfs of `size` (mount's syntax) at `mnt`; skips the test where it
    cannot be mounted."""
    mnt.mkdir()
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if not mount or not umount:
        pytest.skip("mount(8) not installed")
    p = subprocess.run([mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs here (needs root and CAP_SYS_ADMIN): "
                    f"{p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run([umount, str(mnt)], check=False)


@pytest.fixture
def small_disk(tmp_path):
    with tmpfs(tmp_path / "disk", DISK) as mnt:
        yield mnt


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("full")
    one = e2e_util.compile_text(SPEC.to_mlir(), str(d), parity.OptimizerConfig("adam"),
                                name="one")
    two = e2e_util.compile_text(SPEC.to_mlir(), str(d), parity.OptimizerConfig("adam"),
                                name="two", extra=["--dp=2", "--zero-stage=2"])
    data = str(d / "data.safetensors")
    safetensors.save(data, parity.make_data(SPEC, samples=8 * 2 * SPEC.batch, seed=3))
    return one, two, data


def error_lines(p):
    return [l for l in p.stderr.splitlines() if l.startswith("ztrain: error")]


def check_left_as_before(root):
    # The checkpoint before the failed save, and nothing else.
    assert sorted(os.listdir(root)) == ["global_step1", "latest"], os.listdir(root)
    assert (root / "latest").read_text().strip() == "global_step1"


def test_a_checkpoint_that_does_not_fit_leaves_the_previous_one(built, small_disk, tmp_path):
    one, _, data = built
    root = small_disk / "ck"
    p = e2e_util.run([one, "--steps", "4", "--data", data, "--save-checkpoint", root,
                      "--checkpoint-every", "1", "--keep-checkpoints", "4"])
    assert p.returncode != 0
    lines = error_lines(p)
    assert len(lines) == 1, p.stderr
    assert lines[0] == (f"ztrain: error: cannot write '{root}/.tmp-global_step2/"
                        "rank-0-of-1.safetensors': No space left on device"), lines[0]
    check_left_as_before(root)
    # It resumes to what an uninterrupted run computes, bitwise.
    whole, resumed = tmp_path / "whole.safetensors", tmp_path / "resumed.safetensors"
    assert e2e_util.run([one, "--steps", "3", "--data", data, "--save", whole]).returncode == 0
    p = e2e_util.run([one, "--steps", "2", "--data", data, "--resume", root, "--save", resumed])
    assert p.returncode == 0, p.stderr
    assert whole.read_bytes() == resumed.read_bytes()


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_two_ranks_leave_nothing_behind(built, small_disk):
    _, two, data = built
    root = small_disk / "ck"
    p = e2e_util.mpirun(2, [two, "--steps", "4", "--data", data, "--save-checkpoint", root,
                            "--checkpoint-every", "1"], check=False, timeout=120)
    assert p.returncode != 0
    assert "No space left on device" in p.stderr, p.stderr
    check_left_as_before(root)


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_swap_files_that_fit_one_rank_but_not_both_are_refused_before_any_reserves(tmp_path):
    """Two ranks of one node with --nvme-path on one file system share its
    free space: each fits alone, and without a joint count both pass their
    own check and the second's reservation fails mid-way. Refused up front,
    in one line naming the free bytes, the ranks and what they need
    together; nothing is created."""
    d = tmp_path / "build"
    d.mkdir()
    exe = e2e_util.compile_text(SPEC.to_mlir(), str(d), parity.OptimizerConfig("adam"),
                                name="nv", extra=["--dp=2", "--zero-stage=1",
                                                  "--offload-optimizer=nvme"])
    data = str(d / "data.safetensors")
    safetensors.save(data, parity.make_data(SPEC, samples=4 * SPEC.batch, seed=3))
    # What each rank swaps, from a run with room.
    roomy, report = tmp_path / "roomy", tmp_path / "r.json"
    roomy.mkdir()
    e2e_util.mpirun(2, [exe, "--steps", "1", "--data", data, "--nvme-path", roomy,
                        "--report", report])
    per_rank = parity.read_report(str(report))["offload"]["nvme_bytes"]
    assert per_rank > 0 and per_rank % 4096 == 0
    # Room for one rank's and a half (tmpfs sizes are whole pages).
    size = per_rank + per_rank // 2 // 4096 * 4096
    with tmpfs(tmp_path / "disk", size) as mnt:
        p = e2e_util.mpirun(2, [exe, "--steps", "1", "--data", data, "--nvme-path", mnt],
                            check=False, timeout=120)
        assert p.returncode != 0
        lines = error_lines(p)
        assert lines == [f"ztrain: error: [rank 0] --nvme-path '{mnt}': {size} bytes free on "
                         f"the file system that ranks 0 and 1 share on one node, and their swap "
                         f"files need {2 * per_rank} bytes together ({per_rank} bytes for "
                         f"rank 0)"], \
            p.stderr
        assert os.listdir(mnt) == []


def test_past_the_file_size_limit_a_save_is_one_line_and_no_leftovers(built, tmp_path):
    one, _, data = built
    root = tmp_path / "ck"
    # The first checkpoint fits under the limit; its files are what they are
    # (a limit below the shard fails the first save instead).
    assert e2e_util.run([one, "--steps", "1", "--data", data, "--save-checkpoint",
                         root]).returncode == 0
    shard = max(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(root) for f in fs)

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (shard // 2, shard // 2))

    p = subprocess.run([str(one), "--steps", "1", "--data", data, "--resume", str(root),
                        "--save-checkpoint", str(root)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       preexec_fn=limit, timeout=120)
    assert p.returncode != 0
    lines = error_lines(p)
    assert len(lines) == 1 and lines[0].endswith("File too large"), p.stderr
    assert ".tmp-global_step2" in lines[0]
    check_left_as_before(root)

"""No hang, ever: a rank that stops answering (SIGSTOP) or dies (SIGKILL)
mid-run ends the whole job within seconds, with a ztrain message naming the
collective, the step and the rank that did not arrive, where rank 0 used to
spin at 100% CPU forever.
"""

import os
import re
import shutil
import signal
import subprocess
import time

import pytest

import e2e_util

TIMEOUT_S = 3


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    return e2e_util.compile_zero_mlp(tmp_path_factory.mktemp("hangs"))


rank_pids = e2e_util.child_pids


def start(exe, extra=(), log_every=2000):
    """Launches a long 2-rank run and returns once it is training (rank 0
    printed a progress line: both ranks are past MPI's start-up, their
    watchdogs run, and collectives flow)."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    job = subprocess.Popen([shutil.which("mpirun"), "--quiet", "--oversubscribe", "-np", "2",
                            str(exe),
                            "--steps", "10000000", "--log-every", str(log_every),
                            "--threads", "1",
                            "--collective-timeout", str(TIMEOUT_S), *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                           start_new_session=True)
    first = job.stdout.readline()
    if first.startswith("MFU against the device's peak"):  # the cuda backend's start line
        first = job.stdout.readline()
    assert first.startswith("step "), first
    return job


@pytest.mark.parametrize("sig", [signal.SIGSTOP, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_rank_that_stops_answering_ends_the_job(exe, sig):
    stop_and_check(start(exe), sig, r"(the \w+ of \d+ elements \()?MPI_\w+\)?")


@pytest.mark.parametrize("sig", [signal.SIGSTOP, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_stopped_rank_ends_a_cuda_job(tmp_path, sig):
    """The same on the cuda backend, whose collectives are NCCL's on the
    device: the host waits for its stream, not in MPI, and that wait is
    timed by the same watchdog, as are the NCCL calls themselves (which can
    block the host). Runs on the CUDA emulator, whose NCCL (over MPI) blocks
    in the call for the stopped rank."""
    from test_cuda import EMULATOR_DIR, HAVE_EMULATOR
    if not HAVE_EMULATOR:
        pytest.skip(f"no CUDA emulator runtime at {EMULATOR_DIR}")
    from ztrain import models, parity
    spec = models.mlp(batch=2, in_features=12, hidden=[16], classes=5)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adam", lr=1e-2),
                                extra=["--dp", "2", "--zero-stage", "3",
                                       "--runtime-dir", EMULATOR_DIR])
    # Mostly in a device wait or an NCCL call; once per step the host also
    # gathers the ranks' losses over MPI (the progress line's mean), and a
    # rank stopped just before it leaves the other waiting there.
    stop_and_check(start(exe, ["--backend", "cuda"], log_every=20), sig,
                   r"(a wait for the device's NCCL collectives|nccl\w+|MPI_Allgather)")


def stop_and_check(job, sig, waited_in):
    victim = max(rank_pids(job.pid))
    stopped_at = time.monotonic()
    os.kill(victim, sig)
    try:
        _, err = job.communicate(timeout=30)
    finally:
        for pid in rank_pids(job.pid) + [victim]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    took = time.monotonic() - stopped_at
    assert job.returncode != 0
    # Within the timeout plus the watchdog's polling and the launcher's
    # teardown, far below the 30 s the issue allows.
    assert took < TIMEOUT_S + 10, took
    lines = err.splitlines()
    # Nothing but ztrain's lines (mpirun --quiet, as ztrain-run launches).
    assert all(line.startswith("ztrain: error: [rank ") for line in lines), err
    if sig == signal.SIGSTOP:
        # The rank that still answers names what it waited in, when, and the
        # rank that did not arrive: its watchdog asked the stopped rank's,
        # which could not answer.
        m = re.search(r"ztrain: error: \[rank ([01])\] " + waited_in + ", "
                      r"collective #\d+ of step \d+, has waited 3 s for the other ranks "
                      r"\(--collective-timeout 3\); did not arrive: rank ([01]) \(no answer in "
                      r"2 s: stopped, hung or dead\); ending the job", err)
        assert m, err
        assert m.group(1) != m.group(m.lastindex), err
    else:
        # The launcher ends the survivor with SIGTERM; it says so and names
        # its step.
        assert re.search(r"ztrain: error: \[rank [01]\] ended by SIGTERM in step \d+: the "
                         r"launcher ends every rank when one fails", err), err


def test_a_rank_that_is_alive_elsewhere_is_named():
    """Ranks 0 and 2 wait in a barrier that rank 1, alive and answering its
    watchdog's queries, never enters (runtime/tests/mpi_watchdog.cpp): the
    message says where rank 1 is instead."""
    p = subprocess.run([e2e_util.require_tool("ztrain-run"), "--np", "3",
                        e2e_util.require_tool("ztrt_mpi_watchdog")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    # Both waiting ranks time out together; the first one's abort may end
    # the other before it prints, so at least one line, each exactly this.
    lines = [line for line in p.stderr.splitlines() if "has waited" in line]
    assert lines, p.stderr
    for line in lines:
        assert re.fullmatch(r"ztrain: error: \[rank [02]\] MPI_Barrier, collective #2 of step 3, "
                            r"has waited 1 s for the other ranks \(--collective-timeout 1\); did "
                            r"not arrive: rank 1 \(step 3, computing, after collective #1\); "
                            r"ending the job", line), p.stderr


def test_the_timeout_flag_is_checked(exe):
    p = subprocess.run([str(exe), "--collective-timeout", "-1"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2
    assert p.stderr == ("ztrain: error: flag --collective-timeout: '-1' is not a number of "
                        "seconds >= 0\n")

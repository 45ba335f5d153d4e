"""No hang, ever: a rank that stops answering (SIGSTOP) or dies (SIGKILL)
mid-run ends the whole job within seconds, with a ztrain message naming the
collective and the step, where rank 0 used to spin at 100% CPU forever.
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


def start(exe):
    """Launches a long 2-rank run and returns once it is training (rank 0
    printed a progress line: both ranks are past MPI's start-up, their
    watchdogs run, and collectives flow)."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    job = subprocess.Popen([shutil.which("mpirun"), "--oversubscribe", "-np", "2", str(exe),
                            "--steps", "10000000", "--log-every", "2000", "--threads", "1",
                            "--collective-timeout", str(TIMEOUT_S)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                           start_new_session=True)
    first = job.stdout.readline()
    assert first.startswith("step "), first
    return job


@pytest.mark.parametrize("sig", [signal.SIGSTOP, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_rank_that_stops_answering_ends_the_job(exe, sig):
    job = start(exe)
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
    if sig == signal.SIGSTOP:
        # The rank that still answers names what it waited in and when.
        assert re.search(r"ztrain: error: \[rank [01]\] MPI_\w+ has waited 3 s for the other "
                         r"ranks \(step \d+; --collective-timeout 3\): a rank is stuck or "
                         r"dead, ending the job", err), err


def test_the_timeout_flag_is_checked(exe):
    p = subprocess.run([str(exe), "--collective-timeout", "-1"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 2
    assert p.stderr == ("ztrain: error: flag --collective-timeout: '-1' is not a number of "
                        "seconds >= 0\n")

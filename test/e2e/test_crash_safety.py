"""Checkpoints survive being killed at any point of saving.

A job that resumes from the checkpoint root and saves after every step is
SIGKILLed at a random moment after its first save, until 50 kills have hit
it while it was saving: at random the whole job (the launcher and its
ranks) or one rank (Open MPI then ends the others). After every kill, `latest` must name a complete checkpoint that
resumes bitwise to what an uninterrupted run computes. The steps of this
tiny model take microseconds and each save several fsyncs, so nearly every
kill lands inside a save: between shards, between the index and the rename,
between the rename and the switch of `latest`, during the pruning.
"""

import os
import random
import shutil
import signal
import subprocess
import time

import pytest

import e2e_util

KILLS = 50
STEPS = 16


children = e2e_util.child_pids


def sigkill(pid, group=False):
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def latest_step(root):
    with open(os.path.join(root, "latest")) as fh:
        tag = fh.read().strip()
    assert tag.startswith("global_step"), tag
    return int(tag[len("global_step"):])


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    return e2e_util.compile_zero_mlp(tmp_path_factory.mktemp("crash"))


def test_killed_saves_always_leave_a_resumable_checkpoint(exe, tmp_path):
    common = ["--threads", "1"]
    straight = tmp_path / "straight.safetensors"
    e2e_util.mpirun(2, [exe, "--steps", STEPS, "--seed", 11, "--save", straight] + common)
    want = straight.read_bytes()
    root = tmp_path / "ck"

    def start_over():
        shutil.rmtree(root, ignore_errors=True)
        e2e_util.mpirun(2, [exe, "--steps", 1, "--seed", 11, "--save-checkpoint", root] + common)

    start_over()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

    def launch(done):
        return subprocess.Popen(
            [shutil.which("mpirun"), "--oversubscribe", "-np", "2", str(exe), "--resume",
             str(root), "--steps", str(STEPS - done), "--save-checkpoint", str(root),
             "--checkpoint-every", "1", "--keep-checkpoints", "3"] + common,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True)

    def wait_for_first_save(job, done):
        """Until the job has saved once (past MPI's start-up, into the
        save-every-step phase); False if it ended first."""
        deadline = time.monotonic() + 60
        while latest_step(root) <= done and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        return job.poll() is None

    # How long one step and its save take: the kills land in
    # [first save, end of the run].
    job = launch(1)
    assert wait_for_first_save(job, 1)
    began = time.monotonic()
    job.wait(timeout=120)
    per_step = (time.monotonic() - began) / (STEPS - 2)
    start_over()

    rnd = random.Random(20261124)
    killed_in_run, kinds, kill = 0, {"job": 0, "rank": 0}, 0
    # Until KILLS kills have hit a job inside its saving phase, at most
    # 3 x KILLS attempts (a loaded machine makes run times vary).
    while killed_in_run < KILLS and kill < 3 * KILLS:
        kill += 1
        done = latest_step(root)
        if done >= STEPS - 2:
            start_over()
            done = 1
        job = launch(done)
        if wait_for_first_save(job, done):
            time.sleep(rnd.uniform(0.0, per_step * (STEPS - done - 1)))
        kind = rnd.choice(["job", "rank"])
        ranks = children(job.pid)
        hit = job.poll() is None
        if kind == "rank" and ranks:
            sigkill(rnd.choice(ranks))
        else:
            for pid in ranks:
                sigkill(pid)
            sigkill(job.pid, group=True)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            sigkill(job.pid, group=True)
            job.wait()
        for pid in ranks:
            sigkill(pid)
        if not hit:   # the run had ended: nothing was interrupted
            continue
        killed_in_run += 1
        kinds[kind] += 1

        # Whatever the kill interrupted, `latest` names a checkpoint that
        # continues exactly.
        got = tmp_path / "resumed.safetensors"
        resumed_from = latest_step(root)
        assert resumed_from >= done, (kill, resumed_from, done)
        e2e_util.mpirun(2, [exe, "--resume", root, "--steps", STEPS - resumed_from,
                            "--save", got] + common)
        assert got.read_bytes() == want, \
            f"kill {kill} ({kind}): resuming from step {resumed_from} is not bitwise the straight run"
    assert killed_in_run >= KILLS, (killed_in_run, kill, per_step)
    assert min(kinds.values()) >= KILLS // 4, kinds


def _alive(pid):
    """Running (not gone, not a zombie waiting for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_ranks_end_when_their_launcher_is_killed(exe, tmp_path):
    """SIGKILL of mpirun (the OOM killer, `kill -9`): nothing tells the ranks,
    which would go on training and writing checkpoints after the launcher's
    caller saw the job end (and a retry started beside them). Each rank's
    watchdog notices its launcher gone (its parent changed) and ends the
    rank within a second: after that, `latest` no longer moves. The ranks
    print nothing here (--log-every 0), so no write to the dead launcher's
    pipe ends them first."""
    root = tmp_path / "ck"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    job = subprocess.Popen(
        [shutil.which("mpirun"), "--oversubscribe", "-np", "2", str(exe), "--steps", "100000",
         "--threads", "1", "--log-every", "0", "--save-checkpoint", str(root),
         "--checkpoint-every", "1", "--keep-checkpoints", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (root / "latest").exists():
            assert job.poll() is None and time.monotonic() < deadline, "no checkpoint was saved"
            time.sleep(0.01)
        ranks = children(job.pid)
        assert len(ranks) == 2, ranks
        sigkill(job.pid)
        job.wait()
        killed = time.monotonic()
        while any(_alive(r) for r in ranks):
            assert time.monotonic() - killed < 10, "the ranks outlived their launcher by 10 s"
            time.sleep(0.01)
        # (The watchdog looks every 0.1 s; 10 s allows a loaded CI machine.)
        step = latest_step(root)
        time.sleep(0.5)
        assert latest_step(root) == step
    finally:
        sigkill(job.pid, group=True)

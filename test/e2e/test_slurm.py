"""Slurm for real (issue 15 item 12): a single-node Slurm on this machine
(Debian's slurm-wlm: munged, slurmctld and slurmd on localhost, as root)
runs a compiled executable with `srun -n 2 --mpi=pmix`, and the result is
bitwise what `mpirun -np 2` gives. Skips, saying why, where Slurm cannot
start (not installed, not root, the daemons do not come up).
"""

import os
import shutil
import socket
import subprocess
import time

import pytest

import e2e_util
from ztrain import models, parity

# Owns machine-wide resources (conftest.py: one shard runs it whole).
E2E_SERIAL = True

TOOLS = ("slurmctld", "slurmd", "srun", "sinfo", "munged", "munge", "unmunge")
# Everything lives in the test's directory: its own munged (key, socket),
# its own slurm.conf, state and ports; nothing under /etc is touched.
WHERE = {t: shutil.which(t) or (f"/usr/sbin/{t}" if os.path.exists(f"/usr/sbin/{t}") else None)
         for t in TOOLS}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def munge_works(sock):
    try:
        enc = subprocess.run([WHERE["munge"], "-n", "-S", sock], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=10)
        dec = subprocess.run([WHERE["unmunge"], "-S", sock], input=enc.stdout,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        return enc.returncode == 0 and dec.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = [t for t, p in WHERE.items() if p is None]
    if missing:
        pytest.skip(f"Slurm cannot start: {', '.join(missing)} not installed "
                    "(slurmctld, slurmd, slurm-client, munge)")
    if os.geteuid() != 0:
        pytest.skip("Slurm cannot start: this single-node setup runs its daemons as root")
    d = tmp_path_factory.mktemp("slurm")
    os.chmod(d, 0o700)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o600)
    sock = str(d / "munge.sock")
    subprocess.run([WHERE["munged"], "--force", f"--key-file={key}", f"--socket={sock}",
                    f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log",
                    f"--seed-file={d}/munged.seed"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    if not munge_works(sock):
        pytest.skip(f"Slurm cannot start: munged does not run (log in {d})")
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    host = socket.gethostname().split(".")[0]
    conf = d / "slurm.conf"
    conf.write_text(f"""ClusterName=ztrain
SlurmctldHost={host}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
""")
    env = dict(os.environ, SLURM_CONF=str(conf))
    for daemon in ("slurmctld", "slurmd"):
        subprocess.run([WHERE[daemon], "-c"], env=env, timeout=30, check=False)
    deadline = time.time() + 30
    state = ""
    while time.time() < deadline:
        p = subprocess.run([WHERE["sinfo"], "-h", "-o", "%t"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=10)
        state = (p.stdout + p.stderr).strip()
        if state in ("idle", "mix", "alloc"):
            break
        time.sleep(0.5)
    try:
        if state not in ("idle", "mix", "alloc"):
            pytest.skip(f"Slurm cannot start: the node is {state!r} after 30 s "
                        f"(logs in {d})")
        yield env
    finally:
        for pidfile in ("slurmd.pid", "slurmctld.pid", "munged.pid"):
            try:
                os.kill(int((d / pidfile).read_text().strip()), 15)
            except (OSError, ValueError):
                pass


def test_srun_equals_mpirun(slurm, tmp_path):
    spec = models.gpt(batch=2, seq=8, vocab=32, layers=1, width=16, heads=2)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw", lr=1e-2), name="gpt",
                                extra=["--dp", "2", "--zero-stage", "3"])
    args = ["--steps", "5", "--seed", "3", "--threads", "1", "--log-every", "1"]
    srun = subprocess.run([shutil.which("srun") or "srun", "-n", "2", "--mpi=pmix", exe]
                          + args + ["--save", str(tmp_path / "srun.safetensors"),
                                    "--report", str(tmp_path / "srun.json")],
                          env=slurm, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=300)
    assert srun.returncode == 0, srun.stderr
    mpi = e2e_util.mpirun(2, [exe] + args + ["--save", tmp_path / "mpirun.safetensors"])
    assert (tmp_path / "srun.safetensors").read_bytes() == \
        (tmp_path / "mpirun.safetensors").read_bytes()
    # Two ranks under Slurm, one progress line per step (rank 0's), the
    # same losses as under mpirun.
    report = parity.read_report(str(tmp_path / "srun.json"))
    assert report["world_size"] == 2 and len(report["ranks"]) == 2

    def losses(out):
        return [l.split()[3] for l in out.splitlines() if l.startswith("step")]
    assert losses(srun.stdout) == losses(mpi.stdout) and len(losses(srun.stdout)) == 5

"""Training across hosts: two virtual hosts made of network namespaces on
this machine (python/ztrain/netns.py), two ranks each, Open MPI's TCP
between the hosts and shared memory inside them (docs/scale-out.md). ZeRO's
reductions are all-to-alls summed in rank order by the runtime, so what
a job trains does not depend on where its ranks run: 2 hosts x 2 ranks
must train bit for bit what 4 ranks on one host train. Skips, with the
reason, where namespaces cannot be made (not root)."""

import filecmp
import json
import os
import subprocess

import pytest

import e2e_util
from ztrain import netns

# Owns machine-wide resources (conftest.py: one shard runs it whole).
E2E_SERIAL = True

HERE = os.path.dirname(os.path.abspath(__file__))
GPT = os.path.join(HERE, "..", "..", "examples", "gpt.mlir")
DATA = os.path.join(HERE, "..", "..", "examples", "data", "genesis-kjv.txt")

ok, why = netns.available()
needs_namespaces = pytest.mark.skipif(not ok, reason=f"virtual hosts: {why}")


def our_namespaces():
    out = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, text=True).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.startswith(f"zt{os.getpid()}")]


def losses(stdout):
    return [line.split()[:4] for line in stdout.splitlines() if line.startswith("step ")]


@needs_namespaces
def test_ranks_land_on_two_hosts_and_nothing_is_left():
    with netns.VirtualCluster(hosts=2) as cluster:
        p = cluster.mpirun(2, ["sh", "-c", "echo $OMPI_COMM_WORLD_RANK $(hostname)"])
        assert p.returncode == 0, p.stderr
        assert sorted(p.stdout.split("\n")[:-1]) == ["0 zt-h0", "1 zt-h0", "2 zt-h1",
                                                     "3 zt-h1"]
        assert len(our_namespaces()) == 3  # two hosts and the switch
        agent_dir = cluster.workdir
    assert our_namespaces() == []
    assert not os.path.exists(agent_dir)


@needs_namespaces
@pytest.mark.parametrize("stage", [2, 3])
def test_two_hosts_train_bitwise_as_one(tmp_path, stage):
    exe = tmp_path / "gpt"
    p = e2e_util.run([e2e_util.require_tool("ztrain-compile"), GPT, "-o", exe, "--dp=4",
                      f"--zero-stage={stage}", "--optimizer=adamw", "--lr=1e-3"])
    assert p.returncode == 0, p.stderr
    run = [exe, "--steps", 4, "--data", DATA]
    one_host = e2e_util.mpirun(4, run + ["--save", tmp_path / "one.safetensors",
                                         "--report", tmp_path / "one.json"])
    with netns.VirtualCluster(hosts=2, rate="2gbit") as cluster:
        two_hosts = cluster.mpirun(2, run + ["--save", tmp_path / "two.safetensors",
                                             "--report", tmp_path / "two.json"])
        received, sent = cluster.link_bytes(1)
    assert two_hosts.returncode == 0, two_hosts.stdout + two_hosts.stderr
    # Bitwise: the same losses, the same weights.
    assert losses(two_hosts.stdout) == losses(one_host.stdout)
    assert len(losses(one_host.stdout)) == 4
    assert filecmp.cmp(tmp_path / "one.safetensors", tmp_path / "two.safetensors",
                       shallow=False)
    # The ranks on host 1 sent their share over the link, not through shared
    # memory: each hands MPI `wire_bytes` for the 3 others, two thirds of
    # it for the ranks on host 0, so host 1's link carried at least 4/3 of
    # one rank's wire bytes (the rest is TCP's and Open MPI's own).
    with open(tmp_path / "two.json") as fh:
        report = json.load(fh)
    comm = report["communication"]
    # The runtime sees the two hosts (MPI's shared-memory split).
    assert report["nodes"] == 2
    assert [(r["node"], r["host"]) for r in report["ranks"]] == [
        (0, "zt-h0"), (0, "zt-h0"), (1, "zt-h1"), (1, "zt-h1")]
    with open(tmp_path / "one.json") as fh:
        assert json.load(fh)["nodes"] == 1
    wire = sum(c["wire_bytes"] for c in comm.values())
    assert wire > 0
    assert sent >= wire * 4 / 3, (sent, wire)
    assert received >= wire * 4 / 3, (received, wire)
    assert our_namespaces() == []


@needs_namespaces
@pytest.mark.parametrize("mesh", ["hsdp", "hpz"])
def test_hybrid_sharding_across_hosts_measures_its_plan(tmp_path, mesh):
    """HSDP (--dp-replicate 2) on 2 hosts x 2 ranks: each host holds a shard
    group, so gathers and reduce-scatters stay in shared memory and only the
    replicas' gradient averages cross the link. ZeRO++'s hpZ
    (--zero-hpz-partition-size 2): the backward gathers stay in the host.
    Bitwise what the same executable trains on one host; the inter-node
    bytes each rank handed MPI are zero-report's prediction for 2 ranks per
    node, exactly; host 1's link carried them (and TCP's framing)."""
    exe = tmp_path / "gpt"
    compile_ = e2e_util.require_tool("ztrain-compile")
    flag, option = {"hsdp": ("--dp-replicate=2", "dp-replicate=2"),
                    "hpz": ("--zero-hpz-partition-size=2", "hpz-partition-size=2")}[mesh]
    p = e2e_util.run([compile_, GPT, "-o", exe, "--dp=4", flag,
                      "--zero-stage=3", "--optimizer=adamw", "--lr=1e-3"])
    assert p.returncode == 0, p.stderr
    p = e2e_util.run([e2e_util.require_tool("ztrain-opt"), GPT,
                      "--ztrain-training=optimizer=adamw lr=1e-3",
                      f"--ztrain-zero=stage=3 dp=4 {option}", "--plan-memory",
                      "--zero-report=format=json", "-o", "/dev/null"])
    assert p.returncode == 0, p.stderr
    links = json.loads(p.stdout)["links"]
    steps = 3
    run = [exe, "--steps", steps, "--data", DATA]
    one_host = e2e_util.mpirun(4, run + ["--save", tmp_path / "one.safetensors"])
    with netns.VirtualCluster(hosts=2, rate="2gbit") as cluster:
        two_hosts = cluster.mpirun(2, run + ["--save", tmp_path / "two.safetensors",
                                             "--report", tmp_path / "two.json"])
        received, sent = cluster.link_bytes(1)
    assert two_hosts.returncode == 0, two_hosts.stdout + two_hosts.stderr
    assert losses(two_hosts.stdout) == losses(one_host.stdout)
    assert filecmp.cmp(tmp_path / "one.safetensors", tmp_path / "two.safetensors",
                       shallow=False)
    with open(tmp_path / "two.json") as fh:
        report = json.load(fh)
    assert report["nodes"] == 2
    assert report["mesh"] == {"shard": 2, "replicate": 2, "ranks_per_node": 2,
                              "secondary": mesh == "hpz"}
    assert links["inter_node_wire_bytes"] > 0
    for rank in report["ranks"]:
        comm = rank["communication"]
        assert sum(c["inter_node_wire_bytes"] for c in comm.values()) == \
            steps * links["inter_node_wire_bytes"], (rank["rank"], comm, links)
        assert sum(c["intra_node_wire_bytes"] for c in comm.values()) == \
            steps * links["intra_node_wire_bytes"], (rank["rank"], comm, links)
    # Both ranks of host 1 send their inter-node bytes over its link.
    assert sent >= 2 * steps * links["inter_node_wire_bytes"], (sent, links)
    assert our_namespaces() == []


def test_ranks_per_node_makes_nodes_on_one_host(small_mlp_dp4, tmp_path):
    """--ranks-per-node N: every N consecutive ranks are one node (a
    multi-node layout on one machine); N must divide the ranks."""
    exe = small_mlp_dp4
    p = e2e_util.mpirun(4, [exe, "--steps", 1, "--ranks-per-node", 2, "--report",
                            tmp_path / "r.json"])
    with open(tmp_path / "r.json") as fh:
        report = json.load(fh)
    assert report["nodes"] == 2
    assert [r["node"] for r in report["ranks"]] == [0, 0, 1, 1]
    p = e2e_util.mpirun(4, [exe, "--steps", 1, "--ranks-per-node", 3], check=False)
    assert p.returncode != 0
    assert ("ztrain: error: [rank 0] --ranks-per-node 3 does not divide the 4 ranks "
            "into nodes") \
        in p.stderr


@pytest.fixture(scope="module")
def small_mlp_dp4(tmp_path_factory):
    d = tmp_path_factory.mktemp("mlp_dp4")
    exe = d / "mlp"
    p = e2e_util.run([e2e_util.require_tool("ztrain-compile"),
                      os.path.join(HERE, "..", "..", "examples", "mlp.mlir"), "-o", exe,
                      "--dp=4", "--zero-stage=1", "--optimizer=adamw"])
    assert p.returncode == 0, p.stderr
    return exe

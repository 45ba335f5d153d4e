"""Hybrid sharding (HSDP / MiCS, docs/scale-out.md): --dp-replicate R splits
the dp ranks into R shard groups of dp / R consecutive ranks; states are
partitioned inside a group and replicated across groups. It must train what
one process trains on the global batch (the same bound as the flat stages),
run twice bitwise, and measure what zero-report predicted: bytes per
collective kind, and per link class (intra-node / inter-node) on a
--ranks-per-node layout.

Runs the compiled executables under `mpirun` (as root, oversubscribed).
"""

import json
import subprocess

import pytest

import e2e_util
from ztrain import models, parity, safetensors

STEPS = 6
mpirun = e2e_util.mpirun

# The flat stages' bound and arbiter (test_zero_equivalence.py explains the
# 1e-5): a hybrid step averages each gradient twice, inside the group (over
# 2 ranks) and across the replicas (over 2), where flat ZeRO divides the
# 4-rank sum once: the same numbers in another summation order and one more
# rounding, ~1e-7 relative per step in float32, far below 1e-5; a replica's
# share missing from the average would be ~1e-1 of every update.
TOL = 1e-5


def make(kind, batch):
    if kind == "llama":
        return models.llama(batch=batch, seq=8, vocab=32, layers=1, width=16, heads=2,
                            kv_heads=1, tie_embeddings=False)
    return models.gpt(batch=batch, seq=8, vocab=32, layers=1, width=16, heads=2)


@pytest.mark.parametrize("kind,stage,extra", [
    ("gpt", 1, []),
    ("gpt", 2, []),
    ("gpt", 3, []),
    ("llama", 3, []),
    # Bucketed, overlapped collectives: the averages across replicas start
    # once their shards are in (overlap-schedule's second round).
    ("gpt", 3, ["--overlap"]),
    # Accumulation: the group reduces each micro-batch, the replicas the sum.
    ("gpt", 2, ["--grad-accum-steps", "2"]),
])
def test_hsdp_matches_single_process(kind, stage, extra, tmp_path):
    n, micro = 4, 2
    accum = 2 if "--grad-accum-steps" in extra else 1
    ref_spec, spec = make(kind, n * micro * accum), make(kind, micro)
    init = parity.make_init(spec, seed=3)
    init_path, data_path = str(tmp_path / "init.safetensors"), str(tmp_path / "data.safetensors")
    safetensors.save(init_path, init)
    safetensors.save(data_path, parity.make_data(spec, samples=2 * n * micro * accum, seed=4))
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    ref_exe = e2e_util.compile_spec(ref_spec, str(tmp_path), opt, name="ref")
    exe = e2e_util.compile_text(
        spec.to_mlir(), str(tmp_path), opt, name="hsdp",
        extra=["--dp-shard", "2", "--dp-replicate", "2", "--zero-stage", str(stage)] + extra)
    parity.run_exe(ref_exe, steps=STEPS, init=init_path, data=data_path,
                   save=str(tmp_path / "ref.safetensors"), threads=1)
    saves = []
    for run in range(2):
        save = tmp_path / f"hsdp-{run}.safetensors"
        mpirun(n, [exe, "--steps", STEPS, "--init", init_path, "--data", data_path,
                   "--save", save, "--threads", "1"])
        saves.append(save)
    assert saves[0].read_bytes() == saves[1].read_bytes(), "two identical runs differ"
    ref = safetensors.load(str(tmp_path / "ref.safetensors"))
    got = safetensors.load(str(saves[0]))
    assert set(ref) == set(got)
    bad = e2e_util.far_from_single_process(ref_spec, init, data_path, got, ref, opt, STEPS,
                                           TOL, noise=parity.zero_gradient_params(ref_spec))
    assert not bad, f"HSDP 2 x 2 stage {stage} differs from one process: {bad}"
    assert any(parity.rel_err(ref[k], init[k]) > 1e-3 for k in ref)


def zero_report(src, zero):
    p = subprocess.run([e2e_util.require_tool("ztrain-opt"), src,
                        "--ztrain-training=optimizer=adam", f"--ztrain-zero={zero}",
                        "--plan-memory", "--zero-report=format=json", "-o", "/dev/null"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("layout", ["hsdp", "flat"])
def test_report_is_the_truth_per_link(layout, stage, tmp_path):
    """Model states, peak, bytes per collective kind and bytes per link class
    (2 ranks per node: --ranks-per-node 2 at compile and at run time) as
    zero-report predicted them, on every rank, exactly."""
    spec = make("gpt", 2)
    src = tmp_path / "model.mlir"
    src.write_text(spec.to_mlir())
    mesh = ["--dp-replicate", "2"] if layout == "hsdp" else ["--ranks-per-node", "2"]
    exe = parity.compile_model(str(src), str(tmp_path / "model"),
                               parity.OptimizerConfig("adam", lr=1e-2),
                               ["--dp", "4", "--zero-stage", str(stage)] + mesh)
    steps = 3
    report_path = tmp_path / "report.json"
    mpirun(4, [exe, "--steps", steps, "--report", report_path, "--threads", "1",
               "--ranks-per-node", "2"])
    measured = parity.read_report(str(report_path))
    zero = f"stage={stage} dp=4 " + ("dp-replicate=2" if layout == "hsdp" else "ranks-per-node=2")
    plan = zero_report(str(src), zero)
    per_kind = {}
    for c in plan["collectives"]:
        per_kind[c["kind"]] = per_kind.get(c["kind"], 0) + c["bytes"]
    links = plan["links"]
    assert links["ranks_per_node"] == 2
    assert links["inter_node_wire_bytes"] > 0
    assert len(measured["ranks"]) == 4
    for rank in measured["ranks"]:
        mem, comm = rank["memory"], rank["communication"]
        for k in ("parameters", "gradients", "optimizer_states"):
            assert mem[k] == plan["per_rank"][k], (k, mem, plan["per_rank"])
        assert mem["peak"] == plan["per_rank"]["predicted_peak"]
        for k in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
            assert comm[k]["bytes"] == steps * per_kind.get(k, 0), (k, comm, per_kind)
        intra = sum(c["intra_node_wire_bytes"] for c in comm.values())
        inter = sum(c["inter_node_wire_bytes"] for c in comm.values())
        assert intra == steps * links["intra_node_wire_bytes"], (rank["rank"], comm, links)
        assert inter == steps * links["inter_node_wire_bytes"], (rank["rank"], comm, links)


def test_hsdp_crosses_nodes_less_than_flat(tmp_path):
    """The point of hybrid sharding: on 2 nodes of 2 ranks, stage 3 sends
    Psi / 2 per step and rank across nodes (the two phases of the replicas'
    average of a Psi / 2 gradient shard, a quarter each) where flat ZeRO-3
    sends 2 of the 3 quarter-Psi blocks of each gather and reduce-scatter
    there: 1.5 Psi when every parameter is gathered twice (those without a
    backward use are gathered once)."""
    src = tmp_path / "model.mlir"
    src.write_text(make("gpt", 2).to_mlir())
    plan = zero_report(str(src), "stage=3 dp=4 dp-replicate=2")
    hsdp = plan["links"]
    flat = zero_report(str(src), "stage=3 dp=4 ranks-per-node=2")["links"]
    psi = plan["parameters"]["bytes"]
    # Padding: each tensor's shard is rounded up to whole f32 per rank (at
    # most 3 elements of 4 bytes per tensor and phase): under 1% here.
    assert abs(hsdp["inter_node_wire_bytes"] - psi / 2) <= 0.01 * psi, (hsdp, psi)
    assert flat["inter_node_wire_bytes"] >= 2.5 * hsdp["inter_node_wire_bytes"], (hsdp, flat)


def test_hsdp_checkpoint_resumes_bitwise(tmp_path):
    """Only the first replica writes the shards; every replica resumes from
    them, bitwise where the straight run ends."""
    spec = make("gpt", 2)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adam", lr=1e-2),
                                name="hsdp", extra=["--dp", "4", "--dp-replicate", "2",
                                                    "--zero-stage", "3"])
    common = ["--threads", "1", "--seed", "5"]
    mpirun(4, [exe, "--steps", 6, "--save", tmp_path / "straight.safetensors"] + common)
    mpirun(4, [exe, "--steps", 3, "--save-checkpoint", tmp_path / "ck"] + common)
    mpirun(4, [exe, "--steps", 3, "--resume", tmp_path / "ck", "--threads", "1",
               "--save", tmp_path / "resumed.safetensors"])
    assert ((tmp_path / "resumed.safetensors").read_bytes()
            == (tmp_path / "straight.safetensors").read_bytes())


def test_compile_refusals(tmp_path):
    src = tmp_path / "model.mlir"
    src.write_text(make("gpt", 2).to_mlir())
    compile_ = e2e_util.require_tool("ztrain-compile")

    def refused(*flags):
        p = subprocess.run([compile_, str(src), "-o", str(tmp_path / "x")] + list(flags),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.returncode != 0
        assert not (tmp_path / "x").exists()
        return p.stderr

    assert "hybrid sharding (dp-replicate 2) needs ZeRO stage 1, 2 or 3" in refused(
        "--dp", "4", "--dp-replicate", "2")
    assert "dp-shard 2 x dp-replicate 2 is 4 ranks, but dp is 8" in refused(
        "--dp", "8", "--dp-shard", "2", "--dp-replicate", "2", "--zero-stage", "2")
    assert "dp-shard 3 does not divide the 4 ranks" in refused(
        "--dp", "4", "--dp-shard", "3", "--zero-stage", "2")


def test_plan_search_chooses_the_mesh_over_a_slow_link(tmp_path):
    """--memory-budget with --ranks-per-node and a slow --inter-node-link-gbps:
    the search prices bytes by link class, chooses hybrid sharding, and the
    executable it compiles runs on 4 ranks and measures the predicted
    inter-node bytes."""
    src = tmp_path / "model.mlir"
    src.write_text(make("gpt", 2).to_mlir())
    exe = tmp_path / "auto"
    p = e2e_util.run([e2e_util.require_tool("ztrain-compile"), src, "-o", exe, "--dp", "4",
                      "--ranks-per-node", "2", "--memory-budget", "1GB",
                      "--inter-node-link-gbps", "0.1", "--link-gbps", "100", "--latency-us", "0",
                      "--optimizer", "adam"])
    assert p.returncode == 0, p.stderr
    chosen = [line for line in (p.stdout + p.stderr).splitlines()
              if line.startswith("chosen:")]
    assert len(chosen) == 1 and "--dp-replicate=2" in chosen[0], chosen
    mpirun(4, [exe, "--steps", 2, "--threads", "1", "--ranks-per-node", "2",
               "--report", tmp_path / "r.json"])
    report = parity.read_report(str(tmp_path / "r.json"))
    assert report["mesh"] == {"shard": 2, "replicate": 2, "ranks_per_node": 2,
                              "secondary": False}


def test_hsdp_composes_bitwise(tmp_path):
    """The memory-hierarchy passes compose with the mesh and change no
    number: HSDP stage 3 with optimizer states and parameters on nvme, with
    overlapped collectives, with selective recompute and with fused
    elementwise kernels trains bit for bit what plain HSDP trains (as the
    same options do for flat ZeRO-3)."""
    spec = make("gpt", 2)
    base = ["--dp", "4", "--dp-replicate", "2", "--zero-stage", "3"]
    variants = {"plain": [],
                "nvme": ["--offload-optimizer", "nvme", "--offload-param", "nvme"],
                "overlap": ["--overlap"],
                "recompute": ["--recompute", "selective"],
                "fused": ["--fuse", "elementwise"]}
    saves = {}
    for name, flags in variants.items():
        exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adam", lr=1e-2),
                                    name=name, extra=base + flags)
        nvme = tmp_path / f"nvme-{name}"
        nvme.mkdir()
        save = tmp_path / f"{name}.safetensors"
        mpirun(4, [exe, "--steps", 3, "--threads", "1", "--seed", "7", "--save", save,
                   "--nvme-path", nvme])
        saves[name] = save.read_bytes()
    for name in variants:
        assert saves[name] == saves["plain"], f"HSDP with {name} differs from plain HSDP"


@pytest.mark.parametrize("extra", [[], ["--overlap"], ["--grad-accum-steps", "2"]])
def test_hpz_trains_bitwise_as_flat_zero3_and_measures_its_plan(extra, tmp_path):
    """ZeRO++'s hpZ (--zero-hpz-partition-size 2 on 4 ranks): the backward
    pass gathers each parameter inside its group of 2 from the halves kept
    after the forward pass. Gathers move bits, so it trains bit for bit what
    flat ZeRO-3 trains, and crosses nodes less; every rank measures the
    intra- and inter-node bytes zero-report predicted."""
    spec = make("gpt", 2)
    src = tmp_path / "model.mlir"
    src.write_text(spec.to_mlir())
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    steps = 3
    saves, reports = {}, {}
    for name, flags in (("flat", ["--ranks-per-node", "2"]),
                        ("hpz", ["--zero-hpz-partition-size", "2"])):
        exe = parity.compile_model(str(src), str(tmp_path / name), opt,
                                   ["--dp", "4", "--zero-stage", "3"] + flags + extra)
        save, report = tmp_path / f"{name}.safetensors", tmp_path / f"{name}.json"
        mpirun(4, [exe, "--steps", steps, "--threads", "1", "--seed", "3",
                   "--ranks-per-node", "2", "--save", save, "--report", report])
        saves[name] = save.read_bytes()
        reports[name] = parity.read_report(str(report))
    assert saves["hpz"] == saves["flat"], "hpZ differs from flat ZeRO-3"
    zero = "stage=3 dp=4 " + ("overlap=true " if extra == ["--overlap"] else "")
    accum = "grad-accum-steps=2" if "--grad-accum-steps" in extra else ""
    links = {}
    for name, mesh in (("flat", "ranks-per-node=2"), ("hpz", "hpz-partition-size=2")):
        p = subprocess.run([e2e_util.require_tool("ztrain-opt"), str(src),
                            f"--ztrain-training=optimizer=adam {accum}",
                            f"--ztrain-zero={zero}{mesh}", "--plan-memory",
                            "--zero-report=format=json", "-o", "/dev/null"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.returncode == 0, p.stderr
        links[name] = json.loads(p.stdout)["links"]
        for rank in reports[name]["ranks"]:
            comm = rank["communication"]
            for key in ("intra_node_wire_bytes", "inter_node_wire_bytes"):
                assert sum(c[key] for c in comm.values()) == steps * links[name][key], \
                    (name, rank["rank"], key, comm, links[name])
    assert reports["hpz"]["mesh"]["secondary"] is True
    # The backward gathers moved inside the node.
    assert links["hpz"]["inter_node_wire_bytes"] < links["flat"]["inter_node_wire_bytes"]


def test_hpz_checkpoint_is_flat_zero3s(tmp_path):
    """hpZ's states are flat ZeRO-3's: every rank writes its shard, and a
    flat ZeRO-3 run resumes an hpZ checkpoint bitwise where the straight hpZ
    run ends."""
    spec = make("gpt", 2)
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    hpz = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt, name="hpz",
                                extra=["--dp", "4", "--zero-stage", "3",
                                       "--zero-hpz-partition-size", "2"])
    flat = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt, name="flat",
                                 extra=["--dp", "4", "--zero-stage", "3"])
    common = ["--threads", "1", "--seed", "5"]
    mpirun(4, [hpz, "--steps", 4, "--save", tmp_path / "straight.safetensors"] + common)
    mpirun(4, [hpz, "--steps", 2, "--save-checkpoint", tmp_path / "ck"] + common)
    assert len(list((tmp_path / "ck").glob("global_step2/rank-*-of-4.safetensors"))) == 4
    mpirun(4, [flat, "--steps", 2, "--resume", tmp_path / "ck", "--threads", "1",
               "--save", tmp_path / "resumed.safetensors"])
    assert ((tmp_path / "resumed.safetensors").read_bytes()
            == (tmp_path / "straight.safetensors").read_bytes())

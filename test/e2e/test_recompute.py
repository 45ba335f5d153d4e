"""Activation checkpointing (ztrain-compile --recompute=full|selective,
train-recompute).

The recomputation is the forward ops repeated on the same operands, so a
step with recompute computes the same bits as the step without it. Tested:
- one process: GPT with dropout (the mask must replay) and Llama, with the
  builders' block marks and with segments found from the graph, with
  gradient accumulation, in bf16 and in fp16 with loss scaling: weights and
  losses bitwise equal to --recompute=none;
- every ZeRO stage at N = 2 and 4 (and stage 3 with overlap and tiling):
  bitwise equal to the same plan without recompute, and at stage 3 the same
  run twice bitwise equal;
- the report is the truth: zero-report's activation bytes and peak are what
  the executable allocated, full < selective < none, the recomputed FLOPs
  are priced apart and the model's FLOPs (MFU's) do not change;
- bad input is one line.
"""

import json
import shutil
import subprocess

import pytest

import e2e_util
from ztrain import models, parity, safetensors

MPIRUN = shutil.which("mpirun")
STEPS = 3
POLICIES = ("none", "full", "selective")


def gpt(checkpoints=True, batch=4):
    return models.gpt(batch=batch, seq=32, vocab=64, layers=3, width=32, heads=4,
                      dropout=0.1, checkpoints=checkpoints)


def llama(checkpoints=True):
    return models.llama(batch=4, seq=16, vocab=64, layers=2, width=32, heads=4,
                        checkpoints=checkpoints)


def inputs(tmp_path, spec, samples):
    init, data = str(tmp_path / "init.safetensors"), str(tmp_path / "data.safetensors")
    safetensors.save(init, parity.make_init(spec, seed=5))
    safetensors.save(data, parity.make_data(spec, samples=samples, seed=6))
    return init, data


def train(tmp_path, spec, policy, init, data, extra=(), name=None, steps=STEPS):
    name = name or f"{policy}"
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name=name, extra=[f"--recompute={policy}", *extra])
    save, report = tmp_path / f"{name}.safetensors", tmp_path / f"{name}.json"
    parity.run_exe(exe, steps, init=init, data=data, save=str(save), report=str(report),
                   threads=1)
    return save.read_bytes(), parity.read_report(str(report))


@pytest.mark.parametrize("model,checkpoints,accum,precision", [
    ("gpt", True, 1, "fp32"), ("gpt", False, 1, "fp32"), ("llama", True, 1, "fp32"),
    ("llama", False, 1, "fp32"), ("gpt", True, 2, "fp32"), ("gpt", True, 1, "bf16"),
    ("llama", True, 1, "fp16")])
def test_recompute_is_bitwise_the_plain_step(model, checkpoints, accum, precision, tmp_path):
    spec = gpt(checkpoints) if model == "gpt" else llama(checkpoints)
    init, data = inputs(tmp_path, spec, STEPS * accum * spec.batch)
    extra = [f"--grad-accum-steps={accum}"] if accum > 1 else []
    if precision != "fp32":  # 16-bit compute, f32 masters (fp16: loss-scaled)
        extra.append(f"--precision={precision}")
    out = {p: train(tmp_path, spec, p, init, data, extra) for p in POLICIES}
    weights, report = out["none"]
    for policy in ("full", "selective"):
        # Exact, no tolerance: the same ops on the same operands.
        assert out[policy][0] == weights, policy
        assert parity.report_losses(out[policy][1]).tolist() == \
            parity.report_losses(report).tolist(), policy
    acts = {p: out[p][1]["memory"]["activations"] for p in POLICIES}
    assert acts["full"] < acts["selective"] < acts["none"], acts


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("n", [2, 4])
def test_every_zero_stage_is_bitwise_the_plain_plan(n, tmp_path):
    spec = gpt(batch=2)
    init, data = inputs(tmp_path, spec, STEPS * n * spec.batch)
    configs = [(s, []) for s in (0, 1, 2, 3)]
    if n == 2:  # stage 3 with its schedule and tiling
        configs.append((3, ["--overlap", "--prefetch-depth=2", "--bucket-bytes=8192",
                            "--max-tile-bytes=2048"]))
    for i, (stage, flags) in enumerate(configs):
        saved = {}
        for policy in ("none", "full", "selective" if stage == 3 else None):
            if policy is None:
                continue
            exe = e2e_util.compile_text(
                spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                name=f"c{i}-{policy}",
                extra=["--dp", str(n), "--zero-stage", str(stage), f"--recompute={policy}",
                       *flags])
            # Recompute at stage 3 runs twice: the same run, the same bits.
            for attempt in (0, 1) if policy == "full" and stage == 3 else (0,):
                save = tmp_path / f"c{i}-{policy}-{attempt}.safetensors"
                e2e_util.mpirun(n, [exe, "--steps", str(STEPS), "--init", init, "--data",
                                    data, "--save", save, "--threads", "1",
                                    "--log-every", "0"])
                saved[policy, attempt] = save.read_bytes()
        for (policy, attempt), got in saved.items():
            assert got == saved["none", 0], (stage, flags, policy, attempt)


def zero_report(tmp_path, spec, policy, extra=(), training=""):
    opt = e2e_util.require_tool("ztrain-opt")
    src = tmp_path / "r.mlir"
    src.write_text(spec.to_mlir())
    zero = " ".join(extra)
    p = subprocess.run(
        [opt, str(src), f"--ztrain-training=optimizer=adamw recompute={policy} {training}",
         f"--ztrain-zero={zero}", "--plan-memory", "--zero-report=format=json",
         "-o", "/dev/null"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("stage", [0, 3])
def test_report_is_what_the_step_allocates(stage, tmp_path):
    spec = gpt(batch=2)
    n = 2 if stage else 1
    if n > 1 and MPIRUN is None:
        pytest.skip("mpirun not installed")
    init, data = inputs(tmp_path, spec, STEPS * n * spec.batch)
    zero = [f"dp={n}", f"stage={stage}"]
    flops = set()
    for policy in POLICIES:
        predicted = zero_report(tmp_path, spec, policy, zero)
        exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                    parity.OptimizerConfig("adamw"), name=policy,
                                    extra=["--dp", str(n), "--zero-stage", str(stage),
                                           f"--recompute={policy}"])
        report = tmp_path / f"{policy}.json"
        cmd = [exe, "--steps", "1", "--init", init, "--data", data, "--threads", "1",
               "--report", report]
        if n > 1:
            e2e_util.mpirun(n, cmd)
        else:
            assert e2e_util.run(cmd).returncode == 0
        measured = json.loads(report.read_text())
        per_rank = predicted["per_rank"]
        # Exact: the arenas the plan sized are what the step allocated.
        assert measured["memory"]["activations"] == per_rank["activations"], policy
        assert measured["memory"]["peak"] == per_rank["predicted_peak"], policy
        rc = predicted["recompute"]
        assert rc["policy"] == policy
        if policy == "none":
            assert rc["ops"] == 0 and rc["flops_per_step"] == 0
        else:
            assert rc["ops"] > 0 and rc["flops_per_step"] > 0
        if policy == "selective":  # q k^T per layer: B H T T D multiply-adds
            layers, b, t, c = 3, spec.batch, 32, 32
            assert rc["flops_per_step"] == layers * 2 * b * t * t * c
        # The model's arithmetic (what MFU counts) is the same whatever is
        # recomputed, and the executable reports the same number.
        flops.add(predicted["flops_per_step"])
        assert measured["flops_per_step_per_rank"] == predicted["flops_per_step"]
    assert len(flops) == 1


def test_bad_policy_and_nothing_to_recompute_are_one_line(tmp_path):
    compile_ = e2e_util.require_tool("ztrain-compile")
    src = tmp_path / "m.mlir"
    src.write_text(gpt().to_mlir())
    p = subprocess.run([compile_, str(src), "-o", str(tmp_path / "m"), "--recompute=fulll"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode != 0
    # A misspelled policy is llvm::cl's to refuse (the flag's cl::values): one line.
    assert p.stderr == ("ztrain-compile: for the --recompute option: "
                        "Cannot find option named 'fulll'!\n"), p.stderr
    # An MLP has no residual stream and no marks: nothing to cut at.
    src.write_text(models.mlp(batch=4, in_features=8, hidden=[16, 16], classes=4).to_mlir())
    p = subprocess.run([compile_, str(src), "-o", str(tmp_path / "m"), "--recompute=full"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode != 0
    lines = [l for l in p.stderr.splitlines() if "error" in l]
    assert len(lines) == 1 and "nothing to recompute" in lines[0], p.stderr
    assert not (tmp_path / "m").exists()

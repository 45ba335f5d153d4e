"""Gradient accumulation (ztrain-compile --grad-accum-steps=K, DeepSpeed's
gradient_accumulation_steps).

K micro-batches of B rows per optimizer step train as one step of K*B rows:
- against PyTorch trained on the K*B batch (Adam and SGD with momentum,
  with clipping on top), loss per step and final weights;
- under ZeRO at N = 2 and 4: every stage against one process on the global
  batch of N*K*B rows; stages 2 and 3 (which reduce-scatter every
  micro-batch and accumulate shards) bitwise equal to each other, and the
  same run twice bitwise equal;
- the executable's --grad-accum-steps overrides the compiled K; the
  reported loss is the mean over the micro-batches; refusals are one line.
"""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import e2e_util
from ztrain import models, parity, safetensors

MPIRUN = shutil.which("mpirun")
MICRO, K, STEPS = 4, 4, 6


def spec_for(batch):
    return models.mlp(batch=batch, in_features=32, hidden=[64, 32], classes=10)


# fp32 tolerances. The accumulated gradient is (1/K) sum_k mean_B(g), the
# big batch's mean_{KB}(g): the same sum in another order, a few f32 ulps
# apart (~1e-7 relative). Adam turns that into a ~1e-7 relative change per
# step; over 6 steps the losses agree to ~1e-7 and the weights to ~1e-6.
# 1e-5 / 1e-4 are the parity suite's fp32 bounds; training on the wrong
# rows, or dividing by K twice, moves the weights by 1e-2 and more here.
LOSS_TOL, WEIGHT_TOL = 1e-5, 1e-4


def write_inputs(tmp_path, spec, samples, init_seed=3, data_seed=4):
    init = parity.make_init(spec, seed=init_seed)
    data = parity.make_data(spec, samples=samples, seed=data_seed)
    init_path, data_path = str(tmp_path / "init.safetensors"), str(tmp_path / "data.safetensors")
    safetensors.save(init_path, init)
    safetensors.save(data_path, data)
    return init, data, init_path, data_path


@pytest.mark.parametrize("kind,clip", [("adam", 0.0), ("sgd", 0.0), ("adam", 0.3)])
def test_accumulation_equals_the_large_batch_in_torch(kind, clip, tmp_path):
    micro_spec, big_spec = spec_for(MICRO), spec_for(K * MICRO)
    init, data, init_path, data_path = write_inputs(tmp_path, micro_spec, STEPS * K * MICRO)
    opt = parity.OptimizerConfig(kind, lr=1e-2, momentum=0.9 if kind == "sgd" else 0.0,
                                 clip_grad_norm=clip)
    exe = e2e_util.compile_text(micro_spec.to_mlir(), str(tmp_path), opt, name="acc",
                                extra=[f"--grad-accum-steps={K}"])
    save, report = str(tmp_path / "acc.safetensors"), str(tmp_path / "acc.json")
    parity.run_exe(exe, STEPS, init=init_path, data=data_path, save=save, report=report,
                   threads=1)
    rep = parity.read_report(report)
    assert rep["grad_accum_steps"] == K
    losses = np.array(parity.report_losses(rep))
    t_losses, t_weights = parity.torch_train(big_spec, init, data, STEPS, opt)
    assert np.max(np.abs(losses - t_losses) / np.abs(t_losses)) <= LOSS_TOL, (losses, t_losses)
    got = safetensors.load(save)
    errs = {k: parity.rel_err(got[k], t_weights[k]) for k in t_weights}
    assert max(errs.values()) <= WEIGHT_TOL, errs
    if clip:
        norms = [s["grad_norm"] for s in rep["steps"]]
        assert min(norms) > clip, norms   # clipping acted on the mean gradient


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("n", [2, 4])
def test_zero_stages_accumulate_like_one_process(n, tmp_path):
    spec, ref_spec = spec_for(MICRO), spec_for(n * K * MICRO)
    steps = 4
    _, _, init_path, data_path = write_inputs(tmp_path, spec, steps * n * K * MICRO)
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    ref_exe = e2e_util.compile_text(ref_spec.to_mlir(), str(tmp_path), opt, name="ref")
    parity.run_exe(ref_exe, steps=steps, init=init_path, data=data_path,
                   save=str(tmp_path / "ref.safetensors"), threads=1)
    ref = safetensors.load(str(tmp_path / "ref.safetensors"))
    saved = {}
    for stage in (0, 1, 2, 3):
        exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt, name=f"s{stage}",
                                    extra=["--dp", str(n), "--zero-stage", str(stage),
                                           f"--grad-accum-steps={K}"])
        for attempt in (0, 1) if stage == 2 else (0,):
            save = tmp_path / f"s{stage}-{attempt}.safetensors"
            e2e_util.mpirun(n, [exe, "--steps", str(steps), "--init", init_path, "--data",
                                data_path, "--save", save, "--threads", "1",
                                "--log-every", "0"])
            saved[stage, attempt] = save.read_bytes()
        got = safetensors.load(str(tmp_path / f"s{stage}-0.safetensors"))
        errs = {k: parity.rel_err(got[k], ref[k]) for k in ref}
        assert max(errs.values()) <= WEIGHT_TOL, (stage, errs)
    # The same configuration twice: bitwise.
    assert saved[2, 0] == saved[2, 1]
    # Stages 2 and 3 run the same reduce-scatters on the same gradients and
    # accumulate the same shards; stage 3 only gathers the parameters.
    assert saved[3, 0] == saved[2, 0]


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_overlapped_stage3_accumulation_is_bitwise_the_synchronous_one(tmp_path):
    spec = spec_for(MICRO)
    _, _, init_path, data_path = write_inputs(tmp_path, spec, 3 * 2 * K * MICRO)
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    out = {}
    for overlap in (False, True):
        flags = ["--dp", "2", "--zero-stage", "3", f"--grad-accum-steps={K}"]
        if overlap:
            flags += ["--overlap", "--bucket-bytes=4096"]
        exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt,
                                    name=f"o{int(overlap)}", extra=flags)
        save = tmp_path / f"o{int(overlap)}.safetensors"
        e2e_util.mpirun(2, [exe, "--steps", "3", "--init", init_path, "--data", data_path,
                            "--save", save, "--threads", "1", "--log-every", "0"])
        out[overlap] = save.read_bytes()
    # Bucketing packs the same values and reduces them in the same rank
    # order: the schedule changes when, not what.
    assert out[True] == out[False]


def test_run_time_k_overrides_the_compiled_one(tmp_path):
    # Compiled for K=4, run with K=2: equals a model compiled for K=2.
    spec = spec_for(MICRO)
    _, _, init_path, data_path = write_inputs(tmp_path, spec, STEPS * K * MICRO)
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    k4 = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt, name="k4",
                               extra=["--grad-accum-steps=4"])
    k2 = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt, name="k2",
                               extra=["--grad-accum-steps=2"])
    outs = []
    for exe, flags in ((k4, ["--grad-accum-steps", "2"]), (k2, [])):
        save = tmp_path / f"{len(outs)}.safetensors"
        parity.run_exe(exe, 3, init=init_path, data=data_path, save=str(save), threads=1,
                       extra=flags)
        outs.append(save.read_bytes())
    assert outs[0] == outs[1]


def test_without_accumulation_compiled_the_flag_is_refused(tmp_path):
    exe = e2e_util.compile_text(spec_for(MICRO).to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adam"), name="plain")
    p = e2e_util.run([exe, "--steps", "1", "--grad-accum-steps", "4"])
    assert p.returncode != 0
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "compiled without gradient accumulation" in err[0], p.stderr
    # K=1 asks for nothing: accepted.
    assert e2e_util.run([exe, "--steps", "1", "--grad-accum-steps", "1"]).returncode == 0


def test_bad_k_is_one_line(tmp_path):
    compile_ = e2e_util.require_tool("ztrain-compile")
    src = tmp_path / "m.mlir"
    src.write_text(spec_for(MICRO).to_mlir())
    p = subprocess.run([compile_, str(src), "-o", str(tmp_path / "m"), "--grad-accum-steps=0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode != 0
    # One line, the whole of stderr, naming the flag and what it takes.
    assert p.stderr == ("ztrain-compile: error: --grad-accum-steps=0: expected an integer "
                        "in [1, 2^30]\n"), p.stderr


def test_resume_continues_the_micro_batches_also_with_another_k(tmp_path):
    spec = spec_for(MICRO)
    _, _, init_path, data_path = write_inputs(tmp_path, spec, 6 * K * MICRO)
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt, name="m",
                                extra=[f"--grad-accum-steps={K}"])
    whole = str(tmp_path / "whole.safetensors")
    parity.run_exe(exe, 6, init=init_path, data=data_path, save=whole, threads=1)
    ckpt = str(tmp_path / "ckpt")
    parity.run_exe(exe, 3, init=init_path, data=data_path, threads=1,
                   extra=["--save-checkpoint", ckpt])
    resumed = str(tmp_path / "resumed.safetensors")
    parity.run_exe(exe, 3, data=data_path, save=resumed, threads=1, extra=["--resume", ckpt])
    with open(whole, "rb") as a, open(resumed, "rb") as b:
        assert a.read() == b.read()
    # Another K is another global batch: the resumed steps read on from the
    # checkpoint's sample position (3 steps of K micro-batches).
    again = str(tmp_path / "again")
    p = e2e_util.run([exe, "--steps", "1", "--data", data_path, "--resume", ckpt,
                      "--grad-accum-steps", "2", "--save-checkpoint", again])
    assert p.returncode == 0, p.stderr
    assert (f"resuming with {2 * MICRO} samples per optimizer step (the checkpoint's run "
            f"took {K * MICRO}): the data continues at sample {3 * K * MICRO}") in p.stdout
    with open(os.path.join(again, "global_step4", "index.json")) as fh:
        assert json.load(fh)["ztrain"]["data_samples"] == 3 * K * MICRO + 2 * MICRO


def test_bf16_accumulation_stalls_and_reduce_dtype_fp32_does_not(tmp_path):
    """Why --reduce-dtype=fp32 exists (issue 12): K identical micro-batches
    sum to K g exactly in f32 (K a power of two), so the mean gradient, and
    the step, equal one micro-batch's. A bf16 running sum keeps 8
    significant bits: once it reaches 2^8 g each added g is half an ulp or
    less and rounds away, so the sum stalls between 256 g and 512 g and the
    mean of K = 1024 is 1/4 to 1/2 of g."""
    k = 1024
    spec = spec_for(MICRO)
    init = parity.make_init(spec, seed=3)
    data = parity.make_data(spec, samples=MICRO, seed=4)
    data = {name: np.repeat(a[:1], MICRO, axis=0) for name, a in data.items()}
    init_path, data_path = str(tmp_path / "init.safetensors"), str(tmp_path / "data.safetensors")
    safetensors.save(init_path, init)
    safetensors.save(data_path, data)
    opt = parity.OptimizerConfig("sgd", lr=0.5)

    def step(name, flags, run_flags=()):
        exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt, name=name,
                                    extra=["--precision=bf16"] + flags)
        save = str(tmp_path / f"{name}.safetensors")
        parity.run_exe(exe, 1, init=init_path, data=data_path, save=save, threads=1,
                       extra=list(run_flags))
        return {n: np.asarray(v, dtype=np.float64) for n, v in safetensors.load(save).items()}

    one = step("one", ["--reduce-dtype=fp32"])
    f32 = step("f32", ["--reduce-dtype=fp32", f"--grad-accum-steps={k}"])
    bf16 = step("bf16", [f"--grad-accum-steps={k}"])
    bf16_one = step("bf16one", [])
    start = {n: np.asarray(v, dtype=np.float64) for n, v in init.items()}
    # f32 accumulation: exactly the one-micro-batch step, bit for bit.
    for n in one:
        assert np.array_equal(f32[n], one[n]), n
    # bf16 accumulation: the step is a fraction of it. The norm of each
    # weight change (bf16-rounded weights: compared where the one-batch
    # step moved the weights by far more than their rounding).
    ratios = {}
    for n in one:
        ref = np.linalg.norm(bf16_one[n] - start[n])
        if ref > 0.05 * np.linalg.norm(start[n]) + 1e-3:
            ratios[n] = np.linalg.norm(bf16[n] - start[n]) / ref
    assert ratios, "no weight moved enough to compare"
    assert all(r < 0.6 for r in ratios.values()), ratios


def zero_report(mlir_path, stage, dp, k, overlap):
    opt = e2e_util.require_tool("ztrain-opt")
    p = subprocess.run([opt, mlir_path, f"--ztrain-training=optimizer=adam grad-accum-steps={k}",
                        f"--ztrain-zero=stage={stage} dp={dp} overlap={str(overlap).lower()}",
                        "--plan-memory", "--zero-report=format=json", "-o", "/dev/null"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_report_prices_accumulation(stage, overlap, tmp_path):
    """zero-report with accumulation equals what the run measures: model
    states, the peak of the static plan, and every collective's bytes (the
    per-micro-batch ones K times per step), to the byte."""
    n, k, steps = 2, 3, 2
    spec = models.gpt(batch=2, seq=8, vocab=32, layers=1, width=16, heads=2)
    src = tmp_path / "model.mlir"
    src.write_text(spec.to_mlir())
    flags = ["--dp", str(n), "--zero-stage", str(stage), f"--grad-accum-steps={k}"]
    if overlap:
        flags.append("--overlap")
    exe = parity.compile_model(str(src), str(tmp_path / "model"),
                               parity.OptimizerConfig("adam", lr=1e-2), flags)
    report_path = str(tmp_path / "report.json")
    e2e_util.mpirun(n, [exe, "--steps", str(steps), "--report", report_path, "--threads", "1"])
    measured = parity.read_report(report_path)
    plan = zero_report(str(src), stage, n, k, overlap)
    assert plan["grad_accum_steps"] == k
    predicted = plan["per_rank"]
    per_kind = {}
    for c in plan["collectives"]:
        per_kind[c["kind"]] = per_kind.get(c["kind"], 0) + c["bytes"]
    # Stages 2 and 3 reduce-scatter every micro-batch; 0 and 1 once a step.
    rs = [c for c in plan["collectives"] if c["kind"] in ("reduce_scatter", "all_reduce")
          and c["bytes"] > 4 * n]
    assert rs and all(c["count"] == (k if stage >= 2 else 1) for c in rs), rs
    for rank in measured["ranks"]:
        mem, comm = rank["memory"], rank["communication"]
        for cat in ("parameters", "gradients", "optimizer_states"):
            assert mem[cat] == predicted[cat], (cat, mem, predicted)
        for kind in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
            assert comm[kind]["bytes"] == steps * per_kind.get(kind, 0), (kind, comm, per_kind)
        assert mem["peak"] == predicted["predicted_peak"], (mem, predicted)

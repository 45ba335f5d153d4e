"""Optimizer-state offload (ztrain-compile --offload-optimizer=cpu|nvme,
zero-offload).

An nvme-resident state is read into a host buffer before its update and
written back after it; the update is the same kernel on the same values, so
offload changes no bit. Tested:
- one process: GPT with dropout and Llama, Adam/AdamW and SGD with momentum,
  bf16 and fp16 (f32 masters on nvme, loss scaling), gradient accumulation,
  every swap-buffer count: weights and losses bitwise equal to no offload;
- every ZeRO stage at N = 2 and 4 (and stage 3 with its overlap schedule):
  bitwise equal to the same plan without offload;
- the report is the truth: zero-report's device peak, swap buffers, nvme
  bytes at rest and nvme bytes per step are what the executable allocated and
  moved, and the device memory shrinks by exactly the states offloaded (12
  bytes per parameter over N in mixed precision);
- checkpoints of nvme states resume bitwise and consolidate; the same
  offloaded run twice is bitwise equal;
- the swap directory is removed at exit, on an error and on SIGTERM or
  SIGINT, and one a killed run left by the next run (never a live run's);
  bad input is one line.
"""

import json
import os
import shutil
import subprocess

import pytest

import e2e_util
from ztrain import models, parity, safetensors

MPIRUN = shutil.which("mpirun")
STEPS = 3


def gpt(batch=4):
    return models.gpt(batch=batch, seq=16, vocab=64, layers=2, width=32, heads=4, dropout=0.1)


def llama():
    return models.llama(batch=4, seq=16, vocab=64, layers=2, width=32, heads=4)


def inputs(tmp_path, spec, samples):
    init, data = str(tmp_path / "init.safetensors"), str(tmp_path / "data.safetensors")
    safetensors.save(init, parity.make_init(spec, seed=5))
    safetensors.save(data, parity.make_data(spec, samples=samples, seed=6))
    return init, data


def swap_dir(tmp_path):
    d = tmp_path / "nvme"
    d.mkdir(exist_ok=True)
    return d


def train(tmp_path, spec, name, init, data, optimizer, extra=(), run_extra=(), steps=STEPS):
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), optimizer, name=name,
                                extra=list(extra))
    save, report = tmp_path / f"{name}.safetensors", tmp_path / f"{name}.json"
    parity.run_exe(exe, steps, init=init, data=data, save=str(save), report=str(report),
                   threads=1, extra=list(run_extra))
    return save.read_bytes(), parity.read_report(str(report))


@pytest.mark.parametrize("model,optimizer,precision,accum", [
    ("gpt", "adamw", "fp32", 1), ("llama", "adam", "fp32", 1), ("gpt", "sgd", "fp32", 1),
    ("gpt", "adamw", "bf16", 1), ("llama", "adamw", "fp16", 1), ("gpt", "adamw", "fp32", 2)])
def test_offload_is_bitwise_the_plain_step(model, optimizer, precision, accum, tmp_path):
    spec = gpt() if model == "gpt" else llama()
    init, data = inputs(tmp_path, spec, STEPS * accum * spec.batch)
    opt = (parity.OptimizerConfig("sgd", lr=0.05, momentum=0.9) if optimizer == "sgd"
           else parity.OptimizerConfig(optimizer))
    extra = [f"--precision={precision}"]
    if accum > 1:
        extra.append(f"--grad-accum-steps={accum}")
    nvme = swap_dir(tmp_path)
    weights, report = train(tmp_path, spec, "plain", init, data, opt, extra)
    runs = {"cpu": (["--offload-optimizer=cpu"], []),
            "nvme-half": (["--offload-optimizer=nvme", "--offload-ratio=0.5"],
                          ["--nvme-path", str(nvme)])}
    for count in (1, 2, 3):
        runs[f"nvme{count}"] = (["--offload-optimizer=nvme", f"--offload-buffer-count={count}"],
                                ["--nvme-path", str(nvme)])
    # States streamed in chunks (the MLP weights' 4096 elements in two).
    runs["nvme-chunks"] = (["--offload-optimizer=nvme", "--sub-group-size=2048"],
                           ["--nvme-path", str(nvme)])
    for name, (flags, run_flags) in runs.items():
        got, got_report = train(tmp_path, spec, name, init, data, opt, [*extra, *flags],
                                run_flags)
        # Exact, no tolerance: the same update kernel on the same values.
        assert got == weights, name
        assert parity.report_losses(got_report).tolist() == \
            parity.report_losses(report).tolist(), name
        if name.startswith("nvme"):
            off = got_report["offload"]
            assert off["read_bytes"] == off["write_bytes"] == STEPS * off["nvme_bytes"], off
            if name == "nvme-half":
                assert 0 < got_report["memory"]["optimizer_states"] < \
                    report["memory"]["optimizer_states"]
            # The swap directory went with the run.
            assert list(nvme.iterdir()) == [], list(nvme.iterdir())
    # The weights moved, so the comparison says something.
    assert parity.report_losses(report)[0] != parity.report_losses(report)[-1]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_parameters_on_nvme_in_one_process(precision, tmp_path):
    """ZeRO-Infinity on one rank (stage 3, dp=1): parameters and optimizer
    states on nvme; training, evaluation and sampling read the parameters
    through their swap buffers and compute the same bits."""
    spec = gpt()
    init, data = inputs(tmp_path, spec, STEPS * spec.batch)
    nvme = swap_dir(tmp_path)
    base = ["--zero-stage=3", "--dp=1", f"--precision={precision}"]
    run = ["--eval-data", data, "--eval-every", "1", "--eval-steps", "1",
           "--sample-ids", "1,2,3", "--sample-tokens", "5", "--seed", "3"]
    weights, report = train(tmp_path, spec, "plain", init, data,
                            parity.OptimizerConfig("adamw"), base, run)
    got, got_report = train(tmp_path, spec, "infinity", init, data,
                            parity.OptimizerConfig("adamw"),
                            [*base, "--offload-optimizer=nvme", "--offload-param=nvme"],
                            [*run, "--nvme-path", str(nvme)])
    assert got == weights
    assert parity.report_losses(got_report).tolist() == parity.report_losses(report).tolist()
    assert got_report["eval"] == report["eval"]
    # The same offloaded run twice: the same bits.
    again, again_report = train(tmp_path, spec, "infinity-again", init, data,
                                parity.OptimizerConfig("adamw"),
                                [*base, "--offload-optimizer=nvme", "--offload-param=nvme"],
                                [*run, "--nvme-path", str(nvme)])
    assert again == got
    assert parity.report_losses(again_report).tolist() == \
        parity.report_losses(got_report).tolist()
    assert got_report["memory"]["parameters"] == 0
    assert got_report["memory"]["optimizer_states"] == 0
    assert list(nvme.iterdir()) == []


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("n", [2, 4])
def test_every_zero_stage_is_bitwise_the_plain_plan(n, tmp_path):
    spec = gpt(batch=2)
    init, data = inputs(tmp_path, spec, STEPS * n * spec.batch)
    nvme = swap_dir(tmp_path)
    configs = [(s, []) for s in (0, 1, 2, 3)]
    if n == 2:  # stage 3 with its overlap schedule
        configs.append((3, ["--overlap", "--prefetch-depth=2", "--bucket-bytes=8192"]))
    for i, (stage, flags) in enumerate(configs):
        saved = {}
        offloads = {"none": [], "nvme": ["--offload-optimizer=nvme"]}
        if stage == 3:  # ZeRO-Infinity: parameters on nvme too; or in host memory
            offloads["infinity"] = ["--offload-optimizer=nvme", "--offload-param=nvme"]
            offloads["params-cpu"] = ["--offload-optimizer=cpu", "--offload-param=cpu"]
            # Partial parameter offload: half the shards' bytes on nvme.
            offloads["infinity-half"] = ["--offload-optimizer=nvme", "--offload-param=nvme",
                                         "--offload-param-ratio=0.5"]
        for offload, offload_flags in offloads.items():
            exe = e2e_util.compile_text(
                spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                name=f"c{i}-{offload}",
                extra=["--dp", str(n), "--zero-stage", str(stage), *offload_flags, *flags])
            save = tmp_path / f"c{i}-{offload}.safetensors"
            cmd = [exe, "--steps", str(STEPS), "--init", init, "--data", data, "--save", save,
                   "--threads", "1", "--log-every", "0"]
            if offload_flags:
                cmd += ["--nvme-path", nvme]
            e2e_util.mpirun(n, cmd)
            saved[offload] = save.read_bytes()
        for offload in offloads:
            assert saved[offload] == saved["none"], (stage, flags, offload)
        assert list(nvme.iterdir()) == []


@pytest.mark.parametrize("stage,n", [(0, 1), (0, 2), (1, 2), (2, 2), (3, 2)])
def test_states_stream_in_chunks(stage, n, tmp_path):
    """--sub-group-size (DeepSpeed's sub_group_size): updates whose nvme
    states hold more elements are stepped chunk by chunk, each chunk's
    states swapped in, stepped and swapped out through buffers of one
    chunk. The weights are bitwise those of the plan without offload and of
    whole-state swaps; the swap buffers shrink; what zero-report predicts
    (swap buffers, device peak, bytes read and written) is what the run
    measures."""
    if n > 1 and MPIRUN is None:
        pytest.skip("mpirun not installed")
    spec = models.gpt(batch=2, seq=16, vocab=64, layers=2, width=64, heads=4, dropout=0.1)
    init, data = inputs(tmp_path, spec, STEPS * n * spec.batch)
    nvme = swap_dir(tmp_path)
    saved, measured, plans = {}, {}, {}
    for name, placement in [("none", ""), ("whole", "offload-optimizer=nvme"),
                            ("chunks", "offload-optimizer=nvme sub-group-size=2048")]:
        flags = ["--" + f for f in placement.split()]
        exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                    parity.OptimizerConfig("adamw"), name=f"exe-{name}",
                                    extra=["--dp", str(n), "--zero-stage", str(stage), *flags])
        save, report = tmp_path / f"{name}.safetensors", tmp_path / f"{name}.json"
        cmd = [exe, "--steps", str(STEPS), "--init", init, "--data", data, "--threads", "1",
               "--save", save, "--report", report, "--log-every", "0", "--nvme-path", nvme]
        e2e_util.launch(n, cmd)
        saved[name] = save.read_bytes()
        measured[name] = json.loads(report.read_text())["ranks"]
        plans[name] = zero_report(tmp_path, spec, f"stage={stage} dp={n} {placement}")
    # Exact: Adam is elementwise, each chunk the same operations on the
    # same values.
    assert saved["chunks"] == saved["none"] == saved["whole"]
    # The chunked run again: the same bits (its reads and writes race the
    # updates on the I/O engine's queue).
    again = tmp_path / "again.safetensors"
    e2e_util.launch(n, [again if c == tmp_path / "chunks.safetensors" else c for c in cmd])
    assert again.read_bytes() == saved["chunks"]
    off = plans["chunks"]["offload"]
    for rank in measured["chunks"]:
        mem, io = rank["memory"], rank["offload"]
        assert mem["state_swap_buffers"] == off["host"]["state_swap_buffers"]
        assert mem["device_peak"] == plans["chunks"]["per_rank"]["predicted_peak"]
        assert io["read_bytes"] == STEPS * off["transfers_per_step"]["nvme_to_host"]
        assert io["write_bytes"] == STEPS * off["transfers_per_step"]["host_to_nvme"]
    # The same bytes move, through smaller buffers.
    whole = plans["whole"]["offload"]
    assert off["transfers_per_step"] == whole["transfers_per_step"]
    assert off["host"]["state_swap_buffers"] < whole["host"]["state_swap_buffers"]
    assert list(nvme.iterdir()) == []


@pytest.mark.parametrize("stage,n,precision", [
    (0, 1, "fp32"), (0, 1, "fp16"), (2, 2, "fp16"), (3, 2, "bf16")])
def test_checks_do_not_keep_spilled_gradients(stage, n, precision, tmp_path):
    """Gradient clipping and fp16's overflow check read every gradient
    before the updates. With optimizer=cpu each link of their chains runs
    right after its gradient's spill starts (zero-offload), so the checks
    cost the device only their chains' scalars, not the gradients: the
    device peak is that of the same plan without any check (bf16 for fp16:
    the same sizes, no loss scaling) plus at most two 16-byte slots per
    chain (a link's running value and its result, at the arena's
    alignment). The run measures that plan, and its weights are bitwise
    those of the same step without offload. (Without --overlap: with it,
    the gradient buckets set these models' peak.)"""
    if n > 1 and MPIRUN is None:
        pytest.skip("mpirun not installed")
    spec = models.gpt(batch=1, seq=8, vocab=64, layers=2, width=64, heads=4, dropout=0.1)
    init, data = inputs(tmp_path, spec, STEPS * n * spec.batch)
    chains = 2 if precision == "fp16" else 1
    zero = f"stage={stage} dp={n} overlap=false offload-optimizer=cpu"
    unchecked = zero_report(tmp_path, spec, zero, "optimizer=adamw precision=" +
                            ("bf16" if precision == "fp16" else precision))
    plan = zero_report(tmp_path, spec, zero,
                       f"optimizer=adamw precision={precision} clip-grad-norm=0.01")
    growth = plan["per_rank"]["predicted_peak"] - unchecked["per_rank"]["predicted_peak"]
    assert 0 <= growth <= 2 * 16 * chains, growth
    saved = {}
    for name, flags in [("none", []), ("cpu", ["--offload-optimizer=cpu"])]:
        exe = e2e_util.compile_text(
            spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"), name=f"exe-{name}",
            extra=["--dp", str(n), "--zero-stage", str(stage), f"--precision={precision}",
                   "--clip-grad-norm=0.01", *flags])
        save, report = tmp_path / f"{name}.safetensors", tmp_path / f"{name}.json"
        cmd = [exe, "--steps", str(STEPS), "--init", init, "--data", data, "--threads", "1",
               "--save", save, "--report", report, "--log-every", "0"]
        e2e_util.launch(n, cmd)
        saved[name] = save.read_bytes()
        if name == "cpu":
            for rank in json.loads(report.read_text())["ranks"]:
                # Exact: what the plan said.
                assert rank["memory"]["device_peak"] == plan["per_rank"]["predicted_peak"]
    # Exact: the same links in the same order, only earlier.
    assert saved["cpu"] == saved["none"]
    # The offloaded run again: the same bits.
    again = tmp_path / "again.safetensors"
    e2e_util.launch(n, [again if c == tmp_path / "cpu.safetensors" else c for c in cmd])
    assert again.read_bytes() == saved["cpu"]


def zero_report(tmp_path, spec, zero, training="optimizer=adamw"):
    """zero-report's JSON for `spec` under the training and ZeRO pipeline
    options. With $ZTRAIN_COMPILE_CACHE set it is kept there beside the
    executables, keyed like them, so that a GPU machine without ztrain-opt
    (docs/cuda.md#gpu-kit) checks its runs against the same plans."""
    src = tmp_path / "r.mlir"
    src.write_text(spec.to_mlir())
    args = [f"--ztrain-training={training}", f"--ztrain-zero={zero}",
            "--plan-memory", "--zero-report=format=json"]
    cache = os.environ.get("ZTRAIN_COMPILE_CACHE")
    cached = os.path.join(cache, parity._cache_key(str(src), args) + ".report.json") \
        if cache else None
    if cached and os.path.exists(cached):
        with open(cached) as fh:
            return json.load(fh)
    opt = e2e_util.require_tool("ztrain-opt")
    p = subprocess.run([opt, str(src), *args, "-o", "/dev/null"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    if cached:
        os.makedirs(cache, exist_ok=True)
        with open(cached + ".tmp", "w") as fh:
            fh.write(p.stdout)
        os.replace(cached + ".tmp", cached)
    return json.loads(p.stdout)


@pytest.mark.parametrize("stage,n,precision,accum", [
    (0, 1, "fp32", 1), (1, 2, "fp32", 1), (2, 2, "bf16", 1), (3, 2, "fp32", 1),
    (1, 4, "bf16", 1), (3, 1, "fp32", 2), (2, 2, "fp32", 3)])
def test_report_is_the_truth(stage, n, precision, accum, tmp_path):
    """zero-report's memory and transfers are the run's, to the byte, in
    every placement; with `accum` micro-batches per step the transfers of
    each micro-batch (nvme parameters read by the passes) count each time."""
    if n > 1 and MPIRUN is None:
        pytest.skip("mpirun not installed")
    spec = gpt(batch=2)
    init, data = inputs(tmp_path, spec, STEPS * n * accum * spec.batch)
    nvme = swap_dir(tmp_path)
    training = f"optimizer=adamw precision={precision} grad-accum-steps={accum}"
    plans = {}
    offloads = ["none", "cpu", "nvme", "half"] + \
        (["infinity", "params-cpu", "params-half", "infinity-half"] if stage == 3 else [])
    for offload in offloads:
        placement = {"infinity": "offload-optimizer=nvme offload-param=nvme",
                     "params-cpu": "offload-param=cpu",
                     "params-half": "offload-param=cpu offload-param-ratio=0.5",
                     "infinity-half": "offload-optimizer=nvme offload-param=nvme "
                                      "offload-param-ratio=0.5",
                     "half": "offload-optimizer=nvme offload-ratio=0.5"}.get(
            offload, f"offload-optimizer={offload}")
        flags = ["--" + f for f in placement.split()]
        zero = f"stage={stage} dp={n} {placement}"
        plan = zero_report(tmp_path, spec, zero, training)
        plans[offload] = plan
        exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                    parity.OptimizerConfig("adamw"), name=f"exe-{offload}",
                                    extra=["--dp", str(n), "--zero-stage", str(stage),
                                           f"--precision={precision}",
                                           f"--grad-accum-steps={accum}", *flags])
        report = tmp_path / f"{offload}.json"
        cmd = [exe, "--steps", str(STEPS), "--init", init, "--data", data, "--threads", "1",
               "--report", report, "--log-every", "0", "--nvme-path", nvme]
        if n > 1:
            e2e_util.mpirun(n, cmd)
        else:
            assert e2e_util.run(cmd).returncode == 0
        measured = json.loads(report.read_text())
        per_rank, off = plan["per_rank"], plan["offload"]
        for rank in measured["ranks"]:
            mem = rank["memory"]
            # Exact: the device's memory is what the plan said, and so are
            # the host buffers and the host-resident states.
            assert mem["device_peak"] == per_rank["predicted_peak"], (offload, mem, per_rank)
            assert mem["optimizer_states"] == per_rank["optimizer_states"], offload
            assert mem["parameters"] == per_rank["parameters"], offload
            assert mem["swap_buffers"] == off["host"]["swap_buffers"], offload
            assert mem["state_swap_buffers"] == off["host"]["state_swap_buffers"], offload
            assert mem["host_optimizer_states"] == off["host"]["optimizer_states"], offload
            assert mem["host_parameters"] == off["host"]["parameters"], offload
            assert mem["host_gradients"] == off["host"]["gradients"], offload
            # Every byte allocated: the device's plus the host's.
            assert mem["peak"] == mem["planned"] == per_rank["predicted_peak"] + \
                off["host"]["swap_buffers"] + off["host"]["state_swap_buffers"] + \
                off["host"]["optimizer_states"] + \
                off["host"]["parameters"] + off["host"]["gradients"], offload
            io = rank["offload"]
            if offload in ("nvme", "infinity", "half", "infinity-half"):
                assert io["nvme_bytes"] == off["nvme"]["optimizer_states"] + \
                    off["nvme"]["parameters"]
                assert io["read_bytes"] == STEPS * off["transfers_per_step"]["nvme_to_host"]
                assert io["write_bytes"] == STEPS * off["transfers_per_step"]["host_to_nvme"]
            elif offload == "cpu":
                # Host states: each gradient is spilled to host memory for
                # the update (on the cpu backend a memory copy).
                assert off["host"]["gradients"] > 0
                assert io["gradients_to_host_bytes"] == \
                    STEPS * off["transfers_per_step"]["gradients_to_host"] > 0, io
                assert io["nvme_bytes"] == io["read_bytes"] == io["write_bytes"] == 0
            else:
                assert io is None
    if accum > 1:
        # With accumulation the gradient accumulators stay on the device
        # (spilled after the boundary): the shrinkage below is without.
        return
    none, cpu, nv = (plans[k] for k in ("none", "cpu", "nvme"))
    moved = none["per_rank"]["optimizer_states"]
    assert moved > 0
    # Host placement: the states leave the device, and so do the persistent
    # gradient buffers (each gradient is spilled to host memory for the
    # update, its device copy a temporary of the arena until the spill
    # lands): the device shrinks by the states and the gradients, less what
    # the arena grows by.
    grads = none["per_rank"]["gradients"]
    assert cpu["per_rank"]["optimizer_states"] == 0 and cpu["per_rank"]["gradients"] == 0
    cpu_growth = (cpu["per_rank"]["activations"] + cpu["per_rank"]["communication_buffers"]) - \
        (none["per_rank"]["activations"] + none["per_rank"]["communication_buffers"])
    assert 0 <= cpu_growth < grads
    assert none["per_rank"]["predicted_peak"] - cpu["per_rank"]["predicted_peak"] == \
        moved + grads - cpu_growth
    assert cpu["offload"]["host"]["optimizer_states"] == moved
    # nvme: the states leave the device, and so do the persistent gradient
    # buffers of the swapped updates (their gradients live in the arena from
    # the op that makes them to the update, moved right after it): the
    # device shrinks by the states and the gradients, less what the arena
    # grows by.
    assert nv["per_rank"]["optimizer_states"] == 0 and nv["per_rank"]["gradients"] == 0
    arena_growth = (nv["per_rank"]["activations"] + nv["per_rank"]["communication_buffers"]) - \
        (none["per_rank"]["activations"] + none["per_rank"]["communication_buffers"])
    assert 0 <= arena_growth < grads
    assert none["per_rank"]["predicted_peak"] - nv["per_rank"]["predicted_peak"] == \
        moved + grads - arena_growth
    # nvme holds the same states in whole 4096-byte blocks, one file each.
    states = 3 if precision != "fp32" else 2  # (f32 master,) exp_avg, exp_avg_sq
    stored = [(e + n - 1) // n if stage >= 1 else e for e in element_counts(spec)]
    blocks = sum(-(-4 * s // 4096) * 4096 for s in stored)
    assert nv["offload"]["nvme"]["optimizer_states"] == states * blocks
    assert moved == states * 4 * sum(stored)
    # Half: whole updates' states until half the bytes are offloaded; the
    # device keeps the rest, and the two add up.
    half = plans["half"]
    kept, off_half = half["per_rank"]["optimizer_states"], half["offload"]["nvme"]
    assert 0 < kept < moved and kept <= moved // 2
    assert 0 < half["per_rank"]["gradients"] < grads  # the others' stay persistent
    assert off_half["optimizer_states"] < nv["offload"]["nvme"]["optimizer_states"]
    if stage == 3:
        # Parameters too: the device holds no model state but gradients.
        inf = plans["infinity"]
        params = none["per_rank"]["parameters"]
        assert inf["per_rank"]["parameters"] == 0 and params > 0
        assert inf["per_rank"]["gradients"] == 0
        assert none["per_rank"]["predicted_peak"] - inf["per_rank"]["predicted_peak"] > \
            moved + params
        pbytes = 2 if precision != "fp32" else 4
        assert inf["offload"]["nvme"]["parameters"] == \
            sum(-(-pbytes * s // 4096) * 4096 for s in stored)
        # Half the parameters (whole ones, in declaration order, until half
        # the shards' bytes): the device keeps the others, and the two add
        # up to all of them.
        phalf = plans["params-half"]
        on_host = phalf["offload"]["host"]["parameters"]
        assert 0 < phalf["per_rank"]["parameters"] < params
        assert phalf["per_rank"]["parameters"] + on_host == params
        assert on_host >= params // 2
        ihalf = plans["infinity-half"]
        assert 0 < ihalf["per_rank"]["parameters"] < params
        assert 0 < ihalf["offload"]["nvme"]["parameters"] < inf["offload"]["nvme"]["parameters"]
    if precision != "fp32" and stage >= 1:
        # ZeRO-Offload's split: 12 bytes per parameter (f32 master, m, v)
        # over N, each rank's shard padded to ceil(elements / N).
        assert moved == 12 * sum(stored)


def element_counts(spec):
    """The element count of every parameter of `spec` (from its MLIR)."""
    import re
    counts = []
    for m in re.finditer(r"train\.param @\S+ : tensor<([0-9x]+)x?[a-z]+[0-9]*>", spec.to_mlir()):
        e = 1
        for d in m.group(1).split("x"):
            if d:
                e *= int(d)
        counts.append(e)
    return counts


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("stage,offload", [
    (1, ["--offload-optimizer=nvme"]),
    (3, ["--offload-optimizer=nvme", "--offload-param=nvme"])])
def test_checkpoints_of_nvme_states_resume_bitwise(stage, offload, tmp_path):
    spec = gpt(batch=2)
    n, steps = 2, 4
    init, data = inputs(tmp_path, spec, steps * n * spec.batch)
    nvme = swap_dir(tmp_path)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="nv", extra=["--dp", str(n), "--zero-stage", str(stage),
                                                  *offload])
    common = ["--data", data, "--threads", "1", "--log-every", "0", "--nvme-path", nvme]
    straight = tmp_path / "straight.safetensors"
    e2e_util.mpirun(n, [exe, "--steps", str(steps), "--init", init, "--save", straight,
                        *common])
    ckpt = tmp_path / "ckpt"
    e2e_util.mpirun(n, [exe, "--steps", "2", "--init", init, "--save-checkpoint", ckpt,
                        *common])
    resumed = tmp_path / "resumed.safetensors"
    e2e_util.mpirun(n, [exe, "--steps", "2", "--resume", ckpt, "--save", resumed, *common])
    assert resumed.read_bytes() == straight.read_bytes()
    # The checkpoint holds the states themselves (not their swap files):
    # every rank's shard has the tensors, bit for bit, of the plain plan's
    # checkpoint after the same steps; and it consolidates.
    plain = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                  name="plain", extra=["--dp", str(n), "--zero-stage", str(stage)])
    plain_ckpt = tmp_path / "plain-ckpt"
    e2e_util.mpirun(n, [plain, "--steps", "2", "--init", init, "--save-checkpoint",
                        plain_ckpt, *common[:-2]])
    shards = {}
    for name, d in (("nv", ckpt), ("plain", plain_ckpt)):
        files = sorted((d / "global_step2").glob("*.safetensors"))
        assert len(files) == n, files
        shards[name] = [safetensors.load(str(f)) for f in files]
    for got, want in zip(shards["nv"], shards["plain"]):
        assert got.keys() == want.keys()
        assert any(k.endswith(".exp_avg_sq") for k in want)
        for k in want:
            assert got[k].tobytes() == want[k].tobytes(), k
    consolidate = e2e_util.require_tool("ztrain-consolidate")
    p = subprocess.run([consolidate, str(ckpt), "-o", str(tmp_path / "full.safetensors")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    assert list(nvme.iterdir()) == []
    # A universal checkpoint: where a build keeps its tensors is layout, as
    # its ranks and stage are. The offloaded checkpoint resumes without
    # offload, at another stage, on one rank, in chunks; the plain one
    # resumes with offload; each continues bitwise as the straight run (one
    # rank: half the global batch, so only that it resumes; test_checkpoints
    # checks the resharding's numbers).
    for name, ranks, flags, source in [
            ("plain", n, ["--zero-stage", str(stage)], ckpt),
            ("stage0-nvme", n, ["--zero-stage", "0", "--offload-optimizer=nvme"], ckpt),
            ("one-rank", 1, ["--zero-stage", str(stage), *offload], ckpt),
            ("chunks", n, ["--zero-stage", str(stage), *offload, "--sub-group-size=2048"],
             ckpt),
            ("into-nvme", n, ["--zero-stage", str(stage), *offload], plain_ckpt)]:
        other = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                      parity.OptimizerConfig("adamw"), name=f"other-{name}",
                                      extra=["--dp", str(ranks), *flags])
        again = tmp_path / f"{name}.safetensors"
        cmd = [other, "--steps", "2", "--resume", source, "--save", again, *common]
        if ranks > 1:
            e2e_util.mpirun(ranks, cmd)
        else:
            p = e2e_util.run(cmd)
            assert p.returncode == 0, p.stderr
        if ranks == n:
            assert again.read_bytes() == straight.read_bytes(), name
    assert list(nvme.iterdir()) == []


def one_error_line(p):
    # (A misspelled placement is llvm::cl's line, which says no "error".)
    return [l for l in p.stderr.splitlines() if "error" in l or "Cannot find option" in l]


def test_bad_offload_input_is_one_line(tmp_path):
    compile_ = e2e_util.require_tool("ztrain-compile")
    spec = gpt()
    src = tmp_path / "m.mlir"
    src.write_text(spec.to_mlir())
    for flags, message in (
            (["--offload-optimizer=ssd"],
             "for the --offload-optimizer option: Cannot find option named 'ssd'!"),
            (["--offload-param=nvme", "--zero-stage=2", "--dp=2"],
             "--offload-param=nvme: needs ZeRO stage 3 (it places stage 3's parameter shards); "
             "this build is --zero-stage=2"),
            (["--offload-param=cpu", "--zero-stage=1", "--dp=2"], "needs ZeRO stage 3"),
            # A plan search with the stage given keeps to it.
            (["--offload-param=cpu", "--zero-stage=2", "--dp=2", "--memory-budget=1GB"],
             "--offload-param=cpu: needs ZeRO stage 3"),
            (["--offload-param=disk", "--zero-stage=3", "--dp=2"],
             "for the --offload-param option: Cannot find option named 'disk'!"),
            (["--offload-optimizer=nvme", "--offload-buffer-count=0"], "--offload-buffer-count=0: expected 1 to 16"),
            (["--offload-optimizer=nvme", "--optimizer=sgd"], "no optimizer states to place")):
        p = subprocess.run([compile_, str(src), "-o", str(tmp_path / "m"), *flags],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.returncode != 0, flags
        lines = one_error_line(p)
        assert len(lines) == 1 and message in lines[0], (flags, p.stderr)
        assert not (tmp_path / "m").exists()
    # From a config, the line names the key too.
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 2,
                                                        "offload_param": {"device": "cpu"}}}))
    p = subprocess.run([compile_, str(src), "-o", str(tmp_path / "m"), "--dp=2",
                        "--config", str(config)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = one_error_line(p)
    assert p.returncode != 0 and len(lines) == 1 and lines[0].endswith(
        "this build is --zero-stage=2 (from --config " + str(config) +
        ": zero_optimization.offload_param.device)"), p.stderr
    # An offload-only flag without its offload: a warning, as the others.
    p = subprocess.run([compile_, str(src), "-o", str(tmp_path / "m"), "--sub-group-size=2048"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0 and "warning: --sub-group-size chunks the optimizer states nvme " \
        "offload swaps; without --offload-optimizer=nvme it has no effect" in p.stderr, p.stderr
    # Nor with every parameter on nvme: each update swaps its shard whole
    # with its states (no chunks; with a parameter ratio below 1 the rest
    # are chunked, and it says nothing).
    common = [compile_, str(src), "-o", str(tmp_path / "m"), "--dp=2", "--zero-stage=3",
              "--offload-optimizer=nvme", "--offload-param=nvme", "--sub-group-size=2048"]
    p = subprocess.run(common, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0 and "warning: --sub-group-size chunks the optimizer states of " \
        "updates whose parameter stays in memory; with --offload-param=nvme every update " \
        "swaps its parameter shard whole with its states, and it has no effect" in p.stderr, \
        p.stderr
    p = subprocess.run(common + ["--offload-param-ratio=0.5"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr

    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="nv", extra=["--offload-optimizer=nvme"])
    # No --nvme-path: refused before the first step, naming the flag.
    p = parity.run_exe(exe, 1, check=False)
    assert p.returncode != 0
    lines = one_error_line(p)
    assert len(lines) == 1 and "give --nvme-path DIR" in lines[0], p.stderr
    # A path that does not exist, or is a file: one line naming it.
    for bad in (tmp_path / "missing", tmp_path / "m.mlir"):
        p = parity.run_exe(exe, 1, check=False, extra=["--nvme-path", str(bad)])
        assert p.returncode != 0
        lines = one_error_line(p)
        assert len(lines) == 1 and str(bad) in lines[0], p.stderr


def format_bytes(n):
    """The runtime's formatBytes: bytes below 1 KiB, else two decimals of
    the largest binary unit."""
    units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"]
    value, unit = float(n), 0
    while value >= 1024 and unit < 5:
        value, unit = value / 1024, unit + 1
    return f"{n} bytes" if unit == 0 else f"{value:.2f} {units[unit]}"


def files_in(d):
    """The files in swap directory `d`; none while it is still being made
    (the runtime makes it as `.<name>.new` and renames it)."""
    try:
        return list(d.iterdir()) if not d.name.startswith(".") else []
    except FileNotFoundError:
        return []


def wait_for_swap_files(nvme, timeout=60):
    """Waits until a rank's swap directory under `nvme` holds files (the
    run is past its start-up); returns the directories."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dirs = list(nvme.iterdir())
        if dirs and all(files_in(d) for d in dirs):
            return dirs
        time.sleep(0.05)
    raise AssertionError(f"no swap files under {nvme}")


@pytest.mark.parametrize("sigs", [["SIGTERM"], ["SIGINT"], ["SIGINT", "SIGTERM"]],
                         ids=["SIGTERM", "SIGINT", "SIGINT-then-SIGTERM"])
def test_a_cancelled_run_removes_its_swap_directory(sigs, tmp_path):
    """SIGTERM (kill, scancel, a launcher ending the job) and SIGINT (Ctrl-C)
    in the middle of training: one line naming the signal and the step, the
    signal's exit status, and no swap files left (a 2B model's are 24 GB
    per rank); a second signal right behind the first (a wrapper's SIGTERM
    after Ctrl-C) does not cut the cleanup short."""
    import signal
    import time
    # Twelve layers: hundreds of swap files, so that removing them takes a
    # few milliseconds, and a second signal right behind the first lands in
    # it (without the handler's mask: two lines and files left, every run).
    spec = models.gpt(batch=2, seq=16, vocab=64, layers=12, width=32, heads=4)
    init, data = inputs(tmp_path, spec, spec.batch)
    nvme = swap_dir(tmp_path)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="nv", extra=["--zero-stage=3", "--offload-optimizer=nvme",
                                                  "--offload-param=nvme"])
    # SIGINT at its default even where this test runs as a background job
    # (which a shell starts with SIGINT ignored, and the executable keeps).
    p = subprocess.Popen([exe, "--steps", "100000000", "--init", init, "--data", data,
                          "--nvme-path", str(nvme), "--log-every", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for_swap_files(nvme)
        time.sleep(0.3)  # in the steps
        for i, sig in enumerate(sigs):
            # The second 0.2 ms behind the first (busy: a sleep is coarser),
            # inside the milliseconds the removal takes.
            start = time.perf_counter()
            while i and time.perf_counter() - start < 0.0002:
                pass
            p.send_signal(getattr(signal, sig))
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode in [-getattr(signal, s) for s in sigs], (p.returncode, err)
    lines = one_error_line(subprocess.CompletedProcess([], 0, "", err))
    assert len(lines) == 1 and f"ended by {sigs[0]} " in lines[0], err
    assert list(nvme.iterdir()) == []


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_signal_to_ztrain_runs_process_group_ends_the_job_cleanly(sig, tmp_path):
    """Ctrl-C in a terminal and `timeout` signal ztrain-run's whole process
    group. mpirun must get the signal once: a second one (directly and
    again forwarded by ztrain-run) makes Open MPI kill the ranks outright,
    which left every swap directory behind and no line. Each rank says it
    was ended, its directory is gone, and ztrain-run ends by the signal it
    got (the status a shell loop or a scheduler looks at). A SIGKILL to the
    group (`timeout -k`, a harness's cleanup) kills ztrain-run alone, and
    mpirun, told by its parent's death, ends the ranks the same way."""
    import signal
    import time
    spec = gpt(batch=2)
    init, data = inputs(tmp_path, spec, 2 * 2 * spec.batch)
    nvme = swap_dir(tmp_path)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="nvg", extra=["--dp", "2", "--zero-stage", "3",
                                                   "--offload-optimizer=nvme",
                                                   "--offload-param=nvme"])
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.Popen([e2e_util.require_tool("ztrain-run"), "--np", "2", exe,
                          "--steps", "100000000", "--init", init, "--data", data,
                          "--nvme-path", str(nvme), "--log-every", "0", "--threads", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True,  # its own process group, as a terminal's job
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while len([d for d in nvme.iterdir() if files_in(d)]) < 2:
            assert time.monotonic() < deadline and p.poll() is None, "the job did not start"
            time.sleep(0.05)
        time.sleep(0.3)  # in the steps
        os.killpg(p.pid, getattr(signal, sig))
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == -getattr(signal, sig), (p.returncode, err)
    ended = [l for l in err.splitlines() if " ended by SIGTERM in step " in l]
    assert sorted(l.split("]")[0] for l in ended) == \
        ["ztrain: error: [rank 0", "ztrain: error: [rank 1"], err
    assert "ztrain-run:" not in err, err
    if sig == "SIGKILL":
        # Nothing failed and nothing printed above: each rank says that
        # ztrain-run was killed (issue 49), not "see its message above".
        assert all("ztrain-run, which launched this job (pid " in l and
                   "was killed, and mpirun ended every rank" in l for l in ended), err
        assert "message above" not in err, err
    assert list(nvme.iterdir()) == []


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_a_killed_runs_swap_directory_is_removed_by_the_next_run(tmp_path):
    """SIGKILL (the OOM killer, a scheduler's hard kill) leaves a run's swap
    directory behind: its whole optimizer state, tens of GB at scale. The
    next run under the same --nvme-path removes it, once (one line naming
    it and its bytes, from whichever of its ranks took it), and leaves a
    run still going on that path alone: that run ends normally."""
    import signal
    import time
    spec = gpt(batch=2)
    init, data = inputs(tmp_path, spec, 2 * 2 * spec.batch)
    nvme = swap_dir(tmp_path)
    one, two = (e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                      parity.OptimizerConfig("adamw"), name=f"nvk{n}",
                                      extra=["--dp", str(n), "--zero-stage", "1",
                                             "--offload-optimizer=nvme"]) for n in (1, 2))
    long_run = [one, "--steps", "100000000", "--init", init, "--data", data,
                "--nvme-path", str(nvme), "--log-every", "0"]

    def start_and_wait_for_files(known):
        p = subprocess.Popen(long_run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while True:
            new = [d for d in nvme.iterdir() if d not in known and files_in(d)]
            if new:
                return p, new[0]
            assert time.monotonic() < deadline and p.poll() is None, "the run did not start"
            time.sleep(0.05)

    live, live_dir = start_and_wait_for_files([])
    try:
        killed, stale = start_and_wait_for_files([live_dir])
        try:
            time.sleep(0.2)  # in the steps
            killed.kill()
            killed.wait(timeout=60)
        finally:
            killed.kill()
        assert killed.returncode == -signal.SIGKILL
        stale_bytes = sum(f.stat().st_size for f in stale.iterdir())
        assert stale_bytes > 0  # left behind: nothing runs at SIGKILL
        live_files = sorted(f.name for f in live_dir.iterdir())
        p = e2e_util.mpirun(2, [two, "--steps", "2", "--init", init, "--data", data,
                                "--nvme-path", nvme, "--log-every", "0"])
        removed = [l for l in p.stderr.splitlines() if "removed '" in l]
        assert len(removed) == 1 and f"removed '{stale}' ({format_bytes(stale_bytes)})" in \
            removed[0] and \
            "the swap directory of a run that ended without removing it" in removed[0], p.stderr
        assert not stale.exists()
        # The live run's directory is untouched (none of its files went;
        # a run still starting may have written more since the listing),
        # and the run goes on.
        assert set(live_files) <= {f.name for f in live_dir.iterdir()}
        assert live.poll() is None
        live.send_signal(signal.SIGTERM)
        _, err = live.communicate(timeout=60)
    finally:
        live.kill()
    assert live.returncode == -signal.SIGTERM and "ended by SIGTERM" in err, err
    assert "removed '" not in err  # there was nothing to take at its start
    assert list(nvme.iterdir()) == []


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_a_refusal_after_start_up_removes_every_ranks_swap_directory(tmp_path):
    """A non-finite loss stops every rank at the same step (a refusal all
    ranks reach): each removes its own swap directory before any exits, so
    the launcher ending the job at the first exit leaves none behind."""
    spec = gpt(batch=2)
    init, data = inputs(tmp_path, spec, 2 * 2 * spec.batch)
    nvme = swap_dir(tmp_path)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="nv2", extra=["--dp", "2", "--zero-stage", "1",
                                                   "--offload-optimizer=nvme"])
    for _ in range(3):
        p = e2e_util.mpirun(2, [exe, "--steps", "5", "--init", init, "--data", data,
                                "--nvme-path", nvme, "--lr", "1e30", "--log-every", "0"],
                            check=False, timeout=120)
        assert p.returncode != 0 and "the loss is" in p.stderr, p.stderr
        assert list(nvme.iterdir()) == [], p.stderr


def test_the_open_file_limit_is_raised_or_named(tmp_path):
    """One file per tensor on nvme stays open for the run: a soft open-file
    limit below that is raised up to the hard one; a hard limit below it is
    one line naming the count and `ulimit -n`, with nothing left behind."""
    import resource
    spec = gpt(batch=2)
    init, data = inputs(tmp_path, spec, spec.batch)
    nvme = swap_dir(tmp_path)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="files", extra=["--zero-stage=3", "--offload-optimizer=nvme",
                                                     "--offload-param=nvme"])
    files = 3 * len(parity.make_init(spec, seed=5))  # each parameter and its two moments
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = files // 2  # below what the plan holds open, above what start-up needs

    def run_with(limits):
        return subprocess.run([exe, "--steps", "1", "--init", init, "--data", data,
                               "--nvme-path", str(nvme), "--log-every", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=120,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                                    limits))
    if hard == resource.RLIM_INFINITY or hard > files + 200:
        p = run_with((low, hard))
        assert p.returncode == 0, p.stderr
    p = run_with((low, low))
    assert p.returncode != 0
    lines = one_error_line(p)
    assert len(lines) == 1 and f"keeps {files} files open per rank" in lines[0] and \
        "ulimit -n" in lines[0], p.stderr
    assert list(nvme.iterdir()) == []


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_missing_nvme_path_is_refused_on_every_rank(tmp_path):
    spec = gpt(batch=2)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="nv", extra=["--dp", "2", "--zero-stage", "1",
                                                  "--offload-optimizer=nvme"])
    p = e2e_util.mpirun(2, [exe, "--steps", "1"], check=False, timeout=120)
    assert p.returncode != 0
    assert "give --nvme-path DIR" in p.stderr, p.stderr
    assert "ORTE_ERROR_LOG" not in p.stderr


def test_cpu_offload_on_the_cpu_backend_says_it_is_a_no_op(tmp_path):
    spec = gpt()
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="cpu", extra=["--offload-optimizer=cpu"])
    p = parity.run_exe(exe, 1, check=False)
    assert p.returncode == 0, p.stderr
    assert "host memory is the device's" in p.stderr and \
        "the optimizer states stay where they are" in p.stderr and \
        "each gradient is copied once into host_gradients" in p.stderr, p.stderr


def test_the_trace_has_an_io_track(tmp_path):
    """Every swap is an event on the rank's I/O track (issue to completion),
    every wait for one on the compute track."""
    spec = gpt()
    init, data = inputs(tmp_path, spec, 2 * spec.batch)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="nv", extra=["--offload-optimizer=nvme"])
    trace = tmp_path / "trace.json"
    report = tmp_path / "r.json"
    parity.run_exe(exe, 2, init=init, data=data, report=str(report),
                   extra=["--nvme-path", str(swap_dir(tmp_path)), "--trace", str(trace)])
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    # Transfers in flight together take lanes of their own ("io 2", ...).
    assert {"compute", "communication", "io"} <= names and \
        all(n.startswith("io ") for n in names - {"compute", "communication", "io"}), names
    e2e_util.assert_tracks_nest(events)
    io = e2e_util.io_events(events)
    off = parity.read_report(str(report))["offload"]
    # Two steps, two Adam states per parameter, each swapped in and out.
    states = 2 * len(element_counts(spec))
    assert off["reads"] == off["writes"] == 2 * states
    assert len(io) == off["reads"] + off["writes"]
    assert sum(e["args"]["bytes"] for e in io) == off["read_bytes"] + off["write_bytes"]
    assert {e["name"] for e in io} == {"swap_in", "swap_out"}
    waits = [e for e in events if e["name"] == "swap wait"]
    assert len(waits) == len(io)


@pytest.mark.parametrize("stage,flags", [
    (2, ["--offload-optimizer=cpu"]),  # gradient spills, one in flight
    (3, ["--offload-optimizer=nvme", "--offload-param=nvme", "--offload-param-ratio=0.5"]),
])
def test_spills_and_partial_parameters_run_twice_bitwise(stage, flags, tmp_path):
    """The same run twice gives the same bits (two ranks, three steps)."""
    if MPIRUN is None:
        pytest.skip("mpirun not installed")
    spec = gpt(batch=2)
    init, data = inputs(tmp_path, spec, STEPS * 2 * spec.batch)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="twice", extra=["--dp", "2", "--zero-stage", str(stage),
                                                     *flags])
    saved = []
    for run in range(2):
        save = tmp_path / f"run{run}.safetensors"
        e2e_util.mpirun(2, [exe, "--steps", str(STEPS), "--init", init, "--data", data,
                            "--save", save, "--threads", "1", "--log-every", "0",
                            "--nvme-path", swap_dir(tmp_path)])
        saved.append(save.read_bytes())
    assert saved[0] == saved[1]


def test_the_trace_shows_each_gradient_spill(tmp_path):
    """optimizer=cpu spills every gradient to host memory for its update:
    each spill is an event on the I/O track (its start to its wait), and
    their bytes are the report's gradients_to_host_bytes."""
    spec = gpt()
    init, data = inputs(tmp_path, spec, 2 * spec.batch)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="cpu", extra=["--offload-optimizer=cpu"])
    trace = tmp_path / "trace.json"
    report = tmp_path / "r.json"
    parity.run_exe(exe, 2, init=init, data=data, report=str(report),
                   extra=["--trace", str(trace)])
    events = json.loads(trace.read_text())["traceEvents"]
    e2e_util.assert_tracks_nest(events)
    io = e2e_util.io_events(events)
    off = parity.read_report(str(report))["offload"]
    # Two steps, one spill per parameter each.
    assert {e["name"] for e in io} == {"gradient_to_host"}
    assert len(io) == 2 * len(element_counts(spec))
    assert sum(e["args"]["bytes"] for e in io) == off["gradients_to_host_bytes"] > 0


def config_case(tmp_path):
    """What the DeepSpeed config tests share: the compiler, a small GPT's
    init, data and source, a swap directory and the config's path."""
    spec = gpt(batch=2)
    init, data = inputs(tmp_path, spec, 2 * spec.batch)
    src = tmp_path / "m.mlir"
    src.write_text(spec.to_mlir())
    return (e2e_util.require_tool("ztrain-compile"), init, data, src, swap_dir(tmp_path),
            tmp_path / "ds.json")


def test_a_deepspeed_config_offloads_the_same_way(tmp_path):
    """zero_optimization.offload_optimizer / offload_param in a DeepSpeed
    config build what the flags build, and the executable takes nvme_path
    from the same file."""
    compile_, init, data, src, nvme, config = config_case(tmp_path)
    config.write_text(json.dumps({
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "nvme", "nvme_path": str(nvme), "buffer_count": 2,
                                  "pin_memory": True},
            "offload_param": {"device": "nvme", "nvme_path": str(nvme), "buffer_size": 1e8,
                              "max_in_cpu": 1e9}},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}))
    from_config = tmp_path / "cfg"
    p = subprocess.run([compile_, str(src), "-o", str(from_config), "--config", str(config),
                        "--dp=1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    assert "nvme_path" in p.stderr  # the note: the executable reads it
    from_flags = tmp_path / "flags"
    p = subprocess.run([compile_, str(src), "-o", str(from_flags), "--optimizer=adamw",
                        "--lr=0.001", "--zero-stage=3", "--dp=1", "--offload-optimizer=nvme",
                        "--offload-param=nvme", "--offload-buffer-count=2"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    assert from_config.read_bytes() == from_flags.read_bytes()
    # No --nvme-path: the config's.
    report = tmp_path / "r.json"
    parity.run_exe(str(from_config), 1, init=init, data=data, report=str(report),
                   extra=["--config", str(config)])
    assert parity.read_report(str(report))["offload"]["directory"].startswith(str(nvme))
    # sub_group_size: the optimizer states stream in chunks, as --sub-group-size.
    config.write_text(json.dumps({
        "zero_optimization": {"stage": 0, "sub_group_size": 2048,
                              "offload_optimizer": {"device": "nvme", "nvme_path": str(nvme)}},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}))
    built = {}
    for name, flags in [("cfg", ["--config", str(config)]),
                        ("flags", ["--optimizer=adamw", "--lr=0.001",
                                   "--offload-optimizer=nvme", "--sub-group-size=2048"]),
                        ("whole", ["--optimizer=adamw", "--lr=0.001",
                                   "--offload-optimizer=nvme"])]:
        out = tmp_path / f"sg-{name}"
        p = subprocess.run([compile_, str(src), "-o", str(out), "--dp=1", *flags,
                            "--emit=mlir"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        assert p.returncode == 0, p.stderr
        built[name] = out.read_text()
    assert built["cfg"] == built["flags"] != built["whole"]
    assert "ztrt_swap_in_chunk" in built["flags"]


def test_a_zero_infinity_config_as_deepspeed_writes_it(tmp_path):
    """DeepSpeed's ZeRO-Infinity config (its tutorial's and Hugging Face's
    nvme example: the aio section, pipelined reads and writes, the reuse
    distance, zero_allow_untested_optimizer) builds what its flags build,
    notes what ztrain does not use, and trains; the deprecated cpu_offload
    is offload_optimizer=cpu; offload_param.ratio is --offload-param-ratio
    (ztrain's key: DeepSpeed's offload_param has no ratio)."""
    compile_, init, data, src, nvme, config = config_case(tmp_path)

    def build(name, flags):
        out = tmp_path / name
        p = subprocess.run([compile_, str(src), "-o", str(out), "--dp=1", *flags],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.returncode == 0, p.stderr
        return out, p.stderr

    config.write_text(json.dumps({
        "zero_optimization": {
            "stage": 3, "contiguous_gradients": True, "stage3_max_live_parameters": 1e9,
            "stage3_max_reuse_distance": 1e9, "stage3_prefetch_bucket_size": 1e7,
            "stage3_param_persistence_threshold": 1e5, "reduce_bucket_size": 1e7,
            "sub_group_size": 1e9, "round_robin_gradients": False,
            "offload_optimizer": {"device": "nvme", "nvme_path": str(nvme), "pin_memory": True,
                                  "buffer_count": 4, "fast_init": False,
                                  "pipeline_read": True, "pipeline_write": True},
            "offload_param": {"device": "nvme", "nvme_path": str(nvme), "pin_memory": True,
                              "buffer_count": 5, "buffer_size": 1e8, "max_in_cpu": 1e9}},
        "aio": {"block_size": 1048576, "queue_depth": 8, "thread_count": 1,
                "intra_op_parallelism": 1, "io_backend": "async_io",
                "single_submit": False, "overlap_events": True, "use_gds": False},
        "zero_allow_untested_optimizer": True,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}))
    from_config, notes = build("cfg", ["--config", str(config)])
    assert "note: --config: aio: not used" in notes, notes
    assert "note: --config: zero_optimization.stage3_max_reuse_distance: not used" in notes
    from_flags, _ = build("flags", [
        "--optimizer=adamw", "--lr=0.001", "--zero-stage=3", "--offload-optimizer=nvme",
        "--offload-param=nvme", "--offload-buffer-count=4", "--sub-group-size=1000000000",
        f"--max-live-bytes={int(1e9) * 4}", f"--bucket-bytes={int(1e7) * 4}"])
    assert from_config.read_bytes() == from_flags.read_bytes()
    # The executable reads the same file: nvme_path, and the keys it leaves
    # to the compiler (aio, zero_allow_untested_optimizer) are no error.
    report = tmp_path / "r.json"
    parity.run_exe(str(from_config), 1, init=init, data=data, report=str(report),
                   extra=["--config", str(config)])
    assert parity.read_report(str(report))["offload"]["directory"].startswith(str(nvme))

    for name, zero, flags in [
            ("deprecated", {"stage": 0, "cpu_offload": True}, ["--offload-optimizer=cpu"]),
            ("param-ratio", {"stage": 3, "offload_param": {"device": "nvme", "ratio": 0.5}},
             ["--zero-stage=3", "--offload-param=nvme", "--offload-param-ratio=0.5"])]:
        config.write_text(json.dumps({"zero_optimization": zero,
                                      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}))
        got, _ = build(name + "-cfg", ["--config", str(config), "--emit=mlir"])
        want, _ = build(name + "-flags", ["--optimizer=adamw", "--lr=0.001", *flags,
                                          "--emit=mlir"])
        assert got.read_text() == want.read_text(), name

"""ZeRO-R's Pa+cpu: `--offload-activations=cpu` keeps the checkpoints
train-recompute leaves for the backward pass in host memory between the
passes. The recomputation reads the same bytes back, so the weights are
bitwise those of the same plan without offload, at every ZeRO stage and
N in {1, 2, 4}, with full and selective recompute; and zero-report's device
peak, host copies and bytes moved are what the run measures, to the byte.
The cuda backend runs it on the CUDA emulator here (on a GPU where there is
one): its copies are ordered on the compute stream, and the emulator's
random stream delays would change the bits if they were not.
"""

import json
import shutil
import subprocess

import pytest

import e2e_util
from test_cuda import device_count, require_cuda_runtime, runtime_flags, target  # noqa: F401
from test_recompute import gpt, inputs, zero_report
from ztrain import parity

MPIRUN = shutil.which("mpirun")
STEPS = 3


def run(exe, n, steps, init, data, save, report, extra=()):
    cmd = [exe, "--steps", str(steps), "--init", init, "--data", data, "--threads", "1",
           "--save", save, "--report", report, "--log-every", "0", *extra]
    e2e_util.launch(n, cmd)
    return json.loads(open(report).read())


def check(tmp_path, spec, stage, n, policy, runtime=(), backend=(), accum=1):
    """Trains the plan with and without Pa+cpu; asserts the same bits and
    the report's bytes. Returns the two measured reports. `accum`
    micro-batches per step: each copies its checkpoints down and back."""
    init, data = inputs(tmp_path, spec, STEPS * n * accum * spec.batch)
    zero = ["--dp", str(n), "--zero-stage", str(stage), f"--recompute={policy}",
            f"--grad-accum-steps={accum}"]
    measured, saved = {}, {}
    for offload in ("none", "cpu"):
        exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                    parity.OptimizerConfig("adamw"), name=f"pa-{offload}",
                                    extra=zero + [f"--offload-activations={offload}",
                                                  *runtime])
        save, report = tmp_path / f"{offload}.safetensors", tmp_path / f"{offload}.json"
        measured[offload] = run(exe, n, STEPS, init, data, save, report, backend)
        saved[offload] = save.read_bytes()
    assert saved["cpu"] == saved["none"], (stage, n, policy)
    # The same run twice: bitwise (on the emulator with its streams delayed
    # at random, so the copies' order is not luck).
    again = tmp_path / "again.safetensors"
    run(exe, n, STEPS, init, data, again, tmp_path / "again.json", backend)
    assert again.read_bytes() == saved["cpu"], (stage, n, policy)
    plan = zero_report(tmp_path, spec, policy,
                       [f"dp={n}", f"stage={stage}", "offload-activations=cpu"],
                       training=f"grad-accum-steps={accum}")
    per_rank, off = plan["per_rank"], plan["offload"]
    moved = off["transfers_per_step"]["activations_to_host"]
    assert off["host"]["activations"] > 0 and moved > 0
    for rank in measured["cpu"]["ranks"]:
        mem, io = rank["memory"], rank["offload"]
        # Exact: the device holds what the plan said; the host copies are
        # the host_activations arena; every step moves each checkpoint
        # down and back once.
        assert mem["device_peak"] == per_rank["predicted_peak"], (mem, per_rank)
        assert mem["activations"] == per_rank["activations"]
        assert mem["host_activations"] == off["host"]["activations"]
        assert io["activations_to_host_bytes"] == STEPS * moved
        assert io["activations_from_host_bytes"] == STEPS * moved
        if backend:  # over the host link on a device
            assert io["host_to_device_bytes"] == \
                STEPS * off["device_backend"]["host_to_device_per_step"]
    # What moved left the device: the activation arena shrinks, by at most
    # the checkpoints' bytes (their reloads take room in the backward pass).
    before = measured["none"]["ranks"][0]["memory"]["activations"]
    after = measured["cpu"]["ranks"][0]["memory"]["activations"]
    assert after < before
    assert before - after <= off["host"]["activations"]
    return measured


@pytest.mark.parametrize("stage,n,policy", [
    (0, 1, "full"), (1, 2, "full"), (2, 2, "selective"), (3, 2, "full"), (3, 4, "full"),
    (0, 1, "selective")])
def test_pa_cpu_is_bitwise_and_priced_exactly(stage, n, policy, tmp_path):
    if n > 1 and MPIRUN is None:
        pytest.skip("mpirun not installed")
    spec = models_gpt(layers=6)
    check(tmp_path, spec, stage, n, policy)


@pytest.mark.parametrize("stage,n", [(0, 1), (3, 2)])
def test_pa_cpu_with_accumulation_is_priced_per_micro_batch(stage, n, tmp_path):
    """Two micro-batches per step: the report counts each one's copies (the
    run moves the checkpoints down and back once per micro-batch)."""
    if n > 1 and MPIRUN is None:
        pytest.skip("mpirun not installed")
    check(tmp_path, models_gpt(layers=4), stage, n, "full", accum=2)


def models_gpt(layers):
    from ztrain import models
    return models.gpt(batch=2, seq=32, vocab=64, layers=layers, width=32, heads=4,
                      dropout=0.1)


def test_pa_cpu_on_llama(tmp_path):
    from ztrain import models
    check(tmp_path, models.llama(batch=2, seq=16, vocab=64, layers=4, width=32, heads=4),
          0, 1, "full")


@pytest.mark.parametrize("stage,n", [(0, 1), (3, 2)])
def test_pa_cpu_on_the_cuda_backend(stage, n, target, tmp_path):
    if n > device_count(target):
        pytest.skip(f"needs {n} GPUs (one per rank)")
    spec = models_gpt(layers=4)
    require_cuda_runtime(e2e_util.compile_text(
        spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"), name="probe",
        extra=runtime_flags(target)))
    check(tmp_path, spec, stage, n, "full", runtime=runtime_flags(target),
          backend=["--backend", "cuda"], accum=2 if stage == 3 else 1)


def test_bad_pa_cpu_input_is_one_line(tmp_path):
    compile_ = e2e_util.require_tool("ztrain-compile")
    src = tmp_path / "m.mlir"
    src.write_text(gpt().to_mlir())
    for flags, expect in [
        (["--offload-activations=cpu"],
         "activations=cpu moves the activations train-recompute keeps for the backward "
         "pass, but this step recomputes nothing (compile with --recompute=full or selective)"),
        (["--recompute=full", "--offload-activations=disk"],
         "for the --offload-activations option: Cannot find option named 'disk'!"),
        (["--recompute=full", "--offload-activations=cpu", "--memory-budget=1",
          "--host-memory-budget=1GB"],
         "--memory-budget=1: no plan fits 1 bytes of device memory per rank (with 1000000000 bytes of "
         "host memory); the smallest device peak is"),
    ]:
        p = subprocess.run([compile_, str(src), "-o", str(tmp_path / "x"), *flags],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.returncode != 0, flags
        # (A misspelled placement is llvm::cl's line, which says no "error".)
        errors = [line for line in p.stderr.splitlines()
                  if "error" in line or "Cannot find option" in line]
        assert len(errors) == 1 and expect in errors[0], (flags, p.stderr)
        assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("extra,run_extra", [
    (["--grad-accum-steps=2"], []),
    (["--precision=bf16"], []),
    (["--offload-optimizer=nvme", "--offload-param=nvme"], ["--nvme-path", "NVME"]),
    ([], ["--eval-data", "DATA", "--eval-every", "1", "--eval-steps", "1"]),
], ids=["accumulation", "bf16", "everything-offloaded", "with-eval"])
def test_pa_cpu_with_the_rest_of_the_loop(extra, run_extra, tmp_path):
    """Pa+cpu composes: gradient accumulation (a copy per micro-batch), bf16,
    optimizer states and parameters on nvme at stage 3, evaluation between
    steps: the same bits as without it."""
    spec = models_gpt(layers=4)
    n, stage = (2, 3) if MPIRUN else (1, 3)
    init, data = inputs(tmp_path, spec, 2 * STEPS * n * spec.batch)
    nvme = tmp_path / "nvme"
    nvme.mkdir()
    run_extra = [str(nvme) if a == "NVME" else data if a == "DATA" else a for a in run_extra]
    saved = {}
    for offload in ("none", "cpu"):
        exe = e2e_util.compile_text(
            spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
            name=f"loop-{offload}",
            extra=["--dp", str(n), "--zero-stage", str(stage), "--recompute=full",
                   f"--offload-activations={offload}", *extra])
        save, report = tmp_path / f"{offload}.safetensors", tmp_path / f"{offload}.json"
        got = run(exe, n, STEPS, init, data, save, report, run_extra)
        # The weights, and every step's loss and evaluation as logged
        # (without their timings).
        def untimed(records):
            return json.dumps([{k: v for k, v in r.items() if "time" not in k}
                               for r in records or []])
        assert got.get("eval") or "--eval-data" not in run_extra
        saved[offload] = (save.read_bytes(), untimed(got.get("steps")),
                          untimed(got.get("eval")))
    assert saved["cpu"] == saved["none"]
    assert list(nvme.iterdir()) == []

"""zero-offload on the cuda backend: optimizer states in host memory
(`--offload-optimizer=cpu`) and optimizer states and parameters on NVMe
(`--offload-optimizer=nvme`, `--offload-param=nvme`) train to the same
bits as the same plan without offload, at every ZeRO stage and N in
{1, 2, 4}, and the report's device, host and host-link bytes are zero-report's.

How it runs on a device (docs/offload.md, "On the cuda backend"):

- host-placed states are pinned host memory and their updates run on the
  host (ZeRO-Offload's CPU step): the gradient is copied down, the cpu
  backend's kernel (the same arithmetic as the device's) updates the states
  and the parameter, which is copied back up (a host-placed parameter is
  updated where it is);
- nvme states are swapped through pinned host buffers and their updates
  run on the host the same way (ZeRO-Infinity's CPU step): the states
  never cross the host link;
- an nvme parameter shard's swap buffer is device memory with a pinned
  staging copy: the file is read into the staging copy ahead of use and
  copied to the device at the swap's wait; a write-back copies the device
  buffer to the staging copy behind the update and writes the file once
  that copy landed.

The update is the same arithmetic on the same values wherever its states
live (the cpu and cuda kernels are bitwise equal, CudaConformanceTest),
so the results are bitwise equal (no tolerance), as on the cpu backend
(test_offload.py). Runs on a GPU where there is one and on the CUDA
emulator everywhere (test_cuda.py's `target`), where stream work is delayed
at random and threads run shuffled: a copy the fences fail to order
against the I/O or the kernels changes the bits.
"""

import json
import subprocess

import pytest

import e2e_util
from test_cuda import device_count, require_cuda_runtime, runtime_flags, target  # noqa: F401
from test_offload import gpt, inputs, swap_dir, zero_report
from ztrain import models, parity

STEPS = 3

PLACEMENTS = {
    "none": "",
    "cpu": "offload-optimizer=cpu",
    "nvme": "offload-optimizer=nvme",
    "half": "offload-optimizer=nvme offload-ratio=0.5",
    "infinity": "offload-optimizer=nvme offload-param=nvme",
    "params-cpu": "offload-optimizer=cpu offload-param=cpu",
    # Half the parameter shards in host memory (stepped where they are),
    # the other half on the device (staged through the host step buffer).
    "params-half": "offload-optimizer=cpu offload-param=cpu offload-param-ratio=0.5",
    # Parameter shards on nvme, states in host memory: the host step reads
    # a spilled gradient, and the shard's swap-out follows its wait.
    "params-nvme-states-cpu": "offload-optimizer=cpu offload-param=nvme",
    # Streamed in chunks (one rank: the MLP weights' 4096 elements in two).
    "chunks": "offload-optimizer=nvme sub-group-size=2048",
    # Stage 3: parameter shards in host memory, their updates' states
    # streamed from nvme in chunks (each chunk update reads and writes its
    # part of the shard over the host link).
    "params-cpu-chunks": "offload-optimizer=nvme offload-param=cpu sub-group-size=2048",
}


@pytest.mark.parametrize("stage,n,precision,accum", [
    (0, 1, "fp32", 1), (1, 2, "bf16", 1), (2, 2, "fp32", 1), (3, 2, "fp32", 1),
    (3, 1, "bf16", 1), (3, 4, "fp32", 1), (3, 1, "fp32", 2)])
def test_offload_on_the_cuda_backend(stage, n, precision, accum, target, tmp_path):
    if n > device_count(target):
        pytest.skip(f"needs {n} GPUs (one per rank)")
    spec = gpt(batch=2)
    init, data = inputs(tmp_path, spec, STEPS * n * accum * spec.batch)
    nvme = swap_dir(tmp_path)
    offloads = ["none", "cpu", "nvme", "half", "chunks"] + \
        (["infinity", "params-cpu", "params-half", "params-cpu-chunks",
          "params-nvme-states-cpu"] if stage == 3 else [])
    # Every plan and executable first (the GPU kit compiles them into its
    # cache, scripts/gpu-kit.sh); then a world of one probes the runtime
    # (skips where it has no cuda backend).
    plans, exes = {}, {}
    for offload in offloads:
        placement = PLACEMENTS[offload]
        flags = ["--" + f for f in placement.split()]
        plans[offload] = zero_report(
            tmp_path, spec, f"stage={stage} dp={n} {placement}",
            f"optimizer=adamw precision={precision} grad-accum-steps={accum}")
        exes[offload] = e2e_util.compile_text(
            spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
            name=f"exe-{offload}",
            extra=["--dp", str(n), "--zero-stage", str(stage), f"--precision={precision}",
                   f"--grad-accum-steps={accum}", *flags] + runtime_flags(target))
    require_cuda_runtime(e2e_util.compile_text(
        spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"), name="probe",
        extra=runtime_flags(target)))
    saved, links = {}, {}
    for offload in offloads:
        plan, exe = plans[offload], exes[offload]
        save, report = tmp_path / f"{offload}.safetensors", tmp_path / f"{offload}.json"
        cmd = [exe, "--backend", "cuda", "--steps", str(STEPS), "--init", init,
               "--data", data, "--save", save, "--report", report, "--log-every", "0",
               "--nvme-path", nvme]
        e2e_util.launch(n, cmd)
        saved[offload] = save.read_bytes()
        per_rank, off = plan["per_rank"], plan["offload"]
        on_device = off["device_backend"]
        links[offload] = (on_device["host_to_device_per_step"],
                          on_device["device_to_host_per_step"])
        for rank in json.loads(report.read_text())["ranks"]:
            mem, io = rank["memory"], rank["offload"]
            # Exact, as on the cpu backend; on a device the swap buffers
            # also have their device copy.
            assert mem["device_peak"] == on_device["device_peak"], (offload, mem, on_device)
            assert on_device["device_peak"] == per_rank["predicted_peak"] + \
                off["host"]["swap_buffers"]
            assert mem["optimizer_states"] == per_rank["optimizer_states"], offload
            assert mem["host_optimizer_states"] == off["host"]["optimizer_states"], offload
            assert mem["swap_buffers"] == off["host"]["swap_buffers"], offload
            assert mem["state_swap_buffers"] == off["host"]["state_swap_buffers"], offload
            assert mem["host_parameters"] == off["host"]["parameters"], offload
            # Every byte allocated was planned (the host step buffer too).
            assert mem["peak"] == mem["planned"], (offload, mem)
            if offload == "none":
                assert io is None
                continue
            # The host link: swap copies, the host steps' gradients and
            # parameters, host-placed parameters' reads, every step.
            assert io["host_to_device_bytes"] == \
                STEPS * on_device["host_to_device_per_step"], (offload, io, on_device)
            assert io["device_to_host_bytes"] == \
                STEPS * on_device["device_to_host_per_step"], (offload, io, on_device)
            # The CPU step: updates of host- and nvme-placed states run on
            # the host; the gradients of host-placed ones were spilled to
            # host memory as they were made (nvme ones' are staged); a
            # parameter in device memory is staged through one pinned
            # buffer: nothing to stage only when every parameter is
            # host-placed and every gradient spilled.
            spills = offload in ("cpu", "params-cpu", "params-half", "params-nvme-states-cpu")
            assert mem["host_step_buffers"] == on_device["host_step_buffers"], offload
            assert (on_device["host_step_buffers"] > 0) == (offload != "params-cpu"), \
                (offload, on_device)
            assert mem["host_gradients"] == off["host"]["gradients"], offload
            assert (off["host"]["gradients"] > 0) == spills, off
            assert io["gradients_to_host_bytes"] == \
                STEPS * off["transfers_per_step"]["gradients_to_host"], (offload, io)
            # Every host step runs on the host step thread until its
            # dist.update_wait (host-placed states' read their spilled
            # gradient, nvme states' stage theirs; a parameter on nvme is
            # swapped out after the wait).
            assert io["host_steps"] > 0, (offload, io)
            assert io["asynchronous_host_steps"] == io["host_steps"], (offload, io)
            # As many as zero-report says, per step.
            assert io["host_steps"] == STEPS * on_device["host_steps_per_step"], \
                (offload, io, on_device)
            assert io["asynchronous_host_steps"] == \
                STEPS * on_device["asynchronous_host_steps_per_step"], (offload, io, on_device)
            if offload == "cpu":
                # Gradients down (spilled), parameters up, nothing of the
                # states: in fp32 the parameter goes down too (the update
                # reads it); a master-weight update (bf16) only writes it.
                assert on_device["device_to_host_per_step"] == \
                    (2 if precision == "fp32" else 1) * on_device["host_to_device_per_step"], \
                    on_device
            if offload == "params-cpu":
                # The parameter shards are host memory: the host steps
                # update them in place, so only the gradient shards (the
                # parameter shards' bytes, same element type) go down; the
                # gathers read the shards over the link.
                assert on_device["device_to_host_per_step"] == off["host"]["parameters"], \
                    on_device
                assert on_device["host_step_buffers"] == 0, on_device
            if offload not in ("cpu", "params-cpu", "params-half"):
                assert io["read_bytes"] == STEPS * off["transfers_per_step"]["nvme_to_host"]
                assert io["write_bytes"] == STEPS * off["transfers_per_step"]["host_to_nvme"]
    # nvme states are stepped on the host (ZeRO-Infinity): they never cross
    # the host link, which carries what the host placement's does (each
    # gradient down, spilled or staged; each parameter down unless only
    # written, and up).
    for offload in ("nvme", "chunks"):
        assert links[offload] == links["cpu"], (offload, links)
    for offload in offloads:
        assert saved[offload] == saved["none"], (stage, n, precision, offload)
    # The last placement's run again: bitwise (its copies on delayed streams).
    again = tmp_path / "again.safetensors"
    e2e_util.launch(n, [again if c == save else c for c in cmd])
    assert again.read_bytes() == saved[offloads[-1]]
    # Every rank's swap directory is gone.
    assert list(nvme.iterdir()) == []


@pytest.mark.parametrize("offload", ["cpu", "infinity", "params-cpu"])
def test_cuda_offload_resumes_bitwise(offload, target, tmp_path):
    """A checkpoint of an offloaded run on the cuda backend (host states
    read from mapped host memory; nvme tensors through their files) resumes
    where an uninterrupted run of the plain plan goes."""
    spec = gpt(batch=2)
    init, data = inputs(tmp_path, spec, 4 * spec.batch)
    nvme = swap_dir(tmp_path)
    exes = {}
    for offload in ("none", offload):
        exes[offload] = e2e_util.compile_text(
            spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
            name=f"exe-{offload}",
            extra=["--zero-stage", "3", *["--" + f for f in PLACEMENTS[offload].split()]]
            + runtime_flags(target))
    require_cuda_runtime(exes["none"])

    def run(exe, *args):
        start = [] if "--resume" in args else ["--init", init]
        p = subprocess.run([exe, "--backend", "cuda", *start, "--data", data,
                            "--log-every", "0", "--nvme-path", str(nvme), *args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=600)
        assert p.returncode == 0, p.stderr

    whole = tmp_path / "whole.safetensors"
    run(exes["none"], "--steps", "4", "--save", str(whole))
    ckpt = tmp_path / "ckpt"
    run(exes[offload], "--steps", "2", "--save-checkpoint", str(ckpt))
    resumed = tmp_path / "resumed.safetensors"
    run(exes[offload], "--steps", "2", "--resume", str(ckpt), "--save", str(resumed))
    assert resumed.read_bytes() == whole.read_bytes()
    assert list(nvme.iterdir()) == []


@pytest.mark.parametrize("model,optimizer,precision,accum,clip", [
    ("gpt", "adamw", "fp32", 2, 1.0),   # accumulation, clipping's scale
    ("llama", "adam", "fp16", 1, 0.0),  # loss scaling (f32 masters), skipped steps
    ("gpt", "sgd-momentum", "fp32", 1, 0.0),
    ("gpt", "sgd", "bf16", 1, 0.0),     # the f32 master is the only state
])
def test_the_host_step_is_bitwise_the_device_update(model, optimizer, precision, accum,
                                                    clip, target, tmp_path):
    """ZeRO-Offload's CPU step (--offload-optimizer=cpu on the cuda
    backend) trains to the same bits as the device's own update of the
    same plan without offload, for every update form the host step takes:
    Adam / AdamW, SGD with and without momentum, plain and master-weight
    (bf16, fp16 with dynamic loss scaling), with gradient accumulation and
    clipping (their scale reaches the host step as it reaches the kernel).
    Half the states (--offload-ratio=0.5) mixes host and device updates in
    one step. nvme states take the same host step (ZeRO-Infinity's),
    from their swap buffers, inside the backward pass."""
    from test_offload import llama
    spec = gpt() if model == "gpt" else llama()
    init, data = inputs(tmp_path, spec, STEPS * accum * spec.batch)
    opt = (parity.OptimizerConfig("sgd", lr=0.05, momentum=0.9)
           if optimizer == "sgd-momentum" else parity.OptimizerConfig("sgd", lr=0.05)
           if optimizer == "sgd" else parity.OptimizerConfig(optimizer))
    extra = [f"--precision={precision}", f"--grad-accum-steps={accum}",
             f"--clip-grad-norm={clip}"] + runtime_flags(target)
    exes = {name: e2e_util.compile_text(spec.to_mlir(), str(tmp_path), opt,
                                        name=f"exe-{name}", extra=extra + flags)
            for name, flags in {"none": [], "cpu": ["--offload-optimizer=cpu"],
                                "half": ["--offload-optimizer=cpu",
                                         "--offload-ratio=0.5"],
                                "nvme": ["--offload-optimizer=nvme"]}.items()}
    require_cuda_runtime(exes["none"])
    nvme = swap_dir(tmp_path)
    saved, reports = {}, {}
    for name, exe in exes.items():
        save, report = tmp_path / f"{name}.safetensors", tmp_path / f"{name}.json"
        parity.run_exe(exe, STEPS, init=init, data=data, save=str(save), report=str(report),
                       threads=1, extra=["--backend", "cuda", "--nvme-path", str(nvme)])
        saved[name] = save.read_bytes()
        reports[name] = parity.read_report(str(report))
    for name in ("cpu", "half", "nvme"):
        # Exact, no tolerance: the cpu's kernel is bitwise the device's.
        assert saved[name] == saved["none"], name
        assert parity.report_losses(reports[name]).tolist() == \
            parity.report_losses(reports["none"]).tolist(), name
        rank = reports[name]["ranks"][0] if "ranks" in reports[name] else reports[name]
        # The host step ran: its buffer was allocated and gradients went down.
        assert rank["memory"]["host_step_buffers"] > 0, rank["memory"]
        assert rank["offload"]["device_to_host_bytes"] > 0, rank["offload"]
        # Every host step ran on the host step thread, beside the step:
        # host-placed states' with their spilled gradient, nvme ones'
        # staging theirs.
        io = rank["offload"]
        assert io["host_steps"] > 0, io
        assert io["asynchronous_host_steps"] == io["host_steps"], (name, io)
    assert parity.report_losses(reports["none"])[0] != parity.report_losses(reports["none"])[-1]
    # The host step run again: the same bits (its copies on the emulator's
    # randomly delayed streams).
    again = tmp_path / "again.safetensors"
    parity.run_exe(str(tmp_path / "exe-cpu"), STEPS, init=init, data=data, save=str(again),
                   threads=1, extra=["--backend", "cuda"])
    assert again.read_bytes() == saved["cpu"]


@pytest.mark.parametrize("offload", ["cpu", "nvme"])
def test_large_updates_go_through_the_host_step_buffer_in_tiles(offload, target, tmp_path):
    """An update that stages more than 2^20 elements goes through the host
    step buffer in tiles of 2^20, alternating two halves (each tile's
    parameter upload overlaps the next tile): the buffer is two tiles, not
    the whole update (zero-report's device_backend.host_step_buffers, and
    what the run allocates), the link carries the same bytes, and the
    weights are bitwise the plain plan's. A 1024 x 4096 weight: 2^22
    elements, four tiles."""
    if device_count(target) < 1:
        pytest.skip("no device")
    spec = models.mlp(batch=2, in_features=1024, hidden=[4096], classes=8)
    init, data = inputs(tmp_path, spec, STEPS * spec.batch)
    placement = PLACEMENTS[offload]
    plan = zero_report(tmp_path, spec, f"stage=0 dp=1 {placement}")
    exes = {name: e2e_util.compile_text(
        spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"), name=f"exe-{name}",
        extra=["--" + f for f in flags.split()] + runtime_flags(target))
        for name, flags in {"none": "", offload: placement}.items()}
    require_cuda_runtime(exes["none"])
    nvme = swap_dir(tmp_path)
    saved = {}
    for name, exe in exes.items():
        save, report = tmp_path / f"{name}.safetensors", tmp_path / f"{name}.json"
        parity.run_exe(exe, STEPS, init=init, data=data, save=str(save), report=str(report),
                       threads=1, extra=["--backend", "cuda", "--nvme-path", str(nvme)])
        saved[name] = save.read_bytes()
    on_device = plan["offload"]["device_backend"]
    # Two tiles of the 4-byte parameter (cpu: the gradient is spilled) or of
    # the gradient and the parameter (nvme: staged), against 16 / 32 MiB
    # for the whole weight.
    assert on_device["host_step_buffers"] == 2 * 2**20 * (4 if offload == "cpu" else 8)
    rank = parity.read_report(str(tmp_path / f"{offload}.json"))
    rank = rank["ranks"][0] if "ranks" in rank else rank
    assert rank["memory"]["host_step_buffers"] == on_device["host_step_buffers"]
    assert rank["offload"]["host_to_device_bytes"] == STEPS * on_device["host_to_device_per_step"]
    assert rank["offload"]["device_to_host_bytes"] == STEPS * on_device["device_to_host_per_step"]
    # Exact: elementwise updates, tile by tile.
    assert saved[offload] == saved["none"]
    # Again: the same bits (the tiles' uploads on the emulator's randomly
    # delayed copy stream).
    again = tmp_path / "again.safetensors"
    parity.run_exe(exes[offload], STEPS, init=init, data=data, save=str(again), threads=1,
                   extra=["--backend", "cuda", "--nvme-path", str(nvme)])
    assert again.read_bytes() == saved[offload]


def test_asynchronous_host_steps_are_traced(target, tmp_path):
    """--offload-optimizer=cpu on the cuda backend: each update's host step
    runs on the runtime's host step thread between its call (right after
    its gradient's spill, inside the backward pass) and its dist.update_wait
    (before the parameter's next reader, here the end of the step). The
    trace has a "host step" track with one event per update per step, and
    an "update wait" on the compute track for each; the report counts them
    (asynchronous_host_steps, host_step_ms, update_wait_ms)."""
    if device_count(target) < 1:
        pytest.skip("no device")
    spec = models.mlp(batch=4, in_features=64, hidden=[128, 64], classes=8)
    init, data = inputs(tmp_path, spec, STEPS * spec.batch)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="exe-cpu",
                                extra=["--offload-optimizer=cpu"] + runtime_flags(target))
    require_cuda_runtime(exe)
    trace, report = tmp_path / "trace.json", tmp_path / "report.json"
    parity.run_exe(exe, STEPS, init=init, data=data, report=str(report), threads=1,
                   extra=["--backend", "cuda", "--trace", str(trace)])
    rank = parity.read_report(str(report))
    rank = rank["ranks"][0] if "ranks" in rank else rank
    io = rank["offload"]
    updates = 6  # three layers: weight and bias each
    assert io["host_steps"] == io["asynchronous_host_steps"] == STEPS * updates, io
    assert io["host_step_ms"] > 0 and io["update_wait_ms"] >= 0, io
    events = json.loads(trace.read_text())["traceEvents"]
    e2e_util.assert_tracks_nest(events)
    tracks = {e["tid"]: e["args"]["name"] for e in events
              if e.get("ph") == "M" and e["name"] == "thread_name"}
    host = [tid for tid, name in tracks.items() if name == "host step"]
    assert len(host) == 1, tracks
    steps = [e for e in events if e.get("ph") == "X" and e["tid"] == host[0]]
    assert len(steps) == STEPS * updates, len(steps)
    assert {e["name"] for e in steps} == {"adamw_update"}, {e["name"] for e in steps}
    waits = [e for e in events if e.get("ph") == "X" and e["name"] == "update wait"]
    assert len(waits) == STEPS * updates, len(waits)

"""The plan under a memory budget (ztrain-compile --memory-budget, the
plan-search pass).

- the chosen plan, compiled and run under mpirun, allocates exactly the
  predicted peak it was chosen for, which is within the budget;
- flags the user gives fix their dimension;
- a budget no plan meets is one line naming the smallest achievable peak,
  and nothing is written;
- the 7.5B GPT at dp = 64 with a 16 GB budget: a plan that fits is found
  (ZeRO stage 3 with recompute: no plan without recompute fits).
"""

import json
import re
import shutil
import subprocess

import pytest

import e2e_util
from test_cuda import device_count, require_cuda_runtime, runtime_flags, target  # noqa: F401
from ztrain import models, parity, safetensors

MPIRUN = shutil.which("mpirun")


def small_gpt():
    return models.gpt(batch=2, seq=32, vocab=64, layers=3, width=32, heads=4)


def compile_with_budget(tmp_path, spec, budget, extra=()):
    compile_ = e2e_util.require_tool("ztrain-compile")
    src = tmp_path / "m.mlir"
    src.write_text(spec.to_mlir())
    out = tmp_path / "m"
    p = subprocess.run([compile_, str(src), "-o", str(out), f"--memory-budget={budget}",
                        "--dp=2", *extra],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    return p, out


def smallest_peak(tmp_path, spec):
    p, out = compile_with_budget(tmp_path, spec, 1)
    assert p.returncode != 0 and not out.exists()
    m = re.search(r"the smallest predicted peak is (\d+) bytes", p.stderr)
    assert m, p.stderr
    return int(m.group(1))


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_the_chosen_plan_allocates_its_prediction_within_the_budget(tmp_path):
    spec = small_gpt()
    low = smallest_peak(tmp_path, spec)
    # Halfway between the smallest peak and 3x it: some plans fit, some not.
    budget = low + low
    p, exe = compile_with_budget(tmp_path, spec, budget)
    assert p.returncode == 0, p.stderr
    chosen = re.search(r"chosen: (.*): predicted peak (\d+) bytes", p.stderr)
    assert chosen, p.stderr
    assert "over" in p.stderr and "fits" in p.stderr  # the budget binds
    predicted = int(chosen.group(2))
    assert predicted <= budget
    init, data = str(tmp_path / "init.safetensors"), str(tmp_path / "data.safetensors")
    safetensors.save(init, parity.make_init(spec, seed=1))
    safetensors.save(data, parity.make_data(spec, samples=4 * spec.batch, seed=2))
    report = tmp_path / "r.json"
    e2e_util.mpirun(2, [exe, "--steps", "2", "--init", init, "--data", data,
                        "--threads", "1", "--report", report])
    measured = parity.read_report(str(report))["memory"]["peak"]
    # Exact: the search compiled the plan it priced.
    assert measured == predicted, (chosen.group(1), measured, predicted)


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_precision_auto_lets_the_search_choose_bf16(tmp_path):
    """--precision=auto hands the precision to the search (never without:
    it changes the numbers a run computes): with a budget that fp32 meets
    only with recompute, bf16 without recompute fits and is priced faster
    (16-bit matmuls at --device-tflops-16bit). The chosen plan compiles to
    a bf16 executable that allocates its prediction, within the budget; a
    bad value is still one line."""
    spec = small_gpt()
    src = tmp_path / "m.mlir"
    src.write_text(spec.to_mlir())
    p = subprocess.run([e2e_util.require_tool("ztrain-opt"), str(src),
                        "--plan-search=memory-budget=1GB dp=2 precision=auto format=json",
                        "-o", "/dev/null"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    peaks = {(c["precision"], c["recompute"]): c["peak"]
             for c in json.loads(p.stdout)["candidates"]
             if c["stage"] == 0 and not c["overlap"] and "error" not in c}
    assert set(peaks) == {(pr, po) for pr in ("fp32", "bf16")
                          for po in ("none", "selective", "full")}, p.stdout
    assert peaks[("bf16", "none")] < peaks[("fp32", "none")]
    # Between bf16's and fp32's no-recompute peaks.
    budget = (peaks[("bf16", "none")] + peaks[("fp32", "none")]) // 2
    p, exe = compile_with_budget(tmp_path, spec, budget, ["--precision=auto", "--zero-stage=0",
                                                          "--overlap=false"])
    assert p.returncode == 0, p.stderr
    chosen = re.search(r"chosen: --precision=bf16 --zero-stage=0 --recompute=none: "
                       r"predicted peak (\d+) bytes", p.stderr)
    assert chosen, p.stderr
    predicted = int(chosen.group(1))
    assert predicted <= budget
    report = tmp_path / "r.json"
    e2e_util.mpirun(2, [exe, "--steps", "2", "--threads", "1", "--report", report])
    r = parity.read_report(str(report))
    assert r["memory"]["peak"] == predicted
    # The executable's parameters are bf16 (the safetensors header says so).
    save = tmp_path / "w.safetensors"
    e2e_util.mpirun(2, [exe, "--steps", "1", "--threads", "1", "--save", save])
    assert '"dtype":"BF16"' in save.read_bytes()[:65536].decode("latin1").replace(" ", "")
    # Without a budget there is nothing to search: --precision=auto is
    # refused there, in one line that says what it needs.
    compile_ = e2e_util.require_tool("ztrain-compile")
    q = subprocess.run([compile_, str(tmp_path / "m.mlir"), "-o", str(tmp_path / "x"),
                        "--precision=auto"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    assert q.returncode == 1
    assert q.stderr == ("ztrain-compile: error: --precision=auto: the plan search chooses the "
                        "precision; it needs --memory-budget\n")


def test_given_flags_fix_their_dimension(tmp_path):
    spec = small_gpt()
    p, _ = compile_with_budget(tmp_path, spec, "1GB", ["--zero-stage=1", "--recompute=none"])
    assert p.returncode == 0, p.stderr
    rows = [l for l in p.stderr.splitlines() if re.match(r"^ [ *] \d ", l)]
    # Every candidate has stage 1 and no recompute: only overlap varies.
    assert len(rows) == 2, p.stderr
    assert all(" 1     none " in l for l in rows), rows
    assert re.search(r"chosen: --zero-stage=1 --recompute=none", p.stderr), p.stderr


def test_an_impossible_budget_is_one_line(tmp_path):
    p, out = compile_with_budget(tmp_path, small_gpt(), "10kB")
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert re.search(r"--memory-budget=10kB: no plan fits 10000 bytes per rank; the smallest "
                     r"predicted peak is \d+ bytes", lines[0]), lines[0]
    assert not out.exists()
    p, _ = compile_with_budget(tmp_path, small_gpt(), "a lot")
    assert p.returncode != 0
    assert "--memory-budget must be a size in bytes" in p.stderr
    for bad in (["--memory-gbps=0"], ["--device-tflops=nan"], ["--latency-us=-1"],
                ["--nvme-gbps=0"], ["--host-link-gbps=0", "--host-memory-budget=1GB"],
                ["--host-memory-gbps=-5", "--host-memory-budget=1GB"],
                ["--inter-node-link-gbps=-1"]):
        p, out = compile_with_budget(tmp_path, small_gpt(), "1GB", bad)
        assert p.returncode != 0 and not out.exists()
        lines = p.stderr.strip().splitlines()
        assert lines == ["ztrain-compile: error: --link-gbps, --device-tflops, --device-tflops-16bit, "
                         "--memory-gbps, --nvme-gbps, --host-link-gbps and --host-memory-gbps must "
                         "be positive and "
                         "--latency-us and --inter-node-link-gbps non-negative"], (
            bad, p.stderr)


def test_7_5b_gpt_at_dp_64_fits_16_gb(tmp_path):
    # The mixed-precision report's graph: Psi = 7.5e9, bf16 parameters.
    spec = models.gpt(batch=1, seq=2048, vocab=9900, layers=37, width=4096, heads=32)
    src = tmp_path / "gpt7b.mlir"
    src.write_text(spec.to_mlir())
    opt = e2e_util.require_tool("ztrain-opt")
    p = subprocess.run([opt, str(src), "--plan-search=memory-budget=16GB dp=64 precision=bf16",
                        "-o", "/dev/null"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    print(p.stdout.splitlines()[-3])  # "searched N plans in S s"
    chosen = re.search(r"chosen: --zero-stage=(\d) --recompute=(\w+).*: predicted peak (\d+) "
                       r"bytes", p.stdout)
    assert chosen, p.stdout
    assert int(chosen.group(3)) <= 16_000_000_000
    # Model states alone are 16 Psi / 64 = 1.9 GB at stage 3 but the
    # activations of one 2048-token sequence are not: recompute is needed.
    assert chosen.group(1) == "3" and chosen.group(2) != "none", chosen.group(0)
    assert not any(re.match(r"^ [ *] \d\s+none\s.*fits$", l) for l in p.stdout.splitlines())


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed")
def test_offload_only_when_nothing_fits_without(tmp_path):
    """A budget below every plan that keeps the model states in memory but
    above what offload reaches: the search offloads (and only then), the
    plan it prints is what the run allocates, device and host memory
    together within the budget."""
    spec = small_gpt()
    p, out = compile_with_budget(tmp_path, spec, 1, ["--offload-optimizer=none",
                                                     "--offload-param=none"])
    assert p.returncode != 0 and not out.exists()
    in_memory = int(re.search(r"the smallest predicted peak is (\d+) bytes", p.stderr).group(1))
    with_offload = smallest_peak(tmp_path, spec)
    assert with_offload < in_memory
    budget = (with_offload + in_memory) // 2
    p, exe = compile_with_budget(tmp_path, spec, budget)
    assert p.returncode == 0, p.stderr
    chosen = re.search(r"chosen: (.*): predicted peak (\d+) bytes \(.*\) per rank and (\d+) "
                       r"bytes of host buffers", p.stderr)
    assert chosen and "--offload-optimizer=nvme" in chosen.group(1), p.stderr
    device, host = int(chosen.group(2)), int(chosen.group(3))
    assert device + host <= budget
    init, data = str(tmp_path / "init.safetensors"), str(tmp_path / "data.safetensors")
    safetensors.save(init, parity.make_init(spec, seed=1))
    safetensors.save(data, parity.make_data(spec, samples=4 * spec.batch, seed=2))
    report = tmp_path / "r.json"
    nvme = tmp_path / "nvme"
    nvme.mkdir()
    e2e_util.mpirun(2, [exe, "--steps", "2", "--init", init, "--data", data,
                        "--threads", "1", "--report", report, "--nvme-path", nvme])
    mem = parity.read_report(str(report))["memory"]
    assert mem["device_peak"] == device
    assert mem["swap_buffers"] + mem["state_swap_buffers"] == host
    assert mem["peak"] == device + host <= budget
    # With room to spare, no offload: it costs step time.
    p, _ = compile_with_budget(tmp_path, spec, in_memory * 2)
    assert p.returncode == 0 and "offload" not in re.search(r"chosen: .*", p.stderr).group(0)


def test_a_budget_just_short_offloads_only_part(tmp_path):
    """Just below what a plan needs in memory, offloading part of the
    optimizer states is enough, and moves fewer bytes than offloading all:
    with the rest of the plan fixed, the search chooses a ratio below 1."""
    spec = small_gpt()
    fixed = ["--zero-stage=2", "--recompute=full", "--overlap=false"]
    p, out = compile_with_budget(tmp_path, spec, 1, [*fixed, "--offload-optimizer=none",
                                                     "--offload-param=none"])
    in_memory = int(re.search(r"the smallest predicted peak is (\d+) bytes", p.stderr).group(1))
    p, exe = compile_with_budget(tmp_path, spec, in_memory - in_memory // 50, fixed)
    assert p.returncode == 0, p.stderr
    chosen = re.search(r"chosen: (.*): predicted peak", p.stderr).group(1)
    m = re.search(r"--offload-optimizer=nvme --offload-ratio=(0\.\d+)", chosen)
    assert m and 0 < float(m.group(1)) < 1, chosen


def device_search(tmp_path, spec, dp, extra=()):
    """The search's JSON for a device backend (a host budget of 1 GB)
    whatever the device budget: every candidate with its numbers."""
    src = tmp_path / "m.mlir"
    src.write_text(spec.to_mlir())
    opt = e2e_util.require_tool("ztrain-opt")
    p = subprocess.run([opt, str(src), f"--plan-search=memory-budget=1 host-memory-budget=1GB "
                        f"dp={dp} format=json {' '.join(extra)}", "-o", "/dev/null"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode != 0  # nothing fits one byte
    return [c for c in json.loads(p.stdout)["candidates"] if "error" not in c]


def offloads(c):
    return (c["offload_optimizer"], c["offload_param"], c["offload_activations"]) != \
        ("none", "none", "none")


@pytest.mark.parametrize("dp", [1, 2])
def test_a_device_budget_uses_host_memory_first(dp, target, tmp_path):
    """With --host-memory-budget the plan is a device backend's: the device
    budget bounds the device's peak alone, and when no plan fits without
    offload the search places activations (Pa+cpu) or optimizer states in
    host memory before nvme (the host link is faster than the disk). The
    chosen plan, run with --backend cuda (the CUDA emulator here), holds
    exactly the device peak it was chosen for, within the budget, and
    exactly the host bytes it was priced with."""
    if dp > device_count(target):
        pytest.skip(f"needs {dp} GPUs (one per rank)")
    if dp > 1 and MPIRUN is None:
        pytest.skip("mpirun not installed")
    spec = models.gpt(batch=2, seq=32, vocab=64, layers=6, width=32, heads=4)
    cands = device_search(tmp_path, spec, dp)
    in_memory = min(c["device_peak"] for c in cands if not offloads(c))
    host = [c for c in cands if offloads(c) and "nvme" not in
            (c["offload_optimizer"], c["offload_param"])]
    assert min(c["device_peak"] for c in host) < in_memory
    budget = in_memory - 1
    src = tmp_path / "m.mlir"
    exe = tmp_path / "m"
    compile_ = e2e_util.require_tool("ztrain-compile")
    p = subprocess.run([compile_, str(src), "-o", str(exe), f"--memory-budget={budget}",
                        "--host-memory-budget=1GB", f"--dp={dp}", *runtime_flags(target)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    chosen = re.search(r"chosen: (.*): predicted device peak (\d+) bytes \(.*\) per rank and "
                       r"(\d+) bytes of host memory, (\d+) bytes over the host link", p.stderr)
    assert chosen, p.stderr
    flags, device, host_bytes = chosen.group(1), int(chosen.group(2)), int(chosen.group(3))
    assert "nvme" not in flags and ("--offload-optimizer=cpu" in flags or
                                    "--offload-activations=cpu" in flags), flags
    assert device <= budget
    require_cuda_runtime(e2e_util.compile_text(
        spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"), name="probe",
        extra=runtime_flags(target)))
    init, data = str(tmp_path / "init.safetensors"), str(tmp_path / "data.safetensors")
    safetensors.save(init, parity.make_init(spec, seed=1))
    safetensors.save(data, parity.make_data(spec, samples=2 * dp * spec.batch, seed=2))
    report = tmp_path / "r.json"
    e2e_util.launch(dp, [str(exe), "--steps", "2", "--init", init, "--data", data,
                         "--threads", "1", "--report", str(report), "--backend", "cuda"])
    for rank in json.loads(report.read_text())["ranks"]:
        mem = rank["memory"]
        assert mem["device_peak"] == device, (flags, mem)
        assert sum(mem.get(k, 0) for k in ("swap_buffers", "state_swap_buffers",
                                           "host_optimizer_states",
                                           "host_parameters", "host_activations",
                                           "host_step_buffers", "host_gradients")) == \
            host_bytes, (flags, mem)
        # Every byte the link carried, as priced (two steps).
        moved = rank["offload"]["host_to_device_bytes"] + rank["offload"]["device_to_host_bytes"]
        assert moved == 2 * int(chosen.group(4)), (flags, rank["offload"])

"""--fuse=elementwise: chains of elementwise ops run as generated kernels
(train-fuse-elementwise, lower-to-runtime's code generation) that compute
every element with the same float operations in the same order as the
runtime's hand-written kernels. What the executable trains must not change
by a bit: each model is compiled with --fuse=none and --fuse=elementwise
and trained; the printed losses and the saved weights are compared byte for
byte. The runtime's AVX-512 kernels and its baseline ones
(ZTRT_CPU_ISA=baseline) are each compared with the generated code, which
likewise has an AVX-512 and a baseline copy."""

import filecmp
import json
import math
import os
import re
import subprocess

import pytest

import e2e_util

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
GPT = os.path.join(ROOT, "examples", "gpt.mlir")
LLAMA = os.path.join(ROOT, "examples", "llama.mlir")
DATA = os.path.join(ROOT, "examples", "data", "genesis-kjv.txt")

# Every fusible rule, forward and backward (autodiff adds relu_grad,
# gelu_grad, ...), on rows of 37 elements: not a multiple of the 4 or 16
# lanes, so every kernel's remainder loop runs. `factor` spreads the
# pre-activations: 40 reaches tanh's and exp's clamps (|x| > 43.5 after
# the doubling), 1 is where every formula's every rounding shows, 0.01
# keeps them in tanh's small-argument branch. The loss
# squares the sum, so every forward value reaches the gradients and the
# saved weights (a bit changed anywhere shows).
COVERAGE = """
module {{
  train.param @p : tensor<8x37xf32> init(normal, 1.0)
  train.param @b : tensor<37xf32> init(normal, 0.5)
  func.func @step(%x: tensor<8x37xf32> {{train.name = "x"}}) -> tensor<f32>
      attributes {{train.entry}} {{
    %p = train.param_read @p : tensor<8x37xf32>
    %b = train.param_read @b : tensor<37xf32>
    %m = train.mul %x, %p : tensor<8x37xf32>
    %c = train.bias_add %m, %b : tensor<8x37xf32>, tensor<37xf32>
    %a = train.scale %c {{factor = {factor} : f64}} : tensor<8x37xf32>
    %r1 = train.relu %a : tensor<8x37xf32>
    %r2 = train.gelu %a : tensor<8x37xf32>
    %r3 = train.gelu_erf %a : tensor<8x37xf32>
    %r4 = train.tanh %a : tensor<8x37xf32>
    %r5 = train.erf %a : tensor<8x37xf32>
    %r6 = train.silu %a : tensor<8x37xf32>
    %r7 = train.sigmoid %a : tensor<8x37xf32>
    %e = train.exp %r7 : tensor<8x37xf32>
    %s = train.sqrt %e : tensor<8x37xf32>
    %q = train.rsqrt %e : tensor<8x37xf32>
    %d = train.div %r6, %e : tensor<8x37xf32>
    %n = train.neg %r5 : tensor<8x37xf32>
    %u = train.sub %r2, %r3 : tensor<8x37xf32>
    %t1 = train.add %r1, %u : tensor<8x37xf32>
    %t2 = train.add %r4, %n : tensor<8x37xf32>
    %t3 = train.mul %s, %q : tensor<8x37xf32>
    %t4 = train.add %d, %t3 : tensor<8x37xf32>
    %t5 = train.add %t1, %t2 : tensor<8x37xf32>
    %t6 = train.add %t4, %t5 : tensor<8x37xf32>
    %sq = train.mul %t6, %t6 : tensor<8x37xf32>
    %l = train.reduce sum %sq [0, 1] : tensor<8x37xf32> -> tensor<f32>
    return %l : tensor<f32>
  }}
}}
"""


def compile_model(src, out, *extra):
    p = e2e_util.run([e2e_util.require_tool("ztrain-compile"), src, "-o", out, *extra])
    assert p.returncode == 0, p.stderr
    return out


def train(ranks, exe, *extra, env=None):
    cmd = [exe, "--steps", 3, "--save", f"{exe}.safetensors", *extra]
    if env:
        cmd = ["env", *[f"{k}={v}" for k, v in env.items()], *cmd]
    run = e2e_util.mpirun(ranks, cmd)
    losses = [line.split()[:4] for line in run.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 3, run.stdout
    return losses


def fused_regions(tmp_path, src, name, *extra):
    """The train.fused regions of the lowered step (--emit=mlir keeps the
    LLVM dialect; the kernels' names tell)."""
    out = compile_model(src, tmp_path / f"{name}.ll", "--emit=llvm", *extra)
    text = open(out).read()
    return re.findall(r"define internal void @(ztrain_fused\.\d+)\(", text)


def assert_bitwise(tmp_path, src, ranks, flags, run_flags=(), env=None):
    fused = compile_model(src, tmp_path / "fused", *flags, "--fuse=elementwise")
    plain = compile_model(src, tmp_path / "plain", *flags, "--fuse=none")
    assert train(ranks, fused, *run_flags, env=env) == train(ranks, plain, *run_flags, env=env)
    assert filecmp.cmp(f"{fused}.safetensors", f"{plain}.safetensors", shallow=False)


@pytest.mark.parametrize("factor", ["40.0", "1.0", "0.01"])
@pytest.mark.parametrize("isa", ["native", "baseline"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_every_rule_trains_bitwise(tmp_path, factor, isa, precision):
    src = tmp_path / "coverage.mlir"
    src.write_text(COVERAGE.format(factor=factor))
    # A large step: the gradients' last bits reach the saved weights.
    flags = ["--optimizer=sgd", "--lr=0.1", f"--precision={precision}"]
    assert len(fused_regions(tmp_path, src, "ir", *flags, "--fuse=elementwise")) >= 2
    env = {"ZTRT_CPU_ISA": "baseline"} if isa == "baseline" else None
    assert_bitwise(tmp_path, src, 1, flags, env=env)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_gpt_trains_bitwise(tmp_path, precision):
    flags = ["--optimizer=adamw", "--lr=1e-3", f"--precision={precision}"]
    assert fused_regions(tmp_path, GPT, "ir", *flags, "--fuse=elementwise")
    assert_bitwise(tmp_path, GPT, 1, flags, ["--data", DATA])


def test_gpt_zero2_overlap_trains_bitwise(tmp_path):
    # The regions never span the step's collectives; on 2 ranks with ZeRO-2
    # and the overlap schedule the step is the same to the bit.
    flags = ["--optimizer=adamw", "--lr=1e-3", "--dp=2", "--zero-stage=2", "--overlap"]
    assert_bitwise(tmp_path, GPT, 2, flags, ["--data", DATA])


def test_llama_trains_bitwise(tmp_path):
    flags = ["--optimizer=adamw", "--lr=1e-3"]
    assert fused_regions(tmp_path, LLAMA, "ir", *flags, "--fuse=elementwise")
    assert_bitwise(tmp_path, LLAMA, 1, flags, ["--data", DATA])


def test_kernels_in_parts_train_bitwise(tmp_path):
    # Kernels referenced from step functions compiled in other parts.
    flags = ["--optimizer=adamw", "--lr=1e-3", "--outline-max-ops=8", "--ops-per-part=20"]
    assert_bitwise(tmp_path, GPT, 1, flags, ["--data", DATA])


def test_generated_kernels_have_no_fma(tmp_path):
    # FMA contraction would change bits: neither copy of any kernel has one.
    exe = compile_model(GPT, tmp_path / "gpt", "--fuse=elementwise")
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", exe], stdout=subprocess.PIPE,
                          text=True, check=True).stdout
    kernels = re.findall(r"<ztrain_fused\.[^>]*>:\n(.*?)\n\n", dump, re.S)
    assert kernels
    assert not any(re.search(r"\bvf(n?)m(add|sub)", body) for body in kernels)
    assert any("zmm" in body for body in kernels)  # the AVX-512 copies


def test_fused_steps_move_fewer_bytes(tmp_path):
    # zero-report prices a region as one kernel reading its inputs and
    # writing its results: the bytes the memory-bound kernels move per step
    # drop. The values only a region reads have no buffer, so the plan's
    # activation arena cannot grow (on GPT the peak is elsewhere: it stays).
    def kernel_bytes(*passes):
        p = e2e_util.run([e2e_util.require_tool("ztrain-opt"), GPT,
                          "--ztrain-training=optimizer=adamw", *passes,
                          "--zero-report=format=json", "-o", os.devnull])
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout or p.stderr)["kernel_bytes_per_step"]

    def arena(*extra):
        out = compile_model(GPT, tmp_path / "gpt.mlir", "--emit=mlir", *extra)
        return int(re.search(r"arena activations (\d+)", open(out).read()).group(1))
    assert kernel_bytes("--train-fuse-elementwise") < 0.95 * kernel_bytes()
    assert arena("--fuse=elementwise") <= arena("--fuse=none")


def test_special_values_train_bitwise(tmp_path):
    # Signed zeros, subnormals, the branch points of tanh (|x| = 0.625) and
    # of exp's clamp (-87), values where exp overflows (> 88.7) and large
    # ones, in the weights the coverage model's chain starts from; the
    # input is ones, so the chain sees them as they are.
    import numpy as np
    from ztrain import safetensors
    special = np.array([0.0, -0.0, 1e-40, -1e-40, 1e-45, 0.625, -0.625, 0.3125, 43.5,
                        -43.5, -87.0, -87.5, 88.8, 1e4, -1e4, 1e-20, 3.0, -3.0, 0.5,
                        -0.5, 1.0, -1.0, 7.25, -7.25, 20.0, -20.0, 2e-38, -2e-38, 0.01,
                        -0.01, 1.5, -1.5, 9.0, -9.0, 0.1, -0.1, 44.0], dtype=np.float32)
    p = np.tile(special, (8, 1))
    for row in range(8):
        p[row] = np.roll(special, row)
    init = tmp_path / "init.safetensors"
    data = tmp_path / "data.safetensors"
    safetensors.save(str(init), {"p": p, "b": np.zeros(37, np.float32)})
    safetensors.save(str(data), {"x": np.ones((64, 37), np.float32)})
    src = tmp_path / "coverage.mlir"
    src.write_text(COVERAGE.format(factor="1.0"))
    for precision in ("fp32", "bf16"):
        flags = ["--optimizer=sgd", "--lr=1e-3", f"--precision={precision}"]
        fused = compile_model(src, tmp_path / f"fused.{precision}", *flags, "--fuse=elementwise")
        plain = compile_model(src, tmp_path / f"plain.{precision}", *flags, "--fuse=none")
        run = ["--init", init, "--data", data]
        losses = train(1, fused, *run)
        assert all(math.isfinite(float(line[3])) for line in losses), losses
        assert losses == train(1, plain, *run)
        assert filecmp.cmp(f"{fused}.safetensors", f"{plain}.safetensors", shallow=False)


def test_fused_zero3_repeats_bitwise_and_measures_its_plan(tmp_path):
    # The bar every byte- or number-moving feature meets: the same run twice
    # is bitwise equal, and the executable measures exactly the memory its
    # plan predicts (the regions' results in their planned slots).
    exe = compile_model(GPT, tmp_path / "fused", "--optimizer=adamw", "--dp=2",
                        "--zero-stage=3", "--fuse=elementwise")
    reports = []
    for run in ("a", "b"):
        report = tmp_path / f"{run}.json"
        e2e_util.mpirun(2, [exe, "--steps", 5, "--data", DATA, "--save", tmp_path / f"{run}.st",
                            "--report", report])
        reports.append(json.load(open(report))["memory"])
    assert filecmp.cmp(tmp_path / "a.st", tmp_path / "b.st", shallow=False)
    assert reports[0]["peak"] == reports[0]["planned"], reports[0]


def test_unknown_fuse_mode_is_one_line(tmp_path):
    p = e2e_util.run([e2e_util.require_tool("ztrain-compile"), GPT, "-o", tmp_path / "x",
                      "--fuse=rows"])
    assert p.returncode != 0
    assert "--fuse" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "x").exists()

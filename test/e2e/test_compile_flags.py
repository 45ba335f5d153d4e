"""ztrain-compile's flag values (issue 15 item 11): a value no pass would
accept is one line on stderr naming the flag and what it takes, before any
IR exists (never an IR location and source snippet), also when a DeepSpeed
config set it (the line then names the config key); flags that would have
no effect are warned about or, where the build cannot be what was asked,
refused. Nothing is written on a refusal.
"""

import json
import subprocess

import pytest

import e2e_util
from ztrain import models


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("flags")
    src = d / "m.mlir"
    src.write_text(models.gpt(batch=2, seq=8, vocab=32, layers=1, width=16, heads=2).to_mlir())
    return d, src


def compile_(model, *flags):
    d, src = model
    out = d / "m"
    p = subprocess.run([e2e_util.require_tool("ztrain-compile"), str(src), "-o", str(out),
                        *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=300)
    return p, out


@pytest.mark.parametrize("flags,line", [
    (["--zero-stage=5", "--dp=2"], "--zero-stage=5: expected 0, 1, 2 or 3"),
    (["--dp=0"], "--dp=0: expected a number of ranks >= 1"),
    (["--lr=-1"], "--lr=-1: expected a finite value >= 0"),
    (["--lr=inf"], "--lr=inf: expected a finite value >= 0"),
    (["--beta1=2"], "--beta1=2: expected a value in [0, 1)"),
    (["--eps=0"], "--eps=0: expected a finite value > 0"),
    (["--optimizer=sgd", "--dampening=2"], "--dampening=2: expected a value in [0, 1]"),
    (["--optimizer=sgd", "--nesterov"],
     "--nesterov=true: needs --momentum > 0 and --dampening=0 (PyTorch's rule)"),
    (["--clip-grad-norm=-1"], "--clip-grad-norm=-1: expected a finite norm >= 0 (0: no clipping)"),
    (["--grad-accum-steps=0"], "--grad-accum-steps=0: expected an integer in [1, 2^30]"),
    (["--offload-optimizer=nvme", "--offload-ratio=1.5"],
     "--offload-ratio=1.5: expected a fraction in (0, 1]"),
    (["--zero-stage=3", "--offload-param=cpu", "--offload-param-ratio=-0.5"],
     "--offload-param-ratio=-0.5: expected a fraction in (0, 1]"),
    (["--offload-optimizer=nvme", "--sub-group-size=-1"],
     "--sub-group-size=-1: expected >= 0 (elements; 0: whole states)"),
    (["--host-memory-budget=1GB"],
     "--host-memory-budget is the host half of the plan search's budget; give "
     "--memory-budget (the device's) too"),
    (["--memory-budget=1GB", "--host-memory-budget=lots"],
     "--host-memory-budget must be a size in bytes (1e10, 64GB, 64GiB), got 'lots'"),
    (["--hysteresis=2"],
     "--hysteresis configures fp16's dynamic loss scaling; --precision=fp32 has none"),
    (["--precision=bf16", "--initial-scale-power=16"],
     "--initial-scale-power configures fp16's dynamic loss scaling; --precision=bf16 has none"),
    (["--precision=fp16", "--initial-scale-power=200"],
     "--initial-scale-power=200: expected 0 to 127 (the scale 2^power must be a finite f32)"),
    (["--precision=fp16", "--hysteresis=0"],
     "--hysteresis=0: expected a number of overflows >= 1"),
    (["--precision=fp16", "--min-loss-scale=0"],
     "--min-loss-scale=0: expected a scale > 0 and <= the initial scale 2^initial-scale-power"),
    (["--precision=fp16", "--loss-scale-window=0"],
     "--loss-scale-window=0: expected a number of steps >= 1"),
    (["--reduce-dtype=fp32"],
     "--reduce-dtype=fp32: needs --precision=bf16 or fp16 (with fp32 parameters gradients "
     "are reduced in fp32)"),
    (["--precision=bf16", "--reduce-dtype=fp16"],
     "--reduce-dtype=fp16: expected fp32 or bf16 (the parameters' type) with --precision=bf16"),
])
def test_a_bad_value_is_one_line_naming_the_flag(model, flags, line):
    p, out = compile_(model, *flags)
    assert p.returncode == 1
    assert p.stderr == f"ztrain-compile: error: {line}\n", p.stderr
    assert not out.exists()


@pytest.mark.parametrize("flag,value", [
    ("optimizer", "adamm"), ("precision", "fp8"), ("no-decay", "all"), ("recompute", "yes"),
    ("offload-optimizer", "gpu"), ("offload-param", "disk"), ("offload-activations", "nvme"),
    ("reduce-dtype", "int8"),
])
def test_a_misspelled_choice_is_one_line_from_llvm_cl(model, flag, value):
    # The closed choices are enum flags whose cl::values are their spellings:
    # llvm::cl refuses any other value in its own words, naming the flag.
    p, out = compile_(model, f"--{flag}={value}")
    assert p.returncode == 1
    assert p.stderr == f"ztrain-compile: for the --{flag} option: Cannot find option named '{value}'!\n", \
        p.stderr
    assert not out.exists()


def test_help_lists_the_choices():
    p = subprocess.run([e2e_util.require_tool("ztrain-compile"), "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode == 0
    for choice in ("=adamw", "=selective", "=nvme", "=bf16", "=auto", "=1d"):
        assert choice in p.stdout, choice


@pytest.mark.parametrize("config,line", [
    ({"zero_optimization": {"stage": 7}},
     "--zero-stage=7: expected 0, 1, 2 or 3 (from --config {cfg}: zero_optimization.stage)"),
    ({"zero_optimization": {"sub_group_size": -5}},
     "--config '{cfg}': a key ztrain cannot honour: zero_optimization.sub_group_size "
     "(expected an integer >= 1)"),
    ({"gradient_clipping": -1},
     "--clip-grad-norm=-1: expected a finite norm >= 0 (0: no clipping) "
     "(from --config {cfg}: gradient_clipping)"),
    ({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.5]}}},
     "--beta2=1.5: expected a value in [0, 1) (from --config {cfg}: optimizer.params.betas[1])"),
])
def test_a_bad_config_value_names_its_key(model, config, line):
    d, _ = model
    cfg = d / "ds.json"
    cfg.write_text(json.dumps(config))
    p, out = compile_(model, "--config", str(cfg))
    assert p.returncode == 1
    assert p.stderr == "ztrain-compile: error: " + line.format(cfg=cfg) + "\n", p.stderr
    assert not out.exists()


@pytest.mark.parametrize("flags,warning", [
    (["--offload-ratio=0.5"], "--offload-ratio is the fraction of the optimizer states "
                              "--offload-optimizer places; without it it has no effect"),
    (["--offload-param-ratio=0.5"], "--offload-param-ratio is the fraction of the parameters "
                                    "--offload-param places; without it it has no effect"),
    (["--link-gbps=3"], "--link-gbps is a cost-model setting of the plan search; without "
                        "--memory-budget it has no effect"),
    (["--overlap"], "--overlap overlaps collectives with compute; at --dp=1 there are none"),
])
def test_a_flag_with_no_effect_is_a_warning(model, flags, warning):
    p, out = compile_(model, *flags)
    assert p.returncode == 0, p.stderr
    assert p.stderr == f"ztrain-compile: warning: {warning}\n", p.stderr
    assert out.exists()


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupted_link_leaves_nothing(model, tmp_path, sig):
    """Ctrl-C (or a scheduler's SIGTERM) while the executable is being linked:
    ztrain-compile kills the linker, removes its private directory next to
    -o and dies of the signal; no partial executable, no temporary and no
    linker left running. The linker here is a stand-in shaped like a
    compiler driver running lld: the driver (its pid recorded) starts a
    child that writes a temporary next to the output at once and renames it
    into place 3 s later, and waits for it. Killing the driver alone would
    leave the child to finish the executable in a directory that cannot be
    removed while the temporary is in it."""
    import os
    import signal
    import time
    d, src = model
    pidfile = tmp_path / "linker.pid"
    linker = tmp_path / "slow-linker"
    linker.write_text(
        "#!/bin/sh\n"
        f"echo $$ > {pidfile}\n"
        'while [ "$1" != "-o" ]; do shift; done\n'
        'out="$2"\n'
        '(head -c 65536 /dev/zero > "$out.lld-tmp"; sleep 3; mv "$out.lld-tmp" "$out") &\n'
        "wait\n")
    linker.chmod(0o755)
    out = tmp_path / "out" / "m"
    out.parent.mkdir()
    p = subprocess.Popen([e2e_util.require_tool("ztrain-compile"), str(src), "-o", str(out)],
                         env={**os.environ, "ZTRAIN_LINKER": str(linker)},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    # Until the linker runs and its temporary exists.
    while (not pidfile.exists() or not pidfile.read_text().strip()
           or not list(out.parent.glob("*/model.lld-tmp"))):
        assert time.time() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.05)
    linker_pid = int(pidfile.read_text())
    p.send_signal(getattr(signal, sig))
    p.communicate(timeout=60)
    assert p.returncode == -getattr(signal, sig)
    time.sleep(4)  # past the child's rename, had it lived
    assert list(out.parent.iterdir()) == []  # no executable, no temporaries
    with pytest.raises(ProcessLookupError):  # the linker was killed (and reaped)
        os.kill(linker_pid, 0)


def test_a_key_given_twice_is_refused(model, tmp_path):
    """JSON leaves a repeated key to the reader; most keep one of them
    silently. A config that says a thing twice is refused, naming the key's
    path and where, by the reader both tools share."""
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"optimizer": {"type": "AdamW", "params": {"lr": 1e-3, '
                   '"betas": [0.9, 0.99], "lr": 2e-3}}}')
    (model[0] / "m").unlink(missing_ok=True)  # (an earlier test's output)
    p, out = compile_(model, "--config", str(cfg))
    assert p.returncode == 1
    # The byte just past the second "lr" (the reader both tools share).
    at = cfg.read_text().rindex('"lr"') + 4
    assert p.stderr == (f"ztrain-compile: error: --config '{cfg}': not JSON: "
                        f"duplicate key 'optimizer.params.lr' at byte {at}\n"), p.stderr
    assert not out.exists()

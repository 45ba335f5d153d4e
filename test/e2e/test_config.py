"""DeepSpeed JSON configs (--config, docs/config.md): the file's vocabulary
builds byte for byte the executable its flags build, flags override it, and
whatever ztrain cannot honour is listed in one line; the executable takes
the scheduler, gradient_accumulation_steps and steps_per_print.
"""

import json
import subprocess

import pytest

import e2e_util
from ztrain import models, parity

BATCH = 4


def model(tmp_path):
    src = tmp_path / "m.mlir"
    src.write_text(models.gpt(batch=BATCH, seq=8, vocab=32, layers=1, width=16,
                              heads=2).to_mlir())
    return src


def compile_mlir(src, flags, config=None, tmp_path=None):
    """--emit=mlir of `src` with `flags` (and --config); (rc, stdout, stderr)."""
    cmd = [e2e_util.require_tool("ztrain-compile"), str(src), "--emit=mlir", "-o", "-"]
    cmd += flags
    if config is not None:
        path = tmp_path / "ds_config.json"
        path.write_text(json.dumps(config))
        cmd += ["--config", str(path)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


DS = {
    "train_batch_size": BATCH * 2 * 2,
    "train_micro_batch_size_per_gpu": BATCH,
    "gradient_accumulation_steps": 2,
    "gradient_clipping": 1.0,
    "bf16": {"enabled": True},
    "communication_data_type": "fp32",
    "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5e2,
                          "contiguous_gradients": True,
                          "offload_optimizer": {"device": "none"}},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                              "weight_decay": 0.1}},
    "activation_checkpointing": {"partition_activations": False,
                                 "contiguous_memory_optimization": True,
                                 "number_checkpoints": None},
    "scheduler": {"type": "WarmupCosineLR",
                  "params": {"total_num_steps": 10, "warmup_num_steps": 2,
                             "warmup_type": "linear", "cos_min_ratio": 0.1}},
}
FLAGS = ["--grad-accum-steps=2", "--clip-grad-norm=1", "--precision=bf16",
         "--reduce-dtype=fp32", "--zero-stage=2", "--overlap", "--bucket-bytes=2000",
         "--optimizer=adamw", "--lr=0.0003", "--beta1=0.9", "--beta2=0.95", "--eps=1e-08",
         "--weight-decay=0.1", "--recompute=full"]


def test_config_builds_what_its_flags_build(tmp_path):
    src = model(tmp_path)
    rc, by_file, err = compile_mlir(src, ["--dp=2"], DS, tmp_path)
    assert rc == 0, err
    # The scheduler is the executable's: the compiler says so.
    assert "note: --config: 'scheduler' is the executable's" in err
    rc, by_flags, err2 = compile_mlir(src, ["--dp=2"] + FLAGS)
    assert rc == 0, err2
    assert by_file == by_flags
    # And the file did something (the defaults build another step).
    rc, plain, _ = compile_mlir(src, ["--dp=2"])
    assert plain != by_file


# Hugging Face's ZeRO-2 example config (transformers' DeepSpeed docs), as the
# Trainer users bring it: "auto" wherever the Trainer fills a value in.
HF_ZERO2 = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000,
             "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto",
                                                 "warmup_max_lr": "auto",
                                                 "warmup_num_steps": "auto"}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "allgather_partitions": True, "allgather_bucket_size": 2e8,
                          "overlap_comm": True, "reduce_scatter": True,
                          "reduce_bucket_size": 2e8, "contiguous_gradients": True,
                          "sub_group_size": 1e9, "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto",
                          "stage3_gather_16bit_weights_on_model_save": True},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "steps_per_print": 2000, "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False,
}


def test_hugging_face_auto_values_are_the_flags(tmp_path):
    """"auto" is what the flags and the model give: the Trainer's config
    builds what its explicit keys' flags build, notes the keys that do
    nothing here, and the executable takes it too."""
    src = model(tmp_path)
    rc, by_file, err = compile_mlir(src, ["--dp=2"], HF_ZERO2, tmp_path)
    assert rc == 0, err
    assert ("note: --config: zero_optimization.allgather_bucket_size: not used; ztrain "
            "all-gathers each updated partition whole") in err, err
    flags = ["--zero-stage=2", "--overlap", "--offload-optimizer=cpu",
             f"--bucket-bytes={int(2e8) * 4}"]
    rc, by_flags, err2 = compile_mlir(src, ["--dp=2"] + flags)
    assert rc == 0, err2
    assert by_file == by_flags
    exe = e2e_util.compile_text(src.read_text(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="hf")
    cfg = tmp_path / "ds_config.json"
    p = e2e_util.run([exe, "--steps", 1, "--config", cfg])
    assert p.returncode == 0, p.stderr


# Its ZeRO-3 example (the same page): both offloads on the host, and the
# stage-3 keys ztrain has no use for (stage3_max_reuse_distance among them).
HF_ZERO3 = dict(HF_ZERO2, zero_optimization={
    "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
    "offload_param": {"device": "cpu", "pin_memory": True}, "overlap_comm": True,
    "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto",
    "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
    "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
    "stage3_gather_16bit_weights_on_model_save": True})


def test_hugging_face_zero3_config_is_read_as_written(tmp_path):
    """The ZeRO-3 example builds what its keys' flags build; the keys that
    do nothing here are notes, not errors; the executable takes it too."""
    src = model(tmp_path)
    config = dict(HF_ZERO3, zero_allow_untested_optimizer=True)
    rc, by_file, err = compile_mlir(src, ["--dp=2"], config, tmp_path)
    assert rc == 0, err
    assert ("note: --config: zero_optimization.stage3_max_reuse_distance: not used; "
            "ztrain frees each gathered parameter after the forward pass") in err, err
    # Read as written: no warning (its sub_group_size is DeepSpeed's default).
    assert "warning:" not in err, err
    flags = ["--zero-stage=3", "--overlap", "--offload-optimizer=cpu", "--offload-param=cpu",
             "--sub-group-size=1000000000", f"--max-live-bytes={int(1e9) * 4}"]
    rc, by_flags, err2 = compile_mlir(src, ["--dp=2"] + flags)
    assert rc == 0, err2
    assert by_file == by_flags
    exe = e2e_util.compile_text(src.read_text(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="hf3")
    p = e2e_util.run([exe, "--steps", 1, "--config", tmp_path / "ds_config.json"])
    assert p.returncode == 0, p.stderr


def test_a_config_key_that_does_nothing_here_is_a_note_naming_it(tmp_path):
    """DeepSpeed's ZeRO-Infinity tutorial config sets reduce_bucket_size and
    stage3_max_live_parameters without overlap_comm: they do nothing here,
    which is worth a note naming the key, not a warning about a flag the
    user never typed. The same flags typed are warnings."""
    src = model(tmp_path)
    config = {"zero_optimization": {
        "stage": 3, "contiguous_gradients": True, "stage3_max_live_parameters": 1e9,
        "reduce_bucket_size": 1e7, "sub_group_size": 1e9},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    rc, by_file, err = compile_mlir(src, ["--dp=2"], config, tmp_path)
    assert rc == 0, err
    assert "warning:" not in err, err
    for key, flag in (("zero_optimization.stage3_max_live_parameters", "--max-live-bytes"),
                      ("zero_optimization.reduce_bucket_size", "--bucket-bytes")):
        assert f"note: --config: {key} ({flag}) configures the overlap schedule; without " \
            "--overlap it has no effect" in err, err
    # A swap buffer count for states offloaded to host memory: nothing to size.
    config = {"zero_optimization": {"stage": 2, "offload_optimizer": {
        "device": "cpu", "pin_memory": True, "buffer_count": 4}}}
    rc, _, err = compile_mlir(src, ["--dp=2"], config, tmp_path)
    assert rc == 0, err
    assert "warning:" not in err, err
    assert "note: --config: zero_optimization.offload_optimizer.buffer_count " \
        "(--offload-buffer-count) sizes the swap buffers of nvme offload" in err, err
    rc, _, err = compile_mlir(src, ["--dp=2", "--zero-stage=3", "--max-live-bytes=4000000000",
                                    "--bucket-bytes=40000000"])
    assert rc == 0, err
    assert "warning: --max-live-bytes configures the overlap schedule" in err and \
        "warning: --bucket-bytes configures the overlap schedule" in err, err


def test_flags_override_the_file(tmp_path):
    src = model(tmp_path)
    rc, mixed, err = compile_mlir(src, ["--dp=2", "--zero-stage=1", "--lr=0.01"], DS, tmp_path)
    assert rc == 0, err
    flags = [f for f in FLAGS if not f.startswith(("--zero-stage", "--lr"))]
    rc, want, err = compile_mlir(src, ["--dp=2", "--zero-stage=1", "--lr=0.01"] + flags)
    assert rc == 0, err
    assert mixed == want


def one_error(err):
    lines = [l for l in err.splitlines() if "error" in l]
    assert len(lines) == 1, err
    return lines[0]


def test_what_ztrain_cannot_honour_is_one_line(tmp_path):
    src = model(tmp_path)
    bad = {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "ratio": 1.5},
                                 "zero_quantized_weights": True, "cpu_offload": True,
                                 "offload_optimizer": {"device": "cpu"}},
           "aio": {"use_gds": True, "queue_depth": 0},
           "fp16": {"enabled": True, "loss_scale": 128},
           "optimizer": {"type": "Lamb"},
           "activation_checkpointing": {"partition_activations": True,
                                        "number_checkpoints": 4},
           "elasticity": {"enabled": True}}
    rc, _, err = compile_mlir(src, [], bad, tmp_path)
    assert rc != 0
    line = one_error(err)
    for key in ("zero_optimization.offload_param.ratio (expected a number in (0, 1]",
                "zero_optimization.zero_quantized_weights (ZeRO++'s quantized collectives",
                "zero_optimization.cpu_offload (the deprecated spelling of "
                "offload_optimizer.device; give one of the two)",
                "aio.use_gds (GPUDirect Storage is not built",
                "aio.queue_depth (expected an integer >= 1)",
                "fp16.loss_scale=128",
                "optimizer.type=Lamb",
                "elasticity (unknown)",
                "activation_checkpointing.partition_activations (partitions activations",
                "activation_checkpointing.number_checkpoints"):
        assert key in line, (key, line)


def test_deepspeeds_monitoring_sections_are_notes_and_misspellings_name_the_key(tmp_path):
    """A real ds_config.json has monitoring and logging sections; each is a
    note saying what ztrain records instead, for both tools (issue 49: they
    were errors until pruned). A misspelt key names the one meant."""
    src = model(tmp_path)
    monitors = {"tensorboard": {"enabled": True, "output_path": "logs/"},
                "wandb": {"enabled": True, "project": "p"},
                "csv_monitor": {"enabled": False},
                "comms_logger": {"enabled": True, "verbose": False},
                "memory_breakdown": False,
                "flops_profiler": {"enabled": False}}
    rc, _, err = compile_mlir(src, [], dict(monitors, train_micro_batch_size_per_gpu=BATCH),
                              tmp_path)
    assert rc == 0, err
    notes = [l for l in err.splitlines() if "note:" in l]
    for key in ("tensorboard", "wandb", "comms_logger"):
        assert any(f"{key}: not written by ztrain; the executable's --report" in l
                   for l in notes), (key, err)
    # Disabled sections say nothing.
    assert not any("csv_monitor" in l or "memory_breakdown" in l for l in notes), err
    exe = e2e_util.compile_text(models.mlp(batch=4, in_features=8, hidden=[8],
                                           classes=3).to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw"), name="m")
    cfg = tmp_path / "ds_run.json"
    cfg.write_text(json.dumps(monitors))
    p = e2e_util.run([exe, "--steps", 1, "--config", cfg])
    assert p.returncode == 0, p.stderr
    rc, _, err = compile_mlir(src, [], {"zero_optimisation": {"stage": 2},
                                        "zero_optimization": {"reduce_bucket_sise": 5e2}},
                              tmp_path)
    assert rc != 0
    line = one_error(err)
    assert "zero_optimisation (unknown; did you mean zero_optimization?)" in line, line
    assert "zero_optimization.reduce_bucket_sise (unknown; did you mean " \
        "zero_optimization.reduce_bucket_size?)" in line, line
    cfg.write_text(json.dumps({"shceduler": {}}))
    p = e2e_util.run([exe, "--steps", 1, "--config", cfg])
    assert p.returncode == 2 and "shceduler (unknown; did you mean scheduler?)" in p.stderr, \
        p.stderr


def test_batch_sizes_are_checked_against_the_model(tmp_path):
    src = model(tmp_path)
    rc, _, err = compile_mlir(src, [], {"train_micro_batch_size_per_gpu": 8}, tmp_path)
    assert rc != 0
    assert "train_micro_batch_size_per_gpu is 8 but the model's inputs have batch 4" in one_error(err)
    rc, _, err = compile_mlir(src, ["--dp=2"], {"train_batch_size": 16}, tmp_path)
    assert rc != 0
    assert ("train_batch_size is 16 but micro-batch 4 x gradient_accumulation_steps 1 x dp 2 = 8"
            in one_error(err))
    rc, _, err = compile_mlir(src, ["--dp=2"], {"train_batch_size": 8}, tmp_path)
    assert rc == 0, err


def test_executable_takes_the_scheduler(tmp_path):
    spec = models.mlp(batch=4, in_features=8, hidden=[8], classes=3)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw", lr=1e-2), name="m")
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"scheduler": DS["scheduler"], "steps_per_print": 5,
                               "zero_optimization": {"stage": 0}}))
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    p = parity.run_exe(exe, 10, report=a, extra=["--config", str(cfg)], log_every=None)
    # steps_per_print 5: progress lines at 5 and 10.
    assert [l.split()[1] for l in p.stdout.splitlines() if l.startswith("step")] == ["5/10",
                                                                                     "10/10"]
    parity.run_exe(exe, 10, report=b, extra=["--lr-schedule=cosine", "--warmup-steps=2",
                                             "--lr-decay-steps=10", "--min-lr=0.001"])
    lr_a = [s["lr"] for s in parity.read_report(a)["steps"]]
    lr_b = [s["lr"] for s in parity.read_report(b)["steps"]]
    # cos_min_ratio 0.1 of the compiled 1e-2 is --min-lr 1e-3: the same
    # formula, equal to rounding (0.1 * 1e-2 is not exactly 1e-3 in binary).
    assert lr_a == pytest.approx(lr_b, rel=1e-12, abs=0)
    assert lr_a[-1] == pytest.approx(1e-3, rel=1e-12)
    # The report names the base lr (the compiled one: no --lr was given)
    # and the floor the schedule applies (cos_min_ratio x lr for the config).
    sa = parity.read_report(a)["lr_schedule"]
    sb = parity.read_report(b)["lr_schedule"]
    assert (sa["kind"], sa["lr"], sa["min_lr"]) == ("cosine", 1e-2, 0.1 * 1e-2), sa
    assert (sb["lr"], sb["min_lr"]) == (1e-2, 1e-3), sb


def test_executable_refuses_what_it_cannot_honour(tmp_path):
    spec = models.mlp(batch=4, in_features=8, hidden=[8], classes=3)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="m")
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"scheduler": {"type": "WarmupLR",
                                             "params": {"warmup_num_steps": 10,
                                                        "warmup_max_lr": 1e-3,
                                                        "warmup_type": "exp"}},
                               "elasticity": {}}))
    p = e2e_util.run([exe, "--steps", 1, "--config", cfg])
    assert p.returncode == 2
    line = one_error(p.stderr)
    assert "elasticity (unknown)" in line and \
        "scheduler.params.warmup_type=exp (\"linear\" or \"log\")" in line, line


def test_deepspeeds_default_log_warmup_runs(tmp_path):
    """A WarmupLR without warmup_type warms up as DeepSpeed's default, "log"
    (issue 49: the compiler accepted the config and the executable refused
    it): the report's learning rates are lr ln(t) / ln(W)."""
    import math
    spec = models.mlp(batch=4, in_features=8, hidden=[8], classes=3)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="m")
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"scheduler": {"type": "WarmupLR",
                                             "params": {"warmup_num_steps": 4,
                                                        "warmup_max_lr": 1e-3}}}))
    report = tmp_path / "r.json"
    p = e2e_util.run([exe, "--steps", 6, "--config", cfg, "--report", report,
                      "--log-every", 0])
    assert p.returncode == 0, p.stderr
    r = parity.read_report(str(report))
    assert r["lr_schedule"]["warmup_type"] == "log"
    got = [s["lr"] for s in r["steps"]]
    want = [1e-3 * math.log(t) / math.log(4) if t <= 4 else 1e-3 for t in range(1, 7)]
    # The same double formula on both sides; log may differ in the last
    # bit between libm and Python: 1e-15 relative.
    for t, (g, w) in enumerate(zip(got, want), 1):
        assert math.isclose(g, w, rel_tol=1e-15, abs_tol=1e-18), (t, g, w)


def test_executable_takes_the_optimizer_params(tmp_path):
    """The executable's --config applies optimizer.params as its run-time
    hyper-parameters (bitwise the same flags), flags override them, and the
    scheduler's warmup_max_lr is the lr where both give one."""
    spec = models.mlp(batch=4, in_features=8, hidden=[8], classes=3)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw", lr=1e-2), name="m")
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"optimizer": {"type": "AdamW", "params": {
        "lr": 3e-3, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.05}}}))
    runs = {}
    for name, extra in [("config", ["--config", str(cfg)]),
                        ("flags", ["--lr", "3e-3", "--beta1", "0.8", "--beta2", "0.95",
                                   "--eps", "1e-6", "--weight-decay", "0.05"]),
                        ("override", ["--config", str(cfg), "--beta1", "0.5"]),
                        ("flags2", ["--lr", "3e-3", "--beta1", "0.5", "--beta2", "0.95",
                                    "--eps", "1e-6", "--weight-decay", "0.05"])]:
        out = tmp_path / f"{name}.safetensors"
        parity.run_exe(exe, 3, save=out, report=tmp_path / f"{name}.json", extra=extra)
        runs[name] = out.read_bytes()
    assert runs["config"] == runs["flags"]
    assert runs["override"] == runs["flags2"] != runs["config"]
    assert parity.read_report(tmp_path / "config.json")["hyperparameters"] == {
        "beta1": 0.8, "beta2": 0.95, "eps": 1e-6, "weight-decay": 0.05}


@pytest.mark.parametrize("config,message", [
    ({"optimizer": {"type": "SGD", "params": {"lr": 1}}},
     "optimizer.type is sgd but this executable was compiled for adamw"),
    ({"optimizer": {"type": "Adam", "params": {"adam_w_mode": False}}},
     "optimizer.type is adam but this executable was compiled for adamw"),
    ({"gradient_clipping": 5.0},
     "gradient_clipping is 5 but this executable was compiled with no clipping"),
    ({"bf16": {"enabled": True}},
     "it asks for bf16 but this executable was compiled with --precision=fp32"),
    ({"train_micro_batch_size_per_gpu": 99},
     "train_micro_batch_size_per_gpu is 99 but this model's micro-batch (its inputs' "
     "batch dimension) is 4"),
])
def test_executable_refuses_a_config_of_another_build(config, message, tmp_path):
    spec = models.mlp(batch=4, in_features=8, hidden=[8], classes=3)
    exe = e2e_util.compile_text(spec.to_mlir(), str(tmp_path), parity.OptimizerConfig("adamw"),
                                name="m")
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(config))
    p = e2e_util.run([exe, "--steps", 1, "--config", cfg])
    assert p.returncode == 1
    line = one_error(p.stderr)
    assert line.startswith(f"ztrain: error: --config '{cfg}': {message}"), line
    if "compiled" in message:
        assert line.endswith(f" (recompile with ztrain-compile --config {cfg})"), line


def test_cpu_checkpointing_is_pa_cpu(tmp_path):
    """DeepSpeed's activation_checkpointing.cpu_checkpointing is ztrain's
    --offload-activations=cpu (with the full recompute the section means).
    Two layers: with one, the recomputation starts from the inputs and
    there is no checkpoint to move (one located error says so)."""
    src = tmp_path / "m2.mlir"
    src.write_text(models.gpt(batch=BATCH, seq=8, vocab=32, layers=2, width=16,
                              heads=2).to_mlir())
    ds = {"train_micro_batch_size_per_gpu": BATCH,
          "activation_checkpointing": {"cpu_checkpointing": True}}
    rc, by_file, err = compile_mlir(src, [], ds, tmp_path)
    assert rc == 0, err
    rc, by_flags, err2 = compile_mlir(src, ["--recompute=full", "--offload-activations=cpu"])
    assert rc == 0, err2
    assert by_file == by_flags
    assert "ztrt_copy_to_host_start" in by_file

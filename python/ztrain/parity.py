"""Parity harness: train a model with ztrain and with PyTorch, compare.

Both start from the same weights (an init.safetensors written here with
numpy) and see the same batches: the data file holds one tensor per input
name with shape [N, ...]; step t (1-based), row b uses sample
((t-1)*B + b) mod N -- the executable's dataset semantics, reproduced in
`batch_for_step`.

    from ztrain import models, parity
    r = parity.run_parity(models.mlp(16, 20, [32], 5), steps=20,
                          optimizer=parity.OptimizerConfig("adam", lr=1e-3))
    print(r.table())

CLI: python -m ztrain.parity --model mlp|gpt|llama [--steps N] [--optimizer ...]
Tools come from $ZTRAIN_BIN_DIR, else <repo>/build/bin.
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from . import models, safetensors

__all__ = ["ToolError", "OptimizerConfig", "ParityResult", "bin_dir", "tool",
           "make_init", "make_data", "batch_for_step", "compile_model", "run_exe",
           "read_report", "torch_train", "run_parity", "rel_err", "zero_gradient_params",
           "main"]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ToolError(RuntimeError):
    """A ztrain tool is missing or failed."""


# -- tools -----------------------------------------------------------------------------

def bin_dir():
    return os.environ.get("ZTRAIN_BIN_DIR") or os.path.join(REPO, "build", "bin")


def tool(name):
    """Absolute path of a ztrain tool; ToolError when it is not built."""
    path = os.path.join(bin_dir(), name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ToolError(f"{name} not found in {bin_dir()} (build the project, or set "
                        "ZTRAIN_BIN_DIR to the folder holding ztrain-opt/ztrain-compile)")
    return path


class OptimizerConfig:
    """Optimizer hyper-parameters, shared by ztrain-compile and torch.optim."""

    def __init__(self, kind="adamw", lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                 weight_decay=0.0, momentum=0.0, dampening=0.0, nesterov=False,
                 clip_grad_norm=0.0, no_decay="1d"):
        """clip_grad_norm > 0: ztrain-compile --clip-grad-norm, and
        torch.nn.utils.clip_grad_norm_ before each torch step. no_decay:
        ztrain-compile --no-decay (1d: parameters of rank < 2 do not decay,
        a second torch param group with weight_decay 0; none: one group)."""
        if no_decay not in ("1d", "none"):
            raise ValueError(f"unknown no_decay {no_decay!r}")
        self.no_decay = no_decay
        if kind not in ("sgd", "adam", "adamw"):
            raise ValueError(f"unknown optimizer {kind!r}")
        self.clip_grad_norm = clip_grad_norm
        self.kind = kind
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.weight_decay = weight_decay
        self.momentum, self.dampening, self.nesterov = momentum, dampening, nesterov

    def compile_flags(self):
        f = [f"--optimizer={self.kind}", f"--lr={self.lr!r}",
             f"--weight-decay={self.weight_decay!r}"]
        if self.no_decay != "1d":
            f.append(f"--no-decay={self.no_decay}")
        if self.kind == "sgd":
            f += [f"--momentum={self.momentum!r}", f"--dampening={self.dampening!r}"]
            if self.nesterov:
                f.append("--nesterov")
        else:
            f += [f"--beta1={self.beta1!r}", f"--beta2={self.beta2!r}", f"--eps={self.eps!r}"]
        if self.clip_grad_norm:
            f.append(f"--clip-grad-norm={self.clip_grad_norm!r}")
        return f

    def torch_kwargs(self):
        return dict(lr=self.lr, beta1=self.beta1, beta2=self.beta2, eps=self.eps,
                    weight_decay=self.weight_decay, momentum=self.momentum,
                    dampening=self.dampening, nesterov=self.nesterov,
                    no_decay=self.no_decay)

    def __repr__(self):
        return "OptimizerConfig(" + " ".join(self.compile_flags()) + ")"


def _run(cmd, what, timeout=600):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    if p.returncode != 0:
        raise ToolError(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n"
                        f"{p.stderr.strip() or p.stdout.strip()}")
    return p


def _cache_key(mlir_path, flags):
    h = hashlib.sha256()
    with open(mlir_path, "rb") as fh:
        h.update(fh.read())
    for f in flags:
        h.update(b"\0" + f.encode())
    return h.hexdigest()[:32]


def compile_model(mlir_path, out_path, optimizer=None, extra=()):
    """ztrain-compile IN -o OUT with the optimizer's flags; returns OUT.

    With $ZTRAIN_COMPILE_CACHE set, executables are kept in that folder,
    keyed by the MLIR text and the flags: a hit is copied to OUT without
    compiling, a miss is compiled and stored. A machine without ztrain-compile
    (a GPU machine without LLVM/MLIR, docs/cuda.md#gpu-kit) then runs the
    end-to-end tests from executables compiled elsewhere.
    $ZTRAIN_COMPILE_RUNTIME_DIR adds --runtime-dir to what is compiled
    without entering the key (a kit's executables link the runtime that
    will run them). $ZTRAIN_VERIFY_EACH adds --verify-each (the end-to-end
    tests set it: the IR is verified after every pass, not only the last)."""
    flags = (optimizer.compile_flags() if optimizer is not None else []) + list(extra)
    cache = os.environ.get("ZTRAIN_COMPILE_CACHE")
    if cache:
        cached = os.path.join(cache, _cache_key(mlir_path, flags))
        if os.path.exists(cached):
            shutil.copyfile(cached, out_path)
            os.chmod(out_path, 0o755)
            return out_path
    runtime = os.environ.get("ZTRAIN_COMPILE_RUNTIME_DIR")
    extra_runtime = ["--runtime-dir", runtime] if runtime else []
    if os.environ.get("ZTRAIN_VERIFY_EACH"):
        extra_runtime.append("--verify-each")
    _run([tool("ztrain-compile"), mlir_path, "-o", out_path] + flags + extra_runtime,
         "ztrain-compile")
    if cache:
        os.makedirs(cache, exist_ok=True)
        shutil.copyfile(out_path, cached + ".tmp")
        os.replace(cached + ".tmp", cached)
    return out_path


def run_exe(exe, steps=1, init=None, data=None, save=None, report=None,
            log_every=0, seed=None, threads=None, extra=(), check=True):
    """Run a compiled executable; returns the CompletedProcess."""
    cmd = [exe, "--steps", str(steps)]
    # log_every 0 / None: no progress lines. Leaving the flag out (stdout is
    # captured anyway) works whether or not the executable accepts 0.
    if log_every:
        cmd += ["--log-every", str(log_every)]
    for flag, val in (("--init", init), ("--data", data), ("--save", save),
                      ("--report", report), ("--seed", seed), ("--threads", threads)):
        if val is not None:
            cmd += [flag, str(val)]
    cmd += list(extra)
    if check:
        return _run(cmd, os.path.basename(exe))
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_report(path):
    with open(path) as fh:
        return json.load(fh)


def report_losses(report):
    steps = sorted(report["steps"], key=lambda s: s["step"])
    return np.array([s["loss"] for s in steps], dtype=np.float64)


# -- inputs --------------------------------------------------------------------------------

def make_init(spec, seed=0):
    """Weights drawn with numpy from each param's init kind (not the runtime's RNG)."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in spec.params:
        if p.init == "zeros":
            a = np.zeros(p.shape)
        elif p.init == "ones":
            a = np.ones(p.shape)
        elif p.init == "normal":
            a = rng.normal(0.0, p.scale, p.shape)
        else:
            a = rng.uniform(-p.scale, p.scale, p.shape)
        out[p.name] = np.asarray(a, dtype=np.float32)
    return out


def make_data(spec, samples=None, seed=1):
    """A synthetic data set: N samples per input (N = 4 batches by default)."""
    rng = np.random.default_rng(seed)
    n = samples or 4 * spec.batch
    c = spec.config
    out = {}
    if spec.kind == "mlp":
        out[c.get("input_name", "x")] = rng.standard_normal(
            (n, c["in_features"])).astype(np.float32)
        out[c.get("label_name", "y")] = rng.integers(0, c["classes"], n).astype(np.int32)
    elif spec.kind in ("gpt", "llama"):
        # Next-token targets of a random stream, as a language model sees them.
        stream = rng.integers(0, c["vocab"], (n, c["seq"] + 1)).astype(np.int32)
        out["tokens"] = stream[:, :-1].copy()
        out["targets"] = stream[:, 1:].copy()
    else:
        raise ValueError(f"unknown model kind {spec.kind!r}")
    return out


def batch_for_step(data, step, batch):
    """Rows of each input for 1-based `step`: sample ((step-1)*B + b) mod N."""
    out = {}
    for name, arr in data.items():
        idx = ((step - 1) * batch + np.arange(batch)) % arr.shape[0]
        out[name] = arr[idx]
    return out


# -- torch side ---------------------------------------------------------------------------

PRECISIONS = ("fp32", "bf16", "fp16")


class LossScaling:
    """DeepSpeed's dynamic loss scaler (DynamicLossScaler.update_scale,
    consecutive_hysteresis off), as ztrain-compile --precision=fp16 runs it
    (docs/mixed-precision.md): the reference side of the fp16 comparisons."""

    def __init__(self, init=65536.0, window=1000, hysteresis=2, min_scale=1.0):
        self.scale, self.window, self.min_scale = init, window, min_scale
        self.delayed_shift = self.hysteresis = hysteresis
        self.iter, self.last_overflow_iter = 0, -1
        self.used, self.skipped = [], []

    def update(self, overflow):
        self.used.append(self.scale)
        self.skipped.append(bool(overflow))
        if overflow:
            if self.delayed_shift == 1 or self.hysteresis == 1:
                if self.scale == self.min_scale:
                    raise FloatingPointError("overflow at the minimum loss scale")
                self.scale = max(self.scale / 2.0, self.min_scale)
            else:
                self.hysteresis -= 1
            self.last_overflow_iter = self.iter
        elif (self.iter - self.last_overflow_iter) % self.window == 0:
            self.hysteresis = self.delayed_shift
            self.scale *= 2.0
        self.iter += 1


def _f16_emulation(keep_f32):
    """A TorchFunctionMode under which every torch function computes in f32
    and rounds each floating-point result to f16 (and, through an autograd
    function, each gradient flowing back into it): ztrain's f16 kernel
    semantics (f32 arithmetic on f16 inputs, one rounding per stored value)
    on a CPU PyTorch without f16 GEMM (Debian's 1.13: "addmm_impl_cpu_" not
    implemented for 'Half'). Functions in `keep_f32` (the loss) keep f32."""
    import torch
    from torch.overrides import TorchFunctionMode

    class RoundF16(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.half().float()

        @staticmethod
        def backward(ctx, g):
            return g.half().float()

    def round_out(t):
        if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
            return RoundF16.apply(t) if t.requires_grad else t.half().float()
        if isinstance(t, (tuple, list)):
            return type(t)(round_out(x) for x in t)
        return t

    class Mode(TorchFunctionMode):
        # > 0 inside a module that ztrain computes as one kernel (fuse()).
        inside = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out if func in keep_f32 or self.inside else round_out(out)

        def fuse(self, module):
            """Round only the output of `module` (and the gradient into it):
            ztrain computes it as one kernel in f32 (rms_norm with its
            weight), so its intermediates, forward and backward, are never
            f16. Rounding them would overflow where ztrain does not (the
            scaled gradient through rsqrt of a small variance)."""
            def pre(mod, inputs):
                self.inside += 1

            def post(mod, inputs, output):
                self.inside -= 1
                return round_out(output)

            module.register_forward_pre_hook(pre)
            module.register_forward_hook(post)

    return Mode()


def lr_schedule(lr, kind="constant", warmup=0, min_lr=0.0, decay_steps=None,
                warmup_type="linear"):
    """The executable's --lr-schedule (runtime/step/LrSchedule.h) in Python:
    a function of the optimizer step t (1-based) giving its learning rate."""
    def at(t):
        if warmup > 0 and t <= warmup:
            if warmup_type == "log":    # DeepSpeed's WarmupLR default
                return lr * math.log(t) / math.log(max(2, warmup))
            return lr * t / warmup
        if kind == "constant":
            return lr
        p = 1.0
        if decay_steps is not None and decay_steps > warmup:
            p = min(max((t - warmup) / (decay_steps - warmup), 0.0), 1.0)
        shape = 0.5 * (1.0 + math.cos(math.pi * p)) if kind == "cosine" else 1.0 - p
        return min_lr + (lr - min_lr) * shape
    return at


def torch_train(spec, init, data, steps, optimizer, float64=False, precision="fp32",
                loss_scaling=None, lr_at=None):
    """The same steps in PyTorch. Returns (losses [steps], final state {name: array}).

    float64=True trains in double precision (a reference that shows how far
    float32 itself, in torch or in ztrain, strays on ill-conditioned tensors).

    precision="bf16" / "fp16" is ztrain's mixed-precision policy
    (`ztrain-compile --precision`, docs/mixed-precision.md) written in plain
    PyTorch: the module and its float inputs in 16 bits, cross-entropy on the
    logits widened to f32 (ztrain's loss is f32), f32 master weights that the
    optimizer steps with the 16-bit gradients widened, and the parameters set
    to the masters rounded after each step. Weights come back as float32
    arrays of the 16-bit values.

    fp16 adds dynamic loss scaling (`loss_scaling`, a LossScaling; default
    DeepSpeed's 2^16 / 1000 / 2 / 1): the backward pass starts from the scale,
    an overflowed step is skipped, the gradients are divided by the scale.
    Where torch has no f16 kernels on the CPU, the module runs in f32 holding
    f16 values under _f16_emulation. Pass a LossScaling to read its .used and
    .skipped per step afterwards.

    lr_at: the learning rate of each optimizer step (lr_schedule), set on the
    optimizer before it steps (a skipped step does not count).
    """
    import torch
    from . import torch_ref

    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} (expected one of {PRECISIONS})")
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    torch.manual_seed(0)
    model = torch_ref.from_spec(spec)
    torch_ref.load_state(model, init)
    if float64:
        model = model.double()
    masters = None
    emulate = precision == "fp16"
    scaling = (loss_scaling or LossScaling()) if precision == "fp16" else None
    if low is not None:
        masters = [p.detach().clone() for p in model.parameters()]  # the f32 init
        with torch.no_grad():
            if emulate:   # f32 storage of f16 values
                for p in model.parameters():
                    p.copy_(p.half().float())
            else:
                model = model.to(low)
    opt = torch_ref.make_optimizer(masters if masters is not None else model.parameters(),
                                   optimizer.kind, **optimizer.torch_kwargs())

    def tensor(v):
        t = torch.from_numpy(np.ascontiguousarray(v))
        if float64 and t.is_floating_point():
            return t.double()
        if emulate and t.is_floating_point():
            return t.half().float()
        if low is not None and t.is_floating_point():
            return t.to(low)
        return t

    F = torch.nn.functional
    cross_entropy = F.cross_entropy
    if low is not None:
        # ztrain's cross-entropy widens 16-bit logits and returns an f32 loss.
        F.cross_entropy = lambda x, *a, **k: cross_entropy(x.float(), *a, **k)
    # F.cross_entropy dispatches to the mode under its module-level name,
    # which is the patched one: keep both f32.
    mode = _f16_emulation({cross_entropy, F.cross_entropy}) if emulate else None
    if mode is not None:
        for m in model.modules():
            if type(m).__name__ == "LlamaRMSNorm":
                mode.fuse(m)
    try:
        losses = []
        applied = 0
        for t in range(1, steps + 1):
            b = {k: tensor(v) for k, v in batch_for_step(data, t, spec.batch).items()}
            opt.zero_grad(set_to_none=True)
            model.zero_grad(set_to_none=True)
            if hasattr(model, "set_run"):
                model.set_run(seed=0, step=t)   # run_exe's runs use the default seed 0
            if mode is not None:
                with mode:
                    loss = model(*model.inputs(b))
            else:
                loss = model(*model.inputs(b))
            scale = scaling.scale if scaling is not None else 1.0
            (loss * scale if scaling is not None else loss).backward()
            skip = False
            if masters is not None:
                grads = [None if p.grad is None else
                         (p.grad.half().float() if emulate else p.grad.float())
                         for p in model.parameters()]
                if scaling is not None:
                    skip = any(g is not None and not torch.isfinite(g).all() for g in grads)
                    scaling.update(skip)
                for m, g in zip(masters, grads):
                    m.grad = None if g is None else g * (1.0 / scale)
            if optimizer.clip_grad_norm and not skip:
                torch.nn.utils.clip_grad_norm_(
                    masters if masters is not None else list(model.parameters()),
                    optimizer.clip_grad_norm)
            if not skip:
                if lr_at is not None:
                    applied += 1
                    for group in opt.param_groups:
                        group["lr"] = lr_at(applied)
                opt.step()
            if masters is not None and not skip:
                with torch.no_grad():
                    for m, p in zip(masters, model.parameters()):
                        p.copy_(m.half().float() if emulate else m.to(low))
            losses.append(float(loss.detach()))
    finally:
        F.cross_entropy = cross_entropy
    if low is not None:
        return np.array(losses), {k: v.detach().float().cpu().numpy().copy()
                                  for k, v in model.state_dict().items()}
    return np.array(losses), torch_ref.state_numpy(model)


# -- comparison ---------------------------------------------------------------------------

def zero_gradient_params(spec):
    """Parameters whose gradient is exactly zero analytically.

    In attention, the key bias b_k adds q.b_k to every score of a softmax row,
    and softmax is shift-invariant, so d loss / d b_k = 0. Both sides compute
    it as rounding noise, and Adam turns noise into updates with the noise's
    sign: these tensors' trajectories are not comparable between frameworks.
    """
    if spec.kind != "gpt":
        return set()
    return {f"h.{i}.attn.k_proj.bias" for i in range(spec.config["layers"])}


def rel_err(a, b):
    """||a - b|| / ||b|| (norm-wise; ||a - b|| when b is all zeros)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    num = np.linalg.norm((a - b).ravel())
    den = np.linalg.norm(b.ravel())
    return float(num / den) if den > 0 else float(num)


class ParityResult:
    def __init__(self, spec, optimizer, ztrain_losses, torch_losses, ztrain_weights,
                 torch_weights, report, workdir, ztrain_seconds, torch_seconds,
                 ref64_losses=None, ref64_weights=None):
        self.spec = spec
        self.optimizer = optimizer
        self.ztrain_losses = ztrain_losses
        self.torch_losses = torch_losses
        self.ztrain_weights = ztrain_weights
        self.torch_weights = torch_weights
        self.report = report
        self.workdir = workdir
        self.ztrain_seconds = ztrain_seconds
        self.torch_seconds = torch_seconds
        self.ref64_losses = ref64_losses      # torch float64, when requested
        self.ref64_weights = ref64_weights

    def float64_errors(self):
        """{name: (ztrain vs float64, torch float32 vs float64)} norm-wise, or None."""
        if self.ref64_weights is None:
            return None
        return {k: (rel_err(self.ztrain_weights[k], v), rel_err(self.torch_weights[k], v))
                for k, v in self.ref64_weights.items()}

    def loss_rel_errors(self):
        """Per step |ztrain - torch| / |torch|."""
        z, t = self.ztrain_losses, self.torch_losses
        return np.abs(z - t) / np.maximum(np.abs(t), np.finfo(np.float32).tiny)

    def weight_rel_errors(self):
        """{name: ||w_ztrain - w_torch|| / ||w_torch||} over the torch state dict."""
        missing = sorted(set(self.torch_weights) - set(self.ztrain_weights))
        if missing:
            raise KeyError(f"--save file lacks parameters {missing}")
        return {k: rel_err(self.ztrain_weights[k], v) for k, v in self.torch_weights.items()}

    def compared_weight_errors(self):
        """weight_rel_errors() without the zero_gradient_params (noise only)."""
        skip = zero_gradient_params(self.spec)
        return {k: e for k, e in self.weight_rel_errors().items() if k not in skip}

    def max_errors(self):
        """(max loss rel err, max weight rel err over compared tensors)."""
        w = self.compared_weight_errors()
        return float(self.loss_rel_errors().max()), max(w.values()) if w else 0.0

    def table(self):
        skip = zero_gradient_params(self.spec)
        lines = [f"{self.spec!r}  {self.optimizer!r}",
                 f"{'step':>5} {'ztrain loss':>14} {'torch loss':>14} {'rel err':>10}"]
        for i, e in enumerate(self.loss_rel_errors()):
            lines.append(f"{i + 1:>5} {self.ztrain_losses[i]:>14.8f} "
                         f"{self.torch_losses[i]:>14.8f} {e:>10.2e}")
        lines.append("")
        f64 = self.float64_errors()
        head = f"{'final weights':<40} {'rel err':>10}"
        if f64:
            head += f" {'ztrain~f64':>11} {'torch~f64':>10}"
        lines.append(head)
        for k, e in self.weight_rel_errors().items():
            note = "  (gradient is 0 analytically: noise, not compared)" if k in skip else ""
            extra = f" {f64[k][0]:>11.2e} {f64[k][1]:>10.2e}" if f64 else ""
            lines.append(f"{k:<40} {e:>10.2e}{extra}{note}")
        lines.append("")
        ml, mw = self.max_errors()
        lines.append(f"max loss rel err {ml:.2e}, max weight rel err {mw:.2e}; ztrain run "
                     f"{self.ztrain_seconds:.2f} s, torch {self.torch_seconds:.2f} s")
        return "\n".join(lines)


def run_parity(spec, steps=20, optimizer=None, init=None, data=None, workdir=None,
               init_seed=0, data_seed=1, samples=None, log_every=0, threads=None,
               exe=None, float64_reference=False, precision="fp32", extra_flags=(),
               loss_scaling=None, run_flags=(), lr_at=None):
    """Compile and run `spec` with ztrain and train it in torch; compare.

    init / data: {name: array} (default: make_init / make_data). workdir keeps
    model.mlir, the executable, init/data/final .safetensors and report.json
    (a fresh temporary folder, removed afterwards, when None). exe: a compiled
    executable to reuse (must match `optimizer`). float64_reference: also
    train in torch float64 (ParityResult.float64_errors()). precision: ztrain's
    --precision, the torch side trained in the same policy (torch_train).
    extra_flags: more ztrain-compile flags (--reduce-dtype=fp32).
    loss_scaling: the torch side's LossScaling with fp16 (default: DeepSpeed's
    defaults, as ztrain-compile's); the result keeps it as .torch_scaling.
    run_flags: more executable flags (--lr-schedule=cosine); lr_at: the
    torch side's learning rate per optimizer step to match them.
    """
    if precision == "fp16" and loss_scaling is None:
        loss_scaling = LossScaling()
    optimizer = optimizer or OptimizerConfig("adam")
    init = init if init is not None else make_init(spec, init_seed)
    data = data if data is not None else make_data(spec, samples, data_seed)
    cleanup = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="ztrain-parity-")
    os.makedirs(workdir, exist_ok=True)
    try:
        p = lambda n: os.path.join(workdir, n)
        if exe is None:
            with open(p("model.mlir"), "w") as fh:
                fh.write(spec.to_mlir())
            flags = list(extra_flags)
            if precision != "fp32":
                flags.append(f"--precision={precision}")
            exe = compile_model(p("model.mlir"), p("model"), optimizer, extra=flags)
        safetensors.save(p("init.safetensors"), init)
        safetensors.save(p("data.safetensors"), data)
        for n in ("final.safetensors", "report.json"):
            if os.path.exists(p(n)):
                os.unlink(p(n))
        t0 = time.perf_counter()
        run_exe(exe, steps, init=p("init.safetensors"), data=p("data.safetensors"),
                save=p("final.safetensors"), report=p("report.json"),
                log_every=log_every, threads=threads, extra=run_flags)
        zt = time.perf_counter() - t0
        report = read_report(p("report.json"))
        z_losses = report_losses(report)
        if len(z_losses) != steps:
            raise ToolError(f"report has {len(z_losses)} steps, expected {steps}")
        z_weights = {k: np.asarray(v, dtype=np.float32) if precision != "fp32" else v
                     for k, v in safetensors.load(p("final.safetensors")).items()}
        t0 = time.perf_counter()
        t_losses, t_weights = torch_train(spec, init, data, steps, optimizer,
                                          precision=precision, loss_scaling=loss_scaling,
                                          lr_at=lr_at)
        tt = time.perf_counter() - t0
        r64 = (torch_train(spec, init, data, steps, optimizer, float64=True)
               if float64_reference else (None, None))
        result = ParityResult(spec, optimizer, z_losses, t_losses, z_weights, t_weights,
                              report, None if cleanup else workdir, zt, tt, *r64)
        result.torch_scaling = loss_scaling
        return result
    finally:
        if cleanup:
            shutil.rmtree(workdir, ignore_errors=True)


# -- CLI ------------------------------------------------------------------------------------

def _parser():
    ap = argparse.ArgumentParser(prog="python -m ztrain.parity",
                                 description="Train a model with ztrain and PyTorch "
                                             "from the same weights and data; compare.")
    ap.add_argument("--model", choices=["mlp", "gpt", "llama"], required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, help="default: mlp 16, gpt and llama 4")
    ap.add_argument("--samples", type=int, help="data set size N (default 4 batches)")
    g = ap.add_argument_group("mlp")
    g.add_argument("--in-features", type=int, default=32)
    g.add_argument("--hidden", type=int, nargs="*", default=[64])
    g.add_argument("--classes", type=int, default=10)
    g = ap.add_argument_group("gpt and llama")
    g.add_argument("--seq", type=int, default=16)
    g.add_argument("--vocab", type=int, default=64)
    g.add_argument("--layers", type=int, default=2)
    g.add_argument("--width", type=int, default=32)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--kv-heads", type=int,
                   help="llama: key/value heads (grouped-query attention; default --heads)")
    g.add_argument("--rope-scaling", metavar="FACTOR,LOW,HIGH,ORIGINAL",
                   help="llama: Llama 3's RoPE frequency scaling (see python -m ztrain.models)")
    g.add_argument("--untied", action="store_true",
                   help="llama: an lm_head.weight of its own (tie_word_embeddings=false)")
    g = ap.add_argument_group("optimizer (ztrain-compile flags)")
    g.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default="adam")
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--beta1", type=float, default=0.9)
    g.add_argument("--beta2", type=float, default=0.999)
    g.add_argument("--eps", type=float, default=1e-8)
    g.add_argument("--weight-decay", type=float, default=0.0)
    g.add_argument("--momentum", type=float, default=0.0)
    g.add_argument("--dampening", type=float, default=0.0)
    g.add_argument("--nesterov", action="store_true")
    ap.add_argument("--attention", choices=models.ATTENTION_KINDS, default="composed",
                    help="gpt / llama: composed attention or one fused train.attention "
                         "op per layer")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="gpt: dropout probability (train.dropout; torch drops the same "
                         "elements through ztrain.rng)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the numpy init and data")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--workdir", help="keep the files here")
    ap.add_argument("--tolerance", type=float, default=1e-4,
                    help="exit 1 when a relative error exceeds this (default 1e-4)")
    ap.add_argument("--float64-reference", action="store_true",
                    help="also train in torch float64; a weight tensor then passes when "
                         "ztrain is within --tolerance of torch float32, or no further "
                         "from float64 than torch float32 is (ill-conditioned tensors)")
    return ap


def main(argv=None):
    a = _parser().parse_args(argv)
    if a.model == "mlp":
        spec = models.mlp(a.batch or 16, a.in_features, a.hidden, a.classes)
    elif a.model == "gpt":
        spec = models.gpt(a.batch or 4, a.seq, a.vocab, a.layers, a.width, a.heads,
                          dropout=a.dropout, attention=a.attention)
    else:
        spec = models.llama(a.batch or 4, a.seq, a.vocab, a.layers, a.width, a.heads,
                            attention=a.attention, kv_heads=a.kv_heads,
                            tie_embeddings=not a.untied,
                            rope_scaling=a.rope_scaling.split(",") if a.rope_scaling else None)
    opt = OptimizerConfig(a.optimizer, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                          a.momentum, a.dampening, a.nesterov)
    try:
        r = run_parity(spec, a.steps, opt, workdir=a.workdir, init_seed=a.seed,
                       data_seed=a.seed + 1, samples=a.samples, threads=a.threads,
                       float64_reference=a.float64_reference)
    except ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(r.table())
    if r.loss_rel_errors().max() > a.tolerance:
        return 1
    f64 = r.float64_errors()
    for k, e in r.compared_weight_errors().items():
        if e > a.tolerance and not (f64 and f64[k][0] <= f64[k][1]):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

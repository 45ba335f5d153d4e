"""Bring your own PyTorch model: `python -m ztrain.importer` end to end.

The model files under import_models/ are plain PyTorch in the style of
nanoGPT, Hugging Face's Llama and an MNIST classifier; they know nothing of
ztrain. Each is imported unchanged, compiled, trained, and compared with the
same module trained by torch.optim from the same weights on the same batches.
"""

import copy
import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import e2e_util
from ztrain import parity, safetensors

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "import_models")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
STEPS = 20

# Loss parity, relative, at every step. Both sides run the same fp32
# arithmetic up to the order of reductions (BLAS blocking, the layer-norm and
# softmax row sums); over 20 AdamW steps the largest difference measured
# here is 1.3e-7 relative (GPT), 1.2e-7 (Llama), 8e-8 (classifier). A real bug (a wrong gradient, a transposed weight, a
# dropped bias, a misread batch) moves it by 1e-3 or more within a few steps.
LOSS_TOL = 1e-5


def load(path, name):
    spec = importlib.util.spec_from_file_location("m_" + name, os.path.join(MODELS, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def importer(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                   "python"))
    return subprocess.run([PY, "-m", "ztrain.importer"] + [str(a) for a in args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, cwd=cwd, timeout=300)


def lm_data(n, t, vocab, seed):
    rng = np.random.default_rng(seed)
    stream = rng.integers(0, vocab, (n, t + 1)).astype(np.int32)
    return stream[:, :-1].copy(), stream[:, 1:].copy()


def torch_losses(module, data, names, batch, steps, opt, loss_fn=None, by_name=False):
    """Trains `module` with torch.optim.AdamW on the batches the executable
    reads (sample ((t-1)B + b) mod N), returns the loss of every step.
    by_name: the forward gets its inputs as keyword arguments."""
    params = [p for p in module.parameters() if p.requires_grad]
    o = torch.optim.AdamW(params, lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps,
                          weight_decay=opt.weight_decay)
    module.train()
    out = []
    for step in range(1, steps + 1):
        b = parity.batch_for_step(data, step, batch)
        xs = [torch.from_numpy(b[n]).long() if b[n].dtype == np.int32
              else torch.from_numpy(b[n]) for n in names]
        o.zero_grad()
        if loss_fn is None:
            r = module(**dict(zip(names, xs))) if by_name else module(*xs)
            loss = r if isinstance(r, torch.Tensor) else \
                r["loss"] if isinstance(r, dict) else \
                r.loss if hasattr(r, "loss") else r[1]
        else:
            loss = loss_fn(module(*xs[:-1]), xs[-1])
        loss.backward()
        o.step()
        out.append(float(loss))
    return np.array(out)


def import_and_train(tmp_path, model, inputs, data, batch, opt, loss=None, targets=None,
                     extra=(), launch_n=1):
    from ztrain.importer import import_module
    imp = import_module(copy.deepcopy(model), inputs, loss=loss, targets=targets)
    mlir, init = str(tmp_path / "model.mlir"), str(tmp_path / "init.safetensors")
    imp.write(mlir, init)
    exe = parity.compile_model(mlir, str(tmp_path / "model"), opt, list(extra))
    dpath = str(tmp_path / "data.safetensors")
    safetensors.save(dpath, data)
    report, save = str(tmp_path / "report.json"), str(tmp_path / "final.safetensors")
    e2e_util.launch(launch_n, [exe, "--steps", STEPS, "--init", init, "--data", dpath,
                               "--report", report, "--save", save, "--threads", "1"])
    return imp, parity.report_losses(parity.read_report(report)), save


def assert_parity(z, t, cycle):
    """cycle: steps until the data repeats a batch."""
    assert len(z) == STEPS
    # The comparison says something: training moved the loss of one batch.
    last = (STEPS - 1) // cycle * cycle
    assert last > 0 and abs(t[last] - t[0]) > 1e-2 * abs(t[0])
    err = np.abs(z - t) / np.abs(t)
    bad = [(i + 1, z[i], t[i], err[i]) for i in range(STEPS) if err[i] > LOSS_TOL]
    assert not bad, f"steps whose loss differs by > {LOSS_TOL} relative: {bad}"


def gpt(seed=0, **kw):
    m = load("nanogpt_style.py", "gpt")
    torch.manual_seed(seed)
    cfg = dict(block_size=16, vocab_size=64, n_layer=2, n_head=2, n_embd=32, dropout=0.0,
               bias=True)
    cfg.update(kw)
    return m.GPT(m.GPTConfig(**cfg))


def llama(seed=0):
    m = load("llama_style.py", "llama")
    torch.manual_seed(seed)
    return m.LlamaForCausalLM(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2,
                              intermediate_size=88)


OPT = parity.OptimizerConfig("adamw", lr=3e-3, weight_decay=0.1, no_decay="none")


@pytest.mark.parametrize("bias", [True, False])
def test_nanogpt_style_matches_pytorch(tmp_path, bias):
    """Tied embeddings, a registered causal mask, a fused qkv split, exact
    GELU, layer norm with and without bias: 20 AdamW steps, loss within
    LOSS_TOL of torch at every step."""
    model = gpt(bias=bias)
    B, T = 4, 16
    tok, tgt = lm_data(24, T, 64, seed=1)
    example = {"idx": torch.zeros(B, T, dtype=torch.long),
               "targets": torch.zeros(B, T, dtype=torch.long)}
    imp, z, _ = import_and_train(tmp_path, model, example, {"idx": tok, "targets": tgt},
                                 B, OPT)
    assert imp.aliases == {"lm_head.weight": "transformer.wte.weight"}
    assert "train.softmax" in imp.mlir and "{causal}" in imp.mlir
    assert "train.gelu_erf" in imp.mlir
    t = torch_losses(copy.deepcopy(model), {"idx": tok, "targets": tgt},
                     ["idx", "targets"], B, STEPS, OPT)
    assert_parity(z, t, cycle=24 // B)


def test_llama_style_matches_pytorch(tmp_path):
    """RMSNorm as the model writes it, rotary tables from a non-persistent
    buffer (init(external) buffers from --init), rotate_half, GQA by
    expand + reshape, an additive -inf mask, SwiGLU, an untied head, a dict
    output, labels shifted inside the model (an i32 train.slice)."""
    model = llama()
    B, T = 4, 16
    tok, tgt = lm_data(24, T, 64, seed=2)
    example = {"input_ids": torch.zeros(B, T, dtype=torch.long),
               "labels": torch.zeros(B, T, dtype=torch.long)}
    # Hugging Face's convention: the labels are the inputs, shifted inside.
    imp, z, _ = import_and_train(tmp_path, model, example,
                                 {"input_ids": tok, "labels": tok}, B, OPT)
    assert "init(external)" in imp.mlir
    assert "tensor<4x16xi32> -> tensor<4x15xi32>" in imp.mlir   # labels[..., 1:]
    t = torch_losses(copy.deepcopy(model), {"input_ids": tok, "labels": tok},
                     ["input_ids", "labels"], B, STEPS, OPT)
    assert_parity(z, t, cycle=24 // B)


def test_classifier_with_loss_flag_and_frozen_layer(tmp_path):
    """A forward that returns logits, the loss named by the caller, the first
    layer frozen (requires_grad=False): it gets no update and no optimizer
    state, the rest trains as torch trains it."""
    m = load("mlp_style.py", "mlp")
    torch.manual_seed(0)
    model = m.Classifier(inputs=20, hidden=16, classes=5, frozen_first=True)
    B = 8
    rng = np.random.default_rng(3)
    data = {"x": rng.standard_normal((32, 20)).astype(np.float32),
            "y": rng.integers(0, 5, 32).astype(np.int32)}
    example = {"x": torch.zeros(B, 20)}
    targets = {"y": torch.zeros(B, dtype=torch.long)}
    imp, z, save = import_and_train(tmp_path, model, example, data, B, OPT,
                                    loss="cross_entropy", targets=targets)
    assert imp.frozen == ["net.0.weight", "net.0.bias"]
    assert re.search(r"train.param @net.0.weight : tensor<16x20xf32> init\(normal, [^)]*\) "
                     r"frozen", imp.mlir), imp.mlir
    t = torch_losses(copy.deepcopy(model), data, ["x", "y"], B, STEPS, OPT,
                     loss_fn=lambda o, y: torch.nn.functional.cross_entropy(o, y))
    assert_parity(z, t, cycle=32 // B)
    final = safetensors.load(save)
    # Frozen: bit for bit what PyTorch initialised.
    assert np.array_equal(final["net.0.weight"], model.net[0].weight.detach().numpy())


def test_hand_written_gelus_match_pytorch(tmp_path):
    """minGPT's tanh GELU and an erf GELU written out with torch.tanh,
    torch.erf and pow, in a model that computes its own MSE loss from a
    float target input."""
    m = load("manual_gelu.py", "manual_gelu")
    torch.manual_seed(0)
    model = m.Regressor()
    B = 8
    rng = np.random.default_rng(5)
    data = {"x": rng.standard_normal((32, 12)).astype(np.float32),
            "y": rng.standard_normal((32, 3)).astype(np.float32)}
    example = {"x": torch.zeros(B, 12), "y": torch.zeros(B, 3)}
    imp, z, _ = import_and_train(tmp_path, model, example, data, B, OPT)
    assert "train.tanh" in imp.mlir and "train.erf" in imp.mlir
    t = torch_losses(copy.deepcopy(model), data, ["x", "y"], B, STEPS, OPT)
    assert_parity(z, t, cycle=32 // B)


def test_dropout_is_ztrains_train_dropout(tmp_path):
    """torch 1.13 traces nn.Dropout as a Bernoulli mask (bernoulli_ on an
    empty tensor) divided by the keep probability, times the input. The
    importer makes each one train.dropout (a stream each), never a constant
    mask: the executable's first loss is the IR's loss with ztrain's masks
    for that seed and step (torch_ref.run_ir draws them as the runtime
    does), and not the loss without dropout."""
    from ztrain import torch_ref
    model = gpt(dropout=0.2)
    B, T = 4, 16
    tok, tgt = lm_data(8, T, 64, seed=7)
    example = {"idx": torch.zeros(B, T, dtype=torch.long),
               "targets": torch.zeros(B, T, dtype=torch.long)}
    from ztrain.importer import import_module
    imp = import_module(model, example)
    assert imp.mlir.count("train.dropout") == 7          # embeddings + 3 per layer
    assert imp.mlir.count("probability = 0.2 : f64") == 7
    assert "bernoulli" not in imp.mlir and "init(external)" not in imp.mlir
    mlir, init = str(tmp_path / "m.mlir"), str(tmp_path / "init.safetensors")
    imp.write(mlir, init)
    exe = parity.compile_model(mlir, str(tmp_path / "m"), OPT)
    data = str(tmp_path / "data.safetensors")
    safetensors.save(data, {"idx": tok, "targets": tgt})
    report = str(tmp_path / "r.json")
    e2e_util.launch(1, [exe, "--steps", 1, "--seed", 7, "--init", init, "--data", data,
                        "--report", report, "--threads", 1])
    z = parity.report_losses(parity.read_report(report))[0]
    params = {k: torch.from_numpy(v) for k, v in imp.init.items()}
    inputs = {"idx": torch.from_numpy(tok[:B]), "targets": torch.from_numpy(tgt[:B])}
    with torch.no_grad():
        ref = float(torch_ref.run_ir(imp.module, params, inputs, seed=7, step=1))
        model.eval()
        plain = float(model(inputs["idx"].long(), inputs["targets"].long())[1])
    # Same masks, same arithmetic up to reduction order: 1e-5 relative
    # (measured 5e-10); without dropout the loss differs by 2.3e-4 relative
    # here (the weights are small at init), far above that.
    assert abs(z - ref) <= 1e-5 * abs(ref), (z, ref)
    assert abs(z - plain) > 1e-4 * abs(plain), (z, plain)
    assert abs(z - plain) > 20 * abs(z - ref), (z, ref, plain)


def test_random_numbers_outside_dropout_are_refused(tmp_path):
    err = refused(tmp_path, '''
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 1)
    def forward(self, x):
        noise = torch.randn(4, 8)
        return self.fc(x + noise).mean()
''', "--input", "x:4x8")
    assert "draws random numbers outside dropout" in err, err


@pytest.mark.parametrize("stage,n", [(0, 2), (1, 2), (2, 2), (3, 2), (3, 4)])
def test_imported_gpt_zero_stages_equal_one_process(tmp_path, stage, n):
    """The imported nanoGPT-style model at ZeRO stage S on N ranks (each
    reading B/N rows) ends with the weights of one process on the global
    batch B."""
    from ztrain.importer import import_module
    # No biases: the key bias's true gradient is exactly zero (softmax is
    # shift-invariant), so its updates are rounding noise that Adam
    # amplifies (test_parity.py's NOISE_TOL note), not a comparison.
    model = gpt(n_layer=1, bias=False)
    T, micro = 16, 2
    tok, tgt = lm_data(3 * n * micro, T, 64, seed=4)
    data = str(tmp_path / "data.safetensors")
    safetensors.save(data, {"idx": tok, "targets": tgt})
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    saves = {}
    for name, batch, extra, ranks in (("ref", n * micro, [], 1),
                                      (f"dp{n}", micro, ["--dp", str(n), "--zero-stage",
                                                         str(stage)], n)):
        ex = {"idx": torch.zeros(batch, T, dtype=torch.long),
              "targets": torch.zeros(batch, T, dtype=torch.long)}
        imp = import_module(model, ex)
        mlir, init = str(tmp_path / f"{name}.mlir"), str(tmp_path / f"{name}.init.safetensors")
        imp.write(mlir, init)
        exe = parity.compile_model(mlir, str(tmp_path / name), opt, extra)
        saves[name] = str(tmp_path / f"{name}.safetensors")
        e2e_util.launch(ranks, [exe, "--steps", 4, "--init", init, "--data", data,
                                "--save", saves[name], "--threads", "1"])
    ref, got = safetensors.load(saves["ref"]), safetensors.load(saves[f"dp{n}"])
    assert set(ref) == set(got)
    # 1e-4 relative (norm-wise) as test_zero_equivalence: the stages reduce
    # the gradient in another order than one process sums the batch.
    bad = {k: parity.rel_err(got[k], ref[k]) for k in ref
           if parity.rel_err(got[k], ref[k]) > 1e-4}
    assert not bad, bad


def lora(seed=0):
    m = load("lora_style.py", "lora")
    torch.manual_seed(seed)
    model = m.LoRALM(vocab=64, d=32, layers=2, r=4)
    # Fine-tuning starts from lora_B = 0 (the adapted model is the
    # pretrained one); give it values so that step 1 already exercises every
    # adapter's gradient.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    return model


LORA_FROZEN = ["wte.weight", "blocks.0.ln.weight", "blocks.0.ln.bias",
               "blocks.0.fc.base.weight", "blocks.0.fc.base.bias",
               "blocks.0.proj.base.weight", "blocks.0.proj.base.bias",
               "blocks.1.ln.weight", "blocks.1.ln.bias",
               "blocks.1.fc.base.weight", "blocks.1.fc.base.bias",
               "blocks.1.proj.base.weight", "blocks.1.proj.base.bias",
               "head.base.weight"]


def test_lora_style_fine_tuning_matches_pytorch(tmp_path):
    """LoRA: every pretrained weight frozen (requires_grad=False), adapters
    and the final norm trained. The frozen ones import as `train.param ...
    frozen`: no gradient and no optimizer state, and --save writes them bit
    for bit as PyTorch initialised them."""
    model = lora()
    T, B = 16, 4
    tok, tgt = lm_data(24, T, 64, seed=6)
    data = {"idx": tok, "targets": tgt}
    example = {"idx": torch.zeros(B, T, dtype=torch.long),
               "targets": torch.zeros(B, T, dtype=torch.long)}
    imp, z, save = import_and_train(tmp_path, model, example, data, B, OPT)
    assert imp.frozen == LORA_FROZEN
    for name in LORA_FROZEN:
        assert re.search(rf"train.param @{re.escape(name)} : [^\n]* frozen\n", imp.mlir), name
    # 2 layers x 2 adapters + the head's, each r x in and out x r, + ln_f.
    assert imp.num_params == 2 * (4 * 32 + 128 * 4 + 4 * 128 + 32 * 4) + 4 * 32 + 64 * 4 + 64
    t = torch_losses(copy.deepcopy(model), data, ["idx", "targets"], B, STEPS, OPT)
    assert_parity(z, t, cycle=24 // B)
    final = safetensors.load(save)
    state = model.state_dict()
    for name in LORA_FROZEN:
        assert np.array_equal(final[name], state[name].numpy()), name
    assert not np.array_equal(final["blocks.0.fc.lora_A"], state["blocks.0.fc.lora_A"].numpy())


@pytest.mark.parametrize("stage", [1, 3])
def test_frozen_parameters_are_sharded_and_priced(tmp_path, stage):
    """LoRA on 2 ranks: at stage 3 the frozen weights are partitioned at rest
    and gathered for use like trained ones (a case FSDP's flat parameters
    refuse); they have no gradient and no optimizer state. The run equals
    one process on the global batch, and what zero-report predicts (per-rank
    parameters, gradients, states, collective bytes, peak) is what every
    rank measures."""
    from ztrain.importer import import_module
    model = lora(seed=1)
    T, micro, n = 16, 2, 2
    tok, tgt = lm_data(3 * n * micro, T, 64, seed=7)
    data = str(tmp_path / "data.safetensors")
    safetensors.save(data, {"idx": tok, "targets": tgt})
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    steps = 4
    saves, srcs = {}, {}
    for name, batch, extra, ranks in (("ref", n * micro, [], 1),
                                      ("dp", micro, ["--dp", str(n), "--zero-stage",
                                                     str(stage)], n)):
        ex = {"idx": torch.zeros(batch, T, dtype=torch.long),
              "targets": torch.zeros(batch, T, dtype=torch.long)}
        imp = import_module(model, ex)
        mlir, init = str(tmp_path / f"{name}.mlir"), str(tmp_path / f"{name}.init.safetensors")
        imp.write(mlir, init)
        srcs[name] = mlir
        exe = parity.compile_model(mlir, str(tmp_path / name), opt, extra)
        saves[name] = str(tmp_path / f"{name}.safetensors")
        report = str(tmp_path / f"{name}.json")
        e2e_util.launch(ranks, [exe, "--steps", steps, "--init", init, "--data", data,
                                "--save", saves[name], "--report", report, "--threads", "1"])
    # The same run twice: the same bits.
    again = str(tmp_path / "again.safetensors")
    e2e_util.launch(n, [str(tmp_path / "dp"), "--steps", steps, "--init",
                        str(tmp_path / "dp.init.safetensors"), "--data", data,
                        "--save", again, "--threads", "1"])
    assert open(again, "rb").read() == open(saves["dp"], "rb").read()
    ref, got = safetensors.load(saves["ref"]), safetensors.load(saves["dp"])
    assert set(ref) == set(got)
    # Frozen: never updated, on every path bit for bit the initial values.
    state = model.state_dict()
    for name in LORA_FROZEN:
        assert np.array_equal(got[name], state[name].numpy()), name
    # 1e-4 relative (norm-wise) as test_zero_equivalence: the ranks reduce
    # the gradient in another order than one process sums the batch.
    bad = {k: parity.rel_err(got[k], ref[k]) for k in ref
           if parity.rel_err(got[k], ref[k]) > 1e-4}
    assert not bad, bad

    p = subprocess.run([e2e_util.require_tool("ztrain-opt"), srcs["dp"],
                        "--ztrain-training=optimizer=adam", f"--ztrain-zero=stage={stage} dp={n}",
                        "--plan-memory", "--zero-report=format=json", "-o", "/dev/null"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    predicted = plan["per_rank"]
    shapes = {k: v.shape for k, v in ref.items()}
    shard = {k: -(-int(np.prod(s)) // n) for k, s in shapes.items()}
    trained = [k for k in shapes if k not in LORA_FROZEN]
    assert plan["parameters"]["frozen_tensors"] == len(LORA_FROZEN)
    # Stage 3: every parameter, frozen or not, is a shard at rest (f32);
    # stage 1: whole (padded to N slices). Gradients only for the trained
    # ones, states (Adam's two moments) only for them.
    assert predicted["parameters"] == 4 * sum(shard[k] * (1 if stage == 3 else n)
                                              for k in shapes)
    assert predicted["gradients"] == 4 * sum(shard[k] * (1 if stage == 3 else n)
                                             for k in trained)
    assert predicted["optimizer_states"] == 2 * 4 * sum(shard[k] for k in trained)
    per_kind = {}
    for c in plan["collectives"]:
        per_kind[c["kind"]] = per_kind.get(c["kind"], 0) + c["bytes"]
    gathered = {c["tensor"] for c in plan["collectives"] if c["kind"] == "all_gather"}
    reduced = {c["tensor"] for c in plan["collectives"] if c["kind"] == "reduce_scatter"}
    assert not reduced & set(LORA_FROZEN)
    assert set(LORA_FROZEN) <= gathered if stage == 3 else not gathered & set(LORA_FROZEN)
    for rank in parity.read_report(str(tmp_path / "dp.json"))["ranks"]:
        mem, comm = rank["memory"], rank["communication"]
        for k in ("parameters", "gradients", "optimizer_states"):
            assert mem[k] == predicted[k], (k, mem, predicted)
        for k in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
            assert comm[k]["bytes"] == steps * per_kind.get(k, 0), (k, comm, per_kind)
        assert mem["peak"] == predicted["predicted_peak"], (mem, predicted)


# -- the command line and its refusals -------------------------------------------------

def test_cli_writes_ir_and_init(tmp_path):
    p = importer(os.path.join(MODELS, "nanogpt_style.py") + ":GPT", "--config",
                 '{"n_layer": 1, "n_embd": 32, "n_head": 2, "block_size": 16, '
                 '"vocab_size": 64}', "--batch", 2, "--seq", 16,
                 "-o", tmp_path / "g.mlir", "--init", tmp_path / "g.safetensors")
    assert p.returncode == 0, p.stderr
    assert "tied: lm_head.weight is transformer.wte.weight" in p.stdout
    init = safetensors.load(str(tmp_path / "g.safetensors"))
    assert "transformer.wte.weight" in init and "lm_head.weight" not in init
    opt = e2e_util.require_tool("ztrain-opt")
    v = subprocess.run([opt, str(tmp_path / "g.mlir")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert v.returncode == 0, v.stderr


def padded_lm_data(n, t, vocab, seed, pad=3):
    """Token windows whose last `pad` labels are -100 (Hugging Face's label
    padding, which cross_entropy's default ignore_index skips): every row
    has as many, so each rank's micro-batch counts as many targets."""
    tok, tgt = lm_data(n, t, vocab, seed)
    tgt[:, t - pad:] = -100
    return tok, tgt


def test_ignore_index_rows_are_skipped_as_pytorch_skips_them(tmp_path):
    """Labels padded with -100: PyTorch's mean is over the other rows, and
    so is ztrain's (train.cross_entropy {ignore_index = -100}): 20 AdamW
    steps within LOSS_TOL of torch. Then on 2 ranks at stage 2 (each rank
    the mean of its rows that count, averaged over the ranks, as DDP and
    DeepSpeed do: equal to one process here, where every rank counts as
    many) the weights equal one process's."""
    from ztrain.importer import import_module
    m = load("hf_style.py", "hf")
    torch.manual_seed(0)
    model = m.TinyLM(vocab_size=64, dim=32, heads=4, kv_heads=2)
    B, T = 4, 16
    tok, tgt = padded_lm_data(24, T, 64, seed=5)
    data = {"input_ids": tok, "labels": tgt}
    example = {"input_ids": torch.zeros(B, T, dtype=torch.long),
               "labels": torch.zeros(B, T, dtype=torch.long)}
    imp, z, _ = import_and_train(tmp_path, model, example, data, B, OPT)
    assert "{ignore_index = -100 : i64}" in imp.mlir
    t = torch_losses(copy.deepcopy(model), data, ["input_ids", "labels"], B, STEPS, OPT,
                     by_name=True)
    assert_parity(z, t, cycle=24 // B)

    micro, n = 2, 2
    dpath = str(tmp_path / "pad.safetensors")
    safetensors.save(dpath, data)
    opt = parity.OptimizerConfig("adam", lr=1e-2)
    saves = {}
    for name, batch, extra, ranks in (("ref", n * micro, [], 1),
                                      ("dp", micro, ["--dp", str(n), "--zero-stage", "2"], n)):
        ex = {"input_ids": torch.zeros(batch, T, dtype=torch.long),
              "labels": torch.zeros(batch, T, dtype=torch.long)}
        imp = import_module(model, ex)
        src, init = str(tmp_path / f"{name}.mlir"), str(tmp_path / f"{name}.init.safetensors")
        imp.write(src, init)
        exe = parity.compile_model(src, str(tmp_path / name), opt, extra)
        saves[name] = str(tmp_path / f"{name}.safetensors")
        e2e_util.launch(ranks, [exe, "--steps", 4, "--init", init, "--data", dpath,
                                "--save", saves[name], "--threads", "1"])
    # The same run twice: the same bits.
    again = str(tmp_path / "again.safetensors")
    e2e_util.launch(n, [str(tmp_path / "dp"), "--steps", 4, "--init",
                        str(tmp_path / "dp.init.safetensors"), "--data", dpath,
                        "--save", again, "--threads", "1"])
    assert open(again, "rb").read() == open(saves["dp"], "rb").read()
    ref, got = safetensors.load(saves["ref"]), safetensors.load(saves["dp"])
    # 1e-4 relative as test_imported_gpt_zero_stages_equal_one_process; the
    # key projection's bias has an exactly-zero true gradient (softmax is
    # shift-invariant), so its Adam updates are amplified rounding noise
    # (that test's note), not a comparison.
    bad = {k: parity.rel_err(got[k], ref[k]) for k in ref
           if not k.endswith("attn.k.bias") and parity.rel_err(got[k], ref[k]) > 1e-4}
    assert not bad, bad
    assert len(ref) > 10


def test_gpt2_style_with_padded_labels_matches_pytorch(tmp_path):
    """A Hugging Face GPT-2-style file (Conv1D addmm layers, a bool tril
    buffer applied with torch.where(mask, scores, lowest float), gelu_new,
    tied embeddings, labels shifted inside, -100 label padding): the where
    before the softmax becomes train.softmax {causal}, and 20 AdamW steps
    stay within LOSS_TOL of torch."""
    m = load("gpt2_style.py", "gpt2")
    torch.manual_seed(0)
    model = m.GPT2LMHeadModel(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    B, T = 4, 16
    tok, _ = padded_lm_data(24, T, 64, seed=8)
    labels = tok.copy()
    labels[:, T - 2:] = -100
    data = {"input_ids": tok, "labels": labels}
    example = {"input_ids": torch.zeros(B, T, dtype=torch.long),
               "labels": torch.zeros(B, T, dtype=torch.long)}
    imp, z, _ = import_and_train(tmp_path, model, example, data, B, OPT)
    assert imp.mlir.count("{causal}") == 2 and "train.where" not in imp.mlir, imp.mlir
    assert imp.aliases == {"lm_head.weight": "wte.weight"}
    t = torch_losses(copy.deepcopy(model), data, ["input_ids", "labels"], B, STEPS, OPT,
                     by_name=True)
    assert_parity(z, t, cycle=24 // B)


def test_hf_style_lm_from_the_command_line_matches_pytorch(tmp_path):
    """forward(input_ids, attention_mask=None, labels=None): --batch/--seq
    binds the labels by name (not the mask, the second argument); the
    lowest-float additive causal mask, added by baddbmm, becomes
    train.softmax {causal}; repeat, var, abs, leaky_relu, torch.tensor and
    input_ids.long() import; the atan statistic the loss does not use is
    neither lowered nor refused. 20 AdamW steps within LOSS_TOL of torch."""
    B, T = 4, 16
    mlir, init = tmp_path / "lm.mlir", tmp_path / "lm.safetensors"
    p = importer(os.path.join(MODELS, "hf_style.py") + ":TinyLM", "--config",
                 '{"vocab_size": 64, "dim": 32, "heads": 4, "kv_heads": 2}',
                 "--batch", B, "--seq", T, "-o", mlir, "--init", init)
    assert p.returncode == 0, p.stderr
    assert "inputs input_ids 4x16 i32, labels 4x16 i32" in p.stdout, p.stdout
    ir_text = mlir.read_text()
    assert ir_text.count("{causal}") == 2 and "atan" not in ir_text
    assert oct(os.stat(mlir).st_mode & 0o777) == oct(0o666 & ~_umask())
    tok, tgt = lm_data(24, T, 64, seed=4)
    exe = parity.compile_model(str(mlir), str(tmp_path / "lm"), OPT)
    data = str(tmp_path / "data.safetensors")
    safetensors.save(data, {"input_ids": tok, "labels": tgt})
    report = str(tmp_path / "r.json")
    e2e_util.launch(1, [exe, "--steps", STEPS, "--init", str(init), "--data", data,
                        "--report", report, "--threads", 1])
    z = parity.report_losses(parity.read_report(report))
    m = load("hf_style.py", "hf")
    torch.manual_seed(0)                # the importer's --seed default
    model = m.TinyLM(vocab_size=64, dim=32, heads=4, kv_heads=2)
    t = torch_losses(model, {"input_ids": tok, "labels": tgt}, ["input_ids", "labels"],
                     B, STEPS, OPT, by_name=True)
    assert_parity(z, t, cycle=24 // B)


def _umask():
    u = os.umask(0)
    os.umask(u)
    return u


def test_mse_loss_flag_matches_pytorch():
    """--loss mse (F.mse_loss, mean) on a regression model: the IR's loss
    and gradients, evaluated by torch_ref.run_ir, are PyTorch's."""
    from ztrain import torch_ref
    from ztrain.importer import import_module
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x, y = torch.randn(5, 6), torch.randn(5, 2)
    imp = import_module(model, {"input": x}, loss="mse", targets={"y": y})
    params = {k: torch.from_numpy(v).requires_grad_() for k, v in imp.init.items()}
    got = torch_ref.run_ir(imp.module, params, {"input": x, "y": y})
    ref = torch.nn.functional.mse_loss(model(x), y)
    got.backward()
    ref.backward()
    # fp32, a few dozen operations: 1e-6 relative (measured ~1e-7).
    assert abs(float(got) - float(ref)) <= 1e-6 * abs(float(ref))
    for k, p in model.named_parameters():
        assert torch.allclose(params[k].grad, p.grad, rtol=1e-5, atol=1e-7), k


def test_both_output_files_or_neither(tmp_path):
    """The IR and its --init file are renamed into place together: a
    failure writing either leaves neither (and no temporary)."""
    from ztrain.importer import import_module
    imp = import_module(torch.nn.Linear(3, 2), {"input": torch.zeros(4, 3)},
                        loss="mse", targets={"y": torch.zeros(4, 2)})
    imp.mlir = None                     # writing the IR fails after the init file
    with pytest.raises(TypeError):
        imp.write(str(tmp_path / "m.mlir"), str(tmp_path / "m.safetensors"))
    assert os.listdir(tmp_path) == []


def write_model(tmp_path, body):
    path = tmp_path / "user_model.py"
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
                    + body)
    return str(path)


def refused(tmp_path, body, *args):
    model = write_model(tmp_path, body)
    out, init = tmp_path / "out.mlir", tmp_path / "out.safetensors"
    p = importer(model + ":M", *args, "-o", out, "--init", init)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    assert not out.exists() and not init.exists(), "a refusal left an output file"
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".ztrain-import")]
    return p.stderr


def test_unsupported_ops_are_named_with_module_path_and_line(tmp_path):
    err = refused(tmp_path, '''
class Act(nn.Module):
    def forward(self, x):
        return x * torch.atan(x)

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = Act()
        self.out = nn.Linear(8, 4)
    def forward(self, x):
        h = self.act(self.fc(x))
        h = torch.cumsum(h, dim=1)
        return self.out(h)
''', "--input", "x:4x8", "--loss", "cross_entropy", "--target", "y:4:int64")
    lines = err.strip().splitlines()
    assert lines[0] == ("ztrain.importer: error: 2 uses of aten ops ztrain cannot import yet "
                        "(docs/import.md lists what it can):")
    assert lines[1].startswith("  aten.atan.default at act (user_model.py:")
    assert lines[1].endswith("return x * torch.atan(x))")
    assert lines[2].startswith("  aten.cumsum.default at <top> (user_model.py:")
    assert len(lines) == 3


def test_data_dependent_shape_is_refused(tmp_path):
    err = refused(tmp_path, '''
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 1)
    def forward(self, x):
        h = self.fc(x)
        return h[h > 0].sum()
''', "--input", "x:4x8")
    assert "(its output shape depends on the data)" in err


def test_in_place_parameter_update_is_refused(tmp_path):
    err = refused(tmp_path, '''
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 1)
        self.register_buffer("count", torch.zeros(1))
    def forward(self, x):
        self.count += 1
        return self.fc(x).mean()
''', "--input", "x:4x8")
    assert err.startswith("ztrain.importer: error: <top> (user_model.py:")
    assert "the forward updates 'count' in place" in err
    assert len(err.strip().splitlines()) == 1


def test_forward_without_scalar_loss_is_refused(tmp_path):
    err = refused(tmp_path, '''
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)
    def forward(self, x):
        return self.fc(x)
''', "--input", "x:4x8")
    assert err == ("ztrain.importer: error: the forward returns a tensor of shape [4, 3] and "
                   "dtype torch.float32, not a scalar loss: pass a loss (--loss cross_entropy, "
                   "or import_module(..., loss=fn)) or make the forward return (output, loss) "
                   "when given targets\n")


def test_batch_that_is_not_a_tensor_is_refused():
    from ztrain.importer import import_module, ImportFailure
    with pytest.raises(ImportFailure, match="input 'input' is a list, not a tensor"):
        import_module(torch.nn.Linear(2, 1), {"input": [1.0, 2.0]})


def test_an_input_that_is_not_an_argument_is_refused():
    from ztrain.importer import import_module, ImportFailure
    with pytest.raises(ImportFailure, match="input 'x' is not an argument of the forward "
                       r"\(it takes input\)"):
        import_module(torch.nn.Linear(2, 1), {"x": torch.zeros(3, 2)})


def test_a_model_error_is_one_line_naming_the_user_line(tmp_path):
    err = refused(tmp_path, '''
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)
    def forward(self, x):
        return self.fc(x.view(3, -1)).sum()
''', "--input", "x:4x8")
    assert len(err.strip().splitlines()) == 1
    assert "running the forward on the example batch failed (" in err
    assert "user_model.py:" in err and "RuntimeError" in err


def test_stop_gradients_are_refused(tmp_path):
    """.detach(), .data and torch.no_grad() on a parameter's path stop
    PyTorch's gradient; ztrain has no stop-gradient op, so each is refused
    with the user's line rather than trained with a wrong gradient."""
    for expr, what in (("h.detach()", r"\.detach\(\) \(or \.data\)"),
                       ("self.fc.weight.data.sum() * h", r"\.data in the forward stops")):
        err = refused(tmp_path, f'''
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        h = self.fc(x)
        g = {expr}
        return (h * g).mean()
''', "--input", "x:4x8")
        assert re.search(what, err), err
        assert f"g = {expr}" in err, err
    err = refused(tmp_path, '''
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        h = self.fc(x)
        with torch.no_grad():
            s = h.abs().mean()
        return (h / s).mean()
''', "--input", "x:4x8")
    assert "torch.no_grad()" in err and "s = h.abs().mean()" in err, err


def test_deferred_refusal_names_the_producing_line(tmp_path):
    """A value refused only when a consumer uses it (a log_softmax that
    feeds no nll_loss) is reported at its own line, not the consumer's."""
    err = refused(tmp_path, '''
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)
    def forward(self, x):
        lp = F.log_softmax(self.fc(x), dim=-1)
        return -lp.mean()
''', "--input", "x:4x8")
    assert "lp = F.log_softmax(self.fc(x), dim=-1)" in err, err


def test_forward_that_exits_is_one_line(tmp_path):
    err = refused(tmp_path, '''
import sys
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)
    def forward(self, x):
        sys.exit(3)
''', "--input", "x:4x8", "--loss", "mse", "--target", "y:4x3")
    assert "sys.exit(3)" in err and len(err.strip().splitlines()) == 1, err


def test_config_errors_name_their_cause(tmp_path):
    """A TypeError raised inside the constructor is reported as itself (not
    retried with a config object); an unknown key names the parameters."""
    model = write_model(tmp_path, '''
class M(nn.Module):
    def __init__(self, width=4, depth=1):
        super().__init__()
        if depth > 1:
            raise TypeError("depth > 1 needs a width list")
        self.fc = nn.Linear(width, 1)
    def forward(self, x):
        return self.fc(x).mean()
''')
    out = tmp_path / "o.mlir"
    p = importer(model + ":M", "--config", '{"depth": 2}', "--input", "x:2x4", "-o", out)
    assert p.returncode == 1 and "building M failed: TypeError: depth > 1 needs a width " \
        "list" in p.stderr, p.stderr
    p = importer(model + ":M", "--config", '{"widht": 2}', "--input", "x:2x4", "-o", out)
    assert p.returncode == 1 and "M has no parameter widht (it takes width, depth)" in \
        p.stderr, p.stderr
    assert not out.exists()


def test_op_table_is_the_docs_table():
    """docs/import.md's op table is the importer's table, printed."""
    p = importer("--ops")
    assert p.returncode == 0, p.stderr
    repo = os.path.dirname(os.path.dirname(HERE))
    with open(os.path.join(repo, "docs", "import.md")) as fh:
        doc = fh.read()
    assert p.stdout in doc, "docs/import.md's op table is stale: regenerate it with " \
        "python3 -m ztrain.importer --ops"


# -- the rest of ztrain on imported models --------------------------------------------

@pytest.fixture(scope="module")
def imported_llama(tmp_path_factory):
    """The Llama-style file imported once (B=2 per rank, T=16) with its init
    file and a token data file."""
    from ztrain.importer import import_module
    d = tmp_path_factory.mktemp("imported_llama")
    model = llama()
    B, T = 2, 16
    imp = import_module(model, {"input_ids": torch.zeros(B, T, dtype=torch.long),
                                "labels": torch.zeros(B, T, dtype=torch.long)})
    imp.write(str(d / "llama.mlir"), str(d / "init.safetensors"))
    tok, tgt = lm_data(16, T, 64, seed=6)
    safetensors.save(str(d / "data.safetensors"), {"input_ids": tok, "labels": tgt})
    return d


def test_imported_model_recompute_offload_and_resume_are_bitwise(imported_llama, tmp_path):
    """--recompute=full (the importer marks each layer's output
    train.checkpoint), the optimizer states offloaded to the host at stage 3
    on 2 ranks, and a checkpoint resumed halfway: each is bitwise the plain
    run, as on the builders' models."""
    d = imported_llama
    src = str(d / "llama.mlir")
    assert open(src).read().count("train.checkpoint") == 2
    opt = parity.OptimizerConfig("adamw", lr=1e-3)
    plain = parity.compile_model(src, str(tmp_path / "plain"), opt, ["--dp", "2",
                                                                      "--zero-stage", "3"])
    other = parity.compile_model(src, str(tmp_path / "other"), opt,
                                 ["--dp", "2", "--zero-stage", "3", "--recompute=full",
                                  "--offload-optimizer=cpu"])
    common = ["--init", d / "init.safetensors", "--data", d / "data.safetensors",
              "--threads", "1"]
    e2e_util.mpirun(2, [plain, "--steps", 8, "--save", tmp_path / "plain.safetensors"]
                    + common)
    e2e_util.mpirun(2, [other, "--steps", 8, "--save", tmp_path / "other.safetensors"]
                    + common)
    assert (tmp_path / "plain.safetensors").read_bytes() == \
        (tmp_path / "other.safetensors").read_bytes()
    e2e_util.mpirun(2, [plain, "--steps", 4, "--save-checkpoint", tmp_path / "ck"] + common)
    # The resumed run reads the init(external) rotary tables from the
    # checkpoint: no --init needed.
    e2e_util.mpirun(2, [plain, "--steps", 4, "--resume", tmp_path / "ck", "--threads", 1,
                        "--data", d / "data.safetensors",
                        "--save", tmp_path / "resumed.safetensors"])
    assert (tmp_path / "resumed.safetensors").read_bytes() == \
        (tmp_path / "plain.safetensors").read_bytes()


def test_imported_model_trains_in_bf16(imported_llama, tmp_path):
    """--precision=bf16 on the imported Llama: the loss of each step within
    bf16's rounding of the fp32 run's."""
    d = imported_llama
    src = str(d / "llama.mlir")
    opt = parity.OptimizerConfig("adamw", lr=1e-3)
    losses = {}
    for prec in ("fp32", "bf16"):
        exe = parity.compile_model(src, str(tmp_path / prec), opt, [f"--precision={prec}"])
        report = tmp_path / f"{prec}.json"
        e2e_util.launch(1, [exe, "--steps", 8, "--init", d / "init.safetensors", "--data",
                            d / "data.safetensors", "--report", report, "--threads", 1])
        losses[prec] = parity.report_losses(parity.read_report(str(report)))
    # bf16 keeps 8 bits of mantissa (relative rounding 2^-9 = 2e-3 per
    # value); through two layers and a 64-way softmax the loss moves by
    # ~1e-3 relative here. 2e-2 is far below what a broken cast gives (a
    # loss off by O(1)) and above the rounding.
    err = np.abs(losses["bf16"] - losses["fp32"]) / losses["fp32"]
    assert err.max() < 2e-2, (losses, err)


def test_frozen_parameters_in_bf16(tmp_path):
    """LoRA in bf16 on 2 ranks at stage 3: the frozen weights are bf16
    parameters without an f32 master (never updated), loaded from the f32
    --init file rounded to nearest even (what autocast computes with), and
    --save writes exactly those rounded values; the loss follows the fp32
    run's within bf16's rounding."""
    from ztrain.importer import import_module
    model = lora(seed=2)
    T, micro = 16, 2
    tok, tgt = lm_data(8, T, 64, seed=9)
    data = str(tmp_path / "data.safetensors")
    safetensors.save(data, {"idx": tok, "targets": tgt})
    imp = import_module(model, {"idx": torch.zeros(micro, T, dtype=torch.long),
                                "targets": torch.zeros(micro, T, dtype=torch.long)})
    src, init = str(tmp_path / "lora.mlir"), str(tmp_path / "lora.init.safetensors")
    imp.write(src, init)
    opt = parity.OptimizerConfig("adamw", lr=1e-3)
    losses = {}
    for prec in ("fp32", "bf16"):
        exe = parity.compile_model(src, str(tmp_path / prec), opt,
                                   [f"--precision={prec}", "--dp", "2", "--zero-stage", "3"])
        report, save = tmp_path / f"{prec}.json", tmp_path / f"{prec}.safetensors"
        e2e_util.mpirun(2, [exe, "--steps", 8, "--init", init, "--data", data,
                            "--report", report, "--save", save, "--threads", 1])
        losses[prec] = parity.report_losses(parity.read_report(str(report)))
    saved = safetensors.load(str(tmp_path / "bf16.safetensors"))
    state = model.state_dict()
    for name in LORA_FROZEN:
        want = state[name].to(torch.bfloat16).float().numpy()
        assert np.array_equal(saved[name], want), name   # BF16 loads as float32
    # The rounding did happen (random weights are not bf16 values).
    assert not np.array_equal(saved["wte.weight"], state["wte.weight"].numpy())
    # As test_imported_model_trains_in_bf16: bf16's rounding moves the loss
    # by ~1e-3 relative; a broken cast or unrounded load by O(1).
    err = np.abs(losses["bf16"] - losses["fp32"]) / losses["fp32"]
    assert err.max() < 2e-2, (losses, err)


def test_missing_init_for_external_buffers_is_one_line(imported_llama, tmp_path):
    """The imported rotary tables have no rule: without --init the executable
    says so before step 1 instead of training with zeros."""
    d = imported_llama
    exe = parity.compile_model(str(d / "llama.mlir"), str(tmp_path / "m"),
                               parity.OptimizerConfig("adamw", lr=1e-3))
    p = e2e_util.run([exe, "--steps", 1])
    assert p.returncode != 0
    assert p.stderr.strip().splitlines() == [
        "ztrain: error: buffer 'model.layers.0.self_attn.rotary.cos' has no rule (init "
        "external): its values come from the --init file the importer wrote; pass --init FILE"]

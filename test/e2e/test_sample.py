"""Sampling (issue 15 item 8): the executable's --sample continues a prompt
with the model's logits function (compiled next to the step from the same
IR, `train.logits`).

- greedy decoding (--temperature 0) from given weights is PyTorch's greedy
  decoding of the same weights, token for token;
- a model trained on a repeating text continues the pattern;
- the same seed draws the same text; a model that is not a language model
  is refused in one line.
"""

import subprocess

import torch

import e2e_util
from ztrain import models, parity, safetensors, torch_ref

T, V = 16, 64


def spec():
    return models.gpt(batch=2, seq=T, vocab=V, layers=1, width=32, heads=2)


def sample(exe, prompt, flags, init=None, data=None, steps=0):
    """The sampled text, as the bytes the executable wrote (the tokens may
    be control characters: no text decoding, no newline translation)."""
    cmd = [exe, "--steps", steps, "--sample", prompt, "--threads", 1, "--log-every", 0] + flags
    if init:
        cmd += ["--init", init]
    if data:
        cmd += ["--data", data]
    p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.endswith(b"\n")
    return p.stdout[:-1].decode("latin-1")


def torch_greedy(weights, prompt, n):
    model = torch_ref.from_spec(spec())
    torch_ref.load_state(model, weights)
    model.eval()
    tokens = [ord(c) for c in prompt]
    with torch.no_grad():
        for _ in range(n):
            ctx = tokens[-T:]
            x = torch.zeros((1, T), dtype=torch.int64)
            x[0, :len(ctx)] = torch.tensor(ctx)
            logits = model.logits(x)[0, len(ctx) - 1]
            tokens.append(int(torch.argmax(logits)))
    return "".join(chr(t) for t in tokens)


def test_greedy_is_torchs_greedy(tmp_path):
    exe = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw"), name="gpt")
    weights = parity.make_init(spec(), seed=4)
    init = str(tmp_path / "init.safetensors")
    safetensors.save(init, weights)
    # Ids below 64: the prompt's bytes and every sampled token are printable
    # only by chance, compared as code points.
    prompt = "".join(chr(c) for c in (33, 40, 50, 61, 35))
    got = sample(exe, prompt, ["--temperature", "0", "--sample-tokens", "30"], init=init)
    assert got == torch_greedy(weights, prompt, 30)


def test_trained_model_continues_the_pattern(tmp_path):
    text = ("0123456789:;<=>?" * 200).encode()
    data = tmp_path / "data.txt"
    data.write_bytes(text)
    exe = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw", lr=3e-3), name="gpt")
    out = sample(exe, "345", ["--temperature", "0", "--sample-tokens", "20"],
                 data=str(data), steps=300)
    assert out == "345" + "6789:;<=>?0123456789"[:20], out


def test_seeded_draws_repeat_and_refusals(tmp_path):
    exe = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw"), name="gpt")
    a = sample(exe, "123", ["--seed", "7", "--sample-tokens", "40"])
    b = sample(exe, "123", ["--seed", "7", "--sample-tokens", "40"])
    c = sample(exe, "123", ["--seed", "8", "--sample-tokens", "40"])
    assert a == b and a != c
    assert len(a) == 43
    mlp = e2e_util.compile_text(
        models.mlp(batch=4, in_features=8, hidden=[8], classes=3).to_mlir(), str(tmp_path),
        parity.OptimizerConfig("adam"), name="mlp")
    p = e2e_util.run([mlp, "--steps", 0, "--sample", "hi"])
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode != 0 and len(lines) == 1, p.stderr
    assert "--sample needs a language model" in lines[0]
    # A prompt byte outside the vocabulary (64 here).
    p = e2e_util.run([exe, "--steps", 0, "--sample", "z"])
    assert p.returncode != 0 and "not a token of this model's vocabulary of 64" in p.stderr


def test_prompt_of_ids_prints_ids(tmp_path):
    # The ids form of the same greedy run: the same tokens, printed as ids.
    exe = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw"), name="gpt")
    weights = parity.make_init(spec(), seed=4)
    init = str(tmp_path / "init.safetensors")
    safetensors.save(init, weights)
    prompt = [33, 40, 50, 61, 35]
    text = sample(exe, "".join(chr(c) for c in prompt),
                  ["--temperature", "0", "--sample-tokens", "10"], init=init)
    p = e2e_util.run([exe, "--steps", 0, "--init", init, "--sample-ids",
                      ",".join(map(str, prompt)), "--temperature", "0", "--sample-tokens", 10,
                      "--log-every", 0])
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(ord(c)) for c in text]
    p = e2e_util.run([exe, "--steps", 0, "--sample-ids", "3,64"])
    assert p.returncode != 0 and "64 is not a token of this model's vocabulary of 64" in p.stderr


def test_sampling_a_checkpoint_needs_no_data(tmp_path):
    """`--steps 0 --resume CK --sample ...` samples the checkpoint's model
    without its training data (issue 49: it asked for --data), and draws
    what the training run drew from the same weights and seed."""
    text = ("0123456789:;<=>?" * 200).encode()
    data = tmp_path / "data.txt"
    data.write_bytes(text)
    exe = e2e_util.compile_text(spec().to_mlir(), str(tmp_path),
                                parity.OptimizerConfig("adamw", lr=3e-3), name="gpt")
    ck = tmp_path / "ck"
    flags = ["--seed", "3", "--sample-tokens", "20"]
    trained = sample(exe, "345", flags + ["--save-checkpoint", ck], data=str(data), steps=30)
    resumed = sample(exe, "345", flags + ["--resume", ck])
    assert resumed == trained, (resumed, trained)

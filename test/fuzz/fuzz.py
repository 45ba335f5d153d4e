#!/usr/bin/python3
"""A mutation fuzzer for ztrain's inputs: the compiler's IR and the compiled
executable's flags and files.

Two targets, each fed mutants of valid inputs:

  ir    examples/*.mlir, mutated (a number replaced by an edge value, a
        dimension of one tensor type changed, a line dropped or repeated,
        an op or symbol renamed, the text cut short), through ztrain-opt's
        whole pipeline (training, ZeRO stage 3 on 2 ranks with overlap,
        plan-memory, lower-to-runtime);
  pipeline  valid models of random sizes (the Python builders, edge sizes
        included: 1, odd, prime) through ztrain-opt with random pipeline
        options (optimizer, ZeRO stage, dp, overlap, bucket / tile / live
        bounds), where mutated text rarely gets past the parser;
  exe   a small compiled model run with mutated --init / --data
        safetensors files (bytes of the header flipped, lengths and offsets
        changed, the file cut short) and mutated flag values.

A run passes when the tool exits with status 0, 1 or 2 and prints at most
one `ztrain: error:` line (the runtime's contract) within the time limit.
A signal (SIGSEGV, SIGFPE, SIGABRT, ...) or a hang is a finding: the input
is written to the findings directory, and it becomes a regression test.

    python3 test/fuzz/fuzz.py --target ir --count 300 --seed 1
    python3 test/fuzz/fuzz.py --target exe --count 300 --seed 1 --findings /tmp/f

Everything is a function of --seed: a finding reproduces with the same
seed and count. The CI runs a bounded, fixed-seed campaign
(test/e2e/test_fuzz.py); longer ones are run by hand (docs/fuzzing.md).
"""

import argparse
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))

EDGE_NUMBERS = ["0", "-1", "1", "3", "2147483648", "9223372036854775807", "18446744073709551617",
                "1.0e308", "-0.0", "0x7FF8000000000000", "0x7FF0000000000000", "65536"]
OPS = ["train.add", "train.matmul", "train.relu", "train.softmax", "train.reshape",
       "train.transpose", "train.reduce", "train.layer_norm", "train.cross_entropy",
       "train.embedding", "train.slice", "train.concat", "train.where", "train.dropout",
       "train.param_read", "train.buffer_read", "train.rms_norm"]


def bin_dir():
    return os.environ.get("ZTRAIN_BIN_DIR") or os.path.join(REPO, "build", "bin")


def classify(p, timed_out, runtime=False):
    """None when the run kept the contract, else what went wrong. A failing
    executable (`runtime`) prints exactly one `ztrain: error:` line."""
    if timed_out:
        return "hang (timeout)"
    if p.returncode < 0:
        return f"signal {-p.returncode}"
    if p.returncode not in (0, 1, 2):
        return f"exit status {p.returncode}"
    if p.returncode != 0 and runtime:
        errors = [line for line in p.stderr.splitlines() if line.startswith("ztrain: error:")]
        if len(errors) != 1:
            return f"{len(errors)} error lines"
    return None


def run(cmd, timeout, cwd=None):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           errors="replace", timeout=timeout, cwd=cwd)
        return p, False
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, -9, e.stdout or "", e.stderr or ""), True


# -- IR mutants -----------------------------------------------------------------------

def mutate_ir(text, rnd):
    lines = text.split("\n")
    kind = rnd.choice(["number", "dim", "drop", "repeat", "op", "symbol", "cut", "swap"])
    if kind == "number":
        spots = [m for m in re.finditer(r"(?<![\w%@#.])-?\d+(\.\d+)?(e-?\d+)?", text)]
        if spots:
            m = rnd.choice(spots)
            return kind, text[:m.start()] + rnd.choice(EDGE_NUMBERS) + text[m.end():]
    if kind == "dim":
        spots = [m for m in re.finditer(r"tensor<((\d+x)+)", text)]
        if spots:
            m = rnd.choice(spots)
            dims = m.group(1).split("x")[:-1]
            i = rnd.randrange(len(dims))
            dims[i] = rnd.choice(["0", "1", "3", "7", str(int(dims[i]) * 2), "4294967296"])
            new = "tensor<" + "x".join(dims) + "x"
            return kind, text[:m.start()] + new + text[m.end():]
    if kind == "drop" and len(lines) > 2:
        i = rnd.randrange(len(lines))
        return kind, "\n".join(lines[:i] + lines[i + 1:])
    if kind == "repeat":
        i = rnd.randrange(len(lines))
        return kind, "\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
    if kind == "op":
        spots = [m for m in re.finditer(r"train\.\w+", text)]
        if spots:
            m = rnd.choice(spots)
            return kind, text[:m.start()] + rnd.choice(OPS) + text[m.end():]
    if kind == "symbol":
        names = sorted(set(re.findall(r"@[\w.\"]+", text)))
        spots = [m for m in re.finditer(r"@[\w.\"]+", text)]
        if spots and names:
            m = rnd.choice(spots)
            return kind, text[:m.start()] + rnd.choice(names) + text[m.end():]
    if kind == "swap":
        spots = [m for m in re.finditer(r"%[\w]+", text)]
        if len(spots) > 1:
            a, b = rnd.sample(spots, 2)
            return kind, text[:a.start()] + b.group(0) + text[a.end():]
    cut = rnd.randrange(len(text))
    return "cut", text[:cut]


def fuzz_ir(count, rnd, findings, timeout):
    seeds = [os.path.join(REPO, "examples", f) for f in ("mlp.mlir", "gpt.mlir", "llama.mlir")]
    texts = [open(f).read() for f in seeds]
    opt = os.path.join(bin_dir(), "ztrain-opt")
    found = []
    with tempfile.TemporaryDirectory() as work:
        for i in range(count):
            kind, text = mutate_ir(rnd.choice(texts), rnd)
            path = os.path.join(work, f"m{i}.mlir")
            with open(path, "w") as fh:
                fh.write(text)
            p, timed_out = run([opt, path, "--ztrain-training=optimizer=adam",
                                "--ztrain-zero=stage=3 dp=2 overlap=true", "--plan-memory",
                                "--lower-to-runtime", "-o", os.devnull], timeout)
            problem = classify(p, timed_out)
            if problem:
                found.append(record(findings, f"ir-{i}-{kind}.mlir", text.encode(), problem,
                                    p.stderr))
    return found


# -- valid models, random options -------------------------------------------------

def random_model(rnd):
    from ztrain import models
    size = lambda: rnd.choice([1, 2, 3, 4, 5, 7, 8, 16])
    kind = rnd.choice(["mlp", "gpt", "llama", "gpt-dropout"])
    if kind == "mlp":
        return models.mlp(batch=size(), in_features=size(),
                          hidden=[size() for _ in range(rnd.randrange(0, 3))],
                          classes=rnd.choice([2, 3, 5]))
    heads = rnd.choice([1, 2])
    width = heads * rnd.choice([2, 4])
    if kind == "llama":
        return models.llama(batch=size(), seq=size(), vocab=rnd.choice([2, 5, 16]),
                            layers=rnd.choice([0, 1, 2]), width=width, heads=heads)
    return models.gpt(batch=size(), seq=size(), vocab=rnd.choice([2, 5, 16]),
                      layers=rnd.choice([0, 1, 2]), width=width, heads=heads,
                      dropout=0.1 if kind == "gpt-dropout" else 0.0)


def random_options(rnd):
    opts = [f"--ztrain-training=optimizer={rnd.choice(['sgd', 'adam', 'adamw'])}"]
    if rnd.random() < 0.8:
        zero = [f"stage={rnd.choice([0, 1, 2, 3])}", f"dp={rnd.choice([1, 2, 3, 4, 7, 64])}"]
        if rnd.random() < 0.5:
            zero.append("overlap=true")
            zero.append(f"bucket-bytes={rnd.choice([0, 1, 64, 4096, 1 << 20])}")
            zero.append(f"prefetch-depth={rnd.choice([0, 1, 2, 5])}")
            zero.append(f"max-live-bytes={rnd.choice([0, 1, 512, 1 << 16])}")
        if rnd.random() < 0.3:
            zero.append(f"max-tile-bytes={rnd.choice([1, 16, 100, 4096])}")
        opts.append("--ztrain-zero=" + " ".join(zero))
    opts += ["--plan-memory", "--lower-to-runtime"]
    return opts


def fuzz_pipeline(count, rnd, findings, timeout):
    opt = os.path.join(bin_dir(), "ztrain-opt")
    found = []
    with tempfile.TemporaryDirectory() as work:
        for i in range(count):
            spec, options = random_model(rnd), random_options(rnd)
            path = os.path.join(work, f"p{i}.mlir")
            text = spec.to_mlir()
            with open(path, "w") as fh:
                fh.write(text)
            p, timed_out = run([opt, path] + options + ["-o", os.devnull], timeout)
            problem = classify(p, timed_out)
            if problem:
                found.append(record(findings, f"pipeline-{i}.mlir",
                                    ("// " + " ".join(options) + "\n" + text).encode(),
                                    problem, p.stderr))
    return found


# -- executable mutants -------------------------------------------------------------

def safetensors_bytes(tensors):
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def mutate_file(data, rnd):
    data = bytearray(data)
    head_len = struct.unpack("<Q", bytes(data[:8]))[0]
    kind = rnd.choice(["flip-header", "flip-data", "length", "cut", "json", "grow"])
    if kind == "flip-header":
        i = rnd.randrange(8, 8 + head_len)
        data[i] = rnd.randrange(256)
    elif kind == "flip-data" and len(data) > 8 + head_len:
        i = rnd.randrange(8 + head_len, len(data))
        data[i] ^= 1 << rnd.randrange(8)
    elif kind == "length":
        data[:8] = struct.pack("<Q", rnd.choice([0, 1, head_len - 1, head_len + 1, 1 << 40,
                                                 (1 << 64) - 1]))
    elif kind == "cut":
        data = data[:rnd.randrange(len(data))]
    elif kind == "json":
        head = bytes(data[8:8 + head_len]).decode(errors="replace")
        spots = list(re.finditer(r"\d+", head))
        if spots:
            m = rnd.choice(spots)
            head = head[:m.start()] + rnd.choice(["0", "-1", "99999999999999999999",
                                                  "1e400", "\"x\""]) + head[m.end():]
        enc = head.encode()
        data = bytearray(struct.pack("<Q", len(enc)) + enc + bytes(data[8 + head_len:]))
    else:
        data += bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 64)))
    return kind, bytes(data)


# FIFO stands for a path that exists and is not a regular file (the fuzzer
# makes one in its scratch directory): an output written over /dev/null
# once replaced the device node, as root, with a regular file.
FLAG_VALUES = ["-1", "0", "1", "nan", "1e400", "18446744073709551616", "", "x", "--save",
               "FIFO", "/", "/nonexistent/dir/f"]
FLAGS = ["--steps", "--seed", "--log-every", "--threads", "--checkpoint-every",
         "--keep-checkpoints", "--save", "--report", "--trace", "--save-checkpoint",
         "--resume", "--init", "--data", "--backend"]


def fuzz_exe(count, rnd, findings, timeout):
    import numpy as np
    from ztrain import models, parity
    found = []
    with tempfile.TemporaryDirectory() as work:
        spec = models.mlp(batch=2, in_features=4, hidden=[3], classes=3)
        src = os.path.join(work, "model.mlir")
        with open(src, "w") as fh:
            fh.write(spec.to_mlir())
        exe = os.path.join(work, "model")
        subprocess.run([os.path.join(bin_dir(), "ztrain-compile"), src, "-o", exe,
                        "--optimizer=sgd"], check=True)
        rng = np.random.default_rng(0)
        init = {p.name: ("F32", list(p.shape),
                         rng.standard_normal(p.shape).astype(np.float32).tobytes())
                for p in spec.params}
        data = {"x": ("F32", [4, 4], rng.standard_normal((4, 4)).astype(np.float32).tobytes()),
                "y": ("I32", [4], np.array([0, 1, 2, 1], np.int32).tobytes())}
        valid = {"--init": safetensors_bytes(init), "--data": safetensors_bytes(data)}
        # A valid checkpoint whose index is mutated for --resume.
        ckpt = os.path.join(work, "ck")
        subprocess.run([exe, "--steps", "1", "--save-checkpoint", ckpt], check=True,
                       stdout=subprocess.DEVNULL)
        index_path = os.path.join(ckpt, "global_step1", "index.json")
        index = open(index_path).read()
        for i in range(count):
            os.makedirs(os.path.join(work, "out"), exist_ok=True)
            roll = rnd.random()
            if roll < 0.15:
                spots = list(re.finditer(r'-?\d+|"[^"]*"', index))
                m = rnd.choice(spots)
                text = index[:m.start()] + rnd.choice(
                    ["-1", "0", "99999999999999999999", "1e400", '""', '"../x"', "[]", "{}",
                     "null", '"shard"', '"F16"']) + index[m.end():]
                with open(index_path, "w") as fh:
                    fh.write(text)
                cmd = [exe, "--steps", "1", "--resume", ckpt]
                name, payload = f"exe-{i}-resume-index.json", text.encode()
            elif roll < 0.75:
                flag = rnd.choice(["--init", "--data"])
                kind, blob = mutate_file(valid[flag], rnd)
                path = os.path.join(work, f"in{i}.safetensors")
                with open(path, "wb") as fh:
                    fh.write(blob)
                cmd = [exe, "--steps", "2", flag, path]
                name, payload = f"exe-{i}-{flag[2:]}-{kind}.safetensors", blob
            else:
                flag = rnd.choice(FLAGS)
                value = rnd.choice(FLAG_VALUES)
                if value == "FIFO":
                    value = os.path.join(work, "fifo")
                    if not os.path.exists(value):
                        os.mkfifo(value)
                cmd = [exe, "--steps", "2", flag, value] if value != "" else [exe, flag]
                name, payload = f"exe-{i}-flags.txt", " ".join(cmd[1:]).encode()
            # In a scratch directory: mutated flags name files ("x", "-1")
            # that the run may create.
            scratch = os.path.join(work, "out")
            p, timed_out = run(cmd, timeout, cwd=scratch)
            problem = classify(p, timed_out, runtime=True)
            shutil.rmtree(os.path.join(work, "out"), ignore_errors=True)
            if problem:
                found.append(record(findings, name, payload, problem, p.stderr))
            with open(index_path, "w") as fh:
                fh.write(index)
    return found


def record(findings, name, payload, problem, stderr):
    if findings:
        os.makedirs(findings, exist_ok=True)
        with open(os.path.join(findings, name), "wb") as fh:
            fh.write(payload)
        with open(os.path.join(findings, name + ".txt"), "w") as fh:
            fh.write(problem + "\n" + stderr[-4000:])
    return f"{name}: {problem}: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=["ir", "pipeline", "exe"], required=True)
    ap.add_argument("--count", type=int, default=200, help="mutants to run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per run")
    ap.add_argument("--findings", help="directory for inputs that broke the contract")
    a = ap.parse_args(argv)
    rnd = random.Random(a.seed)
    fuzz = {"ir": fuzz_ir, "pipeline": fuzz_pipeline, "exe": fuzz_exe}[a.target]
    found = fuzz(a.count, rnd, a.findings, a.timeout)
    for line in found:
        print(line)
    print(f"{a.target}: {a.count} mutants, seed {a.seed}: {len(found)} findings")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

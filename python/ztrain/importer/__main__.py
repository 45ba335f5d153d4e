"""python3 -m ztrain.importer model.py:GPT --config '{...}' --batch 8 --seq 64
       -o gpt.mlir --init gpt.safetensors

Imports an unchanged PyTorch model file for training with ztrain
(docs/import.md). Any error is one message and exit status 1, and leaves no
output file.
"""

import argparse
import json
import os
import sys

PROG = "ztrain.importer"


def _fail(msg):
    sys.stderr.write(f"{PROG}: error: {msg}\n")
    sys.exit(1)


def _parser():
    ap = argparse.ArgumentParser(
        prog=f"python3 -m {PROG}",
        description="Import an unchanged PyTorch nn.Module (file.py:Name) into ztrain's "
                    "train dialect, with its initial weights as a safetensors file.")
    ap.add_argument("model", nargs="?", help="FILE.py:NAME, NAME a class (built with "
                    "--config's keys), a function returning a module, or a module")
    ap.add_argument("--config", default="{}", help="JSON object of keyword arguments for "
                    "NAME (or @file.json)")
    ap.add_argument("--batch", type=int, help="batch size of a language model's inputs")
    ap.add_argument("--seq", type=int, help="sequence length: the forward's first "
                    "argument and its targets (an argument named targets, labels, target "
                    "or y, else the second) are [batch, seq] token ids; with --loss only "
                    "the first, the target named 'targets'")
    ap.add_argument("--input", action="append", default=[], metavar="NAME:SHAPE[:DTYPE]",
                    help="an input of the forward, e.g. x:32x784 or ids:8x64:int64 "
                    "(repeat, in the forward's order; dtype float32 or int64)")
    ap.add_argument("--loss", help="a loss applied to the forward's output: "
                    "cross_entropy or mse (omit when the forward returns the loss)")
    ap.add_argument("--target", metavar="NAME:SHAPE[:DTYPE]",
                    help="with --loss: the target input, e.g. y:32:int64")
    ap.add_argument("-o", "--output", help="the train-dialect .mlir to write")
    ap.add_argument("--init", help="the safetensors file of the module's initial "
                    "parameters and buffers (pass it to the executable's --init)")
    ap.add_argument("--seed", type=int, default=0,
                    help="torch.manual_seed before the module is built (default 0)")
    ap.add_argument("--ops", action="store_true",
                    help="print the table of supported aten ops (markdown) and exit")
    return ap


def _spec(text, what):
    import torch
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        _fail(f"{what} {text!r}: expected NAME:SHAPE[:DTYPE], e.g. x:32x784 or y:32:int64")
    try:
        shape = [int(d) for d in parts[1].lower().split("x")]
    except ValueError:
        _fail(f"{what} {text!r}: the shape {parts[1]!r} is not dims joined by 'x'")
    if any(d <= 0 for d in shape):
        _fail(f"{what} {text!r}: dimensions must be positive")
    dt = parts[2] if len(parts) == 3 else "float32"
    dtypes = {"float32": torch.float32, "f32": torch.float32, "int64": torch.long,
              "i64": torch.long, "long": torch.long, "int32": torch.int32, "i32": torch.int32}
    if dt not in dtypes:
        _fail(f"{what} {text!r}: dtype {dt!r} (expected float32 or int64)")
    dtype = dtypes[dt]
    g = torch.Generator().manual_seed(1)
    t = torch.randn(shape, generator=g) if dtype.is_floating_point else \
        torch.zeros(shape, dtype=dtype)
    return parts[0], t


def _load_model(ref, config, seed):
    import importlib.util
    import torch
    if ":" not in ref:
        _fail(f"model {ref!r}: expected FILE.py:NAME")
    path, name = ref.rsplit(":", 1)
    if not os.path.isfile(path):
        _fail(f"model file {path!r} does not exist")
    d = os.path.dirname(os.path.abspath(path))
    if d not in sys.path:
        sys.path.insert(0, d)
    modname = "_ztrain_user_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        _fail(f"loading {path} failed: {type(e).__name__}: {e}")
    if not hasattr(mod, name):
        names = [k for k, v in vars(mod).items() if isinstance(v, type) and
                 issubclass(v, torch.nn.Module) and v.__module__ == modname]
        _fail(f"{path} has no {name!r}" + (f" (its modules: {', '.join(names)})"
                                            if names else ""))
    obj = getattr(mod, name)
    torch.manual_seed(seed)
    if isinstance(obj, torch.nn.Module):
        return obj
    if not callable(obj):
        _fail(f"{path}:{name} is neither a module, a class nor a function")
    call = _constructor_call(obj, name, config, mod, modname)
    try:
        model = call()
    except Exception as e:
        text = str(e).strip().splitlines()
        _fail(f"building {name} failed: {type(e).__name__}: {text[0] if text else ''}")
    if not isinstance(model, torch.nn.Module):
        _fail(f"{path}:{name}(...) returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def _constructor_call(obj, name, config, mod, modname):
    """How --config's keys reach NAME: as keyword arguments when they are
    its parameters, else (nanoGPT's GPT(config)) as one config object: the
    parameter's annotated class, NAMEConfig or the file's one *Config class,
    else a namespace. Decided before calling, so an error raised inside the
    constructor is reported as itself."""
    import inspect
    from types import SimpleNamespace
    try:
        params = [p for p in inspect.signature(obj).parameters.values()]
    except (TypeError, ValueError):
        return lambda: obj(**config)
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(p.kind == p.VAR_KEYWORD for p in params) or set(config) <= names:
        return lambda: obj(**config)
    required = [p for p in params if p.default is p.empty and
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(required) != 1:
        unknown = ", ".join(sorted(set(config) - names))
        _fail(f"--config: {name} has no parameter {unknown} (it takes "
              f"{', '.join(p.name for p in params) or 'none'})")
    p = required[0]
    cls = p.annotation if isinstance(p.annotation, type) and \
        p.annotation is not p.empty else None
    if cls is None and isinstance(p.annotation, str):
        cls = getattr(mod, p.annotation, None)
        cls = cls if isinstance(cls, type) else None
    if cls is None:
        cls = getattr(mod, name + "Config", None)
        cls = cls if isinstance(cls, type) else None
    if cls is None:
        found = [v for k, v in vars(mod).items() if isinstance(v, type) and
                 k.endswith("Config") and v.__module__ == modname]
        cls = found[0] if len(found) == 1 else None
    if cls is None:
        return lambda: obj(SimpleNamespace(**config))
    try:
        cfg = cls(**config)
    except TypeError as e:
        _fail(f"--config: building {cls.__name__} for {name}({p.name}) failed: {e}")
    return lambda: obj(cfg)


def _lm_inputs(model, loss):
    """--batch/--seq: the forward's token argument (its first) and, without
    --loss, its targets, found by name (targets, labels, target, y) before
    falling back to the second argument."""
    import inspect
    params = [p.name for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not params:
        _fail("the forward takes no named arguments; --seq needs (tokens, targets)")
    if loss:
        return params[:1]
    for t in ("targets", "labels", "target", "y"):
        if t in params[1:]:
            return [params[0], t]
    if len(params) < 2:
        _fail(f"the forward takes one argument ({params[0]}); --seq needs (tokens, "
              "targets), or (tokens) with --loss")
    return params[:2]


def main(argv=None):
    args = _parser().parse_args(argv)
    from . import import_module, ImportFailure
    from .lower import table_markdown
    if args.ops:
        sys.stdout.write(table_markdown())
        return 0
    if not args.model:
        _fail("no model given (FILE.py:NAME)")
    if not args.output:
        _fail("no output given (-o FILE.mlir)")
    cfg = args.config
    try:
        if cfg.startswith("@"):
            with open(cfg[1:]) as fh:
                cfg = fh.read()
        config = json.loads(cfg)
    except (OSError, ValueError) as e:
        _fail(f"--config: {e}")
    if not isinstance(config, dict):
        _fail("--config must be a JSON object")
    for path, flag in ((args.output, "-o"), (args.init, "--init")):
        if path:
            d = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(d):
                _fail(f"{flag} {path!r}: the directory {d!r} does not exist")
            if not os.access(d, os.W_OK):
                _fail(f"{flag} {path!r}: the directory {d!r} is not writable")
    import torch
    model = _load_model(args.model, config, args.seed)
    inputs, targets = {}, None
    if args.seq is not None or args.batch is not None:
        if args.seq is None or args.batch is None:
            _fail("--batch and --seq go together")
        if args.input:
            _fail("--input and --batch/--seq are two ways to give the inputs; use one")
        if args.batch <= 0 or args.seq <= 0:
            _fail("--batch and --seq must be positive")
        for p in _lm_inputs(model, args.loss):
            inputs[p] = torch.zeros(args.batch, args.seq, dtype=torch.long)
        if args.loss:
            targets = {"targets": torch.zeros(args.batch, args.seq, dtype=torch.long)}
    else:
        for spec in args.input:
            k, t = _spec(spec, "--input")
            if k in inputs:
                _fail(f"--input {k!r} given twice")
            inputs[k] = t
        if not inputs:
            _fail("no inputs: give --batch and --seq (a language model) or --input")
    if args.loss and targets is None:
        if not args.target:
            _fail("--loss needs --target NAME:SHAPE[:DTYPE] (or --batch/--seq)")
        k, t = _spec(args.target, "--target")
        targets = {k: t}
    elif args.target and not args.loss:
        _fail("--target without --loss")
    try:
        imp = import_module(model, inputs, loss=args.loss, targets=targets)
        imp.write(args.output, args.init)
    except ImportFailure as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"writing the output failed: {e}")
    n_params = imp.num_params
    print(f"{PROG}: wrote {args.output}" + (f" and {args.init}" if args.init else "") +
          f": {n_params:,} trainable parameters, inputs " +
          ", ".join(f"{k} {'x'.join(map(str, s))} {d}" for k, s, d in imp.inputs))
    for k, v in imp.aliases.items():
        print(f"  tied: {k} is {v} (one parameter)")
    if len(imp.frozen) <= 4:
        for k in imp.frozen:
            print(f"  frozen: {k} (requires_grad=False): no gradient, no optimizer state")
    elif imp.frozen:
        print(f"  frozen: {len(imp.frozen)} parameters with requires_grad=False "
              f"({', '.join(imp.frozen[:3])}, ...; all listed in {args.output}'s "
              "header): no gradient, no optimizer state")
    for note in imp.notes:
        print(f"  note: {note}")
    if not args.init:
        ext = "init(external)" in imp.mlir
        print("  note: without --init the run starts from the declared rules, not the "
              "module's weights" + ("; its init(external) buffers need the file" if ext
                                   else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

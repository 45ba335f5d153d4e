"""Bring your own PyTorch model: an unchanged nn.Module -> train-dialect IR.

    from ztrain.importer import import_module
    imp = import_module(model, {"idx": idx, "targets": targets})
    imp.write("gpt.mlir", "gpt.safetensors")

or, from a shell, `python3 -m ztrain.importer model.py:GPT --batch 8 --seq 64
-o gpt.mlir --init gpt.safetensors`. The importer is a front end only: it
captures the forward and the loss (capture.py), lowers each aten op through
one table (lower.py) and writes IR plus the module's own weights. Autodiff,
sharding, memory and everything else are the compiler's passes.
docs/import.md is the user's guide.
"""

import inspect
import math
from collections import OrderedDict

from .capture import ImportFailure, describe_where, state_names, trace
from . import lower as _lower

__all__ = ["import_module", "Imported", "ImportFailure", "LOSSES"]


def _cross_entropy(out, target):
    import torch.nn.functional as F
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))


def _mse(out, target):
    import torch.nn.functional as F
    return F.mse_loss(out, target)


# Losses a command line can name (`--loss NAME`): loss(output, target).
LOSSES = {"cross_entropy": _cross_entropy, "mse": _mse}


class Imported:
    """The result: IR text, the `--init` tensors (state names -> numpy) and
    what the user should know (aliases of tied weights, notes)."""

    def __init__(self, mlir, init, inputs, aliases, notes, frozen, num_params=0,
                 module=None):
        self.mlir = mlir
        self.module = module          # the ztrain.ir.Module (torch_ref.run_ir runs it)
        self.num_params = num_params  # trainable elements
        self.init = init
        self.inputs = inputs        # [(name, shape, "i32"|"f32")]
        self.aliases = aliases      # {other name: canonical name} (tied weights)
        self.notes = notes
        self.frozen = frozen        # names of requires_grad=False parameters

    def write(self, mlir_path, init_path=None):
        """Writes the IR and (when given) the --init safetensors, each
        atomically: a failure leaves no partial file."""
        import os
        import tempfile
        from ztrain import safetensors

        umask = os.umask(0)
        os.umask(umask)
        jobs = []
        if init_path is not None:
            meta = {"format": "pt", "producer": "ztrain.importer"}
            if self.aliases:
                meta["tied"] = ",".join(f"{k}={v}" for k, v in self.aliases.items())
            jobs.append((init_path, lambda p: safetensors.save(p, self.init, meta)))

        def write_ir(p):
            with open(p, "w") as f:
                f.write(self.mlir)
        jobs.append((mlir_path, write_ir))
        # Both files are written to temporaries first and renamed only when
        # both are whole: a failure leaves neither, never an IR without its
        # weights. Permissions follow the umask, as open() would give.
        temps = []
        try:
            for path, write in jobs:
                d = os.path.dirname(os.path.abspath(path))
                fd, tmp = tempfile.mkstemp(prefix=".ztrain-import-", dir=d)
                os.close(fd)
                temps.append(tmp)
                write(tmp)
                os.chmod(tmp, 0o666 & ~umask)
            for (path, _), tmp in zip(jobs, temps):
                os.replace(tmp, path)
        except BaseException:
            for tmp in temps:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            raise


def _loss_of(out):
    """The scalar loss a forward returned: a tensor, `(logits, loss)`, a
    dict or an object with `.loss` (Hugging Face's outputs)."""
    import torch
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) and "loss" in out:
        return out["loss"]
    if hasattr(out, "loss") and isinstance(getattr(out, "loss"), torch.Tensor):
        return out.loss
    if isinstance(out, (tuple, list)):
        scalars = [o for o in out if isinstance(o, torch.Tensor) and o.dim() == 0]
        if len(scalars) == 1:
            return scalars[0]
    return out


def _check_scalar_loss(out, what):
    import torch
    if not isinstance(out, torch.Tensor) or out.dim() != 0 or \
            not out.dtype.is_floating_point:
        desc = type(out).__name__
        if isinstance(out, torch.Tensor):
            desc = f"a tensor of shape {list(out.shape)} and dtype {out.dtype}"
        raise ImportFailure(
            f"{what} returns {desc}, not a scalar loss: pass a loss "
            "(--loss cross_entropy, or import_module(..., loss=fn)) or make the forward "
            "return (output, loss) when given targets")
    return out


def import_module(module, inputs, loss=None, targets=None, name="loss"):
    """Imports `module` (an nn.Module, used unchanged) for training.

    inputs: the example batch, an ordered dict {name: tensor} (names are the
      step's input names, fed from data files) or a tuple, named after the
      forward's parameters. Integer tensors become i32 inputs.
    loss: None when the forward returns the loss (a scalar, `(logits, loss)`
      given targets, or an object with `.loss`); else a name from LOSSES or a
      callable loss(output, target) -> scalar.
    targets: with `loss`, the target batch: {name: tensor} (one entry) or a
      tensor named "targets". It is an input of the step, not of the forward.
    """
    import torch
    if not isinstance(module, torch.nn.Module):
        raise ImportFailure(f"the model is a {type(module).__name__}, not a torch.nn.Module")
    fwd = inspect.signature(module.forward)
    if not isinstance(inputs, dict):
        if isinstance(inputs, torch.Tensor):
            inputs = (inputs,)
        params = [p for p in fwd.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(inputs) > len(params):
            raise ImportFailure(f"{len(inputs)} inputs given; the forward takes "
                                f"{len(params)} positional arguments")
        inputs = OrderedDict((p.name, t) for p, t in zip(params, inputs))
    inputs = OrderedDict(inputs)
    named = {p.name for p in fwd.parameters.values()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in fwd.parameters.values())
    for k in inputs:
        if k not in named and not takes_kwargs:
            raise ImportFailure(f"input {k!r} is not an argument of the forward (it takes "
                                f"{', '.join(named) or 'no named arguments'})")
    for k, t in inputs.items():
        if not isinstance(t, torch.Tensor):
            raise ImportFailure(f"input {k!r} is a {type(t).__name__}, not a tensor: "
                                "every input of a training step is a tensor with a "
                                "batch dimension")
        if t.dim() == 0:
            raise ImportFailure(f"input {k!r} has no batch dimension (a 0-d tensor)")
    loss_fn = None
    if loss is not None:
        if isinstance(loss, str):
            if loss not in LOSSES:
                raise ImportFailure(f"unknown loss {loss!r} (known: {', '.join(LOSSES)})")
            loss_fn = LOSSES[loss]
        elif callable(loss):
            loss_fn = loss
        else:
            raise ImportFailure(f"loss must be a name or a callable, got {loss!r}")
        if targets is None:
            raise ImportFailure("a loss needs targets (--target, or targets= in the API)")
        if isinstance(targets, torch.Tensor):
            targets = {"targets": targets}
        targets = OrderedDict(targets)
        if len(targets) != 1 or not isinstance(next(iter(targets.values())), torch.Tensor):
            raise ImportFailure("targets must be one tensor (or {name: tensor})")
        clash = set(targets) & set(inputs)
        if clash:
            raise ImportFailure(f"the target name {clash.pop()!r} is also an input name")
    elif targets is not None:
        raise ImportFailure("targets given without a loss: a forward that takes targets "
                            "gets them as an input")
    step_inputs = OrderedDict(inputs)
    if targets:
        step_inputs.update(targets)

    for k, t in step_inputs.items():
        if t.dtype == torch.bool or t.dtype.is_complex or (
                t.dtype.is_floating_point and t.dtype != torch.float32):
            raise ImportFailure(f"input {k!r} is {t.dtype}: inputs are float32 or integer "
                                "tensors")

    ptensors, btensors = state_names(module)
    for t, names in ptensors:
        if t.dtype != torch.float32:
            raise ImportFailure(f"parameter {names[0]!r} is {t.dtype}: import a float32 "
                                "model (module.float()); ztrain-compile --precision=bf16 "
                                "trains in bf16")
    flat = [t for t, _ in ptensors] + [t for t, _ in btensors]
    slots = [names for _, names in ptensors] + [names for _, names in btensors]
    n_in = len(inputs)
    in_names = list(inputs)
    n_state = len(flat)

    from torch.nn.utils.stateless import functional_call

    def step(*args):
        state, xs = args[:n_state], args[n_state:]
        mapping = {}
        for t, names in zip(state, slots):
            for nm in names:            # every name of a tied weight
                mapping[nm] = t
        # By name, so that forward(input_ids, attention_mask=None,
        # labels=None) gets labels as labels.
        out = functional_call(module, mapping, (), dict(zip(in_names, xs[:n_in])))
        out = _loss_of(out)
        if loss_fn is not None:
            out = loss_fn(out, xs[n_in])
        return _check_scalar_loss(out, "the forward" if loss_fn is None else "the loss")

    example = [t.detach() for t in flat] + list(step_inputs.values())
    was_training = module.training
    module.train()
    try:
        try:
            gm = trace(module, step, example)
        except ImportFailure:
            raise
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # the model's own error (or exit) in forward
            import traceback
            tb = traceback.extract_tb(e.__traceback__)
            user = [fr for fr in tb if "site-packages" not in fr.filename and
                    "dist-packages" not in fr.filename and "/ztrain/" not in fr.filename]
            where = f" ({user[-1].filename}:{user[-1].lineno}: {user[-1].line})" if user else ""
            text = str(e).strip().splitlines()
            text = text[0] + (" ..." if len(text) > 1 else "") if text else ""
            if isinstance(e, SystemExit):
                text = f"the forward called sys.exit({e.code!r})"
            raise ImportFailure(f"running the forward on the example batch failed{where}: "
                                f"{type(e).__name__}: {text}") from None
    finally:
        module.train(was_training)
    return _lower_graph(gm, module, ptensors, btensors, step_inputs, name)


def _mark_blocks(module, nodes, env, live, f):
    """Marks the output of every block of a ModuleList (a transformer's
    layers) `train.checkpoint`: the segment boundaries `--recompute` keeps,
    as the builders' models mark theirs."""
    import torch
    from ztrain import ir
    blocks = []
    for path, mod in module.named_modules():
        if isinstance(mod, torch.nn.ModuleList):
            blocks += [f"{path}.{i}" if path else str(i) for i in range(len(mod))]

    def inside(n, p):
        mp = n.meta.get("ztrain_where", ("", None))[0]
        return mp == p or mp.startswith(p + ".")
    for p in blocks:
        last = None
        for n in nodes:
            if n.op == "call_function" and id(n) in live and inside(n, p) and \
                    any(not inside(u, p) for u in n.users):
                last = n
        arg = env.get(last) if last is not None else None
        if not isinstance(arg, _lower.Arg) or arg.sym is None or arg.sym._value is None:
            continue
        try:
            f.checkpoint(arg.sym._value)
        except ir.IRError:
            pass


def _as_meta(x):
    import torch
    if isinstance(x, torch.Tensor):
        return x if x.is_meta else torch.empty(x.shape, dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_as_meta(y) for y in x)
    if isinstance(x, dict):
        return {k: _as_meta(v) for k, v in x.items()}
    return x


def _meta_run(n, args, kwargs):
    """The node's outputs as meta tensors: its op on meta inputs, or, for an
    op without a meta kernel, the shape the trace recorded."""
    import torch
    try:
        return n.target(*_as_meta(args), **_as_meta(kwargs))
    except (NotImplementedError, RuntimeError):
        tm = n.meta.get("tensor_meta")
        if tm is not None and hasattr(tm, "shape"):
            return torch.empty(tm.shape, dtype=tm.dtype, device="meta")
        outs = []
        for u in n.users:
            if u.target.__name__ == "getitem":
                tmu = u.meta.get("tensor_meta")
                i = u.args[1]
                while len(outs) <= i:
                    outs.append(None)
                outs[i] = torch.empty(tmu.shape, dtype=tmu.dtype, device="meta")
        if outs and all(o is not None for o in outs):
            return tuple(outs)
        raise ImportFailure(f"{describe_where(n)}: cannot tell the shape of {n.target}")


def _lower_graph(gm, module, ptensors, btensors, step_inputs, fname):
    import torch
    from ztrain import ir

    graph = gm.graph
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    n_p, n_b = len(ptensors), len(btensors)
    pnodes = placeholders[:n_p]
    bnodes = placeholders[n_p:n_p + n_b]
    inodes = placeholders[n_p + n_b:]

    frozen = [names[0] for t, names in ptensors if not t.requires_grad]
    # Frozen parameters are parameters of the step too (train.param frozen),
    # so that what the model does with them is lowered, not folded into
    # anonymous constants: sharded at stage 3, in checkpoints by name.
    params = {id(n) for n in pnodes}
    trainable = {id(n) for n, (t, _) in zip(pnodes, ptensors) if t.requires_grad}
    if ptensors and not trainable:
        raise ImportFailure("every parameter of the model is frozen (requires_grad=False): "
                            "there is nothing to train")

    # In-place updates of the module's state survive functionalization as a
    # copy_ into the placeholder.
    for n in nodes:
        if n.op == "call_function" and str(n.target).startswith("aten.copy_") and \
                n.args and n.args[0] in pnodes + bnodes:
            i = (pnodes + bnodes).index(n.args[0])
            nm = (ptensors + btensors)[i][1][0]
            src = n.args[1] if len(n.args) > 1 and isinstance(n.args[1], torch.fx.Node) \
                else n
            raise ImportFailure(f"{describe_where(src)}: the forward updates {nm!r} in place; "
                                "a training step may not change parameters or buffers "
                                "outside the optimizer")

    # Only what the loss depends on is imported: a value the forward computes
    # and drops (a debugging statistic, an unused head) is neither lowered nor
    # refused.
    out_node = next(n for n in nodes if n.op == "output")
    needed, todo = set(), [out_node]
    while todo:
        n = todo.pop()
        if id(n) in needed:
            continue
        needed.add(id(n))
        todo.extend(n.all_input_nodes)
    nodes = [n for n in nodes if id(n) in needed or n.op == "placeholder"]

    # Which nodes depend on a trainable parameter or an input (the rest fold),
    # and which on a trainable parameter (gradient flows through them).
    live = {id(n) for n in inodes} | params
    grad = set(trainable)
    for n in nodes:
        if n.op == "call_function" and any(id(d) in grad for d in n.all_input_nodes):
            grad.add(id(n))
            if str(n.target) == "aten.detach.default":
                raise ImportFailure(
                    f"{describe_where(n)}: .detach() (or .data) of a value computed from "
                    "trainable parameters: PyTorch stops its gradient there and ztrain has "
                    "no stop-gradient op yet; compute it from the inputs or a buffer")
            if not n.meta.get("ztrain_grad", True):
                raise ImportFailure(
                    f"{describe_where(n)}: {n.target} on trainable parameters runs under "
                    "torch.no_grad(), so PyTorch gives it no gradient; ztrain has no "
                    "stop-gradient op yet")
    for n in nodes:
        if n.op == "call_function":
            deps = n.all_input_nodes
            if any(id(d) in live for d in deps):
                live.add(id(n))
            elif str(n.target) in _lower.DROPOUT_MASKS:
                # Dropout's Bernoulli mask: a step value (ztrain draws it),
                # never a folded constant.
                live.add(id(n))
            elif str(n.target) in _lower.RANDOM:
                raise ImportFailure(f"{describe_where(n)}: {n.target} draws random numbers "
                                    "outside dropout, which ztrain cannot reproduce")

    unsupported = []
    for n in nodes:
        if n.op == "call_function" and id(n) in live:
            t = str(n.target)
            if n.target.__module__ == "_operator" or t.startswith("<built-in function"):
                continue
            if t not in _lower.ATEN:
                why = " (its output shape depends on the data)" if t in _lower.DATA_DEPENDENT \
                    else ""
                unsupported.append(f"  {t}{why} at {describe_where(n)}")
    if unsupported:
        uniq = list(OrderedDict.fromkeys(unsupported))
        raise ImportFailure(f"{len(uniq)} use{'s' if len(uniq) > 1 else ''} of aten ops "
                            "ztrain cannot import yet (docs/import.md lists what it can):\n"
                            + "\n".join(uniq))

    m = ir.Module()
    f = m.entry(fname)
    L = _lower.Lowerer(m, f, None)
    init = OrderedDict()
    env = {}
    aliases = {}
    # Parameters: declared with a rule that resembles their values (a run
    # without --init starts from it), read lazily.
    for n, (t, names) in zip(pnodes, ptensors):
        for other in names[1:]:
            aliases[other] = names[0]
        arr = t.detach().float().cpu().numpy()
        fixed = not t.requires_grad
        if not arr.any():
            p = m.param(names[0], list(arr.shape) or [1], "zeros", frozen=fixed)
        elif (arr == 1).all():
            p = m.param(names[0], list(arr.shape), "ones", frozen=fixed)
        else:
            std = float(arr.std()) if arr.size > 1 else abs(float(arr.reshape(-1)[0]))
            p = m.param(names[0], list(arr.shape), "normal", std if std > 0 else 1.0,
                        frozen=fixed)
        init[names[0]] = arr
        env[n] = _lower.Arg(t.detach(), _lower.Lazy(
            lambda p=p: f.param_read(p, hint=p.name.replace(".", "_"))))
        if t.dim() == 0:
            raise ImportFailure(f"parameter {names[0]!r} is a 0-d tensor; parameters need "
                                "at least one dimension")
    for n, (t, names) in zip(bnodes, btensors):
        for other in names[1:]:
            aliases[other] = names[0]
        L.const_names[id(t)] = names[0]
        env[n] = _lower.Arg(t, None, n)
    inputs = []
    for n, (k, t) in zip(inodes, step_inputs.items()):
        dt = "i32" if not t.dtype.is_floating_point else "f32"
        if dt == "i32" and t.numel() and (int(t.min()) < -2**31 or int(t.max()) >= 2**31):
            raise ImportFailure(f"input {k!r} has values outside int32")
        v = f.arg(k, list(t.shape), dt)
        env[n] = _lower.Arg(t, _lower.Lazy(value=v))
        inputs.append((k, list(t.shape), dt))

    def resolve(x):
        if isinstance(x, torch.fx.Node):
            return env[x]
        if isinstance(x, (list, tuple)):
            return type(x)(resolve(y) for y in x)
        if isinstance(x, dict):
            return {k: resolve(v) for k, v in x.items()}
        return x

    def real(x):
        if isinstance(x, _lower.Arg):
            return x.real
        if isinstance(x, (list, tuple)):
            return type(x)(real(y) for y in x)
        if isinstance(x, dict):
            return {k: real(v) for k, v in x.items()}
        return x

    out_node = None
    with torch.no_grad():
        for n in nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                out_node = n
                break
            if n.op == "get_attr":
                # A tensor made inside the forward (torch.tensor([...]),
                # a plain attribute tensor): a constant.
                env[n] = _lower.Arg(getattr(gm, n.target), None, n)
                continue
            if n.op != "call_function":
                raise ImportFailure(f"{describe_where(n)}: unexpected graph node {n.op}")
            L.node = n
            args, kwargs = resolve(n.args), resolve(n.kwargs)
            if n.target.__module__ == "_operator" and n.target.__name__ == "getitem":
                src, i = args
                if isinstance(src, tuple) and isinstance(src[0], _lower.Arg):
                    env[n] = src[i]
                    continue
                raise ImportFailure(f"{describe_where(n)}: unexpected getitem")
            if id(n) in live:
                # Only the shape and dtype of a step value matter here: run
                # the op on meta tensors (no arithmetic), so the forward's
                # FLOPs are paid once, by the trace.
                value = _meta_run(n, real(args), real(kwargs))
            else:
                value = n.target(*real(args), **real(kwargs))
            if id(n) not in live:
                if isinstance(value, (tuple, list)):
                    env[n] = tuple(_lower.Arg(v, None, n) for v in value)
                else:
                    env[n] = _lower.Arg(value, None, n)
                continue
            handler = _lower.ATEN[str(n.target)][0]
            try:
                sym = handler(L, value, list(args), dict(kwargs))
            except ir.IRError as e:
                raise ImportFailure(f"{describe_where(n)}: {e}") from None
            if isinstance(value, (tuple, list)):
                env[n] = tuple(_lower.Arg(v, s) for v, s in zip(value, sym))
            else:
                env[n] = _lower.Arg(value, sym)
        outs = out_node.args[0]
        out = outs[0] if isinstance(outs, (list, tuple)) else outs
        res = env[out]
        if res.const:
            raise ImportFailure("the loss does not depend on any trainable parameter or "
                                "input")
        L.node = out
        try:
            loss = res.sym.get()
            if tuple(loss.shape) != ():
                loss = f.reshape(loss, ())
            f.ret(loss)
        except ir.IRError as e:
            raise ImportFailure(f"{describe_where(out)}: {e}") from None
    _mark_blocks(module, nodes, env, live, f)
    # --init: parameters, then buffers.
    for name, arr in L.buffer_values.items():
        init[name] = arr
    header = ["// Imported by ztrain.importer from "
              f"{type(module).__module__}.{type(module).__name__}."]
    for k, v in aliases.items():
        header.append(f"// tied: {k} is {v}")
    for k in frozen:
        header.append(f"// frozen (requires_grad=False): {k}")
    ext = [b.name for b in m.buffers if b.init == "external"]
    if ext:
        header.append("// buffers with init(external) take their values from the --init "
                      "file the importer wrote")
    mlir = "\n".join(header) + "\n" + m.to_mlir()
    num = sum(math.prod(p.shape) for p in m.params if not p.frozen)
    return Imported(mlir, init, inputs, aliases, L.notes, frozen, num, m)

"""Capture: an unchanged nn.Module's forward + loss as an aten graph.

torch 1.13 (Debian 12's python3-torch) has functorch's `make_fx` and
`functionalize`, and no `torch.export` or dynamo, so the graph is captured by
concrete tracing: the forward runs once, for real, on the example batch, and
every aten op it dispatches becomes a node (Python control flow such as
`if targets is not None` simply runs). Real-mode tracing, not fake tensors,
because fake-mode `functional_call` does not see tied weights and
`repeat_interleave` has a data-dependent shape there (docs/import.md).

Each node remembers where it came from: the module path of the innermost
module whose forward was running (`transformer.h.0.attn`) and the innermost
frame of the user's own code (file, line, source text), so an unsupported op
can be reported in the user's terms.
"""

import inspect
import linecache
import os
import sys
from contextlib import contextmanager


class ImportFailure(Exception):
    """A model the importer refuses: the message is for the user, whole."""


_HERE = os.path.dirname(os.path.abspath(__file__))


def _library_dirs():
    import torch
    dirs = [os.path.dirname(os.path.abspath(torch.__file__)), _HERE,
            os.path.dirname(_HERE)]
    try:
        import functorch
        dirs.append(os.path.dirname(os.path.abspath(functorch.__file__)))
    except ImportError:  # pragma: no cover - functorch ships with torch 1.13
        pass
    std = os.path.dirname(os.path.abspath(inspect.__file__))
    dirs.append(std)
    return tuple(d + os.sep for d in dirs)


def state_names(module):
    """Parameters and buffers with every name they have (tied weights have
    several), in `state_dict` order.

    Returns (params, buffers): lists of (tensor, [names]) grouped by tensor
    identity, the first name the canonical one. Buffers that are not
    persistent (absent from the state_dict) keep their attribute path."""
    params, buffers, seen = [], [], {}
    for mpath, mod in module.named_modules(remove_duplicate=False):
        prefix = mpath + "." if mpath else ""
        for kind, table, out in (("p", mod._parameters, params),
                                 ("b", mod._buffers, buffers)):
            for n, t in table.items():
                if t is None:
                    continue
                name = prefix + n
                if id(t) in seen:
                    if name not in seen[id(t)][1]:
                        seen[id(t)][1].append(name)
                    continue
                entry = (t, [name])
                seen[id(t)] = entry
                out.append(entry)
    # Canonical name: the first in state_dict order (nanoGPT's tied
    # `transformer.wte.weight`, not `lm_head.weight`).
    order = {k: i for i, k in enumerate(module.state_dict(keep_vars=True).keys())}
    for _, names in params + buffers:
        names.sort(key=lambda n: order.get(n, len(order)))
    return params, buffers


@contextmanager
def _provenance(module):
    """Records, for every node the tracer creates, the running module's path
    and the user's innermost source frame (node.meta['ztrain_where'])."""
    import torch
    from torch.fx.experimental import proxy_tensor

    paths = {}
    for name, mod in module.named_modules(remove_duplicate=False):
        paths.setdefault(id(mod), name)
    stack = []

    def pre(mod, args):
        stack.append(paths.get(id(mod), type(mod).__name__))

    def post(mod, args, out):
        if stack:
            stack.pop()

    libs = _library_dirs()
    original = proxy_tensor.PythonKeyTracer.create_node

    def user_frame(frame):
        while frame is not None:
            raw = frame.f_code.co_filename
            fn = os.path.abspath(raw)
            if not raw.startswith("<") and not fn.startswith(libs):
                line = linecache.getline(fn, frame.f_lineno).strip()
                return (fn, frame.f_lineno, line)
            frame = frame.f_back
        return None

    def create_node(self, *args, **kwargs):
        node = original(self, *args, **kwargs)
        where = user_frame(sys._getframe(1))
        node.meta["ztrain_where"] = (stack[-1] if stack else "", where)
        # torch.no_grad() in the forward: a value computed there gets no
        # gradient in PyTorch; the lowering refuses it on a parameter's path.
        node.meta["ztrain_grad"] = torch.is_grad_enabled()
        return node

    # `.data` is invisible in a functionalized trace (it is the same value
    # to the tracer) but stops PyTorch's gradient: the user's code may not
    # use it in the forward. Library code's own uses are its business.
    base_data = torch._C._TensorBase.__dict__["data"]

    def data_get(t):
        frame = sys._getframe(1)
        raw = frame.f_code.co_filename
        if not raw.startswith("<") and not os.path.abspath(raw).startswith(libs):
            where = user_frame(frame)
            mpath = stack[-1] if stack else ""
            fn, line, text = where
            raise ImportFailure(
                f"{mpath or '<top>'} ({os.path.basename(fn)}:{line}: {text}): .data in the "
                "forward stops PyTorch's gradient there and ztrain has no stop-gradient op "
                "yet; use the tensor itself, or a buffer for a value that should not train")
        return base_data.__get__(t)

    h1 = torch.nn.modules.module.register_module_forward_pre_hook(pre)
    h2 = torch.nn.modules.module.register_module_forward_hook(post)
    proxy_tensor.PythonKeyTracer.create_node = create_node
    torch.Tensor.data = property(data_get, base_data.__set__)
    try:
        yield
    finally:
        del torch.Tensor.data
        proxy_tensor.PythonKeyTracer.create_node = original
        h1.remove()
        h2.remove()


def describe_where(node, short=True):
    """`transformer.h.0.attn (model.py:41: y = att @ v)` for a node."""
    mpath, where = node.meta.get("ztrain_where", ("", None))
    parts = []
    parts.append(mpath if mpath else "<top>")
    if where:
        fn, line, text = where
        fn = os.path.basename(fn) if short else fn
        parts.append(f"({fn}:{line}: {text})" if text else f"({fn}:{line})")
    return " ".join(parts)


def trace(module, fn, example_args):
    """make_fx(functionalize(fn)) in real mode, with provenance. `fn` takes
    the flat parameter and buffer tensors, then the inputs."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from functorch import functionalize

    with _provenance(module), torch.random.fork_rng(), torch.enable_grad():
        torch.manual_seed(0)
        gm = make_fx(functionalize(fn))(*example_args)
    return gm

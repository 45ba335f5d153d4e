"""Lowering: the captured aten graph -> train-dialect IR.

The walk is an interpreter over the graph: every node's real value is
computed (the example batch's, with torch) and, where the node depends on a
parameter or an input, its IR value is emitted through `ztrain.ir`, the same
builder the hand-written models use. Nodes that depend on neither (a causal
mask sliced from a buffer, `arange` positions, rotary cos/sin tables) are
folded: torch computes them once here, and a value an IR op needs becomes a
`train.buffer` whose contents go to the `--init` file.

`ATEN` is the one table: aten overload -> (handler, what it becomes). The
docs' op table is printed from it (`python -m ztrain.importer --ops`).
"""

import math

from ztrain import ir
from .capture import ImportFailure, describe_where


# -- values --------------------------------------------------------------------------------

class Lazy:
    """An IR value emitted when first used. Tags say what a value is made of
    so that a consumer can fold it: `trans` (this is `src` with its last two
    dimensions swapped: a matmul takes the flag instead of a copy),
    `log_softmax` (consumed by nll_loss), `causal` (a -inf causal
    masked_fill that a softmax turns into its causal form)."""

    __slots__ = ("_thunk", "_value", "tags", "node")

    def __init__(self, thunk=None, value=None, **tags):
        self._thunk = thunk
        self._value = value
        self.tags = tags
        # The node whose handler made this value: a refusal raised when it
        # is emitted (on first use, while lowering a consumer) names it.
        self.node = _CURRENT[0]

    def get(self):
        if self._value is None:
            saved = _CURRENT[0]
            _CURRENT[0] = self.node if self.node is not None else saved
            try:
                self._value = self._thunk()
            except ir.IRError as e:
                if self.node is None:
                    raise
                raise ImportFailure(f"{describe_where(self.node)}: {e}") from None
            finally:
                _CURRENT[0] = saved
        return self._value


# The graph node being lowered (Lowerer.node), seen by Lazy.
_CURRENT = [None]


class Arg:
    """An operand: the example's real tensor and, unless constant, its IR
    value (a Lazy)."""

    __slots__ = ("real", "sym", "node")

    def __init__(self, real, sym, node=None):
        self.real = real
        self.sym = sym
        self.node = node            # the graph node of a constant (for names)

    @property
    def const(self):
        return self.sym is None

    @property
    def shape(self):
        return tuple(self.real.shape)


def _is_int(t):
    import torch
    return not t.dtype.is_floating_point and t.dtype != torch.complex64


def _bool():
    import torch
    return torch.bool


def _irtype(t):
    return "i32" if _is_int(t) else "f32"


# -- the lowerer ------------------------------------------------------------------------

class Lowerer:
    def __init__(self, module_ir, func, node):
        self.m = module_ir
        self.f = func
        self.node = node            # the node being lowered (for messages)
        self.buffers = {}           # (dtype, shape, bytes) -> ir.Buffer
        self.buffer_values = {}     # buffer name -> numpy array (for --init)
        self.buffer_reads = {}      # buffer name -> ir.Value
        self.const_names = {}       # id(real tensor) -> buffer name (state_dict)
        self.notes = []

    @property
    def node(self):
        return _CURRENT[0]

    @node.setter
    def node(self, n):
        _CURRENT[0] = n

    # messages
    def fail(self, msg):
        raise ImportFailure(f"{describe_where(self.node)}: {msg}")

    # IR values of operands
    def val(self, a, want=None):
        """The ir.Value of an operand, materializing a constant as a buffer."""
        if isinstance(a, Arg):
            if a.const:
                return self.buffer_of(a.real, a.node)
            return a.sym.get()
        self.fail(f"expected a tensor operand, got {a!r}")

    def fval(self, a):
        v = self.val(a)
        if v.dtype != "f32":
            self.fail(f"{self.op_name()} of an integer tensor is not supported "
                      "(integer tensors can index, be reshaped and feed losses)")
        return v

    def op_name(self):
        return str(self.node.target)

    def buffer_of(self, t, origin=None):
        """A constant tensor as a train.buffer (deduplicated by contents),
        named after the module and the op that computed it
        (`model.layers.0.self_attn.rotary.cos`)."""
        import numpy as np
        import torch
        if t.dim() == 0:
            t = t.reshape(1)
        if _is_int(t) or t.dtype == torch.bool:
            arr = t.detach().to(torch.int64).cpu().numpy()
            if arr.size and (arr.min() < -2**31 or arr.max() >= 2**31):
                self.fail("an integer constant does not fit in int32")
            arr = arr.astype(np.int32)
            dtype = "i32"
        else:
            arr = t.detach().to(torch.float32).cpu().numpy()
            dtype = "f32"
        arr = np.ascontiguousarray(arr)
        key = (dtype, arr.shape, arr.tobytes())
        buf = self.buffers.get(key)
        if buf is None:
            name = self.const_names.get(id(t))
            if name is None or name in self.buffer_values:
                src = origin if origin is not None and origin.op == "call_function" \
                    else self.node
                mpath = src.meta.get("ztrain_where", ("", None))[0]
                what = "const"
                if src is origin:
                    what = getattr(src.target, "__name__", "const").split(".")[0] or "const"
                base = (mpath + "." if mpath else "") + what
                name, i = base, 0
                while name in self.buffer_values or name in self.m.params_by_name:
                    i += 1
                    name = f"{base}{i}"
            init = "external"
            if not arr.any():
                init = "zeros"
            elif (arr == 1).all():
                init = "ones"
            elif dtype == "i32" and arr.ndim >= 2:
                rows, cols = arr.shape[-2], arr.shape[-1]
                causal = (np.arange(cols)[None, :] > np.arange(rows)[:, None])
                if (arr == np.broadcast_to(causal, arr.shape)).all():
                    init = "causal"
            buf = self.m.buffer(name, list(arr.shape), dtype, init)
            self.buffers[key] = buf
            self.buffer_values[name] = arr
        v = self.buffer_reads.get(buf.name)
        if v is None:
            v = self.f.buffer_read(buf)
            self.buffer_reads[buf.name] = v
        return v

    # shapes
    def reshape(self, a, shape):
        """`a` (an Arg) reshaped; a transposed value stays a flag when the
        reshape only touches its leading dimensions."""
        shape = tuple(int(d) for d in shape)
        if a.const:
            return None
        if tuple(a.shape) == shape:
            return a.sym
        src = a.sym.tags.get("trans")
        if src is not None and len(shape) >= 2 and shape[-2:] == a.shape[-2:]:
            s = src.get()
            inner = Lazy(lambda: self.f.reshape(s, shape[:-2] + s.shape[-2:]))
            return Lazy(lambda: self.f.transpose(inner.get(), _swap_last(len(shape))),
                        trans=inner)
        inner = a.sym.tags.get("reshape_of")
        if inner is not None:       # a reshape of a reshape is one reshape
            if tuple(inner.get().shape) == shape:
                return inner
            return Lazy(lambda: self.f.reshape(inner.get(), shape), reshape_of=inner)
        return Lazy(lambda: self.f.reshape(self.val(a), shape), reshape_of=a.sym)

    def transpose(self, a, perm):
        perm = [int(p) for p in perm]
        if perm == list(range(len(perm))):
            return a.sym
        if _is_int(a.real):
            self.fail("transposing an integer tensor is not supported")
        if perm == _swap_last(len(perm)):
            src = a.sym.tags.get("trans")
            if src is not None:     # a transpose of a transpose
                return src
            return Lazy(lambda: self.f.transpose(self.fval(a), perm), trans=a.sym)
        return Lazy(lambda: self.f.transpose(self.fval(a), perm))

    def broadcast_to(self, v, shape):
        """ir.Value v broadcast (numpy rules) to `shape`."""
        shape = tuple(int(d) for d in shape)
        vs = tuple(v.shape)
        if vs == shape:
            return v
        if len(vs) > len(shape):
            self.fail(f"cannot broadcast {list(vs)} to {list(shape)}")
        padded = (1,) * (len(shape) - len(vs)) + vs
        keep = [i for i, (s, o) in enumerate(zip(padded, shape)) if s == o]
        dims = [i for i in range(len(shape)) if i not in keep]
        if any(padded[i] != 1 for i in dims):
            self.fail(f"cannot broadcast {list(vs)} to {list(shape)}")
        f = self.f
        if not keep:
            # One element to every position: [1] -> [..., 1] -> [...] -> shape.
            v = f.reshape(v, (1,))
            if len(shape) == 1:
                return f.reshape(f.broadcast(v, [0], [shape[0]]), shape)
            v = f.broadcast(v, list(range(len(shape) - 1)), list(shape[:-1]))
            v = f.reshape(v, shape[:-1])
            return f.broadcast(v, [len(shape) - 1], [shape[-1]])
        kept = tuple(shape[i] for i in keep)
        if vs != kept:
            v = f.reshape(v, kept)
        if not dims:
            return v
        return f.broadcast(v, dims, [shape[i] for i in dims])

    def fill_like(self, shape, value):
        return self.f.fill(tuple(shape) if shape else (), float(value))


def _swap_last(rank):
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return perm


def _norm_dim(d, rank):
    d = int(d)
    return d + rank if d < 0 else d


def _scalar_of(a):
    """A Python number for a scalar operand (a number or a one-element
    constant tensor), else None."""
    if isinstance(a, (int, float, bool)):
        return float(a)
    if isinstance(a, Arg) and a.const and a.real.numel() == 1:
        return float(a.real.reshape(()).item())
    return None


# -- handlers -----------------------------------------------------------------------------
# Each takes (L, out, args, kwargs): the Lowerer, the node's real output and
# its operands (Args for tensors, Python values otherwise). It returns the
# node's Lazy (or a tuple of them for several results).

ATEN = {}


def aten(names, becomes):
    def register(fn):
        for n in names.split():
            ATEN[n] = (fn, becomes)
        return fn
    return register


@aten("aten.detach.default aten.clone.default aten.alias.default "
      "aten.lift_fresh_copy.default aten.contiguous.default",
      "nothing (the same value)")
def _identity(L, out, a, kw):
    return a[0].sym


@aten("aten._to_copy.default", "nothing when the dtype is unchanged (or integer to "
      "integer: ids.long())")
def _to_copy(L, out, a, kw):
    if _is_int(out) and _is_int(a[0].real) and out.dtype != _bool():
        return a[0].sym             # int32 <-> int64: the step's integers are i32
    if out.dtype != a[0].real.dtype:
        L.fail(f"a conversion from {a[0].real.dtype} to {out.dtype} is not supported "
               "(import an fp32 model; ztrain-compile --precision=bf16 makes a bf16 step)")
    return a[0].sym


@aten("aten.t.default", "train.transpose, or a matmul's transpose flag")
def _t(L, out, a, kw):
    return L.transpose(a[0], list(range(a[0].real.dim()))[::-1])


@aten("aten.transpose.int", "train.transpose, or a matmul's transpose flag")
def _transpose(L, out, a, kw):
    r = a[0].real.dim()
    d0, d1 = _norm_dim(a[1], r), _norm_dim(a[2], r)
    perm = list(range(r))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return L.transpose(a[0], perm)


@aten("aten.permute.default", "train.transpose")
def _permute(L, out, a, kw):
    r = a[0].real.dim()
    return L.transpose(a[0], [_norm_dim(d, r) for d in a[1]])


@aten("aten.view.default aten._unsafe_view.default aten._reshape_alias.default "
      "aten.reshape.default aten.unsqueeze.default aten.squeeze.dim "
      "aten.squeeze.default aten.flatten.using_ints aten.view_copy.default "
      "aten._reshape_alias_copy.default",
      "train.reshape")
def _view(L, out, a, kw):
    return L.reshape(a[0], out.shape)


@aten("aten.expand.default aten.expand_copy.default", "train.broadcast")
def _expand(L, out, a, kw):
    x = a[0]
    if tuple(out.shape) == x.shape:
        return x.sym
    if _is_int(x.real):
        L.fail("expanding an integer tensor is not supported")
    return Lazy(lambda: L.broadcast_to(L.fval(x), out.shape))


@aten("aten.slice.Tensor aten.slice_copy.Tensor", "train.slice")
def _slice(L, out, a, kw):
    x = a[0]
    r = x.real.dim()
    dim = _norm_dim(a[1] if len(a) > 1 else 0, r)
    start = a[2] if len(a) > 2 and a[2] is not None else 0
    step = a[4] if len(a) > 4 else 1
    if step != 1:
        L.fail(f"a slice with step {step} is not supported (only step 1)")
    size_in = x.shape[dim]
    if start < 0:
        start += size_in
    start = max(0, min(start, size_in))
    size = out.shape[dim]
    if size == size_in:
        return x.sym
    if size == 0:
        L.fail("an empty slice")
    if _is_int(x.real):
        note = ("the model slices an integer input (a label shift such as "
                "labels[..., 1:]): train it on data whose labels are its inputs (a "
                ".safetensors --data file), not on a token file, whose targets are "
                "shifted already")
        if note not in L.notes:
            L.notes.append(note)
    return Lazy(lambda: L.f.slice(L.val(x), dim, start, size))


@aten("aten.select.int", "train.slice + train.reshape")
def _select(L, out, a, kw):
    x = a[0]
    r = x.real.dim()
    dim = _norm_dim(a[1], r)
    idx = a[2] + x.shape[dim] if a[2] < 0 else a[2]
    def emit():
        v = L.val(x)
        if x.shape[dim] != 1:
            v = L.f.slice(v, dim, idx, 1)
        return L.f.reshape(v, out.shape)
    return Lazy(emit)


def _pieces(L, x, dim, sizes):
    r = x.real.dim()
    dim = _norm_dim(dim, r)
    outs, start = [], 0
    for s in sizes:
        if s == x.shape[dim]:
            outs.append(x.sym)
        else:
            outs.append(Lazy(lambda st=start, s=s: L.f.slice(L.fval(x), dim, st, s)))
        start += s
    return tuple(outs)


@aten("aten.split.Tensor aten.split_with_sizes.default aten.split_copy.Tensor",
      "one train.slice per piece used")
def _split(L, out, a, kw):
    dim = a[2] if len(a) > 2 else kw.get("dim", 0)
    return _pieces(L, a[0], dim, [o.shape[_norm_dim(dim, a[0].real.dim())] for o in out])


@aten("aten.unbind.int", "train.slice + train.reshape per piece used")
def _unbind(L, out, a, kw):
    x = a[0]
    dim = _norm_dim(a[1] if len(a) > 1 else 0, x.real.dim())
    res = []
    for i, o in enumerate(out):
        res.append(Lazy(lambda i=i, o=o: L.f.reshape(
            L.f.slice(L.fval(x), dim, i, 1), o.shape)))
    return tuple(res)


@aten("aten.cat.default", "train.concat")
def _cat(L, out, a, kw):
    xs = [x for x in a[0] if x.real.numel() > 0]
    dim = _norm_dim(a[1] if len(a) > 1 else kw.get("dim", 0), out.dim())
    if len(xs) == 1:
        return xs[0].sym
    return Lazy(lambda: L.f.concat([L.fval(x) for x in xs], dim))


def _binary(kind):
    def handler(L, out, a, kw):
        x, y = a[0], a[1]
        alpha = kw.get("alpha", a[2] if len(a) > 2 else 1)
        if _is_int(out):
            L.fail(f"integer arithmetic ({kind}) on step inputs is not supported")
        if kind == "div" and kw.get("rounding_mode") is not None:
            L.fail(f"division with rounding_mode={kw['rounding_mode']!r} is not supported")
        sx, sy = _scalar_of(x), _scalar_of(y)
        shape = tuple(out.shape)
        drop = _dropout_pattern(L, kind, x, y, out)
        if drop is not None:
            return drop
        tags = {}
        if kind == "add" and alpha == 1:
            for m, other in ((y, x), (x, y)):
                if isinstance(m, Arg) and m.const and isinstance(other, Arg) and \
                        not other.const and _is_additive_causal(m.real, shape):
                    tags["causal"] = other.sym

        def emit():
            f = L.f
            if sy is not None and not (isinstance(x, Arg) and x.const):
                v = L.broadcast_to(L.fval(x), shape)
                c = sy * alpha if kind in ("add", "sub") else sy
                if kind == "mul":
                    return f.scale(v, c)
                if kind == "div":
                    return f.scale(v, 1.0 / c) if c != 0 else f.div(v, f.fill(shape, c))
                if kind == "add":
                    return v if c == 0 else f.add(v, f.fill(shape, c))
                return v if c == 0 else f.sub(v, f.fill(shape, c))
            if sx is not None and not (isinstance(y, Arg) and y.const):
                v = L.broadcast_to(L.fval(y), shape)
                if alpha != 1:
                    v = f.scale(v, alpha)
                if kind == "mul":
                    return f.scale(v, sx)
                if kind == "add":
                    return v if sx == 0 else f.add(f.fill(shape, sx), v)
                if kind == "sub":
                    return f.neg(v) if sx == 0 else f.sub(f.fill(shape, sx), v)
                return f.div(f.fill(shape, sx), v)
            u = L.broadcast_to(L.fval(x), shape)
            v = L.broadcast_to(L.fval(y), shape)
            if alpha != 1:
                v = f.scale(v, alpha)
            return getattr(f, kind)(u, v)
        return Lazy(emit, **tags)
    return handler


def _dropout_pattern(L, kind, x, y, out):
    """The div and mul steps of a traced dropout (see DROPOUT_MASKS), or None."""
    def tag(v, name):
        return v.sym.tags.get(name) if isinstance(v, Arg) and v.sym is not None else None
    if kind == "div":
        q, sy = tag(x, "dropout_keep"), _scalar_of(y)
        if q is not None and not tag(x, "scaled") and sy == q:
            return Lazy(_mask_fail(L), dropout_keep=q, scaled=True)
        src = tag(x, "dropped")
        if src is not None and sy == tag(x, "dropped_keep"):
            p = float(f"{1.0 - sy:.15g}")
            return Lazy(lambda: L.f.dropout(src.get(), p))
        return None
    if kind != "mul":
        return None
    for m, other in ((y, x), (x, y)):
        q = tag(m, "dropout_keep")
        if q is None:
            continue
        if not isinstance(other, Arg) or other.sym is None or \
                tuple(other.shape) != tuple(out.shape) or tuple(m.shape) != tuple(out.shape):
            L.fail("a dropout mask applied to a value of another shape is not supported")
        v = other.sym
        p = float(f"{1.0 - q:.15g}")    # 1 - 0.9 is 0.09999999999999998
        if tag(m, "scaled"):
            return Lazy(lambda: L.f.dropout(L.fval(other), p))
        return Lazy(lambda: L.fail("an unscaled dropout product used before its "
                                   "division by the keep probability"),
                    dropped=v, dropped_keep=q)
    return None


def _is_additive_causal(m, shape):
    """An additive mask of 0 on and below the diagonal and -inf above it
    (Hugging Face's causal mask), over the last two dims of `shape`."""
    import torch
    if len(shape) < 2 or shape[-1] != shape[-2] or m.dim() > len(shape) or \
            not m.dtype.is_floating_point:
        return False
    t = shape[-1]
    above = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    try:
        e = m.expand(shape)
    except RuntimeError:
        return False
    return bool((e.masked_select(~above.expand(shape)) == 0).all()) and \
        _is_minus_inf(e.masked_select(above.expand(shape)))


def _is_minus_inf(v):
    """-inf, or the dtype's lowest finite value, which Hugging Face's masks
    use instead (exp of it underflows to the same 0 in a softmax)."""
    import torch
    if isinstance(v, (int, float)):
        return v == float("-inf") or v <= torch.finfo(torch.float32).min
    return bool(((v == float("-inf")) | (v <= torch.finfo(v.dtype).min)).all())


for _k in ("add", "sub", "mul", "div"):
    aten(f"aten.{_k}.Tensor aten.{_k}.Scalar", f"train.{_k} (broadcast), train.scale for a "
         "constant factor" if _k in ("mul", "div") else f"train.{_k} (broadcast)" + ("; an additive causal -inf mask before a softmax becomes "
                                 "train.softmax {causal}" if _k == "add" else ""))(
        _binary(_k))


@aten("aten.rsub.Scalar aten.rsub.Tensor", "train.sub")
def _rsub(L, out, a, kw):
    alpha = kw.get("alpha", 1)
    return _binary("sub")(L, out, [a[1], a[0]], {"alpha": 1}) if alpha == 1 else \
        L.fail("rsub with alpha is not supported")


def _unary(name, method=None):
    def handler(L, out, a, kw):
        return Lazy(lambda: getattr(L.f, method or name)(L.fval(a[0])))
    return handler


for _k in ("neg", "exp", "sqrt", "rsqrt", "sigmoid", "silu", "relu", "tanh", "erf"):
    aten(f"aten.{_k}.default", f"train.{_k}")(_unary(_k))


@aten("aten.gelu.default", "train.gelu_erf (approximate='none'), train.gelu ('tanh')")
def _gelu(L, out, a, kw):
    approx = kw.get("approximate", a[1] if len(a) > 1 else "none")
    if approx == "tanh":
        return Lazy(lambda: L.f.gelu(L.fval(a[0])))
    return Lazy(lambda: L.f.gelu_erf(L.fval(a[0])))


@aten("aten.reciprocal.default", "train.div")
def _reciprocal(L, out, a, kw):
    return Lazy(lambda: L.f.div(L.f.fill(tuple(out.shape), 1.0), L.fval(a[0])))


@aten("aten.pow.Tensor_Scalar", "train.mul / sqrt / rsqrt / div for exponents 2, 3, "
      "0.5, -0.5, -1")
def _pow(L, out, a, kw):
    e = float(a[1])
    x = a[0]

    def emit():
        f = L.f
        v = L.fval(x)
        if e == 1:
            return v
        if e == 2:
            return f.mul(v, v)
        if e == 3:
            return f.mul(f.mul(v, v), v)
        if e == 0.5:
            return f.sqrt(v)
        if e == -0.5:
            return f.rsqrt(v)
        if e == -1:
            return f.div(f.fill(v.shape, 1.0), v)
        L.fail(f"pow with exponent {e} is not supported (2, 3, 0.5, -0.5, -1 are)")
    if e not in (1, 2, 3, 0.5, -0.5, -1):
        L.fail(f"pow with exponent {e} is not supported (2, 3, 0.5, -0.5, -1 are)")
    return Lazy(emit)


def _reduction(kind):
    def handler(L, out, a, kw):
        x = a[0]
        r = x.real.dim()
        dims = a[1] if len(a) > 1 and a[1] is not None else kw.get("dim")
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            dims = list(range(r))
        if isinstance(dims, int):
            dims = [dims]
        dims = sorted({_norm_dim(d, r) for d in dims})
        if kw.get("dtype") is not None and kw["dtype"] != x.real.dtype:
            L.fail(f"a {kind} in another dtype is not supported")

        def emit():
            v = L.f.reduce(kind, L.fval(x), dims)
            if tuple(v.shape) != tuple(out.shape):
                v = L.f.reshape(v, out.shape)
            return v
        return Lazy(emit)
    return handler


aten("aten.mean.dim aten.mean.default", "train.reduce mean")(_reduction("mean"))
aten("aten.sum.dim_IntList aten.sum.default", "train.reduce sum")(_reduction("sum"))
aten("aten.amax.default", "train.reduce max")(_reduction("max"))


@aten("aten.native_layer_norm.default", "train.layer_norm (a missing weight or bias "
      "is a constant one or zero)")
def _layer_norm(L, out, a, kw):
    x, shape, w, b, eps = a[0], a[1], a[2], a[3], a[4]
    if len(shape) != 1:
        L.fail(f"layer_norm over {len(shape)} dimensions is not supported (the last one is)")
    c = shape[0]

    def emit():
        g = L.fval(w) if w is not None else L.f.fill((c,), 1.0)
        bb = L.fval(b) if b is not None else L.f.fill((c,), 0.0)
        return L.f.layer_norm(L.fval(x), g, bb, epsilon=float(eps))
    stat = Lazy(lambda: L.fail("layer_norm's mean and rstd results are not supported"))
    return (Lazy(emit), stat, stat)


@aten("aten._softmax.default", "train.softmax; train.softmax {causal} after a causal "
      "-inf masked_fill or an additive causal -inf mask")
def _softmax(L, out, a, kw):
    x = a[0]
    if _norm_dim(a[1], x.real.dim()) != x.real.dim() - 1:
        L.fail("softmax over a dimension other than the last is not supported")
    src = x.sym.tags.get("causal") if x.sym is not None else None
    if src is not None:
        return Lazy(lambda: L.f.softmax(src.get(), causal=True))
    return Lazy(lambda: L.f.softmax(L.fval(x)))


@aten("aten._log_softmax.default", "(with nll_loss_forward) train.cross_entropy")
def _log_softmax(L, out, a, kw):
    x = a[0]
    if _norm_dim(a[1], x.real.dim()) != x.real.dim() - 1 or x.real.dim() != 2:
        L.fail("log_softmax is supported over the last dimension of [rows, classes] "
               "logits feeding nll_loss (cross_entropy)")
    return Lazy(lambda: L.fail("log_softmax is supported only as the input of nll_loss "
                               "(F.cross_entropy)"), log_softmax=x)


@aten("aten.nll_loss_forward.default", "train.cross_entropy (mean; sum as a scale)")
def _nll(L, out, a, kw):
    logp, target, weight, reduction, ignore = a[0], a[1], a[2], a[3], a[4]
    src = logp.sym.tags.get("log_softmax") if logp.sym is not None else None
    if src is None:
        L.fail("nll_loss is supported on log_softmax output (F.cross_entropy)")
    if weight is not None:
        L.fail("cross_entropy with class weights is not supported")
    if reduction not in (1, 2):
        L.fail("cross_entropy with reduction='none' is not supported (mean and sum are)")
    if not isinstance(target, Arg) or not _is_int(target.real):
        L.fail("cross_entropy needs integer class targets")
    rows, classes = src.shape
    if not -2**31 <= ignore < 2**31:
        L.fail(f"cross_entropy's ignore_index={ignore} is not an int32 label")
    if reduction == 2 and ignore != -100:
        # A sum over the rows that count is the mean times their number,
        # which only the data knows: a sum ignores nothing, and says so.
        L.notes.append(f"cross_entropy(reduction='sum')'s ignore_index={ignore}: the "
                       f"targets must all be classes (a target equal to {ignore} is a "
                       "runtime error)")

    def emit():
        if reduction == 2:
            return L.f.scale(L.f.cross_entropy(L.fval(src), L.val(target)), float(rows))
        # PyTorch's mean over the rows whose target is not ignore_index (its
        # default -100 included: Hugging Face pads labels with it).
        return L.f.cross_entropy(L.fval(src), L.val(target), ignore_index=ignore)
    return (Lazy(emit), Lazy(lambda: L.fail("nll_loss's total_weight is not supported")))


@aten("aten.embedding.default", "train.embedding (train.slice for arange positions)")
def _embedding(L, out, a, kw):
    w, ids = a[0], a[1]
    pad = a[2] if len(a) > 2 else -1
    if pad != -1 and pad is not None:
        L.fail(f"an embedding with padding_idx={pad} is not supported")
    if (a[3] if len(a) > 3 else kw.get("scale_grad_by_freq", False)):
        L.fail("an embedding with scale_grad_by_freq=True is not supported (its gradient "
               "is scaled by each id's count in the batch)")
    if (a[4] if len(a) > 4 else kw.get("sparse", False)):
        L.notes.append("sparse=True embeddings train with dense gradients")
    if ids.const:
        import torch
        flat = ids.real.reshape(-1)
        n = flat.numel()
        if n and bool((flat == torch.arange(int(flat[0]), int(flat[0]) + n,
                                            dtype=flat.dtype)).all()) and \
                int(flat[0]) + n <= w.shape[0]:
            start = int(flat[0])
            return Lazy(lambda: L.f.reshape(L.f.slice(L.fval(w), 0, start, n), out.shape)
                        if n != w.shape[0] or start != 0 or out.dim() != 2
                        else L.fval(w))
    return Lazy(lambda: L.f.embedding(L.fval(w), L.val(ids)))


def _mm(L, x, y, shape):
    """x @ y with each side's pending transpose as a flag."""
    def side(a):
        if a.sym is not None and a.sym.tags.get("trans") is not None:
            return a.sym.tags["trans"], True
        return None, False

    def emit():
        sx, tx = side(x)
        sy, ty = side(y)
        u = sx.get() if tx else L.fval(x)
        v = sy.get() if ty else L.fval(y)
        if v.rank > 2 and v.shape[:-2] != u.shape[:-2]:
            L.fail("a batched matmul whose batch dimensions differ")
        return L.f.matmul(u, v, transpose_a=tx, transpose_b=ty)
    return emit


@aten("aten.mm.default aten.bmm.default", "train.matmul")
def _mm_handler(L, out, a, kw):
    return Lazy(_mm(L, a[0], a[1], out.shape))


@aten("aten.addmm.default", "train.matmul + train.bias_add")
def _addmm(L, out, a, kw):
    b, x, y = a[0], a[1], a[2]
    if kw.get("beta", 1) != 1 or kw.get("alpha", 1) != 1:
        L.fail("addmm with beta or alpha other than 1 is not supported")
    mm = _mm(L, x, y, out.shape)

    def emit():
        m = mm()
        if b.real.dim() == 1 and b.real.shape[0] == out.shape[-1]:
            return L.f.bias_add(m, L.fval(b))
        return L.f.add(m, L.broadcast_to(L.fval(b), out.shape))
    return Lazy(emit)


def _mask_for(L, mask, shape):
    """A constant boolean mask as an i32 buffer that is a suffix of `shape`."""
    import torch
    m = mask.real
    while m.dim() > 0 and m.shape[0] == 1:
        m = m[0]
    shape = tuple(shape)
    if tuple(m.shape) != shape[len(shape) - m.dim():]:
        m = mask.real.expand(shape)
        # Drop leading dimensions along which the mask does not change.
        while m.dim() > 1 and bool((m == m[0:1]).all()):
            m = m[0]
    return L.buffer_of(m.to(torch.int32).contiguous(), mask.node)


@aten("aten.masked_fill.Scalar aten.masked_fill.Tensor",
      "train.masked_fill (i32 mask); a causal -inf fill before softmax becomes "
      "train.softmax {causal}")
def _masked_fill(L, out, a, kw):
    import torch
    x, mask, value = a[0], a[1], a[2]
    value = _scalar_of(value)
    if value is None:
        L.fail("masked_fill with a tensor value is not supported")
    if not mask.const:
        L.fail("masked_fill with a mask computed from the step's inputs is not supported "
               "(a constant mask such as a causal one is)")
    tags = {}
    shape = tuple(out.shape)
    one = _one_element_mask(mask)
    if one is not None:             # all or nothing
        return Lazy(lambda: L.f.fill(shape, value)) if one \
            else x.sym
    if _is_minus_inf(value) and len(shape) >= 2 and shape[-1] == shape[-2]:
        t = shape[-1]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        if bool((mask.real.expand(shape) == causal).all()):
            tags["causal"] = x.sym
    return Lazy(lambda: L.f.masked_fill(L.fval(x), _mask_for(L, mask, shape), value), **tags)


@aten("aten.where.self", "train.where (constant mask); a causal where(tril, scores, -inf) "
      "before a softmax becomes train.softmax {causal}")
def _where(L, out, a, kw):
    import torch
    cond, x, y = a[0], a[1], a[2]
    if not cond.const:
        L.fail("where with a condition computed from the step's inputs is not supported")
    shape = tuple(out.shape)
    tags = {}
    # Hugging Face's GPT-2: where(tril mask, scores, lowest float): a softmax
    # of it is the causal softmax (exp of the lowest float is 0 either way).
    ys = _scalar_of(y) if not (isinstance(y, Arg) and not y.const) else None
    if len(shape) >= 2 and shape[-1] == shape[-2] and isinstance(x, Arg) and \
            not x.const and tuple(x.shape) == shape and ys is not None and \
            _is_minus_inf(ys) and cond.real.dtype == torch.bool:
        t = shape[-1]
        keep = torch.tril(torch.ones(t, t, dtype=torch.bool))
        try:
            if bool((cond.real.expand(shape) == keep).all()):
                tags["causal"] = x.sym
        except RuntimeError:
            pass

    def operand(v):
        s = _scalar_of(v)
        if s is None and isinstance(v, Arg) and tuple(v.shape) == shape:
            return L.fval(v)
        if s is not None and not (isinstance(v, Arg) and not v.const):
            return L.f.fill(shape, s)
        return L.broadcast_to(L.fval(v), shape)
    one = _one_element_mask(cond)
    if one is not None:
        return Lazy(lambda: operand(x if one else y))
    return Lazy(lambda: L.f.where(_mask_for(L, cond, shape), operand(x), operand(y)),
                **tags)


def _one_element_mask(mask):
    """True / False for a one-element constant mask, else None."""
    if mask.const and mask.real.numel() == 1:
        return bool(mask.real.reshape(()).item())
    return None


@aten("aten.native_dropout.default", "train.dropout (ztrain's random stream)")
def _dropout(L, out, a, kw):
    x, p, train = a[0], float(a[1]), a[2]
    mask = Lazy(lambda: L.fail("dropout's mask result is not supported"))
    if not train or p == 0.0:
        return (x.sym, mask)
    return (Lazy(lambda: L.f.dropout(L.fval(x), p)), mask)


@aten("aten.mse_loss.default", "train.sub + train.mul + train.reduce mean (sum)")
def _mse_loss(L, out, a, kw):
    x, t = a[0], a[1]
    reduction = a[2] if len(a) > 2 else kw.get("reduction", 1)
    if reduction not in (1, 2):
        L.fail("mse_loss with reduction='none' is not supported (mean and sum are)")
    if x.shape != t.shape:
        L.fail(f"mse_loss of shapes {list(x.shape)} and {list(t.shape)}: broadcasting "
               "the target is not supported")

    def emit():
        d = L.f.sub(L.fval(x), L.fval(t))
        v = L.f.reduce("mean" if reduction == 1 else "sum", L.f.mul(d, d),
                       list(range(len(x.shape))))
        return L.f.reshape(v, ()) if tuple(v.shape) != () else v
    return Lazy(emit)


@aten("aten.stack.default", "train.reshape + train.concat")
def _stack(L, out, a, kw):
    xs = a[0]
    dim = _norm_dim(a[1] if len(a) > 1 else kw.get("dim", 0), out.dim())
    piece = list(out.shape)
    piece[dim] = 1

    def emit():
        vs = [L.f.reshape(L.fval(x), piece) for x in xs]
        return vs[0] if len(vs) == 1 else L.f.concat(vs, dim)
    return Lazy(emit)


@aten("aten.repeat.default", "train.broadcast + train.reshape")
def _repeat(L, out, a, kw):
    x, reps = a[0], [int(r) for r in a[1]]
    shape = (1,) * (len(reps) - len(x.shape)) + tuple(x.shape)

    def emit():
        v = L.fval(x)
        if tuple(v.shape) != shape:
            v = L.f.reshape(v, shape)
        # [.., d, ..] repeated r times is [.., r, d, ..] flattened.
        # A new dimension of size r before each repeated one.
        dims, sizes, pos = [], [], 0
        for d, r in zip(shape, reps):
            if r != 1:
                dims.append(pos)
                sizes.append(r)
                pos += 1
            pos += 1
        if dims:
            v = L.f.broadcast(v, dims, sizes)
        return L.f.reshape(v, out.shape)
    if all(r == 1 for r in reps) and len(reps) == len(x.shape):
        return x.sym
    return Lazy(emit)


@aten("aten.zeros_like.default aten.ones_like.default aten.full_like.default "
      "aten.new_zeros.default aten.new_ones.default aten.new_full.default",
      "train.fill")
def _fill_like(L, out, a, kw):
    if _is_int(out):
        L.fail("an integer tensor made from a step value is not supported")
    value = float(out.reshape(-1)[0]) if out.numel() else 0.0
    return Lazy(lambda: L.f.fill(tuple(out.shape), value))


@aten("aten.var.correction aten.var.dim", "train.reduce mean of squared deviations "
      "(train.scale for the correction)")
def _var(L, out, a, kw):
    x = a[0]
    r = x.real.dim()
    dims = a[1] if len(a) > 1 and a[1] is not None else kw.get("dim")
    if dims is None:
        dims = list(range(r))
    if isinstance(dims, int):
        dims = [dims]
    dims = sorted({_norm_dim(d, r) for d in dims})
    n = math.prod(x.shape[d] for d in dims)
    corr = kw.get("correction")
    if corr is None:
        unbiased = kw.get("unbiased", a[2] if len(a) > 2 and isinstance(a[2], bool) else True)
        corr = 1 if unbiased else 0
    if n - corr <= 0:
        L.fail("a variance with no degrees of freedom")

    def emit():
        f = L.f
        v = L.fval(x)
        keep = list(x.shape)
        for d in dims:
            keep[d] = 1
        mu = f.reshape(f.reduce("mean", v, dims), keep)
        d = f.sub(v, L.broadcast_to(mu, x.shape))
        s = f.reduce("mean", f.mul(d, d), dims)
        if corr:
            s = f.scale(s, n / (n - corr))
        return f.reshape(s, out.shape) if tuple(s.shape) != tuple(out.shape) else s
    return Lazy(emit)


@aten("aten.mv.default", "train.matmul")
def _mv(L, out, a, kw):
    m, v = a[0], a[1]
    return Lazy(lambda: L.f.reshape(L.f.matmul(L.fval(m), L.f.reshape(L.fval(v),
                                                                      (v.shape[0], 1))),
                                    out.shape))


@aten("aten.baddbmm.default", "train.matmul + train.scale + train.add; with an additive "
      "causal mask before a softmax, train.softmax {causal}")
def _baddbmm(L, out, a, kw):
    b, x, y = a[0], a[1], a[2]
    beta, alpha = float(kw.get("beta", 1)), float(kw.get("alpha", 1))
    mm = _mm(L, x, y, out.shape)

    def emit():
        f = L.f
        m = mm()
        if alpha != 1:
            m = f.scale(m, alpha)
        if beta == 0:
            return m
        c = L.broadcast_to(L.fval(b), out.shape)
        return f.add(m, c if beta == 1 else f.scale(c, beta))
    tags = {}
    if b.const and beta == 1 and _is_additive_causal(b.real, tuple(out.shape)):
        # Scores plus a causal mask: a softmax of it is train.softmax {causal}.
        def scores():
            m = mm()
            return L.f.scale(m, alpha) if alpha != 1 else m
        tags["causal"] = Lazy(scores)
    return Lazy(emit, **tags)


@aten("aten.max.dim", "train.reduce max (the values; not the indices)")
def _max_dim(L, out, a, kw):
    x = a[0]
    r = x.real.dim()
    dim = _norm_dim(a[1], r)
    vals = out[0]

    def emit():
        v = L.f.reduce("max", L.fval(x), [dim])
        return L.f.reshape(v, vals.shape) if tuple(v.shape) != tuple(vals.shape) else v
    return (Lazy(emit), Lazy(lambda: L.fail("max's indices are not supported (its "
                                            "values are)")))


@aten("aten.abs.default", "train.relu(x) + train.relu(-x)")
def _abs(L, out, a, kw):
    return Lazy(lambda: L.f.add(L.f.relu(L.fval(a[0])), L.f.relu(L.f.neg(L.fval(a[0])))))


@aten("aten.leaky_relu.default", "train.relu(x) - slope * train.relu(-x)")
def _leaky_relu(L, out, a, kw):
    slope = float(a[1] if len(a) > 1 else kw.get("negative_slope", 0.01))

    def emit():
        f = L.f
        v = L.fval(a[0])
        return f.sub(f.relu(v), f.scale(f.relu(f.neg(v)), slope))
    return Lazy(emit)


# Dropout as torch 1.13 traces it without autograd: a Bernoulli mask of the
# keep probability q (bernoulli_ on an empty tensor), divided by q, times
# the input (or the input times the mask, then divided by q). The mask is
# never materialized: the product becomes train.dropout(x, 1 - q), whose
# random stream is ztrain's.
DROPOUT_MASKS = {"aten.bernoulli_.float", "aten.bernoulli.p"}


def _mask_fail(L):
    return lambda: L.fail("a random Bernoulli mask used other than as dropout's "
                          "(mask / keep) * x is not supported")


@aten(" ".join(sorted(DROPOUT_MASKS)), "(with the div and mul of dropout) train.dropout")
def _bernoulli(L, out, a, kw):
    q = a[1] if len(a) > 1 else kw.get("p", 0.5)
    return Lazy(_mask_fail(L), dropout_keep=float(q), scaled=False)


# Ops whose output shape depends on the data: named as such in refusals.
DATA_DEPENDENT = {"aten.nonzero.default", "aten.masked_select.default",
                  "aten.unique.default", "aten._unique2.default",
                  "aten.repeat_interleave.Tensor", "aten.index.Tensor"}
# Ops that draw random numbers: never folded into constants.
RANDOM = {"aten.rand.default", "aten.randn.default", "aten.randint.default",
          "aten.bernoulli.default", "aten.bernoulli.p", "aten.normal.Tensor_float",
          "aten.uniform.default", "aten.randperm.default", "aten.rand_like.default",
          "aten.randn_like.default", "aten.native_dropout.default"}


def table_markdown():
    """The op table of docs/import.md, from ATEN."""
    by = {}
    for name, (fn, becomes) in ATEN.items():
        by.setdefault((fn, becomes), []).append(name)
    rows = ["| aten op | train lowering |", "| --- | --- |"]
    for (fn, becomes), names in sorted(by.items(), key=lambda kv: kv[1][0]):
        rows.append(f"| {', '.join('`' + n + '`' for n in sorted(names))} | {becomes} |")
    return "\n".join(rows) + "\n"

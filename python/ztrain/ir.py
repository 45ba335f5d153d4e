"""A small text builder for the `train` dialect (see docs/ir-sketch.md).

Standard library only. The builder tracks static shapes, checks them the way
the dialect's verifiers do (so a mistake in a model builder is reported here,
in Python terms, instead of as a diagnostic from ztrain-opt), names SSA
values uniquely and prints a module that `ztrain-opt` parses.

    m = Module()
    w = m.param("fc.weight", [10, 4], init="normal", scale=0.02)
    f = m.entry("loss")
    x = f.arg("x", [8, 4])
    y = f.arg("y", [8], "i32")
    logits = f.matmul(x, f.param_read(w), transpose_b=True)
    f.ret(f.cross_entropy(logits, y))
    print(m)
"""

import math
import re

__all__ = ["Module", "Function", "Value", "Param", "tensor_type", "fmt_float",
           "symbol_ref", "IRError"]

_BARE_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_$.]*$")
_SSA_BAD = re.compile(r"[^A-Za-z0-9_$.\-]")

INIT_KINDS = ("zeros", "ones", "normal", "uniform")
DTYPES = ("f32", "i32")


class IRError(ValueError):
    """A shape or type error found while building IR."""


def tensor_type(shape, dtype="f32"):
    """`tensor<2x3xf32>`; a rank-0 shape gives `tensor<f32>`."""
    if dtype not in DTYPES:
        raise IRError(f"unsupported element type {dtype!r}")
    dims = "".join(f"{int(d)}x" for d in shape)
    return f"tensor<{dims}{dtype}>"


def fmt_float(x):
    """An MLIR float literal: always has a '.', never Python's `1e-05`."""
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        raise IRError(f"non-finite float attribute {x}")
    s = repr(x)
    if "e" in s or "E" in s:
        mant, exp = s.lower().split("e")
        if "." not in mant:
            mant += ".0"
        return f"{mant}e{exp}"
    if "." not in s:
        s += ".0"
    return s


def symbol_ref(name):
    """`@fc1.weight`, or `@"0.weight"` when the name is not a bare identifier."""
    if _BARE_ID.match(name):
        return "@" + name
    return '@"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _string_attr(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Value:
    """An SSA value: its printed name, static shape and element type."""

    __slots__ = ("name", "shape", "dtype")

    def __init__(self, name, shape, dtype="f32"):
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype

    @property
    def type(self):
        return tensor_type(self.shape, self.dtype)

    @property
    def rank(self):
        return len(self.shape)

    def __repr__(self):
        return f"Value({self.name}: {self.type})"


class Param:
    """A module-level parameter symbol (`train.param`)."""

    __slots__ = ("name", "shape", "dtype", "init", "scale")

    def __init__(self, name, shape, init="normal", scale=None, dtype="f32"):
        if init not in INIT_KINDS:
            raise IRError(f"param {name}: unknown init kind {init!r} "
                          f"(expected one of {', '.join(INIT_KINDS)})")
        if init in ("normal", "uniform") and scale is None:
            raise IRError(f"param {name}: init {init} needs a scale")
        if dtype != "f32":
            raise IRError(f"param {name}: parameters are f32")
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.init = init
        self.scale = None if scale is None else float(scale)

    @property
    def type(self):
        return tensor_type(self.shape, self.dtype)

    def to_mlir(self):
        init = self.init
        if self.scale is not None and init in ("normal", "uniform"):
            init += ", " + fmt_float(self.scale)
        return f"train.param {symbol_ref(self.name)} : {self.type} init({init})"

    def __repr__(self):
        return f"Param({self.name}: {self.type} init {self.init} {self.scale})"


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Function:
    """The entry function: arguments are the step's inputs, the result the loss."""

    def __init__(self, module, name):
        self.module = module
        self.name = name
        self.args = []          # (Value, train.name)
        self.lines = []
        self.result = None
        self.ops = []           # (result, op name, operands, attrs): for interpreters
        self._used = set()

    # -- naming ---------------------------------------------------------------
    def _fresh(self, hint):
        base = _SSA_BAD.sub("_", hint or "v") or "v"
        if base[0].isdigit():
            base = "v" + base
        name, i = base, 0
        while name in self._used:
            i += 1
            name = f"{base}_{i}"
        self._used.add(name)
        return "%" + name

    def _emit(self, hint, rshape, dtype, text, op, operands=(), **attrs):
        v = Value(self._fresh(hint), rshape, dtype)
        self.lines.append(f"{v.name} = {text}")
        self.ops.append((v, op, tuple(operands), attrs))
        return v

    @staticmethod
    def _f32(op, *vals):
        for v in vals:
            if v.dtype != "f32":
                raise IRError(f"{op}: operand {v.name} must be f32, got {v.type}")

    # -- arguments and parameters ---------------------------------------------
    def arg(self, name, shape, dtype="f32"):
        """A step input, fed from the data file tensor `name` ([N, ...])."""
        if any(n == name for _, n in self.args):
            raise IRError(f"duplicate input name {name!r}")
        if len(shape) == 0:
            raise IRError(f"input {name}: inputs need a batch dimension")
        v = Value(self._fresh(name), shape, dtype)
        self.args.append((v, name))
        return v

    def param_read(self, param, hint=None):
        if isinstance(param, str):
            param = self.module.params_by_name[param]
        return self._emit(hint or param.name.replace(".", "_"), param.shape,
                          param.dtype,
                          f"train.param_read {symbol_ref(param.name)} : {param.type}",
                          "param_read", (), name=param.name)

    # -- elementwise --------------------------------------------------------------
    def _binary(self, op, a, b, hint):
        self._f32("train." + op, a, b)
        if a.shape != b.shape:
            raise IRError(f"train.{op}: shapes differ: {a.type} vs {b.type}")
        return self._emit(hint or op, a.shape, "f32",
                          f"train.{op} {a.name}, {b.name} : {a.type}", op, (a, b))

    def add(self, a, b, hint=None):
        return self._binary("add", a, b, hint)

    def sub(self, a, b, hint=None):
        return self._binary("sub", a, b, hint)

    def mul(self, a, b, hint=None):
        return self._binary("mul", a, b, hint)

    def scale(self, x, factor, hint=None):
        self._f32("train.scale", x)
        return self._emit(hint or "scaled", x.shape, "f32",
                          f"train.scale {x.name} {{factor = {fmt_float(factor)} : f64}}"
                          f" : {x.type}", "scale", (x,), factor=float(factor))

    def bias_add(self, x, b, hint=None):
        self._f32("train.bias_add", x, b)
        if b.rank != 1 or x.rank == 0 or b.shape[0] != x.shape[-1]:
            raise IRError(f"train.bias_add: bias {b.type} must be "
                          f"tensor<Nxf32> with N = last dim of {x.type}")
        return self._emit(hint or "biased", x.shape, "f32",
                          f"train.bias_add {x.name}, {b.name} : {x.type}, {b.type}",
                          "bias_add", (x, b))

    def relu(self, x, hint=None):
        self._f32("train.relu", x)
        return self._emit(hint or "relu", x.shape, "f32",
                          f"train.relu {x.name} : {x.type}", "relu", (x,))

    def gelu(self, x, hint=None):
        self._f32("train.gelu", x)
        return self._emit(hint or "gelu", x.shape, "f32",
                          f"train.gelu {x.name} : {x.type}", "gelu", (x,))

    # -- linear algebra -------------------------------------------------------------
    def matmul(self, a, b, transpose_a=False, transpose_b=False, hint=None):
        self._f32("train.matmul", a, b)
        if a.rank < 2 or b.rank < 2:
            raise IRError(f"train.matmul: operands need rank >= 2: {a.type}, {b.type}")
        m, ka = (a.shape[-1], a.shape[-2]) if transpose_a else a.shape[-2:]
        kb, n = (b.shape[-1], b.shape[-2]) if transpose_b else b.shape[-2:]
        if ka != kb:
            raise IRError(f"train.matmul: contraction dims differ ({ka} vs {kb}) "
                          f"for {a.type} x {b.type}")
        batch = a.shape[:-2]
        if b.rank != 2 and b.shape[:-2] != batch:
            raise IRError(f"train.matmul: b {b.type} must have a's batch dims "
                          f"{list(batch)} or be rank 2")
        attrs = [k for k, on in (("transpose_a", transpose_a),
                                 ("transpose_b", transpose_b)) if on]
        attr = (" {" + ", ".join(attrs) + "}") if attrs else ""
        shape = batch + (m, n)
        return self._emit(hint or "mm", shape, "f32",
                          f"train.matmul {a.name}, {b.name}{attr} : "
                          f"({a.type}, {b.type}) -> {tensor_type(shape)}",
                          "matmul", (a, b), transpose_a=transpose_a, transpose_b=transpose_b)

    # -- normalization and softmax ----------------------------------------------------
    def layer_norm(self, x, gamma, beta, epsilon=1e-5, hint=None):
        self._f32("train.layer_norm", x, gamma, beta)
        n = x.shape[-1] if x.rank else None
        for p in (gamma, beta):
            if p.shape != (n,):
                raise IRError(f"train.layer_norm: {p.type} must be tensor<{n}xf32>")
        return self._emit(hint or "ln", x.shape, "f32",
                          f"train.layer_norm {x.name}, {gamma.name}, {beta.name} "
                          f"{{epsilon = {fmt_float(epsilon)} : f64}} : {x.type}, {gamma.type}",
                          "layer_norm", (x, gamma, beta), epsilon=float(epsilon))

    def softmax(self, x, causal=False, hint=None):
        self._f32("train.softmax", x)
        if causal and (x.rank < 2 or x.shape[-1] != x.shape[-2]):
            raise IRError(f"train.softmax {{causal}}: last two dims of {x.type} must be equal")
        attr = " {causal}" if causal else ""
        return self._emit(hint or "sm", x.shape, "f32",
                          f"train.softmax {x.name}{attr} : {x.type}",
                          "softmax", (x,), causal=bool(causal))

    # -- layout ---------------------------------------------------------------------------
    def reshape(self, x, shape, hint=None):
        shape = tuple(int(d) for d in shape)
        if _numel(shape) != _numel(x.shape):
            raise IRError(f"train.reshape: {x.type} -> {tensor_type(shape, x.dtype)} "
                          "changes the element count")
        return self._emit(hint or "rs", shape, x.dtype,
                          f"train.reshape {x.name} : {x.type} -> "
                          f"{tensor_type(shape, x.dtype)}", "reshape", (x,), shape=shape)

    def transpose(self, x, perm, hint=None):
        self._f32("train.transpose", x)
        perm = [int(p) for p in perm]
        if sorted(perm) != list(range(x.rank)):
            raise IRError(f"train.transpose: {perm} is not a permutation of rank {x.rank}")
        shape = tuple(x.shape[p] for p in perm)
        return self._emit(hint or "tr", shape, "f32",
                          f"train.transpose {x.name} [{', '.join(map(str, perm))}] : "
                          f"{x.type} -> {tensor_type(shape)}", "transpose", (x,), perm=perm)

    def reduce(self, kind, x, dims, hint=None):
        self._f32("train.reduce", x)
        if kind not in ("sum", "mean"):
            raise IRError(f"train.reduce: kind must be sum or mean, got {kind!r}")
        dims = sorted(int(d) for d in dims)
        if len(set(dims)) != len(dims) or any(d < 0 or d >= x.rank for d in dims):
            raise IRError(f"train.reduce: bad dims {dims} for {x.type}")
        shape = tuple(s for i, s in enumerate(x.shape) if i not in dims)
        return self._emit(hint or kind, shape, "f32",
                          f"train.reduce {kind} {x.name} [{', '.join(map(str, dims))}] : "
                          f"{x.type} -> {tensor_type(shape)}", "reduce", (x,),
                          kind=kind, dims=dims)

    def broadcast(self, x, dims, sizes, hint=None):
        """Insert result dims `dims` (sorted positions in the result) of `sizes`."""
        self._f32("train.broadcast", x)
        dims = [int(d) for d in dims]
        sizes = [int(s) for s in sizes]
        if len(dims) != len(sizes) or sorted(set(dims)) != dims:
            raise IRError("train.broadcast: dims must be sorted, unique, one size each")
        rank = x.rank + len(dims)
        if any(d < 0 or d >= rank for d in dims):
            raise IRError(f"train.broadcast: dims {dims} out of range for rank {rank}")
        src = iter(x.shape)
        new = dict(zip(dims, sizes))
        shape = tuple(new[i] if i in new else next(src) for i in range(rank))
        return self._emit(hint or "bc", shape, "f32",
                          f"train.broadcast {x.name} [{', '.join(map(str, dims))}] : "
                          f"{x.type} -> {tensor_type(shape)}", "broadcast", (x,), dims=dims)

    # -- losses and lookups -----------------------------------------------------------------
    def cross_entropy(self, logits, labels, hint=None):
        self._f32("train.cross_entropy", logits)
        if logits.rank != 2 or labels.dtype != "i32" or labels.shape != logits.shape[:1]:
            raise IRError(f"train.cross_entropy: need tensor<NxCxf32>, tensor<Nxi32>; "
                          f"got {logits.type}, {labels.type}")
        return self._emit(hint or "loss", (), "f32",
                          f"train.cross_entropy {logits.name}, {labels.name} : "
                          f"({logits.type}, {labels.type}) -> tensor<f32>",
                          "cross_entropy", (logits, labels))

    def embedding(self, table, ids, hint=None):
        self._f32("train.embedding", table)
        if table.rank != 2 or ids.dtype != "i32":
            raise IRError(f"train.embedding: need tensor<VxDxf32>, tensor<...xi32>; "
                          f"got {table.type}, {ids.type}")
        shape = ids.shape + (table.shape[1],)
        return self._emit(hint or "emb", shape, "f32",
                          f"train.embedding {table.name}, {ids.name} : "
                          f"({table.type}, {ids.type}) -> {tensor_type(shape)}",
                          "embedding", (table, ids))

    def fill(self, shape, value, hint=None):
        return self._emit(hint or "fill", shape, "f32",
                          f"train.fill {{value = {fmt_float(value)} : f64}} : "
                          f"{tensor_type(shape)}", "fill", (), value=float(value))

    # -- end ------------------------------------------------------------------------------------
    def ret(self, loss):
        if loss.shape != () or loss.dtype != "f32":
            raise IRError(f"the entry function returns tensor<f32>, got {loss.type}")
        self.result = loss

    def to_mlir(self, indent="  "):
        if self.result is None:
            raise IRError(f"function @{self.name} has no return value (call ret())")
        args = [f"{v.name}: {v.type} {{train.name = {_string_attr(n)}}}"
                for v, n in self.args]
        pad = " " * (len(f"func.func @{self.name}(") + len(indent))
        head = f"{indent}func.func @{self.name}(" + (",\n" + pad).join(args) + \
            ") -> tensor<f32>\n" + indent + "    attributes {train.entry} {"
        body = [indent * 2 + line for line in self.lines]
        body.append(f"{indent * 2}return {self.result.name} : tensor<f32>")
        return "\n".join([head] + body + [indent + "}"])


class Module:
    """A module: parameter declarations followed by one entry function."""

    def __init__(self):
        self.params = []
        self.params_by_name = {}
        self.functions = []

    def param(self, name, shape, init="normal", scale=None):
        if name in self.params_by_name:
            raise IRError(f"duplicate parameter {name!r}")
        p = Param(name, shape, init, scale)
        self.params.append(p)
        self.params_by_name[name] = p
        return p

    def entry(self, name="loss"):
        if self.functions:
            raise IRError("a module has exactly one entry function")
        f = Function(self, name)
        self.functions.append(f)
        return f

    @property
    def inputs(self):
        """[(train.name, shape, dtype)] of the entry function's arguments."""
        return [(n, v.shape, v.dtype) for v, n in self.functions[0].args]

    def to_mlir(self):
        lines = ["module {"]
        lines += ["  " + p.to_mlir() for p in self.params]
        for f in self.functions:
            lines.append(f.to_mlir())
        lines.append("}")
        return "\n".join(lines) + "\n"

    __str__ = to_mlir

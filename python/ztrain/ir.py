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
           "symbol_ref", "IRError", "REFERENCES", "reference"]

_BARE_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_$.]*$")
_SSA_BAD = re.compile(r"[^A-Za-z0-9_$.\-]")

INIT_KINDS = ("zeros", "ones", "normal", "uniform")
BUFFER_INIT_KINDS = INIT_KINDS + ("causal", "external")
DTYPES = ("f32", "i32")


class IRError(ValueError):
    """A shape or type error found while building IR."""


# The PyTorch meaning of every op, registered beside its builder method:
# op name -> fn(torch, F, operands, attrs, shape) -> tensor, with operands
# the torch tensors of the op's operands, attrs the builder's keyword
# attributes and shape the result's static shape. `ztrain.torch_ref.run_ir`
# evaluates a built module with them; this module itself never imports torch.
REFERENCES = {}


def reference(op):
    """Registers the decorated function as the PyTorch meaning of `op`."""
    def register(fn):
        REFERENCES[op] = fn
        return staticmethod(fn)
    return register


def _f64_attr(x):
    """An f64 attribute, infinities included (as MLIR prints them)."""
    x = float(x)
    if math.isinf(x):
        return ("0xFFF0000000000000" if x < 0 else "0x7FF0000000000000") + " : f64"
    return f"{fmt_float(x)} : f64"


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


def check_name(what, name):
    """A parameter, buffer or input name as the compiler takes it (a key of
    data files and checkpoints): non-empty, no whitespace or control
    characters; IRError otherwise."""
    if not isinstance(name, str) or not name or any(c <= " " or c == "\x7f" for c in name):
        raise IRError(f"{what} name {name!r} must be non-empty and contain no whitespace "
                      "or control characters (it becomes a checkpoint / data key)")


def check_shape(what, shape):
    """Static positive dimensions (the dialect has no empty tensors)."""
    if any(int(d) <= 0 for d in shape):
        raise IRError(f"{what}: dimensions must be positive, got {list(shape)} "
                      "(empty tensors are not supported)")


def _string_attr(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_llama3_scaling(scaling, what):
    """(factor, low_freq_factor, high_freq_factor, original) as floats, or IRError."""
    try:
        vals = tuple(float(v) for v in scaling)
    except (TypeError, ValueError):
        raise IRError(f"{what}: llama3_scaling must be 4 numbers, got {scaling!r}") from None
    if len(vals) != 4:
        raise IRError(f"{what}: llama3_scaling must be 4 numbers (factor, low_freq_factor, "
                      f"high_freq_factor, original_max_position_embeddings), got {len(vals)}")
    factor, low, high, original = vals
    if not all(math.isfinite(v) for v in vals) or factor < 1 or not 0 < low < high \
            or original <= 0:
        raise IRError(f"{what}: llama3_scaling needs finite factor >= 1, 0 < low_freq_factor "
                      f"< high_freq_factor and original > 0, got {list(vals)}")
    return vals


def llama3_inv_freq(torch, inv_freq, scaling):
    """transformers' _compute_llama3_parameters on float32 frequencies
    (the same statements)."""
    factor, low_freq_factor, high_freq_factor, old_context_len = scaling
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor \
        + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


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


class _Declared:
    """A module-level tensor symbol with an initializer: `train.param` and
    `train.buffer` (OP names the op)."""

    __slots__ = ("name", "shape", "dtype", "init", "scale")
    OP = None

    def __init__(self, name, shape, dtype, init, scale):
        check_name(self.OP, name)
        check_shape(f"{self.OP} {name}", shape)
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
        return f"train.{self.OP} {symbol_ref(self.name)} : {self.type} init({init})"

    def __repr__(self):
        return (f"{type(self).__name__}({self.name}: {self.type} init {self.init} "
                f"{self.scale})")


class Param(_Declared):
    """A module-level parameter symbol (`train.param`)."""

    __slots__ = ("frozen",)
    OP = "param"

    def __init__(self, name, shape, init="normal", scale=None, dtype="f32",
                 frozen=False):
        if init not in INIT_KINDS:
            raise IRError(f"param {name}: unknown init kind {init!r} "
                          f"(expected one of {', '.join(INIT_KINDS)})")
        if init in ("normal", "uniform") and (
                scale is None or not float(scale) > 0 or math.isinf(float(scale))):
            raise IRError(f"param {name}: init {init} needs a positive finite scale, "
                          f"got {scale}")
        if dtype != "f32":
            raise IRError(f"param {name}: parameters are f32")
        super().__init__(name, shape, dtype, init, scale)
        # Not trained (requires_grad=False): no gradient, no optimizer state,
        # still a parameter (sharded at stage 3, in checkpoints).
        self.frozen = bool(frozen)

    def to_mlir(self):
        return super().to_mlir() + (" frozen" if self.frozen else "")


class Buffer(_Declared):
    """A module-level non-trainable tensor (`train.buffer`): f32 or i32,
    whole on every rank, filled from --init when the file has it, else by
    its rule (zeros, ones, normal, uniform, causal)."""

    __slots__ = ()
    OP = "buffer"

    def __init__(self, name, shape, dtype="f32", init="zeros", scale=None):
        if init not in BUFFER_INIT_KINDS:
            raise IRError(f"buffer {name}: unknown init kind {init!r} "
                          f"(expected one of {', '.join(BUFFER_INIT_KINDS)})")
        if dtype not in ("f32", "i32"):
            raise IRError(f"buffer {name}: buffers are f32 or i32, got {dtype}")
        if init in ("normal", "uniform"):
            if dtype != "f32":
                raise IRError(f"buffer {name}: init {init} needs an f32 buffer")
            if scale is None or not float(scale) > 0 or math.isinf(float(scale)):
                raise IRError(f"buffer {name}: init {init} needs a positive finite scale")
        elif scale is not None:
            raise IRError(f"buffer {name}: init {init} takes no scale")
        if init == "causal" and len(shape) < 2:
            raise IRError(f"buffer {name}: init causal needs rank >= 2")
        if any(int(d) <= 0 for d in shape):
            raise IRError(f"buffer {name}: dimensions must be positive, got {list(shape)}")
        super().__init__(name, shape, dtype, init, scale)

    def value(self, seed=0):
        """The rule's value as a numpy array, as the runtime computes it
        from `seed` (docs/runtime.md, "Buffers")."""
        import numpy as np
        from ztrain import rng
        if self.init == "external":
            raise IRError(f"buffer {self.name}: init external has no rule; its values "
                          "come from the --init file")
        n = _numel(self.shape)
        if self.init in ("zeros", "ones"):
            v = np.full(n, 1.0 if self.init == "ones" else 0.0)
        elif self.init == "causal":
            rows, cols = self.shape[-2], self.shape[-1]
            i = np.arange(n)
            v = ((i % cols) > (i // cols) % rows).astype(np.float64)
        else:
            key = rng.stream_key(seed, "buffer/" + self.name)
            i = np.arange(n, dtype=np.uint64)
            if self.init == "uniform":
                v = (2.0 * (rng.bits24(key, i) * 2.0 ** -24) - 1.0) * self.scale
            else:
                v = rng.normal(key, i) * self.scale
        return v.astype(np.float32 if self.dtype == "f32" else np.int32).reshape(self.shape)


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
        self._dropout_streams = 0   # the next train.dropout's stream

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

    def checkpoint(self, v):
        """Marks `v` (the result of an op of this function) `train.checkpoint`:
        a segment boundary train-recompute keeps and recomputes up to
        (ztrain-compile --recompute=full|selective). Returns `v`."""
        prefix = f"{v.name} = "
        for i, line in enumerate(self.lines):
            if line.startswith(prefix):
                break
        else:
            raise IRError(f"checkpoint: {v.name} is not the result of an op of @{self.name}")
        # The attribute dictionary comes right before the first " : " outside
        # braces (the op's types); an existing one gains the mark.
        depth, cut = 0, -1
        for j, ch in enumerate(line):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif depth == 0 and line.startswith(" : ", j):
                cut = j
                break
        if cut < 0:
            raise IRError(f"checkpoint: cannot place the mark on {line!r}")
        head = line[:cut]
        if "train.checkpoint" in head:
            return v
        if head.endswith("}"):
            head = head[:-1] + ", train.checkpoint}"
        else:
            head += " {train.checkpoint}"
        self.lines[i] = head + line[cut:]
        return v

    @staticmethod
    def _f32(op, *vals):
        for v in vals:
            if not isinstance(v, Value):
                raise IRError(f"{op}: an operand is {v!r}, not a value")
            if v.dtype != "f32":
                raise IRError(f"{op}: operand {v.name} must be f32, got {v.type}")

    # -- arguments and parameters ---------------------------------------------
    def arg(self, name, shape, dtype="f32"):
        """A step input, fed from the data file tensor `name` ([N, ...])."""
        check_name("input", name)
        if any(n == name for _, n in self.args):
            raise IRError(f"duplicate input name {name!r}")
        if len(shape) == 0:
            raise IRError(f"input {name}: inputs need a batch dimension")
        check_shape(f"input {name}", shape)
        v = Value(self._fresh(name), shape, dtype)
        self.args.append((v, name))
        return v

    def _read(self, op, symbol, hint):
        return self._emit(hint or symbol.name.replace(".", "_"), symbol.shape,
                          symbol.dtype,
                          f"train.{op} {symbol_ref(symbol.name)} : {symbol.type}",
                          op, (), name=symbol.name)

    def param_read(self, param, hint=None):
        if isinstance(param, str):
            param = self.module.params_by_name[param]
        return self._read("param_read", param, hint)

    @reference("param_read")
    def _param_read_ref(torch, F, a, attrs, shape):
        raise AssertionError("parameter reads are bound by the interpreter")

    def buffer_read(self, buffer, hint=None):
        if isinstance(buffer, str):
            buffer = self.module.buffers_by_name[buffer]
        return self._read("buffer_read", buffer, hint)

    @reference("buffer_read")
    def _buffer_read_ref(torch, F, a, attrs, shape):
        raise AssertionError("buffer reads are bound by the interpreter")

    # -- elementwise --------------------------------------------------------------
    def _binary(self, op, a, b, hint):
        self._f32("train." + op, a, b)
        if a.shape != b.shape:
            raise IRError(f"train.{op}: shapes differ: {a.type} vs {b.type}")
        return self._emit(hint or op, a.shape, "f32",
                          f"train.{op} {a.name}, {b.name} : {a.type}", op, (a, b))

    def _unary(self, op, x, hint):
        self._f32("train." + op, x)
        return self._emit(hint or op, x.shape, "f32",
                          f"train.{op} {x.name} : {x.type}", op, (x,))

    def add(self, a, b, hint=None):
        return self._binary("add", a, b, hint)

    @reference("add")
    def _add_ref(torch, F, a, attrs, shape):
        return a[0] + a[1]

    def sub(self, a, b, hint=None):
        return self._binary("sub", a, b, hint)

    @reference("sub")
    def _sub_ref(torch, F, a, attrs, shape):
        return a[0] - a[1]

    def mul(self, a, b, hint=None):
        return self._binary("mul", a, b, hint)

    @reference("mul")
    def _mul_ref(torch, F, a, attrs, shape):
        return a[0] * a[1]

    def div(self, a, b, hint=None):
        return self._binary("div", a, b, hint)

    @reference("div")
    def _div_ref(torch, F, a, attrs, shape):
        return a[0] / a[1]

    def scale(self, x, factor, hint=None):
        self._f32("train.scale", x)
        return self._emit(hint or "scaled", x.shape, "f32",
                          f"train.scale {x.name} {{factor = {fmt_float(factor)} : f64}}"
                          f" : {x.type}", "scale", (x,), factor=float(factor))

    @reference("scale")
    def _scale_ref(torch, F, a, attrs, shape):
        return a[0] * attrs["factor"]

    def bias_add(self, x, b, hint=None):
        self._f32("train.bias_add", x, b)
        if b.rank != 1 or x.rank == 0 or b.shape[0] != x.shape[-1]:
            raise IRError(f"train.bias_add: bias {b.type} must be "
                          f"tensor<Nxf32> with N = last dim of {x.type}")
        return self._emit(hint or "biased", x.shape, "f32",
                          f"train.bias_add {x.name}, {b.name} : {x.type}, {b.type}",
                          "bias_add", (x, b))

    @reference("bias_add")
    def _bias_add_ref(torch, F, a, attrs, shape):
        return a[0] + a[1]

    def relu(self, x, hint=None):
        return self._unary("relu", x, hint)

    @reference("relu")
    def _relu_ref(torch, F, a, attrs, shape):
        return F.relu(a[0])

    def gelu(self, x, hint=None):
        return self._unary("gelu", x, hint)

    @reference("gelu")
    def _gelu_ref(torch, F, a, attrs, shape):
        return F.gelu(a[0], approximate="tanh")

    def tanh(self, x, hint=None):
        return self._unary("tanh", x, hint)

    @reference("tanh")
    def _tanh_ref(torch, F, a, attrs, shape):
        return torch.tanh(a[0])

    def erf(self, x, hint=None):
        return self._unary("erf", x, hint)

    @reference("erf")
    def _erf_ref(torch, F, a, attrs, shape):
        return torch.erf(a[0])

    def gelu_erf(self, x, hint=None):
        return self._unary("gelu_erf", x, hint)

    @reference("gelu_erf")
    def _gelu_erf_ref(torch, F, a, attrs, shape):
        return F.gelu(a[0])

    def silu(self, x, hint=None):
        return self._unary("silu", x, hint)

    @reference("silu")
    def _silu_ref(torch, F, a, attrs, shape):
        return F.silu(a[0])

    def sigmoid(self, x, hint=None):
        return self._unary("sigmoid", x, hint)

    @reference("sigmoid")
    def _sigmoid_ref(torch, F, a, attrs, shape):
        return torch.sigmoid(a[0])

    def exp(self, x, hint=None):
        return self._unary("exp", x, hint)

    @reference("exp")
    def _exp_ref(torch, F, a, attrs, shape):
        return torch.exp(a[0])

    def sqrt(self, x, hint=None):
        return self._unary("sqrt", x, hint)

    @reference("sqrt")
    def _sqrt_ref(torch, F, a, attrs, shape):
        return torch.sqrt(a[0])

    def rsqrt(self, x, hint=None):
        return self._unary("rsqrt", x, hint)

    @reference("rsqrt")
    def _rsqrt_ref(torch, F, a, attrs, shape):
        return torch.rsqrt(a[0])

    def neg(self, x, hint=None):
        return self._unary("neg", x, hint)

    @reference("neg")
    def _neg_ref(torch, F, a, attrs, shape):
        return -a[0]

    def masked_fill(self, x, mask, value, hint=None):
        """x where mask == 0, `value` (may be +-inf) where not; mask is i32
        with a suffix of x's shape, broadcast over the leading dims."""
        self._f32("train.masked_fill", x)
        if mask.dtype != "i32" or mask.rank > x.rank or \
                x.shape[x.rank - mask.rank:] != mask.shape:
            raise IRError(f"train.masked_fill: mask {mask.type} must be i32 with a "
                          f"suffix of {x.type}'s shape")
        return self._emit(hint or "masked", x.shape, "f32",
                          f"train.masked_fill {x.name}, {mask.name} "
                          f"{{value = {_f64_attr(value)}}} : {x.type}, {mask.type}",
                          "masked_fill", (x, mask), value=float(value))

    @reference("masked_fill")
    def _masked_fill_ref(torch, F, a, attrs, shape):
        return a[0].masked_fill(a[1] != 0, attrs["value"])

    def where(self, mask, a, b, hint=None):
        """a where mask != 0, b where not (torch.where); mask is i32 with a
        suffix of a's shape, broadcast over the leading dims."""
        self._f32("train.where", a, b)
        if a.shape != b.shape:
            raise IRError(f"train.where: shapes differ: {a.type} vs {b.type}")
        if mask.dtype != "i32" or mask.rank > a.rank or \
                a.shape[a.rank - mask.rank:] != mask.shape:
            raise IRError(f"train.where: mask {mask.type} must be i32 with a "
                          f"suffix of {a.type}'s shape")
        return self._emit(hint or "sel", a.shape, "f32",
                          f"train.where {mask.name}, {a.name}, {b.name} : "
                          f"{mask.type}, {a.type}", "where", (mask, a, b))

    @reference("where")
    def _where_ref(torch, F, a, attrs, shape):
        return torch.where(a[0] != 0, a[1], a[2])

    def dropout(self, x, p, stream=None, hint=None):
        """Inverted dropout with probability p (training mode). Streams are
        numbered from 0 in program order unless given; the mask is a
        function of the run's seed, the stream, the step and each element's
        index in the step's global batch (docs/runtime.md, "Dropout")."""
        self._f32("train.dropout", x)
        p = float(p)
        if not 0.0 <= p <= 1.0:
            raise IRError(f"train.dropout: probability must be in [0, 1], got {p}")
        if stream is None:
            stream = self._dropout_streams
        if stream < 0:
            raise IRError(f"train.dropout: stream must be >= 0, got {stream}")
        self._dropout_streams = max(self._dropout_streams, stream + 1)
        return self._emit(hint or "drop", x.shape, "f32",
                          f"train.dropout {x.name} {{probability = {_f64_attr(p)}, "
                          f"stream = {int(stream)} : i64}} : {x.type}",
                          "dropout", (x,), probability=p, stream=int(stream))

    @reference("dropout")
    def _dropout_ref(torch, F, a, attrs, shape):
        # The compiled op's mask (ztrain.rng); run_ir supplies the seed and
        # step of the run it models under "_run".
        from ztrain import rng
        run = attrs["_run"]
        keep = rng.dropout_keep(shape, attrs["probability"], run["seed"],
                                attrs["stream"], run["step"])
        scale = float(rng.dropout_scale(attrs["probability"]))
        noise = torch.from_numpy(keep.astype("float32") * scale).to(a[0].dtype)
        return a[0] * noise

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

    @reference("matmul")
    def _matmul_ref(torch, F, a, attrs, shape):
        x, y = a
        if attrs["transpose_a"]:
            x = x.transpose(-1, -2)
        if attrs["transpose_b"]:
            y = y.transpose(-1, -2)
        return torch.matmul(x, y)

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

    @reference("layer_norm")
    def _layer_norm_ref(torch, F, a, attrs, shape):
        return F.layer_norm(a[0], a[0].shape[-1:], a[1], a[2], attrs["epsilon"])

    def rms_norm(self, x, gamma, epsilon=1e-5, hint=None):
        """Llama's RMSNorm over the last dimension (no bias)."""
        self._f32("train.rms_norm", x, gamma)
        n = x.shape[-1] if x.rank else None
        if gamma.shape != (n,):
            raise IRError(f"train.rms_norm: {gamma.type} must be tensor<{n}xf32>")
        if not (float(epsilon) > 0 and math.isfinite(float(epsilon))):
            raise IRError(f"train.rms_norm: epsilon must be positive, got {epsilon}")
        return self._emit(hint or "rms", x.shape, "f32",
                          f"train.rms_norm {x.name}, {gamma.name} "
                          f"{{epsilon = {fmt_float(epsilon)} : f64}} : {x.type}, {gamma.type}",
                          "rms_norm", (x, gamma), epsilon=float(epsilon))

    @reference("rms_norm")
    def _rms_norm_ref(torch, F, a, attrs, shape):
        # transformers' LlamaRMSNorm.
        x, g = a
        var = x.pow(2).mean(-1, keepdim=True)
        return g * (x * torch.rsqrt(var + attrs["epsilon"]))

    def rotary_embedding(self, x, seq_dim, theta=10000.0, llama3_scaling=None, hint=None):
        """RoPE over the last dim (head_dim), positions along `seq_dim`.
        llama3_scaling: (factor, low_freq_factor, high_freq_factor,
        original_max_position_embeddings), Llama 3's frequency scaling."""
        self._f32("train.rotary_embedding", x)
        if x.rank < 2 or not 0 <= seq_dim < x.rank - 1:
            raise IRError(f"train.rotary_embedding: seq_dim {seq_dim} must be in "
                          f"[0, {x.rank - 1}) for {x.type}")
        if x.shape[-1] % 2:
            raise IRError(f"train.rotary_embedding: head dim of {x.type} must be even")
        if not (float(theta) > 0 and math.isfinite(float(theta))):
            raise IRError(f"train.rotary_embedding: theta must be positive, got {theta}")
        scaling = ""
        if llama3_scaling is not None:
            llama3_scaling = check_llama3_scaling(llama3_scaling, "train.rotary_embedding")
            scaling = (", llama3_scaling = array<f64: "
                       + ", ".join(fmt_float(v) for v in llama3_scaling) + ">")
        return self._emit(hint or "rope", x.shape, "f32",
                          f"train.rotary_embedding {x.name} {{seq_dim = {int(seq_dim)} : i64, "
                          f"theta = {fmt_float(theta)} : f64{scaling}}} : {x.type}",
                          "rotary_embedding", (x,), seq_dim=int(seq_dim),
                          theta=float(theta), llama3_scaling=llama3_scaling)

    @reference("rotary_embedding")
    def _rotary_embedding_ref(torch, F, a, attrs, shape):
        # transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb: the
        # frequencies and angles in float32, cos / sin cast to x's dtype.
        x, seq_dim = a[0], attrs["seq_dim"]
        D, T = x.shape[-1], x.shape[seq_dim]
        inv = 1.0 / (attrs["theta"] ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
        if attrs.get("llama3_scaling") is not None:
            inv = llama3_inv_freq(torch, inv, attrs["llama3_scaling"])
        freqs = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat([freqs, freqs], dim=-1)
        view = [T if d == seq_dim else (D if d == x.dim() - 1 else 1)
                for d in range(x.dim())]
        cos = emb.cos().to(x.dtype).reshape(view)
        sin = emb.sin().to(x.dtype).reshape(view)
        x1, x2 = x[..., :D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def softmax(self, x, causal=False, hint=None):
        self._f32("train.softmax", x)
        if causal and (x.rank < 2 or x.shape[-1] != x.shape[-2]):
            raise IRError(f"train.softmax {{causal}}: last two dims of {x.type} must be equal")
        attr = " {causal}" if causal else ""
        return self._emit(hint or "sm", x.shape, "f32",
                          f"train.softmax {x.name}{attr} : {x.type}",
                          "softmax", (x,), causal=bool(causal))

    @reference("softmax")
    def _softmax_ref(torch, F, a, attrs, shape):
        x = a[0]
        if attrs["causal"]:
            T = x.shape[-1]
            mask = torch.ones(T, T, dtype=torch.bool).triu(1)
            x = x.masked_fill(mask, float("-inf"))
        return torch.softmax(x, dim=-1)

    def attention(self, q, k, v, causal=False, scale=None, hint=None):
        """Fused scaled dot-product attention (train.attention):
        softmax(scale * q k^T [causal]) v over heads [..., T, D], as
        F.scaled_dot_product_attention; scale defaults to 1/sqrt(D). Keeps no
        [T, T] tensor: the backward recomputes the scores. Grouped-query: k
        and v may have fewer heads (dim -3) than q, a divisor of q's; query
        head h then reads key / value head h // (Hq / Hk)."""
        self._f32("train.attention", q, k, v)
        grouped = q.rank >= 3 and k.rank == q.rank and k.shape[:-3] == q.shape[:-3] \
            and k.shape[-3] > 0 and q.shape[-3] % k.shape[-3] == 0
        if q.rank < 2 or k.shape != v.shape or k.rank != q.rank or \
                k.shape[-1] != q.shape[-1] or (k.shape[:-2] != q.shape[:-2] and not grouped):
            raise IRError(f"train.attention: q {q.type}, k {k.type}, v {v.type} must be "
                          "[..., Tq, D], [..., Tk, D], [..., Tk, D] (or grouped-query: "
                          "[..., Hq, Tq, D] and [..., Hk, Tk, D] with Hk dividing Hq)")
        if causal and q.shape[-2] != k.shape[-2]:
            raise IRError(f"train.attention {{causal}}: needs as many keys as queries, "
                          f"got {q.type} and {k.type}")
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        if not (scale > 0 and math.isfinite(scale)):
            raise IRError(f"train.attention: scale must be finite and positive, got {scale}")
        base = self._fresh(hint or "attn")
        out = Value(f"{base}#0", q.shape, "f32")
        lse = tensor_type(q.shape[:-1], "f32")
        attrs = ("causal, " if causal else "") + f"scale = {fmt_float(scale)} : f64"
        self.lines.append(
            f"{base}:2 = train.attention {q.name}, {k.name}, {v.name} {{{attrs}}}"
            f" : {q.type}, {k.type} -> {q.type}, {lse}")
        self.ops.append((out, "attention", (q, k, v),
                         {"causal": bool(causal), "scale": scale}))
        return out

    @reference("attention")
    def _attention_ref(torch, F, a, attrs, shape):
        q, k, v = a
        if q.dim() >= 3 and k.shape[-3] != q.shape[-3]:   # grouped-query: repeat_kv
            groups = q.shape[-3] // k.shape[-3]
            k = k.repeat_interleave(groups, dim=-3)
            v = v.repeat_interleave(groups, dim=-3)
        s = torch.matmul(q, k.transpose(-1, -2)) * attrs["scale"]
        if attrs["causal"]:
            T = s.shape[-1]
            mask = torch.ones(T, T, dtype=torch.bool, device=s.device).triu(1)
            s = s.masked_fill(mask, float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    # -- layout ---------------------------------------------------------------------------
    def reshape(self, x, shape, hint=None):
        shape = tuple(int(d) for d in shape)
        if _numel(shape) != _numel(x.shape):
            raise IRError(f"train.reshape: {x.type} -> {tensor_type(shape, x.dtype)} "
                          "changes the element count")
        return self._emit(hint or "rs", shape, x.dtype,
                          f"train.reshape {x.name} : {x.type} -> "
                          f"{tensor_type(shape, x.dtype)}", "reshape", (x,), shape=shape)

    @reference("reshape")
    def _reshape_ref(torch, F, a, attrs, shape):
        return a[0].reshape(attrs["shape"])

    def transpose(self, x, perm, hint=None):
        self._f32("train.transpose", x)
        perm = [int(p) for p in perm]
        if sorted(perm) != list(range(x.rank)):
            raise IRError(f"train.transpose: {perm} is not a permutation of rank {x.rank}")
        shape = tuple(x.shape[p] for p in perm)
        return self._emit(hint or "tr", shape, "f32",
                          f"train.transpose {x.name} [{', '.join(map(str, perm))}] : "
                          f"{x.type} -> {tensor_type(shape)}", "transpose", (x,), perm=perm)

    @reference("transpose")
    def _transpose_ref(torch, F, a, attrs, shape):
        return a[0].permute(*attrs["perm"])

    def reduce(self, kind, x, dims, hint=None):
        self._f32("train.reduce", x)
        if kind not in ("sum", "mean", "max"):
            raise IRError(f"train.reduce: kind must be sum, mean or max, got {kind!r}")
        dims = sorted(int(d) for d in dims)
        if len(set(dims)) != len(dims) or any(d < 0 or d >= x.rank for d in dims):
            raise IRError(f"train.reduce: bad dims {dims} for {x.type}")
        shape = tuple(s for i, s in enumerate(x.shape) if i not in dims)
        return self._emit(hint or kind, shape, "f32",
                          f"train.reduce {kind} {x.name} [{', '.join(map(str, dims))}] : "
                          f"{x.type} -> {tensor_type(shape)}", "reduce", (x,),
                          kind=kind, dims=dims)

    @reference("reduce")
    def _reduce_ref(torch, F, a, attrs, shape):
        if not attrs["dims"]:
            return a[0]
        fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax}[attrs["kind"]]
        return fn(a[0], dim=tuple(attrs["dims"]))

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

    @reference("broadcast")
    def _broadcast_ref(torch, F, a, attrs, shape):
        r = a[0]
        for d in attrs["dims"]:
            r = r.unsqueeze(d)
        return r.expand(*shape)

    def slice(self, x, dim, start, size, hint=None):
        """x[..., start:start+size, ...] along `dim` (f32 or i32)."""
        if not isinstance(x, Value):
            raise IRError(f"train.slice: the operand is {x!r}, not a value")
        dim, start, size = int(dim), int(start), int(size)
        if not 0 <= dim < x.rank:
            raise IRError(f"train.slice: dim {dim} out of range for {x.type}")
        if start < 0 or size <= 0 or start + size > x.shape[dim]:
            raise IRError(f"train.slice: [{start}, {start + size}) out of range for "
                          f"dim {dim} of {x.type}")
        shape = x.shape[:dim] + (size,) + x.shape[dim + 1:]
        return self._emit(hint or "slice", shape, x.dtype,
                          f"train.slice {x.name} {{dim = {dim} : i64, start = {start} : i64}}"
                          f" : {x.type} -> {tensor_type(shape, x.dtype)}", "slice", (x,),
                          dim=dim, start=start, size=size)

    @reference("slice")
    def _slice_ref(torch, F, a, attrs, shape):
        return a[0].narrow(attrs["dim"], attrs["start"], attrs["size"])

    def concat(self, xs, dim, hint=None):
        """The tensors `xs` joined along `dim`."""
        xs = list(xs)
        if not xs:
            raise IRError("train.concat: needs at least one operand")
        self._f32("train.concat", *xs)
        dim = int(dim)
        rank = xs[0].rank
        if not 0 <= dim < rank:
            raise IRError(f"train.concat: dim {dim} out of range for rank {rank}")
        for x in xs:
            if x.rank != rank or any(x.shape[d] != xs[0].shape[d]
                                     for d in range(rank) if d != dim):
                raise IRError(f"train.concat: {x.type} does not match {xs[0].type} "
                              f"outside dim {dim}")
        shape = list(xs[0].shape)
        shape[dim] = sum(x.shape[dim] for x in xs)
        shape = tuple(shape)
        return self._emit(hint or "cat", shape, "f32",
                          f"train.concat {', '.join(x.name for x in xs)} {{dim = {dim} : i64}}"
                          f" : ({', '.join(x.type for x in xs)}) -> {tensor_type(shape)}",
                          "concat", xs, dim=dim)

    @reference("concat")
    def _concat_ref(torch, F, a, attrs, shape):
        return torch.cat(a, dim=attrs["dim"])

    # -- losses and lookups -----------------------------------------------------------------
    def cross_entropy(self, logits, labels, hint=None, ignore_index=None):
        """Mean softmax cross-entropy; rows whose label is ignore_index count
        for nothing (PyTorch's ignore_index)."""
        self._f32("train.cross_entropy", logits)
        if logits.rank != 2 or labels.dtype != "i32" or labels.shape != logits.shape[:1]:
            raise IRError(f"train.cross_entropy: need tensor<NxCxf32>, tensor<Nxi32>; "
                          f"got {logits.type}, {labels.type}")
        attrs = ""
        if ignore_index is not None:
            ignore_index = int(ignore_index)
            if not -2**31 <= ignore_index < 2**31:
                raise IRError(f"train.cross_entropy: ignore_index {ignore_index} is not an "
                              "int32 label")
            attrs = f" {{ignore_index = {ignore_index} : i64}}"
        return self._emit(hint or "loss", (), "f32",
                          f"train.cross_entropy {logits.name}, {labels.name}{attrs} : "
                          f"({logits.type}, {labels.type}) -> tensor<f32>",
                          "cross_entropy", (logits, labels), ignore_index=ignore_index)

    @reference("cross_entropy")
    def _cross_entropy_ref(torch, F, a, attrs, shape):
        ignore = attrs.get("ignore_index")
        return F.cross_entropy(a[0], a[1].long(),
                               ignore_index=-100 if ignore is None else ignore)

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

    @reference("embedding")
    def _embedding_ref(torch, F, a, attrs, shape):
        return F.embedding(a[1].long(), a[0])

    def fill(self, shape, value, hint=None):
        return self._emit(hint or "fill", shape, "f32",
                          f"train.fill {{value = {fmt_float(value)} : f64}} : "
                          f"{tensor_type(shape)}", "fill", (), value=float(value))

    @reference("fill")
    def _fill_ref(torch, F, a, attrs, shape):
        return torch.full(shape, attrs["value"])

    # -- end ------------------------------------------------------------------------------------
    def ret(self, loss):
        """Returns `loss` (a scalar f32) from the step: what autodiff
        differentiates and the report prints."""
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
        self.buffers = []
        self.buffers_by_name = {}
        self.functions = []

    def param(self, name, shape, init="normal", scale=None, frozen=False):
        if name in self.params_by_name or name in self.buffers_by_name:
            raise IRError(f"duplicate parameter {name!r}")
        p = Param(name, shape, init, scale, frozen=frozen)
        self.params.append(p)
        self.params_by_name[name] = p
        return p

    def buffer(self, name, shape, dtype="f32", init="zeros", scale=None):
        """A non-trainable module tensor (`train.buffer`), read with
        `Function.buffer_read`."""
        if name in self.params_by_name or name in self.buffers_by_name:
            raise IRError(f"duplicate buffer {name!r}")
        b = Buffer(name, shape, dtype, init, scale)
        self.buffers.append(b)
        self.buffers_by_name[name] = b
        return b

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
        lines += ["  " + b.to_mlir() for b in self.buffers]
        for f in self.functions:
            lines.append(f.to_mlir())
        lines.append("}")
        return "\n".join(lines) + "\n"

    __str__ = to_mlir

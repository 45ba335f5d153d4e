//===- TrainOps.td - train dialect operations --------------*- tablegen -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_TRAIN_TRAINOPS_TD
#define ZTRAIN_DIALECT_TRAIN_TRAINOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "ztrain/Dialect/Train/IR/TrainDialect.td"
include "ztrain/Dialect/Train/IR/TrainEnums.td"
include "ztrain/Dialect/Train/IR/TrainInterfaces.td"

// Every tensor of a train op has positive dimensions and a byte size that
// fits in int64 (TrainOps.h: ValidTensorShapes).
def Train_ValidTensorShapes : NativeOpTrait<"ValidTensorShapes"> {
  let cppNamespace = "::ztrain::train";
}

// The floating-point tensors of the op share one element type (f32, bf16 or
// f16); integer ids and labels and an f32 loss are exempt where the op says
// so (TrainOps.h: SameFloatElementType).
def Train_SameFloatElementType : NativeOpTrait<"SameFloatElementType"> {
  let cppNamespace = "::ztrain::train";
}

// Every attribute of a train op is one of its own (ODS-declared) or a
// dialect attribute (`dialect.name`, checked by its dialect): a misspelt
// `{casual}` on a softmax is an error, not a silently non-causal softmax
// (TrainOps.h: KnownAttributes).
def Train_KnownAttributes : NativeOpTrait<"KnownAttributes"> {
  let cppNamespace = "::ztrain::train";
}

class Train_Op<string mnemonic, list<Trait> traits = []>
    : Op<Train_Dialect, mnemonic,
         !listconcat(traits, [Train_ValidTensorShapes, Train_KnownAttributes])> {
  // A fusible op's element rule (FusibleOpInterface, declared with the
  // Train_Fusible trait): the body of
  //   Value emitElement(ElementBuilder &e, ValueRange x)
  // returning the f32 result for one element of the operands `x`, with the
  // float operations of the op's runtime kernel in their order
  // (ElementBuilder.h). The result's rounding to its element type is the
  // generator's.
  code element = "";
  code elementDefinition = !if(!empty(element), "", [{
    ::mlir::Value $cppClass::emitElement(::ztrain::train::ElementBuilder &e,
                                         ::mlir::ValueRange x) {
      (void)e;
      (void)x;
  }] # element # [{
    }
  }]);
}

// Compute ops run in f32, bf16 or f16 (kernels accumulate in f32).
def Train_FloatTensor : StaticShapeTensorOf<[F32, BF16, F16]>;
def Train_I32Tensor : StaticShapeTensorOf<[I32]>;
def Train_F32Tensor : StaticShapeTensorOf<[F32]>;
// Data movement also takes integer ids and labels (a shifted label window).
def Train_FloatOrI32Tensor : StaticShapeTensorOf<[F32, BF16, F16, I32]>;
def Train_F32Scalar : 0DTensorOf<[F32]>;
// An f32 scalar the op's assembly format leaves implicit.
def Train_F32Flag : 0DTensorOf<[F32]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getF32Type())";
}

// A differentiable compute op: pure and built into the backward pass by
// train-autodiff through GradientOpInterface.
class Train_ComputeOp<string mnemonic, list<Trait> traits = []>
    : Train_Op<mnemonic, !listconcat(traits, [Pure, Train_SameFloatElementType,
        DeclareOpInterfaceMethods<Train_GradientOpInterface>])> {
  // The gradient rule, declared beside the op: the body of
  //   SmallVector<Value> buildGradients(OpBuilder &b,
  //                                     ArrayRef<Value> resultGrads)
  // returning one adjoint per operand (a null Value where there is none).
  // In scope: `b`, `resultGrads`, `loc` (the op's location), `dy` (the
  // adjoint of the first result) and the helpers of ztrain::train::grad
  // (TrainOps.h). Left empty, the rule is written in TrainGradients.cpp:
  // that is for rules with more logic than creating a few ops.
  code gradient = "";
  // The class's other C++ definitions (an elementwise op's kernel call).
  code kernelDefinition = "";
  let extraClassDefinition = kernelDefinition # elementDefinition #
      !if(!empty(gradient), "", [{
    ::llvm::SmallVector<::mlir::Value> $cppClass::buildGradients(
        ::mlir::OpBuilder &b, ::llvm::ArrayRef<::mlir::Value> resultGrads) {
      using namespace ::ztrain::train::grad;
      ::mlir::Location loc = getLoc();
      ::mlir::Value dy = resultGrads.front();
      (void)loc;
      (void)dy;
  }] # gradient # [{
    }
  }]);
}

// An op that only the backward pass needs; not differentiated again.
class Train_GradOp<string mnemonic, list<Trait> traits = []>
    : Train_Op<mnemonic, !listconcat(traits, [Pure, Train_SameFloatElementType])>;

// An op that runs as one runtime kernel call, which it describes
// (RuntimeKernelOpInterface; the definition is in TrainKernels.cpp unless
// the op's class gives it).
defvar Train_Kernel = DeclareOpInterfaceMethods<Train_RuntimeKernelOpInterface>;

// An elementwise op train-fuse-elementwise may fuse; its `let element`
// rule is its arithmetic in the generated kernel (FusibleOpInterface).
defvar Train_Fusible = DeclareOpInterfaceMethods<Train_FusibleOpInterface>;

// The call of an elementwise kernel named after the op: its operands and
// result, then the element count (the ABI's `(in..., out, n)`).
class Train_ElementwiseKernel<string kernel> {
  code definition = [{
    ::ztrain::train::KernelCall $cppClass::getKernelCall() {
      return ::ztrain::train::elementwiseKernelCall(getOperation(), "}] #
      kernel # [{");
    }
  }];
}

//===----------------------------------------------------------------------===//
// Module-level state
//===----------------------------------------------------------------------===//

def Train_ParamOp : Train_Op<"param", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "declares a trainable parameter";
  let description = [{
    Declares a parameter of the model as a module-level symbol with a static
    tensor type and an initializer. The runtime allocates it once and
    initializes it deterministically from the run's seed and the symbol name
    (or loads it from a safetensors file under the same name), so the name
    is also the checkpoint key.

    Initializers: `zeros`, `ones`, `normal` (N(0, scale^2)), `uniform`
    (U(-scale, scale)).

    ```mlir
    train.param @fc1.weight : tensor<128x784xf32> init(normal, 2.000000e-02)
    train.param @fc1.bias : tensor<128xf32> init(zeros)
    ```

    A bf16 or f16 parameter is initialized with the f32 initializer's
    values rounded to its type (and its f32 master state, if it has one,
    with the values themselves).

    A `frozen` parameter is not trained (PyTorch's `requires_grad=False`:
    a frozen embedding, the base weights under LoRA adapters).
    `train-autodiff` gives it no gradient and `train-optimizer` no update
    and no state, but it is still a parameter of the model: partitioned at
    rest at ZeRO stage 3 and gathered for use like the others, offloaded
    with them, in checkpoints and `--save`, and priced as a parameter (with
    no gradient) by `zero-report`.

    ```mlir
    train.param @wte.weight : tensor<1000x64xf32> init(normal, 2.000000e-02) frozen
    ```

    **Constraints:**
    - the element type is f32, bf16 or f16;
    - `normal` and `uniform` need a positive scale; `zeros` and `ones` take none.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<AnyStaticShapeTensor>:$type,
                       Train_InitKind:$init,
                       OptionalAttr<F64Attr>:$scale,
                       UnitAttr:$frozen);
  let assemblyFormat = [{
    $sym_name `:` $type `init` `(` $init (`,` $scale^)? `)` (`frozen` $frozen^)?
    attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def Train_StateOp : Train_Op<"state", [Symbol, HasParent<"::mlir::ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "declares an optimizer state belonging to a parameter";
  let description = [{
    Declares per-parameter optimizer state (momentum buffer, Adam moments)
    as a module-level symbol. `train-optimizer` creates these; the runtime
    zero-initializes them.

    ```mlir
    train.state @fc1.weight.exp_avg : tensor<128x784xf32> of @fc1.weight
    ```

    A `master` state is the f32 master copy of a bf16 or f16 parameter in
    mixed-precision training (`train-precision`): the runtime initializes it
    with the parameter's initial values in f32 (the parameter holds them
    rounded), the optimizer updates it, and the parameter is the master
    rounded after every update. The moments of such a parameter are f32 too.

    ```mlir
    train.param @fc1.weight : tensor<128x784xbf16> init(normal, 2.000000e-02)
    train.state @fc1.weight.master : tensor<128x784xf32> of @fc1.weight master
    train.state @fc1.weight.exp_avg : tensor<128x784xf32> of @fc1.weight
    ```

    **Constraints:**
    - `@param` names a `train.param` of the same shape;
    - the element type is the parameter's, or f32 when the parameter is bf16
      or f16;
    - a `master` state is f32 and belongs to a bf16 or f16 parameter.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<AnyStaticShapeTensor>:$type,
                       FlatSymbolRefAttr:$param, UnitAttr:$master);
  let assemblyFormat = "$sym_name `:` $type `of` $param (`master` $master^)? attr-dict";
}

def Train_ParamReadOp : Train_Op<"param_read", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead]>]> {
  let summary = "reads the current value of a parameter";
  let description = [{
    Yields the current value of a `train.param`. A parameter may be read any
    number of times (tied weights read it twice); `train-autodiff` sums the
    adjoints of all reads into the parameter's gradient.

    ```mlir
    %w = train.param_read @fc1.weight : tensor<128x784xf32>
    ```

    **Constraints:**
    - `@param` names a `train.param` declared in the enclosing module;
    - the result type equals the parameter's type.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$param attr-dict `:` type($result)";
}

def Train_BufferOp : Train_Op<"buffer", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "declares a non-trainable module-level tensor (a buffer)";
  let description = [{
    A tensor of the model that is not trained: an attention mask, a table
    (PyTorch's `register_buffer`). Every rank holds all of it (buffers are
    never partitioned), nothing computes a gradient for it and no step
    writes it. The runtime fills it once, before the first step: from the
    `--init` file when that has a tensor under the buffer's name (dtype and
    shape must match), else by the declared rule, deterministically from the
    run's seed and the name (docs/runtime.md, "Buffers"). Checkpoints and
    `--save` carry it, so a resumed run reads back what it started with.

    Rules: `zeros`, `ones`, `normal` (N(0, scale^2)), `uniform`
    (U(-scale, scale)) and `causal`: 1 where the column index exceeds the
    row index in the last two dimensions, 0 elsewhere (the mask
    `train.masked_fill` needs for causal attention).
    `external` has no rule: the values must come from the `--init` file
    (or a checkpoint), and the executable refuses to start without them.
    The PyTorch importer declares constants it folded this way (rotary
    tables, masks that are not causal).

    ```mlir
    train.buffer @attn.mask : tensor<64x64xi32> init(causal)
    train.buffer @pos_table : tensor<64x32xf32> init(zeros)
    ```

    **Constraints:**
    - the element type is `f32` or `i32`;
    - `normal` and `uniform` need a positive scale and an `f32` buffer;
      `zeros`, `ones`, `causal` and `external` take none;
    - `causal` needs rank >= 2.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<AnyStaticShapeTensor>:$type,
                       Train_InitKind:$init,
                       OptionalAttr<F64Attr>:$scale);
  let assemblyFormat = [{
    $sym_name `:` $type `init` `(` $init (`,` $scale^)? `)` attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def Train_BufferReadOp : Train_Op<"buffer_read", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead]>]> {
  let summary = "reads a buffer";
  let description = [{
    Yields the value of a `train.buffer`. It is a constant of the step:
    `train-autodiff` computes no adjoint for it, and its result lives in the
    buffer's storage (no copy, no activation bytes).

    ```mlir
    %mask = train.buffer_read @attn.mask : tensor<64x64xi32>
    ```

    **Constraints:**
    - `@buffer` names a `train.buffer` declared in the enclosing module;
    - the result type equals the buffer's type.
  }];
  let arguments = (ins FlatSymbolRefAttr:$buffer);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$buffer attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Train_BinaryOp<string mnemonic, string what>
    : Train_ComputeOp<mnemonic, [SameOperandsAndResultType, Train_Kernel,
                                 Train_Fusible]> {
  let kernelDefinition = Train_ElementwiseKernel<mnemonic>.definition;
  let summary = "elementwise " # what;
  let description = [{
    Elementwise }] # what # [{ of two tensors of the same shape.

    ```mlir
    %c = train.}] # mnemonic # [{ %a, %b : tensor<8x16xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$lhs, Train_FloatTensor:$rhs);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Train_AddOp : Train_BinaryOp<"add", "sum"> {
  let element = [{
    return e.add(x[0], x[1]);
  }];
  let gradient = [{
    return {dy, dy};
  }];
}
def Train_SubOp : Train_BinaryOp<"sub", "difference"> {
  let element = [{
    return e.sub(x[0], x[1]);
  }];
  let gradient = [{
    return {dy, scaleBy(b, loc, dy, -1.0)};
  }];
}
def Train_MulOp : Train_BinaryOp<"mul", "product"> {
  let element = [{
    return e.mul(x[0], x[1]);
  }];
  let gradient = [{
    return {MulOp::create(b, loc, getType(), dy, getRhs()),
            MulOp::create(b, loc, getType(), dy, getLhs())};
  }];
}

class Train_UnaryOp<string mnemonic, string what>
    : Train_ComputeOp<mnemonic, [SameOperandsAndResultType, Train_Kernel,
                                 Train_Fusible]> {
  let kernelDefinition = Train_ElementwiseKernel<mnemonic>.definition;
  let summary = what;
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Train_ReluOp : Train_UnaryOp<"relu", "rectified linear unit"> {
  let element = [{
    // x < 0 ? 0 : x (Elementwise.def): NaN and -0 pass.
    return e.select(e.lt(x[0], e.constant(0.0f)), e.constant(0.0f), x[0]);
  }];
  let gradient = [{
    return {ReluGradOp::create(b, loc, getType(), dy, getInput())};
  }];
  let description = [{
    `max(x, 0)` elementwise. The gradient at 0 is 0, as in PyTorch.

    ```mlir
    %y = train.relu %x : tensor<32x128xf32>
    ```
  }];
}

def Train_GeluOp : Train_UnaryOp<"gelu", "Gaussian error linear unit (tanh form)"> {
  let element = [{
    return e.gelu(x[0]);
  }];
  let gradient = [{
    return {GeluGradOp::create(b, loc, getType(), dy, getInput())};
  }];
  let description = [{
    `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` elementwise: the
    approximation GPT-2 uses (PyTorch `gelu(approximate='tanh')`).

    ```mlir
    %y = train.gelu %x : tensor<8x64x256xf32>
    ```
  }];
}

def Train_GeluErfOp : Train_UnaryOp<"gelu_erf", "Gaussian error linear unit (exact, erf form)"> {
  let element = [{
    return e.geluErf(x[0]);
  }];
  let gradient = [{
    return {GeluErfGradOp::create(b, loc, getType(), dy, getInput())};
  }];
  let description = [{
    `0.5 x (1 + erf(x / sqrt(2)))` elementwise: the exact GELU, PyTorch's
    default (`F.gelu(x)`, `nn.GELU()`, approximate='none'), evaluated in
    float in the order of PyTorch's GeluKernel.cpp. Models imported from
    PyTorch use it (`python -m ztrain.importer`); `train.gelu` is the tanh
    approximation GPT-2 uses.

    ```mlir
    %y = train.gelu_erf %x : tensor<8x64x256xf32>
    ```
  }];
}

def Train_TanhOp : Train_UnaryOp<"tanh", "hyperbolic tangent"> {
  let element = [{
    return e.tanh(x[0]);
  }];
  let gradient = [{
    return {TanhGradOp::create(b, loc, getType(), dy, getResult())};
  }];
  let description = [{
    `tanh(x)` elementwise (PyTorch `torch.tanh`), as Cephes' tanhf
    (within an ulp of the C library's). Imported models use it where they
    write the tanh GELU out by hand (minGPT's `NewGELU`).

    ```mlir
    %y = train.tanh %x : tensor<8x64x256xf32>
    ```
  }];
}

def Train_ErfOp : Train_UnaryOp<"erf", "Gauss error function"> {
  let element = [{
    return e.erff(x[0]);
  }];
  let gradient = [{
    return {ErfGradOp::create(b, loc, getType(), dy, getInput())};
  }];
  let description = [{
    `erf(x)` elementwise (PyTorch `torch.erf`). Imported models use it where
    they write the exact GELU out by hand.

    ```mlir
    %y = train.erf %x : tensor<8x64x256xf32>
    ```
  }];
}

def Train_DivOp : Train_BinaryOp<"div", "quotient"> {
  let element = [{
    return e.div(x[0], x[1]);
  }];
  let gradient = [{
    // d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b: da = dy / b, db = -(da * y).
    Value da = DivOp::create(b, loc, getType(), dy, getRhs());
    Value dbm = MulOp::create(b, loc, getType(), da, getResult());
    return {da, NegOp::create(b, loc, getType(), dbm)};
  }];
}

def Train_SiluOp : Train_UnaryOp<"silu", "sigmoid linear unit"> {
  let element = [{
    return e.silu(x[0]);
  }];
  let gradient = [{
    return {SiluGradOp::create(b, loc, getType(), dy, getInput())};
  }];
  let description = [{
    `x * sigmoid(x)` elementwise (PyTorch `F.silu`), the activation of
    Llama's SwiGLU feed-forward.

    ```mlir
    %y = train.silu %x : tensor<8x64x256xf32>
    ```
  }];
}

def Train_SigmoidOp : Train_UnaryOp<"sigmoid", "logistic sigmoid"> {
  let element = [{
    return e.sigmoid(x[0]);
  }];
  let gradient = [{
    return {SigmoidGradOp::create(b, loc, getType(), dy, getResult())};
  }];
  let description = [{
    `1 / (1 + exp(-x))` elementwise.

    ```mlir
    %y = train.sigmoid %x : tensor<32x128xf32>
    ```
  }];
}

def Train_ExpOp : Train_UnaryOp<"exp", "exponential"> {
  let element = [{
    return e.expf(x[0]);
  }];
  let gradient = [{
    return {MulOp::create(b, loc, getType(), dy, getResult())};
  }];
  let description = [{
    `exp(x)` elementwise; overflows to `inf` above ~88.7 in f32.

    ```mlir
    %y = train.exp %x : tensor<32x128xf32>
    ```
  }];
}

def Train_SqrtOp : Train_UnaryOp<"sqrt", "square root"> {
  let element = [{
    return e.sqrt(x[0]);
  }];
  let gradient = [{
    // dy / (2 y): the halving is exact, so this is PyTorch's dy / (2 * y).
    Value q = DivOp::create(b, loc, getType(), dy, getResult());
    return {scaleBy(b, loc, q, 0.5)};
  }];
  let description = [{
    `sqrt(x)` elementwise; NaN for negative `x`. The gradient at 0 is
    `inf`, as in PyTorch.

    ```mlir
    %y = train.sqrt %x : tensor<32x128xf32>
    ```
  }];
}

def Train_RsqrtOp : Train_UnaryOp<"rsqrt", "reciprocal square root"> {
  let element = [{
    return e.rsqrt(x[0]);
  }];
  let gradient = [{
    return {RsqrtGradOp::create(b, loc, getType(), dy, getResult())};
  }];
  let description = [{
    `1 / sqrt(x)` elementwise, with an IEEE division (not an approximate
    reciprocal square root).

    ```mlir
    %y = train.rsqrt %x : tensor<8x64x1xf32>
    ```
  }];
}

def Train_NegOp : Train_ComputeOp<"neg", [SameOperandsAndResultType, Train_Kernel,
                                          Train_Fusible]> {
  let element = [{
    // The scale kernel with factor -1 (TrainKernels.cpp).
    return e.mul(x[0], e.constant(-1.0f));
  }];
  let gradient = [{
    return {NegOp::create(b, loc, getType(), dy)};
  }];
  let summary = "negation";
  let description = [{
    `-x` elementwise (runs as the `scale` kernel with factor -1, which is
    exact).

    ```mlir
    %y = train.neg %x : tensor<32x128xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Train_MaskedFillOp : Train_ComputeOp<"masked_fill", [
    AllTypesMatch<["input", "result"]>, Train_Kernel]> {
  let gradient = [{
    // Masked elements did not come from the input: their adjoint is 0.
    return {MaskedFillOp::create(b, loc, getType(), dy, getMask(),
                                 b.getF64FloatAttr(0.0)),
            Value()};
  }];
  let summary = "replaces masked elements with a constant";
  let description = [{
    `result = mask != 0 ? value : input` elementwise (PyTorch
    `masked_fill`), with `mask` an i32 tensor of the trailing dimensions of
    `input`, broadcast over the leading ones: a `[T, T]` mask applies to
    every `[B, H, T, T]` score block. The gradient is 0 at masked elements.

    ```mlir
    %s2 = train.masked_fill %s, %mask {value = 0xFFF0000000000000 : f64}
        : tensor<8x4x64x64xf32>, tensor<64x64xi32>
    ```

    **Constraints:**
    - `mask`'s shape is a suffix of `input`'s shape.
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_I32Tensor:$mask,
                       F64Attr:$value);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input `,` $mask attr-dict `:` type($input) `,` type($mask)";
  let hasVerifier = 1;
}

def Train_WhereOp : Train_ComputeOp<"where", [
    AllTypesMatch<["on_true", "on_false", "result"]>, Train_Kernel]> {
  let summary = "selects elements of two tensors by a mask";
  let description = [{
    `result = mask != 0 ? on_true : on_false` elementwise (PyTorch
    `torch.where(mask.bool(), on_true, on_false)`), with `mask` an i32
    tensor of the trailing dimensions of the result, broadcast over the
    leading ones. The adjoint of `on_true` is the result's adjoint where the
    mask is set and 0 elsewhere; `on_false`'s the other way round; the mask
    has none.

    ```mlir
    %y = train.where %mask, %a, %b : tensor<64x64xi32>, tensor<8x4x64x64xf32>
    ```

    **Constraints:**
    - `on_true`, `on_false` and the result have one type;
    - `mask`'s shape is a suffix of the result's shape.
  }];
  let arguments = (ins Train_I32Tensor:$mask, Train_FloatTensor:$on_true,
                       Train_FloatTensor:$on_false);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $mask `,` $on_true `,` $on_false attr-dict `:` type($mask) `,` type($result)
  }];
  let hasVerifier = 1;
  let gradient = [{
    Value zero = FillOp::create(b, loc, getType(), b.getF64FloatAttr(0.0));
    return {Value(), WhereOp::create(b, loc, getType(), getMask(), dy, zero),
            WhereOp::create(b, loc, getType(), getMask(), zero, dy)};
  }];
}

def Train_DropoutOp : Train_ComputeOp<"dropout", [SameOperandsAndResultType, Train_Kernel]> {
  let summary = "zeroes random elements and rescales the others (training mode)";
  let description = [{
    Inverted dropout as PyTorch's `F.dropout(x, p, training=True)`: each
    element is dropped (multiplied by 0, so NaN and inf still propagate)
    with probability `probability` and the kept ones are multiplied by
    `1 / (1 - probability)`.

    Which elements drop is a pure function of the run's seed, `stream`, the
    step number and the element's index in the *global* batch of the step
    (docs/runtime.md, "Dropout"): rank r of N holds elements
    `[r * n, (r + 1) * n)` of the global tensor, so every ZeRO stage and
    every rank count drops the same elements as one process does, a resumed
    run the same as an uninterrupted one, and a recomputed op the same as
    the original. The input's leading dimension must be the batch (true of
    every activation the `models.*` builders make) for this to hold. The
    adjoint is the same op, with the same stream, applied to the result's
    adjoint: the same elements drop.

    ```mlir
    %h = train.dropout %x {probability = 1.000000e-01 : f64, stream = 3 : i64}
        : tensor<8x64x256xf32>
    ```

    **Constraints:**
    - `0 <= probability <= 1` (1 drops everything, as in PyTorch);
    - `stream >= 0`. Ops with one stream drop the same elements of
      same-shaped inputs; the Python builders number them from 0.
  }];
  let arguments = (ins Train_FloatTensor:$input, F64Attr:$probability,
                       I64Attr:$stream);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
  let gradient = [{
    return {DropoutOp::create(b, loc, getType(), dy, getProbabilityAttr(),
                              getStreamAttr())};
  }];
}

def Train_ScaleOp : Train_ComputeOp<"scale", [SameOperandsAndResultType, Train_Kernel,
                                              Train_Fusible]> {
  let element = [{
    // The kernel rounds the factor to float once.
    return e.mul(x[0], e.constant(static_cast<float>(getFactor().convertToDouble())));
  }];
  let gradient = [{
    return {scaleBy(b, loc, dy, getFactor().convertToDouble())};
  }];
  let summary = "multiplies by a constant";
  let description = [{
    `x * factor` elementwise.

    ```mlir
    %y = train.scale %x {factor = 1.250000e-01 : f64} : tensor<8x4x64x64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, F64Attr:$factor);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Train_BiasAddOp : Train_ComputeOp<"bias_add",
    [AllTypesMatch<["input", "result"]>, Train_Kernel,
     DeclareOpInterfaceMethods<Train_FusibleOpInterface, ["isLastDimOperand"]>]> {
  let element = [{
    return e.add(x[0], x[1]);
  }];
  let gradient = [{
    int64_t rank = ::llvm::cast<::mlir::RankedTensorType>(dy.getType()).getRank();
    Value db = ReduceOp::create(b, loc, getBias().getType(), ReduceKind::sum,
                                dy, leadingDims(rank - 1));
    return {dy, db};
  }];
  let summary = "adds a vector along the last dimension";
  let description = [{
    `result[..., j] = input[..., j] + bias[j]`.

    ```mlir
    %y = train.bias_add %x, %b : tensor<32x128xf32>, tensor<128xf32>
    ```

    **Constraints:**
    - `bias` has rank 1 and its size equals the last dimension of `input`.
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$bias);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input `,` $bias attr-dict `:` type($input) `,` type($bias)";
  let hasVerifier = 1;
}

def Train_FillOp : Train_Op<"fill", [Pure, Train_Kernel]> {
  let summary = "a tensor with every element equal to a constant";
  let description = [{
    ```mlir
    %one = train.fill {value = 1.000000e+00 : f64} : tensor<f32>
    ```
  }];
  let arguments = (ins F64Attr:$value);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Train_CastOp : Train_Op<"cast", [Pure, Train_Kernel, Train_Fusible,
    DeclareOpInterfaceMethods<Train_GradientOpInterface>]> {
  let extraClassDefinition = elementDefinition;
  let element = [{
    return x[0]; // the rounding to the result type is the cast
  }];
  let summary = "converts a tensor to another floating-point element type";
  let description = [{
    Converts every element of `input` to the result's element type (f32,
    bf16 or f16), rounding to nearest even; NaN stays NaN and a value beyond
    the result type's range becomes an infinity. Widening is exact.
    `train-precision` and `train-optimizer` place these casts where a
    mixed-precision step changes type: f32 inputs and buffers entering 16-bit
    compute, a 16-bit loss returned as f32, gradients reduced in f32. The
    gradient of a cast is the incoming adjoint cast back to the input type
    (as `torch.Tensor.to`).

    ```mlir
    %xb = train.cast %x : tensor<32x784xf32> to tensor<32x784xbf16>
    ```

    **Constraints:**
    - the input and the result have the same shape and different element
      types.
  }];
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def Train_FusedOp : Train_Op<"fused", [Pure, IsolatedFromAbove, SingleBlock]> {
  let summary = "elementwise ops run as one generated kernel";
  let description = [{
    A producer-consumer chain of fusible elementwise ops
    (`FusibleOpInterface`) that `train-fuse-elementwise` grouped: the body
    computes each element of its results from the same elements of its
    inputs (a bias operand from element `j` of the last dimension), and
    `lower-to-runtime` generates one loop for it that reads every input
    once and writes only the yielded values. Values computed inside and not
    yielded never reach memory: plan-memory gives them no buffer.

    The generated code computes each element with the same float operations
    in the same order as the members' runtime kernels, and rounds every
    member's result to its element type as storing it would, so a fused
    step is bitwise the unfused one (docs/design.md, "Fusion").

    ```mlir
    %h, %g = train.fused (%x, %b) : (tensor<8x64x256xf32>, tensor<256xf32>)
        -> (tensor<8x64x256xf32>, tensor<8x64x256xf32>) {
    ^bb0(%a: tensor<8x64x256xf32>, %c: tensor<256xf32>):
      %0 = train.bias_add %a, %c : tensor<8x64x256xf32>, tensor<256xf32>
      %1 = train.gelu %0 : tensor<8x64x256xf32>
      train.yield %0, %1 : tensor<8x64x256xf32>, tensor<8x64x256xf32>
    }
    ```

    **Constraints:**
    - the body's ops are fusible ops on f32 or bf16 tensors, all of whose
      results have one shape (the region's iteration shape);
    - every operand of a body op has that shape, except the last-dimension
      operands (a bias), which are vectors of its last dimension;
    - the block's arguments have the inputs' types, `train.yield`'s
      operands the results'.
  }];
  let arguments = (ins Variadic<Train_FloatTensor>:$inputs);
  let results = (outs Variadic<Train_FloatTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The body's yield.
    YieldOp getYield();
    /// The shape every element of the region is computed over.
    ::llvm::ArrayRef<int64_t> getIterationShape();
  }];
}

def Train_YieldOp : Train_Op<"yield", [Pure, Terminator, ReturnLike,
                                       HasParent<"FusedOp">]> {
  let summary = "the results of a train.fused region";
  let description = [{
    Ends a `train.fused` body: its operands become the region's results.
  }];
  let arguments = (ins Variadic<Train_FloatTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

//===----------------------------------------------------------------------===//
// Linear algebra, normalization, softmax
//===----------------------------------------------------------------------===//

def Train_MatmulOp : Train_ComputeOp<"matmul", [Train_Kernel]> {
  let summary = "(batched) matrix product with optional transposes";
  let description = [{
    `result = op(lhs) x op(rhs)` over the last two dimensions, where `op`
    swaps them when `transpose_a` / `transpose_b` is set. Leading dimensions
    are batch dimensions: `rhs` either has the same batch dimensions as
    `lhs` or is a plain matrix shared by every batch element (a linear layer
    applied to a [batch, seq, features] activation).

    ```mlir
    // x @ W^T with a PyTorch-layout weight [out, in]
    %y = train.matmul %x, %w {transpose_b}
        : (tensor<8x64x256xf32>, tensor<1024x256xf32>) -> tensor<8x64x1024xf32>
    ```

    **Constraints:**
    - both operands have rank >= 2; `rhs` has rank 2 or the rank of `lhs`;
    - batch dimensions agree, the contracted dimensions agree;
    - the result is [batch..., M, N].
  }];
  let arguments = (ins Train_FloatTensor:$lhs, Train_FloatTensor:$rhs,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Train_MatmulAccOp : Train_Op<"matmul_acc", [Pure,
    AllTypesMatch<["acc", "result"]>]> {
  let summary = "accumulating matrix product: acc + op(lhs) x op(rhs) in f32";
  let description = [{
    `result = acc + op(lhs) x op(rhs)` for matrices, `op` the transpose where
    `transpose_a` / `transpose_b` is set. `lhs` and `rhs` share a float
    element type (f32, bf16, f16); `acc` and `result` are f32 whatever it
    is, and the products are accumulated in f32: a bf16 product is never
    rounded to bf16 before it is added.

    `train-tile-loss` sums the vocabulary projection's weight gradient over
    its token tiles with a chain of these. Where nothing else reads `acc`,
    the lowering updates its buffer in place (dist::StepBuffers: the result
    is an alias of `acc`), so the chain is one [V, C] buffer, and when the
    chain's last result is a parameter's gradient, that gradient buffer.

    How the product meets `acc` is the GEMM library's (BLAS / cuBLAS with
    beta = 1, which may add the product a block of the contracted dimension
    at a time): equal to `train.matmul` then `train.add` within f32
    rounding, not bitwise.

    ```mlir
    %dw1 = train.matmul_acc %dw0, %g, %x {transpose_a}
        : (tensor<1000x16xf32>, tensor<64x1000xf32>, tensor<64x16xf32>)
          -> tensor<1000x16xf32>
    ```

    **Constraints:**
    - every operand has rank 2; `acc` and the result are f32;
    - `lhs` and `rhs` have the same float element type;
    - the contracted dimensions agree and `acc` is [M, N].

    Not differentiable: the pass that creates it runs after the backward
    pass exists.
  }];
  let arguments = (ins Train_F32Tensor:$acc, Train_FloatTensor:$lhs,
                       Train_FloatTensor:$rhs, UnitAttr:$transpose_a,
                       UnitAttr:$transpose_b);
  let results = (outs Train_F32Tensor:$result);
  let assemblyFormat = [{
    $acc `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Train_LayerNormOp : Train_ComputeOp<"layer_norm", [
    AllTypesMatch<["input", "result"]>, AllTypesMatch<["gamma", "beta"]>, Train_Kernel]> {
  let gradient = [{
    auto grad = LayerNormGradOp::create(
        b, loc, getInput().getType(), getGamma().getType(),
        getGamma().getType(), dy, getInput(), getGamma(), getEpsilonAttr());
    return {grad.getInputGrad(), grad.getGammaGrad(), grad.getBetaGrad()};
  }];
  let summary = "layer normalization over the last dimension";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * gamma + beta` with the biased
    variance over the last dimension, as `torch.nn.LayerNorm`.

    ```mlir
    %y = train.layer_norm %x, %g, %b {epsilon = 1.000000e-05 : f64}
        : tensor<8x64x256xf32>, tensor<256xf32>
    ```

    **Constraints:**
    - `gamma` and `beta` have rank 1 and the size of the last dimension;
    - `epsilon` is positive.
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$gamma,
                       Train_FloatTensor:$beta,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gamma `,` $beta attr-dict `:` type($input) `,` type($gamma)
  }];
  let hasVerifier = 1;
}

def Train_RMSNormOp : Train_ComputeOp<"rms_norm", [
    AllTypesMatch<["input", "result"]>, Train_Kernel]> {
  let gradient = [{
    auto grad = RMSNormGradOp::create(b, loc, getInput().getType(),
                                      getGamma().getType(), dy, getInput(),
                                      getGamma(), getEpsilonAttr());
    return {grad.getInputGrad(), grad.getGammaGrad()};
  }];
  let summary = "root-mean-square normalization over the last dimension";
  let description = [{
    `x / sqrt(mean(x^2) + epsilon) * gamma` over the last dimension: Llama's
    RMSNorm (no mean subtraction, no bias). The mean of squares is taken in
    double.

    ```mlir
    %y = train.rms_norm %x, %g {epsilon = 1.000000e-05 : f64}
        : tensor<8x64x256xf32>, tensor<256xf32>
    ```

    **Constraints:**
    - `gamma` has rank 1 and the size of the last dimension;
    - `epsilon` is positive and finite.
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input `,` $gamma attr-dict `:` type($input) `,` type($gamma)";
  let hasVerifier = 1;
}

def Train_RotaryEmbeddingOp : Train_ComputeOp<"rotary_embedding", [
    SameOperandsAndResultType, Train_Kernel]> {
  let gradient = [{
    // A rotation's adjoint is its transpose: the rotation by -angle.
    auto op = RotaryEmbeddingOp::create(b, loc, getType(), dy, getSeqDimAttr(),
                                        getThetaAttr(), getLlama3ScalingAttr(),
                                        ::mlir::UnitAttr());
    op.setInverse(!getInverse());
    return {op};
  }];
  let summary = "rotary position embedding (RoPE) as Llama applies it";
  let description = [{
    Rotates pairs of channels of the last dimension (the head dimension,
    `dim`, even) by an angle proportional to the position, which is the
    index along `seq_dim`. In the rotate-half form of Hugging Face's
    `LlamaRotaryEmbedding` / `apply_rotary_pos_emb`: with `h = dim / 2`,
    `inv_i = theta^(-2i / dim)` and angle `a = t * inv_i` for position `t`,

        out[..., i]     = x[..., i] cos(a) - x[..., i + h] sin(a)
        out[..., i + h] = x[..., i + h] cos(a) + x[..., i] sin(a)

    for `i < h`. With `inverse` the rotation is by `-a`: that is the
    adjoint, which `train-autodiff` uses for the gradient.

    `llama3_scaling = array<f64: factor, low_freq_factor, high_freq_factor,
    original_max_position_embeddings>` applies Llama 3's frequency scaling
    (transformers' `rope_scaling` with `rope_type: "llama3"`, the same four
    numbers in the same order) to each `inv_i`: with `w = 2 pi / inv_i`,
    `inv_i / factor` where `w > original / low_freq_factor`, `inv_i` where
    `w < original / high_freq_factor`, and between them the blend
    `(1 - s) inv_i / factor + s inv_i` with
    `s = (original / w - low_freq_factor) / (high_freq_factor - low_freq_factor)`,
    in float32 as transformers computes it. Llama 3.1 uses
    `array<f64: 8.0, 1.0, 4.0, 8192.0>` and Llama 3.2 a factor of 32, both
    with `theta = 500000`.

    ```mlir
    // q as [batch, seq, heads, head_dim]
    %qr = train.rotary_embedding %q {seq_dim = 1 : i64, theta = 1.000000e+04 : f64}
        : tensor<8x64x4x32xf32>
    %kr = train.rotary_embedding %k {seq_dim = 1 : i64, theta = 5.000000e+05 : f64,
        llama3_scaling = array<f64: 8.0, 1.0, 4.0, 8192.0>} : tensor<8x64x4x32xf32>
    ```

    **Constraints:**
    - rank >= 2, `seq_dim` in [0, rank - 1) (not the head dimension);
    - the last dimension is even;
    - `theta` is positive and finite;
    - `llama3_scaling`: four finite numbers, `factor >= 1`,
      `0 < low_freq_factor < high_freq_factor`, `original > 0`.
  }];
  let arguments = (ins Train_FloatTensor:$input, I64Attr:$seq_dim,
                       DefaultValuedAttr<F64Attr, "10000.0">:$theta,
                       OptionalAttr<DenseF64ArrayAttr>:$llama3_scaling,
                       UnitAttr:$inverse);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Train_SoftmaxOp : Train_ComputeOp<"softmax", [SameOperandsAndResultType, Train_Kernel]> {
  let gradient = [{
    return {SoftmaxGradOp::create(b, loc, getType(), dy, getResult())};
  }];
  let summary = "softmax over the last dimension, optionally causal";
  let description = [{
    Softmax over the last dimension. With `causal`, the last two dimensions
    form a [T, T] score matrix and entry (i, j) with j > i gets probability
    0: the masked softmax of causal self-attention.

    ```mlir
    %p = train.softmax %s {causal} : tensor<8x4x64x64xf32>
    ```

    **Constraints:**
    - with `causal`: rank >= 2 and the last two dimensions are equal.
  }];
  let arguments = (ins Train_FloatTensor:$input, UnitAttr:$causal);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Train_AttentionOp : Train_ComputeOp<"attention", [Train_Kernel,
    AllTypesMatch<["query", "result"]>, AllTypesMatch<["key", "value"]>]> {
  let summary = "scaled dot-product attention, kept whole (optionally causal)";
  let description = [{
    `softmax(scale * q k^T) v` per head, with the causal mask when `causal`
    is set: PyTorch's `F.scaled_dot_product_attention(q, k, v,
    is_causal=causal, scale=scale)`. The leading dimensions of q, k and v
    (batch, heads) are independent heads; the last two are [T, D].

    Grouped-query attention: k and v may have fewer heads (dimension -3)
    than q, `Hk` dividing q's `Hq`; query head `h` then reads key / value
    head `h / (Hq / Hk)` (transformers' `repeat_kv` order), and the
    adjoint's dk and dv sum the gradients of the query heads that share a
    head. The op reads the shared heads where they are: nothing repeated is
    materialized or kept for the backward pass.

    The composed form (`train.matmul` with `transpose_b`, `train.scale`,
    `train.softmax`, `train.matmul`) materializes the [T, T] scores and
    keeps the probabilities alive until the backward pass: batch x heads x
    T x T elements per layer. This op keeps only its output and `lse`, the
    log-sum-exp of each row of scaled scores (f32 whatever the element
    type, `[..., Tq]`, not differentiable: a loss may not depend on it);
    `train.attention_grad` recomputes the scores from q and k. The scores
    and the softmax statistics are computed in f32. The cpu kernels keep
    the probabilities in f32 too and round only the results to the element
    type; the cuda backend's tiled bf16 / f16 kernels round the
    probabilities (and, in the adjoint, ds) to the element type for their
    tensor-core products, as FlashAttention does (docs/cuda.md).

    ```mlir
    %y, %lse = train.attention %q, %k, %v {causal, scale = 1.250000e-01 : f64}
        : tensor<2x4x64x64xf32>, tensor<2x4x64x64xf32>
        -> tensor<2x4x64x64xf32>, tensor<2x4x64xf32>
    ```

    **Constraints:**
    - q is [..., Tq, D], k and v are [..., Tk, D] with the same leading
      dimensions (rank >= 2), or, grouped-query, q is [..., Hq, Tq, D] and
      k and v [..., Hk, Tk, D] with Hq a multiple of Hk;
    - with `causal`, Tq == Tk;
    - `scale` is finite and positive;
    - the result has q's type; `lse` is f32 with q's shape without D.
  }];
  let gradient = [{
    // lse is a statistic kept for the adjoint, not a differentiable
    // output: a loss that reads it has no gradient rule here.
    if (resultGrads[1]) {
      emitOpError() << "has a loss that depends on its lse result, which "
                       "has no gradient";
      return {};
    }
    auto g = AttentionGradOp::create(b, loc, getQuery().getType(),
        getKey().getType(), getValue().getType(), dy, getQuery(), getKey(),
        getValue(), getResult(), getLse(), getCausalAttr(), getScaleAttr());
    return {g.getQueryGrad(), g.getKeyGrad(), g.getValueGrad()};
  }];
  let arguments = (ins Train_FloatTensor:$query, Train_FloatTensor:$key,
                       Train_FloatTensor:$value, UnitAttr:$causal,
                       F64Attr:$scale);
  let results = (outs Train_FloatTensor:$result,
                      StaticShapeTensorOf<[F32]>:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value attr-dict `:` type($query) `,` type($key)
    `->` type($result) `,` type($lse)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Layout and reductions
//===----------------------------------------------------------------------===//

def Train_ReshapeOp : Train_ComputeOp<"reshape"> {
  let gradient = [{
    return {ReshapeOp::create(b, loc, getInput().getType(), dy)};
  }];
  let summary = "reinterprets a tensor with another shape";
  let description = [{
    Row-major reshape; the element count is unchanged.

    ```mlir
    %y = train.reshape %x : tensor<8x64x256xf32> -> tensor<512x256xf32>
    ```

    **Constraints:**
    - same element type and element count.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_TransposeOp : Train_ComputeOp<"transpose", [Train_Kernel]> {
  let summary = "permutes dimensions";
  let description = [{
    Result dimension `d` is operand dimension `permutation[d]`.

    ```mlir
    %y = train.transpose %x [0, 2, 1, 3] : tensor<8x64x4x16xf32> -> tensor<8x4x64x16xf32>
    ```

    **Constraints:**
    - `permutation` is a permutation of [0, rank);
    - the result shape is the permuted operand shape.
  }];
  let arguments = (ins Train_FloatTensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input $permutation attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_ReduceOp : Train_ComputeOp<"reduce", [Train_Kernel]> {
  let summary = "sum, mean or max over dimensions";
  let description = [{
    Reduces the listed dimensions, which disappear from the result. Sums
    and means accumulate in double; `max` propagates NaN and its gradient
    is shared equally among the elements that reach the maximum (PyTorch
    `amax`).

    ```mlir
    %s = train.reduce sum %x [0, 1] : tensor<8x64x256xf32> -> tensor<256xf32>
    %m = train.reduce mean %x [0, 1, 2] : tensor<8x64x256xf32> -> tensor<f32>
    %x = train.reduce max %s [2] : tensor<8x64x256xf32> -> tensor<8x64xf32>
    ```

    **Constraints:**
    - `dims` are strictly increasing and in [0, rank);
    - the result shape is the operand shape without `dims`.
  }];
  let arguments = (ins Train_ReduceKind:$kind, Train_FloatTensor:$input,
                       DenseI64ArrayAttr:$dims);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$kind $input $dims attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_BroadcastOp : Train_ComputeOp<"broadcast", [Train_Kernel]> {
  let gradient = [{
    return {ReduceOp::create(b, loc, getInput().getType(), ReduceKind::sum,
                             dy, getDims())};
  }];
  let summary = "repeats a tensor along new dimensions";
  let description = [{
    Inserts the listed result dimensions: the result with `dims` removed is
    the operand. The adjoint of `train.reduce sum` and the way to add a
    position embedding to every sequence of a batch.

    ```mlir
    %y = train.broadcast %wpe [0] : tensor<64x256xf32> -> tensor<8x64x256xf32>
    ```

    **Constraints:**
    - `dims` are strictly increasing and in [0, result rank);
    - the result shape without `dims` is the operand shape.
  }];
  let arguments = (ins Train_FloatTensor:$input, DenseI64ArrayAttr:$dims);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input $dims attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_SliceOp : Train_ComputeOp<"slice", [AllElementTypesMatch<["input", "result"]>]> {
  let gradient = [{
    return {SliceGradOp::create(b, loc, getInput().getType(), dy,
                                getDimAttr(), getStartAttr())};
  }];
  let summary = "a contiguous range of one dimension";
  let description = [{
    `result = input[..., start : start + size, ...]` along `dim`, `size`
    being the result's size there (PyTorch `narrow`). Runs as a strided
    copy (`ztrt_copy_2d`) on every backend. The input may be i32 (ids or
    labels: `labels[:, 1:]`, which nothing differentiates).

    ```mlir
    %lo = train.slice %x {dim = 2 : i64, start = 0 : i64}
        : tensor<8x64x512xf32> -> tensor<8x64x256xf32>
    ```

    **Constraints:**
    - `dim` in [0, rank); the result has the operand's rank and element
      type and equal sizes in every other dimension;
    - `0 <= start` and `start + size <= ` the operand's size along `dim`.
  }];
  let arguments = (ins Train_FloatOrI32Tensor:$input, I64Attr:$dim, I64Attr:$start);
  let results = (outs Train_FloatOrI32Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_ConcatOp : Train_ComputeOp<"concat", [SameOperandsAndResultElementType]> {
  let summary = "joins tensors along one dimension";
  let description = [{
    The operands placed one after the other along `dim` (PyTorch `cat`).
    Runs as one strided copy per operand.

    ```mlir
    %y = train.concat %a, %b {dim = 1 : i64}
        : (tensor<8x3x16xf32>, tensor<8x5x16xf32>) -> tensor<8x8x16xf32>
    ```

    **Constraints:**
    - at least one operand; all have the same rank and element type;
    - `dim` in [0, rank); sizes agree in every other dimension;
    - the result's size along `dim` is the sum of the operands'.
  }];
  let arguments = (ins Variadic<Train_FloatTensor>:$inputs, I64Attr:$dim);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, $result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Lookups and losses
//===----------------------------------------------------------------------===//

def Train_EmbeddingOp : Train_ComputeOp<"embedding", [Train_Kernel]> {
  let gradient = [{
    return {EmbeddingGradOp::create(b, loc, getTable().getType(), dy,
                                    getIds()),
            Value()};
  }];
  let summary = "looks up rows of a table";
  let description = [{
    `result[i..., :] = table[ids[i...], :]`. Ids outside [0, vocab) are a
    runtime error.

    ```mlir
    %x = train.embedding %wte, %tokens
        : (tensor<256x64xf32>, tensor<8x64xi32>) -> tensor<8x64x64xf32>
    ```

    **Constraints:**
    - `table` is [vocab, dim]; the result shape is the ids shape + [dim].
  }];
  let arguments = (ins Train_FloatTensor:$table, Train_I32Tensor:$ids);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$table `,` $ids attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Train_CrossEntropyOp : Train_ComputeOp<"cross_entropy", [Train_Kernel]> {
  let gradient = [{
    // Tiles are made after the backward pass exists (train-tile-loss).
    if (getFirstRow()) {
      emitOpError() << "is one tile of a loss (first_row): tile the loss "
                       "with train-tile-loss after differentiating it";
      return {};
    }
    return {CrossEntropyGradOp::create(b, loc, getLogits().getType(), dy,
                                       getLogits(), getLabels(),
                                       getIgnoreIndexAttr()),
            Value()};
  }];
  let summary = "mean softmax cross-entropy with integer labels";
  let description = [{
    `mean_r(-log softmax(logits[r])[labels[r]])`, as
    `torch.nn.functional.cross_entropy` with the default mean reduction.
    Labels outside [0, classes) are a runtime error.

    With `ignore_index = k` (PyTorch's `ignore_index`: Hugging Face's -100
    padding, a pad token's id), rows whose label is `k` contribute nothing
    and the mean is over the other rows: `sum_{r: y_r != k} l_r / count`,
    0/0 (NaN, as PyTorch) when every row is ignored. The count is this
    op's rows, so on N data-parallel ranks the step averages the ranks'
    means, as PyTorch DDP and DeepSpeed do (docs/import.md).

    ```mlir
    %loss = train.cross_entropy %logits, %y
        : (tensor<32x10xf32>, tensor<32xi32>) -> tensor<f32>
    %masked = train.cross_entropy %logits, %y {ignore_index = -100 : i64}
        : (tensor<32x10xf32>, tensor<32xi32>) -> tensor<f32>
    ```

    With `first_row = f` the op is one tile of a longer loss
    (`train-tile-loss`): `logits` holds rows [f, f + rows) of the loss's
    logits, `labels` all of its labels, and the result is those rows' share,
    `sum_{f <= r < f + rows} l_r / count` with `count` over every label; the
    tiles' shares add up to the loss.

    ```mlir
    %share = train.cross_entropy %tile, %y {first_row = 128 : i64}
        : (tensor<128x32000xf32>, tensor<512xi32>) -> tensor<f32>
    ```

    **Constraints:**
    - `logits` is [rows, classes], `labels` is [rows], the result is a 0-d tensor;
    - with `first_row`, `labels` is [n] with `first_row + rows <= n`;
    - `ignore_index` is an i32 value.
  }];
  let arguments = (ins Train_FloatTensor:$logits, Train_I32Tensor:$labels,
                       OptionalAttr<I64Attr>:$ignore_index,
                       OptionalAttr<I64Attr>:$first_row);
  let results = (outs Train_F32Scalar:$result);
  let assemblyFormat = "$logits `,` $labels attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Backward-pass ops
//===----------------------------------------------------------------------===//

class Train_ActivationGradOp<string mnemonic, string fwd>
    : Train_GradOp<mnemonic, [SameOperandsAndResultType, Train_Kernel,
                              Train_Fusible]> {
  let extraClassDefinition =
      Train_ElementwiseKernel<mnemonic>.definition # elementDefinition;
  let summary = "adjoint of train." # fwd;
  let description = [{
    `dy * }] # fwd # [{'(x)` elementwise, with `x` the forward input.

    ```mlir
    %dx = train.}] # mnemonic # [{ %dy, %x : tensor<32x128xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $input attr-dict `:` type($result)";
}

def Train_ReluGradOp : Train_ActivationGradOp<"relu_grad", "relu"> {
  let element = [{
    // y <= 0 ? 0 : dy (Elementwise.def).
    return e.select(e.le(x[1], e.constant(0.0f)), e.constant(0.0f), x[0]);
  }];
}
def Train_GeluGradOp : Train_ActivationGradOp<"gelu_grad", "gelu"> {
  let element = [{
    return e.geluGrad(x[0], x[1]);
  }];
}
def Train_SiluGradOp : Train_ActivationGradOp<"silu_grad", "silu"> {
  let element = [{
    return e.siluGrad(x[0], x[1]);
  }];
}
def Train_GeluErfGradOp : Train_ActivationGradOp<"gelu_erf_grad", "gelu_erf"> {
  let element = [{
    return e.geluErfGrad(x[0], x[1]);
  }];
}
def Train_ErfGradOp : Train_ActivationGradOp<"erf_grad", "erf"> {
  let element = [{
    return e.erfGrad(x[0], x[1]);
  }];
}

// The adjoint of an elementwise op whose derivative is cheapest in terms of
// its result.
class Train_ResultGradOp<string mnemonic, string fwd, string formula>
    : Train_GradOp<mnemonic, [SameOperandsAndResultType, Train_Kernel,
                              Train_Fusible]> {
  let extraClassDefinition =
      Train_ElementwiseKernel<mnemonic>.definition # elementDefinition;
  let summary = "adjoint of train." # fwd;
  let description = [{
    `}] # formula # [{` elementwise, with `y` the forward result.

    ```mlir
    %dx = train.}] # mnemonic # [{ %dy, %y : tensor<32x128xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$output);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $output attr-dict `:` type($result)";
}

def Train_SigmoidGradOp : Train_ResultGradOp<"sigmoid_grad", "sigmoid", "dy * (1 - y) * y"> {
  let element = [{
    return e.sigmoidGrad(x[0], x[1]);
  }];
}
def Train_RsqrtGradOp : Train_ResultGradOp<"rsqrt_grad", "rsqrt", "-0.5 * dy * y^3"> {
  let element = [{
    return e.rsqrtGrad(x[0], x[1]);
  }];
}
def Train_TanhGradOp : Train_ResultGradOp<"tanh_grad", "tanh", "dy * (1 - y^2)"> {
  let element = [{
    // dy * (1 - y * y) (Elementwise.def).
    return e.mul(x[0], e.sub(e.constant(1.0f), e.mul(x[1], x[1])));
  }];
}

def Train_ReduceMaxGradOp : Train_GradOp<"reduce_max_grad", [
    AllTypesMatch<["input", "result"]>, AllTypesMatch<["grad", "output"]>,
    Train_Kernel]> {
  let summary = "adjoint of train.reduce max";
  let description = [{
    `dy / ties` where the input reached its maximum `y`, 0 elsewhere, with
    `ties` the number of elements that reached it (PyTorch `amax`).

    ```mlir
    %dx = train.reduce_max_grad %dy, %x, %y [2]
        : tensor<8x64xf32>, tensor<8x64x256xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$input,
                       Train_FloatTensor:$output, DenseI64ArrayAttr:$dims);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $input `,` $output $dims attr-dict `:` type($grad) `,` type($input)
  }];
}

def Train_RMSNormGradOp : Train_GradOp<"rms_norm_grad", [
    Train_Kernel,
    AllTypesMatch<["input", "grad", "input_grad"]>,
    AllTypesMatch<["gamma", "gamma_grad"]>]> {
  let summary = "adjoint of train.rms_norm";
  let description = [{
    Given the adjoint of the output, the forward input and `gamma`, returns
    the adjoints of the input and of `gamma`; the statistics are recomputed
    from the input.

    ```mlir
    %dx, %dg = train.rms_norm_grad %dy, %x, %g {epsilon = 1.000000e-05 : f64}
        : tensor<8x64x256xf32>, tensor<256xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$input,
                       Train_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Train_FloatTensor:$input_grad, Train_FloatTensor:$gamma_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $gamma attr-dict `:` type($input) `,` type($gamma)
  }];
}

def Train_SliceGradOp : Train_GradOp<"slice_grad", [
    AllElementTypesMatch<["grad", "result"]>]> {
  let summary = "adjoint of train.slice";
  let description = [{
    A zero tensor of the sliced operand's shape with `grad` written at
    `start` along `dim`.

    ```mlir
    %dx = train.slice_grad %dy {dim = 2 : i64, start = 0 : i64}
        : tensor<8x64x256xf32> -> tensor<8x64x512xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, I64Attr:$dim, I64Attr:$start);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$grad attr-dict `:` type($grad) `->` type($result)";
  let hasVerifier = 1;
}

def Train_SoftmaxGradOp : Train_GradOp<"softmax_grad", [SameOperandsAndResultType, Train_Kernel]> {
  let summary = "adjoint of train.softmax";
  let description = [{
    `y * (dy - sum(dy * y))` over the last dimension, with `y` the forward
    result. Masked (causal) entries have y = 0 and so get no gradient.

    ```mlir
    %dx = train.softmax_grad %dy, %y : tensor<8x4x64x64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$output);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $output attr-dict `:` type($result)";
}

def Train_AttentionGradOp : Train_GradOp<"attention_grad", [
    Train_Kernel,
    AllTypesMatch<["grad", "query", "output", "query_grad"]>,
    AllTypesMatch<["key", "key_grad"]>,
    AllTypesMatch<["value", "value_grad"]>]> {
  let summary = "adjoint of train.attention";
  let description = [{
    Given the adjoint of the attention output and the forward operands,
    output and `lse`, returns the adjoints of q, k and v. The scores and
    probabilities are recomputed from q and k (nothing of size T x T was
    kept by the forward pass); `output` and `lse` are what a tiled kernel
    needs to recompute them block by block (FlashAttention's backward).
    dk and dv have k's and v's shapes: grouped-query, with fewer heads than
    q, each shared head's adjoint is the sum over the query heads that read
    it. The shapes follow train.attention's constraints.

    ```mlir
    %dq, %dk, %dv = train.attention_grad %dy, %q, %k, %v, %y, %lse
        {causal, scale = 1.250000e-01 : f64}
        : tensor<2x4x64x64xf32>, tensor<2x4x64x64xf32>,
          tensor<2x4x64x64xf32>, tensor<2x4x64xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$query,
                       Train_FloatTensor:$key, Train_FloatTensor:$value,
                       Train_FloatTensor:$output,
                       StaticShapeTensorOf<[F32]>:$lse, UnitAttr:$causal,
                       F64Attr:$scale);
  let results = (outs Train_FloatTensor:$query_grad,
                      Train_FloatTensor:$key_grad,
                      Train_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $grad `,` $query `,` $key `,` $value `,` $output `,` $lse attr-dict `:`
    type($query) `,` type($key) `,` type($value) `,` type($lse)
  }];
  let hasVerifier = 1;
}

def Train_LayerNormGradOp : Train_GradOp<"layer_norm_grad", [
    Train_Kernel,
    AllTypesMatch<["input", "grad", "input_grad"]>,
    AllTypesMatch<["gamma", "gamma_grad", "beta_grad"]>]> {
  let summary = "adjoint of train.layer_norm";
  let description = [{
    Given the adjoint of the output, the forward input and `gamma`, returns
    the adjoints of the input, `gamma` and `beta`. The statistics are
    recomputed from the input instead of being saved by the forward pass.

    ```mlir
    %dx, %dg, %db = train.layer_norm_grad %dy, %x, %g {epsilon = 1.000000e-05 : f64}
        : tensor<8x64x256xf32>, tensor<256xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_FloatTensor:$input,
                       Train_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Train_FloatTensor:$input_grad, Train_FloatTensor:$gamma_grad,
                      Train_FloatTensor:$beta_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $gamma attr-dict `:` type($input) `,` type($gamma)
  }];
}

def Train_CrossEntropyWithGradOp : Train_GradOp<"cross_entropy_with_grad", [
    Train_Kernel,
    AllTypesMatch<["logits", "logits_grad"]>]> {
  let summary = "train.cross_entropy and its adjoint in one pass";
  let description = [{
    The loss `mean_r(-log softmax(logits[r])[labels[r]])` (train.cross_entropy)
    and its adjoint `dloss * (softmax(logits) - onehot(labels)) / rows`
    (train.cross_entropy_grad) from one read of the logits: each row's
    log-sum-exp is computed once for both. The same expressions in the same
    order as the two ops, so the same bits. `train-fuse-loss` makes it from
    the pair once the seed `dloss` of the backward pass exists, at the
    adjoint's place. `ignore_index` and `first_row` (one tile of a longer
    loss: its share of the loss and its rows of the adjoint, bitwise those
    rows of the untiled adjoint) as train.cross_entropy's.

    ```mlir
    %loss, %dlogits = train.cross_entropy_with_grad %logits, %y, %seed
        : tensor<32x10xf32>, tensor<32xi32>
    ```

    **Constraints:**
    - `logits` is [rows, classes], `labels` is [rows] (with `first_row`:
      [n] with `first_row + rows <= n`); `dloss` and the loss are 0-d f32,
      the adjoint has the logits' type.
  }];
  let arguments = (ins Train_FloatTensor:$logits, Train_I32Tensor:$labels,
                       Train_F32Flag:$dloss,
                       OptionalAttr<I64Attr>:$ignore_index,
                       OptionalAttr<I64Attr>:$first_row);
  let results = (outs Train_F32Flag:$result, Train_FloatTensor:$logits_grad);
  let assemblyFormat = [{
    $logits `,` $labels `,` $dloss attr-dict `:` type($logits) `,` type($labels)
  }];
  let hasVerifier = 1;
}

def Train_CrossEntropyGradOp : Train_GradOp<"cross_entropy_grad", [
    Train_Kernel,
    AllTypesMatch<["logits", "result"]>]> {
  let summary = "adjoint of train.cross_entropy";
  let description = [{
    `dloss * (softmax(logits) - onehot(labels)) / rows`; with
    `ignore_index = k`, rows labelled `k` are zero and the others are
    divided by their count instead of `rows` (train.cross_entropy's).

    ```mlir
    %dl = train.cross_entropy_grad %dloss, %logits, %y
        : (tensor<f32>, tensor<32x10xf32>, tensor<32xi32>) -> tensor<32x10xf32>
    ```
  }];
  let arguments = (ins Train_F32Scalar:$grad, Train_FloatTensor:$logits,
                       Train_I32Tensor:$labels,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $logits `,` $labels attr-dict `:` functional-type(operands, results)
  }];
}

def Train_EmbeddingGradOp : Train_GradOp<"embedding_grad", [Train_Kernel]> {
  let summary = "adjoint of train.embedding with respect to the table";
  let description = [{
    A zero table into which each row of `grad` is added at its id, in index
    order (deterministic).

    ```mlir
    %dt = train.embedding_grad %dy, %tokens
        : (tensor<8x64x64xf32>, tensor<8x64xi32>) -> tensor<256x64xf32>
    ```

    **Constraints:**
    - `grad` has the ids shape + [dim]; the result is [vocab, dim].
  }];
  let arguments = (ins Train_FloatTensor:$grad, Train_I32Tensor:$ids);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $ids attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

def Train_SGDUpdateOp : Train_Op<"sgd_update", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    DeclareOpInterfaceMethods<Train_OptimizerUpdateOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "in-place SGD step on a parameter";
  let description = [{
    Updates `@param` in place with its gradient following `torch.optim.SGD`:
    `d = g + weight_decay * p`; with momentum, `buf = d` on the first step
    and `buf = momentum * buf + (1 - dampening) * d` after, then
    `d = d + momentum * buf` (`nesterov`) or `d = buf`; `p -= lr * d`.

    ```mlir
    train.sgd_update @fc1.weight, %g momentum_buffer(@fc1.weight.momentum_buffer)
        {lr = 1.000000e-02 : f64, momentum = 9.000000e-01 : f64} : tensor<128x784xf32>
    ```

    With `no_decay` the parameter is in the no-decay group (biases, norms
    and other 1-D parameters by default, `train-optimizer`'s `no-decay`):
    its `weight_decay` is 0 and the run's `--weight-decay` does not reach it.
    The other hyper-parameters are the compiled defaults of the run's
    (`ztrt_hyper`: the executable's `--beta1`, `--beta2`, `--eps`,
    `--weight-decay`, `--momentum`, `--dampening`).

    With `sharded` (ZeRO stages 1-3), `grad` is this rank's contiguous
    slice of the flattened, zero-padded gradient; the op updates the same
    slice of the parameter and of its (partitioned) states.

    With `master` (mixed precision: a bf16 or f16 parameter), the step is
    the f32 step applied to the f32 master state with the gradient widened
    to f32 (it may be f32, or of the parameter's type), and the parameter
    becomes the master rounded to its type; the momentum buffer is f32.

    **Constraints:**
    - `grad` has the parameter's shape, or is one-dimensional with `sharded`;
      its element type is the parameter's, or f32 with `master`;
    - a `momentum_buffer` (a `train.state` of the parameter) is present iff
      `momentum` is non-zero;
    - `master` names the parameter's `master` state.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, Train_FloatTensor:$grad,
                       OptionalAttr<FlatSymbolRefAttr>:$master,
                       OptionalAttr<FlatSymbolRefAttr>:$momentum_buffer,
                       F64Attr:$lr,
                       DefaultValuedAttr<F64Attr, "0.0">:$momentum,
                       DefaultValuedAttr<F64Attr, "0.0">:$dampening,
                       DefaultValuedAttr<F64Attr, "0.0">:$weight_decay,
                       UnitAttr:$nesterov, UnitAttr:$sharded,
                       UnitAttr:$no_decay);
  let assemblyFormat = [{
    $param `,` $grad (`master` `(` $master^ `)`)? (`momentum_buffer` `(` $momentum_buffer^ `)`)? attr-dict `:` type($grad)
  }];
}

def Train_AdamUpdateOp : Train_Op<"adam_update", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    DeclareOpInterfaceMethods<Train_OptimizerUpdateOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "in-place Adam / AdamW step on a parameter";
  let description = [{
    Updates `@param` and its two moment states in place following
    `torch.optim.Adam`, or `torch.optim.AdamW` when `decoupled` is set
    (weight decay applied to the parameter instead of the gradient). The
    step number t used for bias correction is the runtime's 1-based step
    counter.

    ```mlir
    train.adam_update @fc1.weight, %g states(@fc1.weight.exp_avg, @fc1.weight.exp_avg_sq)
        {lr = 1.000000e-03 : f64, beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64,
         epsilon = 1.000000e-08 : f64, weight_decay = 0.000000e+00 : f64, decoupled}
        : tensor<128x784xf32>
    ```

    With `no_decay` the parameter is in the no-decay group (biases, norms
    and other 1-D parameters by default, `train-optimizer`'s `no-decay`):
    its `weight_decay` is 0 and the run's `--weight-decay` does not reach it.
    The other hyper-parameters are the compiled defaults of the run's
    (`ztrt_hyper`: the executable's `--beta1`, `--beta2`, `--eps`,
    `--weight-decay`, `--momentum`, `--dampening`).

    With `sharded` (ZeRO stages 1-3), `grad` is this rank's contiguous
    slice of the flattened, zero-padded gradient; the op updates the same
    slice of the parameter and of its (partitioned) states.

    With `master` (mixed precision: a bf16 or f16 parameter), the step is
    the f32 step applied to the f32 master state with the gradient widened
    to f32 (it may be f32, or of the parameter's type), and the parameter
    becomes the master rounded to its type; the moments are f32:

    ```mlir
    train.adam_update @w, %g master(@w.master) states(@w.exp_avg, @w.exp_avg_sq)
        {...} : tensor<128x784xf32>
    ```

    **Constraints:**
    - `grad` has the parameter's shape, or is one-dimensional with `sharded`;
      its element type is the parameter's, or f32 with `master`;
    - both states are `train.state`s of the parameter;
    - `master` names the parameter's `master` state.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, Train_FloatTensor:$grad,
                       OptionalAttr<FlatSymbolRefAttr>:$master,
                       FlatSymbolRefAttr:$exp_avg, FlatSymbolRefAttr:$exp_avg_sq,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2,
                       F64Attr:$epsilon,
                       DefaultValuedAttr<F64Attr, "0.0">:$weight_decay,
                       UnitAttr:$decoupled, UnitAttr:$sharded,
                       UnitAttr:$no_decay);
  let assemblyFormat = [{
    $param `,` $grad (`master` `(` $master^ `)`)? `states` `(` $exp_avg `,` $exp_avg_sq `)` attr-dict `:` type($grad)
  }];
}

//===----------------------------------------------------------------------===//
// Dynamic loss scaling (fp16)
//===----------------------------------------------------------------------===//

def Train_LossScaleOp : Train_Op<"loss_scale", [MemoryEffects<[MemRead]>]> {
  let summary = "the current loss scale of the dynamic loss scaler";
  let description = [{
    The scale this step's backward pass is seeded with: `train-autodiff`
    starts the adjoint of the loss at this value instead of 1 when the
    module carries a `train.loss_scale` policy (fp16 mixed precision), so
    every gradient comes out multiplied by it and small gradients survive
    in f16. The runtime's dynamic loss scaler owns the value
    (`train.update_loss_scale` changes it between steps); it is the same
    on every rank.

    ```mlir
    %s = train.loss_scale : tensor<f32>
    %dl = train.cross_entropy_grad %s, %logits, %y : ...
    ```
  }];
  let results = (outs Train_F32Scalar:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Train_FoundNonfiniteOp : Train_Op<"found_nonfinite", [Pure,
    Train_Kernel]> {
  let summary = "whether a tensor, or an earlier one, holds a NaN or infinity";
  let description = [{
    `result` is 1 when `found` is non-zero or any element of `input` is a
    NaN or an infinity, and 0 otherwise: the overflow check of dynamic loss
    scaling (`torch.amp`'s `found_inf`), chained over the gradients the
    optimizer updates consume. `train-optimizer` places the chain before
    the first update; `zero-insert-collectives` points it at the reduced
    gradients (this rank's shards from stage 1 on) and sums the flag over
    the ranks, so that every rank skips the same steps.

    ```mlir
    %f0 = train.fill {value = 0.000000e+00 : f64} : tensor<f32>
    %f1 = train.found_nonfinite %g1, %f0 : tensor<128x784xf16>
    %f2 = train.found_nonfinite %g2, %f1 : tensor<128xf16>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_F32Flag:$found);
  let results = (outs Train_F32Flag:$result);
  let assemblyFormat = "$input `,` $found attr-dict `:` type($input)";
}

def Train_GradSqNormOp : Train_Op<"grad_sq_norm", [Pure, Train_Kernel]> {
  let summary = "adds the sum of squares of a tensor to a running sum";
  let description = [{
    `result = sum + sum of x^2 over the elements of input`, the squares
    summed in double in element order and the total rounded once to f32:
    the global gradient norm of `--clip-grad-norm`, chained over the
    gradients the optimizer updates consume (`train-optimizer`).
    `zero-insert-collectives` points the chain at the reduced gradients
    (each rank's shards from stage 1 on; the zero padding adds nothing) and
    sums the result over the ranks.

    ```mlir
    %s0 = train.fill {value = 0.000000e+00 : f64} : tensor<f32>
    %s1 = train.grad_sq_norm %g1, %s0 : tensor<128x784xf32>
    ```
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_F32Flag:$sum);
  let results = (outs Train_F32Flag:$result);
  let assemblyFormat = "$input `,` $sum attr-dict `:` type($input)";
}

def Train_ClipGradNormOp : Train_Op<"clip_grad_norm", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "clips the step's gradients to a global norm";
  let description = [{
    `sum_sq` is the sum of squares of every gradient the optimizer updates
    consume (the same on every rank). The gradient norm is its square root
    (divided by the loss scale when the step is loss-scaled); when it
    exceeds `max_norm`, the optimizer updates after this op in the step read
    every gradient multiplied by `max_norm / (norm + 1e-6)`, as
    `torch.nn.utils.clip_grad_norm_` does. The norm is reported per step.

    ```mlir
    train.clip_grad_norm %sq {max_norm = 1.000000e+00 : f64} : tensor<f32>
    ```

    **Constraints:** `max_norm` is finite and positive; the op precedes
    every optimizer update of its function and appears once; with loss
    scaling it follows `train.update_loss_scale`.
  }];
  let arguments = (ins Train_F32Scalar:$sum_sq, F64Attr:$max_norm);
  let assemblyFormat = "$sum_sq attr-dict `:` type($sum_sq)";
  let hasVerifier = 1;
}

def Train_UpdateLossScaleOp : Train_Op<"update_loss_scale", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "hands the overflow flag to the dynamic loss scaler";
  let description = [{
    Ends the gradient half of a loss-scaled step. `found` is the overflow
    flag every rank agrees on (the output of `train.found_nonfinite`,
    summed over the ranks). When it is non-zero the optimizer updates after
    this op in the step do nothing (the step is skipped: parameters,
    masters and moments keep their values and the optimizer's step count
    does not advance) and the scaler lowers the scale as DeepSpeed's
    `DynamicLossScaler` does: halved once the hysteresis is used up, never
    below the minimum (an overflow at the minimum scale is an error).
    Otherwise the updates read each gradient divided by the scale it was
    computed with, and the scale doubles after `window` consecutive clean
    steps. The policy's numbers are the module's `train.loss_scale`
    attribute.

    ```mlir
    train.update_loss_scale %found : tensor<f32>
    train.adam_update @w, %g master(@w.master) states(...) {...} : tensor<128x784xf16>
    ```

    **Constraints:** the module has a `train.loss_scale` policy; the op
    precedes every optimizer update of its function and appears once.
  }];
  let arguments = (ins Train_F32Scalar:$found);
  let assemblyFormat = "$found attr-dict `:` type($found)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradient accumulation
//===----------------------------------------------------------------------===//

def Train_AccumulateGradOp : Train_Op<"accumulate_grad", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "adds a micro-batch's gradient to its parameter's accumulator";
  let description = [{
    Gradient accumulation (`train-optimizer{grad-accum-steps=K}`, DeepSpeed's
    `gradient_accumulation_steps`): the step runs once per micro-batch, and
    `result` is the parameter's persistent gradient buffer, which holds the
    sum of `input` over the micro-batches of the current optimizer step so
    far (the first micro-batch of a step overwrites it, the others add to
    it, in the buffer's element type: the reduce dtype of mixed precision,
    so that bf16 accumulation shows its rounding). The ops after
    `train.accumulation_boundary` read the sum once per optimizer step; the
    updates divide it by the number of micro-batches, so the step trains on
    the mean gradient of K micro-batches as one step of K times the batch
    does.

    `zero-insert-collectives` places the ZeRO reduction around it as
    DeepSpeed does: at stages 0 and 1 every rank accumulates its full local
    gradient and the reduction runs once, after the boundary; at stages 2
    and 3 each micro-batch's gradient is reduce-scattered at once and the
    accumulator is this rank's shard (the partitioned gradient buffer).

    ```mlir
    %acc = train.accumulate_grad @fc1.weight, %g : tensor<128x784xf32>
    train.accumulation_boundary
    train.adam_update @fc1.weight, %acc ...
    ```

    **Constraints:** `param` names a `train.param`; the input and the result
    have the same type; the op precedes its function's
    `train.accumulation_boundary`.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$param `,` $input attr-dict `:` type($input)";
}

def Train_AccumulationBoundaryOp : Train_Op<"accumulation_boundary", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "the ops after it run once per optimizer step";
  let description = [{
    Splits a step with gradient accumulation in two: the ops before it (the
    forward and backward passes, the `train.accumulate_grad`s and, at ZeRO
    stages 2 and 3, the gradient reduce-scatters) run for every
    micro-batch; the ops after it (the reduction of the accumulated
    gradients at stages 0 and 1, the overflow check, clipping, the
    optimizer updates and the parameter all-gathers) run only after the last
    micro-batch of an optimizer step. The lowered step branches on the
    runtime's `ztrt_accumulation_boundary`. Values defined before it may be
    used after it (they are live in the same call).

    ```mlir
    train.accumulation_boundary
    ```

    **Constraints:** at most one per function; it precedes every optimizer
    update and follows every `train.accumulate_grad`.
  }];
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

#endif // ZTRAIN_DIALECT_TRAIN_TRAINOPS_TD

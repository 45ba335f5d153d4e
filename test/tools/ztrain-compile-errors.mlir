// Bad input reaches the user as a located diagnostic and a non-zero exit,
// and no output file is left behind.
// RUN: rm -rf %t && mkdir -p %t
// RUN: split-file %s %t

// RUN: not ztrain-compile %t/malformed.mlir -o %t/out 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not test -e %t/out
// MALFORMED: malformed.mlir:3:{{[0-9]+}}: error: expected ':'

// RUN: not ztrain-compile %t/unknown.mlir -o %t/out 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not test -e %t/out
// UNKNOWN: unknown.mlir:4:8: error: custom op 'train.frobnicate' is unknown

// RUN: not ztrain-compile %t/shape.mlir -o %t/out 2>&1 | FileCheck %s --check-prefix=SHAPE
// RUN: not test -e %t/out
// SHAPE: shape.mlir:4:8: error: 'train.matmul' op contracted dims differ: lhs [2, 4] gives 4, rhs [3, 5] (transposed) gives 5

// A zero-size class dimension (it used to end in SIGFPE in the lowering).
// RUN: not ztrain-compile %t/zeroclasses.mlir -o %t/out 2>&1 | FileCheck %s --check-prefix=ZEROCLASSES
// RUN: not test -e %t/out
// ZEROCLASSES: zeroclasses.mlir:1:1: error: 'train.param' op type has a zero-size dimension (dim 0 of [0, 4]); empty tensors are not supported

// RUN: not ztrain-compile %t/undeclared.mlir -o %t/out 2>&1 | FileCheck %s --check-prefix=UNDECLARED
// RUN: not test -e %t/out
// UNDECLARED: undeclared.mlir:3:8: error: 'train.param_read' op references undeclared parameter @fc9.weight

// RUN: not ztrain-compile %t/noentry.mlir -o %t/out 2>&1 | FileCheck %s --check-prefix=NOENTRY
// RUN: not test -e %t/out
// NOENTRY: error: no function is marked 'train.entry'

// RUN: not ztrain-compile %t/missing.mlir -o %t/out 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: ztrain-compile: error: cannot open input file '{{.*}}missing.mlir': No such file or directory

// RUN: not ztrain-compile %t/undeclared.mlir 2>&1 | FileCheck %s --check-prefix=NOOUT
// NOOUT: ztrain-compile: error: -o is required for --emit=obj and --emit=exe

// A bad flag value is refused before the input is read: one line naming
// the flag.
// RUN: not ztrain-compile %t/shape.mlir --optimizer=rmsprop --emit=mlir 2>&1 | FileCheck %s --check-prefix=RMSPROP
// RMSPROP: ztrain-compile: for the --optimizer option: Cannot find option named 'rmsprop'!
// RMSPROP-NOT: shape.mlir

// Non-finite and out-of-range options are refused with one line naming the
// flag (NaN used to slip through every `x < 0` test and compile), before
// any IR exists; the passes refuse them too when ztrain-opt runs them,
// with a located line.
// RUN: not ztrain-compile %ztrain_src/examples/mlp.mlir -o %t/out --lr=nan 2>&1 | FileCheck %s --check-prefix=LRNAN
// RUN: not test -e %t/out
// LRNAN: ztrain-compile: error: --lr=nan: expected a finite value >= 0
// RUN: not ztrain-compile %ztrain_src/examples/mlp.mlir -o %t/out --lr=inf 2>&1 | FileCheck %s --check-prefix=LRINF
// LRINF: ztrain-compile: error: --lr=inf: expected a finite value >= 0
// RUN: not ztrain-compile %ztrain_src/examples/mlp.mlir -o %t/out --weight-decay=nan 2>&1 | FileCheck %s --check-prefix=WDNAN
// WDNAN: ztrain-compile: error: --weight-decay=nan: expected a finite value >= 0
// RUN: not ztrain-compile %ztrain_src/examples/mlp.mlir -o %t/out --optimizer=adam --eps=nan 2>&1 | FileCheck %s --check-prefix=EPSNAN
// EPSNAN: ztrain-compile: error: --eps=nan: expected a finite value > 0
// RUN: not ztrain-compile %ztrain_src/examples/mlp.mlir -o %t/out --optimizer=sgd --dampening=nan 2>&1 | FileCheck %s --check-prefix=DAMP
// DAMP: ztrain-compile: error: --dampening=nan: expected a value in [0, 1]
// RUN: not ztrain-compile %ztrain_src/examples/mlp.mlir -o %t/out --dp=2 --zero-stage=3 --max-tile-bytes=-1 2>&1 | FileCheck %s --check-prefix=TILE
// RUN: not test -e %t/out
// TILE: ztrain-compile: error: --max-tile-bytes=-1: expected bytes >= 0 (0: no tiling)
// RUN: not ztrain-opt %ztrain_src/examples/mlp.mlir --ztrain-training="lr=nan" 2>&1 | FileCheck %s --check-prefix=OPTLRNAN
// OPTLRNAN: mlp.mlir:7:3: error: invalid adamw hyperparameter: lr must be finite and >= 0, got nan
// RUN: not ztrain-opt %ztrain_src/examples/mlp.mlir --ztrain-training="optimizer=sgd dampening=nan" 2>&1 | FileCheck %s --check-prefix=OPTDAMP
// OPTDAMP: error: invalid sgd hyperparameter: dampening must be in [0, 1], got nan
// RUN: not ztrain-opt %ztrain_src/examples/mlp.mlir --ztrain-training --ztrain-zero="stage=3 dp=2 max-tile-bytes=-1" 2>&1 | FileCheck %s --check-prefix=OPTTILE
// OPTTILE: error: memory-centric-tiling: max-tile-bytes must be >= 0

// Two inputs under one name (and an input named like a parameter) would
// collide as data-file and checkpoint keys.
// RUN: not ztrain-compile %t/dupinput.mlir -o %t/out 2>&1 | FileCheck %s --check-prefix=DUP
// RUN: not test -e %t/out
// DUP: dupinput.mlir:2:1: error: 'func.func' op input #1 is named 'x', a name another input, a parameter, state or buffer already has (names are data and checkpoint keys)
// RUN: not ztrain-compile %t/paramname.mlir -o %t/out 2>&1 | FileCheck %s --check-prefix=PNAME
// PNAME: paramname.mlir:2:1: error: 'func.func' op input #0 is named 'w', a name another input, a parameter, state or buffer already has

// An option the chosen optimizer does not use is an error; a plan option
// that has no effect is a warning (the build is still what was asked for).
// RUN: not ztrain-compile %ztrain_src/examples/mlp.mlir -o %t/out --optimizer=sgd --beta1=0.5 2>&1 | FileCheck %s --check-prefix=SGDBETA
// RUN: not test -e %t/out
// SGDBETA: ztrain-compile: error: --beta1 is an Adam option; --optimizer=sgd does not use it
// RUN: not ztrain-compile %ztrain_src/examples/mlp.mlir -o %t/out --optimizer=adamw --momentum=0.9 2>&1 | FileCheck %s --check-prefix=ADAMMOM
// ADAMMOM: ztrain-compile: error: --momentum is an SGD option; --optimizer=adamw does not use it
// RUN: ztrain-compile %ztrain_src/examples/mlp.mlir --emit=mlir -o %t/stage.mlir --zero-stage=3 2>&1 | FileCheck %s --check-prefix=NODP
// NODP: ztrain-compile: warning: --zero-stage=3 without --dp: one rank, nothing is partitioned (add --dp=N for N ranks)
// RUN: ztrain-compile %ztrain_src/examples/mlp.mlir --emit=mlir -o %t/tile.mlir --dp=2 --zero-stage=2 --max-tile-bytes=4096 2>&1 | FileCheck %s --check-prefix=TILE2
// TILE2: ztrain-compile: warning: --max-tile-bytes tiles the parameters stage 3 gathers; at --zero-stage=2 it has no effect
// overlap-schedule's options without --overlap, or below stage 3: warned.
// RUN: ztrain-compile %ztrain_src/examples/mlp.mlir --emit=mlir -o %t/sched.mlir --dp=2 --zero-stage=3 --prefetch-depth=2 --bucket-bytes=4096 2>&1 | FileCheck %s --check-prefix=NOOVERLAP
// NOOVERLAP: ztrain-compile: warning: --prefetch-depth configures the overlap schedule; without --overlap it has no effect
// NOOVERLAP-NEXT: ztrain-compile: warning: --bucket-bytes configures the overlap schedule; without --overlap it has no effect
// RUN: ztrain-compile %ztrain_src/examples/mlp.mlir --emit=mlir -o %t/sched2.mlir --dp=2 --zero-stage=2 --overlap --max-live-bytes=4096 --reshard-after-forward=false 2>&1 | FileCheck %s --check-prefix=STAGE2
// STAGE2: ztrain-compile: warning: --max-live-bytes schedules the parameter gathers of stage 3; at --zero-stage=2 it has no effect
// STAGE2-NEXT: ztrain-compile: warning: --reshard-after-forward schedules the parameter gathers of stage 3; at --zero-stage=2 it has no effect
// RUN: ztrain-compile %ztrain_src/examples/mlp.mlir --emit=mlir -o %t/sched3.mlir --dp=2 --zero-stage=3 --overlap --prefetch-depth=2 --bucket-bytes=4096 2>&1 | count 0

//--- malformed.mlir
module {
  train.param @w : tensor<4xf32> init(zeros)
  train.param @v tensor<4xf32> init(zeros)
}
//--- unknown.mlir
train.param @w : tensor<4xf32> init(zeros)
func.func @f(%x: tensor<4xf32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4xf32>
  %y = train.frobnicate %x, %w : tensor<4xf32>
  return %y : tensor<f32>
}
//--- shape.mlir
train.param @w : tensor<3x5xf32> init(normal, 0.02)
func.func @f(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<3x5xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<2x4xf32>, tensor<3x5xf32>) -> tensor<2x3xf32>
  %loss = train.cross_entropy %l, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
//--- undeclared.mlir
train.param @fc1.weight : tensor<3x4xf32> init(normal, 0.02)
func.func @f(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @fc9.weight : tensor<3x4xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  %loss = train.cross_entropy %l, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
//--- noentry.mlir
func.func @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

//--- zeroclasses.mlir
train.param @w : tensor<0x4xf32> init(normal, 0.02)
func.func @f(%x: tensor<8x4xf32>, %y: tensor<8xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<0x4xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<8x4xf32>, tensor<0x4xf32>) -> tensor<8x0xf32>
  %loss = train.cross_entropy %l, %y : (tensor<8x0xf32>, tensor<8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

//--- dupinput.mlir
train.param @w : tensor<4x3xf32> init(zeros)
func.func @loss(%x: tensor<2x4xf32> {train.name = "x"}, %y: tensor<2xi32> {train.name = "x"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4x3xf32>
  %h = train.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = train.cross_entropy %h, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

//--- paramname.mlir
train.param @w : tensor<4x3xf32> init(zeros)
func.func @loss(%x: tensor<2x4xf32> {train.name = "w"}, %y: tensor<2xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4x3xf32>
  %h = train.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = train.cross_entropy %h, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// Bad precision policies: one clear line each, non-zero exit.
// RUN: not ztrain-opt %s --train-precision=param=fp8 2>&1 | FileCheck %s --check-prefix=FP8
// RUN: not ztrain-opt %s --train-precision="param=fp32 reduce=bf16" 2>&1 | FileCheck %s --check-prefix=NOLOW
// RUN: not ztrain-opt %s --ztrain-training="reduce-dtype=bf16" 2>&1 | FileCheck %s --check-prefix=NOLOW
// RUN: not ztrain-opt %s --ztrain-training="reduce-dtype=fp32" 2>&1 | FileCheck %s --check-prefix=NOLOW32
// RUN: not ztrain-compile %s --reduce-dtype=fp32 -o %t.exe 2>&1 | FileCheck %s --check-prefix=NOLOW32C
// NOLOW32C: ztrain-compile: error: --reduce-dtype=fp32: needs --precision=bf16 or fp16 (with fp32 parameters gradients are reduced in fp32)
// RUN: not ztrain-compile %s --precision=fp8 -o %t.exe 2>&1 | FileCheck %s --check-prefix=FP8C
// FP8C: ztrain-compile: for the --precision option: Cannot find option named 'fp8'!
// RUN: not ztrain-opt %s --train-precision="param=bf16 reduce=fp16" 2>&1 | FileCheck %s --check-prefix=MIX
// RUN: not ztrain-opt %s --train-precision="param=bf16 reduce=int8" 2>&1 | FileCheck %s --check-prefix=RED
// RUN: not ztrain-opt %s --train-precision=param=bf16 --train-precision=param=bf16 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not ztrain-opt %s --train-autodiff --train-precision=param=bf16 2>&1 | FileCheck %s --check-prefix=AFTER
// RUN: not ztrain-opt %s --train-precision=param=fp16 --train-precision=param=bf16 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not ztrain-opt %s --train-precision="param=bf16 hysteresis=3" 2>&1 | FileCheck %s --check-prefix=LSBF16
// RUN: not ztrain-compile %s --loss-scale-window=10 -o %t.exe 2>&1 | FileCheck %s --check-prefix=LSFP32
// RUN: not ztrain-opt %s --train-precision="param=fp16 initial-scale-power=128" 2>&1 | FileCheck %s --check-prefix=POW
// RUN: not ztrain-opt %s --train-precision="param=fp16 initial-scale-power=-1" 2>&1 | FileCheck %s --check-prefix=POWNEG
// RUN: not ztrain-opt %s --train-precision="param=fp16 min-loss-scale=0" 2>&1 | FileCheck %s --check-prefix=MIN0
// RUN: not ztrain-compile %s --precision=fp16 --initial-scale-power=4 --min-loss-scale=32 -o %t.exe 2>&1 | FileCheck %s --check-prefix=MINBIG
// RUN: not ztrain-opt %s --train-precision="param=fp16 min-loss-scale=nan" 2>&1 | FileCheck %s --check-prefix=MINNAN
// RUN: not ztrain-opt %s --train-precision="param=fp16 loss-scale-window=0" 2>&1 | FileCheck %s --check-prefix=WIN
// RUN: not ztrain-opt %s --train-precision="param=fp16 hysteresis=0" 2>&1 | FileCheck %s --check-prefix=HYST

// FP8: for the --param option: Cannot find option named 'fp8'!
// NOLOW: error: train-precision: reduce=bf16 needs 16-bit parameters (param=bf16 or fp16); with fp32 parameters gradients are reduced in fp32
// NOLOW32: error: train-precision: reduce=fp32 needs 16-bit parameters (param=bf16 or fp16); with fp32 parameters gradients are reduced in fp32
// MIX: error: train-precision: reduce=fp16 with param=bf16: gradients are reduced in the parameters' type or in fp32
// RED: for the --reduce option: Cannot find option named 'int8'!
// TWICE: error: train-precision: the module already has a precision policy
// LSBF16: error: train-precision: the loss-scale options (initial-scale-power, loss-scale-window, hysteresis, min-loss-scale) configure fp16's dynamic loss scaling; param=bf16 has no loss scaling
// LSFP32: ztrain-compile: error: --loss-scale-window configures fp16's dynamic loss scaling; --precision=fp32 has none
// POW: error: train-precision: initial-scale-power=128 is not in [0, 127] (the scale 2^power must be a finite f32)
// POWNEG: error: train-precision: initial-scale-power=-1 is not in [0, 127]
// MIN0: error: train-precision: the minimum loss scale 0 is not in (0, initial scale 65536]
// MINBIG: ztrain-compile: error: --min-loss-scale=32: expected a scale > 0 and <= the initial scale 2^initial-scale-power
// MINNAN: error: train-precision: the minimum loss scale nan is not in (0, initial scale 65536]
// WIN: error: train-precision: the loss scale window 0 is not >= 1
// HYST: error: train-precision: the loss scale hysteresis 0 is not >= 1
// AFTER: error: train-precision rewrites the forward graph: run it before train-autodiff

train.param @w : tensor<4x3xf32> init(normal, 0.2)
func.func @loss(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<4x3xf32>
  %h = train.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = train.cross_entropy %h, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

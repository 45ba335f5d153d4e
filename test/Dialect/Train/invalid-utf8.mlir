// RUN: not ztrain-opt %s 2>&1 | FileCheck %s
// A name that is not UTF-8 (the byte 0xFF) is refused by the verifier,
// naming the byte and its offset: names become JSON keys.
// CHECK: error: 'train.param' op name 'w{{.*}}' is not valid UTF-8 (byte 0xFF at offset 1; it becomes a checkpoint / data key)
train.param @"wÿ" : tensor<4xf32> init(ones)

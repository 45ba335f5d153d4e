// plan-search tries the loss in tiles (train-tile-loss) when its logits
// are 1 MiB or more: untiled, and tiles of an eighth of the f32 logits.
// Here [256, 1024] f32 logits (1 MiB) and their adjoint dominate the step:
// with room for them the untiled plan is chosen (the tiles cost a little
// more memory traffic in the cost model); at 2 MB only the tiled one fits.
// RUN: ztrain-opt %s --plan-search="memory-budget=3MB dp=1" -o /dev/null | FileCheck %s --check-prefix=ROOM
// RUN: ztrain-opt %s --plan-search="memory-budget=2MB dp=1" -o /dev/null | FileCheck %s --check-prefix=TIGHT
// RUN: ztrain-opt %s --plan-search="memory-budget=2MB dp=1 format=json" -o /dev/null | FileCheck %s --check-prefix=JSON

// ROOM: loss tile stage recompute
// ROOM-NEXT: * 0 0 none 0 no - - 2.38 {{.*}} fits
// ROOM-NEXT: 131072 0 none 0 no - - 0.54 {{.*}} fits
// ROOM: chosen: --recompute=none: predicted peak 2376724 bytes

// TIGHT: loss tile stage recompute
// TIGHT-NEXT: 0 0 none 0 no - - 2.38 {{.*}} over
// TIGHT-NEXT: * 131072 0 none 0 no - - 0.54 {{.*}} fits
// TIGHT: chosen: --recompute=none --loss-tile-bytes=131072: predicted peak 543796 bytes
// TIGHT: pipeline: {{.*}}loss-tile-bytes=131072

// JSON: "loss_tile_bytes": 0,
// JSON: "loss_tile_bytes": 131072,
train.param @w : tensor<1024x16xf32> init(normal, 0.5)
func.func @loss(%x: tensor<256x16xf32> {train.name = "x"}, %y: tensor<256xi32> {train.name = "y"}) -> tensor<f32> attributes {train.entry} {
  %w = train.param_read @w : tensor<1024x16xf32>
  %l = train.matmul %x, %w {transpose_b} : (tensor<256x16xf32>, tensor<1024x16xf32>) -> tensor<256x1024xf32>
  %loss = train.cross_entropy %l, %y : (tensor<256x1024xf32>, tensor<256xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

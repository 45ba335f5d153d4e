//===- StepBuffers.h - Buffers of a straight-line training step -*- C++ -*-===//
//
// Part of the ztrain project.
//
// Which values of a training step share a buffer, which values live in a
// parameter's persistent gradient buffer, and where each buffer is last
// used. The lowering allocates and frees by it and zero-report predicts
// memory by it, so the two cannot disagree.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_DIALECT_DIST_IR_STEPBUFFERS_H
#define ZTRAIN_DIALECT_DIST_IR_STEPBUFFERS_H

#include "mlir/IR/SymbolTable.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace ztrain::dist {

/// The bytes of the swap buffer (and of the nvme file) of train.state or
/// train.param `name`: its per-rank storage at ZeRO `stage` on `gridSize`
/// ranks, rounded up to whole 4096-byte blocks; 0 for an unknown symbol.
int64_t swapBufferBytes(mlir::SymbolTableCollection &symbols,
                        mlir::Operation *from, mlir::FlatSymbolRefAttr name,
                        int64_t stage, int64_t gridSize);

class StepBuffers {
public:
  /// Analyzes the single-block step `entry` of a plan for ZeRO `stage`.
  StepBuffers(mlir::func::FuncOp entry, int64_t stage);

  /// The value whose buffer `v` uses: itself, or what it aliases (a reshape
  /// of its operand; an all-reduce done in place; a train.matmul_acc's
  /// accumulator, updated in place).
  mlir::Value root(mlir::Value v) const {
    mlir::Value r = roots.lookup(v);
    return r ? r : v;
  }
  bool isAlias(mlir::Value v) const { return roots.count(v); }

  /// The parameter whose persistent gradient buffer holds `v`, or null.
  /// That is the gradient as the update consumes it (stage 0: before its
  /// in-place all-reduce), the padded flat gradient (stage 1) or this
  /// rank's reduced slice (stages 2-3), unless the value is also used for
  /// something else (one adjoint flowing to two parameters).
  mlir::FlatSymbolRefAttr gradientOf(mlir::Value v) const {
    return gradients.lookup(v);
  }

  unsigned position(mlir::Operation *op) const { return positions.lookup(op); }
  /// The position where the buffer of `rootValue` is allocated: its
  /// definition, or the start of the asynchronous collective that fills it
  /// (a gathered parameter, the chunk of a one-tensor reduce-scatter).
  unsigned allocPosition(mlir::Value rootValue) const;
  /// The position of the last op that uses the buffer of `rootValue`; the
  /// position of its definition when nothing uses it.
  unsigned lastUse(mlir::Value rootValue) const;

  /// Every buffer the step allocates (persistent gradient buffers, aliases
  /// and parameter reads excluded), with its lifetime [from, to] in op
  /// positions: plan-memory places these and zero-report sweeps them.
  struct Buffer {
    enum Kind {
      Activation, ///< an intermediate tensor
      Gathered,   ///< a gathered parameter: N padded shards (or its tile)
      Staging,    ///< a bucket's packed input (0) or reduce-scatter output (1)
      Swap,       ///< an nvme parameter shard's host buffer, from its
                  ///< swap-in's start to its swap-out's wait or release
                  ///< (4096-byte granules); a device backend computes on a
                  ///< device copy of it
      StateSwap,  ///< the same for an nvme optimizer state: only the host
                  ///< reads it (its update is a host step on a device
                  ///< backend)
      HostActivation, ///< an offloaded activation's host copy, from its
                      ///< dist.offload_activation_start to its reload's wait
      HostGradient ///< a spilled gradient's host copy (dist.host_gradient),
                   ///< from its dist.offload_activation_start to the update
                   ///< that reads it
    } kind;
    int64_t bytes;
    unsigned from, to;
    /// The op that defines the value (result `index`), or for staging the
    /// bucket's start op (staging buffer `index`), or for a swap buffer its
    /// dist.swap_in_start (index 0), for a host activation its
    /// dist.offload_activation_start (index 0).
    mlir::Operation *owner;
    unsigned index;
  };
  /// The buffers of the step on a grid of `gridSize` ranks, in op order.
  std::vector<Buffer> list(int64_t gridSize) const;

  /// The start op whose wait yields `v` when that start fills `v`'s buffer
  /// directly (see allocPosition), else null.
  mlir::Operation *filledByStart(mlir::Value v) const {
    return filledBy.lookup(v);
  }

private:
  llvm::DenseMap<mlir::Operation *, unsigned> positions;
  mlir::Block *body;
  llvm::DenseMap<mlir::Value, mlir::Operation *> filledBy;
  llvm::DenseMap<mlir::Value, mlir::Value> roots;
  llvm::DenseMap<mlir::Value, mlir::FlatSymbolRefAttr> gradients;
  llvm::DenseMap<mlir::Value, unsigned> lastUses;
};

} // namespace ztrain::dist

#endif // ZTRAIN_DIALECT_DIST_IR_STEPBUFFERS_H

//===- StepBuffers.cpp - Buffers of a straight-line training step ---------===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#include "ztrain/Dialect/Dist/IR/StepBuffers.h"
#include "ztrain/Dialect/Dist/IR/DistOps.h"
#include "ztrain/Dialect/Train/IR/TrainOps.h"

using namespace mlir;
using namespace ztrain;
using namespace ztrain::dist;

StepBuffers::StepBuffers(func::FuncOp entry, int64_t stage) {
  Block &body = entry.getBody().front();
  for (auto [i, op] : llvm::enumerate(body))
    positions[&op] = i;

  for (Operation &op : body) {
    if (!isa<train::SGDUpdateOp, train::AdamUpdateOp>(op))
      continue;
    Value g = op.getOperand(0); // the gradient of both update ops
    if (auto ar = g.getDefiningOp<AllReduceOp>())
      g = ar.getInput();
    else if (auto rs = g.getDefiningOp<ReduceScatterOp>(); rs && stage == 1)
      g = rs.getInput();
    if (g.hasOneUse() && !isa<BlockArgument>(g))
      gradients[g] = op.getAttrOfType<FlatSymbolRefAttr>("param");
  }

  for (Operation &op : body) {
    // A reshape aliases its operand, unless its result must land in a
    // gradient buffer (then it copies); an all-reduce whose operand has no
    // other use runs in place.
    if (auto r = dyn_cast<train::ReshapeOp>(op);
        r && !gradients.count(r.getResult()))
      roots[r.getResult()] = root(r.getInput());
    if (auto ar = dyn_cast<AllReduceOp>(op); ar && ar.getInput().hasOneUse())
      roots[ar.getResult()] = root(ar.getInput());
    for (Value operand : op.getOperands()) {
      unsigned &last = lastUses[root(operand)];
      last = std::max(last, positions[&op]);
    }
  }
}

unsigned StepBuffers::lastUse(Value rootValue) const {
  auto it = lastUses.find(rootValue);
  if (it != lastUses.end())
    return it->second;
  Operation *def = rootValue.getDefiningOp();
  return def ? positions.lookup(def) : 0;
}

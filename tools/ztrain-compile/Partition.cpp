//===- Partition.cpp - a large lowered module compiled in parts -----------===//
//
// Part of the ztrain project. See Partition.h.
//
//===----------------------------------------------------------------------===//

#include "Partition.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Threading.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace ztrain_compile {
using namespace mlir;

namespace {
constexpr unsigned kMaxParts = 16;

int64_t countOps(Operation *op) {
  int64_t n = 0;
  op->walk([&](Operation *) { ++n; });
  return n;
}

/// The symbols `op` refers to (the lowering's references: calls and
/// addresses of globals and functions).
void collectReferences(Operation *op, llvm::SetVector<StringRef> &names) {
  op->walk([&](Operation *inner) {
    if (auto call = dyn_cast<LLVM::CallOp>(inner)) {
      if (auto callee = call.getCalleeAttr())
        names.insert(callee.getValue());
    } else if (auto address = dyn_cast<LLVM::AddressOfOp>(inner)) {
      names.insert(address.getGlobalName());
    }
  });
}

bool isLocal(LLVM::Linkage linkage) {
  return linkage == LLVM::Linkage::Internal ||
         linkage == LLVM::Linkage::Private;
}
} // namespace

unsigned partitionCount(ModuleOp module, int64_t opsPerPart) {
  int64_t definitions = 0;
  for (Operation &op : *module.getBody()) {
    if (auto fn = dyn_cast<LLVM::LLVMFuncOp>(op)) {
      definitions += !fn.isExternal();
      continue;
    }
    if (!isa<LLVM::GlobalOp>(op))
      return 1;
  }
  opsPerPart = std::max<int64_t>(opsPerPart, 1);
  int64_t parts = (countOps(module) + opsPerPart - 1) / opsPerPart;
  return unsigned(
      std::clamp<int64_t>(std::min(parts, definitions), 1, kMaxParts));
}

SmallVector<OwningOpRef<ModuleOp>> splitModule(ModuleOp module,
                                               unsigned count) {
  SmallVector<OwningOpRef<ModuleOp>> parts;
  std::vector<std::pair<LLVM::LLVMFuncOp, int64_t>> definitions;
  llvm::StringMap<Operation *> symbols;
  int64_t total = 0;
  for (Operation &op : *module.getBody()) {
    if (auto fn = dyn_cast<LLVM::LLVMFuncOp>(op)) {
      symbols[fn.getName()] = fn;
      if (!fn.isExternal()) {
        definitions.emplace_back(fn, countOps(fn));
        total += definitions.back().second;
      }
    } else if (auto global = dyn_cast<LLVM::GlobalOp>(op)) {
      symbols[global.getSymName()] = global;
    }
  }
  if (count < 2 || definitions.size() < count)
    return parts;

  // Runs of definitions, in order, of about total / count ops each.
  OpBuilder builder(module.getContext());
  SmallVector<ModuleOp> modules{module};
  for (unsigned p = 1; p < count; ++p) {
    parts.push_back(ModuleOp::create(module.getLoc()));
    parts.back()->getOperation()->setAttrs(module->getAttrDictionary());
    modules.push_back(*parts.back());
  }
  int64_t done = 0;
  for (auto [fn, size] : definitions) {
    unsigned p = unsigned(std::min<int64_t>(done * count / total, count - 1));
    done += size;
    if (p != 0)
      fn->moveBefore(modules[p].getBody(), modules[p].getBody()->end());
  }

  // What each module's functions refer to and another module defines.
  auto makeVisible = [&](Operation *op) {
    if (auto fn = dyn_cast<LLVM::LLVMFuncOp>(op);
        fn && isLocal(fn.getLinkage())) {
      fn.setLinkage(LLVM::Linkage::External);
      fn.setVisibility_(LLVM::Visibility::Hidden);
    } else if (auto global = dyn_cast<LLVM::GlobalOp>(op);
               global && isLocal(global.getLinkage())) {
      global.setLinkage(LLVM::Linkage::External);
      global.setVisibility_(LLVM::Visibility::Hidden);
    }
  };
  llvm::StringSet<> copied; // constants the parts copied
  for (ModuleOp target : modules) {
    llvm::StringSet<> defined;
    for (Operation &op : *target.getBody())
      if (auto name =
              op.getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName()))
        defined.insert(name.getValue());
    llvm::SetVector<StringRef> names;
    collectReferences(target, names);
    builder.setInsertionPointToStart(target.getBody());
    for (StringRef name : names) {
      if (defined.contains(name))
        continue;
      Operation *op = symbols.lookup(name);
      if (!op)
        continue; // the verifier's to report; translation refuses it
      auto global = dyn_cast<LLVM::GlobalOp>(op);
      if (global && global.getConstant() && isLocal(global.getLinkage())) {
        builder.clone(*op); // a private copy of a constant
        copied.insert(name);
        continue;
      }
      makeVisible(op);
      if (global) {
        auto declaration = LLVM::GlobalOp::create(
            builder, global.getLoc(), global.getGlobalType(),
            global.getConstant(), LLVM::Linkage::External, name, Attribute(),
            global.getAlignment().value_or(0), global.getAddrSpace());
        declaration.setVisibility_(global.getVisibility_());
      } else {
        builder.insert(op->cloneWithoutRegions());
      }
    }
  }
  // The first module keeps the originals of the copies only where its own
  // functions use them (reroll-call-runs' tables are each used by one loop,
  // which may have moved).
  llvm::SetVector<StringRef> used;
  collectReferences(module, used);
  llvm::StringSet<> stillUsed;
  for (StringRef name : used)
    stillUsed.insert(name);
  for (Operation &op : llvm::make_early_inc_range(*module.getBody()))
    if (auto global = dyn_cast<LLVM::GlobalOp>(op);
        global && copied.contains(global.getSymName()) &&
        !stillUsed.contains(global.getSymName()))
      global.erase();
  return parts;
}

OwningOpRef<ModuleOp> splitKernels(ModuleOp module) {
  SmallVector<LLVM::LLVMFuncOp> kernels;
  for (auto fn : module.getOps<LLVM::LLVMFuncOp>())
    if (!fn.isExternal() && fn.getName().starts_with("ztrain_fused."))
      kernels.push_back(fn);
  if (kernels.empty())
    return {};
  OwningOpRef<ModuleOp> part = ModuleOp::create(module.getLoc());
  part->getOperation()->setAttrs(module->getAttrDictionary());
  OpBuilder builder(module.getContext());
  llvm::SetVector<StringRef> callees;
  for (LLVM::LLVMFuncOp fn : kernels) {
    collectReferences(fn, callees);
    fn.setLinkage(LLVM::Linkage::External);
    fn.setVisibility_(LLVM::Visibility::Hidden);
    builder.setInsertionPoint(fn);
    builder.insert(fn->cloneWithoutRegions());
    fn->moveBefore(part->getBody(), part->getBody()->end());
  }
  // What the kernels call (the C library's expf, erff): declarations.
  builder.setInsertionPointToStart(part->getBody());
  for (StringRef name : callees)
    if (auto callee = module.lookupSymbol<LLVM::LLVMFuncOp>(name))
      builder.insert(callee->cloneWithoutRegions());
  return part;
}

LogicalResult
runInParallel(unsigned count, unsigned threads,
              const std::function<LogicalResult(unsigned)> &work) {
  if (threads == 0)
    threads = llvm::hardware_concurrency().compute_thread_count();
  threads = std::max(1u, std::min(threads, count));
  std::atomic<unsigned> next{0};
  std::atomic<bool> ok{true};
  auto worker = [&] {
    for (unsigned i; (i = next++) < count;)
      if (failed(work(i)))
        ok = false;
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back(worker);
  worker();
  for (std::thread &t : pool)
    t.join();
  return success(ok.load());
}

} // namespace ztrain_compile

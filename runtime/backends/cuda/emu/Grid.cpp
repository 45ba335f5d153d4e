//===- Grid.cpp - Kernel launches: one fiber per CUDA thread
//---------------===//
//
// Part of ztrain's CUDA emulator (docs/cuda.md#the-cuda-emulator). A grid
// runs on its stream's worker thread, one block after another. A block
// runs its threads as fibers (ucontext) on that thread, each until it
// finishes or suspends at a barrier or warp intrinsic; when no fiber can
// run, the scheduler completes what can be completed: a warp intrinsic
// once every lane of its mask is there (a lane of the mask that has
// exited is a fault: undefined on a GPU), else __syncthreads once every
// thread of the block is there (one that has exited instead is a fault:
// CUDA requires a barrier's condition to be the same for the whole block).
// Nothing completable is a deadlock, reported as a fault.
//
// ZTRT_CUDAEMU_SHUFFLE=<seed> runs blocks, and the fibers between two
// barriers, in a seeded random order instead of index order: a kernel
// whose result depends on the order of its threads or blocks (a race)
// then gives different results.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/emu/Device.h"
#include "backends/cuda/emu/Emu.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <sys/mman.h>
#include <ucontext.h>
#include <vector>

// AddressSanitizer must be told about stack switches (its fake stacks and
// stack bounds), or it reports false positives; see
// sanitizer/common_interface_defs.h.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define ZTRT_ASAN_FIBERS 1
#else
#define ZTRT_ASAN_FIBERS 0
#endif

// Fiber switches. glibc's swapcontext saves and restores the signal mask
// with a system call each time, which made it most of the emulator's time;
// on x86-64 a switch saves the callee-saved registers and the floating
// point control words on the stack and swaps stack pointers instead. Other
// architectures, and AddressSanitizer builds (annotated for ucontext),
// use ucontext.
#if defined(__x86_64__) && !ZTRT_ASAN_FIBERS
#define ZTRT_FAST_FIBERS 1
extern "C" void ztrt_emu_switch(void **saveSp, void *loadSp);
asm(R"(
  .text
  .globl ztrt_emu_switch
  .type ztrt_emu_switch, @function
ztrt_emu_switch:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size ztrt_emu_switch, .-ztrt_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");
#else
#define ZTRT_FAST_FIBERS 0
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace ztrt::cudaemu {

namespace {

constexpr int kWarpSize = 32;
constexpr unsigned kMaxThreads = 1024;
// Kernels keep a few small arrays on the stack; sanitizers need more.
constexpr size_t kStackBytes = 256 * 1024;

enum class Wait { None, Block, Warp };

struct Fiber {
#if ZTRT_FAST_FIBERS
  void *sp = nullptr; // saved stack pointer while switched away
#else
  ucontext_t context;
#endif
  char *stack = nullptr;
  uint3 index;
  unsigned linear = 0;
  bool done = false;
  Wait wait = Wait::None;
  WarpOp op = WarpOp::ShuffleXor;
  unsigned mask = 0;
  int param = 0;
  uint64_t in = 0, out = 0;
  void *fakeStack = nullptr; // AddressSanitizer's, while switched away
  // Asynchronous copies (__pipeline_memcpy_async): issued, not yet
  // committed; and the committed groups, oldest first, not yet waited for.
  std::vector<AsyncCopy> openCopies;
  std::vector<std::vector<AsyncCopy>> copyGroups;
};

/// Fiber stacks, mapped once per worker thread and reused by every block
/// (pages are committed only when touched).
class Stacks {
public:
  ~Stacks() {
    if (base)
      munmap(base, kMaxThreads * kStackBytes);
  }
  char *get(unsigned i) {
    if (!base) {
      void *p = mmap(nullptr, kMaxThreads * kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        std::fprintf(stderr, "cuda emulator: cannot map fiber stacks\n");
        std::abort();
      }
      base = static_cast<char *>(p);
    }
    return base + i * kStackBytes;
  }

private:
  char *base = nullptr;
};

struct BlockRun {
  const LaunchConfig *config = nullptr;
  const std::function<void()> *body = nullptr;
  std::vector<Fiber> fibers;
  std::vector<unsigned> order;
#if ZTRT_FAST_FIBERS
  void *schedulerSp = nullptr;
#else
  ucontext_t scheduler;
#endif
  Fiber *current = nullptr;
  Stacks stacks;
  // Per warp, each lane's bytes of the last warpGather (kGatherBytes per
  // lane).
  std::vector<unsigned char> gathered;
  // The scheduler's stack, for AddressSanitizer's switch annotations.
  const void *schedulerStack = nullptr;
  size_t schedulerStackBytes = 0;
};

thread_local BlockRun *tRun = nullptr;

long long shuffleSeed() {
  static const long long seed = envInt("ZTRT_CUDAEMU_SHUFFLE", -1);
  return seed;
}

void fiberMain() {
  BlockRun &run = *tRun;
#if ZTRT_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(nullptr, &run.schedulerStack,
                                  &run.schedulerStackBytes);
#endif
  (*run.body)();
  Fiber &self = *run.current;
  bool pending = !self.openCopies.empty();
  for (const std::vector<AsyncCopy> &group : self.copyGroups)
    pending = pending || !group.empty(); // (an empty group is no copy)
  if (pending)
    fault("kernel %s: thread %u ended with asynchronous copies "
          "(__pipeline_memcpy_async) it never waited for",
          run.config->kernel, self.linear);
  self.done = true;
#if ZTRT_ASAN_FIBERS
  // This fiber's stack is done with: no fake stack to keep.
  __sanitizer_start_switch_fiber(nullptr, run.schedulerStack,
                                 run.schedulerStackBytes);
#endif
#if ZTRT_FAST_FIBERS
  ztrt_emu_switch(&run.current->sp, run.schedulerSp);
  __builtin_unreachable(); // A finished fiber is never resumed.
#endif
  // Returning resumes uc_link: the scheduler.
}

/// Makes `f` start at fiberMain on its stack when first resumed.
void prepare(BlockRun &run, Fiber &f) {
#if ZTRT_FAST_FIBERS
  // The stack as ztrt_emu_switch leaves it: control words, six registers,
  // the address it returns to (fiberMain), and a slot where fiberMain's
  // return address would be, so that fiberMain starts with the stack
  // aligned as after a call.
  auto top =
      reinterpret_cast<uintptr_t>(f.stack + kStackBytes) & ~uintptr_t(15);
  auto *slots = reinterpret_cast<uint64_t *>(top);
  slots[-1] = 0;
  slots[-2] = reinterpret_cast<uint64_t>(&fiberMain);
  for (int r = 3; r <= 8; ++r)
    slots[-r] = 0;
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  uint64_t control = mxcsr | static_cast<uint64_t>(fpucw) << 32;
  slots[-9] = control;
  f.sp = &slots[-9];
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = &run.scheduler;
  makecontext(&f.context, fiberMain, 0);
#endif
}

void resume(BlockRun &run, Fiber &f) {
  run.current = &f;
  threadIdx = f.index;
#if ZTRT_FAST_FIBERS
  ztrt_emu_switch(&run.schedulerSp, f.sp);
#else
#if ZTRT_ASAN_FIBERS
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
  swapcontext(&run.scheduler, &f.context);
#if ZTRT_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
#endif
  run.current = nullptr;
}

/// Suspends the running fiber until the scheduler resumes it.
void suspend(BlockRun &run, Fiber &f) {
#if ZTRT_FAST_FIBERS
  ztrt_emu_switch(&f.sp, run.schedulerSp);
#else
#if ZTRT_ASAN_FIBERS
  __sanitizer_start_switch_fiber(&f.fakeStack, run.schedulerStack,
                                 run.schedulerStackBytes);
#endif
  swapcontext(&f.context, &run.scheduler);
#if ZTRT_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(f.fakeStack, nullptr, nullptr);
#endif
#endif
}

/// Completes the warp intrinsics that every lane of their mask has reached.
/// False (after a fault) when one can never complete.
bool releaseWarps(BlockRun &run, bool &released) {
  const unsigned n = static_cast<unsigned>(run.fibers.size());
  for (unsigned base = 0; base < n; base += kWarpSize) {
    const unsigned lanes = std::min<unsigned>(kWarpSize, n - base);
    int first = -1;
    for (unsigned l = 0; l < lanes; ++l)
      if (run.fibers[base + l].wait == Wait::Warp) {
        first = static_cast<int>(l);
        break;
      }
    if (first < 0)
      continue;
    const Fiber &lead = run.fibers[base + first];
    bool ready = true;
    for (unsigned l = 0; l < kWarpSize; ++l) {
      if (!(lead.mask >> l & 1u))
        continue;
      if (l >= lanes || run.fibers[base + l].done) {
        fault("kernel %s: warp intrinsic in block (%u,%u,%u) with mask 0x%08x "
              "names lane %u of warp %u, which %s",
              run.config->kernel, blockIdx.x, blockIdx.y, blockIdx.z, lead.mask,
              l, base / kWarpSize,
              l >= lanes ? "does not exist" : "has exited");
        return false;
      }
      const Fiber &f = run.fibers[base + l];
      if (f.wait != Wait::Warp) {
        ready = false;
        continue;
      }
      if (f.op != lead.op || f.mask != lead.mask ||
          (f.op == WarpOp::Gather && f.param != lead.param)) {
        fault("kernel %s: lanes %u and %d of warp %u in block (%u,%u,%u) are "
              "at different warp intrinsics",
              run.config->kernel, l, first, base / kWarpSize, blockIdx.x,
              blockIdx.y, blockIdx.z);
        return false;
      }
    }
    if (!ready)
      continue;
    if (lead.op == WarpOp::Gather) {
      unsigned char *table = run.gathered.data() + base * kGatherBytes;
      for (unsigned l = 0; l < lanes; ++l) {
        Fiber &f = run.fibers[base + l];
        std::memcpy(table + l * kGatherBytes,
                    reinterpret_cast<const void *>(f.in),
                    static_cast<size_t>(f.param));
        f.out = reinterpret_cast<uint64_t>(table);
        f.wait = Wait::None;
      }
      released = true;
      continue;
    }
    uint64_t ballot = 0;
    for (unsigned l = 0; l < lanes; ++l)
      if (lead.mask >> l & 1u)
        ballot |= (run.fibers[base + l].in != 0 ? 1ull : 0ull) << l;
    for (unsigned l = 0; l < lanes; ++l) {
      if (!(lead.mask >> l & 1u))
        continue;
      Fiber &f = run.fibers[base + l];
      if (f.op == WarpOp::Ballot) {
        f.out = ballot;
      } else {
        const unsigned partner = l ^ static_cast<unsigned>(f.param);
        if (partner >= kWarpSize || !(lead.mask >> partner & 1u)) {
          fault("kernel %s: __shfl_xor_sync in block (%u,%u,%u) reads lane "
                "%u, which is not in mask 0x%08x",
                run.config->kernel, blockIdx.x, blockIdx.y, blockIdx.z, partner,
                lead.mask);
          return false;
        }
        f.out = run.fibers[base + partner].in;
      }
    }
    for (unsigned l = 0; l < lanes; ++l)
      if (lead.mask >> l & 1u)
        run.fibers[base + l].wait = Wait::None;
    released = true;
  }
  return true;
}

/// Runs one block; false after a fault.
bool runBlock(BlockRun &run, std::mt19937_64 *rng) {
  const dim3 b = run.config->block;
  const unsigned n = b.x * b.y * b.z;
  run.fibers.assign(n, Fiber());
  run.gathered.assign(static_cast<size_t>(n) * kGatherBytes, 0);
  run.order.resize(n);
  for (unsigned i = 0; i < n; ++i) {
    Fiber &f = run.fibers[i];
    f.linear = i;
    f.index = {i % b.x, i / b.x % b.y, i / (b.x * b.y)};
    f.stack = run.stacks.get(i);
    prepare(run, f);
    run.order[i] = i;
  }
  // Shuffled, each round also holds back each warp with probability 1/2:
  // warps then drift apart between barriers (as a GPU's do, one warp whole
  // phases ahead of another), so a write that needs a barrier before it
  // (one warp refilling a buffer another still reads) lands while the
  // other warp reads. Without the drift every warp runs one step per round
  // and no warp is ever more than a step ahead.
  std::vector<char> held((n + kWarpSize - 1) / kWarpSize, 0);
  for (;;) {
    bool heldBack = false;
    if (rng) {
      std::shuffle(run.order.begin(), run.order.end(), *rng);
      for (char &h : held)
        h = static_cast<char>((*rng)() & 1);
    }
    for (unsigned i : run.order) {
      Fiber &f = run.fibers[i];
      if (!f.done && f.wait == Wait::None) {
        if (held[i / kWarpSize]) {
          heldBack = true;
          continue;
        }
        resume(run, f);
      }
    }
    unsigned live = 0, atBlock = 0;
    for (const Fiber &f : run.fibers) {
      live += !f.done;
      atBlock += !f.done && f.wait == Wait::Block;
    }
    if (live == 0)
      return true;
    bool released = false;
    if (!releaseWarps(run, released))
      return false;
    if (released || heldBack) // (a held-back thread can still run)
      continue;
    if (atBlock == live) {
      if (live < n) {
        // CUDA: "__syncthreads() is allowed in conditional code but only if
        // the conditional evaluates identically across the entire thread
        // block, otherwise the code execution is likely to hang".
        fault("kernel %s: __syncthreads in block (%u,%u,%u) reached by %u "
              "threads while %u have exited (a barrier under a condition "
              "that differs within the block)",
              run.config->kernel, blockIdx.x, blockIdx.y, blockIdx.z, live,
              n - live);
        return false;
      }
      int any = 0;
      for (const Fiber &f : run.fibers)
        any |= !f.done && f.in != 0;
      for (Fiber &f : run.fibers)
        if (!f.done) {
          f.out = static_cast<uint64_t>(any);
          f.wait = Wait::None;
        }
      continue;
    }
    unsigned waiter = 0;
    for (const Fiber &f : run.fibers)
      if (!f.done && f.wait == Wait::Block) {
        waiter = f.linear;
        break;
      }
    fault("kernel %s: deadlock in block (%u,%u,%u): thread %u waits at "
          "__syncthreads while %u of the block's %u live threads wait at a "
          "warp intrinsic whose lanes never all arrive",
          run.config->kernel, blockIdx.x, blockIdx.y, blockIdx.z, waiter,
          live - atBlock, live);
    return false;
  }
}

void runGrid(const LaunchConfig &config, const std::function<void()> &body) {
  if (sticky() != cudaSuccess)
    return; // A faulted context runs nothing more, as on a GPU.
  thread_local std::unique_ptr<BlockRun> run;
  if (!run)
    run = std::make_unique<BlockRun>();
  run->config = &config;
  run->body = &body;
  BlockRun *outer = tRun;
  tRun = run.get();
  gridDim = config.grid;
  blockDim = config.block;
  const dim3 g = config.grid;
  const uint64_t blocks = uint64_t(g.x) * g.y * g.z;
  std::unique_ptr<std::mt19937_64> rng;
  if (shuffleSeed() >= 0)
    rng =
        std::make_unique<std::mt19937_64>(static_cast<uint64_t>(shuffleSeed()));
  std::vector<uint64_t> order;
  if (rng) {
    order.resize(blocks);
    for (uint64_t i = 0; i < blocks; ++i)
      order[i] = i;
    std::shuffle(order.begin(), order.end(), *rng);
  }
  for (uint64_t k = 0; k < blocks; ++k) {
    const uint64_t i = rng ? order[k] : k;
    blockIdx = {static_cast<unsigned>(i % g.x),
                static_cast<unsigned>(i / g.x % g.y),
                static_cast<unsigned>(i / (uint64_t(g.x) * g.y))};
    if (!runBlock(*run, rng.get()))
      break;
  }
  tRun = outer;
}

} // namespace

int blockBarrier(int vote) {
  BlockRun *run = tRun;
  if (!run || !run->current) {
    fault("__syncthreads called outside a kernel");
    return 0;
  }
  Fiber &f = *run->current;
  f.wait = Wait::Block;
  f.in = static_cast<uint64_t>(vote);
  suspend(*run, f);
  return static_cast<int>(f.out);
}

const unsigned char *warpGather(const void *mine, int bytes) {
  BlockRun *run = tRun;
  if (!run || !run->current) {
    fault("warp intrinsic called outside a kernel");
    return nullptr;
  }
  if (bytes < 0 || bytes > kGatherBytes) {
    fault("kernel %s: warpGather of %d bytes (at most %d)",
          run->config->kernel, bytes, kGatherBytes);
    return nullptr;
  }
  if (run->fibers.size() % kWarpSize != 0) {
    fault("kernel %s: a warp-collective matrix instruction in a block of %zu "
          "threads (not whole warps)",
          run->config->kernel, run->fibers.size());
    return nullptr;
  }
  return reinterpret_cast<const unsigned char *>(
      warpExchange(WarpOp::Gather, 0xffffffffu,
                   reinterpret_cast<uint64_t>(mine), bytes));
}

uint64_t warpExchange(WarpOp op, unsigned mask, uint64_t bits, int param) {
  BlockRun *run = tRun;
  if (!run || !run->current) {
    fault("warp intrinsic called outside a kernel");
    return 0;
  }
  Fiber &f = *run->current;
  if (!(mask >> (f.linear % kWarpSize) & 1u)) {
    fault("kernel %s: thread %u calls a warp intrinsic with mask 0x%08x, "
          "which does not name its own lane",
          run->config->kernel, f.linear, mask);
    return 0;
  }
  f.wait = Wait::Warp;
  f.op = op;
  f.mask = mask;
  f.param = param;
  f.in = bits;
  suspend(*run, f);
  return f.out;
}

bool checkArgument(const LaunchConfig &config, int index, const void *ptr) {
  if (!ptr || isDevice(ptr, 0))
    return true;
  fault("kernel %s: argument %d is %s, not device memory", config.kernel, index,
        describe(ptr).c_str());
  return false;
}

void launchGrid(const LaunchConfig &config, std::function<void()> thread) {
  if (sticky() != cudaSuccess)
    return;
  const dim3 g = config.grid, b = config.block;
  const uint64_t threads = uint64_t(b.x) * b.y * b.z;
  if (threads == 0 || threads > kMaxThreads || b.x > 1024 || b.y > 1024 ||
      b.z > 64 || g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu ||
      g.y > 65535 || g.z > 65535 || config.sharedBytes > 48 * 1024) {
    std::fprintf(stderr,
                 "cuda emulator: kernel %s: invalid launch configuration: "
                 "grid (%u,%u,%u), block (%u,%u,%u), %zu shared bytes\n",
                 config.kernel, g.x, g.y, g.z, b.x, b.y, b.z,
                 config.sharedBytes);
    fail(cudaErrorInvalidConfiguration);
    return;
  }
  if (!validStream(config.stream)) {
    fail(cudaErrorInvalidResourceHandle);
    return;
  }
  enqueue(config.stream,
          [config, thread = std::move(thread)]() { runGrid(config, thread); });
}

/// The fiber running now, or null after a fault naming `what`.
static Fiber *runningFiber(const char *what) {
  BlockRun *run = tRun;
  if (!run || !run->current) {
    fault("%s called outside a kernel", what);
    return nullptr;
  }
  return run->current;
}

void pipelineCopy(void *dst, const void *src, size_t bytes, size_t zfill) {
  Fiber *f = runningFiber("__pipeline_memcpy_async");
  if (!f)
    return;
  if ((bytes != 4 && bytes != 8 && bytes != 16) || zfill > bytes) {
    fault("__pipeline_memcpy_async: %zu bytes with %zu zero-filled (4, 8 or "
          "16 bytes, at most all of them zero-filled)",
          bytes, zfill);
    return;
  }
  if (reinterpret_cast<uintptr_t>(dst) % bytes != 0 ||
      reinterpret_cast<uintptr_t>(src) % bytes != 0) {
    fault("__pipeline_memcpy_async: %p <- %p not aligned to its %zu bytes",
          dst, src, bytes);
    return;
  }
  // Until its wait the destination holds no defined bytes: NaN in every
  // float type here (all ones), so a reader that does not wait, or another
  // warp still reading a buffer this copy overwrites (a missing barrier
  // before the copy is issued), computes with NaNs.
  std::memset(dst, 0xff, bytes);
  f->openCopies.push_back({dst, src, bytes, zfill});
}

void pipelineCommit() {
  if (Fiber *f = runningFiber("__pipeline_commit")) {
    f->copyGroups.push_back(std::move(f->openCopies));
    f->openCopies.clear();
  }
}

void pipelineWaitPrior(size_t prior) {
  Fiber *f = runningFiber("__pipeline_wait_prior");
  if (!f)
    return;
  // The copies land only now, at the wait: a reader that does not wait
  // (or a barrier that does not follow the wait) sees the all-ones bytes
  // pipelineCopy left (NaNs), as it may see garbage on a GPU.
  size_t done = 0;
  for (; f->copyGroups.size() - done > prior; ++done)
    for (const AsyncCopy &c : f->copyGroups[done]) {
      auto *dst = static_cast<unsigned char *>(c.dst);
      std::memcpy(dst, c.src, c.bytes - c.zfill);
      std::memset(dst + (c.bytes - c.zfill), 0, c.zfill);
    }
  f->copyGroups.erase(f->copyGroups.begin(),
                      f->copyGroups.begin() + static_cast<ptrdiff_t>(done));
}

} // namespace ztrt::cudaemu

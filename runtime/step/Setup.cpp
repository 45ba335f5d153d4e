//===- Setup.cpp - Before the first step: backend, memory, offload --------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "step/Setup.h"

#include "backends/cpu/CpuBackend.h"
#ifdef ZTRT_HAVE_CUDA
#include "backends/cuda/CudaBackend.h"
#endif
#include "base/Support.h"
#include "cli/Options.h"
#include "comm/Communicator.h"
#include "io/SwapIO.h"
#include "step/Context.h"
#include "step/Descriptor.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace ztrt {

namespace {

/// Refuses a plan that needs more than `budget` bytes (this rank's; -1:
/// unknown) on any rank: every rank learns every budget, and rank 0 names
/// the ranks that are short, in one line. `memory` says which memory.
void refuseShortRanks(Communicator &comm, const PlannedBytes &planned,
                      int64_t budget, const std::string &memory) {
  std::vector<int64_t> budgets(static_cast<size_t>(comm.count()));
  comm.allGather(&budget, budgets.data(), 1, sizeof(budget));
  std::string short_;
  for (int r = 0; r < comm.count(); ++r)
    if (budgets[r] >= 0 && budgets[r] < planned.total())
      short_ += format("%s%d (%s)", short_.empty() ? "" : ", ", r,
                       formatBytes(static_cast<uint64_t>(budgets[r])).c_str());
  if (short_.empty())
    return;
  refuse("the compiled plan needs %s per rank (model states %s, inputs %s, "
         "buffers %s, step arenas %s) but rank(s) %s have less %s; use more "
         "ranks, a higher ZeRO stage or a smaller batch (--skip-memory-check "
         "runs anyway)",
         formatBytes(static_cast<uint64_t>(planned.total())).c_str(),
         formatBytes(static_cast<uint64_t>(planned.modelStates)).c_str(),
         formatBytes(static_cast<uint64_t>(planned.inputs)).c_str(),
         formatBytes(static_cast<uint64_t>(planned.buffers)).c_str(),
         formatBytes(static_cast<uint64_t>(planned.arenas)).c_str(),
         short_.c_str(), memory.c_str());
}

/// The ranks of one machine whose --nvme-path is on one file system share its
/// free space, and each rank's own check (SwapSpace) sees only its share:
/// refused on every rank, before any reserves a byte, when their swap files
/// need more together than the file system has free. Ranks on other nodes
/// count apart (a shared file system across nodes is found when a
/// reservation fails, by the line that names the bytes per rank).
void checkSharedSwapSpace(Communicator &comm, const std::string &path,
                          int64_t bytes) {
  if (comm.count() < 2)
    return;
  struct Record {
    uint64_t host = 0, device = 0;
    int64_t bytes = 0, avail = -1; // -1: not known (SwapSpace says why)
  } mine;
  // The machine: its kernel's boot id, which exactly the processes that
  // share a kernel (and so its device numbers) share, containers included;
  // the host name where there is none.
  std::string machine;
  {
    std::ifstream bootId("/proc/sys/kernel/random/boot_id");
    std::getline(bootId, machine);
  }
  if (machine.empty()) {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    machine = std::string("host:") + name;
  }
  mine.host = 1469598103934665603ull; // FNV-1a
  for (char c : machine)
    mine.host = (mine.host ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  mine.bytes = bytes;
  struct stat info;
  struct statvfs fs;
  // A path that is not a writable directory is SwapSpace's to name.
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode) &&
      ::statvfs(path.c_str(), &fs) == 0 && !(fs.f_flag & ST_RDONLY)) {
    mine.device = static_cast<uint64_t>(info.st_dev);
    mine.avail = static_cast<int64_t>(
        std::min<long double>(static_cast<long double>(fs.f_bavail) *
                                  fs.f_frsize,
                              static_cast<long double>(INT64_MAX)));
  }
  static_assert(sizeof(Record) == 32, "four 8-byte fields");
  std::vector<Record> all(static_cast<size_t>(comm.count()));
  comm.allGather(&mine, all.data(), 4, 8);
  // The same verdict on every rank: the first group, in rank order, that
  // does not fit.
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].avail < 0)
      continue;
    std::vector<size_t> group;
    int64_t total = 0;
    for (size_t s = 0; s < all.size(); ++s)
      if (all[s].host == all[r].host && all[s].device == all[r].device &&
          all[s].avail >= 0) {
        group.push_back(s);
        if (__builtin_add_overflow(total, all[s].bytes, &total))
          total = INT64_MAX;
      }
    if (group.front() != r || group.size() < 2 || all[r].avail >= total)
      continue;
    std::string ranks;
    for (size_t i = 0; i < group.size(); ++i)
      ranks += (i == 0 ? "" : i + 1 == group.size() ? " and " : ", ") +
               std::to_string(group[i]);
    refuse("--nvme-path '%s': %lld bytes free on the file system that ranks "
           "%s share on one node, and their swap files need %lld bytes "
           "together (%lld bytes for rank %zu)",
           path.c_str(), static_cast<long long>(all[r].avail), ranks.c_str(),
           static_cast<long long>(total),
           static_cast<long long>(all[r].bytes), r);
  }
}

} // namespace

std::unique_ptr<Backend> createBackend(const std::string &name,
                                       const Communicator &comm) {
  if (name == "cpu")
    return createCpuBackend();
#ifdef ZTRT_HAVE_CUDA
  CudaOptions options;
  // Fatal, naming the reason, when there is no usable GPU for this rank.
  options.device = selectCudaDevice(comm.params());
  return createCudaBackend(options);
#else
  fatal("--backend cuda: this executable was built without CUDA support "
        "(the runtime was configured without the CUDA toolkit and NCCL; "
        "see docs/cuda.md)");
#endif
}

/// The kernels of --fuse=elementwise are host code compiled into the
/// executable (ztrt_fused), and a device backend's buffers are device
/// memory: the run stops here, before the backend starts, rather than at
/// the first fused call (Backend::runFused's fatal error).
void checkBackendRunsModel(const Descriptor &desc, const Options &opts) {
  if (desc.fusedKernels > 0 && opts.backend != "cpu")
    refuse("--backend %s: this executable was compiled with "
           "--fuse=elementwise, whose generated kernels run on the cpu "
           "backend only; recompile with --fuse=none",
           opts.backend.c_str());
}

/// Rank 0, with a mesh: one line when the job's nodes are not the
/// compiled ranks_per_node K (rank r on node r / K), on which zero-report
/// priced the intra- and inter-node bytes.
void noteMeshLayout(const Communicator &world, const Descriptor &desc) {
  const int64_t k = desc.meshRanksPerNode;
  bool differs = false;
  for (int r = 0; r < world.count(); ++r)
    differs |= k <= 0 || world.nodeOf(r) != r / k;
  if (!differs)
    return;
  std::vector<int> sizes(static_cast<size_t>(world.nodeCount()), 0);
  for (int r = 0; r < world.count(); ++r)
    ++sizes[static_cast<size_t>(world.nodeOf(r))];
  std::string layout;
  for (size_t n = 0; n < sizes.size() && n < 8; ++n)
    layout += (n ? ", " : "") + std::to_string(sizes[n]);
  if (sizes.size() > 8)
    layout += ", ...";
  warning("mesh %lld x %lld: zero-report's per-link prediction (intra- and "
          "inter-node bytes) assumed %lld ranks per node; this job has %d "
          "node(s) of %s rank(s) (--ranks-per-node sets the layout), so the "
          "measured split differs",
          static_cast<long long>(desc.meshShard),
          static_cast<long long>(desc.meshReplicate), static_cast<long long>(k),
          world.nodeCount(), layout.c_str());
}

/// Refuses, before anything is allocated, a plan that needs more host
/// memory per rank than this node has for each of its ranks (MemAvailable
/// or the cgroup's limit, shared by the node's ranks).
void checkMemory(Communicator &comm, const Descriptor &desc,
                 const Options &opts) {
  if (opts.skipMemoryCheck || opts.backend != "cpu")
    return;
  uint64_t available = 0;
  std::string source;
  int64_t budget = -1; // unknown
  if (hostMemoryAvailable(available, source))
    budget = static_cast<int64_t>(available /
                                  static_cast<uint64_t>(comm.localCount()));
  refuseShortRanks(comm, plannedBytes(desc), budget,
                   format("available (%s, shared by the node's %d rank(s))",
                          source.c_str(), comm.localCount()));
}

/// The same check against each rank's GPU before the model is allocated
/// there: the plan's bytes all live in device memory on the cuda backend.
void checkDeviceMemory(Backend &backend, Communicator &comm,
                       const Descriptor &desc, const Options &opts) {
  uint64_t free = 0, total = 0;
  if (opts.skipMemoryCheck || !backend.deviceMemory(free, total))
    return;
  refuseShortRanks(comm, plannedBytes(desc, /*deviceOnly=*/true),
                   static_cast<int64_t>(free),
                   "free device memory (cudaMemGetInfo on the rank's GPU)");
}

/// zero-offload's placements: the swap directory and one file per
/// nvme-resident state (space reserved now, so a full disk is found before
/// the first step), and the one-time note that host placement changes
/// nothing on the cpu backend. Every rank refuses the same way.
void setUpOffload(ztrt_ctx &ctx, const Descriptor &desc, const Options &opts,
                  int rank) {
  int64_t nvmeBytes = 0, files = 0; // one file per nvme tensor
  bool host = false;
  for (const StateSpec &spec : desc.states) {
    if (spec.space == MemorySpace::Nvme) {
      nvmeBytes += SwapSpace::roundUp(spec.storeBytes);
      ++files;
    }
    host |= spec.space == MemorySpace::Host;
  }
  bool hostParams = false;
  for (const ParamSpec &spec : desc.params) {
    hostParams |= spec.space == MemorySpace::Host;
    if (spec.space == MemorySpace::Nvme) {
      nvmeBytes += SwapSpace::roundUp(spec.storeBytes);
      ++files;
    }
  }
  if (host && rank == 0 && opts.backend == "cpu")
    warning("--offload-optimizer=cpu: on the cpu backend host memory is the "
            "device's, so the optimizer states stay where they are (their "
            "bytes are reported as host_optimizer_states) and the updates "
            "run where they always do; only each gradient is copied once "
            "into host_gradients, where its update reads it");
  if (hostParams && rank == 0 && opts.backend == "cpu")
    warning("--offload-param=cpu: on the cpu backend host memory is the "
            "device's, so the parameters stay where they are and nothing "
            "moves (their bytes are reported as host_parameters)");
  ctx.stateFiles.assign(desc.states.size(), -1);
  ctx.stateFileBytes.assign(desc.states.size(), 0);
  ctx.paramFiles.assign(desc.params.size(), -1);
  ctx.paramFileBytes.assign(desc.params.size(), 0);
  if (!nvmeBytes) {
    if (!opts.nvmePath.empty() && rank == 0)
      warning("--nvme-path: this model keeps nothing on nvme (compiled "
              "without --offload-optimizer=nvme or --offload-param=nvme); "
              "ignored");
    return;
  }
  if (opts.nvmePath.empty())
    refuse("this model keeps its %s on nvme (--offload-%s=nvme, %s per "
           "rank): give --nvme-path DIR, a directory on a fast local disk",
           host ? "optimizer states" : "model states",
           host ? "optimizer" : "optimizer/param",
           formatBytes(static_cast<uint64_t>(nvmeBytes)).c_str());
  SwapSpace::reserveFiles(files, opts.nvmePath);
  // The leftovers of runs that ended without removing theirs first, by
  // whichever rank takes each one's lock, and every rank's done before any
  // counts the free space (the allGather below is after the barrier too).
  for (const SwapSpace::Stale &stale : SwapSpace::reclaimStale(opts.nvmePath))
    warning("--nvme-path: removed '%s' (%s), the swap directory of a run "
            "that ended without removing it",
            stale.dir.c_str(),
            formatBytes(static_cast<uint64_t>(stale.bytes)).c_str());
  ctx.comm().barrier();
  checkSharedSwapSpace(ctx.comm(), opts.nvmePath, nvmeBytes);
  ctx.swap = std::make_unique<SwapSpace>(opts.nvmePath, rank, nvmeBytes);
  for (size_t i = 0; i < desc.params.size(); ++i) {
    const ParamSpec &spec = desc.params[i];
    if (spec.space != MemorySpace::Nvme)
      continue;
    ctx.paramFileBytes[i] = SwapSpace::roundUp(spec.storeBytes);
    ctx.paramFiles[i] = ctx.swap->createFile(spec.name, spec.storeBytes);
  }
  for (size_t i = 0; i < desc.states.size(); ++i) {
    const StateSpec &spec = desc.states[i];
    if (spec.space != MemorySpace::Nvme)
      continue;
    ctx.stateFileBytes[i] = SwapSpace::roundUp(spec.storeBytes);
    ctx.stateFiles[i] = ctx.swap->createFile(spec.name, spec.storeBytes);
  }
}

} // namespace ztrt

//===- Setup.h - Before the first step --------------------------*- C++ -*-===//
//
// Part of ztrain's runtime (private: not installed).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_STEP_SETUP_H
#define ZTRT_STEP_SETUP_H

#include <memory>
#include <string>

struct ztrt_ctx;

namespace ztrt {

class Backend;
class Communicator;
struct Descriptor;
struct Options;

/// The backend named by --backend ("cpu" or "cuda") for this rank of
/// `comm`: for cuda, the GPU of its local rank. Fatal, naming the reason,
/// when the runtime was built without CUDA or no GPU is usable.
std::unique_ptr<Backend> createBackend(const std::string &name,
                                       const Communicator &comm);
/// Refuses a model that the backend of --backend cannot run: one compiled
/// with fused elementwise kernels (host code) on any backend but cpu.
void checkBackendRunsModel(const Descriptor &desc, const Options &opts);
/// Rank 0, with a mesh: one line when the job's nodes are not the compiled
/// ranks_per_node K (rank r on node r / K), on which zero-report priced the
/// intra- and inter-node bytes. Not an error.
void noteMeshLayout(const Communicator &world, const Descriptor &desc);
/// Refuses a plan that needs more host memory per rank than the node has.
void checkMemory(Communicator &comm, const Descriptor &desc,
                 const Options &opts);
/// The same against each rank's free device memory.
void checkDeviceMemory(Backend &backend, Communicator &comm,
                       const Descriptor &desc, const Options &opts);
/// zero-offload's placements: swap directory and files, one-time notes.
void setUpOffload(ztrt_ctx &ctx, const Descriptor &desc, const Options &opts,
                  int rank);

} // namespace ztrt

#endif // ZTRT_STEP_SETUP_H

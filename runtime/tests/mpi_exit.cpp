//===- mpi_exit.cpp - exit() with a live communication thread -------------===//
//
// Run under the MPI launcher (CTest: ztrt_mpi_exit_np2). Every rank starts
// an all_reduce, never waits for it, and calls exit(0) with its context
// still alive. The runtime's atexit handler must let the communication
// thread finish the queued collective, join it, and only then call
// MPI_Finalize; the job then ends with status 0. Before the handler's
// registry of threads outlived the static destructors this crashed in
// exit().
//
// A second atexit handler, registered after MPI's (so it runs before it),
// checks that the collective has not been lost: it waits for the thread
// to stop exactly as the runtime's handler will, and then the result must
// be complete and exact.
//
//===----------------------------------------------------------------------===//

#include "backends/cpu/CpuBackend.h"
#include "comm/CommQueue.h"
#include "comm/Communicator.h"
#include "step/Context.h"

#include "ztrt.h"

#include <cstdio>
#include <cstdlib>

using namespace ztrt;

namespace {

constexpr int kElems = 100000;
float in[kElems], out[kElems];
int ranks = 0;

void checkResult() {
  stopCommQueues();
  // Every rank contributes rank + 1: the sum is N (N + 1) / 2, exact.
  const float expected = static_cast<float>(ranks * (ranks + 1) / 2);
  for (int i = 0; i < kElems; ++i) {
    if (out[i] != expected) {
      std::fprintf(stderr, "element %d is %g, expected %g\n", i, out[i],
                   expected);
      std::_Exit(3);
    }
  }
}

} // namespace

int main(int argc, char **argv) {
  std::unique_ptr<Communicator> world = Communicator::initWorld(&argc, &argv);
  const int rank = world->rank();
  ranks = world->count();
  // Deliberately leaked: alive when exit() runs the handlers.
  auto *ctx = new ztrt_ctx(createCpuBackend(), std::move(world));
  if (!ctx->commThreaded()) {
    std::fprintf(stderr, "expected a communication thread (run under "
                         "mpiexec with more than one rank)\n");
    return 2;
  }
  for (int i = 0; i < kElems; ++i)
    in[i] = static_cast<float>(rank + 1);
  std::atexit(checkResult);
  ztrt_all_reduce_start(ctx, ZTRT_F32, in, out, kElems, 0, 0);
  std::exit(0);
}

//===- mpi_watchdog.cpp - the collective watchdog names who is missing ----===//
//
// Run under the launcher with 3 ranks by test/e2e/test_hangs.py. Every rank
// meets in a barrier (collective #1), starts the watchdog with a 1 s
// timeout and then enters a second barrier, except rank 1, which "computes"
// (sleeps) instead. The waiting ranks' watchdogs must ask rank 1's, which
// is alive and answers, and end the job naming rank 1 as computing after
// collective #1 in step 3.
//
//===----------------------------------------------------------------------===//

#include "comm/Communicator.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

using namespace ztrt;

int main(int argc, char **argv) {
  std::unique_ptr<Communicator> world = Communicator::initWorld(&argc, &argv);
  if (world->count() != 3) {
    std::fprintf(stderr, "run with 3 ranks\n");
    return 2;
  }
  static std::atomic<int64_t> step{3};
  world->barrier();
  startCollectiveWatchdog(1.0, &step);
  if (world->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  world->barrier();
  std::fprintf(stderr, "the barrier returned without rank 1\n");
  return 3;
}

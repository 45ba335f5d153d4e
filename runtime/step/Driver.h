//===- Driver.h - What a compiled model's main() does -----------*- C++ -*-===//
//
// The step loop (runMain): options (cli/), descriptor, setup, the steps,
// eval, checkpoints, the report and sampling. main() (Main.cpp, in
// libztrt_main) only forwards to runMain(), so everything here is testable
// without a compiled model.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_STEP_DRIVER_H
#define ZTRT_STEP_DRIVER_H

#include "ztrt.h"


namespace ztrt {

using StepFn = void (*)(ztrt_ctx *);

/// Runs the whole training as one rank of the MPI job that launched this
/// process (or as a world of one); returns the process exit status. `eval`
/// is the model's forward-only evaluation (ztrain_eval), or null.
int runMain(int argc, char **argv, const char *descriptor, StepFn step,
            StepFn eval = nullptr, StepFn logits = nullptr);

} // namespace ztrt

#endif // ZTRT_STEP_DRIVER_H

//===- DistToRuntime.h - dist ops to runtime calls ---------------*- C++ -*-===//
//
// Part of the ztrain project.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_CONVERSION_DISTTORUNTIME_DISTTORUNTIME_H
#define ZTRAIN_CONVERSION_DISTTORUNTIME_DISTTORUNTIME_H

#include "ztrain/Conversion/TrainToRuntime/StepLowering.h"

namespace ztrain {

/// The dist ops of a partitioned step: collectives (synchronous and
/// started / waited), gradient buckets (packed at the start, unpacked at
/// the wait), parameter gathers and their tiles, padding, releases.
void populateDistToRuntimePatterns(RuntimePatternList &patterns);

} // namespace ztrain

#endif // ZTRAIN_CONVERSION_DISTTORUNTIME_DISTTORUNTIME_H

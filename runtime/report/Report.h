//===- Report.h - The JSON report -------------------------------*- C++ -*-===//
//
// Part of ztrain's runtime (private: not installed).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_REPORT_REPORT_H
#define ZTRT_REPORT_REPORT_H

#include "backends/Backend.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

struct ztrt_ctx;

namespace ztrt {

struct Descriptor;

struct StepRecord {
  int64_t step;
  /// This rank's loss, and the mean over ranks (what is printed).
  float loss, meanLoss;
  double timeMs;
  /// Dynamic loss scaling: the scale the step used, and whether it
  /// overflowed (its updates were skipped). Scale 0: no loss scaling.
  double lossScale = 0.0;
  bool skipped = false;
  /// Gradient clipping: the step's global gradient norm (unscaled).
  double gradNorm = 0.0;
  /// The learning rate the step's updates used (NaN: the model asked none).
  double lr = 0.0;
};

/// This rank's entry of the report's "ranks" list.
std::string rankJson(const ztrt_ctx &ctx, const Descriptor &desc, int rank,
                     const std::vector<StepRecord> &records);
/// Written by rank 0: the top-level numbers are rank 0's (the step losses
/// are the means over ranks), `ranks` has every rank's own.
void writeReport(const std::string &path, const ztrt_ctx &ctx,
                 const Descriptor &desc, const std::vector<StepRecord> &records,
                 const std::vector<std::pair<int64_t, float>> &evals,
                 int threads, int worldSize,
                 const std::vector<std::string> &ranks,
                 const Backend::PeakRate &peak);

} // namespace ztrt

#endif // ZTRT_REPORT_REPORT_H

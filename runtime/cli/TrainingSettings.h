//===- TrainingSettings.h - Run-time hyper-parameters -----------*- C++ -*-===//
//
// Part of ztrain's runtime (private: not installed).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_CLI_TRAININGSETTINGS_H
#define ZTRT_CLI_TRAININGSETTINGS_H

#include "ztrt.h"

#include "step/LrSchedule.h"

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ztrt {

struct Descriptor;
struct Options;

/// The ztrt_hyper_id of a hyper-parameter flag, or -1.
int hyperId(const std::string &flag);
/// What is wrong with a schedule whose decay ends before its warmup, or "".
std::string scheduleProblem(const LrSchedule &lr);
/// The run's schedule and hyper-parameter overrides as a checkpoint records
/// them: flag, value (doubles exactly, in their shortest text).
std::vector<std::pair<std::string, std::string>>
trainingSettings(const LrSchedule &lr,
                 const std::array<std::optional<double>, ZTRT_HYPER_COUNT>
                     &hypers);
/// Takes a checkpoint's recorded settings for every flag this run did not
/// set; returns the restored ones as "--flag value" text.
std::string continueTrainingSettings(
    const std::vector<std::pair<std::string, std::string>> &recorded,
    Options &opts, const std::string &checkpoint);
/// Refuses overrides the compiled optimizer cannot take.
void checkHyperOverrides(const Descriptor &desc, const Options &opts);

} // namespace ztrt

#endif // ZTRT_CLI_TRAININGSETTINGS_H

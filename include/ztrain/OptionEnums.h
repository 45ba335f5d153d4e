//===- OptionEnums.h - Closed-choice options as enums -----------*- C++ -*-===//
//
// Part of the ztrain project.
//
// The options whose value is one of a few words (a precision, a recompute
// policy, an optimizer, a placement, an output format) are enums, each with
// one table of spellings. The table is the options' cl::values (EnumValues),
// so llvm::cl refuses a bad value and --help lists the choices, in the pass
// options (Passes.td), the pipeline options (PipelineOptions.def) and
// ztrain-compile's flags alike; stringify / symbolize read the same table
// where a choice is printed or comes back from the plan search.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRAIN_OPTIONENUMS_H
#define ZTRAIN_OPTIONENUMS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/ErrorHandling.h"

#include <optional>
#include <type_traits>

namespace ztrain {

/// Parameter and compute precision (train-precision, ztrain-training).
/// `automatic` ("auto") is the plan search's alone: it chooses fp32 or bf16.
enum class Precision { fp32, bf16, fp16, automatic };
/// The type gradients are reduced in with 16-bit parameters: the
/// parameters' own (spelled as nothing: `reduce-dtype=`) or a named one.
enum class ReduceDtype { param, fp32, bf16, fp16 };
/// train-recompute's policy.
enum class RecomputePolicy { none, full, selective };
/// train-optimizer's kind.
enum class OptimizerKind { sgd, adam, adamw };
/// The parameters weight decay skips: those of rank < 2, or none.
enum class NoDecay { oneD, none };
/// Where zero-offload places optimizer states or parameters.
enum class OffloadPlacement { none, cpu, nvme };
/// Where zero-offload places the checkpointed activations.
enum class ActivationPlacement { none, cpu };
/// What zero-report and plan-search print.
enum class OutputFormat { text, json };
/// Which ops train-fuse-elementwise groups into generated kernels.
enum class FuseMode { none, elementwise };

/// One spelling of an enum value; `searchOnly` ones are accepted only where
/// the plan search runs (EnumValues{/*search=*/true}).
template <typename E> struct EnumSpelling {
  E value;
  llvm::StringLiteral name;
  const char *help;
  bool searchOnly = false;
};

/// Each enum's table of spellings.
template <typename E> llvm::ArrayRef<EnumSpelling<E>> spellings();

template <> inline llvm::ArrayRef<EnumSpelling<Precision>> spellings() {
  static const EnumSpelling<Precision> table[] = {
      {Precision::fp32, "fp32", "32-bit floats"},
      {Precision::bf16, "bf16", "bfloat16 (f32 master weights and states)"},
      {Precision::fp16, "fp16",
       "float16 (f32 master weights and states, dynamic loss scaling)"},
      {Precision::automatic, "auto", "chosen by the plan search: fp32 or bf16",
       /*searchOnly=*/true}};
  return table;
}
template <> inline llvm::ArrayRef<EnumSpelling<ReduceDtype>> spellings() {
  static const EnumSpelling<ReduceDtype> table[] = {
      {ReduceDtype::param, "", "the parameters' type"},
      {ReduceDtype::fp32, "fp32", "f32"},
      {ReduceDtype::bf16, "bf16", "bfloat16 (bf16 parameters)"},
      {ReduceDtype::fp16, "fp16", "float16 (fp16 parameters)"}};
  return table;
}
template <> inline llvm::ArrayRef<EnumSpelling<RecomputePolicy>> spellings() {
  static const EnumSpelling<RecomputePolicy> table[] = {
      {RecomputePolicy::none, "none", "keep every activation"},
      {RecomputePolicy::full, "full",
       "keep each segment's boundary, recompute the rest"},
      {RecomputePolicy::selective, "selective",
       "also keep the linear layers' products"}};
  return table;
}
template <> inline llvm::ArrayRef<EnumSpelling<OptimizerKind>> spellings() {
  static const EnumSpelling<OptimizerKind> table[] = {
      {OptimizerKind::sgd, "sgd", "SGD (momentum, dampening, Nesterov)"},
      {OptimizerKind::adam, "adam", "Adam (L2 weight decay)"},
      {OptimizerKind::adamw, "adamw", "AdamW (decoupled weight decay)"}};
  return table;
}
template <> inline llvm::ArrayRef<EnumSpelling<NoDecay>> spellings() {
  static const EnumSpelling<NoDecay> table[] = {
      {NoDecay::oneD, "1d", "biases, norms: every parameter of rank < 2"},
      {NoDecay::none, "none", "every parameter decays"}};
  return table;
}
template <> inline llvm::ArrayRef<EnumSpelling<OffloadPlacement>> spellings() {
  static const EnumSpelling<OffloadPlacement> table[] = {
      {OffloadPlacement::none, "none", "the device"},
      {OffloadPlacement::cpu, "cpu", "host memory"},
      {OffloadPlacement::nvme, "nvme", "files under the swap directory"}};
  return table;
}
template <>
inline llvm::ArrayRef<EnumSpelling<ActivationPlacement>> spellings() {
  static const EnumSpelling<ActivationPlacement> table[] = {
      {ActivationPlacement::none, "none", "the device"},
      {ActivationPlacement::cpu, "cpu", "host memory"}};
  return table;
}
template <> inline llvm::ArrayRef<EnumSpelling<OutputFormat>> spellings() {
  static const EnumSpelling<OutputFormat> table[] = {
      {OutputFormat::text, "text", "a table"},
      {OutputFormat::json, "json", "JSON"}};
  return table;
}

template <> inline llvm::ArrayRef<EnumSpelling<FuseMode>> spellings() {
  static const EnumSpelling<FuseMode> table[] = {
      {FuseMode::none, "none", "one runtime kernel per op"},
      {FuseMode::elementwise, "elementwise",
       "chains of elementwise ops as generated kernels (cpu backend)"}};
  return table;
}

/// The spelling of `value`.
template <typename E> llvm::StringRef stringify(E value) {
  for (const EnumSpelling<E> &s : spellings<E>())
    if (s.value == value)
      return s.name;
  llvm_unreachable("an enum value without a spelling");
}

/// The value spelled `name`, if one is.
template <typename E> std::optional<E> symbolize(llvm::StringRef name) {
  for (const EnumSpelling<E> &s : spellings<E>())
    if (s.name == name)
      return s.value;
  return std::nullopt;
}

/// An llvm::cl modifier, cl::values from the table: the option accepts
/// these spellings only (the plan search's too with `search`).
template <typename E> struct EnumValues {
  bool search = false;
  template <typename Opt> void apply(Opt &option) const {
    for (const EnumSpelling<E> &s : spellings<E>())
      if (search || !s.searchOnly)
        option.getParser().addLiteralOption(s.name, s.value, s.help);
  }
};

/// A modifier that does nothing, for the options that are not enums.
struct NoValues {
  template <typename Opt> void apply(Opt &) const {}
};

/// The values modifier of an option of type T (PipelineOptions.def rows).
template <typename T> auto optionValues(bool search = false) {
  if constexpr (std::is_enum_v<T>)
    return EnumValues<T>{search};
  else
    return NoValues{};
}

} // namespace ztrain

#endif // ZTRAIN_OPTIONENUMS_H

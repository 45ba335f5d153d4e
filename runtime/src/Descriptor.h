//===- Descriptor.h - The model descriptor the compiler embeds --*- C++ -*-===//
//
// Parses the `ztrain_descriptor` text (format in ztrt.h) into the lists of
// parameters, optimizer states and step inputs that main() allocates and
// binds, in the index order of ztrt_param / ztrt_state / ztrt_input.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_SRC_DESCRIPTOR_H
#define ZTRT_SRC_DESCRIPTOR_H

#include <cstdint>
#include <string>
#include <vector>

namespace ztrt {

enum class ElemType { F32, I32 };

/// "f32" / "i32", as in the descriptor.
const char *elemTypeName(ElemType type);
/// "F32" / "I32", as in safetensors headers.
const char *elemTypeSafetensorsName(ElemType type);

struct TensorSpec {
  std::string name;
  ElemType type = ElemType::F32;
  std::vector<int64_t> shape;
  int64_t numel = 1;
  int64_t bytes = 4;
};

enum class InitKind { Zeros, Ones, Normal, Uniform };

struct ParamSpec : TensorSpec {
  InitKind init = InitKind::Zeros;
  double scale = 0.0;
};

struct StateSpec : TensorSpec {
  std::string of;
  int64_t paramIndex = -1;
};

struct InputSpec : TensorSpec {
  /// Every value of an i32 input must lie in [0, bound); 0 = unknown.
  int64_t bound = 0;
};

struct Descriptor {
  /// The number of ranks the step was compiled for (`grid N`), which
  /// main() insists on; 0 when the record is absent (hand-written models),
  /// which runs on any number of ranks.
  int64_t gridSize = 0;
  std::vector<ParamSpec> params;
  std::vector<StateSpec> states;
  std::vector<InputSpec> inputs;
  std::string optimizer;
};

/// Parses and validates a descriptor; fatal with the line number on any
/// malformed record.
Descriptor parseDescriptor(const char *text);

} // namespace ztrt

#endif // ZTRT_SRC_DESCRIPTOR_H

//===- Init.h - Counter-based deterministic random numbers ------*- C++ -*-===//
//
// Every random value the runtime produces (parameter init, synthetic inputs,
// token-window offsets) is a pure function of (seed, a tag naming what it is
// for, an element counter). No generator state is carried from one value to
// the next, so any rank can produce exactly its own shard of a tensor and get
// the bits a single process would. The algorithm is specified in
// docs/runtime.md; changing it changes every initial weight.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_STEP_INIT_H
#define ZTRT_STEP_INIT_H

#include "step/Descriptor.h"
#include "base/Rng.h" // mix64, draw, bits24

#include <cstdint>
#include <string>
#include <string_view>

namespace ztrt {

struct SafetensorsTensor;

namespace rng {

/// 64-bit FNV-1a of `bytes`.
uint64_t fnv1a64(std::string_view bytes);
/// The stream key of `tag` under `seed`.
uint64_t streamKey(uint64_t seed, std::string_view tag);
/// U[0, 1) with 24 random bits (exactly representable as float).
double uniform24(uint64_t key, uint64_t counter);
/// N(0, 1) by Box–Muller (cosine branch) from draws 2*index and 2*index+1.
double normal(uint64_t key, uint64_t index);
/// Uniform integer in [0, bound) by multiply-high; bound > 0.
uint64_t below(uint64_t key, uint64_t counter, uint64_t bound);

} // namespace rng

/// Writes elements [begin, end) of parameter `spec`, initialised from
/// `seed`, into host memory `dst` (which holds end - begin elements). A
/// bf16 / f16 parameter gets the f32 parameter's values rounded to nearest
/// even (the same stream, so its master can hold the unrounded ones).
void initParameter(const ParamSpec &spec, uint64_t seed, int64_t begin,
                   int64_t end, void *dst);

/// Writes rank `rank`'s storage of parameter `spec` (spec.storeElems
/// elements, see StoredTensorSpec::slice) into host memory `dst`: the init
/// values of the global elements it holds, zeros in its padding.
void initParameterStorage(const ParamSpec &spec, uint64_t seed, int64_t rank,
                          void *dst);

/// Writes rank `rank`'s storage of `master` (f32, master->storeElems
/// elements), the master state of 16-bit parameter `param`: the f32 values
/// initParameter gives an f32 parameter of param's name and shape (of which
/// `param`'s own values are the rounding), zeros in its padding.
void initMasterStorage(const StateSpec &master, const ParamSpec &param,
                       uint64_t seed, int64_t rank, void *dst);

/// --init: fills rank `rank`'s storage of `param` (param.storeBytes at
/// `paramDst`) and, when `master` is non-null, of its master state
/// (master->storeBytes at `masterDst`) from the full tensor `tensor`.
/// Accepted dtypes: any float dtype (F32, BF16, F16) for a float parameter.
/// The parameter gets the values converted to its type (widening to f32 is
/// exact: a bf16 Hugging Face checkpoint starts an f32 model from its very
/// values), its master the values widened to f32. A conversion that changes
/// a value needs a master (else refused), and a finite value past f16's
/// range into an f16 parameter is refused. Returns "" or the problem, naming
/// the tensor; writes nothing meaningful then.
std::string loadInitTensor(const ParamSpec &param, const StateSpec *master,
                           const SafetensorsTensor &tensor, int64_t rank,
                           void *paramDst, void *masterDst);

/// Writes buffer `spec` (all spec.numel elements, f32 or i32) by its rule
/// into host memory `dst`: normal / uniform from key(seed, "buffer/" +
/// name) as parameters do; causal 1 where column > row in the last two dims.
void initBuffer(const BufferSpec &spec, uint64_t seed, void *dst);

} // namespace ztrt

#endif // ZTRT_STEP_INIT_H

//===- NearestName.h - "did you mean" ---------------------------*- C++ -*-===//
//
// Part of ztrain's runtime; standard library only (ztrain-compile links it
// with the DeepSpeed config reader).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BASE_NEARESTNAME_H
#define ZTRT_BASE_NEARESTNAME_H

#include <string>
#include <vector>

namespace ztrt {

/// The name in `names` nearest to `word` by edit distance (insertions,
/// deletions, substitutions and adjacent swaps), when it is close enough to
/// be the word meant (at most a third of the word's length, and at least
/// one edit allowed up to 2); else "". For "did you mean" in messages.
std::string nearestName(const std::string &word,
                        const std::vector<std::string> &names);

} // namespace ztrt

#endif // ZTRT_BASE_NEARESTNAME_H

//===- NearestName.cpp - "did you mean" ----------------------------------===//
//
// Part of ztrain's runtime; also linked into ztrain-compile (with
// cli/DeepSpeedConfig.cpp and base/Json.cpp).
//
//===----------------------------------------------------------------------===//

#include "base/NearestName.h"

#include <algorithm>

namespace ztrt {

std::string nearestName(const std::string &word,
                        const std::vector<std::string> &names) {
  // Optimal string alignment distance: a swap of two adjacent letters
  // ("--stpes") is one edit, as a typist makes it.
  auto distance = [](const std::string &a, const std::string &b) {
    const size_t n = a.size(), m = b.size();
    std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
    for (size_t i = 0; i <= n; ++i)
      d[i][0] = i;
    for (size_t j = 0; j <= m; ++j)
      d[0][j] = j;
    for (size_t i = 1; i <= n; ++i)
      for (size_t j = 1; j <= m; ++j) {
        size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min(
            {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    return d[n][m];
  };
  std::string best;
  size_t bestDistance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string &name : names) {
    size_t dist = distance(word, name);
    if (dist < bestDistance) {
      bestDistance = dist;
      best = name;
    }
  }
  return best;
}

} // namespace ztrt

#include <algorithm>

#include "runtime/spec/draft_proposer.h"

namespace kinfer {

DraftProposal NgramProposer::Propose(const DraftRequest& request) {
  DraftProposal out;
  const std::span<const int32_t> h = request.history;
  const int len = static_cast<int>(h.size());
  if (request.max_tokens <= 0) return out;
  const int max_n = std::min(options_.max_n, len - 1);
  for (int n = max_n; n >= std::max(1, options_.min_n); --n) {
    const std::span<const int32_t> suffix = h.subspan(len - n);
    // Latest earlier occurrence h[i, i + n) == suffix with i + n < len (something follows it).
    for (int i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), h.begin() + i)) continue;
      const int from = i + n;
      const int k = std::min(request.max_tokens, len - from);
      out.tokens.assign(h.begin() + from, h.begin() + from + k);
      return out;
    }
  }
  return out;
}

}  // namespace kinfer

#include "runtime/sample/penalties.h"

#include <algorithm>
#include <vector>

namespace kinfer {

void ApplyPenalties(const SamplingParams& params, std::span<const int32_t> history,
                    std::span<float> logits) {
  const bool repeat = params.repetition_penalty != 1.0f;
  const bool freq = params.frequency_penalty != 0.0f;
  const bool presence = params.presence_penalty != 0.0f;
  if (!repeat && !freq && !presence) return;
  if (params.penalty_last_n == 0 || history.empty()) return;

  size_t n = history.size();
  if (params.penalty_last_n > 0) n = std::min(n, static_cast<size_t>(params.penalty_last_n));
  // The window is small (64 by default): sorting a copy is cheaper than a hash map.
  std::vector<int32_t> window(history.end() - static_cast<std::ptrdiff_t>(n), history.end());
  std::sort(window.begin(), window.end());

  const auto vocab = static_cast<int64_t>(logits.size());
  for (size_t i = 0; i < window.size();) {
    const int32_t tok = window[i];
    size_t j = i;
    while (j < window.size() && window[j] == tok) ++j;
    const auto count = static_cast<float>(j - i);
    i = j;
    if (tok < 0 || tok >= vocab) continue;
    float& l = logits[static_cast<size_t>(tok)];
    if (repeat) l = l > 0.0f ? l / params.repetition_penalty : l * params.repetition_penalty;
    l -= count * params.frequency_penalty + params.presence_penalty;
  }
}

void ApplyLogitBias(const SamplingParams& params, std::span<float> logits) {
  const auto vocab = static_cast<int64_t>(logits.size());
  for (const auto& [id, bias] : params.logit_bias) {
    if (id >= 0 && id < vocab) logits[static_cast<size_t>(id)] += bias;
  }
}

}  // namespace kinfer
